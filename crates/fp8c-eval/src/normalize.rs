//! The normalize family: `batch_norm` (inference), `layer_norm`, `softmax` and `log_softmax`,
//! and the gradients `layer_norm_grad` and `softmax_grad`.
//!
//! All compute in f64 (statistics, exponentials, the normalisation itself) and round once to
//! the input's type: the reference is as close to exact as an f32 output can be, and GPU
//! kernels (f32 arithmetic) are compared with it within a tolerance. Each row is reduced by
//! one thread in a fixed order ([`sum_f64`]: four interleaved partial sums, which vectorise,
//! added at the end), so results never depend on the thread count; f64 inputs stay f64
//! throughout, which is what the gradient checks rely on. f32 inputs are read in place and
//! each result is rounded straight to f32 (no f64 copy of the tensor either way).

use crate::args;
use crate::broadcast::broadcast_shapes;
use crate::cast::store_f64 as store;
use crate::data::{
    PAR_MIN, dims_of, float_values_f64 as values_f64, map_into, max_keep_nan, norm_axis, rows_mut,
    same_type,
};
use crate::error::{Fail, KResult, dtype_err, shape_err};
use crate::movement::broadcast_to;
use fp8c_ir::{DType, NormalizeOp, Support, Tensor};
use rayon::prelude::*;
use std::mem::MaybeUninit;

/// Evaluates an op of the normalize family.
pub(crate) fn eval(op: NormalizeOp<'_>, inputs: &[&Tensor]) -> KResult<Vec<Tensor>> {
    let one = |t: Tensor| Ok(vec![t]);
    match op {
        NormalizeOp::BatchNormalization { epsilon } => one(batch_norm(inputs, *epsilon)?),
        NormalizeOp::LayerNormalization { axis, epsilon } => {
            one(layer_norm(inputs, *axis, *epsilon)?)
        }
        NormalizeOp::RmsNormalization { axis, epsilon } => {
            let [_, _] = args(inputs)?;
            one(normalize_rows(inputs, *axis, *epsilon, true)?)
        }
        NormalizeOp::Softmax { axis } => {
            let [x] = args(inputs)?;
            one(softmax(x, *axis, false)?)
        }
        NormalizeOp::LogSoftmax { axis } => {
            let [x] = args(inputs)?;
            one(softmax(x, *axis, true)?)
        }
        NormalizeOp::LayerNormGrad { axis, epsilon } => {
            let [x, scale, dy] = args(inputs)?;
            layer_norm_grad(x, scale, dy, *axis, *epsilon)
        }
        NormalizeOp::SoftmaxGrad { axis, log } => {
            let [y, dy] = args(inputs)?;
            one(softmax_grad(y, dy, *axis, *log)?)
        }
        NormalizeOp::__Lifetime(never, _) => match never {},
    }
}

/// Every op of the family is evaluated.
pub(crate) fn support(op: NormalizeOp<'_>) -> Support {
    match op {
        NormalizeOp::BatchNormalization { .. }
        | NormalizeOp::LayerNormalization { .. }
        | NormalizeOp::RmsNormalization { .. }
        | NormalizeOp::Softmax { .. }
        | NormalizeOp::LogSoftmax { .. }
        | NormalizeOp::LayerNormGrad { .. }
        | NormalizeOp::SoftmaxGrad { .. } => Support::Yes,
        NormalizeOp::__Lifetime(never, _) => match never {},
    }
}

/// `Σ f(x)` over `xs` in f64: four partial sums over the elements `4i + l`, then
/// `(s0 + s1) + (s2 + s3)`. A fixed order (one thread, independent of the thread count) whose
/// four chains vectorise; a sequential f64 sum would wait on each addition.
#[inline(always)]
fn sum_f64<T: Copy>(xs: &[T], f: impl Fn(T) -> f64) -> f64 {
    let mut acc = [0f64; 4];
    let chunks = xs.chunks_exact(4);
    let rest = chunks.remainder();
    for c in chunks {
        for l in 0..4 {
            acc[l] += f(c[l]);
        }
    }
    for (l, &v) in rest.iter().enumerate() {
        acc[l] += f(v);
    }
    (acc[0] + acc[1]) + (acc[2] + acc[3])
}

/// [`sum_f64`] over an iterator (strided lines): the same partial sums, the same result.
fn sum_lanes(xs: impl Iterator<Item = f64>) -> f64 {
    let mut acc = [0f64; 4];
    for (i, v) in xs.enumerate() {
        acc[i % 4] += v;
    }
    (acc[0] + acc[1]) + (acc[2] + acc[3])
}

thread_local! {
    /// Per-thread scratch for a softmax row's exponentials (f64, before the division).
    static EXPS: std::cell::RefCell<Vec<f64>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A row's mean (0 for RMS norm) and `1/√(var + ε)` (var: the mean of `(x − mean)²`, the
/// biased variance), in f64.
#[inline(always)]
fn row_stats<T: Copy>(xr: &[T], wide: impl Fn(T) -> f64 + Copy, eps: f64, rms: bool) -> (f64, f64) {
    let n = xr.len() as f64;
    let mean = if rms { 0.0 } else { sum_f64(xr, wide) / n };
    let var = sum_f64(xr, |v| {
        let d = wide(v) - mean;
        d * d
    }) / n;
    (mean, 1.0 / (var + eps).sqrt())
}

/// An f32 result vector as a tensor of `shape`.
fn f32_tensor(shape: &[u64], out: Vec<f32>) -> KResult<Tensor> {
    Tensor::from_vec(DType::F32, shape.to_vec(), out)
        .map_err(|m| Fail::new(crate::error::ErrorKind::TooLarge, m))
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
fn batch_norm(inputs: &[&Tensor], epsilon: f32) -> KResult<Tensor> {
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
    let inner: usize = dims[2..].iter().product();
    let eps = f64::from(epsilon);
    if x.dtype() == DType::F32
        && let Ok(xs) = x.as_slice::<f32>()
    {
        // f32 x read in place and each result rounded once to f32 (the f64 formula of
        // the general path, element for element, in one vectorisable pass per row),
        // written once into the result's uninitialised capacity.
        let len = xs.len();
        let mut out: Vec<f32> = Vec::with_capacity(len);
        rows_mut(
            &mut out.spare_capacity_mut()[..len],
            inner.max(1),
            |r, o| {
                let ch = r % c;
                let (s, b, m, v) = (params[0][ch], params[1][ch], params[2][ch], params[3][ch]);
                let denom = (v + eps).sqrt();
                let xr = &xs[r * o.len()..][..o.len()];
                map_into(xr, o, |xi| {
                    MaybeUninit::new(((f64::from(xi) - m) / denom * s + b) as f32)
                });
            },
        );
        // SAFETY: the rows above tile all `len` elements and each row is written whole (a
        // panic unwinds before this, leaving `out` empty).
        unsafe { out.set_len(len) };
        return f32_tensor(x.shape(), out);
    }
    let xv = values_f64(x, "x")?;
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
    normalize_rows(inputs, axis, epsilon, false)
}

/// Layer norm (`rms = false`: `(x − mean)/√(var + ε)`) or RMS norm (`rms`: `x/√(mean(x²) + ε)`)
/// over axes `axis..`, times scale (plus bias), in f64 and rounded once.
fn normalize_rows(inputs: &[&Tensor], axis: i64, epsilon: f32, rms: bool) -> KResult<Tensor> {
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
    let eps = f64::from(epsilon);
    if x.dtype() == DType::F32
        && let Ok(xs) = x.as_slice::<f32>()
    {
        // The f64 formula below, element for element, with x read in place.
        let mut out = vec![0f32; xs.len()];
        rows_mut(&mut out, cols, |r, o| {
            let xr = &xs[r * cols..][..cols];
            let (mean, inv) = row_stats(xr, f64::from, eps, rms);
            for (j, (y, &xi)) in o.iter_mut().zip(xr).enumerate() {
                let t = (f64::from(xi) - mean) * inv * s[j];
                *y = match &b {
                    Some(b) => t + b[j],
                    None => t,
                } as f32;
            }
        });
        return f32_tensor(x.shape(), out);
    }
    let xv = values_f64(x, "x")?;
    let out = rows(&xv, cols, |_, xr, o| {
        let (mean, inv) = row_stats(xr, |v| v, eps, rms);
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

/// `e^d` for a max-subtracted `d ≤ 0`, the same value as `f64::exp`: below −746 the result is
/// 0 either way (e^d < 2^-1075, half the smallest subnormal), but the C library takes its
/// underflow path there (raising the flag and setting `errno`), which an attention mask of
/// `f32::MIN` sends every masked element through.
#[inline(always)]
fn exp_shifted(d: f64) -> f64 {
    if d < -746.0 { 0.0 } else { d.exp() }
}

/// `softmax { axis }` (`log = false`) and `log_softmax { axis }` (`log = true`), max-subtracted:
/// `exp(x − max) / Σ exp(x − max)` and `x − max − ln Σ exp(x − max)` along one axis.
fn softmax(x: &Tensor, axis: i64, log: bool) -> KResult<Tensor> {
    let dims = dims_of(x);
    let ax = norm_axis(axis, dims.len())?;
    let (d, inner): (usize, usize) = (dims[ax], dims[ax + 1..].iter().product());
    if x.dtype() == DType::F32
        && inner == 1
        && let Ok(xs) = x.as_slice::<f32>()
    {
        // The last axis of f32 x, read in place: the f64 formula below, row by row.
        let mut out = vec![0f32; xs.len()];
        rows_mut(&mut out, d, |r, o| {
            let xr = &xs[r * d..][..d];
            let max = max_keep_nan(xr.iter().map(|&v| f64::from(v)));
            if log {
                let ls = sum_f64(xr, |v| exp_shifted(f64::from(v) - max)).ln();
                for (y, &v) in o.iter_mut().zip(xr) {
                    *y = (f64::from(v) - max - ls) as f32;
                }
                return;
            }
            EXPS.with(|e| {
                let mut e = e.borrow_mut();
                e.clear();
                e.extend(xr.iter().map(|&v| exp_shifted(f64::from(v) - max)));
                let sum = sum_f64(&e, |v| v);
                for (y, &v) in o.iter_mut().zip(e.iter()) {
                    *y = (v / sum) as f32;
                }
            });
        });
        return f32_tensor(x.shape(), out);
    }
    let xv = values_f64(x, "x")?;
    // Each outer index owns a contiguous block of d·inner elements; within it, line i reads
    // block[j·inner + i] for j < d. Blocks are independent, each line reduced in a fixed order.
    let out = rows(&xv, d * inner, |_, block, o| {
        for i in 0..inner {
            let at = |j: usize| block[j * inner + i];
            let max = max_keep_nan((0..d).map(at));
            for j in 0..d {
                o[j * inner + i] = exp_shifted(at(j) - max);
            }
            let sum = sum_lanes((0..d).map(|j| o[j * inner + i]));
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

/// `layer_norm` backward over axes `axis..`: dx, dscale, dbias.
fn layer_norm_grad(
    x: &Tensor,
    scale: &Tensor,
    dy: &Tensor,
    axis: i64,
    epsilon: f32,
) -> KResult<Vec<Tensor>> {
    same_type(dy, x, "dy", "x")?;
    let dims = dims_of(x);
    let ax = norm_axis(axis, dims.len())?;
    if scale.shape() != &x.shape()[ax..] || scale.dtype() != x.dtype() {
        return shape_err!(
            "scale {:?} must be x's normalised dims {:?}",
            scale.shape(),
            &x.shape()[ax..]
        );
    }
    let cols: usize = dims[ax..].iter().product();
    let xv = values_f64(x, "x")?;
    let s = values_f64(scale, "scale")?;
    let dyv = values_f64(dy, "dy")?;
    let eps = f64::from(epsilon);
    let stats = |r: usize| row_stats(&xv[r * cols..][..cols], |v| v, eps, false);
    let mut dx = vec![0f64; xv.len()];
    rows_mut(&mut dx, cols, |r, o| {
        let (mean, inv) = stats(r);
        let (xr, dr) = (&xv[r * cols..][..cols], &dyv[r * cols..][..cols]);
        let n = cols as f64;
        let (mut sg, mut sgx) = (0.0, 0.0);
        for j in 0..cols {
            let g = dr[j] * s[j];
            sg += g;
            sgx += g * (xr[j] - mean) * inv;
        }
        let (mg, mgx) = (sg / n, sgx / n);
        for j in 0..cols {
            let xhat = (xr[j] - mean) * inv;
            o[j] = inv * (dr[j] * s[j] - mg - xhat * mgx);
        }
    });
    let (mut ds, mut db) = (vec![0f64; cols], vec![0f64; cols]);
    if let Some(nrows) = xv.len().checked_div(cols) {
        for r in 0..nrows {
            let (mean, inv) = stats(r);
            let (xr, dr) = (&xv[r * cols..][..cols], &dyv[r * cols..][..cols]);
            for j in 0..cols {
                ds[j] += dr[j] * (xr[j] - mean) * inv;
                db[j] += dr[j];
            }
        }
    }
    Ok(vec![
        store(dx, x.dtype(), x.shape())?,
        store(ds, x.dtype(), scale.shape())?,
        store(db, x.dtype(), scale.shape())?,
    ])
}

/// `softmax` / `log_softmax` backward from the forward output `y`.
fn softmax_grad(y: &Tensor, dy: &Tensor, axis: i64, log: bool) -> KResult<Tensor> {
    same_type(dy, y, "dy", "y")?;
    let dims = dims_of(y);
    let ax = norm_axis(axis, dims.len())?;
    let (d, inner) = (dims[ax], dims[ax + 1..].iter().product::<usize>());
    if y.dtype() == DType::F32
        && inner == 1
        && let (Ok(ys), Ok(ds)) = (y.as_slice::<f32>(), dy.as_slice::<f32>())
    {
        // The last axis of f32 tensors, read in place (no f64 copies of y and dy, which at
        // an attention's T×T probabilities were most of a training step's peak): the f64
        // formula below, row by row, the same operations in the same order.
        let mut out = vec![0f32; ys.len()];
        rows_mut(&mut out, d, |r, o| {
            let (yr, dr) = (&ys[r * d..][..d], &ds[r * d..][..d]);
            let (y, g) = (|j: usize| f64::from(yr[j]), |j: usize| f64::from(dr[j]));
            if log {
                let s: f64 = (0..d).map(g).sum();
                for (j, o) in o.iter_mut().enumerate() {
                    *o = (g(j) - y(j).exp() * s) as f32;
                }
            } else {
                let s: f64 = (0..d).map(|j| g(j) * y(j)).sum();
                for (j, o) in o.iter_mut().enumerate() {
                    *o = (y(j) * (g(j) - s)) as f32;
                }
            }
        });
        return f32_tensor(y.shape(), out);
    }
    let yv = values_f64(y, "y")?;
    let dv = values_f64(dy, "dy")?;
    let mut out = vec![0f64; yv.len()];
    rows_mut(&mut out, d * inner, |b, o| {
        let (yb, db) = (
            &yv[b * d * inner..][..d * inner],
            &dv[b * d * inner..][..d * inner],
        );
        for i in 0..inner {
            let at = |j: usize| j * inner + i;
            if log {
                let s: f64 = (0..d).map(|j| db[at(j)]).sum();
                for j in 0..d {
                    o[at(j)] = db[at(j)] - yb[at(j)].exp() * s;
                }
            } else {
                let s: f64 = (0..d).map(|j| db[at(j)] * yb[at(j)]).sum();
                for j in 0..d {
                    o[at(j)] = yb[at(j)] * (db[at(j)] - s);
                }
            }
        }
    });
    store(out, y.dtype(), y.shape())
}

#[cfg(test)]
mod tests {
    use super::exp_shifted;
    use fp8c_ir::Tensor;

    /// The in-place f32 path of `softmax_grad` gives the bits of the f64 path rounded once.
    #[test]
    fn softmax_grad_in_place_matches_the_f64_path() {
        let n = 3 * 37;
        let y: Vec<f32> = (0..n)
            .map(|i| ((i * 7919 % 101) as f32 + 0.5) / 101.0)
            .collect();
        let dy: Vec<f32> = (0..n)
            .map(|i| ((i * 104729 % 97) as f32 - 48.0) / 13.0)
            .collect();
        let wide = |v: &[f32]| v.iter().map(|&x| f64::from(x)).collect::<Vec<_>>();
        for log in [false, true] {
            let fast = super::softmax_grad(
                &Tensor::from_f32(vec![3, 37], &y),
                &Tensor::from_f32(vec![3, 37], &dy),
                -1,
                log,
            )
            .unwrap();
            let slow = super::softmax_grad(
                &Tensor::from_f64(vec![3, 37], &wide(&y)),
                &Tensor::from_f64(vec![3, 37], &wide(&dy)),
                -1,
                log,
            )
            .unwrap();
            let fast = fast.to_f32_vec().unwrap();
            let slow: Vec<f32> = slow
                .to_f64_vec()
                .unwrap()
                .iter()
                .map(|&v| v as f32)
                .collect();
            assert_eq!(
                fast.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                slow.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                "log={log}"
            );
        }
    }

    #[test]
    fn the_shifted_exp_is_the_library_exp() {
        let mut ds = vec![
            0.0,
            -0.0,
            -1.0,
            -700.0,
            -708.5,
            -745.0,
            -745.133,
            -745.1332191019412,
        ];
        ds.extend([
            -745.14,
            -745.9,
            -746.0,
            -746.000001,
            -1e5,
            f64::from(f32::MIN),
            -1e300,
        ]);
        ds.extend([f64::NEG_INFINITY, f64::NAN]);
        // Every f64 from −744 down to −748 in steps of about 2^-40.
        let mut d = -744.0f64;
        while d > -748.0 {
            ds.push(d);
            d -= 2f64.powi(-40) * 1_000_003.0;
        }
        for d in ds {
            let (got, want) = (exp_shifted(d), d.exp());
            assert!(
                got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
                "e^{d}: {got:e} vs {want:e}"
            );
        }
    }
}
