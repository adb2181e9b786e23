//! `fp8c train --config FILE`: the file's `[train]` table (`fp8c_session::train::config`)
//! applied under the flags: a flag given on the command line wins over the table, the table
//! over the flag's default.

use crate::train::{LossArg, OptimizerArg, ScheduleArg, TrainArgs};
use anyhow::{Result, anyhow};
use clap::ValueEnum;
use std::collections::HashSet;

/// Applies the `[train]` table of `--config` (if any) to `a`, except the fields whose flags
/// are in `given` (clap's argument ids, the field names).
pub fn apply(a: &mut TrainArgs, given: &HashSet<String>) -> Result<()> {
    let Some(path) = a.fp8.config.clone() else {
        return Ok(());
    };
    let Some(t) = fp8c_session::train::config::read_train_config(&path)? else {
        return Ok(());
    };
    let free = |id: &str| !given.contains(id);
    let word = |key: &str, v: &str, choices: &[&str]| {
        anyhow!(
            "{}: [train] {key} = \"{v}\": expected {}",
            path.display(),
            choices.join(" or ")
        )
    };
    macro_rules! plain {
        ($($field:ident),*) => {$(
            if let Some(v) = t.$field.clone() && free(stringify!($field)) {
                a.$field = v;
            }
        )*};
    }
    macro_rules! optional {
        ($($field:ident),*) => {$(
            if let Some(v) = t.$field && free(stringify!($field)) {
                a.$field = Some(v);
            }
        )*};
    }
    plain!(
        lr,
        warmup,
        accumulate,
        wgrad_high_precision,
        momentum,
        batch,
        steps,
        seq_len,
        seed,
        freeze
    );
    optional!(min_lr, weight_decay, clip_grad_norm);
    if let Some(v) = &t.schedule
        && free("schedule")
    {
        a.schedule = ScheduleArg::from_str(v, true)
            .map_err(|_| word("schedule", v, &["constant", "cosine"]))?;
    }
    if let Some(v) = &t.optimizer
        && free("optimizer")
    {
        a.optimizer =
            OptimizerArg::from_str(v, true).map_err(|_| word("optimizer", v, &["adamw", "sgd"]))?;
    }
    if let Some(v) = &t.loss
        && free("loss")
    {
        a.loss = LossArg::from_str(v, true).map_err(|_| word("loss", v, &["ce", "mse"]))?;
    }
    Ok(())
}
