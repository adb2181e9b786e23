//! ONNX `QuantizeLinear` and `DequantizeLinear`, per tensor or per axis: kernels of the fp8
//! family (`fp8.rs` dispatches to them).
//!
//! - Quantize: `x / y_scale` in the scale's precision (ONNX opset 23's default `precision`:
//!   the exact quotient rounded once to the scale's type), then for integer targets
//!   `clamp(round_half_to_even(q) + zero_point)` (NaN gives the range's low end, as
//!   onnxruntime and the reference do on x86), and for FP8 targets fp8c-core's cast of `q`
//!   (as f32) with the `saturate` flag; the FP8 zero point must be 0.
//! - Dequantize: `(x − zero_point) · x_scale` computed in f64 (exact for every integer input
//!   and f32 scale: one rounding) and rounded once to the scale's type; FP8 inputs are decoded
//!   exactly and their zero point must be 0.
//! - The scale (and zero point) is a one-element tensor (per tensor), 1-D with one entry per
//!   index of `axis` (per axis), or, with `block_size` > 0, of x's rank with one entry per
//!   block of `block_size` consecutive indices along `axis` (ONNX opset 21's blocked form).

use crate::cast::cast;
use crate::data::{f64_to_bf16, f64_to_f16, norm_axis, tensor};
use crate::error::{ErrorKind, Fail, KResult, attr_err, dtype_err, shape_err, value_err};
use crate::fp8_codes as fp8;
use fp8c_ir::{DType, Tensor};

/// For each element of a tensor of `shape`, which scale entry applies.
struct Channels {
    /// Elements per index of the axis (product of the dims after it); 0 means per tensor.
    inner: usize,
    /// Size of the axis.
    dim: usize,
    /// Blocked: (block size, the scale's dim along the axis).
    block: Option<(usize, usize)>,
}

impl Channels {
    fn of(&self, i: usize) -> usize {
        let Some(q) = i.checked_div(self.inner) else {
            return 0;
        };
        match self.block {
            None => q % self.dim,
            // Element (outer, a, inner) reads scale entry (outer, a / block, inner).
            Some((block, sdim)) => {
                let (outer, a, inner) = (q / self.dim, q % self.dim, i % self.inner);
                (outer * sdim + a / block) * self.inner + inner
            }
        }
    }
}

/// Checks the scale and zero point against `x` and says how elements map to their entries.
fn channels(
    x: &Tensor,
    scale: &Tensor,
    zp: Option<&Tensor>,
    axis: i64,
    block_size: i64,
) -> KResult<Channels> {
    if !scale.dtype().is_float() || scale.dtype().is_fp8() {
        return dtype_err!(
            "the scale must be a float tensor other than FP8, got {}",
            scale.dtype()
        );
    }
    if let Some(z) = zp
        && z.shape() != scale.shape()
        && !(z.len() == 1 && scale.len() == 1)
    {
        return shape_err!(
            "the zero point's shape {:?} differs from the scale's {:?}",
            z.shape(),
            scale.shape()
        );
    }
    if block_size < 0 {
        return attr_err!("block_size={block_size} must be ≥ 0");
    }
    if block_size > 0 {
        let ax = norm_axis(axis, x.shape().len())?;
        let b = block_size as u64;
        let want: Vec<u64> = x
            .shape()
            .iter()
            .enumerate()
            .map(|(i, &d)| if i == ax { d.div_ceil(b) } else { d })
            .collect();
        if scale.shape() != want.as_slice() {
            return shape_err!(
                "a blocked scale (block_size={block_size}, axis {ax}) of x {:?} must have shape {want:?}, got {:?}",
                x.shape(),
                scale.shape()
            );
        }
        let inner = x.shape()[ax + 1..].iter().product::<u64>() as usize;
        return Ok(Channels {
            inner: inner.max(1),
            dim: x.shape()[ax] as usize,
            block: Some((block_size as usize, want[ax] as usize)),
        });
    }
    if scale.len() == 1 && scale.shape().len() <= 1 {
        return Ok(Channels {
            inner: 0,
            dim: 1,
            block: None,
        });
    }
    if scale.shape().len() != 1 {
        return shape_err!(
            "the scale must be a scalar or 1-D (per axis), got shape {:?}",
            scale.shape()
        );
    }
    let ax = norm_axis(axis, x.shape().len())?;
    let dim = x.shape()[ax] as usize;
    if scale.len() != dim {
        return shape_err!(
            "a per-axis scale needs {dim} entries (axis {ax} of {:?}), got {}",
            x.shape(),
            scale.len()
        );
    }
    let inner = x.shape()[ax + 1..].iter().product::<u64>() as usize;
    Ok(Channels {
        inner: inner.max(1),
        dim,
        block: None,
    })
}

/// Rounds an f64 to the precision of a float dtype (and back to f64).
fn round_to(d: DType, v: f64) -> f64 {
    match d {
        DType::F32 => f64::from(v as f32),
        DType::F16 => f64_to_f16(v).to_f64(),
        DType::BF16 => f64_to_bf16(v).to_f64(),
        _ => v,
    }
}

/// An FP8 zero point must encode 0 (+0 or −0).
fn check_fp8_zero_point(zp: Option<&Tensor>) -> KResult<()> {
    if let Some(z) = zp
        && fp8::float_values_any(z, "zero point")?
            .iter()
            .any(|&v| v != 0.0)
    {
        return value_err!("a {} zero point must be 0", z.dtype());
    }
    Ok(())
}

/// Values as f64 (floats other than FP8, and integers).
fn values_f64(t: &Tensor, what: &str) -> KResult<Vec<f64>> {
    t.to_f64_vec()
        .map_err(|m| Fail::new(ErrorKind::DType, format!("{what}: {m}")))
}

/// The types QuantizeLinear produces, for messages.
const QUANTIZED: &str = "i8, u8, i16, u16, f8e4m3, f8e5m2, f8e4m3fnuz, f8e5m2fnuz, f8e8m0, f4e2m1";

/// `quantize_linear { axis, saturate, to }(x, y_scale[, y_zero_point])`.
pub(crate) fn quantize_linear(
    inputs: &[&Tensor],
    axis: i64,
    saturate: bool,
    to: DType,
    block_size: i64,
) -> KResult<Tensor> {
    let (x, scale, zp) = match inputs {
        [x, s] => (*x, *s, None),
        [x, s, z] => (*x, *s, Some(*z)),
        _ => return Fail::arity("2 or 3", inputs.len()),
    };
    let range = match to {
        DType::I8 => Some((f64::from(i8::MIN), f64::from(i8::MAX))),
        DType::U8 => Some((0.0, f64::from(u8::MAX))),
        DType::I16 => Some((f64::from(i16::MIN), f64::from(i16::MAX))),
        DType::U16 => Some((0.0, f64::from(u16::MAX))),
        d if d.is_fp8() || d.is_narrow_float() => None,
        other => {
            return attr_err!("to={other} is not a quantized type ({QUANTIZED})");
        }
    };
    if x.dtype().is_fp8() || !(x.dtype().is_float() || x.dtype() == DType::I32) {
        return dtype_err!(
            "x must be a float tensor other than FP8, or i32, got {}",
            x.dtype()
        );
    }
    if let Some(z) = zp
        && z.dtype() != to
    {
        return dtype_err!(
            "the zero point must have the output type {to}, got {}",
            z.dtype()
        );
    }
    let ch = channels(x, scale, zp, axis, block_size)?;
    let xs = values_f64(x, "x")?;
    let ss = values_f64(scale, "y_scale")?;
    let sd = scale.dtype();
    let quotient = |i: usize, v: f64| round_to(sd, v / ss[ch.of(i)]);
    let shape = x.shape().to_vec();
    match range {
        Some((lo, hi)) => {
            let zs = match zp {
                Some(z) => values_f64(z, "y_zero_point")?,
                None => vec![0.0; ss.len()],
            };
            let q: Vec<f64> = xs
                .iter()
                .enumerate()
                .map(|(i, &v)| {
                    let r = quotient(i, v).round_ties_even() + zs[ch.of(i)];
                    if r.is_nan() { lo } else { r.clamp(lo, hi) }
                })
                .collect();
            cast(&Tensor::from_f64(shape, &q), to, false)
        }
        None => {
            check_fp8_zero_point(zp)?;
            let q: Vec<f32> = xs
                .iter()
                .enumerate()
                .map(|(i, &v)| quotient(i, v) as f32)
                .collect();
            let codes = match (fp8::format_of(to), fp8::narrow_of(to)) {
                (Some(fmt), _) => fp8::encode(fmt, &q, saturate),
                // ONNX adds the (zero) zero point before the FP4 cast, so −0 becomes +0.
                (None, Some(fmt)) => q
                    .iter()
                    .map(|&v| fp8c_core::narrow::encode(fmt, v + 0.0, saturate))
                    .collect(),
                (None, None) => return attr_err!("to={to} is not a float quantized type"),
            };
            tensor(to, shape, codes)
        }
    }
}

/// `dequantize_linear { axis }(x, x_scale[, x_zero_point])`: output has the scale's type.
pub(crate) fn dequantize_linear(inputs: &[&Tensor], axis: i64, block_size: i64) -> KResult<Tensor> {
    let (x, scale, zp) = match inputs {
        [x, s] => (*x, *s, None),
        [x, s, z] => (*x, *s, Some(*z)),
        _ => return Fail::arity("2 or 3", inputs.len()),
    };
    let d = x.dtype();
    if !(matches!(
        d,
        DType::I8 | DType::U8 | DType::I16 | DType::U16 | DType::I32
    ) || d.is_fp8()
        || d.is_narrow_float())
    {
        return dtype_err!("x must be quantized ({QUANTIZED}, i32), got {d}");
    }
    if let Some(z) = zp
        && z.dtype() != x.dtype()
    {
        return dtype_err!(
            "the zero point must have x's type {}, got {}",
            x.dtype(),
            z.dtype()
        );
    }
    let ch = channels(x, scale, zp, axis, block_size)?;
    let ss = values_f64(scale, "x_scale")?;
    let (xs, zs): (Vec<f64>, Vec<f64>) = match d.is_fp8() || d.is_narrow_float() {
        true => {
            check_fp8_zero_point(zp)?;
            (
                fp8::float_values_any(x, "x")?
                    .into_iter()
                    .map(f64::from)
                    .collect(),
                vec![0.0; ss.len()],
            )
        }
        false => {
            let zs = match zp {
                Some(z) => values_f64(z, "x_zero_point")?,
                None => vec![0.0; ss.len()],
            };
            (values_f64(x, "x")?, zs)
        }
    };
    let y: Vec<f64> = xs
        .iter()
        .enumerate()
        .map(|(i, &v)| (v - zs[ch.of(i)]) * ss[ch.of(i)])
        .collect();
    cast(
        &Tensor::from_f64(x.shape().to_vec(), &y),
        scale.dtype(),
        false,
    )
}
