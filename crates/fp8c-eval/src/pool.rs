//! `max_pool` and `average_pool` over any number of spatial axes (NCHW-style layouts).
//!
//! - max: padding never wins; NaN in a window propagates (as `max` and PyTorch; onnxruntime
//!   skips NaNs). A window with no input element gives the type's lowest value.
//! - average: the sum accumulates in f64 and is divided once. With `count_include_pad` the
//!   divisor counts the declared padding but not the overhang of ceil-mode windows past it
//!   (PyTorch and onnxruntime); without it, only input elements.
//!
//! Planes (n, c) are independent and run in parallel.

use crate::cast::cast;
use crate::data::{Data, dims_of, numel};
use crate::error::{KResult, dtype_err, shape_err};
use crate::window::{self, Tap, WindowAttrs};
use fp8c_ir::{DType, Tensor};
use rayon::prelude::*;

/// Which pooling.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PoolKind {
    Max,
    Average { count_include_pad: bool },
}

/// Evaluates a pool with explicit kernel shape.
pub(crate) fn pool(
    x: &Tensor,
    kind: PoolKind,
    kernel_shape: &[i64],
    win: &WindowAttrs<'_>,
) -> KResult<Tensor> {
    let dims = dims_of(x);
    if dims.len() < 3 {
        return shape_err!("x must be [N, C, spatial...], got {:?}", x.shape());
    }
    let spatial = &dims[2..];
    let mut kernel = Vec::with_capacity(kernel_shape.len());
    for &k in kernel_shape {
        match usize::try_from(k) {
            Ok(k) if k >= 1 => kernel.push(k),
            _ => {
                return crate::error::attr_err!(
                    "kernel_shape {kernel_shape:?} must hold sizes >= 1"
                );
            }
        }
    }
    let axes = window::axes(spatial, &kernel, win)?;
    let mut out_shape = vec![dims[0] as u64, dims[1] as u64];
    out_shape.extend(axes.iter().map(|a| a.out as u64));
    numel(&out_shape)?;
    let taps = window::taps(&axes)?;
    let ksize: usize = kernel.iter().product();
    let plane: usize = spatial.iter().product();
    let out_plane: usize = axes.iter().map(|a| a.out).product();
    let dtype = x.dtype();
    let v: Vec<f64> = match Data::load(x)? {
        Data::F32(v) => v.into_iter().map(f64::from).collect(),
        Data::F64(v) => v,
        Data::I8(v) if kind == PoolKind::Max => v.into_iter().map(f64::from).collect(),
        Data::U8(v) if kind == PoolKind::Max => v.into_iter().map(f64::from).collect(),
        _ => {
            return dtype_err!(
                "expects a float input{}, got {dtype}",
                if kind == PoolKind::Max {
                    " (or i8, u8)"
                } else {
                    ""
                }
            );
        }
    };
    let planes = dims[0] * dims[1];
    let mut out = vec![0f64; planes * out_plane];
    if out_plane > 0 {
        out.par_chunks_mut(out_plane)
            .enumerate()
            .for_each(|(pl, o)| {
                let src = &v[pl * plane..][..plane];
                for (p, y) in o.iter_mut().enumerate() {
                    let window = &taps[p * ksize..][..ksize];
                    *y = match kind {
                        PoolKind::Max => {
                            let mut best = f64::NEG_INFINITY;
                            let mut any = false;
                            for t in window {
                                if let Tap::In(i) = t {
                                    let val = src[*i];
                                    if val.is_nan() || (!best.is_nan() && val > best) {
                                        best = val;
                                    }
                                    any = true;
                                }
                            }
                            if any { best } else { lowest(dtype) }
                        }
                        PoolKind::Average { count_include_pad } => {
                            let (mut sum, mut count) = (0f64, 0usize);
                            for t in window {
                                match t {
                                    Tap::In(i) => {
                                        sum += src[*i];
                                        count += 1;
                                    }
                                    Tap::Pad if count_include_pad => count += 1,
                                    _ => {}
                                }
                            }
                            sum / count as f64
                        }
                    };
                }
            });
    }
    // One rounding from the f64 result to the input's type (i8/u8 maxima are exact).
    let t = Data::F64(out).store(DType::F64, out_shape)?;
    cast(&t, dtype, false)
}

/// The lowest finite value of a pooled dtype (a max over no input element).
fn lowest(dtype: DType) -> f64 {
    match dtype {
        DType::F64 => f64::MIN,
        DType::F32 => f64::from(f32::MIN),
        DType::F16 => f64::from(half::f16::MIN),
        DType::BF16 => f64::from(half::bf16::MIN),
        DType::I8 => f64::from(i8::MIN),
        _ => 0.0,
    }
}
