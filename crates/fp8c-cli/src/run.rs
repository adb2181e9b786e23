//! `fp8c run`: its flags, and what it prints. The run itself is the library's
//! (`fp8c_session::RunJob`: load, read and check the inputs, bind their shapes, compile,
//! prepare on the device, calibrate, run, compare, write).

use crate::fp8args::Fp8Args;
use anyhow::Result;
use clap::{Args, ValueEnum};
use fp8c_session::{
    Fp8TensorStats, InputSources, Recipe, RunConfig, RunJob, precision_name, recipe_word,
};
use std::path::{Path, PathBuf};

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
    pub report: crate::commands::ReportArgs,
    #[command(flatten)]
    pub not_here: crate::commands::NotHere,
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

impl RunArgs {
    /// The library's description of this run.
    fn config(&self) -> RunConfig {
        let mut c = RunConfig::new(
            self.model.clone(),
            InputSources {
                npz: self.inputs.clone(),
                npy: self.input.clone(),
                pb_dir: self.data.clone(),
            },
        );
        c.outputs = self.output.clone();
        c.compile = self.fp8.settings();
        c.device = self.device.into();
        c.calibrate = self.calibrate.clone();
        c.compare = self.compare;
        c.stats = self.stats.is_some();
        c.repeat = self.repeat;
        c.profile = self.profile;
        c
    }
}

/// `fp8c run`.
pub fn run(a: RunArgs) -> Result<()> {
    a.not_here.check("run")?;
    let config = a.config();
    let mut job = RunJob::prepare(&config, &mut |line| eprintln!("{line}"))?;
    for (pass, text) in job.compiled().dumps() {
        eprintln!("// ----- IR after {pass} -----\n{text}");
    }
    a.report.print(|all| job.compiled().report(all))?;
    if a.print_program {
        eprint!("{}", job.runner().program().dump());
    }
    let outcome = job.run()?;
    let repeat_note = if a.repeat > 1 {
        format!(
            " (fastest of {}; median {} ms)",
            a.repeat,
            ms(outcome.times[outcome.times.len() / 2])
        )
    } else {
        String::new()
    };
    if let Some(p) = &outcome.profile {
        eprint!("{}", p.report(a.profile_nodes));
    }
    let fp8_mode = a.fp8.precision == fp8c_session::PrecisionMode::Fp8;
    eprintln!(
        "fp8c run: {} on {}, precision {}{}",
        a.model.display(),
        config.device.name(),
        precision_name(a.fp8.precision),
        if fp8_mode {
            format!(
                ", recipe {} ({} FP8 tensors)",
                recipe_word(job.recipe()),
                job.fp8_tensor_count()
            )
        } else {
            String::new()
        }
    );
    for line in job.compiled().high_precision_summary() {
        eprintln!("  {line}");
    }
    let program = job.runner().program();
    for (name, b) in program.outputs() {
        let ty = &program.buffer(*b).ty;
        match job.string_outputs().get(name) {
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
        job.compile_time().as_secs_f64() * 1e3,
        ms(outcome.times[0]),
        program.steps().len(),
        fp8c_session::describe_plan(&program.plan())
    );
    if a.compare {
        let rows = job.compare(&outcome.outputs)?;
        crate::out::println(&format!(
            "compare {} vs f32:",
            precision_name(a.fp8.precision)
        ))?;
        for (name, c) in rows {
            crate::out::println(&format!(
                "  \"{name}\": rel_l2={:.4e} max_abs={:.4e} cosine={:.6}",
                c.rel_l2, c.max_abs, c.cosine
            ))?;
        }
    }
    if let Some(path) = &a.stats {
        job.write_stats(path, &outcome.stats)?;
        print_what_if(path, job.recipe(), &outcome.stats)?;
    }
    for note in job.write_outputs(
        &outcome.outputs,
        a.outputs.as_deref(),
        a.output_dir.as_deref(),
    )? {
        eprintln!("note: {note}");
    }
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
    for (k, (name, ..)) in fp8c_session::what_if_tilings(false).iter().enumerate() {
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

/// A model's string labels for a summary line: up to six, quoted.
fn label_list(labels: &[String]) -> String {
    let mut shown: Vec<String> = labels.iter().take(6).map(|l| format!("{l:?}")).collect();
    if labels.len() > 6 {
        shown.push(format!("... {} in all", labels.len()));
    }
    shown.join(", ")
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
