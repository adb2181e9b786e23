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
    /// Output file (default: stdout). With `--emit ir`, parameter data goes to FILE.safetensors.
    #[arg(short = 'o', long = "out", value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Calibration inputs (.npz, keys = input names, as `fp8c run --inputs` takes them): the
    /// amax of every GEMM operand on the f32 path fixes its scale (TransformerEngine's
    /// fp8_calibration). Needed by `--emit onnx`, whose activation scales are frozen.
    #[arg(long, value_name = "FILE.npz")]
    pub calibrate: Option<PathBuf>,
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
    if a.emit == Emit::Onnx {
        return emit_onnx(&a, &model, opts);
    }
    let compiled = match model.into_compiled(&opts) {
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
    if a.emit == Emit::Mlir {
        // MLIR's engines run on hosts: fast accumulation as --hopper-accum says.
        let graph = compiled.graph_for(fp8c_session::Device::Mlir);
        let text = fp8c_mlir::emit(&graph)
            .map_err(|e| anyhow::anyhow!("{}: --emit mlir: {e}", a.model.display()))?;
        match &a.out {
            Some(path) => compiled.write_text(path, &text)?,
            None => crate::out::print(&text)?,
        }
        return Ok(());
    }
    match (&a.out, a.emit) {
        (Some(path), Emit::Ir) => compiled.write_ir(path)?,
        (Some(path), Emit::Json) => compiled.write_text(path, &compiled.json())?,
        (None, Emit::Ir) => crate::out::print(&compiled.ir_text())?,
        (None, Emit::Json) => crate::out::print(&compiled.json())?,
        // Handled before compiling (emit_onnx).
        (_, Emit::Onnx | Emit::Mlir) => unreachable!("--emit onnx and mlir return before"),
    }
    Ok(())
}

/// `fp8c compile --emit onnx`: calibrate, then write the FP8 Q/DQ ONNX model.
fn emit_onnx(a: &CompileArgs, model: &Model, mut opts: fp8c_session::CompileOptions) -> Result<()> {
    use anyhow::{Context, bail};
    let Some(out) = &a.out else {
        bail!("--emit onnx writes a file: give -o FILE.onnx");
    };
    if opts.policy.mode != fp8c_session::PrecisionMode::Fp8 {
        bail!("--emit onnx writes FP8 Q/DQ: use --precision fp8 (the default)");
    }
    // A current-scaling recipe named by the user: the exported graph computes its scales.
    let named = a.fp8.recipe.is_some() || a.fp8.config.is_some();
    if named
        && matches!(
            a.fp8
                .recipe_options()
                .recipe_for(Purpose::Inference { calibrated: false })?,
            fp8c_session::Recipe::Current(_)
        )
    {
        if a.calibrate.is_some() {
            bail!(
                "--calibrate freezes delayed scaling's scales, but the recipe is current scaling, whose scales the exported graph computes: drop --calibrate, or use --recipe delayed"
            );
        }
        let target = fp8c_session::files::Output::check("-o", out, &[&a.model])?;
        let mut recipe_opts = a.fp8.recipe_options();
        // Q/DQ MatMuls accumulate in f32 in ONNX's semantics.
        recipe_opts
            .fast_accum
            .get_or_insert_with(|| "none".to_string());
        opts.recipe = recipe_opts.recipe_for(Purpose::Inference { calibrated: false })?;
        let r = fp8c_session::export::fp8_onnx(model, &opts, &Default::default())?;
        let data = r.save(&target)?;
        let how = "current scaling computed in the graph".to_string();
        print_export(a, out, data.as_deref(), &r, &how);
        return Ok(());
    }
    // Without a GEMM in FP8 there are no scales to freeze (a small classifier whose GEMMs stay
    // high): export without calibration data.
    if a.calibrate.is_none() && !fp8c_session::export::has_fp8_gemm(&model.compile(&opts)?) {
        let target = fp8c_session::files::Output::check("-o", out, &[&a.model])?;
        let r = fp8c_session::export::fp8_onnx(model, &opts, &Default::default())?;
        let data = r.save(&target)?;
        print_export(
            a,
            out,
            data.as_deref(),
            &r,
            "no FP8 GEMM, nothing to calibrate",
        );
        return Ok(());
    }
    let Some(cal) = &a.calibrate else {
        bail!(
            "--emit onnx freezes the activation scales: give --calibrate FILE.npz (inputs, as fp8c run --inputs takes them), or name a current-scaling recipe (--recipe current, rowwise, block or mxfp8) whose scales the exported graph computes"
        );
    };
    let target = fp8c_session::files::Output::check("-o", out, &[&a.model, cal])?;
    let mut data = std::collections::BTreeMap::new();
    for (name, t) in fp8c_session::npy::read_npz(cal)? {
        let t = model
            .conform_input(&name, t)
            .with_context(|| format!("--calibrate {}", cal.display()))?;
        data.insert(name, t);
    }
    for (name, t) in &data {
        opts.input_shapes
            .entry(name.clone())
            .or_insert_with(|| t.shape().to_vec());
    }
    let mut recipe = a.fp8.recipe_options();
    // A Q/DQ MatMul accumulates in f32 in ONNX's semantics: calibrate as the exported graph
    // computes, unless --fast-accum says otherwise.
    recipe.fast_accum.get_or_insert_with(|| "none".to_string());
    opts.recipe = recipe.recipe_for(Purpose::Inference { calibrated: true })?;
    let r = fp8c_session::export::fp8_onnx(model, &opts, &data)?;
    let data_file = r.save(&target)?;
    let how = format!(
        "{} of {} FP8 tensors calibrated from {}",
        r.calibrated.0,
        r.calibrated.1,
        cal.display()
    );
    print_export(a, out, data_file.as_deref(), &r, &how);
    Ok(())
}

/// What `--emit onnx` wrote (and its external data file, if any), how its scales were chosen,
/// why GEMMs stayed high, and which FP8 GEMMs the file keeps high.
fn print_export(
    a: &CompileArgs,
    out: &std::path::Path,
    data: Option<&std::path::Path>,
    r: &fp8c_session::export::Fp8Onnx,
    how: &str,
) {
    eprintln!(
        "fp8c compile: {} -> {} (FP8 Q/DQ ONNX: {} weights in FP8, {} activations quantized; {how})",
        a.model.display(),
        out.display(),
        r.weights,
        r.activations,
    );
    if let Some(data) = data {
        eprintln!(
            "  weights in {} (the model is over protobuf's 2 GiB; keep the two files together)",
            data.display()
        );
    }
    for line in &r.high_precision {
        eprintln!("  {line}");
    }
    for line in &r.kept_high {
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
