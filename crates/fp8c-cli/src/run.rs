//! `fp8c run`: compile a model for the shapes of the given inputs, execute it on a backend,
//! write the outputs; optionally compare with the f32 path (`--compare`) and report what every
//! FP8 quantization did (`--stats`).
//!
//! Order of work: load the model → read the inputs and check them against the model's
//! declared interface (every error names the file and the input) → bind their shapes →
//! compile (canonicalize, precision, scaling) → lower to a `Program` → prepare on the backend
//! → calibrate (delayed scaling: run the `--calibrate` inputs first, filling the amax
//! histories) → run → write.

use crate::commands::load_graph;
use crate::fp8args::Fp8Args;
use anyhow::{Context, Result, anyhow, bail};
use clap::{Args, ValueEnum};
use fp8c_core::Recipe;
use fp8c_ir::{Dim, Graph, Tensor, interface_name};
use fp8c_passes::precision::{PolicyOptions, PrecisionMode};
use fp8c_passes::{PassCx, PassManager, PassOptions};
use fp8c_runtime::{Backend, CpuBackend, Executable, Fp8TensorStats, Program, Step};
use fp8c_session::npy;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Where to run.
#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
pub enum Device {
    /// The CPU reference backend (bit-exact FP8 emulation, f32 accumulation).
    Cpu,
    /// An NVIDIA GPU.
    Cuda,
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
    /// Write the outputs to a NumPy .npz archive (keys = graph output names).
    #[arg(long, value_name = "FILE.npz")]
    pub outputs: Option<PathBuf>,
    /// Write the outputs as output_0.pb, output_1.pb, ... (ONNX TensorProto, the layout of
    /// --data) into DIR.
    #[arg(long = "output-dir", value_name = "DIR")]
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
    /// The backend to run on.
    #[arg(long, value_enum, default_value = "cpu")]
    pub device: Device,
    /// Print the lowered program (steps, buffers, memory plan) to stderr.
    #[arg(long = "print-program")]
    pub print_program: bool,
    #[command(flatten)]
    pub fp8: Fp8Args,
}

/// The backend for `--device`.
fn backend(device: Device) -> Result<Box<dyn Backend>> {
    match device {
        Device::Cpu => Ok(Box::new(CpuBackend)),
        Device::Cuda => Ok(Box::new(fp8c_runtime::CudaBackend::default())),
    }
}

/// The recipe of a run: as `compile` reads it, except that with no recipe given the default
/// is current scaling (a fresh model has no recorded amax history), or delayed scaling when
/// `--calibrate` (or a delayed-only flag) asks for histories.
fn run_recipe(fp8: &Fp8Args, calibrate: bool) -> Result<Recipe> {
    let mut f = fp8.clone();
    if f.recipe.is_none() && f.config.is_none() {
        let delayed_flags = f.amax_history.is_some() || f.amax_algo.is_some() || f.margin.is_some();
        f.recipe = Some(
            if calibrate || delayed_flags {
                "delayed"
            } else {
                "current"
            }
            .into(),
        );
    }
    f.recipe()
}

// ------------------------------------------------------------------------------- inputs

/// The graph's declared inputs: name and type, in order.
fn declared_inputs(g: &Graph) -> Vec<(String, fp8c_ir::TensorType)> {
    g.inputs()
        .iter()
        .map(|&id| {
            let n = g.node(id);
            (interface_name(&n.op).to_string(), n.outputs[0].clone())
        })
        .collect()
}

/// Checks a tensor against an input's declared type.
fn check_input(t: &Tensor, ty: &fp8c_ir::TensorType) -> Result<(), String> {
    if t.dtype() != ty.dtype {
        return Err(format!("has dtype {}, the model declares {ty}", t.dtype()));
    }
    if t.shape().len() != ty.rank() {
        return Err(format!(
            "has rank {} (shape {:?}), the model declares rank {} ({ty})",
            t.shape().len(),
            t.shape(),
            ty.rank()
        ));
    }
    for (axis, (d, &n)) in ty.shape.iter().zip(t.shape()).enumerate() {
        if let Dim::Known(k) = d
            && *k != n
        {
            return Err(format!(
                "has shape {:?}, but dim {axis} is fixed to {k} in the model ({ty})",
                t.shape()
            ));
        }
    }
    Ok(())
}

/// Reads every input source, checking names and types against the model.
fn read_inputs(a: &RunArgs, g: &Graph) -> Result<BTreeMap<String, Tensor>> {
    let declared = declared_inputs(g);
    let names: Vec<&str> = declared.iter().map(|(n, _)| n.as_str()).collect();
    let mut given: BTreeMap<String, (Tensor, String)> = BTreeMap::new();
    let mut add = |name: String, t: Tensor, from: String| -> Result<()> {
        let Some((_, ty)) = declared.iter().find(|(n, _)| *n == name) else {
            bail!(
                "{from}: \"{name}\" is not an input of the model (its inputs are: {})",
                names.join(", ")
            );
        };
        check_input(&t, ty).map_err(|m| anyhow!("{from}: input \"{name}\" {m}"))?;
        if let Some((_, prev)) = given.get(&name) {
            bail!("input \"{name}\" is given twice: in {prev} and in {from}");
        }
        given.insert(name, (t, from));
        Ok(())
    };
    if let Some(path) = &a.inputs {
        for (k, t) in npy::read_npz(path)? {
            add(k, t, path.display().to_string())?;
        }
    }
    for spec in &a.input {
        let (name, file) = spec
            .split_once('=')
            .ok_or_else(|| anyhow!("--input `{spec}`: expected NAME=FILE.npy"))?;
        let path = Path::new(file);
        let t = npy::read_npy(path).with_context(|| format!("input \"{name}\""))?;
        add(name.to_string(), t, path.display().to_string())?;
    }
    if let Some(dir) = &a.data {
        if !dir.is_dir() {
            bail!("--data {}: not a directory", dir.display());
        }
        for (k, (name, _)) in declared.iter().enumerate() {
            let path = dir.join(format!("input_{k}.pb"));
            if !path.is_file() {
                bail!(
                    "--data {}: input_{k}.pb (for input \"{name}\") is missing",
                    dir.display()
                );
            }
            let t =
                fp8c_onnx::load_tensor_pb(&path).with_context(|| format!("input \"{name}\""))?;
            add(name.clone(), t, path.display().to_string())?;
        }
    }
    for (name, ty) in &declared {
        if !given.contains_key(name) {
            bail!(
                "input \"{name}\" ({ty}) is missing: give it with --inputs FILE.npz, --input {name}=FILE.npy or --data DIR"
            );
        }
    }
    Ok(given.into_iter().map(|(k, (t, _))| (k, t)).collect())
}

// ------------------------------------------------------------------------------ compile

/// Compiles `g` (shapes already bound) with the given policy and recipe.
fn compile(
    mut g: Graph,
    policy: PolicyOptions,
    recipe: Recipe,
    no_fuse: bool,
    model: &Path,
) -> Result<Graph> {
    let options = PassOptions {
        policy,
        recipe,
        no_fuse,
        ..Default::default()
    };
    let mut cx = PassCx::new(options);
    PassManager::default()
        .run(&mut g, &mut cx)
        .with_context(|| format!("{}", model.display()))?;
    for n in &cx.notes {
        tracing::info!("{n}");
    }
    Ok(g)
}

/// Lowers and prepares a compiled graph on `device`.
fn prepare(g: &Graph, device: Device, model: &Path) -> Result<(Program, Box<dyn Executable>)> {
    let program = fp8c_runtime::lower(g).with_context(|| format!("{}", model.display()))?;
    let b = backend(device)?;
    b.check()?;
    let exe = b
        .prepare(&program, g.weights())
        .with_context(|| format!("{}", model.display()))?;
    Ok((program, exe))
}

// ------------------------------------------------------------------------------- output

fn write_outputs(a: &RunArgs, program: &Program, outs: &BTreeMap<String, Tensor>) -> Result<()> {
    let ordered: Vec<(&str, &Tensor)> = program
        .outputs()
        .iter()
        .filter_map(|(n, _)| outs.get(n).map(|t| (n.as_str(), t)))
        .collect();
    if let Some(path) = &a.outputs {
        for (key, note) in npy::write_npz(path, &ordered)? {
            eprintln!("note: output \"{key}\": {note}");
        }
    }
    if let Some(dir) = &a.output_dir {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("{}: cannot create the directory", dir.display()))?;
        for (k, (name, t)) in ordered.iter().enumerate() {
            let path = dir.join(format!("output_{k}.pb"));
            fp8c_onnx::save_tensor_pb(&path, name, t)
                .with_context(|| format!("output \"{name}\""))?;
        }
    }
    Ok(())
}

fn write_stats(path: &Path, a: &RunArgs, recipe: &Recipe, stats: &[Fp8TensorStats]) -> Result<()> {
    let doc = serde_json::json!({
        "model": a.model.display().to_string(),
        "precision": precision_word(a.fp8.precision),
        "recipe": recipe,
        "tensors": stats,
    });
    let text = serde_json::to_string_pretty(&doc)?;
    std::fs::write(path, text + "\n").with_context(|| format!("{}: cannot write", path.display()))
}

// ---------------------------------------------------------------------------- calibrate

/// The scaling pass's names of a GEMM's two FP8 operand tensors (`fc1.x`, `fc1.w`).
fn operand_names(g: &Graph, id: fp8c_ir::NodeId) -> Option<[String; 2]> {
    let n = g.node(id);
    let (&a, &b) = (n.inputs().first()?, n.inputs().get(1)?);
    let (x, w) = fp8c_passes::scaling::operand_names(g, &n.name, a, b);
    Some([x, w])
}

/// Fills the delayed-scaling state of `exe` as TransformerEngine's `fp8_calibration` does:
/// the calibration inputs run through the f32 path (`reference`, compiled from `g32`), the
/// amax of every GEMM operand is recorded into its tensor's history and the scale computed
/// from it. Calibrating through the FP8 program instead would record amaxes of activations
/// already distorted by the initial scales of the layers above. Returns how many FP8 tensors
/// were calibrated, of how many.
fn calibrate(
    exe: &mut dyn Executable,
    (g32, reference): (&Graph, &mut dyn Executable),
    inputs: &BTreeMap<String, Tensor>,
    recipe: &fp8c_core::DelayedScaling,
) -> Result<(usize, usize)> {
    let state = exe.state();
    let hist = |t: &str| format!("{t}.amax_history");
    let names: BTreeMap<String, [String; 2]> = g32
        .node_ids()
        .into_iter()
        .filter(|&id| g32.node(id).op.is_gemm_like())
        .filter_map(|id| Some((g32.node(id).name.clone(), operand_names(g32, id)?)))
        .collect();
    let mut amax: BTreeMap<String, f32> = BTreeMap::new();
    let mut observe = |s: &Step, ins: &[&Tensor], _: &[Tensor]| {
        let Some(operands) = names.get(&s.node) else {
            return;
        };
        for (t, x) in operands.iter().zip(ins) {
            if !state.contains_key(&hist(t)) {
                continue;
            }
            let Ok(v) = x.to_f32_vec() else { continue };
            let m = fp8c_core::amax_f32(&v);
            let e = amax.entry(t.clone()).or_insert(m);
            *e = fp8c_core::amax_f32(&[*e, m]);
        }
    };
    reference.run_observed(inputs, &mut observe)?;
    let fmt = match recipe.fp8_format.forward() {
        fp8c_core::Fp8Format::E4M3 => fp8c_ir::DType::F8E4M3,
        fp8c_core::Fp8Format::E5M2 => fp8c_ir::DType::F8E5M2,
    };
    let compute = fp8c_ir::Op::ComputeScale {
        fmt,
        margin: recipe.margin,
        source: match recipe.amax_compute_algo {
            fp8c_core::AmaxComputeAlgo::Max => fp8c_ir::AmaxSource::HistoryMax,
            fp8c_core::AmaxComputeAlgo::MostRecent => fp8c_ir::AmaxSource::HistoryMostRecent,
        },
        epsilon: 0.0,
        power_2: false,
    };
    let total = state
        .keys()
        .filter(|k| k.ends_with(".amax_history"))
        .count();
    for (t, m) in &amax {
        let (scale, scale_inv) = (format!("{t}.scale"), format!("{t}.scale_inv"));
        let (Some(h), Some(prev)) = (state.get(&hist(t)), state.get(&scale)) else {
            continue;
        };
        let mut upd = fp8c_eval::eval_op(
            &fp8c_ir::Op::AmaxHistoryUpdate,
            &[h, &Tensor::scalar_f32(*m)],
        )
        .map_err(|e| anyhow!("tensor {t}: {e}"))?;
        let mut s = fp8c_eval::eval_op(&compute, &[&upd[0], prev])
            .map_err(|e| anyhow!("tensor {t}: {e}"))?;
        exe.set_state(&hist(t), upd.remove(1))?;
        exe.set_state(&scale_inv, s.remove(1))?;
        exe.set_state(&scale, s.remove(0))?;
    }
    Ok((amax.len(), total))
}

// ---------------------------------------------------------------------------------- run

/// `fp8c run`.
pub fn run(a: RunArgs) -> Result<()> {
    let started = Instant::now();
    let policy = a.fp8.policy()?;
    let recipe = run_recipe(&a.fp8, a.calibrate.is_some())?;
    backend(a.device)?.check()?;
    let mut g = load_graph(&a.model, &[])?;
    let inputs = read_inputs(&a, &g)?;
    let shapes: BTreeMap<String, Vec<u64>> = inputs
        .iter()
        .map(|(k, t)| (k.clone(), t.shape().to_vec()))
        .collect();
    fp8c_passes::shapes::bind_input_shapes(&mut g, &shapes).with_context(|| {
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
    // The f32 path: the reference of --compare, and what calibration observes.
    let f32_source = (a.compare || (delayed.is_some() && a.calibrate.is_some())).then(|| g.clone());
    let compiled = compile(g, policy.clone(), recipe, a.fp8.no_fuse, &a.model)?;
    let (program, mut exe) = prepare(&compiled, a.device, &a.model)?;
    if a.print_program {
        eprint!("{}", program.dump());
    }
    let mut reference = match f32_source {
        Some(src) => {
            let f32_policy = PolicyOptions {
                mode: PrecisionMode::F32,
                ..policy.clone()
            };
            let g32 = compile(src, f32_policy, recipe, a.fp8.no_fuse, &a.model)?;
            let exe32 = prepare(&g32, a.device, &a.model)?.1;
            Some((g32, exe32))
        }
        None => None,
    };
    let compile_time = started.elapsed();

    if let (Some(cal), Some(d), Some(r)) = (&a.calibrate, delayed, reference.as_mut()) {
        let cal_inputs: BTreeMap<String, Tensor> = npy::read_npz(cal)?.into_iter().collect();
        let (done, total) = calibrate(exe.as_mut(), (&r.0, r.1.as_mut()), &cal_inputs, &d)
            .with_context(|| format!("--calibrate {}", cal.display()))?;
        eprintln!(
            "calibrated {done} of {total} FP8 tensors from {} (amax of the f32 path)",
            cal.display()
        );
    }

    let mut stats: Vec<Fp8TensorStats> = Vec::new();
    let want_stats = a.stats.is_some();
    let mut observe = |s: &Step, ins: &[&Tensor], outs: &[Tensor]| {
        if want_stats && let Some(st) = fp8c_runtime::fp8_stats(s, ins, outs) {
            stats.push(st);
        }
    };
    let t0 = Instant::now();
    let outs = exe
        .run_observed(&inputs, &mut observe)
        .with_context(|| format!("{}", a.model.display()))?;
    let run_time = t0.elapsed();

    let fp8_tensors = compiled
        .node_ids()
        .iter()
        .filter(|&&id| matches!(compiled.node(id).op, fp8c_ir::Op::Quantize { .. }))
        .count();
    eprintln!(
        "fp8c run: {} on {}, precision {}{}",
        a.model.display(),
        device_word(a.device),
        precision_word(a.fp8.precision),
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
    for (name, b) in program.outputs() {
        eprintln!("  output \"{name}\": {}", program.buffer(*b).ty);
    }
    eprintln!(
        "  compile {:.1} ms, run {:.1} ms; {} steps; {}",
        compile_time.as_secs_f64() * 1e3,
        run_time.as_secs_f64() * 1e3,
        program.steps().len(),
        fp8c_runtime::describe_plan(&program.plan())
    );

    if let (true, Some((_, r))) = (a.compare, reference.as_mut()) {
        let ref_outs = r
            .run(&inputs)
            .with_context(|| format!("{} (f32 path)", a.model.display()))?;
        println!("compare {} vs f32:", precision_word(a.fp8.precision));
        for (name, _) in program.outputs() {
            let (Some(x), Some(y)) = (outs.get(name), ref_outs.get(name)) else {
                continue;
            };
            let c = fp8c_runtime::compare(x, y).with_context(|| format!("output \"{name}\""))?;
            println!(
                "  \"{name}\": rel_l2={:.4e} max_abs={:.4e} cosine={:.6}",
                c.rel_l2, c.max_abs, c.cosine
            );
        }
    }
    if let Some(path) = &a.stats {
        write_stats(path, &a, &recipe, &stats)?;
    }
    write_outputs(&a, &program, &outs)
}

fn precision_word(p: PrecisionMode) -> &'static str {
    match p {
        PrecisionMode::F32 => "f32",
        PrecisionMode::Bf16 => "bf16",
        PrecisionMode::Fp8 => "fp8",
    }
}

fn device_word(d: Device) -> &'static str {
    match d {
        Device::Cpu => "cpu",
        Device::Cuda => "cuda",
    }
}

fn recipe_word(r: &Recipe) -> String {
    match r {
        Recipe::Delayed(d) => format!(
            "delayed {} (history {}, {})",
            d.fp8_format.name(),
            d.amax_history_len,
            d.amax_compute_algo.name()
        ),
        Recipe::Current(c) => format!("current {}", c.fp8_format.name()),
    }
}
