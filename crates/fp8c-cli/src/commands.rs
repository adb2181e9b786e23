//! The subcommands: argument structs and what each one does.

use anyhow::{Context, Result, bail};
use clap::{Args, ValueEnum};
use fp8c_ir::Graph;
use fp8c_passes::{PassCx, PassManager, PassOptions};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

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
    #[arg(long, value_name = "FORMAT", num_args = 0..=1, default_missing_value = "text")]
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

/// The sidecar file holding parameter data next to an IR text file.
pub fn weights_path(ir: &Path) -> PathBuf {
    let mut s = ir.as_os_str().to_owned();
    s.push(".weights");
    PathBuf::from(s)
}

fn is_ir_text(path: &Path) -> Result<bool> {
    if path.extension().is_some_and(|e| e == "fp8ir") {
        return Ok(true);
    }
    if path.extension().is_some_and(|e| e == "onnx") {
        return Ok(false);
    }
    // Unknown extension: sniff the first bytes.
    let head = std::fs::read(path).with_context(|| format!("{}: cannot read", path.display()))?;
    Ok(head.trim_ascii_start().starts_with(b"graph @"))
}

/// Loads a model (ONNX or IR text), keeping only `outputs` if any are given.
pub fn load_graph(path: &Path, outputs: &[String]) -> Result<Graph> {
    if !path.exists() {
        bail!("{}: no such file", path.display());
    }
    if is_ir_text(path)? {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("{}: cannot read as UTF-8 text", path.display()))?;
        let mut g = fp8c_ir::text::parse(&text).with_context(|| format!("{}", path.display()))?;
        // Hand-written IR may declare types that contradict inference: check before any pass
        // re-infers them.
        fp8c_ir::verify(&g).with_context(|| format!("{}", path.display()))?;
        let wp = weights_path(path);
        if wp.exists() {
            let f = std::fs::File::open(&wp)
                .with_context(|| format!("{}: cannot open", wp.display()))?;
            fp8c_ir::text::read_weights(&mut g, &mut std::io::BufReader::new(f))
                .with_context(|| format!("{}", wp.display()))?;
        }
        if !outputs.is_empty() {
            g.select_outputs(outputs)
                .with_context(|| format!("{}", path.display()))?;
            g.dce();
        }
        Ok(g)
    } else {
        let opts = fp8c_onnx::ImportOptions {
            outputs: (!outputs.is_empty()).then(|| outputs.to_vec()),
            ..Default::default()
        };
        let imported = fp8c_onnx::load_model(path, &opts)?;
        Ok(imported.graph)
    }
}

/// `fp8c inspect`.
pub fn inspect(a: InspectArgs) -> Result<()> {
    let info = fp8c_onnx::inspect(&a.model)?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&info)?);
    } else {
        print!("{info}");
    }
    Ok(())
}

/// Parses the repeated `--input-shape` flags.
pub fn parse_shapes(specs: &[String]) -> Result<BTreeMap<String, Vec<u64>>> {
    let mut shapes = BTreeMap::new();
    for s in specs {
        let (name, dims) = fp8c_passes::shapes::parse_input_shape(s).map_err(anyhow::Error::msg)?;
        if shapes.insert(name.clone(), dims).is_some() {
            bail!("--input-shape {name} is given twice");
        }
    }
    Ok(shapes)
}

/// `fp8c compile`.
pub fn compile(a: CompileArgs) -> Result<()> {
    let shapes = parse_shapes(&a.input_shape)?;
    let pm = PassManager::default();
    let options = PassOptions {
        skip_verify: a.no_verify,
        print_after: a.print_after.clone(),
        stop_after: a.stop_after.clone(),
        policy: a.fp8.policy()?,
        recipe: a.fp8.recipe()?,
        no_fuse: a.fp8.no_fuse,
        train: None,
    };
    pm.check_options(&options)?;
    let mut g = load_graph(&a.model, &a.output)?;
    fp8c_passes::shapes::bind_input_shapes(&mut g, &shapes)
        .with_context(|| format!("{}", a.model.display()))?;
    let mut cx = PassCx::new(options);
    let run = pm.run(&mut g, &mut cx);
    for (pass, text) in &cx.dumps {
        eprintln!("// ----- IR after {pass} -----\n{text}");
    }
    for n in &cx.notes {
        tracing::info!("{n}");
    }
    if let Err(e) = run {
        if let fp8c_passes::PassError::Failed { last_good, .. } = &e {
            let dump = std::env::temp_dir().join("fp8c-last-good.fp8ir");
            if std::fs::write(&dump, fp8c_ir::text::print(last_good)).is_ok() {
                eprintln!("note: the last IR that verified is in {}", dump.display());
            }
        }
        return Err(anyhow::Error::new(e).context(format!("{}", a.model.display())));
    }
    if let Some(fmt) = a.report {
        let report = fp8c_passes::report::build(&g, &cx, a.report_all);
        match fmt {
            ReportFormat::Text => print!("{}", report.to_table()),
            ReportFormat::Json => println!("{}", serde_json::to_string_pretty(&report)?),
        }
        if a.out.is_none() {
            return Ok(());
        }
    }
    let text = match a.emit {
        Emit::Ir => fp8c_ir::text::print(&g),
        Emit::Json => fp8c_ir::text::to_json(&g),
    };
    match &a.out {
        None => {
            let mut out = std::io::stdout().lock();
            out.write_all(text.as_bytes())?;
            out.flush()?;
        }
        Some(path) => {
            std::fs::write(path, &text)
                .with_context(|| format!("{}: cannot write", path.display()))?;
            if a.emit == Emit::Ir && !g.weights().is_empty() {
                let wp = weights_path(path);
                let f = std::fs::File::create(&wp)
                    .with_context(|| format!("{}: cannot write", wp.display()))?;
                let mut w = std::io::BufWriter::new(f);
                fp8c_ir::text::write_weights(&g, &mut w)
                    .with_context(|| format!("{}", wp.display()))?;
                w.flush()?;
            }
        }
    }
    Ok(())
}
