//! `fp8c run`: compile a model for the shapes of the given inputs, execute it on a backend,
//! write the outputs; optionally compare with the f32 path (`--compare`) and report what every
//! FP8 quantization did (`--stats`).
//!
//! Order of work (each step a call into `fp8c_session`): load the model → read the inputs and
//! check them against the model's declared interface (every error names the file and the
//! input) → bind their shapes → compile → prepare on the device → calibrate (delayed scaling:
//! run the `--calibrate` inputs first, filling the amax histories) → run → write.

use crate::fp8args::Fp8Args;
use anyhow::{Context, Result, anyhow, bail};
use clap::{Args, ValueEnum};
use fp8c_ir::Tensor;
use fp8c_runtime::{Fp8TensorStats, Program, Step};
use fp8c_session::{Compiled, Model, PrecisionMode, Purpose, Recipe, npy, precision_name};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Where to run.
#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
pub enum DeviceArg {
    /// The CPU reference backend (bit-exact FP8 emulation, f32 accumulation).
    Cpu,
    /// An NVIDIA GPU.
    Cuda,
    /// The CUDA backend on the emulated device (kernels compiled for the host; no GPU needed;
    /// for checking, not speed).
    CudaEmulated,
    /// MLIR's JIT (a build with `--features mlir`; static shapes): an independent execution.
    Mlir,
}

/// `fp8c run`.
#[derive(Args, Debug)]
pub struct RunArgs {
    /// The model: an ONNX file, or IR text (`.fp8ir`).
    pub model: PathBuf,
    /// Inputs from a NumPy .npz archive (keys = graph input names).
    #[arg(long, value_name = "FILE.npz")]
    pub inputs: Option<PathBuf>,
    /// One input from a NumPy .npy file (repeatable).
    #[arg(long = "input", value_name = "NAME=FILE.npy")]
    pub input: Vec<String>,
    /// Inputs from an ONNX backend-test directory: input_0.pb, input_1.pb, ... in the order
    /// of the graph's inputs.
    #[arg(long, value_name = "DIR")]
    pub data: Option<PathBuf>,
    /// Keep only this output (repeatable): a graph output or any intermediate value, by its
    /// ONNX name. Nodes feeding no kept output are pruned before import, so unsupported ops on
    /// unused branches do not matter.
    #[arg(long = "output", value_name = "NAME")]
    pub output: Vec<String>,
    /// Write the outputs to a NumPy .npz archive (keys = output names).
    #[arg(short = 'o', long = "out", alias = "outputs", value_name = "FILE.npz")]
    pub outputs: Option<PathBuf>,
    /// Write the outputs as output_0.pb, output_1.pb, ... (ONNX TensorProto, the layout of
    /// --data) into DIR.
    #[arg(long = "out-dir", alias = "output-dir", value_name = "DIR")]
    pub output_dir: Option<PathBuf>,
    /// Fill the delayed-scaling amax histories and scales from these inputs (.npz) first, run
    /// through the f32 path as TransformerEngine's fp8_calibration does; implies --recipe
    /// delayed unless a recipe is given.
    #[arg(long, value_name = "FILE.npz")]
    pub calibrate: Option<PathBuf>,
    /// Also run the f32 path and print, per output, relative L2 error, max abs error and
    /// cosine similarity of this run against it.
    #[arg(long)]
    pub compare: bool,
    /// Write, for every FP8 tensor, amax, scale, scale_inv, underflow and overflow fractions
    /// and SQNR to a JSON file.
    #[arg(long, value_name = "FILE.json")]
    pub stats: Option<PathBuf>,
    /// Run the model N times on the same inputs (a benchmark: the summary gives the fastest
    /// and the median run; outputs and --stats come from the first; --profile covers every run).
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub repeat: u32,
    /// Print where the run's time went: time and share per op kind and for the slowest
    /// nodes (the program's steps after fusion; on CUDA an eager run that copies every
    /// step's outputs back).
    #[arg(long)]
    pub profile: bool,
    /// How many of the slowest nodes `--profile` lists (0: the op kinds only).
    #[arg(long, value_name = "N", default_value_t = 15, requires = "profile")]
    pub profile_nodes: usize,
    /// The backend to run on.
    #[arg(long, value_enum, default_value = "cpu")]
    pub device: DeviceArg,
    /// Print the lowered program (steps, buffers, memory plan) to stderr.
    #[arg(long = "print-program")]
    pub print_program: bool,
    #[command(flatten)]
    pub fp8: Fp8Args,
}

impl From<DeviceArg> for fp8c_session::Device {
    fn from(d: DeviceArg) -> Self {
        match d {
            DeviceArg::Cpu => fp8c_session::Device::Cpu,
            DeviceArg::Cuda => fp8c_session::Device::Cuda,
            DeviceArg::CudaEmulated => fp8c_session::Device::CudaEmulated,
            DeviceArg::Mlir => fp8c_session::Device::Mlir,
        }
    }
}

/// Reads every input source, checking names and types against the model.
fn read_inputs(a: &RunArgs, model: &Model) -> Result<BTreeMap<String, Tensor>> {
    let mut given: BTreeMap<String, (Tensor, String)> = BTreeMap::new();
    let mut add = |name: String, t: Tensor, from: String| -> Result<()> {
        let t = model.conform_input(&name, t).context(from.clone())?;
        if let Some((_, prev)) = given.get(&name) {
            bail!("input \"{name}\" is given twice: in {prev} and in {from}");
        }
        given.insert(name, (t, from));
        Ok(())
    };
    if let Some(path) = &a.inputs {
        for (k, t) in npy::read_npz_with(path, model.string_inputs())? {
            add(k, t, path.display().to_string())?;
        }
    }
    for spec in &a.input {
        let (name, file) = spec
            .split_once('=')
            .ok_or_else(|| anyhow!("--input `{spec}`: expected NAME=FILE.npy"))?;
        let path = Path::new(file);
        let t = match model.string_inputs().get(name) {
            Some(vocab) => std::fs::read(path)
                .map_err(|e| anyhow!("{}: cannot read: {e}", path.display()))
                .and_then(|b| Ok(npy::indices_from_npy(&b, vocab)?))
                .with_context(|| format!("input \"{name}\": {}", path.display()))?,
            None => npy::read_npy(path).with_context(|| format!("input \"{name}\""))?,
        };
        add(name.to_string(), t, path.display().to_string())?;
    }
    let declared = model.inputs();
    if let Some(dir) = &a.data {
        if !dir.is_dir() {
            bail!("--data {}: not a directory", dir.display());
        }
        for (k, input) in declared.iter().enumerate() {
            let path = dir.join(format!("input_{k}.pb"));
            if !path.is_file() {
                bail!(
                    "--data {}: input_{k}.pb (for input \"{}\") is missing",
                    dir.display(),
                    input.name
                );
            }
            let t = fp8c_onnx::load_tensor_pb(&path)
                .map_err(fp8c_session::Error::from)
                .with_context(|| format!("input \"{}\"", input.name))?;
            add(input.name.clone(), t, path.display().to_string())?;
        }
    }
    for input in &declared {
        if !given.contains_key(&input.name) {
            bail!(
                "input \"{name}\" ({}) is missing: give it with --inputs FILE.npz, --input {name}=FILE.npy or --data DIR",
                input.ty,
                name = input.name
            );
        }
    }
    Ok(given.into_iter().map(|(k, (t, _))| (k, t)).collect())
}

/// Writes the outputs to `--outputs` (.npz) and `--output-dir` (.pb files), in program order.
fn write_outputs(
    a: &RunArgs,
    program: &Program,
    outs: &BTreeMap<String, Tensor>,
    labels: &BTreeMap<String, Vec<String>>,
) -> Result<()> {
    let ordered: Vec<(&str, &Tensor)> = program
        .outputs()
        .iter()
        .filter_map(|(n, _)| outs.get(n).map(|t| (n.as_str(), t)))
        .collect();
    if let Some(path) = &a.outputs {
        for (key, note) in npy::write_npz_labelled(path, &ordered, labels)? {
            eprintln!("note: output \"{key}\": {note}");
        }
    }
    if let Some(dir) = &a.output_dir {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("{}: cannot create the directory", dir.display()))?;
        for (k, (name, t)) in ordered.iter().enumerate() {
            let path = dir.join(format!("output_{k}.pb"));
            let bytes = match labels.get(*name) {
                Some(table) => {
                    let strings = npy::label_strings(name, t, table)?;
                    fp8c_onnx::string_tensor_pb_bytes(name, t.shape(), &strings)
                }
                None => fp8c_onnx::tensor_pb_bytes(name, t),
            };
            fp8c_session::files::Output::check("--out-dir", &path, &[])?
                .write_bytes(&bytes)
                .with_context(|| format!("output \"{name}\""))?;
        }
    }
    Ok(())
}

fn write_stats(path: &Path, a: &RunArgs, recipe: &Recipe, stats: &[Fp8TensorStats]) -> Result<()> {
    let doc = serde_json::json!({
        "model": a.model.display().to_string(),
        "precision": precision_name(a.fp8.precision),
        "recipe": recipe,
        "tensors": stats,
    });
    let text = serde_json::to_string_pretty(&doc)? + "\n";
    fp8c_session::files::Output::check("--stats", path, &[&a.model])?
        .write_bytes(text.as_bytes())?;
    Ok(())
}

/// The `--stats` summary: per recipe (the one in use, then the what-if ones) the mean and
/// worst SQNR over the FP8 tensors and the mean underflow and overflow shares.
fn print_what_if(path: &Path, recipe: &Recipe, stats: &[Fp8TensorStats]) -> Result<()> {
    if stats.is_empty() {
        return crate::out::println(&format!(
            "--stats {}: no FP8 tensors were quantized",
            path.display()
        ));
    }
    crate::out::println(&format!(
        "FP8 tensors ({}; details in {}), recipe in use: {}\n  SQNR in dB (mean over the inexact tensors, and the worst); underflow and overflow shares, mean",
        stats.len(),
        path.display(),
        recipe_word(recipe)
    ))?;
    let line = |name: &str, rows: Vec<(&str, f64, f64, f64)>| -> Result<()> {
        let n = rows.len().max(1) as f64;
        let finite: Vec<f64> = rows.iter().map(|r| r.1).filter(|v| v.is_finite()).collect();
        let mean = if finite.is_empty() {
            f64::INFINITY
        } else {
            finite.iter().sum::<f64>() / finite.len() as f64
        };
        let (worst_t, worst) = rows
            .iter()
            .map(|r| (r.0, r.1))
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .unwrap_or(("", f64::NAN));
        let under = rows.iter().map(|r| r.2).sum::<f64>() / n;
        let over = rows.iter().map(|r| r.3).sum::<f64>() / n;
        crate::out::println(&format!(
            "  {name:<20} {mean:>6.2}  {worst:>6.2} ({worst_t})  underflow {:.3}%  overflow {:.3}%",
            100.0 * under,
            100.0 * over
        ))
    };
    line(
        "in use",
        stats
            .iter()
            .map(|t| (t.tensor.as_str(), t.sqnr_db, t.underflow, t.overflow))
            .collect(),
    )?;
    for (k, (name, ..)) in fp8c_runtime::stats::what_if_tilings(false)
        .iter()
        .enumerate()
    {
        line(
            &format!("what-if {name}"),
            stats
                .iter()
                .filter_map(|t| {
                    let w = t.what_if.get(k)?;
                    Some((t.tensor.as_str(), w.sqnr_db, w.underflow, w.overflow))
                })
                .collect(),
        )?;
    }
    Ok(())
}

/// Compiles `model` with `opts`, logging the passes' notes (`-v`).
fn compile(model: &Model, opts: &fp8c_session::CompileOptions) -> Result<Compiled> {
    Ok(notes(model.compile(opts)?))
}

/// Logs a compilation's notes (`-v`).
fn notes(compiled: Compiled) -> Compiled {
    for n in compiled.notes() {
        tracing::info!("{n}");
    }
    compiled
}

/// `fp8c run`.
pub fn run(a: RunArgs) -> Result<()> {
    let started = Instant::now();
    let opts = a.fp8.compile_options(|r| {
        r.recipe_for(Purpose::Inference {
            calibrated: a.calibrate.is_some(),
        })
    })?;
    // --stats measures every quantization: the weights' too, so they stay f32 and are
    // quantized at run time (the same results) instead of once at compile time.
    let mut opts = opts;
    opts.keep_weights = a.stats.is_some();
    let (policy, recipe) = (opts.policy.clone(), opts.recipe);
    let device = fp8c_session::Device::from(a.device);
    device.check()?;
    let mut model = Model::load_with(
        &a.model,
        &fp8c_session::LoadOptions {
            outputs: a.output.clone(),
        },
    )?;
    crate::commands::warn_all(model.warnings());
    let mut inputs = read_inputs(&a, &model)?;
    // Integer inputs whose values decide shapes are specialised on, like input shapes.
    if let Some((specialised, said)) = model.specialise(&inputs)? {
        for line in said {
            tracing::info!("{line}");
        }
        for n in model.shape_inputs() {
            inputs.remove(n);
        }
        model = specialised;
    }
    let shapes: BTreeMap<String, Vec<u64>> = inputs
        .iter()
        .map(|(k, t)| (k.clone(), t.shape().to_vec()))
        .collect();
    model.bind_input_shapes(&shapes).with_context(|| {
        format!(
            "{}: the inputs' shapes do not fit the model together",
            a.model.display()
        )
    })?;
    let fp8_mode = policy.mode == PrecisionMode::Fp8;
    let delayed = match recipe {
        Recipe::Delayed(d) if fp8_mode => Some(d),
        _ => None,
    };
    if delayed.is_some() && a.calibrate.is_none() {
        eprintln!(
            "warning: delayed scaling without --calibrate: this run quantizes with the initial scales (1.0); pass --calibrate FILE.npz or use --recipe current"
        );
    }
    if a.calibrate.is_some() && delayed.is_none() {
        eprintln!(
            "warning: --calibrate has no effect: only FP8 runs with delayed scaling keep amax histories"
        );
    }
    // The f32 path: the reference of --compare, and what calibration observes. Without it
    // the model is compiled by value, so its f32 weights go as their FP8 copies are made.
    let string_outputs = model.string_outputs().clone();
    let (compiled, mut reference) = if a.compare || (delayed.is_some() && a.calibrate.is_some()) {
        let f32_opts = opts.clone().with_precision(PrecisionMode::F32);
        let reference = compile(&model, &f32_opts)?.prepare(device)?;
        (compile(&model, &opts)?, Some((reference, model)))
    } else {
        (notes(model.into_compiled(&opts)?), None)
    };
    let mut runner = compiled.prepare(device)?;
    if a.print_program {
        eprint!("{}", runner.program().dump());
    }
    let compile_time = started.elapsed();

    if let (Some(cal), Some(d), Some((r, model))) = (&a.calibrate, delayed, reference.as_mut()) {
        let mut cal_inputs = BTreeMap::new();
        for (name, t) in npy::read_npz(cal)? {
            let t = model
                .conform_input(&name, t)
                .with_context(|| format!("--calibrate {}", cal.display()))?;
            cal_inputs.insert(name, t);
        }
        let c = fp8c_session::calibrate::calibrate(&mut runner, r, &cal_inputs, &d)
            .with_context(|| format!("--calibrate {}", cal.display()))?;
        eprintln!(
            "calibrated {} of {} FP8 tensors from {} (amax of the f32 path)",
            c.calibrated,
            c.total,
            cal.display()
        );
    }

    let mut stats: Vec<Fp8TensorStats> = Vec::new();
    let want_stats = a.stats.is_some();
    let mut profile = fp8c_runtime::Profile::new();
    let precomputed = runner.precomputed_steps();
    let mut timer = a
        .profile
        .then(|| profile.start_skipping(precomputed.clone()));
    let mut observe = |s: &Step, ins: &[&Tensor], outs: &[Tensor]| {
        if let Some(t) = timer.as_mut() {
            t.observe(s, ins, outs);
        }
        if want_stats && let Some(st) = fp8c_runtime::fp8_stats(s, ins, outs) {
            stats.push(st);
            if let Some(t) = timer.as_mut() {
                t.reset();
            }
        }
    };
    let t0 = Instant::now();
    // Without an observer the CPU backend may overwrite a dying input in place.
    let outs = if a.profile || want_stats {
        runner.run_observed(&inputs, &mut observe)
    } else {
        runner.run(&inputs)
    }
    .with_context(|| format!("{}", a.model.display()))?;
    let run_time = t0.elapsed();
    if let Some(t) = timer.take() {
        t.finish();
    }
    // Further runs for --repeat: times, and the profile's step times when asked (state
    // carries over, as between calls). The first run is often slower than the rest (caches,
    // page faults, the thread pool waking), so the profile covers every run.
    let mut times = vec![run_time];
    for k in 1..a.repeat {
        let context = || format!("{} (run {})", a.model.display(), k + 1);
        let t = Instant::now();
        if a.profile {
            let mut timer = profile.start_skipping(precomputed.clone());
            runner
                .run_observed(
                    &inputs,
                    &mut |s: &Step, ins: &[&Tensor], outs: &[Tensor]| timer.observe(s, ins, outs),
                )
                .with_context(context)?;
            timer.finish();
        } else {
            runner.run(&inputs).with_context(context)?;
        }
        times.push(t.elapsed());
    }
    times.sort();
    let repeat_note = if a.repeat > 1 {
        format!(
            " (fastest of {}; median {} ms)",
            a.repeat,
            ms(times[times.len() / 2])
        )
    } else {
        String::new()
    };
    let run_time = times[0];
    if a.profile {
        eprint!("{}", profile.report(a.profile_nodes));
    }

    let g = &compiled.graph;
    // Tensors quantized at run time, plus weights quantized once at compile time (FP8 params).
    let fp8_tensors = g
        .node_ids()
        .iter()
        .filter(|&&id| {
            let n = g.node(id);
            matches!(
                n.op,
                fp8c_ir::Op::Quantize { .. } | fp8c_ir::Op::BlockQuantize { .. }
            ) || (n.op.is_interface() && n.outputs.iter().any(|t| t.dtype.is_fp8()))
        })
        .count();
    let program = runner.program();
    eprintln!(
        "fp8c run: {} on {}, precision {}{}",
        a.model.display(),
        device.name(),
        precision_name(a.fp8.precision),
        if fp8_mode {
            format!(
                ", recipe {} ({} FP8 tensors)",
                recipe_word(&recipe),
                fp8_tensors
            )
        } else {
            String::new()
        }
    );
    for line in compiled.high_precision_summary() {
        eprintln!("  {line}");
    }
    for (name, b) in program.outputs() {
        let ty = &program.buffer(*b).ty;
        match string_outputs.get(name) {
            // Indices into the class labels, written to --outputs as the strings.
            Some(l) => {
                let t = ty.to_string();
                let dims = t.find('[').map_or("", |i| &t[i..]);
                eprintln!(
                    "  output \"{name}\": string{dims} (class labels: {})",
                    label_list(l)
                )
            }
            None => eprintln!("  output \"{name}\": {ty}"),
        }
    }
    eprintln!(
        "  compile {:.1} ms, run {} ms{repeat_note}; {} steps; {}",
        compile_time.as_secs_f64() * 1e3,
        ms(run_time),
        program.steps().len(),
        fp8c_runtime::describe_plan(&program.plan())
    );

    if let (true, Some((r, _))) = (a.compare, reference.as_mut()) {
        let ref_outs = r
            .run(&inputs)
            .with_context(|| format!("{} (f32 path)", a.model.display()))?;
        crate::out::println(&format!(
            "compare {} vs f32:",
            precision_name(a.fp8.precision)
        ))?;
        for (name, _) in program.outputs() {
            let (Some(x), Some(y)) = (outs.get(name), ref_outs.get(name)) else {
                continue;
            };
            let c = fp8c_runtime::compare(x, y)
                .map_err(fp8c_session::Error::from)
                .with_context(|| format!("output \"{name}\""))?;
            crate::out::println(&format!(
                "  \"{name}\": rel_l2={:.4e} max_abs={:.4e} cosine={:.6}",
                c.rel_l2, c.max_abs, c.cosine
            ))?;
        }
    }
    if let Some(path) = &a.stats {
        write_stats(path, &a, &recipe, &stats)?;
        print_what_if(path, &recipe, &stats)?;
    }
    write_outputs(&a, program, &outs, &string_outputs)
}

/// A model's string labels for a summary line: up to six, quoted.
fn label_list(labels: &[String]) -> String {
    let mut shown: Vec<String> = labels.iter().take(6).map(|l| format!("{l:?}")).collect();
    if labels.len() > 6 {
        shown.push(format!("... {} in all", labels.len()));
    }
    shown.join(", ")
}

/// How `fp8c run` names the recipe in its summary line.
fn recipe_word(r: &Recipe) -> String {
    match r {
        Recipe::Delayed(d) => format!(
            "delayed {} (history {}, {}{})",
            d.fp8_format.name(),
            d.amax_history_len,
            d.amax_compute_algo.name(),
            if d.power_2_scale {
                ", power-of-two scales"
            } else {
                ""
            }
        ),
        Recipe::Current(c) if c.granularity.tiling().is_some() => format!(
            "current {} per tile ({}{})",
            c.fp8_format.name(),
            c.granularity,
            if c.power_2_scale {
                ", power-of-two scales"
            } else {
                ""
            }
        ),
        Recipe::Current(c) => format!("current {}", c.fp8_format.name()),
    }
}

/// A run time in milliseconds with three decimals, or four significant digits below 1 ms
/// (a small model's runs differ by microseconds).
fn ms(d: std::time::Duration) -> String {
    let ms = d.as_secs_f64() * 1e3;
    if ms >= 1.0 {
        format!("{ms:.3}")
    } else {
        format!("{ms:.4}")
    }
}
