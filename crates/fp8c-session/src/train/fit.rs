//! The training loop: [`Trainer::fit`] runs steps from the trainer's current step up to
//! `FitOptions::steps`, each step one optimizer update over `accumulate` micro-batches, and
//! reports every step to an [`Observer`] (a progress bar, a CSV log, a Python callback).
//! Checkpoints are written every `checkpoint_every` steps and when the stop flag is raised
//! (SIGINT/SIGTERM in the CLI): the step in flight finishes, the whole state is saved and
//! [`Fit::interrupted`] says where.
//!
//! Determinism: micro-batch `m` of step `s` is the data's batch number `s·accumulate + m`
//! (a function of the seed and that number alone), and a checkpoint holds every state entry,
//! so a resumed run continues with bit-identical losses.

use super::checkpoint;
use super::data::Dataset;
use super::spec::accuracy;
use super::trainer::{StepReport, Trainer};
use crate::error::{Context, Error, Result};
use fp8c_ir::Tensor;
use fp8c_passes::autodiff::{APPLY_INPUT, POISON_INPUT};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

/// What a training loop is asked to do.
#[derive(Clone, Debug, Default)]
pub struct FitOptions {
    /// The step to stop at (a resumed trainer continues from its own step).
    pub steps: u64,
    /// Samples per micro-batch.
    pub batch: u64,
    /// Seed of the data order.
    pub seed: u64,
    /// Where checkpoints go (None: no periodic checkpoints; an interrupted run then saves to
    /// a new `fp8c-interrupted-<time>` folder).
    pub checkpoint_dir: Option<PathBuf>,
    /// What checkpoints record about the run (None: [`Trainer::meta`] of this seed and batch).
    pub meta: Option<checkpoint::Meta>,
    /// Steps between periodic checkpoints (0: only at the end, by the caller).
    pub checkpoint_every: u64,
    /// Raised by the caller (a signal handler) to stop after the step in flight.
    pub stop: Option<Arc<AtomicBool>>,
    /// Test hook: these steps get NaN gradients (the trainer must have been built with
    /// `TrainOptions::poison`), so the non-finite skip can be checked end to end.
    pub poison_steps: Vec<u64>,
}

/// What a training loop reports to.
pub trait Observer {
    /// A step finished (applied or skipped).
    fn step(&mut self, _report: &StepReport) -> Result<()> {
        Ok(())
    }
    /// A checkpoint of the state after `step` steps was written to `dir`.
    fn checkpoint(&mut self, _dir: &Path, _step: u64) {}
}

/// An observer that reports nowhere.
pub struct Silent;

impl Observer for Silent {}

/// Two observers side by side: each report goes to the first, then the second.
pub struct Tee<'a>(pub &'a mut dyn Observer, pub &'a mut dyn Observer);

impl Observer for Tee<'_> {
    fn step(&mut self, report: &StepReport) -> Result<()> {
        self.0.step(report)?;
        self.1.step(report)
    }
    fn checkpoint(&mut self, dir: &Path, step: u64) {
        self.0.checkpoint(dir, step);
        self.1.checkpoint(dir, step);
    }
}

/// What a training loop ends with.
#[derive(Clone, Debug, Default)]
pub struct Fit {
    /// The trainer's step when the loop started.
    pub start_step: u64,
    /// `(step, loss)` of every step run.
    pub losses: Vec<(u64, f64)>,
    /// Wall time of the loop, seconds.
    pub seconds: f64,
    /// The newest batch accuracy reported (classification outputs).
    pub last_accuracy: Option<f64>,
    /// Steps among them whose update was skipped.
    pub skipped: u64,
    /// Set when the stop flag ended the loop early: the checkpoint folder holding the state.
    pub interrupted: Option<PathBuf>,
}

impl Fit {
    /// Steps run by this loop.
    pub fn steps_run(&self) -> u64 {
        self.losses.len() as u64
    }

    /// Steps per second of the loop.
    pub fn steps_per_s(&self) -> f64 {
        self.losses.len() as f64 / self.seconds.max(1e-9)
    }

    /// The mean loss of the last `n` steps run (NaN when none ran).
    pub fn tail_loss(&self, n: usize) -> f64 {
        let n = self.losses.len().min(n);
        if n == 0 {
            return f64::NAN;
        }
        self.losses[self.losses.len() - n..]
            .iter()
            .map(|p| p.1)
            .sum::<f64>()
            / n as f64
    }
}

/// Where an interrupted run without a checkpoint folder saves its state: a new folder
/// `fp8c-interrupted-<seconds since the epoch>` in the current directory.
pub fn interrupted_dir() -> PathBuf {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    PathBuf::from(format!("fp8c-interrupted-{secs}"))
}

impl Trainer {
    /// Runs one optimizer step, number `step`, on `data`: `accumulate` micro-batches (the
    /// last one applying the update), the loss their mean. `poison` makes its gradients NaN
    /// (the trainer's poison input; see [`FitOptions::poison_steps`]).
    pub fn train_step(
        &mut self,
        data: &Dataset,
        batch: u64,
        seed: u64,
        step: u64,
        poison: bool,
    ) -> Result<StepReport> {
        if self.split.is_some() {
            return self.split_train_step(data, batch, seed, step, poison);
        }
        let micro = u64::from(self.spec().accumulate.max(1));
        let (poison_input, target) = (self.spec().poison_input, self.spec().target_input.clone());
        let mut out = BTreeMap::new();
        let mut labels = None;
        let mut micro_loss = 0.0;
        for m in 0..micro {
            let b = data.batch(batch, seed, step * micro + m);
            let mut inputs = b.inputs.clone();
            inputs.insert(target.clone(), b.labels.clone());
            if poison_input {
                let p = if poison { f32::NAN } else { 0.0 };
                inputs.insert(POISON_INPUT.into(), Tensor::scalar_f32(p));
            }
            if micro > 1 {
                let last = if m + 1 == micro { 1.0 } else { 0.0 };
                inputs.insert(APPLY_INPUT.into(), Tensor::scalar_f32(last));
            }
            out = self
                .step_outputs(&inputs)
                .with_context(|| format!("step {step}"))?;
            micro_loss += scalar(&out, "loss");
            labels = Some(b.labels);
        }
        let labels = labels.expect("at least one micro-batch");
        Ok(StepReport {
            step,
            loss: micro_loss / micro as f64,
            lr: scalar(&out, "lr"),
            applied: scalar(&out, "finite") != 0.0,
            grad_norm: out.get("grad_norm").map(|_| scalar(&out, "grad_norm")),
            accuracy: out
                .get(&self.spec().output)
                .and_then(|l| accuracy(l, &labels)),
            elapsed_s: 0.0,
        })
    }

    /// [`Trainer::train_step`] of a split step: every rank's micro-batches, the reductions,
    /// one update ([`crate::train::split`]).
    fn split_train_step(
        &mut self,
        data: &Dataset,
        batch: u64,
        seed: u64,
        step: u64,
        poison: bool,
    ) -> Result<StepReport> {
        let spec = self.spec().clone();
        if !self.rescale.is_empty() {
            // Measured from the step's first micro-batch, on every rank alike, as a single
            // process measures it.
            let first = step * self.split.as_ref().map_or(1, |s| s.total());
            self.measure_scaling(&mut |t| {
                let split = t.split.as_mut().expect("a split step");
                split.refresh(&*t.exe)?;
                let inputs = split.one_micro_batch(data, &spec, batch, seed, first)?;
                t.exe.run(&inputs)?;
                Ok(())
            })
            .with_context(|| format!("step {step}"))?;
        }
        self.initial = false;
        let split = self.split.as_mut().expect("a split step");
        split.refresh(&*self.exe)?;
        let reduced = split
            .micro_batches(
                data,
                &spec,
                batch,
                seed,
                step,
                poison,
                self.profile.as_mut(),
            )
            .with_context(|| format!("step {step}"))?;
        let out = match self.profile.as_mut() {
            Some(p) => {
                let mut timer = p.start_skipping(self.exe.precomputed_steps());
                let out = self
                    .exe
                    .run_observed(&reduced.inputs, &mut |s, i, o| timer.observe(s, i, o))?;
                timer.finish();
                out
            }
            None => self.exe.run(&reduced.inputs)?,
        };
        let report = super::split::report(step, &reduced, &out);
        self.counts.0 += 1;
        if !report.applied {
            self.counts.1 += 1;
        }
        Ok(report)
    }

    /// Whether any rank raised its stop flag (one decision for all ranks).
    fn stop_requested(&self, flag: Option<&Arc<AtomicBool>>) -> Result<bool> {
        let mine = flag.is_some_and(|s| s.load(Ordering::Relaxed));
        match self.collective() {
            Some(comm) if comm.size() > 1 => {
                let mut v = [if mine { 1.0f32 } else { 0.0 }];
                comm.all_reduce_max_f32(&mut v)
                    .map_err(super::split::dist)?;
                Ok(v[0] > 0.0)
            }
            _ => Ok(mine),
        }
    }

    /// The training loop: steps from [`Trainer::steps`] up to `opts.steps` on `data`,
    /// each reported to `observer`; periodic checkpoints, and on the stop flag one checkpoint
    /// and an early end ([`Fit::interrupted`]). The final checkpoint, if any, is the caller's
    /// (it may want to write other outputs first).
    pub fn fit(
        &mut self,
        data: &Dataset,
        opts: &FitOptions,
        observer: &mut dyn Observer,
    ) -> Result<Fit> {
        let (fit, failed) = self.fit_partial(data, opts, observer);
        match failed {
            Some(e) => Err(e),
            None => Ok(fit),
        }
    }

    /// [`Trainer::fit`], returning what ran before an error with the error.
    pub(crate) fn fit_partial(
        &mut self,
        data: &Dataset,
        opts: &FitOptions,
        observer: &mut dyn Observer,
    ) -> (Fit, Option<Error>) {
        let t0 = Instant::now();
        let mut fit = Fit {
            start_step: self.steps(),
            ..Fit::default()
        };
        let skipped_before = self.skipped_steps();
        let r = self.fit_loop(data, opts, observer, &mut fit, t0);
        fit.seconds = t0.elapsed().as_secs_f64();
        fit.skipped = self.skipped_steps() - skipped_before;
        (fit, r.err())
    }

    fn fit_loop(
        &mut self,
        data: &Dataset,
        opts: &FitOptions,
        observer: &mut dyn Observer,
        fit: &mut Fit,
        t0: Instant,
    ) -> Result<()> {
        let meta = self.meta_of(opts);
        for step in fit.start_step..opts.steps {
            let poison = opts.poison_steps.contains(&step);
            let mut report = self.train_step(data, opts.batch, opts.seed, step, poison)?;
            report.elapsed_s = t0.elapsed().as_secs_f64();
            fit.last_accuracy = report.accuracy.or(fit.last_accuracy);
            fit.losses.push((step, report.loss));
            observer.step(&report)?;
            let done = step + 1;
            if self.stop_requested(opts.stop.as_ref())? && done < opts.steps {
                let dir = opts.checkpoint_dir.clone().unwrap_or_else(interrupted_dir);
                if self.save_on_rank_0(&dir, &meta)? {
                    observer.checkpoint(&dir, self.steps());
                }
                fit.interrupted = Some(dir);
                break;
            }
            if let Some(dir) = &opts.checkpoint_dir
                && opts.checkpoint_every > 0
                && done % opts.checkpoint_every == 0
                && done < opts.steps
                && self.save_on_rank_0(dir, &meta)?
            {
                observer.checkpoint(dir, self.steps());
            }
        }
        Ok(())
    }

    /// Saves the whole state to `dir` on rank 0 (every rank calls it: a sharded state is
    /// gathered first); true on the rank that wrote.
    pub(crate) fn save_on_rank_0(&self, dir: &Path, meta: &checkpoint::Meta) -> Result<bool> {
        let writer = self.rank().0 == 0;
        if !writer && !self.is_sharded() {
            return Ok(false);
        }
        let state = self.try_state()?;
        if writer {
            checkpoint::save_state(dir, &state, self.steps(), self.skipped_steps(), meta)?;
        }
        Ok(writer)
    }
}

/// The first value of output `k` as f64 (NaN when absent).
fn scalar(out: &BTreeMap<String, Tensor>, k: &str) -> f64 {
    out.get(k)
        .and_then(|t| t.to_f64_vec().ok())
        .and_then(|v| v.first().copied())
        .unwrap_or(f64::NAN)
}
