//! The optim family: optimizer steps on FP32 master weights, PyTorch's `sgd_update` (momentum,
//! weight decay, Nesterov) and `adamw_update` (decoupled weight decay, bias-corrected moments).
//! Both compute in f64 per element and round once to the param's type.

use crate::args;
use crate::data::{
    float_scalar_f64 as scalar, float_values_f64 as values_f64, par_map, same_type,
    store_f64 as store,
};
use crate::error::{KResult, dtype_err, value_err};
use fp8c_ir::{DType, OptimOp, Support, Tensor};

/// Evaluates an op of the optim family.
pub(crate) fn eval(op: OptimOp<'_>, inputs: &[&Tensor]) -> KResult<Vec<Tensor>> {
    match op {
        OptimOp::SgdUpdate {
            momentum,
            weight_decay,
            nesterov,
        } => {
            let [p, g, buf, lr] = args(inputs)?;
            sgd_update(p, g, buf, lr, *momentum, *weight_decay, *nesterov)
        }
        OptimOp::AdamwUpdate {
            beta1,
            beta2,
            epsilon,
            weight_decay,
        } => {
            let [p, g, m, v, lr, t] = args(inputs)?;
            let h = AdamHyper {
                beta1: f64::from(*beta1),
                beta2: f64::from(*beta2),
                epsilon: f64::from(*epsilon),
                weight_decay: f64::from(*weight_decay),
            };
            adamw_update([p, g, m, v], lr, t, &h)
        }
        OptimOp::__Lifetime(never, _) => match never {},
    }
}

/// Every op of the family is evaluated.
pub(crate) fn support(op: OptimOp<'_>) -> Support {
    match op {
        OptimOp::SgdUpdate { .. } | OptimOp::AdamwUpdate { .. } => Support::Yes,
        OptimOp::__Lifetime(never, _) => match never {},
    }
}

/// Checks that every optimizer operand has the param's type; returns the lr.
fn optimizer_operands(ts: &[&Tensor], names: &[&str], lr: &Tensor) -> KResult<f64> {
    for (t, what) in ts.iter().zip(names).skip(1) {
        same_type(t, ts[0], what, "param")?;
    }
    if lr.dtype() != DType::F32 {
        return dtype_err!("lr must be f32, got {}", lr.dtype());
    }
    scalar(lr, "lr")
}

/// PyTorch's SGD with momentum (and weight decay, optionally Nesterov).
fn sgd_update(
    p: &Tensor,
    g: &Tensor,
    buf: &Tensor,
    lr: &Tensor,
    momentum: f32,
    weight_decay: f32,
    nesterov: bool,
) -> KResult<Vec<Tensor>> {
    let lr = optimizer_operands(&[p, g, buf], &["param", "grad", "momentum_buffer"], lr)?;
    let (mu, wd) = (f64::from(momentum), f64::from(weight_decay));
    let (pv, gv, bv) = (
        values_f64(p, "param")?,
        values_f64(g, "grad")?,
        values_f64(buf, "momentum_buffer")?,
    );
    let step: Vec<(f64, f64)> = par_map(&(0..pv.len()).collect::<Vec<_>>(), |&i| {
        let d = gv[i] + wd * pv[i];
        let b = mu * bv[i] + d;
        let dir = if nesterov { d + mu * b } else { b };
        (pv[i] - lr * dir, b)
    });
    let (np, nb): (Vec<f64>, Vec<f64>) = step.into_iter().unzip();
    Ok(vec![
        store(np, p.dtype(), p.shape())?,
        store(nb, p.dtype(), p.shape())?,
    ])
}

/// AdamW's hyper-parameters, widened.
struct AdamHyper {
    beta1: f64,
    beta2: f64,
    epsilon: f64,
    weight_decay: f64,
}

/// PyTorch's AdamW (decoupled weight decay, bias-corrected moments).
fn adamw_update(ts: [&Tensor; 4], lr: &Tensor, t: &Tensor, h: &AdamHyper) -> KResult<Vec<Tensor>> {
    let [p, g, m, v] = ts;
    let lr = optimizer_operands(&ts, &["param", "grad", "m", "v"], lr)?;
    if t.dtype() != DType::F32 {
        return dtype_err!("t must be f32, got {}", t.dtype());
    }
    let step = scalar(t, "t")?;
    if step.is_nan() || step < 1.0 {
        return value_err!("t (the 1-based update count) is {step}, expected ≥ 1");
    }
    let bc1 = 1.0 - h.beta1.powf(step);
    let bc2 = 1.0 - h.beta2.powf(step);
    let (pv, gv, mv, vv) = (
        values_f64(p, "param")?,
        values_f64(g, "grad")?,
        values_f64(m, "m")?,
        values_f64(v, "v")?,
    );
    let out: Vec<(f64, f64, f64)> = par_map(&(0..pv.len()).collect::<Vec<_>>(), |&i| {
        let decayed = pv[i] * (1.0 - lr * h.weight_decay);
        let m1 = h.beta1 * mv[i] + (1.0 - h.beta1) * gv[i];
        let v1 = h.beta2 * vv[i] + (1.0 - h.beta2) * gv[i] * gv[i];
        let denom = (v1 / bc2).sqrt() + h.epsilon;
        (decayed - lr * (m1 / bc1) / denom, m1, v1)
    });
    let mut np = Vec::with_capacity(out.len());
    let mut nm = Vec::with_capacity(out.len());
    let mut nv = Vec::with_capacity(out.len());
    for (a, b, c) in out {
        np.push(a);
        nm.push(b);
        nv.push(c);
    }
    Ok(vec![
        store(np, p.dtype(), p.shape())?,
        store(nm, p.dtype(), p.shape())?,
        store(nv, p.dtype(), p.shape())?,
    ])
}
