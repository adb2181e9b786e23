//! ONNX's integer-arithmetic ops, as emitted by onnxruntime's dynamic quantization:
//! MatMulInteger, ConvInteger and DynamicQuantizeLinear, each imported as the IR ops that
//! compute the same values exactly.
//!
//! - MatMulInteger: `(A − a_zp) · (B − b_zp)` as an i32 `matmul` of the zero-point-shifted
//!   operands (the evaluator accumulates integers in wrapping i64 and wraps to i32 once).
//! - ConvInteger: the same shift, then an f64 `conv` cast back to i32: every product of two
//!   shifted 8-bit values and every sum of fewer than 2^37 of them is an exact f64 integer,
//!   so this is the integer convolution without an integer conv kernel.
//! - DynamicQuantizeLinear: ONNX's definition, `scale = (max(0, max x) − min(0, min x)) / 255`,
//!   `zp = QuantizeLinear(−min(0, min x), scale)` (round half to even, saturated to uint8) and
//!   `y = QuantizeLinear(x, scale, zp)`.
//!
//! - QLinearMatMul and QLinearConv (onnxruntime's static quantization, QOperator format): the
//!   same exact integer product (plus QLinearConv's i32 bias), converted to f32, times
//!   `(x_scale · w_scale) / y_scale` computed in f32 in that order, then rounded half to even,
//!   offset by y's zero point and saturated: onnxruntime's requantization step by step.
//!
//! The precision policy keeps integer and f64 GEMMs in their own type (`Rule::OwnType`).

use super::{NodeCx, nn};
use crate::OnnxError;
use fp8c_ir::{DType, Op, Value};

/// `cast(v, to) − cast(zp, to)`. A 1-D zero point of more than one element gets
/// `trailing_ones` unit axes appended, so that one per row of A (`[M]` → `[M, 1]`) or one
/// per output channel of a conv weight (`[M]` → `[M, 1, k..]`) broadcasts along its axis 0.
pub(super) fn shifted(
    cx: &mut NodeCx<'_>,
    which: &str,
    v: Value,
    zp: Option<Value>,
    to: DType,
    trailing_ones: usize,
) -> Result<Value, OnnxError> {
    let vty = cx.ty(v).dtype;
    if !matches!(vty, DType::U8 | DType::I8) {
        return Err(cx.err(format!(
            "input {which} has type {vty}; {} takes uint8 or int8",
            cx.op_type
        )));
    }
    let cast = |to| Op::Cast {
        to,
        saturate: false,
    };
    let c = cx.add_helper(&format!("{which}.{}", to.name()), cast(to), &[v])?;
    let Some(zp) = zp else {
        return Ok(c);
    };
    let zty = cx.ty(zp).clone();
    if zty.dtype != vty {
        return Err(cx.err(format!(
            "the zero point of {which} has type {}, {which} has {vty}",
            zty.dtype
        )));
    }
    let mut z = cx.add_helper(
        &format!("{which}_zero_point.{}", to.name()),
        cast(to),
        &[zp],
    )?;
    let per_element = zty.rank() == 1 && zty.shape[0].known() != Some(1);
    if per_element && trailing_ones > 0 {
        let axes = (1..=trailing_ones as i64).collect();
        z = cx.add_helper(
            &format!("{which}_zero_point.column"),
            Op::Unsqueeze { axes },
            &[z],
        )?;
    }
    cx.add_helper(&format!("{which}.shifted"), Op::Sub, &[c, z])
}

/// MatMulInteger: inputs A, B and the optional zero points; output i32.
pub(super) fn matmul_integer(cx: &mut NodeCx<'_>) -> Result<Vec<Value>, OnnxError> {
    let (a, b) = (cx.input(0)?, cx.input(1)?);
    let a_rows = usize::from(cx.ty(a).rank() >= 2);
    let a = shifted(cx, "A", a, cx.opt_input(2), DType::I32, a_rows)?;
    let b = shifted(cx, "B", b, cx.opt_input(3), DType::I32, 0)?;
    Ok(vec![cx.add(Op::MatMul, &[a, b])?])
}

/// ConvInteger: inputs x, w and the optional zero points (x's per tensor, w's per tensor or
/// per output channel); the conv attributes as Conv's; output i32.
pub(super) fn conv_integer(cx: &mut NodeCx<'_>) -> Result<Vec<Value>, OnnxError> {
    let (x, w) = (cx.input(0)?, cx.input(1)?);
    let trailing = cx.ty(w).rank().saturating_sub(1);
    let xs = shifted(cx, "x", x, cx.opt_input(2), DType::F64, 0)?;
    let ws = shifted(cx, "w", w, cx.opt_input(3), DType::F64, trailing)?;
    let y = nn::conv_of(cx, xs, ws, None)?;
    let name = format!("{}.i32", cx.name);
    Ok(vec![
        cx.add_multi(
            &name,
            Op::Cast {
                to: DType::I32,
                saturate: false,
            },
            &[y],
        )?[0],
    ])
}

/// QLinearMatMul: inputs a, a_scale, a_zero_point, b, b_scale, b_zero_point (per tensor or
/// per column of b), y_scale, y_zero_point; output of y_zero_point's type.
pub(super) fn qlinear_matmul(cx: &mut NodeCx<'_>) -> Result<Vec<Value>, OnnxError> {
    let (a, b) = (cx.input(0)?, cx.input(3)?);
    let a_rows = usize::from(cx.ty(a).rank() >= 2);
    let a = shifted(cx, "a", a, Some(cx.input(2)?), DType::I32, a_rows)?;
    let b = shifted(cx, "b", b, Some(cx.input(5)?), DType::I32, 0)?;
    let acc = cx.add_helper("i32", Op::MatMul, &[a, b])?;
    let m = multiplier(cx, cx.input(1)?, cx.input(4)?, cx.input(6)?, 0)?;
    requantize(cx, acc, m, cx.input(7)?)
}

/// QLinearConv: inputs x, x_scale, x_zero_point, w, w_scale, w_zero_point (per tensor or per
/// output channel), y_scale, y_zero_point and an optional i32 bias B; the conv attributes as
/// Conv's; output of y_zero_point's type.
pub(super) fn qlinear_conv(cx: &mut NodeCx<'_>) -> Result<Vec<Value>, OnnxError> {
    let (x, w) = (cx.input(0)?, cx.input(3)?);
    let trailing = cx.ty(w).rank().saturating_sub(1);
    let xs = shifted(cx, "x", x, Some(cx.input(2)?), DType::F64, 0)?;
    let ws = shifted(cx, "w", w, Some(cx.input(5)?), DType::F64, trailing)?;
    let mut acc = nn::conv_of(cx, xs, ws, None)?;
    // Per-channel values broadcast over the output's spatial axes: [M] → [M, 1, ..].
    let spatial = trailing.saturating_sub(1);
    if let Some(bias) = cx.opt_input(8) {
        if cx.ty(bias).dtype != DType::I32 || cx.ty(bias).rank() != 1 {
            return Err(cx.err(format!("the bias B must be int32 [M], got {}", cx.ty(bias))));
        }
        let f = Op::Cast {
            to: DType::F64,
            saturate: false,
        };
        let bias = cx.add_helper("bias.f64", f, &[bias])?;
        let axes = (1..=spatial as i64).collect();
        let bias = cx.add_helper("bias.column", Op::Unsqueeze { axes }, &[bias])?;
        acc = cx.add_helper("biased", Op::Add, &[acc, bias])?;
    }
    let m = multiplier(cx, cx.input(1)?, cx.input(4)?, cx.input(6)?, spatial)?;
    requantize(cx, acc, m, cx.input(7)?)
}

/// `(x_scale · w_scale) / y_scale` in f32, the weight's scale per tensor or (1-D) per output
/// channel, given `trailing_ones` unit axes to broadcast along a conv output's channel axis.
fn multiplier(
    cx: &mut NodeCx<'_>,
    x_scale: Value,
    w_scale: Value,
    y_scale: Value,
    trailing_ones: usize,
) -> Result<Value, OnnxError> {
    // Opset 21's f16/bf16 scales are widened to f32 (exactly) first.
    let mut f32_scale = |what: &str, v: Value| -> Result<Value, OnnxError> {
        match cx.ty(v).dtype {
            DType::F32 => Ok(v),
            DType::F16 | DType::BF16 => {
                let f = Op::Cast {
                    to: DType::F32,
                    saturate: false,
                };
                cx.add_helper(&format!("{what}_scale.f32"), f, &[v])
            }
            _ => Err(cx.err(format!(
                "the scale of {what} must be float, got {}",
                cx.ty(v)
            ))),
        }
    };
    let x_scale = f32_scale("x", x_scale)?;
    let w_scale = f32_scale("w", w_scale)?;
    let y_scale = f32_scale("y", y_scale)?;
    let p = cx.add_helper("scale_product", Op::Mul, &[x_scale, w_scale])?;
    let mut m = cx.add_helper("multiplier", Op::Div, &[p, y_scale])?;
    let wty = cx.ty(w_scale).clone();
    if wty.rank() == 1 && wty.shape[0].known() != Some(1) && trailing_ones > 0 {
        let axes = (1..=trailing_ones as i64).collect();
        m = cx.add_helper("multiplier.column", Op::Unsqueeze { axes }, &[m])?;
    }
    Ok(m)
}

/// The exact integer accumulator `acc` (i32 or f64) to y's type: f32(acc) · m, rounded half
/// to even, plus y's zero point, saturated.
pub(super) fn requantize(
    cx: &mut NodeCx<'_>,
    acc: Value,
    m: Value,
    y_zero_point: Value,
) -> Result<Vec<Value>, OnnxError> {
    let f = Op::Cast {
        to: DType::F32,
        saturate: false,
    };
    let acc = cx.add_helper("acc.f32", f, &[acc])?;
    let scaled = cx.add_helper("scaled", Op::Mul, &[acc, m])?;
    requantize_f32(cx, scaled, y_zero_point)
}

/// The f32 `scaled` rounded half to even, plus `y_zero_point` (uint8 or int8), saturated:
/// the node's own output.
pub(super) fn requantize_f32(
    cx: &mut NodeCx<'_>,
    scaled: Value,
    y_zero_point: Value,
) -> Result<Vec<Value>, OnnxError> {
    let to = cx.ty(y_zero_point).dtype;
    if !matches!(to, DType::U8 | DType::I8) {
        return Err(cx.err(format!(
            "y_zero_point has type {to}; {} outputs uint8 or int8",
            cx.op_type
        )));
    }
    let scalar = cx.constant("scalar_shape", fp8c_ir::Tensor::from_i64(vec![0], &[]))?;
    let reshape = Op::Reshape { allowzero: false };
    let zp = cx.add_helper("y_zero_point.scalar", reshape, &[y_zero_point, scalar])?;
    let one = cx.scalar("unit_scale", DType::F32, 1.0)?;
    let quantize = Op::QuantizeLinear {
        axis: 1,
        saturate: true,
        to,
        block_size: 0,
    };
    Ok(vec![cx.add(quantize, &[scaled, one, zp])?])
}

/// DynamicQuantizeLinear: input x (f32); outputs y (uint8), y_scale (f32[]) and
/// y_zero_point (uint8[]).
pub(super) fn dynamic_quantize_linear(cx: &mut NodeCx<'_>) -> Result<Vec<Value>, OnnxError> {
    let x = cx.input(0)?;
    let xty = cx.ty(x).dtype;
    if xty != DType::F32 {
        return Err(cx.err(format!(
            "input x has type {xty}; DynamicQuantizeLinear takes float32"
        )));
    }
    let (y, scale, zp) = dynamic_quantize_of(cx, x, true)?;
    Ok(vec![y, scale, zp])
}

/// DynamicQuantizeLinear of the f32 `x`: (y, y_scale, y_zero_point), y the node's own IR
/// node when `last`.
pub(super) fn dynamic_quantize_of(
    cx: &mut NodeCx<'_>,
    x: Value,
    last: bool,
) -> Result<(Value, Value, Value), OnnxError> {
    let (axes, keepdims) = (None, false);
    let lo = cx.add_helper(
        "min",
        Op::ReduceMin {
            axes: axes.clone(),
            keepdims,
        },
        &[x],
    )?;
    let hi = cx.add_helper("max", Op::ReduceMax { axes, keepdims }, &[x])?;
    let zero = cx.scalar("zero", DType::F32, 0.0)?;
    let lo = cx.add_helper("min0", Op::Min, &[lo, zero])?;
    let hi = cx.add_helper("max0", Op::Max, &[hi, zero])?;
    let range = cx.add_helper("range", Op::Sub, &[hi, lo])?;
    let levels = cx.scalar("levels", DType::F32, 255.0)?;
    let scale = cx.add_helper("scale", Op::Div, &[range, levels])?;
    let neg_lo = cx.add_helper("neg_min", Op::Neg, &[lo])?;
    let zp0 = cx.scalar("zp0", DType::U8, 0.0)?;
    let quantize = Op::QuantizeLinear {
        axis: 1,
        saturate: true,
        to: DType::U8,
        block_size: 0,
    };
    let zp = cx.add_helper("zero_point", quantize.clone(), &[neg_lo, scale, zp0])?;
    let y = cx.add_step(last, "quantized", quantize, &[x, scale, zp])?;
    Ok((y, scale, zp))
}
