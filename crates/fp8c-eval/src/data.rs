//! Typed views of tensors: the element types kernels compute in, and the conversions between
//! them and a [`Tensor`]'s raw little-endian bytes.
//!
//! Kernels compute in [`Data`]: f16 and bf16 load as f32 (exactly) and are rounded once, to
//! nearest even, when stored back. Every other type is borrowed from the tensor's bytes (no
//! copy; a kernel that wants to write in place takes it with `Cow::into_owned`), and a result
//! vector becomes its tensor's storage as it is (`Tensor::from_vec`, no copy). FP8 never loads as `Data` implicitly: the few ops that
//! accept FP8 decode it explicitly through fp8c-core (see `fp8.rs`).

use crate::error::{ErrorKind, Fail, KResult, dtype_err, shape_err};
use fp8c_ir::{DType, Tensor};
use half::{bf16, f16};
use std::borrow::Cow;

/// Element counts from which loops run on rayon's pool.
pub(crate) const PAR_MIN: usize = 1 << 15;

/// A tensor's values in the type kernels compute in, borrowed from the tensor where its
/// bytes are already of that type.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Data<'a> {
    F64(Cow<'a, [f64]>),
    F32(Cow<'a, [f32]>),
    I64(Cow<'a, [i64]>),
    I32(Cow<'a, [i32]>),
    I16(Cow<'a, [i16]>),
    I8(Cow<'a, [i8]>),
    U8(Cow<'a, [u8]>),
    U16(Cow<'a, [u16]>),
    U32(Cow<'a, [u32]>),
    U64(Cow<'a, [u64]>),
    Bool(Cow<'a, [bool]>),
}

/// One element type of [`Data`].
pub(crate) trait Elem:
    Copy + Send + Sync + PartialEq + PartialOrd + Default + std::fmt::Debug + 'static
{
}

impl Elem for f64 {}
impl Elem for f32 {}
impl Elem for i64 {}
impl Elem for i32 {}
impl Elem for i16 {}
impl Elem for i8 {}
impl Elem for u8 {}
impl Elem for u16 {}
impl Elem for u32 {}
impl Elem for u64 {}
impl Elem for bool {}

impl<'a> Data<'a> {
    /// Loads a tensor's values; f16/bf16 widen to f32 exactly; FP8 is refused.
    pub(crate) fn load(t: &'a Tensor) -> KResult<Data<'a>> {
        let b = t.bytes();
        let pod = |m: String| Fail::new(ErrorKind::DType, m);
        Ok(match t.dtype() {
            DType::F64 => Data::F64(Cow::Borrowed(t.as_slice().map_err(pod)?)),
            DType::F32 => Data::F32(Cow::Borrowed(t.as_slice().map_err(pod)?)),
            DType::F16 => Data::F32(Cow::Owned(
                b.chunks_exact(2)
                    .map(|c| f16::from_le_bytes([c[0], c[1]]).to_f32())
                    .collect(),
            )),
            DType::BF16 => Data::F32(Cow::Owned(
                b.chunks_exact(2)
                    .map(|c| bf16::from_le_bytes([c[0], c[1]]).to_f32())
                    .collect(),
            )),
            DType::I64 => Data::I64(Cow::Borrowed(t.as_slice().map_err(pod)?)),
            DType::I32 => Data::I32(Cow::Borrowed(t.as_slice().map_err(pod)?)),
            DType::I16 => Data::I16(Cow::Borrowed(t.as_slice().map_err(pod)?)),
            DType::I8 => Data::I8(Cow::Borrowed(t.as_slice().map_err(pod)?)),
            DType::U8 => Data::U8(Cow::Borrowed(b)),
            DType::U16 => Data::U16(Cow::Borrowed(t.as_slice().map_err(pod)?)),
            DType::U32 => Data::U32(Cow::Borrowed(t.as_slice().map_err(pod)?)),
            DType::U64 => Data::U64(Cow::Borrowed(t.as_slice().map_err(pod)?)),
            DType::Bool => Data::Bool(Cow::Owned(b.iter().map(|&x| x != 0).collect())),
            d @ (DType::F8E4M3
            | DType::F8E5M2
            | DType::F8E4M3Fnuz
            | DType::F8E5M2Fnuz
            | DType::F8E8M0
            | DType::F4E2M1) => {
                return dtype_err!(
                    "{d} inputs are not accepted here: dequantize or cast them first"
                );
            }
        })
    }

    /// Stores the values as a tensor of `dtype` (which must compute in this variant's type);
    /// f32 values stored as f16/bf16 are rounded to nearest even. An owned vector becomes the
    /// tensor's storage without a copy.
    pub(crate) fn store(self, dtype: DType, shape: Vec<u64>) -> KResult<Tensor> {
        fn own<T: bytemuck::Pod>(d: DType, s: Vec<u64>, v: Cow<'_, [T]>) -> KResult<Tensor> {
            Tensor::from_vec(d, s, v.into_owned()).map_err(|m| Fail::new(ErrorKind::TooLarge, m))
        }
        match (self, dtype) {
            (Data::F64(v), DType::F64) => own(dtype, shape, v),
            (Data::F32(v), DType::F32) => own(dtype, shape, v),
            (Data::F32(v), DType::F16) => {
                let h: Vec<u16> = v.iter().map(|&x| f16::from_f32(x).to_bits()).collect();
                own(dtype, shape, Cow::Owned(h))
            }
            (Data::F32(v), DType::BF16) => {
                let h: Vec<u16> = v.iter().map(|&x| bf16::from_f32(x).to_bits()).collect();
                own(dtype, shape, Cow::Owned(h))
            }
            (Data::I64(v), DType::I64) => own(dtype, shape, v),
            (Data::I32(v), DType::I32) => own(dtype, shape, v),
            (Data::I16(v), DType::I16) => own(dtype, shape, v),
            (Data::I8(v), DType::I8) => own(dtype, shape, v),
            (Data::U8(v), DType::U8) => own(dtype, shape, v),
            (Data::U16(v), DType::U16) => own(dtype, shape, v),
            (Data::U32(v), DType::U32) => own(dtype, shape, v),
            (Data::U64(v), DType::U64) => own(dtype, shape, v),
            (Data::Bool(v), DType::Bool) => own(
                dtype,
                shape,
                Cow::Owned(v.iter().map(|&b| b as u8).collect()),
            ),
            (d, t) => Err(Fail::new(
                ErrorKind::Unsupported,
                format!("internal: cannot store {} values as {t}", d.type_name()),
            )),
        }
    }

    /// Name of the compute type, for messages.
    pub(crate) fn type_name(&self) -> &'static str {
        match self {
            Data::F64(_) => "f64",
            Data::F32(_) => "f32",
            Data::I64(_) => "i64",
            Data::I32(_) => "i32",
            Data::I16(_) => "i16",
            Data::I8(_) => "i8",
            Data::U8(_) => "u8",
            Data::U16(_) => "u16",
            Data::U32(_) => "u32",
            Data::U64(_) => "u64",
            Data::Bool(_) => "bool",
        }
    }
}

/// Builds a tensor from bytes, mapping a size mismatch to a kernel failure.
pub(crate) fn tensor(dtype: DType, shape: Vec<u64>, bytes: Vec<u8>) -> KResult<Tensor> {
    Tensor::from_bytes(dtype, shape, bytes).map_err(|m| Fail::new(ErrorKind::TooLarge, m))
}

/// The element count of a shape, or a [`ErrorKind::TooLarge`] failure when the product of
/// its non-zero dims exceeds `fp8c_ir::MAX_ELEMENTS`. Counting only the non-zero dims also
/// refuses empty shapes such as `[0, 2^40, 2^40]`, so every partial product of a checked shape
/// (strides, per-axis tables) fits comfortably in a `usize`.
pub(crate) fn numel(shape: &[u64]) -> KResult<usize> {
    let nonzero = shape
        .iter()
        .filter(|&&d| d != 0)
        .try_fold(1u64, |a, &d| a.checked_mul(d));
    match nonzero {
        Some(n) if n <= fp8c_ir::MAX_ELEMENTS => {
            Ok(if shape.contains(&0) { 0 } else { n as usize })
        }
        _ => Err(Fail::new(
            ErrorKind::TooLarge,
            format!(
                "a tensor of shape {shape:?} exceeds the limit of {} elements",
                fp8c_ir::MAX_ELEMENTS
            ),
        )),
    }
}

/// Values of an integer tensor (i64, i32, ...) as i64; `what` names the input in messages.
pub(crate) fn int_values(t: &Tensor, what: &str) -> KResult<Vec<i64>> {
    if !t.dtype().is_int() {
        return dtype_err!("{what} must be an integer tensor, got {}", t.dtype());
    }
    t.to_i64_vec().map_err(|m| Fail::new(ErrorKind::DType, m))
}

/// Values of a 1-D (or scalar) integer tensor; `what` names the input in messages.
pub(crate) fn int_list(t: &Tensor, what: &str) -> KResult<Vec<i64>> {
    if t.shape().len() > 1 {
        return shape_err!("{what} must be 1-D, got shape {:?}", t.shape());
    }
    int_values(t, what)
}

/// The single value of a one-element integer tensor.
pub(crate) fn int_scalar(t: &Tensor, what: &str) -> KResult<i64> {
    match int_values(t, what)?.as_slice() {
        [v] => Ok(*v),
        _ => shape_err!("{what} must hold one element, got shape {:?}", t.shape()),
    }
}

/// Values of a float tensor (f64, f32, f16, bf16; not FP8) as f32.
pub(crate) fn float_values_f32(t: &Tensor, what: &str) -> KResult<Vec<f32>> {
    match Data::load(t)? {
        Data::F32(v) => Ok(v.into_owned()),
        Data::F64(v) => Ok(v.iter().copied().map(|x| x as f32).collect()),
        _ => dtype_err!("{what} must be a float tensor, got {}", t.dtype()),
    }
}

/// The single value of a one-element float tensor, as f32.
pub(crate) fn float_scalar_f32(t: &Tensor, what: &str) -> KResult<f32> {
    // A scale read per GEMM call: no vector for one f32.
    if let (DType::F32, Ok(&[v])) = (t.dtype(), t.as_slice::<f32>()) {
        return Ok(v);
    }
    match float_values_f32(t, what)?.as_slice() {
        [v] => Ok(*v),
        _ => shape_err!("{what} must hold one element, got shape {:?}", t.shape()),
    }
}

/// A float tensor's values as f64 (f16/bf16/f32 widened exactly; FP8 and non-floats refused).
/// Kernels that compute in f64 and round once read their inputs with it.
pub(crate) fn float_values_f64(t: &Tensor, what: &str) -> KResult<Vec<f64>> {
    match Data::load(t)? {
        Data::F32(v) => Ok(v.iter().copied().map(f64::from).collect()),
        Data::F64(v) => Ok(v.into_owned()),
        _ => dtype_err!("{what} must be a float tensor, got {}", t.dtype()),
    }
}

/// The single value of a one-element float tensor, as f64.
pub(crate) fn float_scalar_f64(t: &Tensor, what: &str) -> KResult<f64> {
    match float_values_f64(t, what)?.as_slice() {
        [v] => Ok(*v),
        _ => shape_err!("{what} must hold one element, got shape {:?}", t.shape()),
    }
}

/// Errors unless `t` has `like`'s dtype and shape (a gradient and its primal, say).
pub(crate) fn same_type(t: &Tensor, like: &Tensor, what: &str, like_what: &str) -> KResult<()> {
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

/// Applies `f(row_index, row_out)` to the independent rows of length `len` of `out`, in
/// parallel when large (each row by one thread, so results never depend on the thread count).
pub(crate) fn rows_mut<T: Send>(
    out: &mut [T],
    len: usize,
    f: impl Fn(usize, &mut [T]) + Sync + Send,
) {
    use rayon::prelude::*;
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

/// The largest of `xs` in f64 with NaN winning (−∞ for none): the max a softmax subtracts.
pub(crate) fn max_keep_nan(xs: impl Iterator<Item = f64>) -> f64 {
    xs.fold(f64::NEG_INFINITY, |a, v| {
        if a.is_nan() || v.is_nan() {
            f64::NAN
        } else {
            a.max(v)
        }
    })
}

/// Maps a slice elementwise, on rayon's pool when it is large; order is kept. Each task maps
/// a whole chunk with [`map_into`] straight into the output's capacity (no zeroing, and
/// simple maps vectorise), not one element at a time through rayon's collect.
pub(crate) fn par_map<A: Copy + Sync, O: Send>(
    v: &[A],
    f: impl Fn(&A) -> O + Sync + Send,
) -> Vec<O> {
    use rayon::prelude::*;
    use std::mem::MaybeUninit;
    let mut out = Vec::with_capacity(v.len());
    let dst = &mut out.spare_capacity_mut()[..v.len()];
    let f = &f;
    let one = |d: &mut [MaybeUninit<O>], s: &[A]| map_into(s, d, |x| MaybeUninit::new(f(&x)));
    let threads = rayon::current_num_threads();
    if v.len() >= PAR_MIN && threads > 1 {
        let chunk = v.len().div_ceil(threads * 4).max(PAR_MIN / 4);
        dst.par_chunks_mut(chunk)
            .zip(v.par_chunks(chunk))
            .for_each(|(d, s)| one(d, s));
    } else {
        one(dst, v);
    }
    // SAFETY: the loops above wrote every one of the first `v.len()` elements (a panic in `f`
    // unwinds before this, leaving `out` empty).
    unsafe { out.set_len(v.len()) };
    out
}

/// `o[i] = f(x[i])`, compiled for AVX2 where the CPU has it: the table's f32 functions
/// (`fp8c_ir::fmath`) are branch-free f64 arithmetic, twice as wide there as in baseline
/// x86-64's SSE2. Both paths compute the same IEEE operations (Rust never contracts
/// `a * b + c`), so the bits do not depend on the path.
#[inline(always)]
pub(crate) fn map_into<T: Copy, O>(x: &[T], o: &mut [O], f: impl Fn(T) -> O + Copy) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2 (checked just above).
        return unsafe { map_into_avx2(x, o, f) };
    }
    for (y, &v) in o.iter_mut().zip(x) {
        *y = f(v);
    }
}

/// [`map_into`]'s loop for AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn map_into_avx2<T: Copy, O>(x: &[T], o: &mut [O], f: impl Fn(T) -> O + Copy) {
    for (y, &v) in o.iter_mut().zip(x) {
        *y = f(v);
    }
}

/// Normalises a possibly negative axis against `rank` (valid range `-rank..rank`).
pub(crate) fn norm_axis(axis: i64, rank: usize) -> KResult<usize> {
    let r = rank as i64;
    if axis < -r || axis >= r {
        return crate::error::attr_err!("axis {axis} is out of range for rank {rank}");
    }
    Ok(if axis < 0 {
        (axis + r) as usize
    } else {
        axis as usize
    })
}

/// Row-major element strides of a shape.
pub(crate) fn strides_of(dims: &[usize]) -> Vec<usize> {
    let mut s = vec![1usize; dims.len()];
    for d in (0..dims.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1] * dims[d + 1];
    }
    s
}

/// A shape as `usize` dims (tensors that exist always fit).
pub(crate) fn dims_of(t: &Tensor) -> Vec<usize> {
    t.shape().iter().map(|&d| d as usize).collect()
}

/// Converts `usize` dims back to a tensor shape.
pub(crate) fn shape_u64(dims: &[usize]) -> Vec<u64> {
    dims.iter().map(|&d| d as u64).collect()
}

/// `x` rounded to f32 "to odd": truncated toward zero and, if that was inexact, with the last
/// mantissa bit set. Rounding the result once more, to nearest even, to a format with at
/// least two fewer bits of precision (f16, bf16) equals rounding `x` directly.
fn f64_to_f32_round_odd(x: f64) -> f32 {
    let f = x as f32;
    if !f.is_finite() || f64::from(f) == x || f.to_bits() & 1 == 1 {
        // Exact, odd already, or beyond f32's range (then beyond f16's and bf16's too).
        return f;
    }
    // `f` is the nearest f32 and even; its neighbour toward x is the truncation, and odd.
    let bits = f.to_bits();
    f32::from_bits(if f64::from(f).abs() > x.abs() {
        bits - 1
    } else {
        bits + 1
    })
}

/// f64 → f16, correctly rounded (to nearest even). `half`'s own `from_f64` ignores the low 32
/// bits of the f64 mantissa, so a value just above a tie rounds down with it.
pub(crate) fn f64_to_f16(x: f64) -> f16 {
    f16::from_f32(f64_to_f32_round_odd(x))
}

/// f64 → bf16, correctly rounded (to nearest even); see [`f64_to_f16`].
pub(crate) fn f64_to_bf16(x: f64) -> bf16 {
    bf16::from_f32(f64_to_f32_round_odd(x))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f64_to_half_types_round_once() {
        // 1 + 2^-11 + 2^-40: f16's ulp at 1 is 2^-10, so this is just above the tie and rounds
        // up; the 2^-40 lives in the f64 bits `half` drops, and vanishes through a nearest f32.
        assert_eq!(
            f64_to_f16(1.0 + 2f64.powi(-11) + 2f64.powi(-40)).to_f64(),
            1.0 + 2f64.powi(-10)
        );
        assert_eq!(f64_to_f16(1.0 + 2f64.powi(-11)).to_f64(), 1.0); // an exact tie goes to even
        assert_eq!(
            f64_to_bf16(-(1.0 + 2f64.powi(-8) + 2f64.powi(-50))).to_f64(),
            -(1.0 + 2f64.powi(-7))
        );
        assert_eq!(f64_to_bf16(1e-300).to_f64(), 0.0);
        assert_eq!(f64_to_f16(1e6).to_f64(), f64::INFINITY);
        assert!(f64_to_bf16(f64::NAN).is_nan());
        assert_eq!(f64_to_f16(-0.0).to_bits(), 0x8000);
        // The smallest f16 subnormal is 2^-24; 2^-25 + tiny is above the tie at half of it.
        assert_eq!(
            f64_to_f16(2f64.powi(-25) + 2f64.powi(-60)).to_f64(),
            2f64.powi(-24)
        );
    }
}
