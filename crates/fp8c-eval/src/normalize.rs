//! `batch_norm` (inference), `layer_norm`, `softmax` and `log_softmax`.
//!
//! All four compute in f64 (statistics, exponentials, the normalisation itself) and round
//! once to the input's type: the reference is as close to exact as an f32 output can be, and
//! GPU kernels (f32 arithmetic) are compared with it within a tolerance. Each row is reduced
//! in index order by one thread, so results never depend on the thread count.

use crate::broadcast::broadcast_shapes;
use crate::cast::cast;
use crate::data::{Data, PAR_MIN, dims_of, norm_axis};
use crate::error::{Fail, KResult, dtype_err, shape_err};
use crate::movement::broadcast_to;
use fp8c_ir::{DType, Tensor};
use rayon::prelude::*;

/// A float tensor's values as f64 (FP8 and non-floats refused).
fn values_f64(t: &Tensor, what: &str) -> KResult<Vec<f64>> {
    match Data::load(t)? {
        Data::F32(v) => Ok(v.into_iter().map(f64::from).collect()),
        Data::F64(v) => Ok(v),
        _ => dtype_err!("{what} must be a float tensor, got {}", t.dtype()),
    }
}

/// Rounds f64 results once to `dtype`.
fn store(v: Vec<f64>, dtype: DType, shape: &[u64]) -> KResult<Tensor> {
    cast(&Tensor::from_f64(shape.to_vec(), &v), dtype, false)
}

/// Applies `f(row_in, row_out)` to independent rows, in parallel when large.
fn rows(v: &[f64], len: usize, f: impl Fn(usize, &[f64], &mut [f64]) + Sync + Send) -> Vec<f64> {
    let mut out = vec![0f64; v.len()];
    if len == 0 {
        return out;
    }
    if v.len() >= PAR_MIN {
        out.par_chunks_mut(len)
            .zip(v.par_chunks(len))
            .enumerate()
            .for_each(|(r, (o, x))| f(r, x, o));
    } else {
        out.chunks_mut(len)
            .zip(v.chunks(len))
            .enumerate()
            .for_each(|(r, (o, x))| f(r, x, o));
    }
    out
}

/// `batch_norm { epsilon }(x, scale, bias, mean, var)`: per channel (axis 1),
/// `(x − mean) / sqrt(var + epsilon) · scale + bias`.
pub(crate) fn batch_norm(inputs: &[&Tensor], epsilon: f32) -> KResult<Tensor> {
    let [x, scale, bias, mean, var] = inputs else {
        return Fail::arity("5", inputs.len());
    };
    let dims = dims_of(x);
    if dims.len() < 2 {
        return shape_err!("x must be [N, C, ...], got {:?}", x.shape());
    }
    let c = dims[1];
    let mut params = Vec::with_capacity(4);
    for (t, what) in [
        (scale, "scale"),
        (bias, "bias"),
        (mean, "mean"),
        (var, "var"),
    ] {
        if t.shape() != [c as u64] {
            return shape_err!("{what} must be [{c}], got {:?}", t.shape());
        }
        params.push(values_f64(t, what)?);
    }
    let xv = values_f64(x, "x")?;
    let inner: usize = dims[2..].iter().product();
    let eps = f64::from(epsilon);
    let out = rows(&xv, inner.max(1), |r, xr, o| {
        let ch = r % c;
        let (s, b, m, v) = (params[0][ch], params[1][ch], params[2][ch], params[3][ch]);
        let denom = (v + eps).sqrt();
        for (y, &xi) in o.iter_mut().zip(xr) {
            *y = (xi - m) / denom * s + b;
        }
    });
    store(out, x.dtype(), x.shape())
}

/// `layer_norm { axis, epsilon }(x, scale[, bias])`: over axes `axis..rank`,
/// `(x − mean) / sqrt(var + epsilon) · scale + bias` with the biased variance (two passes).
/// Scale and bias broadcast to the normalised dims.
pub(crate) fn layer_norm(inputs: &[&Tensor], axis: i64, epsilon: f32) -> KResult<Tensor> {
    let (x, scale, bias) = match inputs {
        [x, s] => (*x, *s, None),
        [x, s, b] => (*x, *s, Some(*b)),
        _ => return Fail::arity("2 or 3", inputs.len()),
    };
    let dims = dims_of(x);
    let ax = norm_axis(axis, dims.len())?;
    let norm_shape = &x.shape()[ax..];
    let cols: usize = dims[ax..].iter().product();
    let param = |t: &Tensor, what: &str| -> KResult<Vec<f64>> {
        if t.dtype() != x.dtype() {
            return dtype_err!(
                "{what} must have x's dtype {}, got {}",
                x.dtype(),
                t.dtype()
            );
        }
        if t.shape().len() > norm_shape.len()
            || broadcast_shapes(&[t.shape(), norm_shape])? != norm_shape
        {
            return shape_err!(
                "{what} of shape {:?} does not broadcast to the normalised dims {norm_shape:?}",
                t.shape()
            );
        }
        values_f64(&broadcast_to(t, norm_shape)?, what)
    };
    let s = param(scale, "scale")?;
    let b = bias.map(|b| param(b, "bias")).transpose()?;
    let xv = values_f64(x, "x")?;
    let eps = f64::from(epsilon);
    let out = rows(&xv, cols, |_, xr, o| {
        let n = xr.len() as f64;
        let mean = xr.iter().sum::<f64>() / n;
        let var = xr.iter().map(|&v| (v - mean) * (v - mean)).sum::<f64>() / n;
        let inv = 1.0 / (var + eps).sqrt();
        for (j, (y, &xi)) in o.iter_mut().zip(xr).enumerate() {
            let t = (xi - mean) * inv * s[j];
            *y = match &b {
                Some(b) => t + b[j],
                None => t,
            };
        }
    });
    store(out, x.dtype(), x.shape())
}

/// `softmax { axis }` (`log = false`) and `log_softmax { axis }` (`log = true`), max-subtracted:
/// `exp(x − max) / Σ exp(x − max)` and `x − max − ln Σ exp(x − max)` along one axis.
pub(crate) fn softmax(x: &Tensor, axis: i64, log: bool) -> KResult<Tensor> {
    let dims = dims_of(x);
    let ax = norm_axis(axis, dims.len())?;
    let (d, inner): (usize, usize) = (dims[ax], dims[ax + 1..].iter().product());
    let xv = values_f64(x, "x")?;
    // Each outer index owns a contiguous block of d·inner elements; within it, line i reads
    // block[j·inner + i] for j < d. Blocks are independent, lines are reduced in index order.
    let out = rows(&xv, d * inner, |_, block, o| {
        for i in 0..inner {
            let at = |j: usize| block[j * inner + i];
            let max = (0..d).map(at).fold(f64::NEG_INFINITY, |a, v| {
                if a.is_nan() || v.is_nan() {
                    f64::NAN
                } else {
                    a.max(v)
                }
            });
            let mut sum = 0.0;
            for j in 0..d {
                let e = (at(j) - max).exp();
                o[j * inner + i] = e;
                sum += e;
            }
            if log {
                let ls = sum.ln();
                for j in 0..d {
                    o[j * inner + i] = at(j) - max - ls;
                }
            } else {
                for j in 0..d {
                    o[j * inner + i] /= sum;
                }
            }
        }
    });
    store(out, x.dtype(), x.shape())
}
