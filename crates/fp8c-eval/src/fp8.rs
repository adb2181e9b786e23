//! The fp8 family: fp8c's FP8 ops (`amax`, `compute_scale`, `amax_history_update`,
//! `quantize`, `dequantize`), ONNX's `quantize_linear` / `dequantize_linear` (kernels in
//! `quantize.rs`); the FP8 helpers other kernels share are `fp8_codes.rs`. Every rounding to or from FP8 is
//! fp8c-core's, so this evaluator is bit-exact by construction.
//!
//! Non-finite inputs of the ONNX conversions (`quantize_linear`, `cast`) follow ONNX's Cast
//! table for E4M3FN and E5M2: with `saturate` ±inf (and anything rounding past the largest
//! finite value) becomes ±max; without it, NaN for E4M3 (it has no infinities) and ±inf for
//! E5M2. NaN stays NaN, its sign kept. fp8c's scaled `quantize` saturates finite values only:
//! ±inf becomes NaN (E4M3) or ±inf (E5M2), so non-finite data never turns into finite codes
//! (fp8c-core's `quantize`).
//!
//! Conventions (TransformerEngine's, see fp8c-core's `scaling` module):
//! - `quantize`: `q = encode(f32(x) * scale)`, the product rounded to f32 before the cast.
//! - `dequantize`: `f32(q) * scale_inv` in f32, then rounded once to `to`.
//! - `amax`: max |x| over the tensor as f32; NaN anywhere gives NaN; empty gives 0.
//! - `compute_scale`: `amax' = max(amax, epsilon)` (NaN stays NaN), then fp8c-core's
//!   `compute_scale(amax', fmt_max, margin, prev_scale)` (0, ±inf or NaN keep the previous
//!   scale; an infinite result becomes f32::MAX), then with `power_2` the scale is rounded
//!   down to a power of two by clearing its mantissa; `scale_inv = 1 / scale`.
//!   The amax is history[0] for `history_most_recent` (TE's slot 0 holds the step being
//!   recorded), the NaN-propagating max of the history for `history_max`, the scalar input for
//!   `current`.
//! - `amax_history_update`: `recorded` = history with slot 0 set to the amax; `next` =
//!   fp8c-core's `roll_history(recorded)` (shift left by one, old slot 0 to the end, slot 0 = 0).

use crate::args;
use crate::data::{PAR_MIN, float_scalar_f32, par_map, tensor};
use crate::error::{Fail, KResult, attr_err, dtype_err, shape_err};
use crate::fp8_codes::{codes_tensor, f32_values, float_values_any, format_of, store_f32};
use crate::quantize;
use fp8c_core::narrow::E8M0Rounding;
use fp8c_core::{AmaxComputeAlgo, Fp8Format};
use fp8c_ir::{AmaxSource, DType, E8m0Round, Fp8Op, Support, Tensor};
use rayon::prelude::*;

/// Evaluates an op of the fp8 family.
pub(crate) fn eval(op: Fp8Op<'_>, inputs: &[&Tensor]) -> KResult<Vec<Tensor>> {
    let out = match op {
        Fp8Op::QuantizeLinear {
            axis,
            saturate,
            to,
            block_size,
        } => quantize::quantize_linear(inputs, *axis, *saturate, *to, *block_size)?,
        Fp8Op::DequantizeLinear { axis, block_size } => {
            quantize::dequantize_linear(inputs, *axis, *block_size)?
        }
        Fp8Op::Amax => {
            let [x] = args(inputs)?;
            amax(x)?
        }
        Fp8Op::ComputeScale {
            fmt,
            margin,
            source,
            epsilon,
            power_2,
        } => return compute_scale(inputs, *fmt, *margin, *source, *epsilon, *power_2),
        Fp8Op::AmaxHistoryUpdate => return amax_history_update(inputs),
        Fp8Op::Quantize { to, saturate } => quantize(inputs, *to, *saturate)?,
        Fp8Op::Dequantize { to } => dequantize(inputs, *to)?,
        Fp8Op::CastE8m0 { round, saturate } => {
            let [x] = args(inputs)?;
            let round = match round {
                E8m0Round::Up => E8M0Rounding::Up,
                E8m0Round::Down => E8M0Rounding::Down,
                E8m0Round::Nearest => E8M0Rounding::Nearest,
            };
            let codes = float_values_any(x, "input")?
                .iter()
                .map(|&v| fp8c_core::narrow::encode_e8m0(v, *saturate, round))
                .collect();
            tensor(DType::F8E8M0, x.shape().to_vec(), codes)?
        }
        Fp8Op::BlockQuantize {
            to,
            saturate,
            rows,
            cols,
            scaling,
            epsilon,
        } => {
            return crate::block::block_quantize(
                inputs,
                *to,
                *saturate,
                (*rows, *cols),
                *scaling,
                *epsilon,
            );
        }
        Fp8Op::BlockDequantize { to, rows, cols } => {
            crate::block::block_dequantize(inputs, *to, (*rows, *cols))?
        }
        Fp8Op::__Lifetime(never, _) => match never {},
    };
    Ok(vec![out])
}

/// Every op of the family is evaluated.
pub(crate) fn support(op: Fp8Op<'_>) -> Support {
    match op {
        Fp8Op::QuantizeLinear { .. }
        | Fp8Op::DequantizeLinear { .. }
        | Fp8Op::Amax
        | Fp8Op::ComputeScale { .. }
        | Fp8Op::AmaxHistoryUpdate
        | Fp8Op::Quantize { .. }
        | Fp8Op::Dequantize { .. }
        | Fp8Op::CastE8m0 { .. }
        | Fp8Op::BlockQuantize { .. }
        | Fp8Op::BlockDequantize { .. } => Support::Yes,
        Fp8Op::__Lifetime(never, _) => match never {},
    }
}

fn fp8_attr(to: DType, name: &str) -> KResult<Fp8Format> {
    format_of(to).map_or_else(
        || attr_err!("{name}={to} is not an FP8 type (f8e4m3 or f8e5m2)"),
        Ok,
    )
}

/// A scalar f32 input (`scale`, `scale_inv`, `prev_scale`, `amax`).
fn f32_scalar(t: &Tensor, what: &str) -> KResult<f32> {
    if t.dtype() != DType::F32 {
        return dtype_err!("{what} must be f32, got {}", t.dtype());
    }
    float_scalar_f32(t, what)
}

/// `amax(x)`: max |x| as f32[]; NaN propagates; an empty tensor gives 0.
pub(crate) fn amax(x: &Tensor) -> KResult<Tensor> {
    if !x.dtype().is_float() {
        return dtype_err!("x must be a float tensor, got {}", x.dtype());
    }
    let v = f32_values(x, "x")?;
    // f64 inputs: |x| rounded to f32 is monotone, so the f32 amax is the rounded f64 amax.
    let m = if v.len() >= PAR_MIN {
        // max is exact and order-free (NaN wins in each chunk and across chunks).
        let parts: Vec<f32> = v.par_chunks(PAR_MIN).map(fp8c_core::amax_f32).collect();
        fp8c_core::amax_f32(&parts)
    } else {
        fp8c_core::amax_f32(&v)
    };
    Ok(Tensor::scalar_f32(m))
}

/// `compute_scale`: outputs `scale` and `scale_inv` (see the module docs).
pub(crate) fn compute_scale(
    inputs: &[&Tensor],
    fmt: DType,
    margin: f32,
    source: AmaxSource,
    epsilon: f32,
    power_2: bool,
) -> KResult<Vec<Tensor>> {
    let [src, prev] = inputs else {
        return Fail::arity("2", inputs.len());
    };
    let fmt = fp8_attr(fmt, "fmt")?;
    if !margin.is_finite() {
        return attr_err!("margin={margin} must be finite");
    }
    if !(epsilon.is_finite() && epsilon >= 0.0) {
        return attr_err!("epsilon={epsilon} must be finite and >= 0");
    }
    let prev = f32_scalar(prev, "prev_scale")?;
    let amax = match source {
        AmaxSource::Current => f32_scalar(src, "amax")?,
        AmaxSource::HistoryMax | AmaxSource::HistoryMostRecent => {
            if src.dtype() != DType::F32 || src.shape().len() != 1 || src.is_empty() {
                return shape_err!(
                    "the amax history must be a non-empty f32[L], got {} {:?}",
                    src.dtype(),
                    src.shape()
                );
            }
            let h = src
                .to_f32_vec()
                .map_err(|m| Fail::new(crate::error::ErrorKind::DType, m))?;
            let algo = match source {
                AmaxSource::HistoryMax => AmaxComputeAlgo::Max,
                _ => AmaxComputeAlgo::MostRecent,
            };
            fp8c_core::history_amax(&h, algo)
        }
    };
    let amax = if amax < epsilon { epsilon } else { amax };
    let mut scale = fp8c_core::compute_scale(amax, fmt.max(), margin, prev);
    if power_2 {
        scale = f32::from_bits(scale.to_bits() & 0xFF80_0000);
    }
    Ok(vec![
        Tensor::scalar_f32(scale),
        Tensor::scalar_f32(1.0 / scale),
    ])
}

/// `amax_history_update(history, amax)`: outputs `recorded` and `next` (module docs).
pub(crate) fn amax_history_update(inputs: &[&Tensor]) -> KResult<Vec<Tensor>> {
    let [history, amax] = inputs else {
        return Fail::arity("2", inputs.len());
    };
    if history.dtype() != DType::F32 || history.shape().len() != 1 || history.is_empty() {
        return shape_err!(
            "history must be a non-empty f32[L], got {} {:?}",
            history.dtype(),
            history.shape()
        );
    }
    let amax = f32_scalar(amax, "amax")?;
    let mut recorded = history
        .to_f32_vec()
        .map_err(|m| Fail::new(crate::error::ErrorKind::DType, m))?;
    recorded[0] = amax;
    let mut next = recorded.clone();
    fp8c_core::roll_history(&mut next);
    let shape = history.shape().to_vec();
    Ok(vec![
        Tensor::from_f32(shape.clone(), &recorded),
        Tensor::from_f32(shape, &next),
    ])
}

/// `quantize { to, saturate }(x, scale)`: `encode(f32(x) * scale)`.
pub(crate) fn quantize(inputs: &[&Tensor], to: DType, saturate: bool) -> KResult<Tensor> {
    let [x, scale] = inputs else {
        return Fail::arity("2", inputs.len());
    };
    let fmt = fp8_attr(to, "to")?;
    if !x.dtype().is_float() || x.dtype().is_fp8() {
        return dtype_err!("x must be a float tensor other than FP8, got {}", x.dtype());
    }
    let scale = f32_scalar(scale, "scale")?;
    let v = f32_values(x, "x")?;
    let mut out = vec![0u8; v.len()];
    if v.len() >= PAR_MIN {
        out.par_chunks_mut(PAR_MIN)
            .zip(v.par_chunks(PAR_MIN))
            .for_each(|(o, s)| fp8c_core::quantize_slice(fmt, s, scale, o, saturate));
    } else {
        fp8c_core::quantize_slice(fmt, &v, scale, &mut out, saturate);
    }
    codes_tensor(to, x.shape().to_vec(), out)
}

/// `dequantize { to }(q, scale_inv)`: `f32(q) * scale_inv`, rounded once to `to`.
fn dequantize(inputs: &[&Tensor], to: DType) -> KResult<Tensor> {
    let [q, scale_inv] = inputs else {
        return Fail::arity("2", inputs.len());
    };
    let Some(fmt) = format_of(q.dtype()) else {
        return dtype_err!("q must be an FP8 tensor, got {}", q.dtype());
    };
    let s = f32_scalar(scale_inv, "scale_inv")?;
    if to == DType::F32 {
        let codes = q.bytes();
        let v = filled(codes.len(), |start, o| {
            fp8c_core::dequantize_into(fmt, &codes[start..start + o.len()], s, o)
        });
        return store_f32(v, to, q.shape().to_vec());
    }
    let table = fp8c_core::decode_table(fmt);
    let v = par_map(q.bytes(), |&c| table[c as usize] * s);
    store_f32(v, to, q.shape().to_vec())
}

/// A vector of `len` f32 written by `fill(start, chunk)` over its uninitialised capacity,
/// chunk by chunk (on rayon's pool when large); `fill` must write its whole chunk.
fn filled(
    len: usize,
    fill: impl Fn(usize, &mut [std::mem::MaybeUninit<f32>]) + Sync + Send,
) -> Vec<f32> {
    let mut out: Vec<f32> = Vec::with_capacity(len);
    let dst = &mut out.spare_capacity_mut()[..len];
    if len >= PAR_MIN && rayon::current_num_threads() > 1 {
        dst.par_chunks_mut(PAR_MIN)
            .enumerate()
            .for_each(|(i, o)| fill(i * PAR_MIN, o));
    } else {
        fill(0, dst);
    }
    // SAFETY: the chunks tile all `len` elements and `fill` writes each whole (a panic
    // unwinds before this, leaving `out` empty).
    unsafe { out.set_len(len) };
    out
}
