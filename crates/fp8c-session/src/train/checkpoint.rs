//! Checkpoints: a folder with `state.npz` (every state entry of the training step, exactly:
//! weights, optimizer moments, scaling state, counters) and `meta.json` (what made it).
//!
//! Both files are written to temporary files and renamed into place, the state first: a run
//! killed at any moment leaves the previous checkpoint intact. [`load`] restores the state
//! bit for bit, so a resumed run continues with identical losses.

use super::Trainer;
use crate::error::{Context, Error, Result, bail};
use crate::files::write_atomic;
use crate::npy;
use fp8c_ir::Tensor;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

/// The checkpoint format this version writes and reads.
pub const FORMAT: u32 = 1;

/// What `meta.json` holds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Meta {
    /// [`FORMAT`].
    pub format: u32,
    /// Steps run when it was saved.
    pub step: u64,
    /// The model file.
    pub model: String,
    /// Precision mode (`f32`, `bf16`, `fp8`).
    pub precision: String,
    /// Loss (`ce`, `mse`).
    pub loss: String,
    /// Seed of the data order.
    pub seed: u64,
    /// Samples per step.
    pub batch: u64,
    /// Number of state entries in `state.npz`.
    pub state_entries: usize,
}

impl Meta {
    /// The description of a run; `step` and `state_entries` are filled in by [`save`].
    pub fn new(model: &str, precision: &str, loss: &str, seed: u64, batch: u64) -> Meta {
        Meta {
            format: FORMAT,
            step: 0,
            model: model.to_string(),
            precision: precision.to_string(),
            loss: loss.to_string(),
            seed,
            batch,
            state_entries: 0,
        }
    }
}

/// Saves the trainer's whole state to `dir` (created if needed) with `meta` (its step and
/// entry count taken from the trainer).
pub fn save(dir: &Path, trainer: &Trainer, meta: &Meta) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| {
        Error::io(
            format_args!(
                "--checkpoint {}: cannot create the directory",
                dir.display()
            ),
            e,
        )
    })?;
    let state = trainer.state();
    let arrays: Vec<(&str, &Tensor)> = state.iter().map(|(k, v)| (k.as_str(), v)).collect();
    // The state first, then the metadata that points at it: a kill between the two leaves
    // the old metadata with a newer state only if the new state file is complete (rename).
    write_atomic(&dir.join("state.npz"), |p| {
        npy::write_npz(p, &arrays).map(|_| ())
    })?;
    let meta = Meta {
        format: FORMAT,
        step: trainer.steps(),
        state_entries: state.len(),
        ..meta.clone()
    };
    let text = serde_json::to_string_pretty(&meta).map_err(Error::invalid)? + "\n";
    write_atomic(&dir.join("meta.json"), |p| {
        std::fs::write(p, text)
            .map_err(|e| Error::io(format_args!("{}: cannot write", p.display()), e))
    })
}

/// Restores the checkpoint in `dir` into `trainer`, after checking that it was made with the
/// same precision, batch and seed as `expect` and holds every state entry the trainer has.
/// Returns the step it continues from.
pub fn load(dir: &Path, trainer: &mut Trainer, expect: &Meta) -> Result<u64> {
    let meta_path = dir.join("meta.json");
    let text = std::fs::read_to_string(&meta_path).map_err(|e| {
        Error::io(
            format_args!(
                "--resume {}: no checkpoint (cannot read meta.json)",
                dir.display()
            ),
            e,
        )
    })?;
    let meta: Meta = serde_json::from_str(&text)
        .map_err(Error::invalid)
        .with_context(|| format!("{}: not an fp8c checkpoint", meta_path.display()))?;
    if meta.format != FORMAT {
        bail!(
            "{}: checkpoint format {} is not supported",
            meta_path.display(),
            meta.format
        );
    }
    if meta.precision != expect.precision || meta.batch != expect.batch || meta.seed != expect.seed
    {
        bail!(
            "--resume {}: the checkpoint was made with --precision {} --batch {} --seed {}; this run has --precision {} --batch {} --seed {}",
            dir.display(),
            meta.precision,
            meta.batch,
            meta.seed,
            expect.precision,
            expect.batch,
            expect.seed
        );
    }
    let state: BTreeMap<String, Tensor> =
        npy::read_npz(&dir.join("state.npz"))?.into_iter().collect();
    for k in trainer.state().keys() {
        if !state.contains_key(k) {
            bail!(
                "--resume {}: the checkpoint has no state entry \"{k}\" (was it made for another model or recipe?)",
                dir.display()
            );
        }
    }
    trainer
        .set_state(&state)
        .with_context(|| format!("--resume {}", dir.display()))?;
    Ok(trainer.steps())
}
