//! `conv`: N-d convolution over NCHW-style layouts (any number of spatial axes), with groups,
//! strides, dilations, explicit pads and auto_pad, as im2col followed by one GEMM per
//! (batch, group) on the `gemm` crate: f32 accumulation (f16/bf16 widened, rounded once at
//! the end), f64 for f64. The bias is added to the f32 accumulator.

use crate::data::{Data, dims_of, numel};
use crate::error::{Fail, KResult, attr_err, dtype_err, shape_err};
use crate::linalg::{GemmElem, Mat, gemm_into};
use crate::window::{self, Tap, WindowAttrs};
use fp8c_ir::{AutoPad, Tensor};
use rayon::prelude::*;

/// The conv node's attributes.
pub(crate) struct ConvAttrs<'a> {
    pub kernel_shape: &'a [i64],
    pub strides: &'a [i64],
    pub pads: &'a [i64],
    pub dilations: &'a [i64],
    pub group: i64,
    pub auto_pad: AutoPad,
}

/// Evaluates `conv(x, w[, bias])`.
pub(crate) fn conv(inputs: &[&Tensor], attrs: &ConvAttrs<'_>) -> KResult<Tensor> {
    let (x, w, bias) = match inputs {
        [x, w] => (*x, *w, None),
        [x, w, b] => (*x, *w, Some(*b)),
        _ => return Fail::arity("2 or 3", inputs.len()),
    };
    let dtype = x.dtype();
    if w.dtype() != dtype || bias.is_some_and(|b| b.dtype() != dtype) {
        return dtype_err!("x, w and bias must share a dtype");
    }
    let xd = dims_of(x);
    let wd = dims_of(w);
    if xd.len() < 3 || wd.len() != xd.len() {
        return shape_err!(
            "x must be [N, C, spatial...] and w [M, C/group, kernel...] of the same rank, got {:?} and {:?}",
            x.shape(),
            w.shape()
        );
    }
    let (n, c, spatial) = (xd[0], xd[1], &xd[2..]);
    let (m, cg, kernel) = (wd[0], wd[1], &wd[2..]);
    let g = usize::try_from(attrs.group)
        .ok()
        .filter(|&g| g >= 1)
        .map_or_else(|| attr_err!("group {} must be >= 1", attrs.group), Ok)?;
    if cg.checked_mul(g) != Some(c) || m % g != 0 {
        return shape_err!(
            "w {:?} does not fit x {:?} with group {g}: w's dim 1 times group must equal C and M must be a multiple of group",
            w.shape(),
            x.shape()
        );
    }
    if !attrs.kernel_shape.is_empty()
        && attrs
            .kernel_shape
            .iter()
            .map(|&k| k as usize)
            .ne(kernel.iter().copied())
    {
        return attr_err!(
            "kernel_shape {:?} disagrees with w's kernel dims {kernel:?}",
            attrs.kernel_shape
        );
    }
    if let Some(b) = bias {
        if b.shape() != [m as u64] {
            return shape_err!("bias must be [{m}], got {:?}", b.shape());
        }
    }
    let win = WindowAttrs {
        strides: attrs.strides,
        pads: attrs.pads,
        dilations: attrs.dilations,
        auto_pad: attrs.auto_pad,
        ceil_mode: false,
    };
    let axes = window::axes(spatial, kernel, &win)?;
    let mut out_shape = vec![n as u64, m as u64];
    out_shape.extend(axes.iter().map(|a| a.out as u64));
    numel(&out_shape)?;
    let geo = Geometry {
        n,
        c,
        m,
        g,
        plane: spatial.iter().product(),
        out_plane: axes.iter().map(|a| a.out).product(),
        ksize: kernel.iter().product(),
        taps: window::taps(&axes)?,
    };
    // im2col scratch: (C/group · kernel) × output positions.
    numel(&[(cg * geo.ksize) as u64, geo.out_plane as u64])?;
    match (
        Data::load(x)?,
        Data::load(w)?,
        bias.map(Data::load).transpose()?,
    ) {
        (Data::F32(xv), Data::F32(wv), b) => {
            let b = match b {
                Some(Data::F32(b)) => Some(b),
                _ => None,
            };
            Data::F32(conv_t(&xv, &wv, b.as_deref(), &geo)).store(dtype, out_shape)
        }
        (Data::F64(xv), Data::F64(wv), b) => {
            let b = match b {
                Some(Data::F64(b)) => Some(b),
                _ => None,
            };
            Data::F64(conv_t(&xv, &wv, b.as_deref(), &geo)).store(dtype, out_shape)
        }
        _ => dtype_err!("expects float inputs (f64, f32, f16, bf16), got {dtype}"),
    }
}

/// The resolved sizes of one convolution.
struct Geometry {
    n: usize,
    c: usize,
    m: usize,
    g: usize,
    /// Input elements per (N, C) plane.
    plane: usize,
    /// Output positions per (N, M) plane.
    out_plane: usize,
    /// Kernel taps.
    ksize: usize,
    /// `taps[p * ksize + t]`, see `window::taps`.
    taps: Vec<Tap>,
}

fn conv_t<T: GemmElem>(x: &[T], w: &[T], bias: Option<&[T]>, geo: &Geometry) -> Vec<T> {
    let Geometry {
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
    let mut out = vec![T::default(); n * m * p];
    let mut col = vec![T::default(); rows * p];
    for b in 0..n {
        for gi in 0..g {
            // col[(ci·ksize + t), pos] = x[b, gi·cg + ci, tap] (0 for padding).
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
            let dst = &mut out[(b * m + gi * mg) * p..][..mg * p];
            let wm = Mat {
                data: w,
                offset: gi * mg * rows,
                rs: rows,
                cs: 1,
            };
            let cm = Mat {
                data: &col,
                offset: 0,
                rs: p,
                cs: 1,
            };
            gemm_into(mg, p, rows, wm, cm, dst, true);
        }
    }
    if let Some(bias) = bias {
        out.par_chunks_mut(p.max(1))
            .enumerate()
            .for_each(|(r, row)| {
                let bv = bias[r % m];
                row.iter_mut().for_each(|v| *v = *v + bv);
            });
    }
    out
}
