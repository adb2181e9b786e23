//! `fp8c train`: train a model on arrays from a `.npz` file and write the trained model back.
//!
//! Order of work (each step a call into `fp8c_session`): load the model → read and check the
//! data (every error names the file, the key and the input) → bind the input shapes to the
//! batch → compile the training step (`Trainer`: canonicalize, precision, scaling, autodiff)
//! → restore `--resume` state → run steps (progress bar, CSV log, checkpoints) → save the
//! checkpoint, the plot and `--save-onnx`.
//!
//! Determinism: the batch of step `s` depends only on `--seed` and `s`, and a checkpoint holds
//! every state entry of the step exactly, so `--resume` continues with bit-identical losses.

use crate::fp8args::Fp8Args;
use crate::progress;
use anyhow::{Context, Result, anyhow};
use clap::{Args, ValueEnum};
use fp8c_ir::Tensor;
use fp8c_passes::autodiff::{APPLY_INPUT, Loss, POISON_INPUT};
use fp8c_session::train::{
    DataOptions, Dataset, OptimizerKind, ScheduleKind, TrainOptions, accuracy, checkpoint,
    pick_output,
};
use fp8c_session::{Device, Model, Purpose, Trainer, plot, precision_name};
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
#[derive(Args, Debug, Clone)]
pub struct TrainArgs {
    /// The model: an ONNX file (or IR text, `.fp8ir`).
    pub model: PathBuf,
    /// Training data: a NumPy .npz archive; every array has one sample per row (first dim).
    #[arg(
        long,
        value_name = "FILE.npz",
        required_unless_present = "text",
        conflicts_with = "text"
    )]
    pub data: Option<PathBuf>,
    /// Language-model data from any file instead of --data: its bytes are the tokens
    /// (vocabulary 256), cut into windows of --seq-len that feed the model's one input, each
    /// labelled with the next byte at every position (targets [batch, seq] for logits
    /// [batch, seq, 256]).
    #[arg(long, value_name = "FILE")]
    pub text: Option<PathBuf>,
    /// Tokens per window of --text.
    #[arg(
        long = "seq-len",
        value_name = "T",
        default_value_t = 64,
        requires = "text"
    )]
    pub seq_len: u64,
    /// Feed graph input NAME from array KEY (repeatable; default: the array named like the input).
    #[arg(long = "input", value_name = "NAME=KEY")]
    pub input: Vec<String>,
    /// The array holding the labels (ce: integer class indices) or the target (mse); with
    /// --text the labels are the next bytes.
    #[arg(
        long,
        value_name = "KEY",
        required_unless_present = "text",
        conflicts_with = "text"
    )]
    pub labels: Option<String>,
    /// The model output the loss reads (default: the model's only output): a graph output or
    /// any intermediate value, by its ONNX name; nodes that feed no other kept value are pruned
    /// before import, so unsupported ops on unused branches (a classifier's label branch) do
    /// not matter.
    #[arg(long, value_name = "NAME")]
    pub output: Option<String>,
    /// The loss.
    #[arg(long, value_enum, default_value = "ce")]
    pub loss: LossArg,
    /// The optimizer.
    #[arg(long, value_enum, default_value = "adamw")]
    pub optimizer: OptimizerArg,
    /// Learning rate.
    #[arg(long, default_value_t = 1e-3, allow_negative_numbers = true, value_parser = crate::args::f32_in_range)]
    pub lr: f32,
    /// Learning-rate schedule.
    #[arg(long, value_enum, default_value = "constant")]
    pub schedule: ScheduleArg,
    /// Warmup steps of `--schedule cosine`.
    #[arg(long, default_value_t = 0)]
    pub warmup: u64,
    /// Final learning rate of `--schedule cosine` [default: lr/10].
    #[arg(long = "min-lr", allow_negative_numbers = true, value_parser = crate::args::f32_in_range)]
    pub min_lr: Option<f32>,
    /// Weight decay [default: 0.01 for adamw, 0 for sgd]; applies to rank ≥ 2 params.
    #[arg(long = "weight-decay", allow_negative_numbers = true, value_parser = crate::args::f32_in_range)]
    pub weight_decay: Option<f32>,
    /// Clip the gradients to this global L2 norm before each update, as PyTorch's
    /// `clip_grad_norm_(max_norm)` (the norm is logged in --log's grad_norm column).
    #[arg(long = "clip-grad-norm", value_name = "MAX_NORM", value_parser = crate::args::f32_in_range)]
    pub clip_grad_norm: Option<f32>,
    /// Gradient accumulation: each optimizer step runs N micro-batches of --batch samples and
    /// applies the mean of their gradients (HF's gradient_accumulation_steps); FP8 amax
    /// histories get one entry per step, the max over its micro-batches, as TransformerEngine
    /// records them.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub accumulate: u32,
    /// Compute the weight gradient of FP8 GEMMs in f32 from the unquantized activation and
    /// gradient; the forward GEMM and dgrad stay FP8. `--recipe rowwise_with_gw_hp`
    /// (torchao's name) is `--recipe rowwise` with this flag.
    #[arg(long = "wgrad-high-precision")]
    pub wgrad_high_precision: bool,
    /// SGD momentum.
    #[arg(long, default_value_t = 0.9, allow_negative_numbers = true, value_parser = crate::args::f32_in_range)]
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
    /// Write one CSV row per step: step,loss,lr,applied,accuracy,elapsed_s,grad_norm (the
    /// norm before clipping; empty without --clip-grad-norm).
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
    #[arg(
        short = 'o',
        long = "out",
        alias = "save-onnx",
        value_name = "FILE.onnx"
    )]
    pub save_onnx: Option<PathBuf>,
    /// Loss parity: train the same initial weights on the same data order once per precision
    /// listed (e.g. f32,bf16,fp8), then print a table of the final losses and their gaps to the
    /// first, and with --plot draw every curve in one figure (the regular BF16/f32 baseline of
    /// FP8 training). Not with --log, --checkpoint, --resume or -o.
    #[arg(long, value_delimiter = ',', value_name = "f32,bf16,fp8")]
    pub compare: Vec<fp8c_session::PrecisionMode>,
    /// With --compare: train every precision once per data order listed (e.g. 0,1,2,3,4,
    /// used as --seed) and report, per precision, the mean final loss and the gap's mean and
    /// standard error over the orders, next to the first precision's own spread across them
    /// (the noise floor a gap must exceed to mean anything). Default: --seed alone.
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "0,1,2",
        requires = "compare"
    )]
    pub seeds: Vec<u64>,
    /// The backend to train on.
    #[arg(long, value_enum, default_value = "cpu")]
    pub device: crate::run::DeviceArg,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
    /// Print where the training steps' time went: time and share per op kind and for the
    /// slowest nodes of the training program (forward, backward, optimizer), over every step.
    #[arg(long)]
    pub profile: bool,
    /// How many of the slowest nodes `--profile` lists (0: the op kinds only).
    #[arg(long, value_name = "N", default_value_t = 15, requires = "profile")]
    pub profile_nodes: usize,
    /// Test hook: make the gradients of this step NaN (the step must be skipped).
    #[arg(long = "poison-step", value_name = "STEP", hide = true)]
    pub poison_step: Vec<u64>,
    #[command(flatten)]
    pub fp8: Fp8Args,
}

impl TrainArgs {
    /// The training options of these flags.
    fn train_options(&self, output: &str) -> TrainOptions {
        TrainOptions {
            output: output.to_string(),
            loss: match self.loss {
                LossArg::Ce => Loss::CrossEntropy,
                LossArg::Mse => Loss::Mse,
            },
            optimizer: match self.optimizer {
                OptimizerArg::Adamw => OptimizerKind::AdamW,
                OptimizerArg::Sgd => OptimizerKind::Sgd,
            },
            lr: self.lr,
            schedule: match self.schedule {
                ScheduleArg::Constant => ScheduleKind::Constant,
                ScheduleArg::Cosine => ScheduleKind::Cosine,
            },
            warmup: self.warmup,
            steps: self.steps,
            min_lr: self.min_lr,
            weight_decay: self.weight_decay,
            clip_grad_norm: self.clip_grad_norm,
            wgrad_high_precision: self.wgrad_high_precision,
            accumulate: self.accumulate,
            momentum: self.momentum,
            freeze: self.freeze.clone(),
            poison: !self.poison_step.is_empty(),
        }
    }

    /// The `--input NAME=KEY` map.
    fn input_keys(&self) -> Result<BTreeMap<String, String>> {
        let mut map = BTreeMap::new();
        for spec in &self.input {
            let (name, key) = spec
                .split_once('=')
                .ok_or_else(|| anyhow!("--input `{spec}`: expected NAME=KEY"))?;
            map.insert(name.to_string(), key.to_string());
        }
        Ok(map)
    }

    /// What a checkpoint of this run records (and a resumed run must match).
    fn checkpoint_meta(&self) -> checkpoint::Meta {
        let mut meta = checkpoint::Meta::new(
            &self.model.display().to_string(),
            precision_name(self.fp8.precision),
            &format!("{:?}", self.loss).to_lowercase(),
            self.seed,
            self.batch,
        );
        meta.accumulate = self.accumulate;
        meta
    }
}

/// Writes the trained parameters into a copy of the source model (`--save-onnx`).
fn save_onnx(a: &TrainArgs, dst: &Path, trainer: &Trainer) -> Result<()> {
    let trained: BTreeMap<String, Tensor> = trainer
        .weights()
        .into_iter()
        .filter(|(k, _)| trainer.trained().contains(k))
        .collect();
    let missing = fp8c_session::export::save_onnx(&a.model, dst, &trained).map_err(|e| match e
        .root()
    {
        fp8c_session::Error::Onnx(o) if matches!(o.kind(), fp8c_onnx::OnnxError::Decode { .. }) => {
            anyhow!("--save-onnx needs an ONNX model; {e}")
        }
        _ => e.into(),
    })?;
    for m in &missing {
        eprintln!(
            "warning: trained parameter \"{m}\" is not an initializer of {}; its update is not in {}",
            a.model.display(),
            dst.display()
        );
    }
    eprintln!("  trained model: {}", dst.display());
    Ok(())
}

/// What one training run ends with (for `--compare`).
struct Summary {
    /// `(step, loss)` of every step run.
    losses: Vec<(f64, f64)>,
    /// Steps per second of the loop (compilation excluded).
    steps_per_s: f64,
}

/// `fp8c train`; `given`: the flags typed on the command line (see [`crate::train_config`]).
pub fn train(mut a: TrainArgs, given: &std::collections::HashSet<String>) -> Result<()> {
    crate::train_config::apply(&mut a, given)?;
    if a.compare.is_empty() {
        return train_one(a).map(|_| ());
    }
    for (flag, set) in [
        ("--log", a.log.is_some()),
        ("--checkpoint", a.checkpoint.is_some()),
        ("--resume", a.resume.is_some()),
        ("-o", a.save_onnx.is_some()),
    ] {
        if set {
            anyhow::bail!(
                "--compare trains several runs: {flag} is for one run (train each precision on its own for it)"
            );
        }
    }
    if let Some(p) = &a.plot {
        plot::check_target(p).map_err(|e| anyhow!("--plot {e}"))?;
    }
    let seeds = if a.seeds.is_empty() {
        vec![a.seed]
    } else {
        a.seeds.clone()
    };
    // runs[p][s]: precision p trained with data order seeds[s].
    let mut runs: Vec<Vec<Summary>> = a.compare.iter().map(|_| Vec::new()).collect();
    for &seed in &seeds {
        for (p, &mode) in a.compare.iter().enumerate() {
            let mut one = a.clone();
            one.compare.clear();
            one.seeds.clear();
            one.plot = None;
            one.seed = seed;
            one.fp8.precision = mode;
            let s = train_one(one).with_context(|| {
                format!("--compare: the {} run (seed {seed})", precision_name(mode))
            })?;
            runs[p].push(s);
        }
    }
    let tail = (a.steps as usize / 5).clamp(1, 50);
    let final_loss = |s: &Summary| {
        let n = s.losses.len().min(tail).max(1);
        s.losses[s.losses.len().saturating_sub(n)..]
            .iter()
            .map(|p| p.1)
            .sum::<f64>()
            / n as f64
    };
    let finals: Vec<Vec<f64>> = runs
        .iter()
        .map(|r| r.iter().map(final_loss).collect())
        .collect();
    let first = precision_name(a.compare[0]);
    print!("{}", parity_table(&a.compare, &seeds, &finals, tail, &runs));
    if seeds.len() > 1 {
        let spread = relative_spread(&finals[0]);
        println!(
            "\n{first} seed-to-seed spread (std / mean of its final losses): {:.2}%; a gap within about \
             twice its standard error is not resolved by {} data orders",
            spread * 100.0,
            seeds.len()
        );
    }
    if let Some(p) = &a.plot {
        // The mean curve of each precision over the data orders.
        let series: Vec<plot::Series> = a
            .compare
            .iter()
            .zip(&runs)
            .map(|(mode, r)| plot::Series {
                label: precision_name(*mode).into(),
                points: mean_curve(r),
            })
            .collect();
        let title = if seeds.len() > 1 {
            format!("training loss (mean of {} data orders)", seeds.len())
        } else {
            "training loss".to_string()
        };
        plot::plot(&series, &title, 10, p).map_err(|e| anyhow!(e))?;
        eprintln!("  plot: {}", p.display());
    }
    Ok(())
}

/// The Markdown table of a `--compare` run: one row per precision and data order, and with
/// several orders one summary row per precision (mean final loss, the gap's mean ± standard
/// error over the orders).
fn parity_table(
    modes: &[fp8c_session::PrecisionMode],
    seeds: &[u64],
    finals: &[Vec<f64>],
    tail: usize,
    runs: &[Vec<Summary>],
) -> String {
    use std::fmt::Write;
    let first = precision_name(modes[0]);
    let mut t = String::new();
    let _ = writeln!(
        t,
        "| precision | seed | final loss (mean of the last {tail} steps) | gap to {first} | steps/s |"
    );
    let _ = writeln!(t, "|---|---:|---:|---:|---:|");
    for (p, mode) in modes.iter().enumerate() {
        for (s, seed) in seeds.iter().enumerate() {
            let (f, base) = (finals[p][s], finals[0][s]);
            let _ = writeln!(
                t,
                "| {} | {seed} | {f:.4} | {:+.2}% | {:.2} |",
                precision_name(*mode),
                (f - base) / base * 100.0,
                runs[p][s].steps_per_s
            );
        }
    }
    if seeds.len() > 1 {
        for (p, mode) in modes.iter().enumerate() {
            let gaps: Vec<f64> = finals[p]
                .iter()
                .zip(&finals[0])
                .map(|(f, b)| (f - b) / b * 100.0)
                .collect();
            let (mean, se) = mean_and_standard_error(&gaps);
            let loss = finals[p].iter().sum::<f64>() / finals[p].len() as f64;
            let _ = writeln!(
                t,
                "| {} | mean of {} | {loss:.4} | {mean:+.2}% ± {se:.2}% | |",
                precision_name(*mode),
                seeds.len()
            );
        }
    }
    t
}

/// Mean and standard error of the mean.
fn mean_and_standard_error(v: &[f64]) -> (f64, f64) {
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    if v.len() < 2 {
        return (mean, 0.0);
    }
    let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
    (mean, (var / n).sqrt())
}

/// Sample standard deviation over the mean.
fn relative_spread(v: &[f64]) -> f64 {
    let (mean, se) = mean_and_standard_error(v);
    se * (v.len() as f64).sqrt() / mean
}

/// The step-wise mean of several loss curves (as long as the shortest).
fn mean_curve(runs: &[Summary]) -> Vec<(f64, f64)> {
    let n = runs.iter().map(|r| r.losses.len()).min().unwrap_or(0);
    (0..n)
        .map(|i| {
            let l = runs.iter().map(|r| r.losses[i].1).sum::<f64>() / runs.len() as f64;
            (runs[0].losses[i].0, l)
        })
        .collect()
}

/// One training run (the whole of `fp8c train` without `--compare`).
fn train_one(a: TrainArgs) -> Result<Summary> {
    let opts = a.fp8.compile_options(|r| r.recipe_for(Purpose::Training))?;
    let mode = opts.policy.mode;
    // The loss's output (and only it) is kept: an unused branch with unsupported ops, such as
    // a classifier's label branch, is pruned before import.
    let model = Model::load_with(
        &a.model,
        &fp8c_session::LoadOptions {
            outputs: a.output.iter().cloned().collect(),
        },
    )?;
    crate::commands::warn_all(model.warnings());
    let output = pick_output(&model, a.output.as_deref())?;
    let mut options = a.train_options(&output);
    options.wgrad_high_precision |= a.fp8.recipe_options().wgrad_high_precision()?;
    options.validate()?;
    // Every output target is checked before any step runs: a bad one must not cost the run.
    let data_path = a.data.as_deref().or(a.text.as_deref()).unwrap_or(&a.model);
    let inputs_read = [a.model.as_path(), data_path];
    if let Some(dst) = &a.save_onnx {
        fp8c_session::files::Output::check("-o", dst, &inputs_read)?;
    }
    if let Some(p) = &a.plot {
        plot::check_target(p).map_err(|e| anyhow!("--plot {e}"))?;
    }
    if let Some(dir) = &a.checkpoint {
        checkpoint::check_dir(dir)?;
    }
    let data_opts = DataOptions {
        inputs: a.input_keys()?,
        labels: a.labels.clone().unwrap_or_else(|| "labels".into()),
        loss: options.loss,
        batch: a.batch,
    };
    let data = match (&a.data, &a.text) {
        (Some(d), _) => Dataset::load(d, &model, &data_opts)?,
        (None, Some(t)) => Dataset::from_text(t, a.seq_len, &model, &data_opts)?,
        (None, None) => anyhow::bail!("give the training data with --data FILE.npz or --text FILE"),
    };
    let forward = data.forward_model(&model, a.batch, &output)?;
    let spec = options.spec();
    let started = Instant::now();
    let device = Device::from(a.device);
    device.check()?;
    let mut trainer = Trainer::for_model(&forward, &spec, &opts, device)?;
    trainer.set_profiling(a.profile);
    for n in trainer.notes() {
        tracing::info!("{n}");
    }
    let meta = a.checkpoint_meta().with_model_file(&a.model)?;
    let mut start_step = 0;
    if let Some(dir) = &a.resume {
        start_step = checkpoint::load(dir, &mut trainer, &meta)?;
    }
    eprintln!(
        "fp8c train: {} ({} samples, batch {}{}), output \"{output}\", loss {:?}, {:?} lr {}, precision {}; {} parameters train{}",
        a.model.display(),
        data.rows,
        a.batch,
        if a.accumulate > 1 {
            format!(" x {} accumulated micro-batches", a.accumulate)
        } else {
            String::new()
        },
        a.loss,
        a.optimizer,
        a.lr,
        precision_name(mode),
        trainer.trained().len(),
        if start_step > 0 {
            format!("; resuming at step {start_step}")
        } else {
            String::new()
        }
    );
    for line in trainer.high_precision_summary() {
        eprintln!("  {line}");
    }
    if start_step >= a.steps {
        eprintln!(
            "  the checkpoint is at step {start_step}: nothing left to do for --steps {}",
            a.steps
        );
    }

    let mut log = a
        .log
        .as_deref()
        .map(|p| progress::open_log(p, start_step))
        .transpose()?;
    let bar = progress::bar(a.quiet, a.steps, start_step);
    let stop = progress::stop_flag()?;
    let t0 = Instant::now();
    let mut losses: Vec<(f64, f64)> = Vec::new();
    let mut last_acc = None;
    let micro = u64::from(a.accumulate.max(1));
    for step in start_step..a.steps {
        // One optimizer step: `micro` micro-batches (the data order counts micro-batches), the
        // last one applying the update; the loss is their mean.
        let mut out = BTreeMap::new();
        let mut batch = None;
        let mut micro_loss = 0.0;
        for m in 0..micro {
            let b = data.batch(a.batch, a.seed, step * micro + m);
            let mut inputs = b.feed(&spec);
            if spec.poison_input {
                let p = if a.poison_step.contains(&step) {
                    f32::NAN
                } else {
                    0.0
                };
                inputs.insert(POISON_INPUT.into(), Tensor::scalar_f32(p));
            }
            if micro > 1 {
                let last = if m + 1 == micro { 1.0 } else { 0.0 };
                inputs.insert(APPLY_INPUT.into(), Tensor::scalar_f32(last));
            }
            out = trainer
                .step_outputs(&inputs)
                .with_context(|| format!("step {step}"))?;
            micro_loss += out
                .get("loss")
                .and_then(|t| t.to_f64_vec().ok())
                .and_then(|v| v.first().copied())
                .unwrap_or(f64::NAN);
            batch = Some(b);
        }
        let batch = batch.expect("at least one micro-batch");
        let scalar = |k: &str| {
            out.get(k)
                .and_then(|t| t.to_f64_vec().ok())
                .and_then(|v| v.first().copied())
                .unwrap_or(f64::NAN)
        };
        let (loss, lr, applied) = (
            micro_loss / micro as f64,
            scalar("lr"),
            scalar("finite") != 0.0,
        );
        let acc = out.get(&output).and_then(|l| accuracy(l, &batch.labels));
        last_acc = acc.or(last_acc);
        losses.push((step as f64, loss));
        if let Some(w) = &mut log {
            writeln!(
                w,
                "{step},{loss},{lr},{},{},{:.3},{}",
                u8::from(applied),
                acc.map(|v| v.to_string()).unwrap_or_default(),
                t0.elapsed().as_secs_f64(),
                out.get("grad_norm")
                    .map(|_| scalar("grad_norm").to_string())
                    .unwrap_or_default()
            )?;
        }
        if !applied {
            bar.suspend(|| eprintln!("  step {step}: non-finite loss or gradient, update skipped"));
        }
        bar.set_message(format!("loss {loss:.4}"));
        bar.inc(1);
        let done = step + 1;
        if stop.load(std::sync::atomic::Ordering::Relaxed) && done < a.steps {
            bar.finish_and_clear();
            if let Some(w) = &mut log {
                w.flush()?;
            }
            let dir = match &a.checkpoint {
                Some(d) => d.clone(),
                None => progress::interrupted_dir()?,
            };
            checkpoint::save(&dir, &trainer, &meta)?;
            anyhow::bail!(
                "interrupted after step {step}: the whole training state is in {dir} (continue with --resume {dir})",
                dir = dir.display()
            );
        }
        if let Some(dir) = &a.checkpoint
            && a.checkpoint_every > 0
            && done % a.checkpoint_every == 0
            && done < a.steps
        {
            checkpoint::save(dir, &trainer, &meta)?;
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
    if let Some(p) = trainer.profile() {
        eprint!("{}", p.report(a.profile_nodes));
    }
    if let Some(dir) = &a.checkpoint {
        checkpoint::save(dir, &trainer, &meta)?;
        eprintln!("  checkpoint: {} (step {})", dir.display(), trainer.steps());
    }
    if let Some(p) = &a.plot {
        let series = match &a.log {
            Some(l) => plot::read_csv(l, precision_name(mode)).map_err(|e| anyhow!(e))?,
            None => plot::Series {
                label: precision_name(mode).into(),
                points: losses.clone(),
            },
        };
        plot::plot(&[series], "training loss", 10, p).map_err(|e| anyhow!(e))?;
        eprintln!("  plot: {}", p.display());
    }
    if let Some(dst) = &a.save_onnx {
        save_onnx(&a, dst, &trainer)?;
    }
    Ok(Summary {
        losses,
        steps_per_s: ran as f64 / secs.max(1e-9),
    })
}
