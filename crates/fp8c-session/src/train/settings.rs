//! Training settings as a caller gives them ([`TrainSettings`]: every field optional), from
//! flags (`fp8c train --lr 3e-3`) or from a config file's `[train]` table, merged field by
//! field (a flag given wins over the table, the table over the default) and resolved into
//! [`TrainOptions`] plus the run's batch, steps, seed and window length.
//!
//! The `[train]` table takes every training flag by its name with underscores, and the
//! Hugging Face `TrainingArguments` names users of that stack already write (`learning_rate`,
//! `gradient_accumulation_steps`, `max_grad_norm`, `warmup_steps`, `lr_scheduler_type`,
//! `max_steps`, `per_device_train_batch_size`) as aliases. Unknown keys are errors, so a typo
//! is not a silent default. The FP8 recipe (including each GEMM's accumulation) is the
//! `[recipe]` table's ([`crate::ConfigFile`]).
//!
//! ```toml
//! [train]
//! lr = 3e-3                     # or learning_rate
//! schedule = "cosine"           # or lr_scheduler_type; "constant"
//! warmup = 30                   # or warmup_steps
//! min_lr = 3e-4
//! weight_decay = 0.1
//! clip_grad_norm = 1.0          # or max_grad_norm
//! accumulate = 4                # or gradient_accumulation_steps
//! wgrad_high_precision = false
//! optimizer = "adamw"           # or "sgd"
//! momentum = 0.9
//! batch = 16                    # or per_device_train_batch_size
//! steps = 300                   # or max_steps
//! seq_len = 64
//! seed = 0
//! loss = "ce"                   # or "mse"
//! freeze = ["embed*"]
//! activations = "fp8"           # "high", "bf16"
//! recompute = "none"            # "attention", "layer"
//! optimizer_state = "f32"       # "bf16", "fp8"
//! ```

use super::spec::{OptimizerKind, ScheduleKind, TrainOptions};
use crate::error::Result;
use fp8c_passes::autodiff::{Loss, Recompute, SavedActivations, StateDtype};
use serde::Deserialize;

/// Training settings; `None` = not given (the other source's value, else the default).
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TrainSettings {
    /// `--lr` [default: 1e-3].
    #[serde(alias = "learning_rate")]
    pub lr: Option<f32>,
    /// `--schedule`: "constant" (default) or "cosine".
    #[serde(alias = "lr_scheduler_type")]
    pub schedule: Option<String>,
    /// `--warmup` [default: 0].
    #[serde(alias = "warmup_steps")]
    pub warmup: Option<u64>,
    /// `--min-lr` [default: lr/10].
    pub min_lr: Option<f32>,
    /// `--weight-decay` [default: 0.01 for adamw, 0 for sgd].
    pub weight_decay: Option<f32>,
    /// `--clip-grad-norm` [default: none].
    #[serde(alias = "max_grad_norm")]
    pub clip_grad_norm: Option<f32>,
    /// `--accumulate` [default: 1].
    #[serde(alias = "gradient_accumulation_steps")]
    pub accumulate: Option<u32>,
    /// `--wgrad-high-precision` [default: false].
    pub wgrad_high_precision: Option<bool>,
    /// `--optimizer`: "adamw" (default) or "sgd".
    pub optimizer: Option<String>,
    /// `--momentum` [default: 0.9].
    pub momentum: Option<f32>,
    /// `--batch` [default: 32].
    #[serde(alias = "per_device_train_batch_size")]
    pub batch: Option<u64>,
    /// `--steps` [default: 100].
    #[serde(alias = "max_steps")]
    pub steps: Option<u64>,
    /// `--seq-len` [default: 64].
    pub seq_len: Option<u64>,
    /// `--seed` [default: 0].
    pub seed: Option<u64>,
    /// `--loss`: "ce" (default) or "mse".
    pub loss: Option<String>,
    /// `--freeze` globs [default: none].
    pub freeze: Option<Vec<String>>,
    /// `--shard`: "none" (default) or "optimizer" (each rank keeps 1/N of the master weights
    /// and optimizer moments).
    pub shard: Option<String>,
    /// `--fp8-all-gather` [default: false].
    pub fp8_all_gather: Option<bool>,
    /// `--activations`: "fp8" (default), "high" or "bf16".
    pub activations: Option<String>,
    /// `--recompute`: "none" (default), "attention" or "layer".
    pub recompute: Option<String>,
    /// `--optimizer-state`: "f32" (default), "bf16" or "fp8".
    pub optimizer_state: Option<String>,
}

/// Samples per step when nothing says otherwise.
pub const DEFAULT_BATCH: u64 = 32;
/// Steps of a run when nothing says otherwise.
pub const DEFAULT_STEPS: u64 = 100;
/// Tokens per `--text` window when nothing says otherwise.
pub const DEFAULT_SEQ_LEN: u64 = 64;

/// Resolved settings: the training options and the run's shape.
#[derive(Clone, Debug)]
pub struct ResolvedTrain {
    /// Loss, optimizer and their hyper-parameters (`output` still empty: the model decides).
    pub options: TrainOptions,
    /// Samples per micro-batch.
    pub batch: u64,
    /// Seed of the data order.
    pub seed: u64,
    /// Tokens per `--text` window.
    pub seq_len: u64,
}

impl TrainSettings {
    /// These settings with every unset field taken from `under` (a config's `[train]`).
    pub fn over(self, under: Option<&TrainSettings>) -> TrainSettings {
        let Some(u) = under else { return self };
        let u = u.clone();
        TrainSettings {
            lr: self.lr.or(u.lr),
            schedule: self.schedule.or(u.schedule),
            warmup: self.warmup.or(u.warmup),
            min_lr: self.min_lr.or(u.min_lr),
            weight_decay: self.weight_decay.or(u.weight_decay),
            clip_grad_norm: self.clip_grad_norm.or(u.clip_grad_norm),
            accumulate: self.accumulate.or(u.accumulate),
            wgrad_high_precision: self.wgrad_high_precision.or(u.wgrad_high_precision),
            optimizer: self.optimizer.or(u.optimizer),
            momentum: self.momentum.or(u.momentum),
            batch: self.batch.or(u.batch),
            steps: self.steps.or(u.steps),
            seq_len: self.seq_len.or(u.seq_len),
            seed: self.seed.or(u.seed),
            loss: self.loss.or(u.loss),
            freeze: self.freeze.or(u.freeze),
            shard: self.shard.or(u.shard),
            fp8_all_gather: self.fp8_all_gather.or(u.fp8_all_gather),
            activations: self.activations.or(u.activations),
            recompute: self.recompute.or(u.recompute),
            optimizer_state: self.optimizer_state.or(u.optimizer_state),
        }
    }

    /// The options these settings give, defaults filled in; `source` names where words came
    /// from for messages (`FILE: [train] ` or empty). Ranges are checked by
    /// [`TrainOptions::validate`].
    pub fn resolve(&self, source: &str) -> Result<ResolvedTrain> {
        let word = |key: &str, v: &str, choices: &[&str]| -> crate::Error {
            crate::Error::Invalid(format!(
                "{source}{key} = \"{v}\": expected {}",
                choices.join(" or ")
            ))
        };
        let mut o = TrainOptions::new("");
        if let Some(v) = &self.schedule {
            o.schedule = match v.to_ascii_lowercase().as_str() {
                "constant" => ScheduleKind::Constant,
                "cosine" => ScheduleKind::Cosine,
                _ => return Err(word("schedule", v, &["constant", "cosine"])),
            };
        }
        if let Some(v) = &self.optimizer {
            o.optimizer = match v.to_ascii_lowercase().as_str() {
                "adamw" => OptimizerKind::AdamW,
                "sgd" => OptimizerKind::Sgd,
                _ => return Err(word("optimizer", v, &["adamw", "sgd"])),
            };
        }
        if let Some(v) = &self.loss {
            o.loss = match v.to_ascii_lowercase().as_str() {
                "ce" => Loss::CrossEntropy,
                "mse" => Loss::Mse,
                _ => return Err(word("loss", v, &["ce", "mse"])),
            };
        }
        if let Some(v) = &self.activations {
            o.activations = match v.to_ascii_lowercase().as_str() {
                "fp8" => SavedActivations::Fp8,
                "high" => SavedActivations::High,
                "bf16" => SavedActivations::Bf16,
                _ => return Err(word("activations", v, &["fp8", "high", "bf16"])),
            };
        }
        if let Some(v) = &self.recompute {
            o.recompute = match v.to_ascii_lowercase().as_str() {
                "none" => Recompute::None,
                "attention" => Recompute::Attention,
                "layer" => Recompute::Layer,
                _ => return Err(word("recompute", v, &["none", "attention", "layer"])),
            };
        }
        if let Some(v) = &self.optimizer_state {
            o.optimizer_state = match v.to_ascii_lowercase().as_str() {
                "f32" => StateDtype::F32,
                "bf16" => StateDtype::Bf16,
                "fp8" => StateDtype::Fp8,
                _ => return Err(word("optimizer_state", v, &["f32", "bf16", "fp8"])),
            };
        }
        macro_rules! set {
            ($($field:ident),*) => {$(
                if let Some(v) = self.$field.clone() {
                    o.$field = v;
                }
            )*};
        }
        set!(
            lr,
            warmup,
            accumulate,
            wgrad_high_precision,
            momentum,
            steps,
            freeze
        );
        if let Some(v) = &self.shard {
            o.shard_optimizer = match v.to_ascii_lowercase().as_str() {
                "none" => false,
                "optimizer" => true,
                _ => return Err(word("shard", v, &["none", "optimizer"])),
            };
        }
        o.fp8_all_gather = self.fp8_all_gather.unwrap_or(false);
        o.min_lr = self.min_lr;
        o.weight_decay = self.weight_decay;
        o.clip_grad_norm = self.clip_grad_norm;
        Ok(ResolvedTrain {
            options: o,
            batch: self.batch.unwrap_or(DEFAULT_BATCH),
            seed: self.seed.unwrap_or(0),
            seq_len: self.seq_len.unwrap_or(DEFAULT_SEQ_LEN),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_given_field_wins_over_the_table_and_the_table_over_the_default() {
        let table: TrainSettings =
            toml::from_str("learning_rate = 0.01\nsteps = 7\nlr_scheduler_type = \"cosine\"")
                .unwrap();
        let flags = TrainSettings {
            lr: Some(0.5),
            ..Default::default()
        };
        let r = flags.over(Some(&table)).resolve("").unwrap();
        assert_eq!(r.options.lr, 0.5);
        assert_eq!(r.options.steps, 7);
        assert_eq!(r.options.schedule, ScheduleKind::Cosine);
        assert_eq!(r.batch, DEFAULT_BATCH);
        let e = TrainSettings {
            optimizer: Some("adam".into()),
            ..Default::default()
        }
        .resolve("run.toml: [train] ")
        .unwrap_err()
        .to_string();
        assert_eq!(
            e,
            "run.toml: [train] optimizer = \"adam\": expected adamw or sgd"
        );
    }
}
