//! The autodiff pass: turns a forward graph into one training step.
//!
//! [`build_training_graph`] takes a static forward graph (after canonicalize, and after the
//! precision and scaling passes when training in bf16 or FP8) and returns one graph that
//! computes, in a single run:
//!
//! 1. the forward pass and the loss ([`Loss`]) on the chosen output, with a new graph input
//!    for the labels or the target;
//! 2. reverse-mode gradients of the loss for every trainable parameter (`params.rs`), one
//!    gradient rule per op (`rules/`), FP8 GEMMs differentiated as FP8 GEMMs (`fp8.rs`);
//! 3. the optimizer update of the FP32 master weights and their moments ([`OptimizerSpec`]),
//!    installed as state updates: the runtime writes them back after the step;
//! 4. the non-finite guard (`guard.rs`): a step with a non-finite loss or gradient updates
//!    nothing but the counters.
//!
//! Interface added to the graph:
//! - inputs: the labels/target ([`TrainSpec::target_input`]), and `train.poison` (f32[]) when
//!   [`TrainSpec::poison_input`] is set: it is added to the loss seed, so feeding NaN poisons
//!   every gradient of that step (a test hook);
//! - state: `train.step` and `train.skipped_steps` (f32 counters, exact to 2^24 steps), the
//!   optimizer moments, and the gradient scaling state `{gemm}.dy.*` in FP8 mode;
//! - outputs: `loss`, `lr` (when there is an optimizer), `finite` (bool: this step was
//!   applied), `grad.{param}` when [`TrainSpec::expose_grads`] is set, and the model output
//!   itself when [`TrainSpec::keep_output`] is set. The forward graph's other outputs go.
//!
//! Why after scaling: the FP8 backward GEMMs must read the forward FP8 copies of X and W, and
//! those exist only once the scaling pass has run; differentiating `scaled_matmul` directly
//! gives dgrad/wgrad as FP8 GEMMs with no second quantization (ARCHITECTURE.md, "Training").

pub mod accumulate;
mod driver;
pub(crate) mod emit;
mod fp8;
mod guard;
mod loss;
pub mod memory;
mod optim;
mod params;
mod rules;
pub mod split;

pub use accumulate::APPLY_INPUT;
pub use loss::Loss;
pub use memory::{Recompute, SavedActivations};
pub use optim::{LrSchedule, Optimizer, OptimizerSpec, StateDtype};
pub use rules::differentiability;

use crate::{Pass, PassCx};
use emit::Emit;
use fp8c_core::Recipe;
use fp8c_ir::{DType, Graph, IrError, NodeId, TensorType, Value};
use std::collections::HashSet;

/// State entry counting the steps run (skipped ones included).
pub const STEP_STATE: &str = "train.step";
/// State entry counting the steps skipped because of a non-finite loss or gradient.
pub const SKIPPED_STATE: &str = "train.skipped_steps";
/// The test-hook input added to the loss seed (see [`TrainSpec::poison_input`]).
pub const POISON_INPUT: &str = "train.poison";

/// What to train and how.
#[derive(Clone, Debug)]
pub struct TrainSpec {
    /// The forward output the loss reads.
    pub output: String,
    /// The loss.
    pub loss: Loss,
    /// Name of the new input holding the labels (`ce`) or the target (`mse`).
    pub target_input: String,
    /// The optimizer; None computes gradients only.
    pub optimizer: Option<OptimizerSpec>,
    /// Parameter-name globs that do not train.
    pub freeze: Vec<String>,
    /// When set, exactly the float parameters matching these globs train (instead of the
    /// default rule of `params.rs`); `freeze` still applies.
    pub train_only: Option<Vec<String>>,
    /// The scaling recipe for gradient tensors (only used where the graph has FP8 GEMMs).
    pub recipe: Recipe,
    /// Skip steps with a non-finite loss or gradient (default true).
    pub skip_nonfinite: bool,
    /// Also output every gradient as `grad.{param}`.
    pub expose_grads: bool,
    /// Add the `train.poison` input (a test hook).
    pub poison_input: bool,
    /// Keep the trained output as a graph output.
    pub keep_output: bool,
    /// Micro-batches per optimizer step (1: none); see [`accumulate`](self::accumulate).
    pub accumulate: u32,
    /// Compute the weight gradient of FP8 GEMMs in high precision (f32 activation and f32
    /// dY) instead of from their FP8 copies: torchao's `rowwise_with_gw_hp`, for runs whose
    /// wgrad suffers from FP8 (dgrad stays FP8).
    pub wgrad_high_precision: bool,
    /// Build the step split at its reductions ([`split`]): a micro-batch part whose outputs
    /// are the raw gradients, amaxes and loss, and an apply part that reads their reductions
    /// as inputs (`accumulate` is then the number of micro-batches the reduction spans).
    pub split: bool,
    /// With `split`: the micro-batch part reads each FP8 GEMM weight as FP8 codes (input
    /// `train.fp8.{param}`) and its amax as an input (`train.wamax.{history}`) instead of
    /// quantizing the f32 weight ([`split::fp8_weight_inputs`]): the owners of a sharded
    /// update quantize and all-gather the codes (`--fp8-all-gather`).
    pub fp8_weights: bool,
    /// How the activations backward reads are kept ([`memory`](self::memory)).
    pub activations: SavedActivations,
    /// What backward computes again instead of keeping ([`memory`](self::memory)).
    pub recompute: Recompute,
}

impl TrainSpec {
    /// Train `output` with `loss` and AdamW (lr 1e-3), labels input `labels` (`target` for mse).
    pub fn new(output: impl Into<String>, loss: Loss) -> Self {
        TrainSpec {
            output: output.into(),
            loss,
            target_input: if loss == Loss::Mse {
                "target"
            } else {
                "labels"
            }
            .into(),
            optimizer: Some(OptimizerSpec::adamw(1e-3)),
            freeze: Vec::new(),
            train_only: None,
            recipe: Recipe::default(),
            skip_nonfinite: true,
            expose_grads: false,
            poison_input: false,
            keep_output: false,
            wgrad_high_precision: false,
            accumulate: 1,
            split: false,
            fp8_weights: false,
            activations: SavedActivations::Fp8,
            recompute: Recompute::None,
        }
    }
}

/// What [`build_training_graph_with_info`] did.
#[derive(Clone, Debug, Default)]
pub struct TrainInfo {
    /// Parameters that train, in graph order.
    pub trained: Vec<String>,
    /// Parameters removed by `freeze`.
    pub frozen: Vec<String>,
    /// Trainable parameters the loss does not depend on (left unchanged).
    pub no_gradient: Vec<String>,
    /// Gradient tensors quantized to FP8 for backward GEMMs (`{gemm}.dy`).
    pub fp8_gradients: Vec<String>,
    /// State updates made conditional on a finite step.
    pub guarded_updates: usize,
    /// The weights the micro-batch part reads as FP8 codes (`TrainSpec::fp8_weights`).
    pub fp8_weights: Vec<split::Fp8Weight>,
    /// Regions recomputed in backward (`TrainSpec::recompute`).
    pub recomputed_regions: usize,
    /// Forward nodes copied into backward for them.
    pub recomputed_nodes: usize,
    /// Saved activations kept in bf16 (`SavedActivations::Bf16`).
    pub bf16_saved: usize,
    /// Remarks for the user about the memory options.
    pub notes: Vec<String>,
}

/// The training step of `forward` (see the module docs).
pub fn build_training_graph(forward: &Graph, spec: &TrainSpec) -> Result<Graph, IrError> {
    build_training_graph_with_info(forward, spec).map(|(g, _)| g)
}

/// [`build_training_graph`], also saying what trains.
pub fn build_training_graph_with_info(
    forward: &Graph,
    spec: &TrainSpec,
) -> Result<(Graph, TrainInfo), IrError> {
    let mut g = forward.clone();
    let mut info = TrainInfo::default();
    let y = g
        .outputs()
        .iter()
        .find(|o| o.name == spec.output)
        .map(|o| o.value)
        .ok_or_else(|| {
            let names: Vec<&str> = g.outputs().iter().map(|o| o.name.as_str()).collect();
            IrError::Other(format!(
                "the loss reads output \"{}\", but the model has no such output (its outputs are: {})",
                spec.output,
                names.join(", ")
            ))
        })?;
    let mut e = Emit::new(&mut g);
    let loss = loss::build(&mut e, spec.loss, y, &spec.output, &spec.target_input)?;
    let loss_dt = e.dtype(loss);

    let (trained, frozen) = params::select(e.g, &spec.freeze, spec.train_only.as_deref())?;
    info.frozen = frozen;
    if trained.is_empty() {
        return Err(IrError::Other(if info.frozen.is_empty() {
            "no trainable parameters: no float initializer feeds a GEMM, convolution, norm, bias add or embedding".into()
        } else {
            format!(
                "no trainable parameters left: --freeze matched all of them ({})",
                info.frozen.join(", ")
            )
        }));
    }
    let targets: Vec<Value> = trained
        .iter()
        .map(|n| Value::new(e.g.find_interface(n).expect("a param"), 0))
        .collect();

    let mut seed = e.scalar("loss.seed", loss_dt, 1.0)?;
    if spec.poison_input {
        let p =
            e.g.add_input(POISON_INPUT, TensorType::scalar(DType::F32))?;
        let p = e.cast("loss.seed.poison_cast", p, loss_dt)?;
        seed = e.add("loss.seed.poisoned", seed, p)?;
    }
    let mut quant = fp8::GradQuantizer::new(spec.recipe);
    quant.wgrad_high_precision = spec.wgrad_high_precision;
    quant.save_original_input = spec.activations == SavedActivations::High;
    let forward: HashSet<NodeId> = e.g.node_ids().into_iter().collect();
    let (grads, adjoints) = driver::backprop(e.g, loss, seed, &targets, &mut quant)?;
    info.fp8_gradients = quant.quantized.clone();
    let backward = memory::Backward {
        forward: &forward,
        adjoints: &adjoints,
        seed,
        loss,
    };
    memory::apply(e.g, &backward, spec.recompute, spec.activations, &mut info)?;

    let mut pairs: Vec<(String, Value, Value)> = Vec::new();
    for ((name, &p), gr) in trained.iter().zip(&targets).zip(grads) {
        match gr {
            Some(d) => pairs.push((name.clone(), p, d)),
            None => info.no_gradient.push(name.clone()),
        }
    }
    info.trained = pairs.iter().map(|(n, _, _)| n.clone()).collect();

    let mut outputs = vec!["loss".to_string()];
    e.g.set_output("loss", loss)?;
    let f32s = TensorType::scalar(DType::F32);
    let step = e.g.add_state(STEP_STATE, f32s.clone(), 0.0)?;
    let skipped = e.g.add_state(SKIPPED_STATE, f32s, 0.0)?;
    let one = e.scalar("train.one", DType::F32, 1.0)?;

    let mut grads: Vec<Value> = pairs.iter().map(|(_, _, d)| *d).collect();
    let mut accumulation = None;
    let mut checked_loss = loss;
    if spec.split {
        if spec.optimizer.is_none() {
            return Err(IrError::Other(
                "a split training step needs an optimizer step to reduce for".into(),
            ));
        }
        let named: Vec<(String, Value)> = pairs.iter().map(|(n, _, d)| (n.clone(), *d)).collect();
        grads = split::cut_gradients(&mut e, &named, spec.accumulate.max(1))?;
        checked_loss = split::loss_input(&mut e)?;
        outputs.extend(
            named
                .iter()
                .map(|(n, _)| format!("{}{n}", split::GRAD_OUTPUT)),
        );
    } else if spec.accumulate > 1 {
        if spec.optimizer.is_none() {
            return Err(IrError::Other(
                "gradient accumulation needs an optimizer step to accumulate for".into(),
            ));
        }
        let named: Vec<(String, Value)> = pairs.iter().map(|(n, _, d)| (n.clone(), *d)).collect();
        let (mean, acc) = accumulate::accumulate(&mut e, &named, spec.accumulate)?;
        grads = mean;
        accumulation = Some(acc);
    }
    if let Some(opt) = &spec.optimizer {
        let lr = optim::learning_rate(&mut e, opt, step)?;
        // AdamW's bias correction counts applied updates: step − skipped + 1.
        let applied = e.sub("train.applied", step, skipped)?;
        let t = e.add("train.t", applied, one)?;
        if let Some(max_norm) = opt.clip_grad_norm {
            let named: Vec<(String, Value)> = pairs
                .iter()
                .zip(&grads)
                .map(|((n, _, _), d)| (n.clone(), *d))
                .collect();
            let (clipped, norm) = optim::clip_by_global_norm(&mut e, &named, max_norm)?;
            grads = clipped;
            e.g.set_output("grad_norm", norm)?;
            outputs.push("grad_norm".into());
        }
        for ((name, p, _), d) in pairs.iter().zip(&grads) {
            for (state, v) in optim::update(&mut e, opt, name, *p, *d, lr, t)? {
                e.g.set_state_update(&state, v)?;
            }
        }
        e.g.set_output("lr", lr)?;
        outputs.push("lr".into());
    }

    let mut checked = vec![checked_loss];
    checked.extend(&grads);
    let finite = e.op("train.finite", fp8c_ir::Op::AllFinite, &checked)?;
    let keep = [STEP_STATE, SKIPPED_STATE];
    match (&accumulation, spec.skip_nonfinite) {
        (None, true) => info.guarded_updates = guard::guard_updates(&mut e, finite, &keep)?,
        (None, false) => {}
        (Some(acc), skip) => {
            let cond = if skip {
                e.op(
                    "train.apply.finite",
                    fp8c_ir::Op::And,
                    &[acc.apply_bool, finite],
                )?
            } else {
                acc.apply_bool
            };
            info.guarded_updates = guard::guard_updates(&mut e, cond, &keep)?;
            accumulate::finish(&mut e, acc)?;
        }
    }
    // The step counter moves once per optimizer step (on the last micro-batch).
    let advance = accumulation.as_ref().map_or(one, |a| a.apply);
    let next = e.add("train.step.next", step, advance)?;
    e.g.set_state_update(STEP_STATE, next)?;
    let zero = e.scalar("train.zero", DType::F32, 0.0)?;
    let missed = e.op(
        "train.skipped",
        fp8c_ir::Op::Where,
        &[finite, zero, advance],
    )?;
    let skipped_next = e.add("train.skipped_steps.next", skipped, missed)?;
    e.g.set_state_update(SKIPPED_STATE, skipped_next)?;
    e.g.set_output("finite", finite)?;
    outputs.push("finite".into());

    if spec.split {
        if spec.fp8_weights {
            info.fp8_weights = split::fp8_weight_inputs(e.g, &info.trained)?;
        }
        outputs.extend(split::cut_amaxes(e.g)?);
    } else if spec.expose_grads {
        for ((name, _, _), d) in pairs.iter().zip(&grads) {
            let o = format!("grad.{name}");
            e.g.set_output(&o, *d)?;
            outputs.push(o);
        }
    }
    if spec.keep_output {
        outputs.push(spec.output.clone());
    }
    g.select_outputs(&outputs)?;
    g.dce();
    fp8c_ir::verify(&g)?;
    Ok((g, info))
}

/// The autodiff pass: [`build_training_graph`] as a pipeline step. It runs only when the
/// options carry a [`TrainSpec`] (`PassOptions::train`, set by the session when it trains), and
/// uses the pipeline's recipe for the gradients, so forward and backward scaling agree.
pub struct AutodiffPass;

impl Pass for AutodiffPass {
    fn name(&self) -> &'static str {
        "autodiff"
    }

    fn about(&self) -> &'static str {
        "(training only) loss, reverse-mode gradients (FP8 dgrad/wgrad), optimizer, non-finite guard"
    }

    fn run(&self, g: &mut Graph, cx: &mut PassCx) -> Result<bool, IrError> {
        let Some(mut spec) = cx.options.train.clone() else {
            return Ok(false);
        };
        spec.recipe = cx.options.recipe;
        let (t, info) = build_training_graph_with_info(g, &spec)?;
        *g = t;
        cx.notes.push(format!(
            "autodiff: {} parameters train ({} frozen, {} without gradient); {} FP8 gradient tensors; {} guarded state updates",
            info.trained.len(),
            info.frozen.len(),
            info.no_gradient.len(),
            info.fp8_gradients.len(),
            info.guarded_updates
        ));
        cx.notes.extend(info.notes.iter().cloned());
        cx.train = Some(info);
        Ok(true)
    }
}
