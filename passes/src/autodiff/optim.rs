//! Optimizers and learning-rate schedules, as graph nodes.
//!
//! Parameters are the FP32 master weights: each update is one `sgd_update` / `adamw_update`
//! node whose new param is the param's state update (the runtime writes it back in place),
//! and whose moments are state entries `{param}.momentum` (SGD) or `{param}.m`, `{param}.v`
//! (AdamW), all starting at 0, in the param's dtype.
//!
//! The learning rate is computed in the graph from the step counter `train.step` (the number
//! of steps run before this one, skipped ones included), so a step is a pure function of the
//! state and a resumed run continues the schedule exactly. AdamW's bias correction counts the
//! updates actually applied (`train.step − train.skipped_steps + 1`).
//!
//! Weight decay applies to parameters of rank ≥ 2 (matrices, kernels, embedding tables) and
//! not to biases and norm scales, as in GPT-2/nanoGPT, unless `decay_vectors` is set.

use super::emit::Emit;
use fp8c_ir::{DType, IrError, Op, TensorType, Value};

type R<T> = Result<T, IrError>;

/// The update rule.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Optimizer {
    /// SGD with momentum (PyTorch's: `buf = momentum·buf + g; p −= lr·buf`).
    Sgd {
        /// Momentum factor (0 = plain SGD).
        momentum: f32,
        /// Nesterov momentum.
        nesterov: bool,
    },
    /// AdamW with decoupled weight decay (PyTorch's).
    AdamW {
        /// First-moment decay.
        beta1: f32,
        /// Second-moment decay.
        beta2: f32,
        /// Denominator epsilon.
        epsilon: f32,
    },
}

impl Optimizer {
    /// AdamW with PyTorch's defaults (0.9, 0.999, 1e-8).
    pub fn adamw() -> Self {
        Optimizer::AdamW {
            beta1: 0.9,
            beta2: 0.999,
            epsilon: 1e-8,
        }
    }

    /// SGD with momentum 0.9.
    pub fn sgd() -> Self {
        Optimizer::Sgd {
            momentum: 0.9,
            nesterov: false,
        }
    }
}

/// How the learning rate changes with the step.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum LrSchedule {
    /// The base learning rate at every step.
    Constant,
    /// Linear warmup from `lr/warmup` to `lr` over `warmup` steps, then cosine decay to
    /// `min_lr` at step `total` (and `min_lr` after it).
    WarmupCosine {
        /// Warmup steps (0: none).
        warmup: u64,
        /// Step at which the cosine reaches `min_lr`.
        total: u64,
        /// Final learning rate.
        min_lr: f32,
    },
}

/// An optimizer with its hyper-parameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct OptimizerSpec {
    /// The rule.
    pub kind: Optimizer,
    /// Base learning rate.
    pub lr: f32,
    /// Weight decay (AdamW: decoupled; SGD: L2 added to the gradient).
    pub weight_decay: f32,
    /// Learning-rate schedule.
    pub schedule: LrSchedule,
    /// Also decay rank-0/1 parameters (biases, norm scales).
    pub decay_vectors: bool,
    /// Clip the gradients to this global L2 norm before the update (PyTorch's
    /// `clip_grad_norm_(max_norm)`); None: no clipping.
    pub clip_grad_norm: Option<f32>,
}

impl OptimizerSpec {
    /// AdamW at `lr` with weight decay 0.01 (PyTorch's default) and a constant schedule.
    pub fn adamw(lr: f32) -> Self {
        OptimizerSpec {
            kind: Optimizer::adamw(),
            lr,
            weight_decay: 0.01,
            schedule: LrSchedule::Constant,
            decay_vectors: false,
            clip_grad_norm: None,
        }
    }

    /// SGD with momentum 0.9 at `lr`, no weight decay, constant schedule.
    pub fn sgd(lr: f32) -> Self {
        OptimizerSpec {
            kind: Optimizer::sgd(),
            lr,
            weight_decay: 0.0,
            schedule: LrSchedule::Constant,
            decay_vectors: false,
            clip_grad_norm: None,
        }
    }
}

/// The learning rate at step `step` (an f32[] value: the steps run before this one).
pub(crate) fn learning_rate(e: &mut Emit<'_>, spec: &OptimizerSpec, step: Value) -> R<Value> {
    let f = DType::F32;
    let base = f64::from(spec.lr);
    match spec.schedule {
        LrSchedule::Constant => e.scalar("train.lr", f, base),
        LrSchedule::WarmupCosine {
            warmup,
            total,
            min_lr,
        } => {
            let min_lr = f64::from(min_lr);
            // progress = clip((step − warmup) / max(total − warmup, 1), 0, 1)
            let w = e.scalar("train.lr.warmup", f, warmup as f64)?;
            let span = e.scalar(
                "train.lr.span",
                f,
                total.saturating_sub(warmup).max(1) as f64,
            )?;
            let after = e.sub("train.lr.after", step, w)?;
            let p = e.div("train.lr.progress_raw", after, span)?;
            let zero = e.scalar("train.lr.zero", f, 0.0)?;
            let one = e.scalar("train.lr.one", f, 1.0)?;
            let p = e.op("train.lr.progress", Op::Clip, &[p, zero, one])?;
            // cosine factor 0.5·(1 + cos(π·progress))
            let ang = e.scale("train.lr.angle", p, std::f64::consts::PI)?;
            let c = e.op("train.lr.cos", Op::Cos, &[ang])?;
            let c1 = e.add("train.lr.cos1", c, one)?;
            let cf = e.scale("train.lr.cosine", c1, 0.5)?;
            let range = e.scale("train.lr.decay", cf, base - min_lr)?;
            let floor = e.scalar("train.lr.min", f, min_lr)?;
            let lr = e.add("train.lr.cos_lr", range, floor)?;
            if warmup == 0 {
                return Ok(lr);
            }
            // warm = min((step + 1) / warmup, 1)
            let s1 = e.add("train.lr.step1", step, one)?;
            let r = e.div("train.lr.warm_raw", s1, w)?;
            let warm = e.op("train.lr.warm", Op::Min, &[r, one])?;
            e.mul("train.lr", lr, warm)
        }
    }
}

/// Gradient clipping by global norm, as PyTorch's `clip_grad_norm_`: `norm = √Σ‖g‖²` over
/// every gradient (accumulated in f32), `coef = min(max_norm / (norm + 1e-6), 1)`, each
/// gradient times `coef`. Returns the clipped gradients and the (unclipped) norm.
pub(crate) fn clip_by_global_norm(
    e: &mut Emit<'_>,
    grads: &[(String, Value)],
    max_norm: f32,
) -> R<(Vec<Value>, Value)> {
    let f = DType::F32;
    let mut total: Option<Value> = None;
    for (name, g) in grads {
        let g32 = if e.dtype(*g) == f {
            *g
        } else {
            e.cast(&format!("{name}.clip.f32"), *g, f)?
        };
        let sq = e.mul(&format!("{name}.clip.sq"), g32, g32)?;
        let s = e.reduce_sum(&format!("{name}.clip.sum"), sq, Vec::new(), false)?;
        total = Some(match total {
            None => s,
            Some(t) => e.add(&format!("{name}.clip.total"), t, s)?,
        });
    }
    let total = match total {
        Some(t) => t,
        None => e.scalar("train.clip.zero", f, 0.0)?,
    };
    let norm = e.op("train.grad_norm", Op::Sqrt, &[total])?;
    let eps = e.scalar("train.clip.eps", f, 1e-6)?;
    let denom = e.add("train.clip.denom", norm, eps)?;
    let max = e.scalar("train.clip.max_norm", f, f64::from(max_norm))?;
    let raw = e.div("train.clip.coef_raw", max, denom)?;
    let one = e.scalar("train.clip.one", f, 1.0)?;
    let coef = e.op("train.clip.coef", Op::Min, &[raw, one])?;
    let mut out = Vec::with_capacity(grads.len());
    for (name, g) in grads {
        let dt = e.dtype(*g);
        let c = if dt == f {
            coef
        } else {
            e.cast(&format!("{name}.clip.coef"), coef, dt)?
        };
        out.push(e.mul(&format!("{name}.clip"), *g, c)?);
    }
    Ok((out, norm))
}

/// One param's update: returns `(state or param name, new value)` pairs to install.
pub(crate) fn update(
    e: &mut Emit<'_>,
    spec: &OptimizerSpec,
    name: &str,
    param: Value,
    grad: Value,
    lr: Value,
    t: Value,
) -> R<Vec<(String, Value)>> {
    let ty: TensorType = e.ty(param);
    let wd = if ty.rank() >= 2 || spec.decay_vectors {
        spec.weight_decay
    } else {
        0.0
    };
    Ok(match spec.kind {
        Optimizer::Sgd { momentum, nesterov } => {
            let buf = e.g.add_state(&format!("{name}.momentum"), ty, 0.0)?;
            let out = e.ops(
                &format!("{name}.sgd"),
                Op::SgdUpdate {
                    momentum,
                    weight_decay: wd,
                    nesterov,
                },
                &[param, grad, buf, lr],
            )?;
            vec![
                (name.to_string(), out[0]),
                (format!("{name}.momentum"), out[1]),
            ]
        }
        Optimizer::AdamW {
            beta1,
            beta2,
            epsilon,
        } => {
            let m = e.g.add_state(&format!("{name}.m"), ty.clone(), 0.0)?;
            let v = e.g.add_state(&format!("{name}.v"), ty, 0.0)?;
            let out = e.ops(
                &format!("{name}.adamw"),
                Op::AdamwUpdate {
                    beta1,
                    beta2,
                    epsilon,
                    weight_decay: wd,
                },
                &[param, grad, m, v, lr, t],
            )?;
            vec![
                (name.to_string(), out[0]),
                (format!("{name}.m"), out[1]),
                (format!("{name}.v"), out[2]),
            ]
        }
    })
}
