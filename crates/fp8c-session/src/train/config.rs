//! The `[train]` table of a TOML config file (`fp8c train --config FILE`): every training
//! flag by its flag name with underscores, and the Hugging Face `TrainingArguments` names
//! users of that stack already write (`learning_rate`, `gradient_accumulation_steps`,
//! `max_grad_norm`, `warmup_steps`, `lr_scheduler_type`, `max_steps`,
//! `per_device_train_batch_size`) as aliases. Unknown keys are errors, so a typo is not a
//! silent default. Flags given on the command line override the table; the FP8 recipe
//! (including each GEMM's accumulation) is the `[recipe]` table's.
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
//! ```

use crate::error::{Context, Error, Result};
use serde::Deserialize;
use std::path::Path;

/// The `[train]` table; every field optional.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TrainTable {
    /// `--lr`.
    #[serde(alias = "learning_rate")]
    pub lr: Option<f32>,
    /// `--schedule`: "constant" or "cosine".
    #[serde(alias = "lr_scheduler_type")]
    pub schedule: Option<String>,
    /// `--warmup`.
    #[serde(alias = "warmup_steps")]
    pub warmup: Option<u64>,
    /// `--min-lr`.
    pub min_lr: Option<f32>,
    /// `--weight-decay`.
    pub weight_decay: Option<f32>,
    /// `--clip-grad-norm`.
    #[serde(alias = "max_grad_norm")]
    pub clip_grad_norm: Option<f32>,
    /// `--accumulate`.
    #[serde(alias = "gradient_accumulation_steps")]
    pub accumulate: Option<u32>,
    /// `--wgrad-high-precision`.
    pub wgrad_high_precision: Option<bool>,
    /// `--optimizer`: "adamw" or "sgd".
    pub optimizer: Option<String>,
    /// `--momentum`.
    pub momentum: Option<f32>,
    /// `--batch`.
    #[serde(alias = "per_device_train_batch_size")]
    pub batch: Option<u64>,
    /// `--steps`.
    #[serde(alias = "max_steps")]
    pub steps: Option<u64>,
    /// `--seq-len`.
    pub seq_len: Option<u64>,
    /// `--seed`.
    pub seed: Option<u64>,
    /// `--loss`: "ce" or "mse".
    pub loss: Option<String>,
    /// `--freeze` globs.
    pub freeze: Option<Vec<String>>,
}

#[derive(Deserialize)]
struct File {
    train: Option<TrainTable>,
    // The other tables are checked by their own readers.
    #[serde(flatten)]
    _rest: toml::Table,
}

/// Parses the `[train]` table of a config file's text (None: the file has none).
pub fn parse_train_config(text: &str) -> Result<Option<TrainTable>> {
    let f: File = toml::from_str(text).map_err(Error::invalid)?;
    Ok(f.train)
}

/// Reads the `[train]` table of the TOML config file at `path`.
pub fn read_train_config(path: &Path) -> Result<Option<TrainTable>> {
    let text = crate::options::read_config_text(path)?;
    parse_train_config(&text).with_context(|| format!("{}: invalid [train] table", path.display()))
}
