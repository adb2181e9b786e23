//! `cast` between every pair of dtypes.
//!
//! - float → int truncates toward zero; out-of-range values saturate and NaN becomes 0 (Rust
//!   `as`; ONNX leaves these undefined). int → int wraps (two's complement), as C and numpy.
//! - → f16/bf16 rounds once to nearest even from the exact source value: f64 and i64 sources
//!   go through round-to-odd intermediates, never through a second nearest rounding
//!   (onnxruntime casts f64 → f16 through a nearest f32, which can round twice).
//! - → bool is `x != 0` (NaN is true, as numpy); bool → number is 0 or 1.
//! - → the storage-only narrow floats (E4M3FNUZ, E5M2FNUZ, E8M0 with round mode `up`, FP4
//!   E2M1) goes through `fp8c_core::narrow` from f32 like FP8; from them decodes exactly.
//! - → FP8 goes through fp8c-core's encoder with the op's `saturate` flag, from f32: f16, bf16
//!   and integers up to 2^24 reach f32 exactly; f64 is rounded to f32 first (so a value within
//!   half an f32 ulp of an FP8 rounding tie may round differently from a direct f64 → FP8
//!   cast, as in onnxruntime). FP8 → anything decodes exactly to f32 first.

use crate::data::{Data, f64_to_bf16, f64_to_f16, tensor};
use crate::error::KResult;
use crate::fp8_codes as fp8;
use fp8c_ir::{DType, Tensor};
use std::borrow::Cow;

/// Evaluates `cast { to, saturate }`.
pub(crate) fn cast(x: &Tensor, to: DType, saturate: bool) -> KResult<Tensor> {
    let from = x.dtype();
    if from == to {
        return Ok(x.clone());
    }
    let shape = x.shape().to_vec();
    if let Some(fmt) = fp8::format_of(to) {
        let v = fp8::f32_values(x, "input")?;
        return fp8::codes_tensor(to, shape, fp8::encode(fmt, &v, saturate));
    }
    if let Some(fmt) = fp8::narrow_of(to) {
        let v = fp8::float_values_any(x, "input")?;
        let codes = v
            .iter()
            .map(|&x| fp8c_core::narrow::encode(fmt, x, saturate))
            .collect();
        return tensor(to, shape, codes);
    }
    if fp8::format_of(from).is_some() || fp8::narrow_of(from).is_some() {
        let v = fp8::float_values_any(x, "input")?;
        return tensor(to, shape, convert(Data::F32(Cow::from(v)), to));
    }
    // f16/bf16 sources load as f32 exactly, so each pair below rounds at most once.
    tensor(to, shape, convert(Data::load(x)?, to))
}

/// Converts values to the bytes of `to` (a non-FP8 dtype).
fn convert(data: Data, to: DType) -> Vec<u8> {
    macro_rules! from {
        ($v:expr, $t:ty, $nonzero:expr, |$x:ident| $wide:expr) => {{
            let v: Vec<$t> = $v;
            let mut out = Vec::with_capacity(v.len() * to.size());
            match to {
                DType::F64 => v
                    .iter()
                    .for_each(|&$x| out.extend_from_slice(&(num!($x, f64)).to_le_bytes())),
                DType::F32 => v
                    .iter()
                    .for_each(|&$x| out.extend_from_slice(&(num!($x, f32)).to_le_bytes())),
                DType::F16 => v
                    .iter()
                    .for_each(|&$x| out.extend_from_slice(&f64_to_f16($wide).to_le_bytes())),
                DType::BF16 => v
                    .iter()
                    .for_each(|&$x| out.extend_from_slice(&f64_to_bf16($wide).to_le_bytes())),
                DType::I64 => v
                    .iter()
                    .for_each(|&$x| out.extend_from_slice(&(num!($x, i64)).to_le_bytes())),
                DType::I32 => v
                    .iter()
                    .for_each(|&$x| out.extend_from_slice(&(num!($x, i32)).to_le_bytes())),
                DType::I16 => v
                    .iter()
                    .for_each(|&$x| out.extend_from_slice(&(num!($x, i16)).to_le_bytes())),
                DType::I8 => v
                    .iter()
                    .for_each(|&$x| out.extend_from_slice(&(num!($x, i8)).to_le_bytes())),
                DType::U8 => v.iter().for_each(|&$x| out.push(num!($x, u8))),
                DType::U16 => v
                    .iter()
                    .for_each(|&$x| out.extend_from_slice(&(num!($x, u16)).to_le_bytes())),
                DType::U32 => v
                    .iter()
                    .for_each(|&$x| out.extend_from_slice(&(num!($x, u32)).to_le_bytes())),
                DType::U64 => v
                    .iter()
                    .for_each(|&$x| out.extend_from_slice(&(num!($x, u64)).to_le_bytes())),
                DType::Bool => v.iter().for_each(|&$x| out.push(($nonzero) as u8)),
                DType::F8E4M3
                | DType::F8E5M2
                | DType::F8E4M3Fnuz
                | DType::F8E5M2Fnuz
                | DType::F8E8M0
                | DType::F4E2M1 => {
                    unreachable!("FP8 and narrow float targets are handled by the caller")
                }
            }
            out
        }};
    }
    // `x as T` for numbers (bools go through u8). The last argument of `from!` widens a value
    // to f64 for the f16/bf16 rounding: exactly, or for i64 rounded to odd (see below).
    macro_rules! num {
        ($x:ident, $t:ty) => {
            ($x as $t)
        };
    }
    match data {
        Data::F64(v) => from!(v.into_owned(), f64, x != 0.0, |x| x),
        Data::F32(v) => from!(v.into_owned(), f32, x != 0.0, |x| x as f64),
        Data::I64(v) => from!(v.into_owned(), i64, x != 0, |x| i64_to_f64_round_odd(x)),
        Data::I32(v) => from!(v.into_owned(), i32, x != 0, |x| x as f64),
        Data::I16(v) => from!(v.into_owned(), i16, x != 0, |x| x as f64),
        Data::I8(v) => from!(v.into_owned(), i8, x != 0, |x| x as f64),
        Data::U8(v) => from!(v.into_owned(), u8, x != 0, |x| x as f64),
        Data::U16(v) => from!(v.into_owned(), u16, x != 0, |x| x as f64),
        Data::U32(v) => from!(v.into_owned(), u32, x != 0, |x| x as f64),
        Data::U64(v) => from!(v.into_owned(), u64, x != 0, |x| u64_to_f64_round_odd(x)),
        Data::Bool(v) => {
            let v: Vec<u8> = v.iter().copied().map(u8::from).collect();
            from!(v, u8, x != 0, |x| x as f64)
        }
    }
}

/// `x` as f64 rounded to odd: truncated toward zero and, if inexact, with the last mantissa
/// bit set. Rounding that once more to a format of at most 51 mantissa bits (f16, bf16)
/// gives the correctly rounded result, which plain `x as f64` (round to nearest) followed by
/// a second rounding does not for |x| > 2^53.
fn i64_to_f64_round_odd(x: i64) -> f64 {
    let f = x as f64;
    let back = f as i128; // 2^63 fits in i128
    let exact = i128::from(x);
    if back == exact || f.to_bits() & 1 == 1 {
        return f;
    }
    // Step one ulp toward x: that neighbour is the truncation, with an odd last bit.
    let bits = f.to_bits();
    f64::from_bits(if (back > exact) == (f > 0.0) {
        bits - 1
    } else {
        bits + 1
    })
}

/// `x` as f64 rounded to odd (see [`i64_to_f64_round_odd`]).
fn u64_to_f64_round_odd(x: u64) -> f64 {
    let f = x as f64;
    let back = f as u128; // 2^64 fits in u128
    let exact = u128::from(x);
    if back == exact || f.to_bits() & 1 == 1 {
        return f;
    }
    let bits = f.to_bits();
    f64::from_bits(if back > exact { bits - 1 } else { bits + 1 })
}

/// Rounds f64 results once to `dtype` (the f64 kernels' store).
pub(crate) fn store_f64(v: Vec<f64>, dtype: DType, shape: &[u64]) -> KResult<Tensor> {
    cast(&Tensor::from_f64(shape.to_vec(), &v), dtype, false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_odd_widening_keeps_i64_to_bf16_single_rounded() {
        // 2^62 + 2^54 + 1: bf16's ulp at 2^62 is 2^55, so this lies just above the tie at
        // 2^54 and must round up to 2^62 + 2^55. Through a nearest-even f64 it would become
        // the tie 2^62 + 2^54 and then round down to 2^62.
        let x: i64 = (1 << 62) + (1 << 54) + 1;
        assert_eq!(
            f64_to_bf16(i64_to_f64_round_odd(x)).to_f64(),
            2f64.powi(62) + 2f64.powi(55)
        );
        assert_eq!(i64_to_f64_round_odd(1 << 40), 2f64.powi(40));
        assert_eq!(i64_to_f64_round_odd(-7), -7.0);
        let y: i64 = -((1 << 62) + (1 << 54) + 1);
        assert_eq!(
            f64_to_bf16(i64_to_f64_round_odd(y)).to_f64(),
            -(2f64.powi(62) + 2f64.powi(55))
        );
    }
}
