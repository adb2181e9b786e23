//! Normalisation rules: `layer_norm` (one `layer_norm_grad` node gives dx, dscale, dbias),
//! inference-mode `batch_norm` and `rms_norm` (built from ordinary ops), `softmax`
//! and `log_softmax` (`softmax_grad` from the forward output), and the cross-entropy loss.

use super::{At, Grads, R, SECOND_ORDER};
use crate::autodiff::emit::Emit;
use fp8c_ir::{NormalizeOp, Op, Support, Value};

/// Every op of the family but the training-only gradients has a rule.
pub(super) fn support(o: NormalizeOp<'_>) -> Support {
    match o {
        NormalizeOp::BatchNormalization { .. }
        | NormalizeOp::LayerNormalization { .. }
        | NormalizeOp::Softmax { .. }
        | NormalizeOp::LogSoftmax { .. }
        | NormalizeOp::RmsNormalization { .. } => Support::Yes,
        NormalizeOp::LayerNormGrad { .. } | NormalizeOp::SoftmaxGrad { .. } => {
            Support::No(SECOND_ORDER)
        }
        NormalizeOp::__Lifetime(never, _) => match never {},
    }
}

pub(super) fn vjp(e: &mut Emit<'_>, at: &At<'_>) -> R<Option<Grads>> {
    Ok(Some(match at.op {
        Op::LayerNormalization { axis, epsilon } => {
            let (x, scale) = (at.ins[0], at.ins[1]);
            let outs = e.ops(
                &at.n("grad"),
                Op::LayerNormGrad {
                    axis: *axis,
                    epsilon: *epsilon,
                },
                &[x, scale, at.dy()?],
            )?;
            let mut g = vec![Some(outs[0]), Some(outs[1])];
            if at.ins.len() == 3 {
                g.push(Some(outs[2]));
            }
            g
        }
        Op::Softmax { axis } | Op::LogSoftmax { axis } => {
            let log = matches!(at.op, Op::LogSoftmax { .. });
            vec![Some(e.op(
                &at.n("d0"),
                Op::SoftmaxGrad { axis: *axis, log },
                &[at.outs[0], at.dy()?],
            )?)]
        }
        Op::BatchNormalization { epsilon } => batch_norm(e, at, *epsilon)?,
        Op::RmsNormalization { axis, epsilon } => rms_norm(e, at, *axis, *epsilon)?,
        _ => return Ok(None),
    }))
}

/// `y = (x − mean)·inv·scale + bias` per channel (axis 1), `inv = 1/√(var + ε)`.
fn batch_norm(e: &mut Emit<'_>, at: &At<'_>, epsilon: f32) -> R<Grads> {
    let [x, scale, _bias, mean, var] = [at.ins[0], at.ins[1], at.ins[2], at.ins[3], at.ins[4]];
    let dy = at.dy()?;
    let xd = e.dims(x)?;
    let dt = e.dtype(x);
    let c = xd[1];
    // [C] → [1, C, 1, ...] so per-channel values broadcast over x.
    let mut bshape = vec![1u64; xd.len()];
    bshape[1] = c;
    let other_axes: Vec<i64> = (0..xd.len() as i64).filter(|&a| a != 1).collect();
    let n = |s: &str| at.n(s);
    let eps = e.scalar(&n("eps"), dt, f64::from(epsilon))?;
    let ve = e.add(&n("var_eps"), var, eps)?;
    let sd = e.op(&n("std"), Op::Sqrt, &[ve])?;
    let one = e.scalar(&n("one"), dt, 1.0)?;
    let inv = e.div(&n("inv"), one, sd)?; // [C]
    let per_channel = |e: &mut Emit<'_>, name: &str, v: Value| e.reshape(name, v, &bshape);
    let mut out: Grads = vec![None; 5];
    let sum_c =
        |e: &mut Emit<'_>, name: &str, v: Value| e.reduce_sum(name, v, other_axes.clone(), false);
    if at.want(0) {
        let k = e.mul(&n("d0.k"), scale, inv)?;
        let kb = per_channel(e, &n("d0.kb"), k)?;
        out[0] = Some(e.mul(&n("d0"), dy, kb)?);
    }
    let need_xc = at.want(1) || at.want(4);
    let xc = if need_xc {
        let mb = per_channel(e, &n("mean_b"), mean)?;
        Some(e.sub(&n("xc"), x, mb)?)
    } else {
        None
    };
    let sum_dy = if at.want(2) || at.want(3) {
        Some(sum_c(e, &n("sum_dy"), dy)?)
    } else {
        None
    };
    // Σ dy·(x − mean) per channel.
    let sum_dyxc = match xc {
        Some(xc) => {
            let t = e.mul(&n("dy_xc"), dy, xc)?;
            Some(sum_c(e, &n("sum_dy_xc"), t)?)
        }
        None => None,
    };
    if at.want(1) {
        out[1] = Some(e.mul(&n("d1"), sum_dyxc.expect("computed"), inv)?);
    }
    if at.want(2) {
        out[2] = sum_dy;
    }
    if at.want(3) {
        // dmean = −Σdy · scale · inv
        let t = e.mul(&n("d3.t"), sum_dy.expect("computed"), scale)?;
        let t = e.mul(&n("d3.u"), t, inv)?;
        out[3] = Some(e.neg(&n("d3"), t)?);
    }
    if at.want(4) {
        // dvar = −½ · Σdy·(x − mean) · scale · inv³
        let i2 = e.mul(&n("inv2"), inv, inv)?;
        let i3 = e.mul(&n("inv3"), i2, inv)?;
        let t = e.mul(&n("d4.t"), sum_dyxc.expect("computed"), scale)?;
        let t = e.mul(&n("d4.u"), t, i3)?;
        out[4] = Some(e.scale(&n("d4"), t, -0.5)?);
    }
    Ok(out)
}

/// `y = x·inv·scale` over the axes from `axis` on, `inv = 1/√(mean(x²) + ε)`: with
/// `g = dy·scale` and `x̂ = x·inv`, `dx = inv·(g − x̂·inv·mean(g·x))` and `dscale = Σ dy·x̂`
/// (summed to its shape).
fn rms_norm(e: &mut Emit<'_>, at: &At<'_>, axis: i64, epsilon: f32) -> R<Grads> {
    let (x, scale) = (at.ins[0], at.ins[1]);
    let dy = at.dy()?;
    let xd = e.dims(x)?;
    let dt = e.dtype(x);
    let rank = xd.len() as i64;
    let ax = if axis < 0 { axis + rank } else { axis };
    if !(0..rank).contains(&ax) {
        return Err(at.err(format!("axis {axis} is out of range for rank {rank}")));
    }
    let axes: Vec<i64> = (ax..rank).collect();
    let count: u64 = xd[ax as usize..].iter().product();
    let n = |s: &str| at.n(s);
    let x2 = e.mul(&n("x_sq"), x, x)?;
    let ss = e.reduce_sum(&n("sum_sq"), x2, axes.clone(), true)?;
    let ms = e.scale(&n("mean_sq"), ss, 1.0 / count.max(1) as f64)?;
    let eps = e.scalar(&n("eps"), dt, f64::from(epsilon))?;
    let me = e.add(&n("mean_sq_eps"), ms, eps)?;
    let rms = e.op(&n("rms"), Op::Sqrt, &[me])?;
    let one = e.scalar(&n("one"), dt, 1.0)?;
    let inv = e.div(&n("inv"), one, rms)?;
    let xhat = e.mul(&n("x_hat"), x, inv)?;
    let mut out: Grads = vec![None; at.ins.len()];
    if at.want(1) {
        let t = e.mul(&n("dy_x_hat"), dy, xhat)?;
        out[1] = Some(e.sum_to(&n("d1"), t, &e.dims(scale)?)?);
    }
    if at.want(0) {
        let g = e.mul(&n("g"), dy, scale)?;
        let gx = e.mul(&n("g_x"), g, x)?;
        let dot = e.reduce_sum(&n("sum_g_x"), gx, axes, true)?;
        let dot = e.scale(&n("mean_g_x"), dot, 1.0 / count.max(1) as f64)?;
        let k = e.mul(&n("inv_mean_g_x"), inv, dot)?;
        let t = e.mul(&n("x_hat_k"), xhat, k)?;
        let t = e.sub(&n("g_minus"), g, t)?;
        out[0] = Some(e.mul(&n("d0"), inv, t)?);
    }
    Ok(out)
}
