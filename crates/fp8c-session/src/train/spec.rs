//! What to train and how, as plain options (what `fp8c train`'s flags give), turned into the
//! autodiff pass's [`TrainSpec`]; which output to train; accuracy of a batch.

use crate::error::{Result, bail};
use crate::model::Model;
use fp8c_passes::autodiff::{
    Loss, LrSchedule, Optimizer, OptimizerSpec, Recompute, SavedActivations, StateDtype, TrainSpec,
};

/// The optimizer rule.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OptimizerKind {
    /// AdamW (decoupled weight decay; default decay 0.01).
    #[default]
    AdamW,
    /// SGD with momentum (default decay 0).
    Sgd,
}

/// The learning-rate schedule.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ScheduleKind {
    /// The same learning rate at every step.
    #[default]
    Constant,
    /// Linear warmup, then cosine decay to `min_lr` at the last step.
    Cosine,
}

/// Training options.
#[derive(Clone, Debug)]
pub struct TrainOptions {
    /// The model output the loss reads.
    pub output: String,
    /// The loss.
    pub loss: Loss,
    /// The optimizer.
    pub optimizer: OptimizerKind,
    /// Base learning rate.
    pub lr: f32,
    /// Learning-rate schedule.
    pub schedule: ScheduleKind,
    /// Warmup steps of the cosine schedule.
    pub warmup: u64,
    /// Total steps of the run (the cosine schedule ends there).
    pub steps: u64,
    /// Final learning rate of the cosine schedule (default lr/10).
    pub min_lr: Option<f32>,
    /// Weight decay of rank ≥ 2 parameters (default: the optimizer's).
    pub weight_decay: Option<f32>,
    /// Clip gradients to this global L2 norm before the update (None: no clipping).
    pub clip_grad_norm: Option<f32>,
    /// Weight gradients of FP8 GEMMs in f32 from the unquantized operands (torchao's
    /// `rowwise_with_gw_hp`); dgrad stays FP8.
    pub wgrad_high_precision: bool,
    /// Micro-batches per optimizer step (gradient accumulation; 1: none). The training step
    /// then reads the input `fp8c_passes::autodiff::APPLY_INPUT` (1 on the last micro-batch).
    pub accumulate: u32,
    /// SGD momentum.
    pub momentum: f32,
    /// Parameter-name globs that do not train.
    pub freeze: Vec<String>,
    /// Add the `train.poison` test-hook input (NaN there makes the step's gradients NaN).
    pub poison: bool,
    /// With several ranks, each keeps and updates 1/N of the master weights and optimizer
    /// moments (`--shard optimizer`, ZeRO-1); results identical to the unsharded run.
    pub shard_optimizer: bool,
    /// With `shard_optimizer`: all-gather the FP8 GEMM weights as FP8 codes
    /// (`--fp8-all-gather`); results identical.
    pub fp8_all_gather: bool,
    /// How the activations backward reads are kept (`--activations`).
    pub activations: SavedActivations,
    /// What backward computes again instead of keeping (`--recompute`).
    pub recompute: Recompute,
    /// How the optimizer moments are stored between steps (`--optimizer-state`).
    pub optimizer_state: StateDtype,
}

impl TrainOptions {
    /// Cross-entropy on `output` with AdamW at lr 1e-3, constant schedule, 100 steps.
    pub fn new(output: &str) -> Self {
        TrainOptions {
            output: output.to_string(),
            loss: Loss::CrossEntropy,
            optimizer: OptimizerKind::AdamW,
            lr: 1e-3,
            schedule: ScheduleKind::Constant,
            warmup: 0,
            steps: 100,
            min_lr: None,
            weight_decay: None,
            clip_grad_norm: None,
            wgrad_high_precision: false,
            accumulate: 1,
            momentum: 0.9,
            freeze: Vec::new(),
            poison: false,
            shard_optimizer: false,
            fp8_all_gather: false,
            activations: SavedActivations::Fp8,
            recompute: Recompute::None,
            optimizer_state: StateDtype::F32,
        }
    }

    /// Checks the hyper-parameters before any step runs: every float finite and in its range
    /// (a NaN learning rate would write NaN into every weight at step 0). Messages name the
    /// `fp8c train` flag.
    pub fn validate(&self) -> Result<()> {
        let finite = |flag: &str, v: f32| -> Result<()> {
            if !v.is_finite() {
                bail!("{flag} {v}: must be a finite number");
            }
            Ok(())
        };
        finite("--lr", self.lr)?;
        if self.lr <= 0.0 || self.lr > 10.0 {
            bail!("--lr {}: must be in (0, 10]", self.lr);
        }
        if let Some(m) = self.min_lr {
            finite("--min-lr", m)?;
            if m < 0.0 || m > self.lr {
                bail!("--min-lr {m}: must be in [0, --lr {}]", self.lr);
            }
        }
        if let Some(wd) = self.weight_decay {
            finite("--weight-decay", wd)?;
            if !(0.0..=1.0).contains(&wd) {
                bail!("--weight-decay {wd}: must be in [0, 1]");
            }
        }
        finite("--momentum", self.momentum)?;
        if let Some(c) = self.clip_grad_norm {
            finite("--clip-grad-norm", c)?;
            if c <= 0.0 {
                bail!("--clip-grad-norm {c}: must be > 0");
            }
        }
        if !(0.0..1.0).contains(&self.momentum) {
            bail!("--momentum {}: must be in [0, 1)", self.momentum);
        }
        if self.accumulate == 0 {
            bail!("--accumulate 0: at least one micro-batch per step");
        }
        if self.steps == 0 {
            bail!("--steps 0: nothing to train");
        }
        Ok(())
    }

    /// The autodiff pass's spec. The labels (or target) input is `train.labels`; with
    /// cross-entropy the trained output stays a graph output (for accuracy).
    pub fn spec(&self) -> TrainSpec {
        let mut spec = TrainSpec::new(&self.output, self.loss);
        spec.target_input = "train.labels".into();
        let kind = match self.optimizer {
            OptimizerKind::AdamW => Optimizer::adamw(),
            OptimizerKind::Sgd => Optimizer::Sgd {
                momentum: self.momentum,
                nesterov: false,
            },
        };
        let schedule = match self.schedule {
            ScheduleKind::Constant => LrSchedule::Constant,
            ScheduleKind::Cosine => LrSchedule::WarmupCosine {
                warmup: self.warmup,
                total: self.steps,
                min_lr: self.min_lr.unwrap_or(self.lr / 10.0),
            },
        };
        spec.optimizer = Some(OptimizerSpec {
            kind,
            lr: self.lr,
            weight_decay: self.weight_decay.unwrap_or(match self.optimizer {
                OptimizerKind::AdamW => 0.01,
                OptimizerKind::Sgd => 0.0,
            }),
            schedule,
            decay_vectors: false,
            clip_grad_norm: self.clip_grad_norm,
            state: self.optimizer_state,
        });
        spec.freeze = self.freeze.clone();
        spec.poison_input = self.poison;
        spec.keep_output = self.loss == Loss::CrossEntropy;
        spec.wgrad_high_precision = self.wgrad_high_precision;
        spec.accumulate = self.accumulate;
        spec.activations = self.activations;
        spec.recompute = self.recompute;
        spec
    }
}

/// The output to train: `wanted` if the model has it, else the model's only output.
pub fn pick_output(model: &Model, wanted: Option<&str>) -> Result<String> {
    let outputs = model.outputs();
    let output = match (wanted, outputs.as_slice()) {
        (Some(o), _) => o.to_string(),
        (None, [one]) => one.clone(),
        (None, outs) => bail!(
            "{}the model has {} outputs ({}); choose the one to train with --output NAME",
            model
                .path()
                .map(|p| format!("{}: ", p.display()))
                .unwrap_or_default(),
            outs.len(),
            outs.join(", ")
        ),
    };
    if !outputs.contains(&output) {
        bail!(
            "--output {output}: the model has no such output (its outputs are: {})",
            outputs.join(", ")
        );
    }
    Ok(output)
}

/// Fraction of rows whose argmax over the last axis equals the label, over the rows whose
/// label is not `IGNORE_INDEX` (None when the shapes do not fit: not a classifier output, or
/// when every row is ignored).
pub fn accuracy(logits: &fp8c_ir::Tensor, labels: &fp8c_ir::Tensor) -> Option<f64> {
    let (hits, counted) = accuracy_counts(logits, labels)?;
    (counted > 0).then(|| hits as f64 / counted as f64)
}

/// The rows whose argmax over the last axis equals the label, and the rows counted (label
/// not `IGNORE_INDEX`); None when the shapes do not fit a classifier output.
pub fn accuracy_counts(logits: &fp8c_ir::Tensor, labels: &fp8c_ir::Tensor) -> Option<(u64, u64)> {
    let v = logits.to_f64_vec().ok()?;
    let l = labels.to_i64_vec().ok()?;
    let c = *logits.shape().last()? as usize;
    if c == 0 || l.is_empty() || v.len() != l.len() * c {
        return None;
    }
    let counted = l
        .iter()
        .filter(|&&lab| lab != fp8c_ir::IGNORE_INDEX)
        .count();
    let hits = l
        .iter()
        .enumerate()
        .filter(|&(r, &lab)| {
            let row = &v[r * c..][..c];
            let best = (0..c).fold(0, |b, j| if row[j] > row[b] { j } else { b });
            best as i64 == lab
        })
        .count();
    Some((hits as u64, counted as u64))
}

#[cfg(test)]
mod tests {
    use super::*;
    use fp8c_ir::Tensor;

    #[test]
    fn accuracy_counts_argmax_hits() {
        let logits = Tensor::from_f32(vec![2, 3], &[0.1, 0.9, 0.0, 2.0, 1.0, 0.0]);
        let labels = Tensor::from_i64(vec![2], &[1, 2]);
        assert_eq!(accuracy(&logits, &labels), Some(0.5));
        assert_eq!(accuracy(&logits, &Tensor::from_i64(vec![1], &[0])), None);
    }

    #[test]
    fn spec_defaults_follow_the_optimizer() {
        let mut o = TrainOptions::new("logits");
        assert_eq!(o.spec().optimizer.unwrap().weight_decay, 0.01);
        o.optimizer = OptimizerKind::Sgd;
        o.schedule = ScheduleKind::Cosine;
        let s = o.spec().optimizer.unwrap();
        assert_eq!(s.weight_decay, 0.0);
        assert!(matches!(
            s.schedule,
            LrSchedule::WarmupCosine { total: 100, .. }
        ));
    }
}
