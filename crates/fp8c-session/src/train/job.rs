//! A whole training run as `fp8c train` makes it, in three calls any caller can make (the
//! CLI, the Python binding, the C API, a rank of a distributed run):
//!
//! 1. [`TrainRun::prepare`]: read the config file once, load the model, read and check the
//!    data (every error names the file, the key and the input), check every output target
//!    (`-o`, `--log`, `--plot`, `--checkpoint`) before any work, bind the batch, compile the
//!    training step, restore `--resume` state. [`TrainRun::info`] then says what will run.
//! 2. [`TrainRun::fit`]: the training loop ([`Trainer::fit`]) with the `--log` CSV attached.
//!    A write that fails mid-run (the log or a checkpoint on a full disk) stops the loop; the
//!    state is saved first, then the plot and the trained model of the steps run.
//! 3. [`TrainRun::finish`]: the final checkpoint, the plot and the trained ONNX model, each
//!    attempted even when another fails; the first failure is returned after the rest were
//!    written (without `--checkpoint`, a failed write saves the state first, as a signal
//!    does). A run whose every step was skipped writes no trained model and fails.

use super::checkpoint::{self, Meta};
use super::data::{DataOptions, Dataset};
use super::fit::{Fit, FitOptions, Observer, Tee};
use super::log::CsvLog;
use super::settings::TrainSettings;
use super::spec::{OptimizerKind, pick_output};
use super::trainer::Trainer;
use crate::error::{Error, Result, bail};
use crate::files::Output;
use crate::model::{LoadOptions, Model};
use crate::options::{Purpose, precision_name};
use crate::runner::Device;
use crate::settings::CompileSettings;
use crate::{Tensor, plot};
use fp8c_dist::{Collective, Single};
use fp8c_passes::autodiff::Loss;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Instant;

/// Where the training samples come from.
#[derive(Clone, Debug)]
pub enum DataSource {
    /// A NumPy `.npz` archive, one sample per row (`--data`).
    Npz {
        /// The archive.
        path: PathBuf,
        /// Graph input → array key where they differ (`--input NAME=KEY`).
        inputs: BTreeMap<String, String>,
        /// The array of the labels or the target (`--labels`).
        labels: String,
    },
    /// Any file's bytes as byte-level tokens, next-byte labels (`--text`, `--seq-len`).
    Text(PathBuf),
    /// Arrays already in memory (a binding's NumPy arrays), one sample per row, read as an
    /// archive's arrays are.
    Arrays {
        /// The arrays by name.
        arrays: BTreeMap<String, Tensor>,
        /// Graph input → array name where they differ.
        inputs: BTreeMap<String, String>,
        /// The array of the labels or the target.
        labels: String,
        /// What messages call them (`the arrays given`).
        source: String,
    },
}

impl DataSource {
    /// The file read (none for arrays in memory).
    pub fn path(&self) -> Option<&Path> {
        match self {
            DataSource::Npz { path, .. } | DataSource::Text(path) => Some(path),
            DataSource::Arrays { .. } => None,
        }
    }
}

/// Everything a training run is asked to do.
#[derive(Clone, Debug)]
pub struct TrainConfig {
    /// The model: an ONNX file or IR text.
    pub model: PathBuf,
    /// The model output the loss reads (default: the model's only output).
    pub output: Option<String>,
    /// The samples.
    pub data: DataSource,
    /// Precision, recipe and policy (the shared compile flags; `--config`).
    pub compile: CompileSettings,
    /// Training settings given by the caller (over the config's `[train]` table).
    pub train: TrainSettings,
    /// The backend.
    pub device: Device,
    /// Checkpoint folder (`--checkpoint`): written at the end and every `checkpoint_every`.
    pub checkpoint: Option<PathBuf>,
    /// Steps between checkpoints (0: only at the end).
    pub checkpoint_every: u64,
    /// Continue from this checkpoint (`--resume`).
    pub resume: Option<PathBuf>,
    /// The CSV log (`--log`).
    pub log: Option<PathBuf>,
    /// The loss plot (`--plot`, .svg or .png).
    pub plot: Option<PathBuf>,
    /// The model with the trained weights (`-o`, an ONNX source only).
    pub save_onnx: Option<PathBuf>,
    /// Time every step of the training program (`--profile`).
    pub profile: bool,
    /// Test hook: steps whose gradients are made NaN.
    pub poison_steps: Vec<u64>,
    /// Raised (by a signal handler) to stop after the step in flight, saving the state.
    pub stop: Option<Arc<AtomicBool>>,
    /// The ranks of a data-parallel run ([`crate::dist::init`]; None: this process alone).
    /// Each step spans `accumulate` micro-batches on every rank; rank 0 writes the outputs.
    pub comm: Option<Arc<dyn Collective>>,
}

impl TrainConfig {
    /// A run of `model` on `data` with every other setting at its default.
    pub fn new(model: impl Into<PathBuf>, data: DataSource) -> TrainConfig {
        TrainConfig {
            model: model.into(),
            output: None,
            data,
            compile: CompileSettings::default(),
            train: TrainSettings::default(),
            device: Device::Cpu,
            checkpoint: None,
            checkpoint_every: 0,
            resume: None,
            log: None,
            plot: None,
            save_onnx: None,
            profile: false,
            poison_steps: Vec::new(),
            stop: None,
            comm: None,
        }
    }
}

/// What a prepared run is about to do (for the caller's summary line).
#[derive(Clone, Debug)]
pub struct RunInfo {
    /// The model file.
    pub model: PathBuf,
    /// Samples in the data.
    pub rows: u64,
    /// Samples per micro-batch.
    pub batch: u64,
    /// Micro-batches per step.
    pub accumulate: u32,
    /// The output the loss reads.
    pub output: String,
    /// The loss.
    pub loss: Loss,
    /// The optimizer.
    pub optimizer: OptimizerKind,
    /// The base learning rate.
    pub lr: f32,
    /// `f32`, `bf16` or `fp8`.
    pub precision: &'static str,
    /// Trained parameters.
    pub trained: usize,
    /// The step the run starts at (after `--resume`).
    pub start_step: u64,
    /// The step it ends at.
    pub steps: u64,
    /// Seconds spent loading, reading and compiling.
    pub prepare_seconds: f64,
    /// What loading the model warned about.
    pub warnings: Vec<String>,
    /// This process's rank and the number of ranks.
    pub rank: (usize, usize),
}

/// A prepared training run.
pub struct TrainRun {
    config: TrainConfig,
    info: RunInfo,
    data: Dataset,
    trainer: Trainer,
    meta: Meta,
    seed: u64,
    outputs: Vec<Output>,
    /// The model as loaded and what the data was read with (for [`TrainRun::step_on`]).
    model: Model,
    data_opts: DataOptions,
}

/// What [`TrainRun::finish`] wrote.
#[derive(Clone, Debug, Default)]
pub struct Finished {
    /// The final checkpoint: its folder and step.
    pub checkpoint: Option<(PathBuf, u64)>,
    /// The plot written.
    pub plot: Option<PathBuf>,
    /// The trained model written, and the trained parameters it could not hold (not
    /// initializers of the source model).
    pub saved_onnx: Option<(PathBuf, Vec<String>)>,
}

impl TrainRun {
    /// Prepares `config` (see the module docs).
    pub fn prepare(config: &TrainConfig) -> Result<TrainRun> {
        let started = Instant::now();
        if config.compile.stop_after.is_some() {
            bail!(
                "--stop-after: a training run needs the whole pipeline (fp8c compile --stop-after PASS prints the IR after a pass)"
            );
        }
        let cfg_file = config.compile.read_config()?;
        let table_source = cfg_file
            .as_ref()
            .map(|c| format!("{}[train] ", c.prefix()))
            .unwrap_or_default();
        let settings = config
            .train
            .clone()
            .over(cfg_file.as_ref().and_then(|c| c.train.as_ref()))
            .resolve(&table_source)?;
        let opts = config
            .compile
            .options_with(cfg_file.as_ref(), |r| r.recipe_for(Purpose::Training))?;
        let recipe_gw_hp = config
            .compile
            .recipe_options(cfg_file.as_ref())
            .wgrad_high_precision();
        // The loss's output (and only it) is kept: an unused branch with unsupported ops, such
        // as a classifier's label branch, is pruned before import.
        let model = Model::load_with(
            &config.model,
            &LoadOptions {
                outputs: config.output.iter().cloned().collect(),
            },
        )?;
        let output = pick_output(&model, config.output.as_deref())?;
        let mut options = settings.options.clone();
        options.output = output.clone();
        options.wgrad_high_precision |= recipe_gw_hp;
        options.poison = !config.poison_steps.is_empty();
        options.validate()?;
        let comm: Arc<dyn Collective> = config.comm.clone().unwrap_or_else(|| Arc::new(Single));
        let writer = comm.rank() == 0;
        if options.activations == fp8c_passes::autodiff::SavedActivations::Bf16
            && opts.policy.mode == fp8c_passes::precision::PrecisionMode::F32
        {
            bail!(
                "--activations bf16 keeps saved activations in bf16, but --precision f32 keeps every value in f32: train with --precision bf16 or fp8, or keep --activations fp8"
            );
        }
        if options.shard_optimizer
            && options.optimizer_state != fp8c_passes::autodiff::StateDtype::F32
        {
            // The shards are slices of the f32 moments the optimizer step reads directly.
            bail!(
                "--shard optimizer splits f32 optimizer moments, but --optimizer-state {} stores them narrow: use one or the other",
                match options.optimizer_state {
                    fp8c_passes::autodiff::StateDtype::Bf16 => "bf16",
                    _ => "fp8",
                }
            );
        }
        // Every output target is checked before any step runs: a bad one must not cost the
        // run. Rank 0 writes them.
        let outputs = if writer {
            check_outputs(config)?
        } else {
            Vec::new()
        };
        let data_opts = DataOptions {
            inputs: match &config.data {
                DataSource::Npz { inputs, .. } | DataSource::Arrays { inputs, .. } => {
                    inputs.clone()
                }
                DataSource::Text(_) => BTreeMap::new(),
            },
            labels: match &config.data {
                DataSource::Npz { labels, .. } | DataSource::Arrays { labels, .. } => {
                    labels.clone()
                }
                DataSource::Text(_) => "labels".into(),
            },
            loss: options.loss,
            batch: settings.batch,
        };
        let data = match &config.data {
            DataSource::Npz { path, .. } => Dataset::load(path, &model, &data_opts)?,
            DataSource::Text(path) => {
                Dataset::from_text(path, settings.seq_len, &model, &data_opts)?
            }
            DataSource::Arrays { arrays, source, .. } => {
                Dataset::from_arrays(arrays.clone(), source, &model, &data_opts)?
            }
        };
        let mut meta = Meta::new(
            &config.model.display().to_string(),
            precision_name(opts.policy.mode),
            match options.loss {
                Loss::CrossEntropy => "ce",
                Loss::Mse => "mse",
                Loss::Scalar => "scalar",
            },
            settings.seed,
            settings.batch,
        );
        meta.accumulate = options.accumulate;
        meta.ranks = comm.size() as u32;
        if options.shard_optimizer && comm.size() > 1 {
            meta.shard = "optimizer".into();
        }
        let meta = meta.with_model_file(&config.model)?;
        if comm.size() > 1 {
            same_run_on_every_rank(&*comm, config, &meta, &data)?;
        }
        let forward = data.forward_model(&model, settings.batch, &output)?;
        let spec = options.spec();
        config.device.check()?;
        let mut trainer = Trainer::for_model_on(
            &forward,
            &spec,
            &opts,
            config.device,
            comm.clone(),
            super::split::Parallel {
                shard_optimizer: options.shard_optimizer,
                fp8_all_gather: options.fp8_all_gather,
            },
        )?;
        trainer.set_profiling(config.profile);
        let mut start_step = 0;
        if let Some(dir) = &config.resume {
            start_step = checkpoint::load(dir, &mut trainer, &meta)?;
        }
        let info = RunInfo {
            model: config.model.clone(),
            rows: data.rows,
            batch: settings.batch,
            accumulate: options.accumulate,
            output,
            loss: options.loss,
            optimizer: options.optimizer,
            lr: options.lr,
            precision: precision_name(opts.policy.mode),
            trained: trainer.trained().len(),
            start_step,
            steps: options.steps,
            prepare_seconds: started.elapsed().as_secs_f64(),
            warnings: model.warnings().to_vec(),
            rank: (comm.rank(), comm.size()),
        };
        let mut config = config.clone();
        if !writer {
            // Only rank 0 writes: the other ranks keep their copy of the state in memory.
            config.log = None;
            config.plot = None;
            config.save_onnx = None;
            config.checkpoint = None;
        }
        Ok(TrainRun {
            config,
            info,
            data,
            trainer,
            meta,
            seed: settings.seed,
            outputs,
            model,
            data_opts,
        })
    }

    /// One step on the caller's batch instead of the data's (an iterator's next batch): the
    /// arrays are checked and read as the data's are (`source` names them in messages) and
    /// must hold exactly one batch of rows. The step is the one [`TrainRun::fit`] runs, at
    /// the trainer's current step; checkpoints and the trained model are
    /// [`TrainRun::finish`]'s. A run that accumulates micro-batches takes them from its data.
    pub fn step_on(
        &mut self,
        arrays: BTreeMap<String, Tensor>,
        source: &str,
    ) -> Result<super::trainer::StepReport> {
        if self.info.accumulate > 1 {
            bail!(
                "{source}: a step on a given batch needs accumulate = 1 (this run accumulates {} micro-batches per step: train on the data with fit)",
                self.info.accumulate
            );
        }
        let d = Dataset::from_arrays(arrays, source, &self.model, &self.data_opts)?;
        if d.rows != self.info.batch {
            bail!(
                "{source}: {} rows, but the training step was compiled for batches of {}",
                d.rows,
                self.info.batch
            );
        }
        let batch = super::data::Batch {
            inputs: d.inputs.into_iter().collect(),
            labels: d.labels,
        };
        let feed = batch.feed(self.trainer.spec());
        self.trainer.step(&feed)
    }

    /// Sets the flag that stops the loop after the step in flight (a signal handler's).
    pub fn set_stop(&mut self, stop: Arc<AtomicBool>) {
        self.config.stop = Some(stop);
    }

    /// What the run is about to do.
    pub fn info(&self) -> &RunInfo {
        &self.info
    }

    /// The trainer (its notes, precision decisions, profile, state).
    pub fn trainer(&self) -> &Trainer {
        &self.trainer
    }

    /// Runs the training loop, reporting each step to `observer` and to the `--log` CSV.
    /// When the log cannot be written any more, the state is saved (to `--checkpoint`, or a
    /// new `fp8c-interrupted-*` folder) before the error is returned.
    pub fn fit(&mut self, observer: &mut dyn Observer) -> Result<Fit> {
        let mut log = self
            .config
            .log
            .as_deref()
            .map(|p| CsvLog::open(p, self.info.start_step))
            .transpose()?;
        let opts = FitOptions {
            steps: self.info.steps,
            batch: self.info.batch,
            seed: self.seed,
            checkpoint_dir: self.config.checkpoint.clone(),
            meta: Some(self.meta.clone()),
            checkpoint_every: self.config.checkpoint_every,
            stop: self.config.stop.clone(),
            poison_steps: self.config.poison_steps.clone(),
        };
        let (fit, failed) = match log.as_mut() {
            Some(log) => self
                .trainer
                .fit_partial(&self.data, &opts, &mut Tee(observer, log)),
            None => self.trainer.fit_partial(&self.data, &opts, observer),
        };
        let flushed = log.as_mut().map_or(Ok(()), CsvLog::flush);
        let Some(e) = failed.or(flushed.err()) else {
            return Ok(fit);
        };
        // Nothing trained is lost: the state first, then every other output that can still be
        // written (the plot, -o); the error says what was.
        let e = self.save_after_failure(e);
        if self.trainer.is_sharded() || fit.losses.is_empty() {
            return Err(e);
        }
        let (done, _) = self.finish_outputs(&fit, false);
        let mut wrote: Vec<String> = Vec::new();
        if let Some(p) = &done.plot {
            wrote.push(format!("--plot {}", p.display()));
        }
        if let Some((p, _)) = &done.saved_onnx {
            wrote.push(format!(
                "-o {} (the model after step {})",
                p.display(),
                self.trainer.steps()
            ));
        }
        Err(if wrote.is_empty() {
            e
        } else {
            Error::Invalid(format!("{e}; written anyway: {}", wrote.join(", ")))
        })
    }

    /// Saves the state after a failed write so nothing trained is lost, and says where in the
    /// error.
    fn save_after_failure(&self, e: Error) -> Error {
        if !matches!(e.root(), Error::Io { .. }) || self.trainer.is_sharded() {
            return e;
        }
        let dir = self
            .config
            .checkpoint
            .clone()
            .unwrap_or_else(super::fit::interrupted_dir);
        match checkpoint::save(&dir, &self.trainer, &self.meta) {
            Ok(()) => Error::Invalid(format!(
                "{e}; the whole training state after step {} is in {} (continue with --resume {})",
                self.trainer.steps(),
                dir.display(),
                dir.display()
            )),
            Err(save) => {
                Error::Invalid(format!("{e}; saving the training state failed too: {save}"))
            }
        }
    }

    /// Writes the final checkpoint, the plot (of `fit`'s losses, or of the whole `--log`) and
    /// the trained model, each attempted even when another failed: what was written, and the
    /// first failure (a run whose every step was skipped is one).
    /// A write that fails without `--checkpoint` (`-o` or the plot on a full disk) saves the
    /// state first, as a signal does, so the steps run are not lost.
    pub fn finish(&self, fit: &Fit) -> (Finished, Option<Error>) {
        let (done, failed) = self.finish_outputs(fit, true);
        let failed = match failed {
            Some(e) if self.config.checkpoint.is_none() && fit.steps_run() > fit.skipped => {
                Some(self.save_after_failure(e))
            }
            other => other,
        };
        (done, failed)
    }

    /// [`TrainRun::finish`]; without `checkpoint` the checkpoint is left as it is (after a
    /// failed write, which saved what it could).
    fn finish_outputs(&self, fit: &Fit, checkpoint: bool) -> (Finished, Option<Error>) {
        let mut done = Finished::default();
        let mut first_error: Option<Error> = None;
        // A sharded state is gathered by every rank together; rank 0 writes it.
        let gathered = if self.trainer.is_sharded() {
            match self.trainer.try_state() {
                Ok(s) => Some(s),
                Err(e) => return (done, Some(e)),
            }
        } else {
            None
        };
        let mut keep = |r: Result<()>| {
            if let Err(e) = r
                && first_error.is_none()
            {
                first_error = Some(e);
            }
        };
        if let Some(dir) = self.config.checkpoint.as_ref().filter(|_| checkpoint) {
            let t = &self.trainer;
            let r = match &gathered {
                Some(state) => {
                    checkpoint::save_state(dir, state, t.steps(), t.skipped_steps(), &self.meta)
                }
                None => checkpoint::save(dir, t, &self.meta),
            };
            if r.is_ok() {
                done.checkpoint = Some((dir.clone(), self.trainer.steps()));
            }
            keep(r);
        }
        if let Some(p) = &self.config.plot {
            let r = self.plot(p, fit);
            if r.is_ok() {
                done.plot = Some(p.clone());
            }
            keep(r);
        }
        if let Some(dst) = &self.config.save_onnx {
            let ran = fit.steps_run();
            let r = if ran > 0 && fit.skipped == ran {
                Err(Error::Invalid(format!(
                    "every one of the {ran} steps was skipped (non-finite loss or gradient): no trained model written to -o {}",
                    dst.display()
                )))
            } else {
                self.save_onnx(dst, gathered.as_ref()).map(|missing| {
                    done.saved_onnx = Some((dst.clone(), missing));
                })
            };
            keep(r);
        }
        let ran = fit.steps_run();
        if first_error.is_none() && ran > 0 && fit.skipped == ran {
            first_error = Some(Error::Invalid(format!(
                "every one of the {ran} steps was skipped (non-finite loss or gradient): nothing was trained"
            )));
        }
        (done, first_error)
    }

    fn plot(&self, path: &Path, fit: &Fit) -> Result<()> {
        let label = self.info.precision;
        let series = match &self.config.log {
            Some(l) => plot::read_csv(l, label).map_err(Error::Invalid)?,
            None => plot::Series {
                label: label.into(),
                points: fit.losses.iter().map(|&(s, l)| (s as f64, l)).collect(),
            },
        };
        plot::plot(&[series], "training loss", 10, path).map_err(Error::Invalid)
    }

    /// Writes the trained parameters into a copy of the source model (`-o`).
    fn save_onnx(
        &self,
        dst: &Path,
        gathered: Option<&BTreeMap<String, Tensor>>,
    ) -> Result<Vec<String>> {
        let weights = match gathered {
            Some(state) => state.clone(),
            None => self.trainer.weights(),
        };
        let trained: BTreeMap<String, Tensor> = weights
            .into_iter()
            .filter(|(k, _)| self.trainer.trained().contains(k))
            .collect();
        crate::export::save_onnx(&self.config.model, dst, &trained).map_err(|e| match e.root() {
            Error::Onnx(o) if matches!(o.kind(), fp8c_onnx::OnnxError::Decode { .. }) => {
                Error::Invalid(format!("--save-onnx needs an ONNX model; {e}"))
            }
            _ => e,
        })
    }

    /// The checked output targets (their flags and paths).
    pub fn outputs(&self) -> &[Output] {
        &self.outputs
    }
}

/// Refuses a data-parallel run whose ranks were given different models, flags or data: each
/// rank's digest of what it trains (the model's and the data's SHA-256, every setting) is
/// gathered and compared with rank 0's, and every rank fails alike, rank 0 saying why.
fn same_run_on_every_rank(
    comm: &dyn Collective,
    config: &TrainConfig,
    meta: &Meta,
    data: &Dataset,
) -> Result<()> {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    h.update(meta.model_sha256.as_bytes());
    for (name, t) in &data.inputs {
        h.update(name.as_bytes());
        h.update(t.bytes());
    }
    h.update(data.labels.bytes());
    let settings = format!(
        "{:?} {:?} {:?} {:?} {} {:?} {:?}",
        config.compile,
        config.train,
        config.output,
        config.device,
        config.checkpoint_every,
        config.resume.is_some(),
        config.poison_steps
    );
    h.update(settings.as_bytes());
    let mine: [u8; 32] = h.finalize().into();
    let all = comm.all_gather_bytes(&mine).map_err(super::split::dist)?;
    let odd: Vec<usize> = (1..all.len()).filter(|&r| all[r] != all[0]).collect();
    if !odd.is_empty() {
        let hex = |b: &[u8]| {
            b[..6]
                .iter()
                .map(|x| format!("{x:02x}"))
                .collect::<String>()
        };
        return Err(Error::Ranks(format!(
            "the {} ranks were not started alike: rank{} {} {} another model, other flags or other data than rank 0 (digest {}… against rank 0's {}…); start every rank with the same command",
            all.len(),
            if odd.len() > 1 { "s" } else { "" },
            odd.iter()
                .map(|r| r.to_string())
                .collect::<Vec<_>>()
                .join(", "),
            if odd.len() > 1 { "have" } else { "has" },
            hex(&all[odd[0]]),
            hex(&all[0])
        )));
    }
    Ok(())
}

/// Checks every output target of `config` before any work: the path itself (no link, no
/// directory, not an input) and that its folder takes a new file now.
fn check_outputs(config: &TrainConfig) -> Result<Vec<Output>> {
    let inputs_read: Vec<&Path> = std::iter::once(config.model.as_path())
        .chain(config.data.path())
        .collect();
    let mut outs = Vec::new();
    if let Some(dst) = &config.save_onnx {
        outs.push(Output::check("-o", dst, &inputs_read)?);
    }
    if let Some(p) = &config.plot {
        plot::check_target(p).map_err(|e| Error::Invalid(format!("--plot {e}")))?;
        outs.push(Output::check("--plot", p, &inputs_read)?);
    }
    if let Some(p) = &config.log {
        outs.push(Output::check("--log", p, &inputs_read)?);
    }
    if let Some(dir) = &config.checkpoint {
        checkpoint::check_dir(dir)?;
        outs.push(Output::check(
            "--checkpoint",
            &dir.join(checkpoint::STATE_FILE),
            &[],
        )?);
    }
    for o in &outs {
        o.probe()?;
    }
    if config.compile.stop_after.is_some() {
        bail!(
            "--stop-after: a training run needs the whole pipeline (use fp8c compile --stop-after to see the IR after a pass)"
        );
    }
    Ok(outs)
}
