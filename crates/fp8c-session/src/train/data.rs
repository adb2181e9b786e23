//! Training data: arrays from a `.npz` file, one sample per row, checked against the model's
//! inputs and the loss; the rows of each step; the forward model bound to the batch.
//!
//! Determinism: the rows of step `s` depend only on (seed, s) — a seeded shuffle per epoch,
//! batches taken in order across epoch boundaries — so a resumed run sees the same batches.
//! Messages name the `fp8c train` flag of the faulty option (`--data`, `--labels`, `--batch`).

use crate::error::{Error, Result, bail};
use crate::model::Model;
use crate::npy;
use fp8c_ir::{DType, Dim, Tensor};
use fp8c_passes::autodiff::{Loss, TrainSpec};
use std::collections::BTreeMap;
use std::path::Path;

/// What to read from the archive.
#[derive(Clone, Debug)]
pub struct DataOptions {
    /// Graph input → array key, where they differ (by default an input reads the array of its
    /// own name).
    pub inputs: BTreeMap<String, String>,
    /// The array of the labels (cross-entropy: integer class indices) or the target (mse).
    pub labels: String,
    /// The loss, which decides what the labels must be.
    pub loss: Loss,
    /// Samples per step (checked against the number of rows).
    pub batch: u64,
}

/// The training data: one array per graph input and the labels, all with `rows` rows.
#[derive(Clone, Debug)]
pub struct Dataset {
    /// `(graph input, array)`, in the model's input order.
    pub inputs: Vec<(String, Tensor)>,
    /// The labels (i64 class indices for cross-entropy) or the target (f32, mse).
    pub labels: Tensor,
    /// The labels' array key.
    pub labels_key: String,
    /// The loss the labels were read for.
    pub loss: Loss,
    /// Samples.
    pub rows: u64,
}

/// One step's samples.
#[derive(Clone, Debug)]
pub struct Batch {
    /// The model inputs by name.
    pub inputs: BTreeMap<String, Tensor>,
    /// The labels or target of those rows.
    pub labels: Tensor,
}

impl Batch {
    /// What the trainer reads: the model inputs, and the labels under `spec.target_input`.
    pub fn feed(&self, spec: &TrainSpec) -> BTreeMap<String, Tensor> {
        let mut feed = self.inputs.clone();
        feed.insert(spec.target_input.clone(), self.labels.clone());
        feed
    }
}

impl Dataset {
    /// Reads the archive at `path` and checks it against `model`'s inputs and the loss.
    pub fn load(path: &Path, model: &Model, opts: &DataOptions) -> Result<Dataset> {
        let file = path.display().to_string();
        crate::files::check_input_file("--data", path)?;
        let arrays: BTreeMap<String, Tensor> = npy::read_npz(path)?.into_iter().collect();
        Dataset::from_arrays(arrays, &format!("--data {file}"), model, opts)
    }

    /// Byte-level language-model data from any file (`fp8c train --text FILE --seq-len T`):
    /// the bytes cut into consecutive windows of `seq_len` tokens (token = byte value, a
    /// vocabulary of 256), each window's labels the same bytes shifted by one (next-token
    /// targets); a trailing part shorter than a window is dropped. The windows feed the model's
    /// one input, which must take integer `[batch, seq]` tokens.
    pub fn from_text(
        path: &Path,
        seq_len: u64,
        model: &Model,
        opts: &DataOptions,
    ) -> Result<Dataset> {
        let file = path.display().to_string();
        let what = format!("--text {file}");
        crate::files::check_input_file("--text", path)?;
        let bytes = std::fs::read(path).map_err(|e| Error::Invalid(format!("{what}: {e}")))?;
        let declared = model.inputs();
        let [input] = declared.as_slice() else {
            let names: Vec<&str> = declared.iter().map(|i| i.name.as_str()).collect();
            bail!(
                "{what}: text windows feed a model with one token input; this one has {} ({})",
                names.len(),
                names.join(", ")
            );
        };
        let t = usize::try_from(seq_len).unwrap_or(usize::MAX);
        if t == 0 || bytes.len() <= t {
            bail!(
                "--seq-len {seq_len}: must be at least 1 and shorter than the {} bytes of {file}",
                bytes.len()
            );
        }
        let n = (bytes.len() - 1) / t;
        let tokens = |from: usize| -> Vec<i64> {
            bytes[from..from + n * t]
                .iter()
                .map(|&b| i64::from(b))
                .collect()
        };
        let shape = vec![n as u64, seq_len];
        let x = match input.ty.dtype {
            DType::I64 => Tensor::from_i64(shape.clone(), &tokens(0)),
            DType::I32 => {
                let v: Vec<i32> = tokens(0).into_iter().map(|b| b as i32).collect();
                Tensor::from_i32(shape.clone(), &v)
            }
            other => bail!(
                "{what}: text windows are integer tokens, but input \"{}\" is {other}",
                input.name
            ),
        };
        let y = Tensor::from_i64(shape, &tokens(1));
        let mut arrays = BTreeMap::new();
        arrays.insert(input.name.clone(), x);
        arrays.insert(opts.labels.clone(), y);
        let mut opts = opts.clone();
        opts.inputs.clear();
        Dataset::from_arrays(arrays, &what, model, &opts)
    }

    /// The dataset of `arrays` (`source` names where they came from, in messages).
    pub fn from_arrays(
        arrays: BTreeMap<String, Tensor>,
        source: &str,
        model: &Model,
        opts: &DataOptions,
    ) -> Result<Dataset> {
        let file = source;
        if arrays.is_empty() {
            bail!("{file}: the archive holds no arrays");
        }
        let keys: Vec<&str> = arrays.keys().map(String::as_str).collect();
        let get = |key: &str, what: &str| -> Result<Tensor> {
            match arrays.get(key) {
                Some(t) => Ok(t.clone()),
                None => bail!(
                    "{file}: no array \"{key}\" for {what} (its arrays are: {})",
                    keys.join(", ")
                ),
            }
        };
        let declared = model.inputs();
        for name in opts.inputs.keys() {
            if !declared.iter().any(|i| i.name == *name) {
                let names: Vec<&str> = declared.iter().map(|i| i.name.as_str()).collect();
                bail!(
                    "--input {name}=...: the model has no input \"{name}\" (its inputs are: {})",
                    names.join(", ")
                );
            }
        }
        let mut inputs = Vec::new();
        for input in &declared {
            let (name, ty) = (&input.name, &input.ty);
            let key = opts.inputs.get(name).unwrap_or(name);
            let t = get(
                key,
                &format!("input \"{name}\" (map it with --input {name}=KEY)"),
            )?;
            if t.dtype() != ty.dtype {
                bail!(
                    "{file}: array \"{key}\" has dtype {}, input \"{name}\" is {ty}",
                    t.dtype()
                );
            }
            if t.shape().len() != ty.rank() {
                bail!(
                    "{file}: array \"{key}\" has shape {:?}, input \"{name}\" is {ty} (one sample per row of the array)",
                    t.shape()
                );
            }
            for (axis, (d, &n)) in ty.shape.iter().zip(t.shape()).enumerate().skip(1) {
                if let Dim::Known(k) = d
                    && *k != n
                {
                    bail!(
                        "{file}: array \"{key}\" has shape {:?}, but dim {axis} of input \"{name}\" is fixed to {k} ({ty})",
                        t.shape()
                    );
                }
            }
            inputs.push((name.clone(), t));
        }
        let labels = get(&opts.labels, "--labels")?;
        let rows = inputs.first().map(|(_, t)| t.shape()[0]).unwrap_or(0);
        for (k, t) in inputs
            .iter()
            .map(|(n, t)| (n.as_str(), t))
            .chain(std::iter::once((opts.labels.as_str(), &labels)))
        {
            match t.shape().first() {
                Some(&n) if n == rows => {}
                _ => bail!(
                    "{file}: \"{k}\" has shape {:?}, expected {rows} rows like the other arrays",
                    t.shape()
                ),
            }
        }
        if rows == 0 {
            bail!("{file}: the arrays hold no samples (0 rows)");
        }
        if opts.batch == 0 || opts.batch > rows {
            bail!(
                "--batch {}: must be between 1 and the {rows} samples of {file}",
                opts.batch
            );
        }
        let labels = match opts.loss {
            Loss::CrossEntropy => {
                if !labels.dtype().is_int() {
                    bail!(
                        "--labels {}: cross-entropy needs integer class indices, the array is {}",
                        opts.labels,
                        labels.dtype()
                    );
                }
                let v = labels.to_i64_vec().map_err(Error::Invalid)?;
                Tensor::from_i64(labels.shape().to_vec(), &v)
            }
            Loss::Mse => {
                if labels.dtype() != DType::F32 {
                    bail!(
                        "--labels {}: the mse target must be f32, the array is {}",
                        opts.labels,
                        labels.dtype()
                    );
                }
                labels
            }
            Loss::Scalar => {
                bail!("a scalar loss reads no labels: train it with Trainer and its own inputs")
            }
        };
        Ok(Dataset {
            inputs,
            labels,
            labels_key: opts.labels.clone(),
            loss: opts.loss,
            rows,
        })
    }

    /// The samples of step `step` in batches of `batch` (see [`batch_rows`]).
    pub fn batch(&self, batch: u64, seed: u64, step: u64) -> Batch {
        let rows = batch_rows(self.rows, batch, seed, step);
        Batch {
            inputs: self
                .inputs
                .iter()
                .map(|(n, t)| (n.clone(), gather(t, &rows)))
                .collect(),
            labels: gather(&self.labels, &rows),
        }
    }

    /// The forward model for steps of `batch` samples: every input bound to `[batch, ...]`
    /// of its array (a deferred import done for those shapes), types inferred; for cross-entropy, `output`'s class axis must be known
    /// and every label in range. Errors from binding are prefixed with the model's file.
    pub fn forward_model(&self, model: &Model, batch: u64, output: &str) -> Result<Model> {
        let shapes: BTreeMap<String, Vec<u64>> = self
            .inputs
            .iter()
            .map(|(n, t)| {
                let mut s = t.shape().to_vec();
                s[0] = batch;
                (n.clone(), s)
            })
            .collect();
        let mut forward = model.clone();
        // A model whose import waits for static shapes (an LSTM over a symbolic sequence) is
        // imported for the batch's here.
        let bound = forward.bind_input_shapes(&shapes);
        model.in_file(bound)?;
        forward.reinfer()?;
        let Some(out_ty) = forward.output_type(output) else {
            bail!("--output {output}: the model has no such output");
        };
        // The labels (one row per sample) must fit the output of a batch: the output's shape
        // without its class axis for cross-entropy, the output's shape for mse.
        let want: Vec<Dim> = match self.loss {
            Loss::CrossEntropy => out_ty.shape[..out_ty.shape.len().saturating_sub(1)].to_vec(),
            Loss::Mse => out_ty.shape.clone(),
            // The output is the loss: the labels are whatever the model reads.
            Loss::Scalar => have_labels_shape(&self.labels, batch),
        };
        let mut have: Vec<Dim> = self.labels.shape().iter().map(|&d| Dim::Known(d)).collect();
        if let Some(first) = have.first_mut() {
            *first = Dim::Known(batch);
        }
        let fits = want.len() == have.len()
            && want
                .iter()
                .zip(&have)
                .all(|(w, h)| w.known().is_none() || w == h);
        if !fits {
            let per_sample: Vec<u64> = self.labels.shape().iter().skip(1).copied().collect();
            bail!(
                "--labels {}: each sample's labels have shape {per_sample:?}, but --output {output} is {out_ty} per batch of {batch}, so {} needs labels of shape [{}] per batch",
                self.labels_key,
                match self.loss {
                    Loss::CrossEntropy => "cross-entropy (one class index per position)",
                    Loss::Mse | Loss::Scalar => "mse (a target like the output)",
                },
                want.iter()
                    .map(|d| d.known().map_or("?".to_string(), |k| k.to_string()))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        if self.loss == Loss::CrossEntropy {
            let Some(classes) = out_ty.shape.last().and_then(Dim::known) else {
                bail!(
                    "--output {output} is {out_ty}: cross-entropy needs a known class axis (the last)"
                );
            };
            check_labels(&self.labels, classes, &self.labels_key)?;
        }
        Ok(forward)
    }
}

/// The shape of a batch of `labels` (rows → `batch`), as dims.
fn have_labels_shape(labels: &Tensor, batch: u64) -> Vec<Dim> {
    let mut d: Vec<Dim> = labels.shape().iter().map(|&x| Dim::Known(x)).collect();
    if let Some(first) = d.first_mut() {
        *first = Dim::Known(batch);
    }
    d
}

/// Checks class labels against the output's class count (before any step runs).
pub fn check_labels(labels: &Tensor, classes: u64, key: &str) -> Result<()> {
    let v = labels.to_i64_vec().map_err(Error::Invalid)?;
    if let Some((i, &l)) = v
        .iter()
        .enumerate()
        .find(|&(_, &l)| l != fp8c_ir::IGNORE_INDEX && (l < 0 || l as u64 >= classes))
    {
        bail!(
            "--labels {key}: label {l} (entry {i}) is out of range: the output has {classes} classes (0..{}; {} marks a position to ignore)",
            classes.saturating_sub(1),
            fp8c_ir::IGNORE_INDEX
        );
    }
    Ok(())
}

/// Rows `idx` of `t`, as a new tensor of shape `[idx.len(), ...]`.
pub fn gather(t: &Tensor, idx: &[u64]) -> Tensor {
    let row_bytes = t.bytes().len() / t.shape()[0].max(1) as usize;
    let mut bytes = Vec::with_capacity(row_bytes * idx.len());
    for &i in idx {
        bytes.extend_from_slice(&t.bytes()[i as usize * row_bytes..][..row_bytes]);
    }
    let mut shape = t.shape().to_vec();
    shape[0] = idx.len() as u64;
    Tensor::from_bytes(t.dtype(), shape, bytes).expect("rows of a valid tensor")
}

/// Which rows step `step` trains on: a seeded shuffle per epoch, batches taken in order
/// across epoch boundaries. Depends only on (seed, step).
pub fn batch_rows(rows: u64, batch: u64, seed: u64, step: u64) -> Vec<u64> {
    let mut out = Vec::with_capacity(batch as usize);
    let mut cache: Option<(u64, Vec<u64>)> = None;
    for k in 0..batch {
        let pos = step * batch + k;
        let (epoch, at) = (pos / rows, pos % rows);
        if cache.as_ref().is_none_or(|(e, _)| *e != epoch) {
            cache = Some((epoch, permutation(rows, seed, epoch)));
        }
        out.push(cache.as_ref().expect("just set").1[at as usize]);
    }
    out
}

/// SplitMix64's finaliser: every input bit affects every output bit.
fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A Fisher–Yates shuffle of `0..n` from an xorshift seeded by (seed, epoch) through SplitMix64
/// (a plain `seed ^ constant | 1` gave seeds 2k and 2k+1 the same order).
pub fn permutation(n: u64, seed: u64, epoch: u64) -> Vec<u64> {
    let mut s = splitmix64(splitmix64(seed).wrapping_add(epoch)) | 1;
    let mut next = || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    let mut p: Vec<u64> = (0..n).collect();
    for i in (1..n as usize).rev() {
        let j = (next() % (i as u64 + 1)) as usize;
        p.swap(i, j);
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_cover_each_epoch_once_and_depend_only_on_seed_and_step() {
        let (rows, batch) = (10, 4);
        let epoch: Vec<u64> = (0..5)
            .flat_map(|s| batch_rows(rows, batch, 7, s))
            .take(rows as usize)
            .collect();
        let mut sorted = epoch.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..rows).collect::<Vec<_>>());
        assert_eq!(batch_rows(rows, batch, 7, 3), batch_rows(rows, batch, 7, 3));
        assert_ne!(permutation(rows, 7, 0), permutation(rows, 8, 0));
        assert_ne!(permutation(rows, 7, 0), permutation(rows, 7, 1));
    }

    #[test]
    fn every_seed_and_epoch_gives_its_own_order() {
        let mut seen = std::collections::BTreeSet::new();
        for seed in 0..32 {
            for epoch in 0..4 {
                assert!(
                    seen.insert(permutation(50, seed, epoch)),
                    "seed {seed}, epoch {epoch} repeats an earlier order"
                );
            }
        }
    }

    #[test]
    fn gather_takes_whole_rows() {
        let t = Tensor::from_i64(vec![3, 2], &[0, 1, 10, 11, 20, 21]);
        assert_eq!(gather(&t, &[2, 0]).to_i64_vec().unwrap(), [20, 21, 0, 1]);
    }
}
