//! A whole `fp8c run` as library calls: [`RunJob::prepare`] loads the model, reads and
//! checks the inputs, specialises shape-deciding integer inputs, binds the input shapes,
//! compiles (and the f32 reference where `compare` or calibration needs it), loads the program
//! on the device and calibrates; [`RunJob::run`] executes it (`repeat` times, profiled or
//! with FP8 statistics when asked); then the outcome's comparison against f32, the statistics
//! file and the outputs. What a caller prints comes back as data, plus the `say` callback for
//! the warnings and notes that arise on the way.

use crate::compiled::Compiled;
use crate::error::{Context, Result};
use crate::files::Output;
use crate::model::{LoadOptions, Model};
use crate::options::{Purpose, precision_name};
use crate::run_io::{InputSources, read_inputs};
use crate::runner::{Device, Runner};
use crate::settings::CompileSettings;
use fp8c_core::Recipe;
use fp8c_ir::Tensor;
use fp8c_passes::precision::PrecisionMode;
use fp8c_runtime::{Fp8TensorStats, Profile, Step};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// What a run is asked to do.
#[derive(Clone, Debug)]
pub struct RunConfig {
    /// The model: an ONNX file or IR text.
    pub model: PathBuf,
    /// Keep only these outputs (a graph output or any intermediate value by its ONNX name).
    pub outputs: Vec<String>,
    /// Where the inputs come from.
    pub inputs: InputSources,
    /// Precision, recipe, policy, shapes (the shared compile flags).
    pub compile: CompileSettings,
    /// The backend.
    pub device: Device,
    /// Fill the delayed-scaling state from these inputs (`.npz`) through the f32 path first.
    pub calibrate: Option<PathBuf>,
    /// Also run the f32 path and compare every output with it.
    pub compare: bool,
    /// Measure every FP8 quantization (written by [`RunJob::write_stats`]).
    pub stats: bool,
    /// Runs of the model (the first gives the outputs and statistics).
    pub repeat: u32,
    /// Time every step of every run.
    pub profile: bool,
}

impl RunConfig {
    /// A run of `model` on `inputs` with every other setting at its default.
    pub fn new(model: impl Into<PathBuf>, inputs: InputSources) -> RunConfig {
        RunConfig {
            model: model.into(),
            outputs: Vec::new(),
            inputs,
            compile: CompileSettings::default(),
            device: Device::Cpu,
            calibrate: None,
            compare: false,
            stats: false,
            repeat: 1,
            profile: false,
        }
    }
}

/// A prepared run.
pub struct RunJob {
    config: RunConfig,
    compiled: Compiled,
    runner: Runner,
    reference: Option<Runner>,
    inputs: BTreeMap<String, Tensor>,
    recipe: Recipe,
    string_outputs: BTreeMap<String, Vec<String>>,
    compile_time: Duration,
}

/// What [`RunJob::run`] gives.
pub struct RunOutcome {
    /// The first run's outputs.
    pub outputs: BTreeMap<String, Tensor>,
    /// Run times, fastest first.
    pub times: Vec<Duration>,
    /// Step times over every run (`profile`).
    pub profile: Option<Profile>,
    /// Every FP8 quantization of the first run (`stats`).
    pub stats: Vec<Fp8TensorStats>,
}

impl RunJob {
    /// Prepares `config`; `say` gets each warning and note as it arises (`warning: ...`).
    pub fn prepare(config: &RunConfig, say: &mut dyn FnMut(&str)) -> Result<RunJob> {
        let started = Instant::now();
        let s = &config.compile;
        if s.stop_after.is_some() {
            crate::error::bail!(
                "--stop-after: a run needs the whole pipeline (fp8c compile --stop-after PASS prints the IR after a pass)"
            );
        }
        let mut opts = s.options(Purpose::Inference {
            calibrated: config.calibrate.is_some(),
        })?;
        // Statistics measure every quantization: the weights' too, so they stay f32 and are
        // quantized at run time (the same results) instead of once at compile time.
        opts.keep_weights = config.stats;
        let recipe = opts.recipe;
        config.device.check()?;
        let mut model = Model::load_with(
            &config.model,
            &LoadOptions {
                outputs: config.outputs.clone(),
            },
        )?;
        for w in model.warnings() {
            say(&format!("warning: {w}"));
        }
        let mut inputs = read_inputs(&config.inputs, &model)?;
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
        let mut shapes: BTreeMap<String, Vec<u64>> = opts.input_shapes.clone();
        for (k, t) in &inputs {
            if let Some(dims) = shapes.get(k)
                && dims.as_slice() != t.shape()
            {
                crate::error::bail!(
                    "input \"{k}\" has shape {:?}, but --input-shape gives {:?}",
                    t.shape(),
                    dims
                );
            }
            shapes.insert(k.clone(), t.shape().to_vec());
        }
        model.bind_input_shapes(&shapes).with_context(|| {
            format!(
                "{}: the inputs' shapes do not fit the model together",
                config.model.display()
            )
        })?;
        let fp8_mode = opts.policy.mode == PrecisionMode::Fp8;
        let delayed = match recipe {
            Recipe::Delayed(d) if fp8_mode => Some(d),
            _ => None,
        };
        if delayed.is_some() && config.calibrate.is_none() {
            say(
                "warning: delayed scaling without --calibrate: this run quantizes with the initial scales (1.0); pass --calibrate FILE.npz or use --recipe current",
            );
        }
        if config.calibrate.is_some() && delayed.is_none() {
            say(
                "warning: --calibrate has no effect: only FP8 runs with delayed scaling keep amax histories",
            );
        }
        // The f32 path: the reference of `compare`, and what calibration observes. Without it
        // the model is compiled by value, so its f32 weights go as their FP8 copies are made.
        let string_outputs = model.string_outputs().clone();
        let needs_reference = config.compare || (delayed.is_some() && config.calibrate.is_some());
        let (compiled, mut reference, model) = if needs_reference {
            let f32_opts = opts.clone().with_precision(PrecisionMode::F32);
            let reference = notes(model.compile(&f32_opts)?).prepare(config.device)?;
            (notes(model.compile(&opts)?), Some(reference), Some(model))
        } else {
            (notes(model.into_compiled(&opts)?), None, None)
        };
        let mut runner = compiled.prepare(config.device)?;
        let compile_time = started.elapsed();
        if let (Some(cal), Some(d), Some(r), Some(model)) = (
            &config.calibrate,
            delayed,
            reference.as_mut(),
            model.as_ref(),
        ) {
            let mut cal_inputs = BTreeMap::new();
            for (name, t) in crate::npy::read_npz(cal)? {
                let t = model
                    .conform_input(&name, t)
                    .with_context(|| format!("--calibrate {}", cal.display()))?;
                cal_inputs.insert(name, t);
            }
            let c = crate::calibrate::calibrate(&mut runner, r, &cal_inputs, &d)
                .with_context(|| format!("--calibrate {}", cal.display()))?;
            say(&format!(
                "calibrated {} of {} FP8 tensors from {} (amax of the f32 path)",
                c.calibrated,
                c.total,
                cal.display()
            ));
            for note in c.notes() {
                say(&format!("warning: {note}"));
            }
        }
        Ok(RunJob {
            config: config.clone(),
            compiled,
            runner,
            reference: if config.compare { reference } else { None },
            inputs,
            recipe,
            string_outputs,
            compile_time,
        })
    }

    /// The compiled model.
    pub fn compiled(&self) -> &Compiled {
        &self.compiled
    }

    /// The program loaded on the device.
    pub fn runner(&self) -> &Runner {
        &self.runner
    }

    /// The recipe in use.
    pub fn recipe(&self) -> &Recipe {
        &self.recipe
    }

    /// Outputs that are indices into class labels, and their labels.
    pub fn string_outputs(&self) -> &BTreeMap<String, Vec<String>> {
        &self.string_outputs
    }

    /// Time spent loading, compiling and loading on the device.
    pub fn compile_time(&self) -> Duration {
        self.compile_time
    }

    /// Runs the model `repeat` times on the inputs (state carries over, as between calls).
    pub fn run(&mut self) -> Result<RunOutcome> {
        let name = self.config.model.display().to_string();
        let want_stats = self.config.stats;
        let mut stats: Vec<Fp8TensorStats> = Vec::new();
        let mut profile = Profile::new();
        let precomputed = self.runner.precomputed_steps();
        let mut timer = self
            .config
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
        let outputs = if self.config.profile || want_stats {
            self.runner.run_observed(&self.inputs, &mut observe)
        } else {
            self.runner.run(&self.inputs)
        }
        .context(&name)?;
        let mut times = vec![t0.elapsed()];
        if let Some(t) = timer.take() {
            t.finish();
        }
        // The first run is often slower than the rest (caches, page faults, the thread pool
        // waking), so the profile covers every run.
        for k in 1..self.config.repeat {
            let context = || format!("{name} (run {})", k + 1);
            let t = Instant::now();
            if self.config.profile {
                let mut timer = profile.start_skipping(precomputed.clone());
                self.runner
                    .run_observed(
                        &self.inputs,
                        &mut |s: &Step, i: &[&Tensor], o: &[Tensor]| timer.observe(s, i, o),
                    )
                    .with_context(context)?;
                timer.finish();
            } else {
                self.runner.run(&self.inputs).with_context(context)?;
            }
            times.push(t.elapsed());
        }
        times.sort();
        Ok(RunOutcome {
            outputs,
            times,
            profile: self.config.profile.then_some(profile),
            stats,
        })
    }

    /// Runs the f32 path and compares each output of `outs` with it: `(output, comparison)`
    /// in program order (`compare` only; empty otherwise).
    pub fn compare(
        &mut self,
        outs: &BTreeMap<String, Tensor>,
    ) -> Result<Vec<(String, fp8c_runtime::Comparison)>> {
        let Some(r) = self.reference.as_mut() else {
            return Ok(Vec::new());
        };
        let ref_outs = r
            .run(&self.inputs)
            .with_context(|| format!("{} (f32 path)", self.config.model.display()))?;
        let mut rows = Vec::new();
        for (name, _) in self.runner.program().outputs() {
            let (Some(x), Some(y)) = (outs.get(name), ref_outs.get(name)) else {
                continue;
            };
            let c = fp8c_runtime::compare(x, y)
                .map_err(crate::Error::from)
                .with_context(|| format!("output \"{name}\""))?;
            rows.push((name.clone(), c));
        }
        Ok(rows)
    }

    /// Writes the FP8 statistics `stats` as JSON to `path` (`--stats`).
    pub fn write_stats(&self, path: &Path, stats: &[Fp8TensorStats]) -> Result<()> {
        let doc = serde_json::json!({
            "model": self.config.model.display().to_string(),
            "precision": precision_name(self.config.compile.precision),
            "recipe": self.recipe,
            "tensors": stats,
        });
        let text = serde_json::to_string_pretty(&doc).map_err(crate::Error::invalid)? + "\n";
        Output::check("--stats", path, &[&self.config.model])?.write_bytes(text.as_bytes())
    }

    /// Writes `outs` to a `.npz` archive and/or an `output_K.pb` directory; the notes it
    /// returns say how label outputs were written.
    pub fn write_outputs(
        &self,
        outs: &BTreeMap<String, Tensor>,
        npz: Option<&Path>,
        pb_dir: Option<&Path>,
    ) -> Result<Vec<String>> {
        let order: Vec<String> = self
            .runner
            .program()
            .outputs()
            .iter()
            .map(|(n, _)| n.clone())
            .collect();
        crate::run_io::write_outputs(&order, outs, &self.string_outputs, npz, pb_dir)
    }

    /// FP8 tensors of the compiled graph: quantized at run time, plus weights quantized once
    /// at compile time (FP8 params).
    pub fn fp8_tensor_count(&self) -> usize {
        let g = &self.compiled.graph;
        g.node_ids()
            .iter()
            .filter(|&&id| {
                let n = g.node(id);
                matches!(
                    n.op,
                    fp8c_ir::Op::Quantize { .. } | fp8c_ir::Op::BlockQuantize { .. }
                ) || (n.op.is_interface() && n.outputs.iter().any(|t| t.dtype.is_fp8()))
            })
            .count()
    }
}

/// Logs a compilation's notes (`-v`).
fn notes(compiled: Compiled) -> Compiled {
    for n in compiled.notes() {
        tracing::info!("{n}");
    }
    compiled
}

/// How a run's summary names a recipe.
pub fn recipe_word(r: &Recipe) -> String {
    let p2 = |on: bool| if on { ", power-of-two scales" } else { "" };
    match r {
        Recipe::Delayed(d) => format!(
            "delayed {} (history {}, {}{})",
            d.fp8_format.name(),
            d.amax_history_len,
            d.amax_compute_algo.name(),
            p2(d.power_2_scale)
        ),
        Recipe::Current(c) if c.granularity.tiling().is_some() => format!(
            "current {} per tile ({}{})",
            c.fp8_format.name(),
            c.granularity,
            p2(c.power_2_scale)
        ),
        Recipe::Current(c) => format!("current {}", c.fp8_format.name()),
    }
}
