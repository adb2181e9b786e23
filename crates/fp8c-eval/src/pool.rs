//! The pool family: `max_pool` and `average_pool` over any number of spatial axes
//! (NCHW-style layouts), the global pools, and the gradients `max_pool_grad` and
//! `average_pool_grad`.
//!
//! - max: padding never wins; NaN in a window propagates, as a quiet NaN (as `max` and
//!   PyTorch; onnxruntime skips NaNs). A window with no input element gives the type's lowest value. Its gradient
//!   goes to the window's winner: the first NaN, else the first strict maximum.
//! - average: the sum accumulates in f64 and is divided once. With `count_include_pad` the
//!   divisor counts the declared padding but not the overhang of ceil-mode windows past it
//!   (PyTorch and onnxruntime); without it, only input elements.
//! - the global pools are reductions over the spatial axes (`reduce.rs`).
//!
//! Planes (n, c) are independent and run in parallel; gradients compute in f64 and round once.

use crate::args;
use crate::cast::cast;
use crate::cast::store_f64 as store;
use crate::data::{Data, dims_of, float_values_f64 as values_f64, numel, rows_mut};
use crate::error::{KResult, attr_err, dtype_err, shape_err};
use crate::reduce::{self, Reduction};
use crate::window::{self, Axis, Padded, Tap, WindowAttrs};
use fp8c_ir::{DType, PoolOp, Support, Tensor};
use rayon::prelude::*;
use std::borrow::Cow;

/// Evaluates an op of the pool family.
pub(crate) fn eval(op: PoolOp<'_>, inputs: &[&Tensor]) -> KResult<Vec<Tensor>> {
    let out = match op {
        PoolOp::MaxPool {
            kernel_shape,
            strides,
            pads,
            dilations,
            ceil_mode,
            auto_pad,
        } => {
            let [x] = args(inputs)?;
            let win = WindowAttrs {
                strides,
                pads,
                dilations,
                auto_pad: *auto_pad,
                ceil_mode: *ceil_mode,
            };
            pool(x, PoolKind::Max, kernel_shape, &win)?
        }
        PoolOp::AveragePool {
            kernel_shape,
            strides,
            pads,
            dilations,
            ceil_mode,
            count_include_pad,
            auto_pad,
        } => {
            let [x] = args(inputs)?;
            let win = WindowAttrs {
                strides,
                pads,
                dilations,
                auto_pad: *auto_pad,
                ceil_mode: *ceil_mode,
            };
            let kind = PoolKind::Average {
                count_include_pad: *count_include_pad,
            };
            pool(x, kind, kernel_shape, &win)?
        }
        PoolOp::GlobalAveragePool => {
            let [x] = args(inputs)?;
            reduce::global_pool(x, Reduction::Mean)?
        }
        PoolOp::GlobalMaxPool => {
            let [x] = args(inputs)?;
            reduce::global_pool(x, Reduction::Max)?
        }
        PoolOp::MaxPoolGrad {
            kernel_shape,
            strides,
            pads,
            dilations,
            ceil_mode,
            auto_pad,
        } => {
            let [x, dy] = args(inputs)?;
            let win = WindowAttrs {
                strides,
                pads,
                dilations,
                auto_pad: *auto_pad,
                ceil_mode: *ceil_mode,
            };
            pool_grad(x, dy, None, kernel_shape, &win)?
        }
        PoolOp::AveragePoolGrad {
            kernel_shape,
            strides,
            pads,
            dilations,
            ceil_mode,
            count_include_pad,
            auto_pad,
        } => {
            let [x, dy] = args(inputs)?;
            let win = WindowAttrs {
                strides,
                pads,
                dilations,
                auto_pad: *auto_pad,
                ceil_mode: *ceil_mode,
            };
            pool_grad(x, dy, Some(*count_include_pad), kernel_shape, &win)?
        }
        PoolOp::__Lifetime(never, _) => match never {},
    };
    Ok(vec![out])
}

/// Every op of the family is evaluated.
pub(crate) fn support(op: PoolOp<'_>) -> Support {
    match op {
        PoolOp::MaxPool { .. }
        | PoolOp::AveragePool { .. }
        | PoolOp::GlobalAveragePool
        | PoolOp::GlobalMaxPool
        | PoolOp::MaxPoolGrad { .. }
        | PoolOp::AveragePoolGrad { .. } => Support::Yes,
        PoolOp::__Lifetime(never, _) => match never {},
    }
}

/// Which pooling.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PoolKind {
    Max,
    Average { count_include_pad: bool },
}

/// Evaluates a pool with explicit kernel shape.
fn pool(
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
            _ => return attr_err!("kernel_shape {kernel_shape:?} must hold sizes >= 1"),
        }
    }
    let axes = window::axes(spatial, &kernel, win)?;
    let mut out_shape = vec![dims[0] as u64, dims[1] as u64];
    out_shape.extend(axes.iter().map(|a| a.out as u64));
    numel(&out_shape)?;
    let ksize: usize = kernel.iter().product();
    let plane: usize = spatial.iter().product();
    let out_plane: usize = axes.iter().map(|a| a.out).product();
    let dtype = x.dtype();
    let planes = dims[0] * dims[1];
    if kind == PoolKind::Max
        && every_window_reads_input(&axes)
        && let Some(plan) = Padded::new(&axes)
    {
        match Data::load(x)? {
            Data::F32(v) => {
                let out = max_direct(&v, planes, plane, out_plane, ksize, &plan);
                return Data::F32(Cow::from(out)).store(dtype, out_shape);
            }
            Data::F64(v) => {
                let out = max_direct(&v, planes, plane, out_plane, ksize, &plan);
                return Data::F64(Cow::from(out)).store(dtype, out_shape);
            }
            _ => {}
        }
    }
    let taps = window::taps(&axes)?;
    let v: Vec<f64> = match Data::load(x)? {
        Data::F32(v) => v.iter().copied().map(f64::from).collect(),
        Data::F64(v) => v.into_owned(),
        Data::I8(v) if kind == PoolKind::Max => v.iter().copied().map(f64::from).collect(),
        Data::U8(v) if kind == PoolKind::Max => v.iter().copied().map(f64::from).collect(),
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
                            // Branch-free on the data: `max` skips NaNs, which are counted
                            // apart and win at the end.
                            let (mut best, mut nan, mut any) = (f64::NEG_INFINITY, false, false);
                            for t in window {
                                if let Tap::In(i) = t {
                                    let val = src[*i];
                                    best = best.max(val);
                                    nan |= val.is_nan();
                                    any = true;
                                }
                            }
                            if nan {
                                f64::NAN
                            } else if any {
                                best
                            } else {
                                lowest(dtype)
                            }
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
    let t = Data::F64(Cow::from(out)).store(DType::F64, out_shape)?;
    cast(&t, dtype, false)
}

/// Whether every output window holds at least one input element (else the general route,
/// which gives such windows the dtype's lowest value).
fn every_window_reads_input(axes: &[Axis]) -> bool {
    axes.iter()
        .all(|a| (0..a.out).all(|o| (0..a.kernel).any(|k| matches!(a.tap(o, k), Tap::In(_)))))
}

/// Outputs [`max_row`] keeps in registers at once (8 f32 lanes of AVX2).
const LANES: usize = 8;

/// The float types [`max_direct`] pools in place (a max is exact in any type).
trait MaxElem: Copy + PartialOrd + Send + Sync {
    const NEG_INF: Self;
    const NAN: Self;
    const ZERO: Self;
    const ONE: Self;
    fn is_nan(self) -> bool;
}
impl MaxElem for f32 {
    const NEG_INF: f32 = f32::NEG_INFINITY;
    const NAN: f32 = f32::NAN;
    const ZERO: f32 = 0.0;
    const ONE: f32 = 1.0;
    #[inline(always)]
    fn is_nan(self) -> bool {
        self.is_nan()
    }
}
impl MaxElem for f64 {
    const NEG_INF: f64 = f64::NEG_INFINITY;
    const NAN: f64 = f64::NAN;
    const ZERO: f64 = 0.0;
    const ONE: f64 = 1.0;
    #[inline(always)]
    fn is_nan(self) -> bool {
        self.is_nan()
    }
}

/// `max_pool` of f32/f64 planes in their own type, every window reading some input: each
/// plane is padded with −∞ (padding never wins) and each output row takes the max over the
/// taps, [`LANES`] outputs at a time ([`max_row`]); a NaN anywhere in a window gives NaN.
fn max_direct<T: MaxElem>(
    v: &[T],
    planes: usize,
    plane: usize,
    out_plane: usize,
    ksize: usize,
    plan: &Padded,
) -> Vec<T> {
    let mut out = vec![T::NEG_INF; planes * out_plane];
    if out_plane == 0 || ksize == 0 {
        return out;
    }
    // At stride 2 each padded plane is also copied with its rows' even columns first, then
    // the odd ones (`Padded::deinterleave_into`): every tap then reads a contiguous run, and
    // the rows take the stride-1 loop (reading every other element had kept them scalar).
    let halves = plan.stride == 2;
    let deint_starts = if halves {
        plan.deinterleaved_starts()
    } else {
        Vec::new()
    };
    let one = |buf: &mut Vec<T>, pl: usize, o: &mut [T]| {
        let size = plan.size();
        buf.resize(if halves { 2 * size } else { size }, T::NEG_INF);
        let (padded, deint) = buf.split_at_mut(size);
        plan.pad_into(&v[pl * plane..][..plane], T::NEG_INF, padded);
        let (src, all_starts): (&[T], &[usize]) = if halves {
            deinterleave(plan, padded, deint);
            (deint, &deint_starts)
        } else {
            (padded, plan.starts())
        };
        for (line, starts) in o
            .chunks_exact_mut(plan.row)
            .zip(all_starts.chunks_exact(ksize))
        {
            match plan.stride {
                1 | 2 => max_row::<T, 1>(line, starts, src, 1),
                s => max_row::<T, 0>(line, starts, src, s),
            }
        }
    };
    let work = out.len().saturating_mul(ksize);
    window::for_each_plane(&mut out, out_plane, work, one);
    out
}

/// `plan.deinterleave_into(padded, dst)`, compiled for AVX2 where the CPU has it.
fn deinterleave<T: Copy>(plan: &Padded, padded: &[T], dst: &mut [T]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        /// The AVX2 twin.
        #[target_feature(enable = "avx2")]
        unsafe fn avx2<T: Copy>(plan: &Padded, padded: &[T], dst: &mut [T]) {
            plan.deinterleave_into(padded, dst);
        }
        // SAFETY: the CPU has AVX2 (checked just above).
        return unsafe { avx2(plan, padded, dst) };
    }
    plan.deinterleave_into(padded, dst);
}

/// One output row of [`max_direct`]: `line[i] = max_t padded[starts[t] + i·stride]`, NaN if
/// any read is NaN. Compiled for AVX2 where the CPU has it (a max is exact: the bits do not
/// depend on the path).
#[inline(always)]
fn max_row<T: MaxElem, const S: usize>(
    line: &mut [T],
    starts: &[usize],
    padded: &[T],
    stride: usize,
) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2 (checked just above).
        return unsafe { max_row_avx2::<T, S>(line, starts, padded, stride) };
    }
    max_row_any::<T, S>(line, starts, padded, stride);
}

/// [`max_row`] compiled for AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn max_row_avx2<T: MaxElem, const S: usize>(
    line: &mut [T],
    starts: &[usize],
    padded: &[T],
    stride: usize,
) {
    max_row_any::<T, S>(line, starts, padded, stride);
}

/// [`max_row`]'s body; `S` is the stride where it is 1 (each tap's run is one contiguous
/// load), 0 where it is another. [`LANES`] outputs at a time, each block's maxima and NaN
/// flags held in registers across all taps (the flag a value, 1 where a NaN was read, so it
/// is a vector select like the max); a row's last partial block is computed as the full
/// block ending at the row's end, rewriting a few outputs with the same values, so no output
/// takes a scalar loop unless the row is shorter than a block.
#[inline(always)]
fn max_row_any<T: MaxElem, const S: usize>(
    line: &mut [T],
    starts: &[usize],
    padded: &[T],
    stride: usize,
) {
    let stride = if S == 1 { 1 } else { stride };
    let n = line.len();
    if n >= LANES {
        let mut j = 0;
        while j + LANES <= n {
            max_block::<T, S>(starts, padded, stride, j, &mut line[j..j + LANES]);
            j += LANES;
        }
        if j < n {
            max_block::<T, S>(starts, padded, stride, n - LANES, &mut line[n - LANES..]);
        }
        return;
    }
    for (i, out) in line.iter_mut().enumerate() {
        let (mut acc, mut nan) = (T::NEG_INF, T::ZERO);
        for &start in starts {
            take(&mut acc, &mut nan, padded[start + i * stride]);
        }
        *out = if nan > T::ZERO { T::NAN } else { acc };
    }
}

/// One step of a max: `acc` keeps the larger value, `nan` becomes 1 where `v` is NaN (`v >
/// acc` is false for a NaN v, so NaNs are flagged apart).
#[inline(always)]
fn take<T: MaxElem>(acc: &mut T, nan: &mut T, v: T) {
    *acc = if v > *acc { v } else { *acc };
    *nan = if v.is_nan() { T::ONE } else { *nan };
}

/// Outputs `first..first + LANES` of a [`max_row_any`] row into `out`.
#[inline(always)]
fn max_block<T: MaxElem, const S: usize>(
    starts: &[usize],
    padded: &[T],
    stride: usize,
    first: usize,
    out: &mut [T],
) {
    let mut acc = [T::NEG_INF; LANES];
    let mut nan = [T::ZERO; LANES];
    for &start in starts {
        let at = start + first * stride;
        if S == 1 {
            let src: &[T; LANES] = padded[at..][..LANES].try_into().expect("a run of LANES");
            for ((a, n), &v) in acc.iter_mut().zip(&mut nan).zip(src) {
                take(a, n, v);
            }
        } else {
            let src = &padded[at..];
            for (l, (a, n)) in acc.iter_mut().zip(&mut nan).enumerate() {
                take(a, n, src[l * stride]);
            }
        }
    }
    for ((o, a), n) in out.iter_mut().zip(acc).zip(nan) {
        *o = if n > T::ZERO { T::NAN } else { a };
    }
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
