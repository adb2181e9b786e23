//! The optim family: optimizer steps on FP32 master weights, PyTorch's `sgd_update` (momentum,
//! weight decay, Nesterov) and `adamw_update` (decoupled weight decay, bias-corrected moments).
//!
//! FP32 params (the master weights fp8c trains) update in f32, as TransformerEngine and
//! torchao keep them and as the CUDA kernels (`kernels/optimizer.cu`) compute, in the same
//! operation order and without contraction, so the CPU reference and the emulated device agree
//! bit for bit: one pass over the operands' bytes per tensor, split over threads in chunks,
//! writing the outputs directly (issue #19: the f64 path with its per-element tuples was half
//! of a BERT training step). Other param types compute in f64 and round once.

use crate::args;
use crate::cast::store_f64 as store;
use crate::data::{float_scalar_f64 as scalar, float_values_f64 as values_f64, par_map, same_type};
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

/// Elements per thread chunk of the f32 updates.
const CHUNK: usize = 1 << 14;

/// Elements an optimizer pass computes at a time into a local buffer (see `f32_map`).
const LANE_BLOCK: usize = 64;

/// `f(operands[..][i]) -> outputs[..][i]` over f32 tensors of `n` elements, in parallel
/// chunks, reading the operands in place and writing each output once.
fn f32_map<const I: usize, const O: usize>(
    ins: [&Tensor; I],
    f: impl Fn([f32; I]) -> [f32; O] + Sync + Send + Copy,
) -> KResult<[Tensor; O]> {
    use rayon::prelude::*;
    let n = ins[0].len();
    let mut views: [&[f32]; I] = [&[]; I];
    for (v, t) in views.iter_mut().zip(ins) {
        *v = t
            .as_slice::<f32>()
            .map_err(|m| crate::error::Fail::new(crate::error::ErrorKind::DType, m))?;
    }
    // Outputs are written once, element by element, into their uninitialised capacity (no
    // zeroing pass first; `set_len` below once every element is written).
    let mut outs: [Vec<f32>; O] = std::array::from_fn(|_| Vec::with_capacity(n));
    // Chunk c of every output, together.
    type Part<'a> = &'a mut [std::mem::MaybeUninit<f32>];
    let mut chunks: Vec<Vec<Part<'_>>> = (0..n.div_ceil(CHUNK)).map(|_| Vec::new()).collect();
    for out in outs.iter_mut() {
        for (c, part) in out.spare_capacity_mut()[..n].chunks_mut(CHUNK).enumerate() {
            chunks[c].push(part);
        }
    }
    let body = |(c, parts): (usize, &mut Vec<Part<'_>>)| {
        let lo = c * CHUNK;
        let len = parts.first().map_or(0, |p| p.len());
        let xs: [&[f32]; I] = std::array::from_fn(|k| &views[k][lo..lo + len]);
        let Ok(mut ys): Result<[Part<'_>; O], _> = std::mem::take(parts).try_into() else {
            unreachable!("one part per output")
        };
        // Blocks of `LANE_BLOCK` elements computed into a local array (which nothing else can
        // alias, so the loop vectorises) and then copied out.
        let g = f;
        let mut block = [[0f32; LANE_BLOCK]; O];
        let mut lo = 0;
        while lo < len {
            let w = LANE_BLOCK.min(len - lo);
            let ins: [&[f32]; I] = std::array::from_fn(|k| &xs[k][lo..lo + w]);
            for e in 0..w {
                let v = g(std::array::from_fn(|k| ins[k][e]));
                for k in 0..O {
                    block[k][e] = v[k];
                }
            }
            for (y, b) in ys.iter_mut().zip(&block) {
                for (d, &v) in y[lo..lo + w].iter_mut().zip(&b[..w]) {
                    d.write(v);
                }
            }
            lo += w;
        }
    };
    if n >= 2 * CHUNK {
        chunks.par_iter_mut().enumerate().for_each(body);
    } else {
        chunks.iter_mut().enumerate().for_each(body);
    }
    drop(chunks);
    for out in outs.iter_mut() {
        // SAFETY: the chunks cover 0..n of every output, and each task wrote every element of
        // its chunk (lo runs over 0..len in whole blocks).
        unsafe { out.set_len(n) };
    }
    let shape = ins[0].shape().to_vec();
    let mut res = Vec::with_capacity(O);
    for out in outs {
        res.push(
            Tensor::from_vec(DType::F32, shape.clone(), out)
                .map_err(|m| crate::error::Fail::new(crate::error::ErrorKind::TooLarge, m))?,
        );
    }
    Ok(res
        .try_into()
        .unwrap_or_else(|_| unreachable!("one tensor per output")))
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
    if p.dtype() == DType::F32 {
        // optimizer.cu's sgd_one: g = grad + wd·p; buf' = (momentum = 0 ? g : momentum·buf + g);
        // p' = p − lr·(nesterov ? g + momentum·buf' : buf').
        let lr = lr as f32;
        let [np, nb] = f32_map([p, g, buf], |[pv, gv, bv]| {
            let gg = gv + weight_decay * pv;
            let nb = if momentum == 0.0 {
                gg
            } else {
                momentum * bv + gg
            };
            let step = if nesterov { gg + momentum * nb } else { nb };
            [pv - lr * step, nb]
        })?;
        return Ok(vec![np, nb]);
    }
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
    if p.dtype() == DType::F32 {
        // optimizer.cu's adamw_one, operation for operation.
        let (lr, t) = (lr as f32, step as f32);
        let (b1, b2, eps, wd) = (
            h.beta1 as f32,
            h.beta2 as f32,
            h.epsilon as f32,
            h.weight_decay as f32,
        );
        let (bc1, bc2) = (1.0 - b1.powf(t), 1.0 - b2.powf(t));
        let [np, nm, nv] = f32_map([p, g, m, v], |[pv, gv, mv, vv]| {
            let pd = pv - lr * wd * pv;
            let nm = b1 * mv + (1.0 - b1) * gv;
            let nv = b2 * vv + (1.0 - b2) * gv * gv;
            let (mhat, vhat) = (nm / bc1, nv / bc2);
            [pd - (lr * mhat) / (vhat.sqrt() + eps), nm, nv]
        })?;
        return Ok(vec![np, nm, nv]);
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
