//! `fp8c inspect` and `fp8c compile`: their arguments, and what they print.

use anyhow::Result;
use clap::{Args, ValueEnum};
use fp8c_session::{LoadOptions, Model, Purpose};
use std::path::PathBuf;

/// `fp8c inspect`.
#[derive(Args, Debug)]
pub struct InspectArgs {
    /// The ONNX model.
    pub model: PathBuf,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// What `compile` writes.
#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
pub enum Emit {
    /// The IR text form (parses back with `fp8c compile FILE.fp8ir`).
    Ir,
    /// The IR as JSON (fp8c_ir::GraphDef).
    Json,
}

/// `fp8c compile`.
#[derive(Args, Debug)]
pub struct CompileArgs {
    /// The model: an ONNX file, or IR text (`.fp8ir`, e.g. printed by `--emit ir`).
    pub model: PathBuf,
    /// Concrete shape of an input, e.g. `input_ids=2x64` (repeatable). Symbols it binds
    /// (`batch`, `sequence`) are applied to the other inputs too.
    #[arg(long = "input-shape", value_name = "NAME=DIMS")]
    pub input_shape: Vec<String>,
    /// Keep only this graph output (repeatable); nodes feeding no kept output are pruned
    /// before anything else.
    #[arg(long = "output", value_name = "NAME")]
    pub output: Vec<String>,
    /// What to write.
    #[arg(long, value_enum, default_value = "ir")]
    pub emit: Emit,
    /// Output file (default: stdout). With `--emit ir`, parameter data goes to FILE.weights.
    #[arg(short = 'o', long = "out", value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Print the IR to stderr after this pass (repeatable).
    #[arg(long = "print-after", value_name = "PASS")]
    pub print_after: Vec<String>,
    /// Stop after this pass and emit the IR as it is then.
    #[arg(long = "stop-after", value_name = "PASS")]
    pub stop_after: Option<String>,
    /// Do not run the IR verifier after each pass.
    #[arg(long)]
    pub no_verify: bool,
    /// Print the explain report (one row per GEMM, then totals) to stdout instead of the IR
    /// (the IR is still written with -o). `--report=json` for JSON.
    #[arg(
        long,
        value_name = "FORMAT",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "text"
    )]
    pub report: Option<ReportFormat>,
    /// With --report: list every node, not only GEMMs.
    #[arg(long = "report-all")]
    pub report_all: bool,
    #[command(flatten)]
    pub fp8: crate::fp8args::Fp8Args,
}

/// Format of `--report`.
#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
pub enum ReportFormat {
    /// A table.
    Text,
    /// JSON with keys `nodes` and `totals`.
    Json,
}

/// `fp8c inspect`.
pub fn inspect(a: InspectArgs) -> Result<()> {
    let info = fp8c_onnx::inspect(&a.model).map_err(fp8c_session::Error::from)?;
    if a.json {
        crate::out::println(&serde_json::to_string_pretty(&info)?)?;
    } else {
        let mut text = info.to_string();
        if !text.ends_with('\n') {
            text.push('\n');
        }
        crate::out::print(&text)?;
    }
    Ok(())
}

/// Prints the IR dumps of `--print-after` to stderr and logs the passes' notes (`-v`).
fn show_records(dumps: &[(String, String)], notes: &[String]) {
    for (pass, text) in dumps {
        eprintln!("// ----- IR after {pass} -----\n{text}");
    }
    for n in notes {
        tracing::info!("{n}");
    }
}

/// `fp8c compile`.
pub fn compile(a: CompileArgs) -> Result<()> {
    let shapes = fp8c_session::parse_input_shapes(&a.input_shape)?;
    let mut opts = a
        .fp8
        .compile_options(|r| r.recipe_for(Purpose::Inference { calibrated: false }))?;
    opts.input_shapes = shapes;
    opts.verify = !a.no_verify;
    opts.print_after = a.print_after.clone();
    opts.stop_after = a.stop_after.clone();
    opts.validate()?;
    if let Some(path) = &a.out {
        // Refuse a bad target (a link, a device, the model itself) before any work.
        fp8c_session::files::Output::check("-o", path, &[&a.model])?;
    }
    let model = Model::load_with(
        &a.model,
        &LoadOptions {
            outputs: a.output.clone(),
        },
    )?;
    warn_all(model.warnings());
    let compiled = match model.compile(&opts) {
        Ok(c) => c,
        Err(e) => {
            if let Some(f) = e.pass_failure() {
                show_records(&f.dumps, &f.notes);
                if let fp8c_passes::PassError::Failed { last_good, .. } = &f.error {
                    let text = fp8c_ir::text::print(last_good);
                    if let Ok(dump) =
                        fp8c_session::files::private_dump("last-good", ".fp8ir", &text)
                    {
                        eprintln!("note: the last IR that verified is in {}", dump.display());
                    }
                }
            }
            return Err(e.into());
        }
    };
    show_records(compiled.dumps(), compiled.notes());
    if let Some(fmt) = a.report {
        let report = compiled.report(a.report_all);
        match fmt {
            ReportFormat::Text => crate::out::print(&report.to_table())?,
            ReportFormat::Json => crate::out::println(&serde_json::to_string_pretty(&report)?)?,
        }
        if a.out.is_none() {
            return Ok(());
        }
    }
    match (&a.out, a.emit) {
        (Some(path), Emit::Ir) => compiled.write_ir(path)?,
        (Some(path), Emit::Json) => compiled.write_text(path, &compiled.json())?,
        (None, emit) => {
            let text = match emit {
                Emit::Ir => compiled.ir_text(),
                Emit::Json => compiled.json(),
            };
            crate::out::print(&text)?;
        }
    }
    Ok(())
}

/// Prints the warnings a model load left, one line each.
pub fn warn_all(warnings: &[String]) {
    for w in warnings {
        eprintln!("warning: {w}");
    }
}
