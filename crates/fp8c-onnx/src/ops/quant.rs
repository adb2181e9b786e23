//! ONNX QuantizeLinear / DequantizeLinear. The IR ops always take a zero point: an absent one
//! becomes a zero constant of the quantized type, shaped like the scale.

use super::{NodeCx, known_dims};
use crate::OnnxError;
use crate::tensor::dtype_from_onnx;
use fp8c_ir::{DType, Op, Tensor, Value};

/// Most elements of a zero point the importer makes.
const MAX_ZERO_POINT: u64 = 1 << 24;

/// `block_size` (opset 21): 0 for per-tensor / per-axis scales, > 0 for blocked ones.
fn block_size(cx: &NodeCx<'_>) -> Result<i64, OnnxError> {
    match cx.attr_int("block_size", 0)? {
        b if b >= 0 => Ok(b),
        b => Err(cx.err(format!("attribute `block_size` = {b} must be ≥ 0"))),
    }
}

/// A zero point of `dtype` shaped like `scale` (a scalar if the scale's shape is not static).
pub(super) fn zero_point(
    cx: &mut NodeCx<'_>,
    dtype: DType,
    scale: Value,
) -> Result<Value, OnnxError> {
    let sty = cx.ty(scale);
    let shape = known_dims(&sty.shape).unwrap_or_default();
    // A scale is a scalar or one value per channel: a huge one is a corrupt type, and the
    // zero point must not be allocated for it.
    if fp8c_ir::checked_numel(&shape).is_none_or(|n| n > MAX_ZERO_POINT) {
        return Err(cx.err(format!(
            "scale has type {sty}: too large to make a zero point for it"
        )));
    }
    let t = Tensor::zeros(dtype, shape).map_err(|e| cx.err(format!("zero point: {e}")))?;
    cx.constant("zero_point", t)
}

/// The quantized type: the zero point's, else `output_dtype` (opset 21), else uint8.
pub(super) fn quantize_linear(cx: &mut NodeCx<'_>) -> Result<Vec<Value>, OnnxError> {
    let block_size = block_size(cx)?;
    let axis = cx.attr_int("axis", 1)?;
    let saturate = cx.attr_bool("saturate", true)?;
    let (x, scale) = (cx.input(0)?, cx.input(1)?);
    let output_dtype = if cx.opset >= 21 {
        cx.attr_int("output_dtype", 0)?
    } else {
        0
    };
    let declared = match output_dtype {
        0 => None,
        code => Some(
            i32::try_from(code)
                .map_err(|_| format!("unknown element type code {code}"))
                .and_then(dtype_from_onnx)
                .map_err(|e| cx.err(format!("attribute `output_dtype`: {e}")))?,
        ),
    };
    let (to, zp) = match cx.opt_input(2) {
        Some(zp) => {
            let to = cx.ty(zp).dtype;
            if let Some(d) = declared.filter(|&d| d != to) {
                return Err(cx.err(format!(
                    "attribute `output_dtype` = {d} differs from the zero point's type {to}"
                )));
            }
            (to, zp)
        }
        None => {
            let to = declared.unwrap_or(DType::U8);
            (to, zero_point(cx, to, scale)?)
        }
    };
    Ok(vec![cx.add(
        Op::QuantizeLinear {
            axis,
            saturate,
            to,
            block_size,
        },
        &[x, scale, zp],
    )?])
}

/// A dtype attribute that exists from opset `since`; 0 or absent is `None`.
fn dtype_attr(cx: &NodeCx<'_>, name: &str, since: i64) -> Result<Option<DType>, OnnxError> {
    let code = if cx.opset >= since {
        cx.attr_int(name, 0)?
    } else {
        0
    };
    if code == 0 {
        return Ok(None);
    }
    i32::try_from(code)
        .map_err(|_| format!("unknown element type code {code}"))
        .and_then(dtype_from_onnx)
        .map(Some)
        .map_err(|e| cx.err(format!("attribute `{name}`: {e}")))
}

/// The output has the scale's type, or `output_dtype` (opset 23) through a Cast.
pub(super) fn dequantize_linear(cx: &mut NodeCx<'_>) -> Result<Vec<Value>, OnnxError> {
    let block_size = block_size(cx)?;
    let axis = cx.attr_int("axis", 1)?;
    let (x, scale) = (cx.input(0)?, cx.input(1)?);
    let cast_to = dtype_attr(cx, "output_dtype", 23)?.filter(|&d| d != cx.ty(scale).dtype);
    let zp = match cx.opt_input(2) {
        Some(zp) => zp,
        None => {
            let dtype = cx.ty(x).dtype;
            zero_point(cx, dtype, scale)?
        }
    };
    match cast_to {
        None => {
            Ok(vec![cx.add(
                Op::DequantizeLinear { axis, block_size },
                &[x, scale, zp],
            )?])
        }
        Some(to) => {
            let y = cx.add_helper(
                "dq",
                Op::DequantizeLinear { axis, block_size },
                &[x, scale, zp],
            )?;
            Ok(vec![cx.add(Op::Cast { to, saturate: true }, &[y])?])
        }
    }
}
