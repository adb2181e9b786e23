//! `fp8c train`'s flags (clap): the model and its data, the training settings (every one
//! optional, so that a `--config` file's `[train]` table fills what is not typed), the
//! outputs, and the compile flags shared with `compile` and `run`; [`TrainArgs::config`]
//! turns them into the library's `fp8c_session::train::TrainConfig`.

use crate::fp8args::Fp8Args;
use anyhow::{Result, anyhow};
use clap::{Args, ValueEnum};
use fp8c_session::train::{DataSource, TrainConfig, TrainSettings};
use std::collections::BTreeMap;
use std::path::PathBuf;

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

/// How activations kept for backward are stored.
#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
pub enum ActivationsArg {
    /// An FP8 GEMM's input as its FP8 codes and scale (TransformerEngine's), the rest as
    /// computed.
    Fp8,
    /// Every saved value as computed: an FP8 GEMM's input in high precision, quantized again
    /// in backward to the same codes (TransformerEngine's save_original_input).
    High,
    /// As fp8, and every other saved f32 activation in bf16 (with --precision bf16 or fp8).
    Bf16,
}

/// What backward computes again instead of keeping.
#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
pub enum RecomputeArg {
    /// Keep every saved value.
    None,
    /// Each attention's scores and probabilities, from Q, K, V and the mask.
    Attention,
    /// Each layer (by the layer number in its weights' names), from its input.
    Layer,
}

/// How optimizer moments are stored.
#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
pub enum OptimizerStateArg {
    /// f32.
    F32,
    /// bf16 (rounded to nearest even after each update).
    Bf16,
    /// First moment as E4M3 codes with a per-tensor scale, second in bf16 (MS-AMP O2).
    Fp8,
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
    /// Tokens per window of --text [default: 64].
    #[arg(long = "seq-len", value_name = "T", requires = "text")]
    pub seq_len: Option<u64>,
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
    /// The loss [default: ce].
    #[arg(long, value_enum)]
    pub loss: Option<LossArg>,
    /// The optimizer [default: adamw].
    #[arg(long, value_enum)]
    pub optimizer: Option<OptimizerArg>,
    /// Learning rate [default: 0.001].
    #[arg(long, allow_negative_numbers = true, value_parser = crate::args::f32_in_range)]
    pub lr: Option<f32>,
    /// Learning-rate schedule [default: constant].
    #[arg(long, value_enum)]
    pub schedule: Option<ScheduleArg>,
    /// Warmup steps of `--schedule cosine` [default: 0].
    #[arg(long)]
    pub warmup: Option<u64>,
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
    /// records them [default: 1].
    #[arg(long, value_name = "N")]
    pub accumulate: Option<u32>,
    /// Compute the weight gradient of FP8 GEMMs in f32 from the unquantized activation and
    /// gradient; the forward GEMM and dgrad stay FP8. `--recipe rowwise_with_gw_hp`
    /// (torchao's name) is `--recipe rowwise` with this flag.
    #[arg(long = "wgrad-high-precision")]
    pub wgrad_high_precision: bool,
    /// How the activations the backward pass reads are kept between forward and backward
    /// [default: fp8].
    #[arg(long, value_enum)]
    pub activations: Option<ActivationsArg>,
    /// Compute these regions again in backward instead of keeping their activations; the
    /// losses stay the same bit for bit [default: none].
    #[arg(long, value_enum)]
    pub recompute: Option<RecomputeArg>,
    /// How the optimizer moments are stored between steps; the master weights and the update
    /// stay f32, checkpoints keep each moment in its own dtype [default: f32].
    #[arg(long = "optimizer-state", value_enum)]
    pub optimizer_state: Option<OptimizerStateArg>,
    /// SGD momentum [default: 0.9].
    #[arg(long, allow_negative_numbers = true, value_parser = crate::args::f32_in_range)]
    pub momentum: Option<f32>,
    /// Samples per step [default: 32].
    #[arg(long)]
    pub batch: Option<u64>,
    /// Total steps of the run (a resumed run continues up to this step) [default: 100].
    #[arg(long)]
    pub steps: Option<u64>,
    /// Seed of the data order [default: 0].
    #[arg(long)]
    pub seed: Option<u64>,
    /// Under `mpirun -np N`: what each rank keeps of the training state. none: all of it;
    /// optimizer: its 1/N of the f32 master weights and optimizer moments (ZeRO-1: the reduced
    /// gradient sliced, the updated weights all-gathered), the same results [default: none].
    #[arg(long, value_enum)]
    pub shard: Option<ShardArg>,
    /// With --shard optimizer: all-gather the FP8 GEMM weights as FP8 codes (each rank
    /// quantizes its slice with the weight's scale), a quarter of the f32 weights' bytes;
    /// the same results (--precision fp8 --recipe delayed).
    #[arg(long = "fp8-all-gather")]
    pub fp8_all_gather: bool,
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
    /// Not for train: a training run measures its own amax histories from its first batch
    /// (use fp8c run --calibrate or fp8c compile --calibrate for inference).
    #[arg(long, hide = true, value_name = "FILE.npz")]
    pub calibrate: Option<PathBuf>,
    #[command(flatten)]
    pub report: crate::commands::ReportArgs,
    #[command(flatten)]
    pub not_here: crate::commands::NotHere,
    #[command(flatten)]
    pub fp8: Fp8Args,
}

/// What each rank keeps of the training state.
#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
pub enum ShardArg {
    /// The whole state on every rank.
    None,
    /// 1/N of the master weights and optimizer moments per rank.
    Optimizer,
}

/// A flag value by the word that names it (`adamw`), as a config file spells it too.
fn word(v: impl ValueEnum) -> String {
    v.to_possible_value()
        .map(|p| p.get_name().to_string())
        .unwrap_or_default()
}

impl TrainArgs {
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

    /// The training settings typed on the command line.
    fn settings(&self) -> TrainSettings {
        TrainSettings {
            lr: self.lr,
            schedule: self.schedule.map(word),
            warmup: self.warmup,
            min_lr: self.min_lr,
            weight_decay: self.weight_decay,
            clip_grad_norm: self.clip_grad_norm,
            accumulate: self.accumulate,
            wgrad_high_precision: self.wgrad_high_precision.then_some(true),
            optimizer: self.optimizer.map(word),
            momentum: self.momentum,
            batch: self.batch,
            steps: self.steps,
            seq_len: self.seq_len,
            seed: self.seed,
            loss: self.loss.map(word),
            freeze: (!self.freeze.is_empty()).then(|| self.freeze.clone()),
            shard: self.shard.map(word),
            fp8_all_gather: self.fp8_all_gather.then_some(true),
            activations: self.activations.map(word),
            recompute: self.recompute.map(word),
            optimizer_state: self.optimizer_state.map(word),
        }
    }

    /// The library's description of this run.
    pub fn config(&self) -> Result<TrainConfig> {
        self.not_here.check("train")?;
        if let Some(c) = &self.calibrate {
            anyhow::bail!(
                "--calibrate {}: fp8c train measures the amax histories from its own first batch before the first step; --calibrate is for inference (fp8c run, fp8c compile --emit onnx)",
                c.display()
            );
        }
        let data = match (&self.data, &self.text) {
            (Some(d), _) => DataSource::Npz {
                path: d.clone(),
                inputs: self.input_keys()?,
                labels: self.labels.clone().unwrap_or_else(|| "labels".into()),
            },
            (None, Some(t)) => DataSource::Text(t.clone()),
            (None, None) => {
                anyhow::bail!("give the training data with --data FILE.npz or --text FILE")
            }
        };
        let mut c = TrainConfig::new(self.model.clone(), data);
        c.output = self.output.clone();
        c.compile = self.fp8.settings();
        c.train = self.settings();
        c.device = self.device.into();
        c.checkpoint = self.checkpoint.clone();
        c.checkpoint_every = self.checkpoint_every;
        c.resume = self.resume.clone();
        c.log = self.log.clone();
        c.plot = self.plot.clone();
        c.save_onnx = self.save_onnx.clone();
        c.profile = self.profile;
        c.poison_steps = self.poison_step.clone();
        Ok(c)
    }
}
