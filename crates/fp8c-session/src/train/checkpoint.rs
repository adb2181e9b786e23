//! Checkpoints: a folder with `state.safetensors` (every state entry of the training step,
//! exactly and in its own dtype: weights, optimizer moments, amax histories and scales,
//! counters) and `meta.json` (what made it: format version, the integer step, the model's
//! digest, the loss, precision, batch, seed, and the state file's SHA-256).
//!
//! Both files are written to temporary files, synced and renamed into place, the state first,
//! after the current state file is renamed to `state.prev.safetensors`; once the new metadata
//! is in place the previous state is deleted. A run killed at any moment therefore leaves a
//! state file matching `meta.json`: the new pair, or the old metadata with the previous state
//! (kept under the `.prev` name), which [`load`] then resumes from, saying so. Mixed files are
//! never resumed. [`load`] checks the format, the model and loss identity, the run's settings
//! and the digest, then restores the state bit for bit, so a resumed run continues with
//! identical losses.
//!
//! One live process owns a checkpoint directory at a time (an advisory lock on its
//! `fp8c.lock`; another process is refused with "in use by pid N"), which also removes the
//! temporary files of a killed write and refuses files that are not an fp8c checkpoint's
//! (`claim.rs`). A training loop checks the directory with [`check_target`] with its other
//! outputs, before any work, then takes it with [`claim`] once the run's inputs are validated
//! (model, data, backend, `--resume`), and holds the [`Claim`] until it ends; [`save`] writes
//! under that claim (or takes one itself). [`check_dir`] is both at once, the claim held until
//! [`release_all`], which a program calls before it exits.
//!
//! Delayed-scaling state is the exception that is repaired rather than refused: a checkpoint
//! made with another precision, policy or recipe may lack a tensor's amax history and scale,
//! or hold a history of another length or a scale that is not a positive finite number. A
//! history of another length keeps its newest entries; anything else missing or unusable is
//! recomputed from the next batch before the next step ([`Trainer::rescale_on_next_step`]),
//! never left at the initial scale of 1 (TransformerEngine issue 982: FP8 metadata lost in a
//! checkpoint, the resumed model quantized with bogus scales). Python reads the state with
//! `safetensors.numpy.load_file`, FP8 and bf16 with their own dtypes.

use super::Trainer;
pub use super::claim::{Claim, LOCK_FILE, LockInfo, claim, release_all};
use crate::error::{Context, Error, Result, bail};
use crate::files::Output;
use crate::safetensors_io;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

/// The checkpoint format this version writes and reads.
pub const FORMAT: u32 = 2;

/// The state file's name inside a checkpoint folder.
pub const STATE_FILE: &str = "state.safetensors";

/// The previous state file while a checkpoint is being replaced.
const PREV_STATE_FILE: &str = "state.prev.safetensors";

/// What `meta.json` holds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Meta {
    /// [`FORMAT`].
    pub format: u32,
    /// Steps run when it was saved (an exact integer).
    pub step: u64,
    /// Steps skipped (non-finite loss or gradient) among them.
    #[serde(default)]
    pub skipped_steps: u64,
    /// The model file.
    pub model: String,
    /// SHA-256 of the model file (empty when unknown, e.g. a graph built in memory).
    #[serde(default)]
    pub model_sha256: String,
    /// Precision mode (`f32`, `bf16`, `fp8`).
    pub precision: String,
    /// Loss (`ce`, `mse`), with the output it reads (`ce:logits`).
    pub loss: String,
    /// Seed of the data order.
    pub seed: u64,
    /// Samples per step.
    pub batch: u64,
    /// Micro-batches per step on each rank (gradient accumulation; 1 when absent).
    #[serde(default = "one")]
    pub accumulate: u32,
    /// Ranks of the data-parallel run that wrote it (1 when absent). A run with another
    /// number of ranks resumes it when ranks × accumulate (the step's micro-batches) agree.
    #[serde(default = "one")]
    pub ranks: u32,
    /// How the training state was sharded across ranks (`none`, or `optimizer`).
    #[serde(default = "no_shard")]
    pub shard: String,
    /// Number of state entries in the state file.
    pub state_entries: usize,
    /// SHA-256 of the state file.
    #[serde(default)]
    pub state_sha256: String,
}

impl Meta {
    /// The description of a run; `step`, `state_entries` and the digests of the state are
    /// filled in by [`save`]. `model_sha256` may be left empty (see [`Meta::with_model_file`]).
    pub fn new(model: &str, precision: &str, loss: &str, seed: u64, batch: u64) -> Meta {
        Meta {
            format: FORMAT,
            step: 0,
            skipped_steps: 0,
            model: model.to_string(),
            model_sha256: String::new(),
            precision: precision.to_string(),
            loss: loss.to_string(),
            seed,
            batch,
            accumulate: 1,
            ranks: 1,
            shard: no_shard(),
            state_entries: 0,
            state_sha256: String::new(),
        }
    }

    /// The same description with the digest of the model file at `path`.
    pub fn with_model_file(mut self, path: &Path) -> Result<Meta> {
        self.model_sha256 = safetensors_io::sha256_file(path)?;
        Ok(self)
    }
}

fn one() -> u32 {
    1
}

fn no_shard() -> String {
    "none".into()
}

/// Checks, creating and locking nothing, that checkpoints could be written to `dir` now: not
/// a file, not held by another process, no files in it that are not an fp8c checkpoint's,
/// a folder to create it in (what a training loop checks with its other outputs before any
/// work; [`claim`] takes the directory once the run's inputs are validated).
pub fn check_target(dir: &Path) -> Result<()> {
    super::claim::check_claimable(dir)?;
    if dir.is_dir() {
        Output::check("--checkpoint", &dir.join(STATE_FILE), &[])?;
        Output::check("--checkpoint", &dir.join("meta.json"), &[])?;
    }
    Ok(())
}

/// Checks that checkpoints can be written to `dir` and claims it (created if needed) for the
/// rest of the process (until [`release_all`]): [`check_target`] and [`claim`] in one call.
pub fn check_dir(dir: &Path) -> Result<()> {
    check_target(dir)?;
    super::claim::claim_for_process(dir)?;
    Output::check("--checkpoint", &dir.join(STATE_FILE), &[])?;
    Output::check("--checkpoint", &dir.join("meta.json"), &[])?;
    Ok(())
}

/// Saves the trainer's whole state to `dir` (created if needed) with `meta` (its step, entry
/// count and state digest taken from the trainer and the written file).
pub fn save(dir: &Path, trainer: &Trainer, meta: &Meta) -> Result<()> {
    let state = trainer.try_state()?;
    save_state(dir, &state, trainer.steps(), trainer.skipped_steps(), meta)
}

/// Saves `state` (a trainer's whole state after `steps` steps, `skipped` of them skipped)
/// to `dir` with `meta`, as [`save`] does.
pub fn save_state(
    dir: &Path,
    state: &BTreeMap<String, fp8c_ir::Tensor>,
    steps: u64,
    skipped: u64,
    meta: &Meta,
) -> Result<()> {
    // The process's claim on `dir` (taken now if it holds none: another process's directory
    // is refused).
    let claim = claim(dir)?;
    Output::check("--checkpoint", &dir.join(STATE_FILE), &[])?;
    Output::check("--checkpoint", &dir.join("meta.json"), &[])?;
    let mut header = BTreeMap::new();
    header.insert("format".to_string(), "fp8c-checkpoint".to_string());
    header.insert("version".to_string(), FORMAT.to_string());
    header.insert("step".to_string(), steps.to_string());
    let (current, prev) = (dir.join(STATE_FILE), dir.join(PREV_STATE_FILE));
    // The current state stays readable under the .prev name until the new metadata is in
    // place (a kill in between resumes from it). A leftover .prev from an interrupted save
    // is replaced only when the current pair is whole, i.e. always here: `meta.json` was
    // written last for whichever state file matches it.
    if current.is_file() {
        std::fs::rename(&current, &prev).map_err(|e| {
            Error::io(
                format_args!(
                    "--checkpoint {}: cannot keep the previous state",
                    dir.display()
                ),
                e,
            )
        })?;
    }
    let out = Output::check("--checkpoint", &current, &[])?;
    // A failed write names `--checkpoint` and the file (the Output's name); it leaves no
    // file, so a directory this run made and never saved into still goes on release.
    let bytes = safetensors_io::write(&out, state, header)?;
    claim.mark_saved();
    let meta = Meta {
        format: FORMAT,
        step: steps,
        skipped_steps: skipped,
        state_entries: state.len(),
        state_sha256: safetensors_io::sha256_hex(&bytes),
        ..meta.clone()
    };
    let text = serde_json::to_string_pretty(&meta).map_err(Error::invalid)? + "\n";
    Output::check("--checkpoint", &dir.join("meta.json"), &[])?.write_bytes(text.as_bytes())?;
    let _ = std::fs::remove_file(&prev);
    Ok(())
}

/// Restores the checkpoint in `dir` into `trainer`, after checking that it was made by this
/// format, for the same model (digest) and loss, with the same precision, batch and seed as
/// `expect`, that the state file is the one the metadata describes (digest) and that it holds
/// every state entry the trainer has. Returns the step it continues from.
pub fn load(dir: &Path, trainer: &mut Trainer, expect: &Meta) -> Result<u64> {
    let d = dir.display();
    let meta_path = dir.join("meta.json");
    let text = read_small(&meta_path, 1 << 20)
        .with_context(|| format!("--resume {d}: no checkpoint (cannot read meta.json)"))?;
    #[derive(Deserialize)]
    struct Version {
        format: u32,
    }
    let version: Version = serde_json::from_str(&text)
        .map_err(Error::invalid)
        .with_context(|| format!("{}: not an fp8c checkpoint", meta_path.display()))?;
    if version.format != FORMAT {
        bail!(
            "{}: checkpoint format {} is not supported (this fp8c reads format {FORMAT}: {STATE_FILE} + meta.json)",
            meta_path.display(),
            version.format
        );
    }
    let meta: Meta = serde_json::from_str(&text)
        .map_err(Error::invalid)
        .with_context(|| format!("{}: not an fp8c checkpoint", meta_path.display()))?;
    if !expect.model_sha256.is_empty()
        && !meta.model_sha256.is_empty()
        && meta.model_sha256 != expect.model_sha256
    {
        bail!(
            "--resume {d}: the checkpoint was made for another model ({} with SHA-256 {}…; this run trains {} with SHA-256 {}…)",
            meta.model,
            &meta.model_sha256[..12.min(meta.model_sha256.len())],
            expect.model,
            &expect.model_sha256[..12.min(expect.model_sha256.len())]
        );
    }
    if meta.loss != expect.loss {
        bail!(
            "--resume {d}: the checkpoint was made with the loss {}; this run trains {}",
            meta.loss,
            expect.loss
        );
    }
    let micro = |m: &Meta| u64::from(m.accumulate) * u64::from(m.ranks.max(1));
    if meta.batch != expect.batch || meta.seed != expect.seed || micro(&meta) != micro(expect) {
        let ranks = |m: &Meta| {
            if m.ranks > 1 {
                format!(" on {} ranks", m.ranks)
            } else {
                String::new()
            }
        };
        bail!(
            "--resume {d}: the checkpoint was made with --batch {} --seed {} --accumulate {}{}; this run has --batch {} --seed {} --accumulate {}{} (ranks × --accumulate must agree)",
            meta.batch,
            meta.seed,
            meta.accumulate,
            ranks(&meta),
            expect.batch,
            expect.seed,
            expect.accumulate,
            ranks(expect)
        );
    }
    if meta.precision != expect.precision {
        // Weights and optimizer moments carry over (f32 master weights in every mode); the
        // scaling state is repaired below.
        tracing::warn!(
            "--resume {d}: the checkpoint was made with --precision {}; continuing with --precision {}",
            meta.precision,
            expect.precision
        );
    }
    let have = trainer.state();
    // The file can only be the state the trainer holds plus its header.
    let budget = have.values().map(|t| t.bytes().len() as u64).sum::<u64>() + (16 << 20);
    let matches = |bytes: &[u8]| {
        meta.state_sha256.is_empty() || safetensors_io::sha256_hex(bytes) == meta.state_sha256
    };
    let state = match safetensors_io::read(&dir.join(STATE_FILE), budget) {
        Ok((state, _, bytes)) if matches(&bytes) => state,
        current => {
            // A save killed between its state and its metadata: the previous state, which
            // the metadata describes, is kept under the .prev name.
            match safetensors_io::read(&dir.join(PREV_STATE_FILE), budget) {
                Ok((state, _, bytes)) if !meta.state_sha256.is_empty() && matches(&bytes) => {
                    tracing::warn!(
                        "--resume {d}: the last checkpoint write was interrupted; resuming from the one before it (step {})",
                        meta.step
                    );
                    // Make the folder whole again (state and metadata agree), so the next
                    // save keeps this state as its fallback rather than the orphan.
                    let _ = std::fs::rename(dir.join(PREV_STATE_FILE), dir.join(STATE_FILE));
                    state
                }
                _ => {
                    current.with_context(|| format!("--resume {d}"))?;
                    bail!(
                        "--resume {d}: {STATE_FILE} does not match meta.json (its SHA-256 differs): the checkpoint is damaged or was cut short"
                    );
                }
            }
        }
    };
    let (state, rescale) = repair_scaling(state, &have, &trainer.scaled_tensors(), meta.step);
    for k in have.keys() {
        if !state.contains_key(k) {
            bail!(
                "--resume {d}: the checkpoint has no state entry \"{k}\" (was it made for another model?)"
            );
        }
    }
    // Entries of another precision's program (amax histories of an FP8 run resumed in f32)
    // have no place here.
    let state: BTreeMap<String, fp8c_ir::Tensor> = state
        .into_iter()
        .filter(|(k, _)| have.contains_key(k))
        .collect();
    let state = convert_moments(state, &have, &d.to_string())?;
    trainer
        .set_state(&state)
        .with_context(|| format!("--resume {d}"))?;
    trainer.set_counts(meta.step, meta.skipped_steps);
    if !rescale.is_empty() {
        tracing::warn!(
            "--resume {d}: {} FP8 tensor(s) have no usable amax history or scale in the checkpoint (e.g. {}); the next step recomputes them from its batch",
            rescale.len(),
            rescale[0]
        );
    }
    trainer.rescale_on_next_step(rescale);
    Ok(meta.step)
}

/// The checkpoint's `state` with every entry saved in another float dtype than the trainer
/// keeps it in (optimizer moments of a run with another `--optimizer-state`) converted: bf16
/// widens to f32 exactly, f32 rounds to bf16 to nearest even. An FP8 moment has no such
/// conversion (its scale is its own state): an error naming the entry.
fn convert_moments(
    state: BTreeMap<String, fp8c_ir::Tensor>,
    have: &BTreeMap<String, fp8c_ir::Tensor>,
    dir: &str,
) -> Result<BTreeMap<String, fp8c_ir::Tensor>> {
    let mut out = BTreeMap::new();
    let mut converted = Vec::new();
    for (k, v) in state {
        let want = &have[&k];
        let (from, to) = (v.dtype(), want.dtype());
        if from == to || v.shape() != want.shape() {
            out.insert(k, v);
            continue;
        }
        let plain = |d: fp8c_ir::DType| d.is_float() && !d.is_fp8();
        if !plain(from) || !plain(to) {
            bail!(
                "--resume {dir}: the checkpoint keeps \"{k}\" as {from}, this run as {to}; resume with the --optimizer-state the checkpoint was made with"
            );
        }
        let t = v
            .to_f64_vec()
            .and_then(|x| fp8c_ir::Tensor::from_f64_as(to, v.shape().to_vec(), &x))
            .map_err(|e| Error::Invalid(format!("--resume {dir}: \"{k}\": {e}")))?;
        converted.push(k.clone());
        out.insert(k, t);
    }
    if let Some(first) = converted.first() {
        tracing::warn!(
            "--resume {dir}: {} state entries (e.g. \"{first}\") were saved in another dtype and converted (another --optimizer-state)",
            converted.len()
        );
    }
    Ok(out)
}

/// The checkpoint's `state` with the delayed-scaling entries of `tensors` made usable by a
/// trainer whose fresh state is `have`: a history of another length keeps its newest entries
/// (TE's layout: slot 0 is the step being recorded, the newest finished step last); a tensor
/// with a missing entry, a scale that is not positive and finite, or a history that recorded
/// nothing after `step` > 0 steps gets the fresh entries and is returned for recomputation.
fn repair_scaling(
    mut state: BTreeMap<String, fp8c_ir::Tensor>,
    have: &BTreeMap<String, fp8c_ir::Tensor>,
    tensors: &[String],
    step: u64,
) -> (BTreeMap<String, fp8c_ir::Tensor>, Vec<String>) {
    let mut rescale = Vec::new();
    for t in tensors {
        let names = ["amax_history", "scale", "scale_inv"].map(|s| format!("{t}.{s}"));
        let f32s = |k: &String| {
            state
                .get(k)
                .filter(|v| v.dtype() == fp8c_ir::DType::F32)
                .and_then(|v| v.to_f32_vec().ok())
        };
        let fresh_len = have.get(&names[0]).map_or(0, |h| h.len());
        let usable = match (f32s(&names[0]), f32s(&names[1]), f32s(&names[2])) {
            (Some(h), Some(s), Some(si)) => {
                let scalar_ok = |v: &[f32]| v.len() == 1 && v[0].is_finite() && v[0] > 0.0;
                let recorded = step == 0 || h.len() == 1 || h.iter().any(|&v| v != 0.0);
                if scalar_ok(&s) && scalar_ok(&si) && recorded && h.iter().all(|v| v.is_finite()) {
                    if h.len() != fresh_len && fresh_len > 0 {
                        let mut next = vec![0f32; fresh_len];
                        let keep = (h.len() - 1).min(fresh_len - 1);
                        next[fresh_len - keep..].copy_from_slice(&h[h.len() - keep..]);
                        state.insert(
                            names[0].clone(),
                            fp8c_ir::Tensor::from_f32(vec![fresh_len as u64], &next),
                        );
                    }
                    true
                } else {
                    false
                }
            }
            _ => false,
        };
        if !usable {
            for k in &names {
                if let Some(v) = have.get(k) {
                    state.insert(k.clone(), v.clone());
                }
            }
            rescale.push(t.clone());
        }
    }
    (state, rescale)
}

/// Reads a small text file, refusing anything but a regular file of at most `limit` bytes.
fn read_small(path: &Path, limit: u64) -> Result<String> {
    let m =
        std::fs::metadata(path).map_err(|e| Error::io(format_args!("{}", path.display()), e))?;
    if !m.is_file() || m.len() > limit {
        bail!(
            "{}: not a regular file of at most {limit} bytes",
            path.display()
        );
    }
    std::fs::read_to_string(path).map_err(|e| Error::io(format_args!("{}", path.display()), e))
}
