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
//!
//! Moments are stored in [`StateDtype`] between steps; the update always computes in f32 on
//! the f32 master weights. A narrower moment is widened right before its update (read
//! through `after(moment, grad)`, so the widened copy exists only once the gradient does) and
//! rounded back after it: bf16 rounds to nearest even; `fp8` (MS-AMP's O2: FP8 first moment,
//! 16-bit second) keeps the first moment as E4M3 codes with a per-tensor scale from its own
//! amax (state `{param}.m.scale_inv`) and the second in bf16. The state entries hold the
//! stored dtype, so checkpoints keep each moment in its own.

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

/// How optimizer moments are stored between steps (see the module docs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum StateDtype {
    /// f32, as the master weights.
    #[default]
    F32,
    /// bf16 (round to nearest even after each update).
    Bf16,
    /// AdamW's first moment as E4M3 codes with a per-tensor scale, the second in bf16
    /// (MS-AMP O2); SGD's momentum as the first moment.
    Fp8,
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
    /// How the moments are stored between steps.
    pub state: StateDtype,
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
            state: StateDtype::F32,
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
            state: StateDtype::F32,
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
    let first = match spec.state {
        StateDtype::F32 => Stored::Wide,
        StateDtype::Bf16 => Stored::Bf16,
        StateDtype::Fp8 => Stored::Fp8,
    };
    let second = match spec.state {
        StateDtype::F32 => Stored::Wide,
        StateDtype::Bf16 | StateDtype::Fp8 => Stored::Bf16,
    };
    let mut updates = Vec::new();
    match spec.kind {
        Optimizer::Sgd { momentum, nesterov } => {
            let buf = Moment::add(e, &format!("{name}.momentum"), &ty, first, grad)?;
            let out = e.ops(
                &format!("{name}.sgd"),
                Op::SgdUpdate {
                    momentum,
                    weight_decay: wd,
                    nesterov,
                },
                &[param, grad, buf.wide, lr],
            )?;
            updates.push((name.to_string(), out[0]));
            buf.store(e, out[1], &mut updates)?;
        }
        Optimizer::AdamW {
            beta1,
            beta2,
            epsilon,
        } => {
            let m = Moment::add(e, &format!("{name}.m"), &ty, first, grad)?;
            let v = Moment::add(e, &format!("{name}.v"), &ty, second, grad)?;
            let out = e.ops(
                &format!("{name}.adamw"),
                Op::AdamwUpdate {
                    beta1,
                    beta2,
                    epsilon,
                    weight_decay: wd,
                },
                &[param, grad, m.wide, v.wide, lr, t],
            )?;
            updates.push((name.to_string(), out[0]));
            m.store(e, out[1], &mut updates)?;
            v.store(e, out[2], &mut updates)?;
        }
    }
    Ok(updates)
}

/// How one moment is stored.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Stored {
    /// In the parameter's dtype.
    Wide,
    /// bf16.
    Bf16,
    /// E4M3 codes and a per-tensor scale.
    Fp8,
}

/// A moment's state and its value in the parameter's dtype for this step's update.
struct Moment {
    name: String,
    stored: Stored,
    /// The moment as the update reads it.
    wide: Value,
}

impl Moment {
    /// Adds the moment's state (starting at 0) and its widened value, which waits for `grad`.
    fn add(e: &mut Emit<'_>, name: &str, ty: &TensorType, stored: Stored, grad: Value) -> R<Self> {
        let narrow = |dtype| TensorType {
            dtype,
            ..ty.clone()
        };
        let wide = match stored {
            Stored::Wide => e.g.add_state(name, ty.clone(), 0.0)?,
            Stored::Bf16 => {
                let s = e.g.add_state(name, narrow(DType::BF16), 0.0)?;
                let s = e.op(&format!("{name}.after"), Op::After, &[s, grad])?;
                e.cast(&format!("{name}.wide"), s, ty.dtype)?
            }
            Stored::Fp8 => {
                let s = e.g.add_state(name, narrow(DType::F8E4M3), 0.0)?;
                let inv = e.g.add_state(
                    &format!("{name}.scale_inv"),
                    TensorType::scalar(DType::F32),
                    1.0,
                )?;
                let s = e.op(&format!("{name}.after"), Op::After, &[s, grad])?;
                let d = e.op(
                    &format!("{name}.wide"),
                    Op::Dequantize { to: DType::F32 },
                    &[s, inv],
                )?;
                e.cast(&format!("{name}.wide.cast"), d, ty.dtype)?
            }
        };
        Ok(Moment {
            name: name.to_string(),
            stored,
            wide,
        })
    }

    /// Installs `new` (the update's result) as the moment's next value, in its stored dtype.
    fn store(&self, e: &mut Emit<'_>, new: Value, updates: &mut Vec<(String, Value)>) -> R<()> {
        let name = &self.name;
        match self.stored {
            Stored::Wide => updates.push((name.clone(), new)),
            Stored::Bf16 => updates.push((
                name.clone(),
                e.cast(&format!("{name}.narrow"), new, DType::BF16)?,
            )),
            Stored::Fp8 => {
                // Current scaling: the scale from this update's amax (E4M3's max over it).
                let new32 = e.cast(&format!("{name}.narrow.f32"), new, DType::F32)?;
                let a = e.op(&format!("{name}.amax"), Op::Amax, &[new32])?;
                let one = e.scalar(&format!("{name}.scale_init"), DType::F32, 1.0)?;
                let s = e.ops(
                    &format!("{name}.compute_scale"),
                    Op::ComputeScale {
                        fmt: DType::F8E4M3,
                        margin: 0.0,
                        source: fp8c_ir::AmaxSource::Current,
                        epsilon: 0.0,
                        power_2: false,
                    },
                    &[a, one],
                )?;
                let q = e.op(
                    &format!("{name}.narrow"),
                    Op::Quantize {
                        to: DType::F8E4M3,
                        saturate: true,
                    },
                    &[new32, s[0]],
                )?;
                updates.push((name.clone(), q));
                updates.push((format!("{name}.scale_inv"), s[1]));
            }
        }
        Ok(())
    }
}
