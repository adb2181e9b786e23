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
    /// Standard ONNX with FP8 QuantizeLinear/DequantizeLinear (weights stored in FP8, frozen
    /// activation scales from --calibrate), for onnxruntime and TensorRT. onnxruntime (1.31)
    /// loads it only with graph optimizations at BASIC or below (its EXTENDED fusions refuse
    /// FP8 inputs): in Python, `so = onnxruntime.SessionOptions();
    /// so.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_BASIC`,
    /// then `onnxruntime.InferenceSession(path, so)`.
    Onnx,
    /// An MLIR module (linalg / arith / math on tensors, FP8 types built in), verified by MLIR;
    /// needs a build with `--features mlir` and static shapes (--input-shape).
    Mlir,
}

/// `fp8c compile`.
#[derive(Args, Debug)]
pub struct CompileArgs {
    /// The model: an ONNX file, or IR text (`.fp8ir`, e.g. printed by `--emit ir`).
    pub model: PathBuf,
    /// Keep only this graph output (repeatable); nodes feeding no kept output are pruned
    /// before anything else.
    #[arg(long = "output", value_name = "NAME")]
    pub output: Vec<String>,
    /// What to write.
    #[arg(long, value_enum, default_value = "ir")]
    pub emit: Emit,
    /// Output file (default: stdout). With `--emit ir`, parameter data goes to FILE.safetensors.
    #[arg(short = 'o', long = "out", value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Calibration inputs (.npz, keys = input names, as `fp8c run --inputs` takes them): the
    /// amax of every GEMM operand on the f32 path fixes its scale (TransformerEngine's
    /// fp8_calibration). Needed by `--emit onnx`, whose activation scales are frozen.
    #[arg(long, value_name = "FILE.npz")]
    pub calibrate: Option<PathBuf>,
    #[command(flatten)]
    pub report: ReportArgs,
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

/// `--report[=json]` and `--report-all`, the same on compile, run and train.
#[derive(Args, Debug, Clone)]
pub struct ReportArgs {
    /// Print the explain report (one row per GEMM with its precision decision and reason,
    /// FLOP share, kernels, bytes; then totals) to stdout. `--report=json` for JSON. With
    /// compile it replaces the IR on stdout (the IR is still written with -o); with train it
    /// describes the training graph.
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
}

impl ReportArgs {
    /// Prints `report` (built with `all` = `--report-all`) when `--report` was given; true
    /// if it was.
    pub fn print(&self, report: impl FnOnce(bool) -> fp8c_session::Report) -> Result<bool> {
        let Some(fmt) = self.report else {
            return Ok(false);
        };
        let report = report(self.report_all);
        match fmt {
            ReportFormat::Text => crate::out::print(&report.to_table())?,
            ReportFormat::Json => crate::out::println(&serde_json::to_string_pretty(&report)?)?,
        }
        Ok(true)
    }
}

/// Flags of `compile` that another subcommand takes only to say why they do not apply there
/// (hidden from its help; `fp8c compile --help` lists them).
#[derive(Args, Debug, Clone)]
pub struct NotHere {
    /// Not for this subcommand (see `fp8c compile --emit`).
    #[arg(long, hide = true, value_name = "WHAT")]
    pub emit: Option<String>,
}

impl NotHere {
    /// Refuses what was given, with the reason; `cmd` is the subcommand.
    pub fn check(&self, cmd: &str) -> Result<()> {
        if let Some(e) = &self.emit {
            let writes = match cmd {
                "run" => "the model's outputs (-o FILE.npz, --out-dir DIR)",
                _ => "the trained model (-o FILE.onnx) and checkpoints",
            };
            anyhow::bail!(
                "--emit {e}: fp8c {cmd} writes {writes}; to write the compiled IR, JSON, ONNX or MLIR use fp8c compile --emit {e}"
            );
        }
        Ok(())
    }
}

/// `fp8c inspect`.
pub fn inspect(a: InspectArgs) -> Result<()> {
    let info = fp8c_session::inspect(&a.model)?;
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
pub fn show_records(dumps: &[(String, String)], notes: &[String]) {
    for (pass, text) in dumps {
        eprintln!("// ----- IR after {pass} -----\n{text}");
    }
    for n in notes {
        tracing::info!("{n}");
    }
}

/// `fp8c compile`.
pub fn compile(a: CompileArgs) -> Result<()> {
    let settings = a.fp8.settings();
    let opts = settings.options(Purpose::Inference { calibrated: false })?;
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
    if a.emit == Emit::Onnx {
        let Some(out) = &a.out else {
            anyhow::bail!("--emit onnx writes a file: give -o FILE.onnx");
        };
        let e = fp8c_session::emit_fp8_onnx(
            &model,
            &a.model,
            &settings,
            opts,
            a.calibrate.as_deref(),
            out,
        )?;
        print_export(&a, out, &e);
        return Ok(());
    }
    let compiled = match model.into_compiled(&opts) {
        Ok(c) => c,
        Err(e) => {
            if let Some(f) = e.pass_failure() {
                show_records(&f.dumps, &f.notes);
                if let Some(dump) = f.dump_last_good() {
                    eprintln!("note: the last IR that verified is in {}", dump.display());
                }
            }
            return Err(e.into());
        }
    };
    show_records(compiled.dumps(), compiled.notes());
    if a.report.print(|all| compiled.report(all))? && a.out.is_none() {
        return Ok(());
    }
    match (&a.out, a.emit) {
        (Some(path), Emit::Mlir) => compiled.write_text(path, &compiled.mlir_text()?)?,
        (None, Emit::Mlir) => crate::out::print(&compiled.mlir_text()?)?,
        (Some(path), Emit::Ir) => compiled.write_ir(path)?,
        (Some(path), Emit::Json) => compiled.write_text(path, &compiled.json())?,
        (None, Emit::Ir) => crate::out::print(&compiled.ir_text())?,
        (None, Emit::Json) => crate::out::print(&compiled.json())?,
        (_, Emit::Onnx) => unreachable!("--emit onnx returns before compiling"),
    }
    Ok(())
}

/// What `--emit onnx` wrote (and its external data file, if any), how its scales were chosen,
/// why GEMMs stayed high, and which FP8 GEMMs the file keeps high.
fn print_export(a: &CompileArgs, out: &std::path::Path, e: &fp8c_session::EmittedOnnx) {
    let r = &e.export;
    eprintln!(
        "fp8c compile: {} -> {} (FP8 Q/DQ ONNX: {} weights in FP8, {} activations quantized; {})",
        a.model.display(),
        out.display(),
        r.weights,
        r.activations,
        e.how
    );
    if let Some(data) = &e.data_file {
        eprintln!(
            "  weights in {} (the model is over protobuf's 2 GiB; keep the two files together)",
            data.display()
        );
    }
    for line in r.high_precision.iter().chain(&r.kept_high) {
        eprintln!("  {line}");
    }
    if r.weights + r.activations == 0 {
        if r.kept_high.is_empty() {
            eprintln!(
                "warning: no GEMM went to FP8, so nothing was quantized (the reasons are above)"
            );
        } else {
            eprintln!(
                "warning: the file quantizes nothing: its FP8 GEMMs are kept in high precision (the reasons are above)"
            );
        }
    }
}

/// Prints the warnings a model load left, one line each.
pub fn warn_all(warnings: &[String]) {
    for w in warnings {
        eprintln!("warning: {w}");
    }
}
