//! The training ops the autodiff pass emits: backward kernels (`gather_grad`,
//! `layer_norm_grad`, `softmax_grad`, `gelu_grad`, `conv_grad_input`, `conv_grad_weight`,
//! `max_pool_grad`, `average_pool_grad`), the cross-entropy loss and its gradient,
//! `all_finite`, and the optimizer steps (`sgd_update`, `adamw_update`).
//!
//! Conventions are the evaluator's (see `mod.rs`): floats compute in f64 and round once to
//! the input's type, except the two convolution gradients, which are GEMMs and accumulate in
//! f32 (f64 for f64) on the `gemm` crate like `conv` itself. Every sum that crosses rows
//! (a weight gradient, a scatter-add, a norm's dscale) runs in index order on one thread, so
//! results never depend on the thread count. f64 inputs stay f64 throughout, which is what
//! the gradient checks rely on.

use crate::cast::cast;
use crate::data::{Data, PAR_MIN, dims_of, int_values, norm_axis, numel, shape_u64};
use crate::error::{Fail, KResult, attr_err, dtype_err, shape_err, unsupported, value_err};
use crate::linalg::{GemmElem, Mat, gemm_into};
use crate::window::{self, Tap, WindowAttrs};
use fp8c_ir::{AutoPad, DType, GeluApprox, Op, Tensor};
use rayon::prelude::*;

/// True for the ops this file evaluates.
pub(crate) fn is_training_op(op: &Op) -> bool {
    matches!(
        op,
        Op::GatherGrad { .. }
            | Op::LayerNormGrad { .. }
            | Op::SoftmaxGrad { .. }
            | Op::GeluGrad { .. }
            | Op::ConvGradInput { .. }
            | Op::ConvGradWeight { .. }
            | Op::MaxPoolGrad { .. }
            | Op::AveragePoolGrad { .. }
            | Op::SoftmaxCrossEntropy
            | Op::SoftmaxCrossEntropyGrad
            | Op::AllFinite
            | Op::SgdUpdate { .. }
            | Op::AdamwUpdate { .. }
    )
}

/// Evaluates a training op (see [`is_training_op`]).
pub(crate) fn eval(op: &Op, inputs: &[&Tensor]) -> KResult<Vec<Tensor>> {
    let one = |t: Tensor| Ok(vec![t]);
    match op {
        Op::GatherGrad { axis, size } => {
            let [dy, idx] = super::args(inputs)?;
            one(gather_grad(dy, idx, *axis, *size)?)
        }
        Op::LayerNormGrad { axis, epsilon } => {
            let [x, scale, dy] = super::args(inputs)?;
            layer_norm_grad(x, scale, dy, *axis, *epsilon)
        }
        Op::SoftmaxGrad { axis, log } => {
            let [y, dy] = super::args(inputs)?;
            one(softmax_grad(y, dy, *axis, *log)?)
        }
        Op::GeluGrad { approximate } => {
            let [x, dy] = super::args(inputs)?;
            one(gelu_grad(x, dy, *approximate)?)
        }
        Op::ConvGradInput {
            kernel_shape,
            strides,
            pads,
            dilations,
            group,
            auto_pad,
            input_shape,
        } => {
            let [dy, w] = super::args(inputs)?;
            let win = ConvWin {
                kernel_shape,
                strides,
                pads,
                dilations,
                group: *group,
                auto_pad: *auto_pad,
            };
            one(conv_grad_input(dy, w, &win, input_shape)?)
        }
        Op::ConvGradWeight {
            kernel_shape,
            strides,
            pads,
            dilations,
            group,
            auto_pad,
        } => {
            let [x, dy] = super::args(inputs)?;
            let win = ConvWin {
                kernel_shape,
                strides,
                pads,
                dilations,
                group: *group,
                auto_pad: *auto_pad,
            };
            one(conv_grad_weight(x, dy, &win)?)
        }
        Op::MaxPoolGrad {
            kernel_shape,
            strides,
            pads,
            dilations,
            ceil_mode,
            auto_pad,
        } => {
            let [x, dy] = super::args(inputs)?;
            let win = WindowAttrs {
                strides,
                pads,
                dilations,
                auto_pad: *auto_pad,
                ceil_mode: *ceil_mode,
            };
            one(pool_grad(x, dy, None, kernel_shape, &win)?)
        }
        Op::AveragePoolGrad {
            kernel_shape,
            strides,
            pads,
            dilations,
            ceil_mode,
            count_include_pad,
            auto_pad,
        } => {
            let [x, dy] = super::args(inputs)?;
            let win = WindowAttrs {
                strides,
                pads,
                dilations,
                auto_pad: *auto_pad,
                ceil_mode: *ceil_mode,
            };
            one(pool_grad(
                x,
                dy,
                Some(*count_include_pad),
                kernel_shape,
                &win,
            )?)
        }
        Op::SoftmaxCrossEntropy => {
            let [logits, labels] = super::args(inputs)?;
            cross_entropy(logits, labels)
        }
        Op::SoftmaxCrossEntropyGrad => {
            let [lp, labels, dloss] = super::args(inputs)?;
            one(cross_entropy_grad(lp, labels, dloss)?)
        }
        Op::AllFinite => one(all_finite(inputs)?),
        Op::SgdUpdate {
            momentum,
            weight_decay,
            nesterov,
        } => {
            let [p, g, buf, lr] = super::args(inputs)?;
            sgd_update(p, g, buf, lr, *momentum, *weight_decay, *nesterov)
        }
        Op::AdamwUpdate {
            beta1,
            beta2,
            epsilon,
            weight_decay,
        } => {
            let [p, g, m, v, lr, t] = super::args(inputs)?;
            let h = AdamHyper {
                beta1: f64::from(*beta1),
                beta2: f64::from(*beta2),
                epsilon: f64::from(*epsilon),
                weight_decay: f64::from(*weight_decay),
            };
            adamw_update([p, g, m, v], lr, t, &h)
        }
        other => unsupported!("`{}` is not a training op", other.name()),
    }
}

// ------------------------------------------------------------------ helpers

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

/// Errors unless `t` has `like`'s dtype and shape.
fn same_type(t: &Tensor, like: &Tensor, what: &str, like_what: &str) -> KResult<()> {
    if t.dtype() != like.dtype() || t.shape() != like.shape() {
        return shape_err!(
            "{what} ({} {:?}) must have the type of {like_what} ({} {:?})",
            t.dtype(),
            t.shape(),
            like.dtype(),
            like.shape()
        );
    }
    Ok(())
}

/// The single value of a one-element float tensor.
fn scalar(t: &Tensor, what: &str) -> KResult<f64> {
    match values_f64(t, what)?.as_slice() {
        [v] => Ok(*v),
        _ => shape_err!("{what} must hold one element, got shape {:?}", t.shape()),
    }
}

/// Applies `f(row_index, row_out)` to independent rows of `len`, in parallel when large.
fn rows_mut(out: &mut [f64], len: usize, f: impl Fn(usize, &mut [f64]) + Sync + Send) {
    if len == 0 {
        return;
    }
    if out.len() >= PAR_MIN {
        out.par_chunks_mut(len)
            .enumerate()
            .for_each(|(r, o)| f(r, o));
    } else {
        out.chunks_mut(len).enumerate().for_each(|(r, o)| f(r, o));
    }
}

// ------------------------------------------------------------------ gather_grad

/// Scatter-add of dy's slices back to the gathered positions of a data tensor whose `axis`
/// has `size` entries.
fn gather_grad(dy: &Tensor, indices: &Tensor, axis: i64, size: i64) -> KResult<Tensor> {
    let idx = int_values(indices, "indices")?;
    let Ok(size) = usize::try_from(size) else {
        return attr_err!("size {size} must be ≥ 0");
    };
    let dims = dims_of(dy);
    let ri = indices.shape().len();
    let Some(data_rank) = (dims.len() + 1).checked_sub(ri).filter(|&r| r >= 1) else {
        return shape_err!(
            "dy {:?} has too few dims for indices {:?}",
            dy.shape(),
            indices.shape()
        );
    };
    let ax = norm_axis(axis, data_rank)?;
    if dims[ax..ax + ri] != *dims_of(indices) {
        return shape_err!(
            "dy {:?} does not hold indices {:?} at axis {ax}",
            dy.shape(),
            indices.shape()
        );
    }
    let outer: usize = dims[..ax].iter().product();
    let inner: usize = dims[ax + ri..].iter().product();
    let mut out_dims = dims[..ax].to_vec();
    out_dims.push(size);
    out_dims.extend_from_slice(&dims[ax + ri..]);
    let out_shape = shape_u64(&out_dims);
    numel(&out_shape)?;
    let mut pos = Vec::with_capacity(idx.len());
    for (j, &i) in idx.iter().enumerate() {
        let k = if i < 0 { i + size as i64 } else { i };
        if k < 0 || k >= size as i64 {
            return value_err!("index {i} (entry {j}) is out of range for an axis of size {size}");
        }
        pos.push(k as usize);
    }
    let src = values_f64(dy, "dy")?;
    let mut out = vec![0f64; outer * size * inner];
    // One block per outer index; within it, rows accumulate in index order.
    rows_mut(&mut out, size * inner, |o, block| {
        for (j, &k) in pos.iter().enumerate() {
            let s = &src[(o * pos.len() + j) * inner..][..inner];
            for (d, v) in block[k * inner..][..inner].iter_mut().zip(s) {
                *d += v;
            }
        }
    });
    store(out, dy.dtype(), &out_shape)
}

// ------------------------------------------------------------------ normalisation

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
    let stats = |r: usize| {
        let xr = &xv[r * cols..][..cols];
        let n = cols as f64;
        let mean = xr.iter().sum::<f64>() / n;
        let var = xr.iter().map(|&v| (v - mean) * (v - mean)).sum::<f64>() / n;
        (mean, 1.0 / (var + eps).sqrt())
    };
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

/// √(2/π), the tanh-GELU constant.
const SQRT_2_OVER_PI: f64 = 0.797_884_560_802_865_4;
/// 1/√(2π), the standard normal density at 0.
const INV_SQRT_2PI: f64 = 0.398_942_280_401_432_7;

/// `gelu` backward: `dy · gelu'(x)`.
fn gelu_grad(x: &Tensor, dy: &Tensor, approximate: GeluApprox) -> KResult<Tensor> {
    same_type(dy, x, "dy", "x")?;
    let xv = values_f64(x, "x")?;
    let dv = values_f64(dy, "dy")?;
    let d = |x: f64| match approximate {
        GeluApprox::None => {
            0.5 * (1.0 + libm::erf(x * std::f64::consts::FRAC_1_SQRT_2))
                + x * INV_SQRT_2PI * (-0.5 * x * x).exp()
        }
        GeluApprox::Tanh => {
            let t = (SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)).tanh();
            0.5 * (1.0 + t)
                + 0.5 * x * (1.0 - t * t) * SQRT_2_OVER_PI * (1.0 + 3.0 * 0.044715 * x * x)
        }
    };
    let out = crate::data::par_map(
        &xv.iter()
            .zip(&dv)
            .map(|(&a, &b)| (a, b))
            .collect::<Vec<_>>(),
        |&(x, g)| g * d(x),
    );
    store(out, x.dtype(), x.shape())
}

// ------------------------------------------------------------------ convolution

/// A conv node's window attributes (kernel_shape filled in by the autodiff pass).
struct ConvWin<'a> {
    kernel_shape: &'a [i64],
    strides: &'a [i64],
    pads: &'a [i64],
    dilations: &'a [i64],
    group: i64,
    auto_pad: AutoPad,
}

/// The resolved sizes of one convolution, as `conv.rs` computes them.
struct Geo {
    n: usize,
    c: usize,
    m: usize,
    g: usize,
    plane: usize,
    out_plane: usize,
    ksize: usize,
    taps: Vec<Tap>,
    out_shape: Vec<u64>,
}

/// Geometry of `conv(x of x_dims, w of w_dims)`.
fn conv_geometry(x_dims: &[usize], w_dims: &[usize], win: &ConvWin<'_>) -> KResult<Geo> {
    if x_dims.len() < 3 || w_dims.len() != x_dims.len() {
        return shape_err!(
            "x must be [N, C, spatial...] and w [M, C/group, kernel...] of the same rank, got {x_dims:?} and {w_dims:?}"
        );
    }
    let (n, c, spatial) = (x_dims[0], x_dims[1], &x_dims[2..]);
    let (m, cg, kernel) = (w_dims[0], w_dims[1], &w_dims[2..]);
    let Some(g) = usize::try_from(win.group).ok().filter(|&g| g >= 1) else {
        return attr_err!("group {} must be >= 1", win.group);
    };
    if cg.checked_mul(g) != Some(c) || m % g != 0 {
        return shape_err!("w {w_dims:?} does not fit x {x_dims:?} with group {g}");
    }
    if !win.kernel_shape.is_empty()
        && win
            .kernel_shape
            .iter()
            .map(|&k| k as usize)
            .ne(kernel.iter().copied())
    {
        return attr_err!(
            "kernel_shape {:?} disagrees with the weight's kernel dims {kernel:?}",
            win.kernel_shape
        );
    }
    let wa = WindowAttrs {
        strides: win.strides,
        pads: win.pads,
        dilations: win.dilations,
        auto_pad: win.auto_pad,
        ceil_mode: false,
    };
    let axes = window::axes(spatial, kernel, &wa)?;
    let mut out_shape = vec![n as u64, m as u64];
    out_shape.extend(axes.iter().map(|a| a.out as u64));
    numel(&out_shape)?;
    let ksize: usize = kernel.iter().product();
    let out_plane: usize = axes.iter().map(|a| a.out).product();
    numel(&[(cg * ksize) as u64, out_plane as u64])?;
    Ok(Geo {
        n,
        c,
        m,
        g,
        plane: spatial.iter().product(),
        out_plane,
        ksize,
        taps: window::taps(&axes)?,
        out_shape,
    })
}

/// dx = col2im(Wᵀ · dY) per (batch, group).
fn conv_grad_input(
    dy: &Tensor,
    w: &Tensor,
    win: &ConvWin<'_>,
    input_shape: &[i64],
) -> KResult<Tensor> {
    let mut x_dims = Vec::with_capacity(input_shape.len());
    for &d in input_shape {
        match usize::try_from(d) {
            Ok(d) => x_dims.push(d),
            Err(_) => return attr_err!("input_shape {input_shape:?} holds a negative size"),
        }
    }
    numel(&shape_u64(&x_dims))?;
    let geo = conv_geometry(&x_dims, &dims_of(w), win)?;
    if dy.shape() != geo.out_shape || dy.dtype() != w.dtype() {
        return shape_err!(
            "dy ({} {:?}) must be the conv's output ({} {:?})",
            dy.dtype(),
            dy.shape(),
            w.dtype(),
            geo.out_shape
        );
    }
    let shape = shape_u64(&x_dims);
    match (Data::load(dy)?, Data::load(w)?) {
        (Data::F32(d), Data::F32(wv)) => Data::F32(dgrad_t(&d, &wv, &geo)).store(w.dtype(), shape),
        (Data::F64(d), Data::F64(wv)) => Data::F64(dgrad_t(&d, &wv, &geo)).store(DType::F64, shape),
        _ => dtype_err!("expects float inputs, got {}", w.dtype()),
    }
}

fn dgrad_t<T: GemmElem>(dy: &[T], w: &[T], geo: &Geo) -> Vec<T> {
    let Geo {
        n,
        c,
        m,
        g,
        plane,
        out_plane: p,
        ksize,
        ..
    } = *geo;
    let (cg, mg) = (c / g, m / g);
    let rows = cg * ksize;
    let mut dx = vec![T::default(); n * c * plane];
    let mut col = vec![T::default(); rows * p];
    for b in 0..n {
        for gi in 0..g {
            // col[rows × p] = W_gᵀ [rows × mg] · dY_bg [mg × p]
            let wt = Mat {
                data: w,
                offset: gi * mg * rows,
                rs: 1,
                cs: rows,
            };
            let dm = Mat {
                data: dy,
                offset: (b * m + gi * mg) * p,
                rs: p,
                cs: 1,
            };
            gemm_into(rows, p, mg, wt, dm, &mut col, true);
            // col2im: every input channel of the group owns its own plane of dx.
            let planes = &mut dx[(b * c + gi * cg) * plane..][..cg * plane];
            planes
                .par_chunks_mut(plane.max(1))
                .enumerate()
                .for_each(|(ci, dst)| {
                    for t in 0..ksize {
                        let row = &col[(ci * ksize + t) * p..][..p];
                        for (pos, &v) in row.iter().enumerate() {
                            if let Tap::In(o) = geo.taps[pos * ksize + t] {
                                dst[o] = dst[o] + v;
                            }
                        }
                    }
                });
        }
    }
    dx
}

/// dW = Σ_batch dY · im2col(x)ᵀ per group.
fn conv_grad_weight(x: &Tensor, dy: &Tensor, win: &ConvWin<'_>) -> KResult<Tensor> {
    let xd = dims_of(x);
    let (Some(&m), true) = (dy.shape().get(1), xd.len() >= 3) else {
        return shape_err!(
            "x and dy must be [N, C, spatial...], got {:?} and {:?}",
            x.shape(),
            dy.shape()
        );
    };
    let Some(g) = usize::try_from(win.group).ok().filter(|&g| g >= 1) else {
        return attr_err!("group {} must be >= 1", win.group);
    };
    if win.kernel_shape.len() + 2 != xd.len() {
        return attr_err!(
            "kernel_shape {:?} must give one size per spatial axis of x {:?}",
            win.kernel_shape,
            x.shape()
        );
    }
    let mut w_dims = vec![m as usize, xd[1] / g];
    for &k in win.kernel_shape {
        match usize::try_from(k) {
            Ok(k) if k >= 1 => w_dims.push(k),
            _ => return attr_err!("kernel_shape {:?} must hold sizes ≥ 1", win.kernel_shape),
        }
    }
    let geo = conv_geometry(&xd, &w_dims, win)?;
    if dy.shape() != geo.out_shape || dy.dtype() != x.dtype() {
        return shape_err!(
            "dy ({} {:?}) must be the conv's output ({} {:?})",
            dy.dtype(),
            dy.shape(),
            x.dtype(),
            geo.out_shape
        );
    }
    let shape = shape_u64(&w_dims);
    match (Data::load(x)?, Data::load(dy)?) {
        (Data::F32(xv), Data::F32(d)) => Data::F32(wgrad_t(&xv, &d, &geo)).store(x.dtype(), shape),
        (Data::F64(xv), Data::F64(d)) => Data::F64(wgrad_t(&xv, &d, &geo)).store(DType::F64, shape),
        _ => dtype_err!("expects float inputs, got {}", x.dtype()),
    }
}

fn wgrad_t<T: GemmElem>(x: &[T], dy: &[T], geo: &Geo) -> Vec<T> {
    let Geo {
        n,
        c,
        m,
        g,
        plane,
        out_plane: p,
        ksize,
        ..
    } = *geo;
    let (cg, mg) = (c / g, m / g);
    let rows = cg * ksize;
    let mut dw = vec![T::default(); m * rows];
    let mut col = vec![T::default(); rows * p];
    let mut part = vec![T::default(); mg * rows];
    for b in 0..n {
        for gi in 0..g {
            col.par_chunks_mut(p.max(1))
                .enumerate()
                .for_each(|(r, row)| {
                    let (ci, t) = (r / ksize, r % ksize);
                    let base = (b * c + gi * cg + ci) * plane;
                    for (pos, v) in row.iter_mut().enumerate() {
                        *v = match geo.taps[pos * ksize + t] {
                            Tap::In(o) => x[base + o],
                            Tap::Pad | Tap::Out => T::default(),
                        };
                    }
                });
            // part[mg × rows] = dY_bg [mg × p] · colᵀ [p × rows]
            let dm = Mat {
                data: dy,
                offset: (b * m + gi * mg) * p,
                rs: p,
                cs: 1,
            };
            let ct = Mat {
                data: &col,
                offset: 0,
                rs: 1,
                cs: p,
            };
            gemm_into(mg, rows, p, dm, ct, &mut part, true);
            for (d, &v) in dw[gi * mg * rows..][..mg * rows].iter_mut().zip(&part) {
                *d = *d + v;
            }
        }
    }
    dw
}

// ------------------------------------------------------------------ pooling

/// `max_pool` (`average = None`) or `average_pool` (`Some(count_include_pad)`) backward.
fn pool_grad(
    x: &Tensor,
    dy: &Tensor,
    average: Option<bool>,
    kernel_shape: &[i64],
    win: &WindowAttrs<'_>,
) -> KResult<Tensor> {
    let dims = dims_of(x);
    if dims.len() < 3 {
        return shape_err!("x must be [N, C, spatial...], got {:?}", x.shape());
    }
    let mut kernel = Vec::with_capacity(kernel_shape.len());
    for &k in kernel_shape {
        match usize::try_from(k) {
            Ok(k) if k >= 1 => kernel.push(k),
            _ => return attr_err!("kernel_shape {kernel_shape:?} must hold sizes >= 1"),
        }
    }
    let axes = window::axes(&dims[2..], &kernel, win)?;
    let mut out_shape = vec![dims[0] as u64, dims[1] as u64];
    out_shape.extend(axes.iter().map(|a| a.out as u64));
    if dy.shape() != out_shape || dy.dtype() != x.dtype() {
        return shape_err!(
            "dy ({} {:?}) must be the pool's output ({} {out_shape:?})",
            dy.dtype(),
            dy.shape(),
            x.dtype()
        );
    }
    let taps = window::taps(&axes)?;
    let ksize: usize = kernel.iter().product();
    let plane: usize = dims[2..].iter().product();
    let out_plane: usize = axes.iter().map(|a| a.out).product();
    let xv = values_f64(x, "x")?;
    let dv = values_f64(dy, "dy")?;
    let mut dx = vec![0f64; xv.len()];
    rows_mut(&mut dx, plane, |pl, dst| {
        let src = &xv[pl * plane..][..plane];
        for p in 0..out_plane {
            let window = &taps[p * ksize..][..ksize];
            let g = dv[pl * out_plane + p];
            match average {
                None => {
                    // The forward's winner: the first NaN, else the first strict maximum.
                    let mut best: Option<(usize, f64)> = None;
                    for t in window {
                        if let Tap::In(i) = *t {
                            let v = src[i];
                            let take = match best {
                                None => true,
                                Some((_, b)) => v.is_nan() || (!b.is_nan() && v > b),
                            };
                            if take {
                                best = Some((i, v));
                            }
                        }
                    }
                    if let Some((i, _)) = best {
                        dst[i] += g;
                    }
                }
                Some(count_include_pad) => {
                    let count = window
                        .iter()
                        .filter(|t| {
                            matches!(t, Tap::In(_)) || (count_include_pad && **t == Tap::Pad)
                        })
                        .count();
                    for t in window {
                        if let Tap::In(i) = *t {
                            dst[i] += g / count as f64;
                        }
                    }
                }
            }
        }
    });
    store(dx, x.dtype(), x.shape())
}

// ------------------------------------------------------------------ losses

/// Checks labels against `[.., C]` logits; returns (rows, classes, labels as indices).
fn ce_labels(logits: &Tensor, labels: &Tensor) -> KResult<(usize, usize, Vec<usize>)> {
    let dims = dims_of(logits);
    let Some((&c, lead)) = dims.split_last() else {
        return shape_err!("logits must have a class axis, got a scalar");
    };
    if labels.shape() != &logits.shape()[..lead.len()] {
        return shape_err!(
            "labels {:?} must have the logits' leading dims {:?}",
            labels.shape(),
            &logits.shape()[..lead.len()]
        );
    }
    let rows: usize = lead.iter().product();
    if rows == 0 {
        return value_err!("there are no labels (an empty batch has no mean loss)");
    }
    let vals = int_values(labels, "labels")?;
    let mut out = Vec::with_capacity(vals.len());
    for (i, &l) in vals.iter().enumerate() {
        if l < 0 || l >= c as i64 {
            return value_err!(
                "label {l} (entry {i}) is out of range: the logits have {c} classes (0..{})",
                c.saturating_sub(1)
            );
        }
        out.push(l as usize);
    }
    Ok((rows, c, out))
}

/// Mean softmax cross-entropy and the log-probabilities.
fn cross_entropy(logits: &Tensor, labels: &Tensor) -> KResult<Vec<Tensor>> {
    let (rows, c, lab) = ce_labels(logits, labels)?;
    let xv = values_f64(logits, "logits")?;
    let mut lp = vec![0f64; xv.len()];
    rows_mut(&mut lp, c, |r, o| {
        let xr = &xv[r * c..][..c];
        let max = xr.iter().fold(f64::NEG_INFINITY, |a, &v| {
            if a.is_nan() || v.is_nan() {
                f64::NAN
            } else {
                a.max(v)
            }
        });
        let ls = xr.iter().map(|&v| (v - max).exp()).sum::<f64>().ln();
        for (y, &v) in o.iter_mut().zip(xr) {
            *y = v - max - ls;
        }
    });
    let loss = -(0..rows).map(|r| lp[r * c + lab[r]]).sum::<f64>() / rows as f64;
    Ok(vec![
        store(vec![loss], logits.dtype(), &[])?,
        store(lp, logits.dtype(), logits.shape())?,
    ])
}

/// `(softmax − onehot) · dloss / N`.
fn cross_entropy_grad(lp: &Tensor, labels: &Tensor, dloss: &Tensor) -> KResult<Tensor> {
    let (rows, c, lab) = ce_labels(lp, labels)?;
    let scale = scalar(dloss, "dloss")? / rows as f64;
    let lv = values_f64(lp, "log_probs")?;
    let mut out = vec![0f64; lv.len()];
    rows_mut(&mut out, c, |r, o| {
        for (j, y) in o.iter_mut().enumerate() {
            let onehot = if j == lab[r] { 1.0 } else { 0.0 };
            *y = (lv[r * c + j].exp() - onehot) * scale;
        }
    });
    store(out, lp.dtype(), lp.shape())
}

/// True when every element of every input is finite.
fn all_finite(inputs: &[&Tensor]) -> KResult<Tensor> {
    if inputs.is_empty() {
        return Fail::arity("at least 1", 0);
    }
    let mut ok = true;
    for (i, t) in inputs.iter().enumerate() {
        ok &= match Data::load(t)? {
            Data::F32(v) => v.iter().all(|x| x.is_finite()),
            Data::F64(v) => v.iter().all(|x| x.is_finite()),
            _ => return dtype_err!("input {i} must be a float tensor, got {}", t.dtype()),
        };
    }
    Ok(Tensor::from_bool(vec![], &[ok]))
}

// ------------------------------------------------------------------ optimizers

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
    let step: Vec<(f64, f64)> = crate::data::par_map(&(0..pv.len()).collect::<Vec<_>>(), |&i| {
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
    let out: Vec<(f64, f64, f64)> =
        crate::data::par_map(&(0..pv.len()).collect::<Vec<_>>(), |&i| {
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
