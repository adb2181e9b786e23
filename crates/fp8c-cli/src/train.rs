//! `fp8c train`: train an ONNX model on arrays from a `.npz` file and write the trained model
//! back; `fp8c plot`: overlay the loss curves of several runs.
//!
//! Order of work: read and check the data (every error names the file, the key and the
//! input) → load the model, bind its input shapes to the batch → compile the training step
//! (`autodiff::Trainer`: canonicalize, precision, scaling, autodiff) → restore `--resume`
//! state → run steps (progress bar, CSV log, checkpoints) → save the checkpoint, the plot and
//! `--save-onnx`.
//!
//! Determinism: the batch of step `s` depends only on `--seed` and `s` (a seeded shuffle per
//! epoch), and a checkpoint holds every state entry of the step (weights, moments, scaling
//! state, counters) exactly, so `--resume` continues with bit-identical losses.
//! Checkpoints are written to temporary files and renamed into place, so a run killed at any
//! moment leaves the previous checkpoint intact.

use crate::commands::load_graph;
use crate::fp8args::Fp8Args;
use anyhow::{Context, Result, anyhow, bail};
use clap::{Args, ValueEnum};
use fp8c_ir::{DType, Dim, Graph, Tensor, interface_name};
use fp8c_passes::PassOptions;
use fp8c_passes::autodiff::{Loss, LrSchedule, Optimizer, OptimizerSpec, POISON_INPUT, TrainSpec};
use fp8c_passes::precision::PrecisionMode;
use fp8c_runtime::CpuBackend;
use fp8c_session::Trainer;
use fp8c_session::npy;
use fp8c_session::plot;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The loss.
#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
pub enum LossArg {
    /// Softmax cross-entropy over the output's last axis; integer labels.
    Ce,
    /// Mean squared error against a float target of the output's shape.
    Mse,
}

/// The optimizer.
#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
pub enum OptimizerArg {
    /// AdamW (decoupled weight decay).
    Adamw,
    /// SGD with momentum.
    Sgd,
}

/// The learning-rate schedule.
#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
pub enum ScheduleArg {
    /// The same learning rate at every step.
    Constant,
    /// Linear warmup (`--warmup`), then cosine decay to `--min-lr` at `--steps`.
    Cosine,
}

/// `fp8c train`.
#[derive(Args, Debug)]
pub struct TrainArgs {
    /// The model: an ONNX file (or IR text, `.fp8ir`).
    pub model: PathBuf,
    /// Training data: a NumPy .npz archive; every array has one sample per row (first dim).
    #[arg(long, value_name = "FILE.npz")]
    pub data: PathBuf,
    /// Feed graph input NAME from array KEY (repeatable; default: the array named like the input).
    #[arg(long = "input", value_name = "NAME=KEY")]
    pub input: Vec<String>,
    /// The array holding the labels (ce: integer class indices) or the target (mse).
    #[arg(long, value_name = "KEY")]
    pub labels: String,
    /// The model output the loss reads (default: the model's only output).
    #[arg(long, value_name = "NAME")]
    pub output: Option<String>,
    /// The loss.
    #[arg(long, value_enum, default_value = "ce")]
    pub loss: LossArg,
    /// The optimizer.
    #[arg(long, value_enum, default_value = "adamw")]
    pub optimizer: OptimizerArg,
    /// Learning rate.
    #[arg(long, default_value_t = 1e-3)]
    pub lr: f32,
    /// Learning-rate schedule.
    #[arg(long, value_enum, default_value = "constant")]
    pub schedule: ScheduleArg,
    /// Warmup steps of `--schedule cosine`.
    #[arg(long, default_value_t = 0)]
    pub warmup: u64,
    /// Final learning rate of `--schedule cosine` [default: lr/10].
    #[arg(long = "min-lr")]
    pub min_lr: Option<f32>,
    /// Weight decay [default: 0.01 for adamw, 0 for sgd]; applies to rank ≥ 2 params.
    #[arg(long = "weight-decay")]
    pub weight_decay: Option<f32>,
    /// SGD momentum.
    #[arg(long, default_value_t = 0.9)]
    pub momentum: f32,
    /// Samples per step.
    #[arg(long, default_value_t = 32)]
    pub batch: u64,
    /// Total steps of the run (a resumed run continues up to this step).
    #[arg(long, default_value_t = 100)]
    pub steps: u64,
    /// Seed of the data order.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Parameters (by name glob) that do not train (repeatable).
    #[arg(long, value_name = "GLOB")]
    pub freeze: Vec<String>,
    /// Write one CSV row per step: step,loss,lr,applied,accuracy,elapsed_s.
    #[arg(long, value_name = "FILE.csv")]
    pub log: Option<PathBuf>,
    /// Plot the loss curve (.svg, or .png without text).
    #[arg(long, value_name = "FILE")]
    pub plot: Option<PathBuf>,
    /// Save the whole training state to DIR (at the end and every --checkpoint-every steps).
    #[arg(long, value_name = "DIR")]
    pub checkpoint: Option<PathBuf>,
    /// Steps between checkpoints (0: only at the end).
    #[arg(long = "checkpoint-every", default_value_t = 0, value_name = "N")]
    pub checkpoint_every: u64,
    /// Continue from the checkpoint in DIR.
    #[arg(long, value_name = "DIR")]
    pub resume: Option<PathBuf>,
    /// Write the model with the trained weights to FILE.onnx.
    #[arg(long = "save-onnx", value_name = "FILE.onnx")]
    pub save_onnx: Option<PathBuf>,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
    /// Test hook: make the gradients of this step NaN (the step must be skipped).
    #[arg(long = "poison-step", value_name = "STEP", hide = true)]
    pub poison_step: Vec<u64>,
    #[command(flatten)]
    pub fp8: Fp8Args,
}

/// `fp8c plot`.
#[derive(Args, Debug)]
pub struct PlotArgs {
    /// Training logs (CSV with `step` and `loss` columns), one curve each.
    #[arg(required = true, value_name = "LOG.csv")]
    pub logs: Vec<PathBuf>,
    /// The plot (.svg, or .png without text).
    #[arg(short, long, value_name = "FILE")]
    pub output: PathBuf,
    /// Curve labels, in order (default: the file names).
    #[arg(long = "label", value_name = "NAME")]
    pub labels: Vec<String>,
    /// Moving-average window in steps (1: raw).
    #[arg(long, default_value_t = 10)]
    pub smooth: usize,
    /// Plot title.
    #[arg(long, default_value = "training loss")]
    pub title: String,
}

/// `fp8c plot`.
pub fn plot_cmd(a: PlotArgs) -> Result<()> {
    if !a.labels.is_empty() && a.labels.len() != a.logs.len() {
        bail!(
            "{} --label given for {} logs: give one per log or none",
            a.labels.len(),
            a.logs.len()
        );
    }
    let mut series = Vec::new();
    for (i, p) in a.logs.iter().enumerate() {
        let label = a.labels.get(i).cloned().unwrap_or_else(|| {
            p.file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_else(|| p.display().to_string())
        });
        series.push(plot::read_csv(p, &label).map_err(|e| anyhow!(e))?);
    }
    plot::plot(&series, &a.title, a.smooth, &a.output).map_err(|e| anyhow!(e))?;
    eprintln!("fp8c plot: wrote {}", a.output.display());
    Ok(())
}

// ------------------------------------------------------------------------------- data

/// The training data: one array per graph input and the labels, all with N rows.
struct Dataset {
    inputs: Vec<(String, Tensor)>,
    labels: Tensor,
    rows: u64,
}

impl Dataset {
    /// Rows `idx` of `t`, as a new tensor of shape `[idx.len(), ...]`.
    fn gather(t: &Tensor, idx: &[u64]) -> Tensor {
        let row_bytes = t.bytes().len() / t.shape()[0].max(1) as usize;
        let mut bytes = Vec::with_capacity(row_bytes * idx.len());
        for &i in idx {
            bytes.extend_from_slice(&t.bytes()[i as usize * row_bytes..][..row_bytes]);
        }
        let mut shape = t.shape().to_vec();
        shape[0] = idx.len() as u64;
        Tensor::from_bytes(t.dtype(), shape, bytes).expect("rows of a valid tensor")
    }
}

/// Which rows step `step` trains on: a seeded shuffle per epoch, batches taken in order
/// across epoch boundaries. Depends only on (seed, step).
fn batch_rows(rows: u64, batch: u64, seed: u64, step: u64) -> Vec<u64> {
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

/// A Fisher–Yates shuffle of `0..n` from an xorshift seeded by (seed, epoch).
fn permutation(n: u64, seed: u64, epoch: u64) -> Vec<u64> {
    let mut s =
        (seed ^ 0x9E37_79B9_7F4A_7C15).wrapping_add(epoch.wrapping_mul(0xD1B5_4A32_D192_ED03)) | 1;
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

/// Reads the .npz and checks it against the model's inputs and the loss.
fn read_data(a: &TrainArgs, g: &Graph) -> Result<Dataset> {
    let file = a.data.display().to_string();
    if !a.data.is_file() {
        bail!("--data {file}: no such file");
    }
    let arrays: BTreeMap<String, Tensor> = npy::read_npz(&a.data)?.into_iter().collect();
    if arrays.is_empty() {
        bail!("--data {file}: the archive holds no arrays");
    }
    let keys: Vec<&str> = arrays.keys().map(String::as_str).collect();
    let get = |key: &str, what: &str| -> Result<Tensor> {
        arrays.get(key).cloned().ok_or_else(|| {
            anyhow!(
                "--data {file}: no array \"{key}\" for {what} (its arrays are: {})",
                keys.join(", ")
            )
        })
    };
    let mut map: BTreeMap<String, String> = BTreeMap::new();
    for spec in &a.input {
        let (name, key) = spec
            .split_once('=')
            .ok_or_else(|| anyhow!("--input `{spec}`: expected NAME=KEY"))?;
        map.insert(name.to_string(), key.to_string());
    }
    let declared: Vec<(String, fp8c_ir::TensorType)> = g
        .inputs()
        .iter()
        .map(|&id| {
            let n = g.node(id);
            (interface_name(&n.op).to_string(), n.outputs[0].clone())
        })
        .collect();
    for name in map.keys() {
        if !declared.iter().any(|(n, _)| n == name) {
            let names: Vec<&str> = declared.iter().map(|(n, _)| n.as_str()).collect();
            bail!(
                "--input {name}=...: the model has no input \"{name}\" (its inputs are: {})",
                names.join(", ")
            );
        }
    }
    let mut inputs = Vec::new();
    for (name, ty) in &declared {
        let key = map.get(name).cloned().unwrap_or_else(|| name.clone());
        let t = get(
            &key,
            &format!("input \"{name}\" (map it with --input {name}=KEY)"),
        )?;
        if t.dtype() != ty.dtype {
            bail!(
                "--data {file}: array \"{key}\" has dtype {}, input \"{name}\" is {ty}",
                t.dtype()
            );
        }
        if t.shape().len() != ty.rank() {
            bail!(
                "--data {file}: array \"{key}\" has shape {:?}, input \"{name}\" is {ty} (one sample per row of the array)",
                t.shape()
            );
        }
        for (axis, (d, &n)) in ty.shape.iter().zip(t.shape()).enumerate().skip(1) {
            if let Dim::Known(k) = d
                && *k != n
            {
                bail!(
                    "--data {file}: array \"{key}\" has shape {:?}, but dim {axis} of input \"{name}\" is fixed to {k} ({ty})",
                    t.shape()
                );
            }
        }
        inputs.push((name.clone(), t));
    }
    let labels = get(&a.labels, "--labels")?;
    let rows = inputs.first().map(|(_, t)| t.shape()[0]).unwrap_or(0);
    for (k, t) in inputs
        .iter()
        .map(|(n, t)| (n.as_str(), t))
        .chain(std::iter::once((a.labels.as_str(), &labels)))
    {
        match t.shape().first() {
            Some(&n) if n == rows => {}
            _ => bail!(
                "--data {file}: \"{k}\" has shape {:?}, expected {rows} rows like the other arrays",
                t.shape()
            ),
        }
    }
    if rows == 0 {
        bail!("--data {file}: the arrays hold no samples (0 rows)");
    }
    if a.batch == 0 || a.batch > rows {
        bail!(
            "--batch {}: must be between 1 and the {rows} samples of {file}",
            a.batch
        );
    }
    let labels = match a.loss {
        LossArg::Ce => {
            if !labels.dtype().is_int() {
                bail!(
                    "--labels {}: cross-entropy needs integer class indices, the array is {}",
                    a.labels,
                    labels.dtype()
                );
            }
            let v = labels.to_i64_vec().map_err(|e| anyhow!(e))?;
            Tensor::from_i64(labels.shape().to_vec(), &v)
        }
        LossArg::Mse => {
            if labels.dtype() != DType::F32 {
                bail!(
                    "--labels {}: the mse target must be f32, the array is {}",
                    a.labels,
                    labels.dtype()
                );
            }
            labels
        }
    };
    Ok(Dataset {
        inputs,
        labels,
        rows,
    })
}

/// Checks class labels against the output's class count (before any step runs).
fn check_labels(labels: &Tensor, classes: u64, key: &str) -> Result<()> {
    let v = labels.to_i64_vec().map_err(|e| anyhow!(e))?;
    if let Some((i, &l)) = v
        .iter()
        .enumerate()
        .find(|&(_, &l)| l < 0 || l as u64 >= classes)
    {
        bail!(
            "--labels {key}: label {l} (entry {i}) is out of range: the output has {classes} classes (0..{})",
            classes.saturating_sub(1)
        );
    }
    Ok(())
}

// ------------------------------------------------------------------------- checkpoints

/// What `meta.json` of a checkpoint holds.
#[derive(serde::Serialize, serde::Deserialize)]
struct Meta {
    format: u32,
    step: u64,
    model: String,
    precision: String,
    loss: String,
    seed: u64,
    batch: u64,
    state_entries: usize,
}

/// Writes `bytes` to `path` atomically: a temporary file in the same folder, then a rename.
fn write_atomic(path: &Path, write: impl FnOnce(&Path) -> Result<()>) -> Result<()> {
    let tmp = path.with_extension(format!(
        "{}.tmp",
        path.extension().and_then(|e| e.to_str()).unwrap_or("")
    ));
    write(&tmp)?;
    std::fs::rename(&tmp, path)
        .with_context(|| format!("{}: cannot move into place", path.display()))
}

fn save_checkpoint(dir: &Path, t: &Trainer, a: &TrainArgs) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| {
        format!(
            "--checkpoint {}: cannot create the directory",
            dir.display()
        )
    })?;
    let state = t.state();
    let arrays: Vec<(&str, &Tensor)> = state.iter().map(|(k, v)| (k.as_str(), v)).collect();
    // The state first, then the metadata that points at it: a kill between the two leaves
    // the old metadata with a newer state only if the new state file is complete (rename).
    write_atomic(&dir.join("state.npz"), |p| {
        npy::write_npz(p, &arrays).map(|_| ()).map_err(Into::into)
    })?;
    let meta = Meta {
        format: 1,
        step: t.steps(),
        model: a.model.display().to_string(),
        precision: precision_word(a.fp8.precision).into(),
        loss: format!("{:?}", a.loss).to_lowercase(),
        seed: a.seed,
        batch: a.batch,
        state_entries: state.len(),
    };
    write_atomic(&dir.join("meta.json"), |p| {
        std::fs::write(p, serde_json::to_string_pretty(&meta)? + "\n")
            .with_context(|| format!("{}: cannot write", p.display()))
    })
}

fn load_checkpoint(dir: &Path, t: &mut Trainer, a: &TrainArgs) -> Result<u64> {
    let meta_path = dir.join("meta.json");
    let text = std::fs::read_to_string(&meta_path).with_context(|| {
        format!(
            "--resume {}: no checkpoint (cannot read meta.json)",
            dir.display()
        )
    })?;
    let meta: Meta = serde_json::from_str(&text)
        .with_context(|| format!("{}: not an fp8c checkpoint", meta_path.display()))?;
    if meta.format != 1 {
        bail!(
            "{}: checkpoint format {} is not supported",
            meta_path.display(),
            meta.format
        );
    }
    let want = precision_word(a.fp8.precision);
    if meta.precision != want || meta.batch != a.batch || meta.seed != a.seed {
        bail!(
            "--resume {}: the checkpoint was made with --precision {} --batch {} --seed {}; this run has --precision {want} --batch {} --seed {}",
            dir.display(),
            meta.precision,
            meta.batch,
            meta.seed,
            a.batch,
            a.seed
        );
    }
    let state: BTreeMap<String, Tensor> =
        npy::read_npz(&dir.join("state.npz"))?.into_iter().collect();
    let have = t.state();
    for k in have.keys() {
        if !state.contains_key(k) {
            bail!(
                "--resume {}: the checkpoint has no state entry \"{k}\" (was it made for another model or recipe?)",
                dir.display()
            );
        }
    }
    t.set_state(&state)
        .with_context(|| format!("--resume {}", dir.display()))?;
    Ok(t.steps())
}

// ------------------------------------------------------------------------------ ONNX out

/// Writes `weights` into a copy of the ONNX model at `src` (initializers, or `Constant`
/// nodes of that output name), saved to `dst`. Returns the names not found in the model.
fn save_onnx(src: &Path, dst: &Path, weights: &BTreeMap<String, Tensor>) -> Result<Vec<String>> {
    use fp8c_onnx::proto::attribute_proto::AttributeType;
    use prost::Message;
    let bytes = std::fs::read(src).with_context(|| format!("{}: cannot read", src.display()))?;
    let mut model = fp8c_onnx::decode_model(&bytes)
        .with_context(|| format!("--save-onnx needs an ONNX model; {}", src.display()))?;
    let graph = model.graph.as_mut().expect("decode_model checks the graph");
    let mut missing = Vec::new();
    for (name, t) in weights {
        let proto = fp8c_onnx::tensor_to_proto(name, t);
        if let Some(init) = graph.initializer.iter_mut().find(|i| i.name() == name) {
            if init.data_location == Some(1) {
                bail!(
                    "{}: initializer \"{name}\" uses external data; --save-onnx writes inline data only",
                    src.display()
                );
            }
            *init = proto;
            continue;
        }
        let node = graph.node.iter_mut().find(|n| {
            n.op_type() == "Constant" && n.output.first().map(String::as_str) == Some(name)
        });
        match node.and_then(|n| n.attribute.iter_mut().find(|a| a.name() == "value")) {
            Some(attr) => {
                attr.t = Some(proto);
                attr.r#type = Some(AttributeType::Tensor as i32);
            }
            None => missing.push(name.clone()),
        }
    }
    let out = model.encode_to_vec();
    write_atomic(dst, |p| {
        std::fs::write(p, &out).with_context(|| format!("{}: cannot write", p.display()))
    })?;
    Ok(missing)
}

// ---------------------------------------------------------------------------------- run

fn precision_word(p: PrecisionMode) -> &'static str {
    match p {
        PrecisionMode::F32 => "f32",
        PrecisionMode::Bf16 => "bf16",
        PrecisionMode::Fp8 => "fp8",
    }
}

fn spec_of(a: &TrainArgs, output: &str) -> TrainSpec {
    let loss = match a.loss {
        LossArg::Ce => Loss::CrossEntropy,
        LossArg::Mse => Loss::Mse,
    };
    let mut spec = TrainSpec::new(output, loss);
    spec.target_input = "train.labels".into();
    let kind = match a.optimizer {
        OptimizerArg::Adamw => Optimizer::adamw(),
        OptimizerArg::Sgd => Optimizer::Sgd {
            momentum: a.momentum,
            nesterov: false,
        },
    };
    let schedule = match a.schedule {
        ScheduleArg::Constant => LrSchedule::Constant,
        ScheduleArg::Cosine => LrSchedule::WarmupCosine {
            warmup: a.warmup,
            total: a.steps,
            min_lr: a.min_lr.unwrap_or(a.lr / 10.0),
        },
    };
    spec.optimizer = Some(OptimizerSpec {
        kind,
        lr: a.lr,
        weight_decay: a.weight_decay.unwrap_or(match a.optimizer {
            OptimizerArg::Adamw => 0.01,
            OptimizerArg::Sgd => 0.0,
        }),
        schedule,
        decay_vectors: false,
    });
    spec.freeze = a.freeze.clone();
    spec.poison_input = !a.poison_step.is_empty();
    spec.keep_output = a.loss == LossArg::Ce;
    spec
}

/// Fraction of rows whose argmax over the last axis equals the label.
fn accuracy(logits: &Tensor, labels: &Tensor) -> Option<f64> {
    let v = logits.to_f64_vec().ok()?;
    let l = labels.to_i64_vec().ok()?;
    let c = *logits.shape().last()? as usize;
    if c == 0 || l.is_empty() || v.len() != l.len() * c {
        return None;
    }
    let hits = l
        .iter()
        .enumerate()
        .filter(|&(r, &lab)| {
            let row = &v[r * c..][..c];
            let best = (0..c).fold(0, |b, j| if row[j] > row[b] { j } else { b });
            best as i64 == lab
        })
        .count();
    Some(hits as f64 / l.len() as f64)
}

/// Rewrites the log keeping only rows before `step` (a resumed run continues it).
fn truncate_log(path: &Path, step: u64) -> Result<()> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Ok(());
    };
    let mut keep = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let s = line.split(',').next().and_then(|s| s.parse::<u64>().ok());
        if i == 0 || s.is_some_and(|s| s < step) {
            keep.push(line);
        }
    }
    std::fs::write(path, keep.join("\n") + "\n")
        .with_context(|| format!("--log {}: cannot write", path.display()))
}

/// `fp8c train`.
pub fn train(a: TrainArgs) -> Result<()> {
    let policy = a.fp8.policy()?;
    let recipe = a.fp8.recipe()?;
    let mut g = load_graph(&a.model, &[])?;
    let output = match &a.output {
        Some(o) => o.clone(),
        None => match g.outputs() {
            [one] => one.name.clone(),
            outs => bail!(
                "{}: the model has {} outputs ({}); choose the one to train with --output NAME",
                a.model.display(),
                outs.len(),
                outs.iter()
                    .map(|o| o.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        },
    };
    if !g.outputs().iter().any(|o| o.name == output) {
        let names: Vec<&str> = g.outputs().iter().map(|o| o.name.as_str()).collect();
        bail!(
            "--output {output}: the model has no such output (its outputs are: {})",
            names.join(", ")
        );
    }
    let data = read_data(&a, &g)?;
    let shapes: BTreeMap<String, Vec<u64>> = data
        .inputs
        .iter()
        .map(|(n, t)| {
            let mut s = t.shape().to_vec();
            s[0] = a.batch;
            (n.clone(), s)
        })
        .collect();
    fp8c_passes::shapes::bind_input_shapes(&mut g, &shapes)
        .with_context(|| format!("{}", a.model.display()))?;
    g.reinfer()
        .with_context(|| format!("{}", a.model.display()))?;
    let out_ty = g
        .outputs()
        .iter()
        .find(|o| o.name == output)
        .map(|o| g.value_type(o.value).clone())
        .expect("checked above");
    if a.loss == LossArg::Ce {
        let classes = out_ty.shape.last().and_then(Dim::known).ok_or_else(|| {
            anyhow!(
                "--output {output} is {out_ty}: cross-entropy needs a known class axis (the last)"
            )
        })?;
        check_labels(&data.labels, classes, &a.labels)?;
    }
    let mut label_shape = data.labels.shape().to_vec();
    label_shape[0] = a.batch;

    let spec = spec_of(&a, &output);
    let options = PassOptions {
        policy: policy.clone(),
        recipe,
        no_fuse: a.fp8.no_fuse,
        ..Default::default()
    };
    let started = Instant::now();
    let mut trainer = Trainer::new(&g, &spec, options, &CpuBackend)
        .with_context(|| format!("{}", a.model.display()))?;
    for n in trainer.notes() {
        tracing::info!("{n}");
    }
    let mut start_step = 0;
    if let Some(dir) = &a.resume {
        start_step = load_checkpoint(dir, &mut trainer, &a)?;
    }
    eprintln!(
        "fp8c train: {} ({} samples, batch {}), output \"{output}\", loss {:?}, {:?} lr {}, precision {}; {} parameters train{}",
        a.model.display(),
        data.rows,
        a.batch,
        a.loss,
        a.optimizer,
        a.lr,
        precision_word(policy.mode),
        trainer.trained().len(),
        if start_step > 0 {
            format!("; resuming at step {start_step}")
        } else {
            String::new()
        }
    );
    if start_step >= a.steps {
        eprintln!(
            "  the checkpoint is at step {start_step}: nothing left to do for --steps {}",
            a.steps
        );
    }

    let mut log = match &a.log {
        Some(p) => {
            if start_step > 0 {
                truncate_log(p, start_step)?;
            }
            let fresh = start_step == 0 || !p.exists();
            let f = std::fs::OpenOptions::new()
                .create(true)
                .write(true)
                .append(!fresh)
                .truncate(fresh)
                .open(p)
                .with_context(|| format!("--log {}: cannot open", p.display()))?;
            let mut w = std::io::BufWriter::new(f);
            if fresh {
                writeln!(w, "step,loss,lr,applied,accuracy,elapsed_s")?;
            }
            Some(w)
        }
        None => None,
    };
    let bar = if a.quiet {
        indicatif::ProgressBar::hidden()
    } else {
        let b = indicatif::ProgressBar::new(a.steps);
        b.set_style(
            indicatif::ProgressStyle::with_template(
                "{bar:30} step {pos}/{len}  {msg}  {per_sec}  eta {eta}",
            )
            .expect("a valid template"),
        );
        b.set_position(start_step);
        b
    };
    let t0 = Instant::now();
    let mut losses: Vec<(f64, f64)> = Vec::new();
    let mut last_acc = None;
    for step in start_step..a.steps {
        let rows = batch_rows(data.rows, a.batch, a.seed, step);
        let mut inputs: BTreeMap<String, Tensor> = data
            .inputs
            .iter()
            .map(|(n, t)| (n.clone(), Dataset::gather(t, &rows)))
            .collect();
        let labels = Dataset::gather(&data.labels, &rows);
        inputs.insert(spec.target_input.clone(), labels.clone());
        if spec.poison_input {
            let p = if a.poison_step.contains(&step) {
                f32::NAN
            } else {
                0.0
            };
            inputs.insert(POISON_INPUT.into(), Tensor::scalar_f32(p));
        }
        let out = trainer
            .step_outputs(&inputs)
            .with_context(|| format!("step {step}"))?;
        let scalar = |k: &str| {
            out.get(k)
                .and_then(|t| t.to_f64_vec().ok())
                .and_then(|v| v.first().copied())
                .unwrap_or(f64::NAN)
        };
        let (loss, lr, applied) = (scalar("loss"), scalar("lr"), scalar("finite") != 0.0);
        let acc = out.get(&output).and_then(|l| accuracy(l, &labels));
        last_acc = acc.or(last_acc);
        losses.push((step as f64, loss));
        if let Some(w) = &mut log {
            writeln!(
                w,
                "{step},{loss},{lr},{},{},{:.3}",
                u8::from(applied),
                acc.map(|v| v.to_string()).unwrap_or_default(),
                t0.elapsed().as_secs_f64()
            )?;
        }
        if !applied {
            bar.suspend(|| eprintln!("  step {step}: non-finite loss or gradient, update skipped"));
        }
        bar.set_message(format!("loss {loss:.4}"));
        bar.inc(1);
        let done = step + 1;
        if let Some(dir) = &a.checkpoint
            && a.checkpoint_every > 0
            && done % a.checkpoint_every == 0
            && done < a.steps
        {
            if let Some(w) = &mut log {
                w.flush()?;
            }
            save_checkpoint(dir, &trainer, &a)?;
        }
    }
    bar.finish_and_clear();
    if let Some(w) = &mut log {
        w.flush()?;
    }
    let ran = a.steps.saturating_sub(start_step);
    let secs = t0.elapsed().as_secs_f64();
    let tail = losses.len().min(50);
    if tail > 0 {
        let mean = losses[losses.len() - tail..]
            .iter()
            .map(|p| p.1)
            .sum::<f64>()
            / tail as f64;
        eprintln!(
            "  {ran} steps in {secs:.1} s ({:.2} steps/s, {:.1} s to compile); final loss {mean:.4} (mean of the last {tail}){}; {} skipped steps",
            ran as f64 / secs.max(1e-9),
            (t0 - started).as_secs_f64(),
            last_acc
                .map(|v| format!(", last batch accuracy {:.1}%", v * 100.0))
                .unwrap_or_default(),
            trainer.skipped_steps()
        );
    }
    if let Some(dir) = &a.checkpoint {
        save_checkpoint(dir, &trainer, &a)?;
        eprintln!("  checkpoint: {} (step {})", dir.display(), trainer.steps());
    }
    if let Some(p) = &a.plot {
        let series = match &a.log {
            Some(l) => plot::read_csv(l, precision_word(policy.mode)).map_err(|e| anyhow!(e))?,
            None => plot::Series {
                label: precision_word(policy.mode).into(),
                points: losses.clone(),
            },
        };
        plot::plot(&[series], "training loss", 10, p).map_err(|e| anyhow!(e))?;
        eprintln!("  plot: {}", p.display());
    }
    if let Some(dst) = &a.save_onnx {
        let trained: BTreeMap<String, Tensor> = trainer
            .weights()
            .into_iter()
            .filter(|(k, _)| trainer.trained().contains(k))
            .collect();
        let missing = save_onnx(&a.model, dst, &trained)?;
        for m in &missing {
            eprintln!(
                "warning: trained parameter \"{m}\" is not an initializer of {}; its update is not in {}",
                a.model.display(),
                dst.display()
            );
        }
        eprintln!("  trained model: {}", dst.display());
    }
    Ok(())
}
