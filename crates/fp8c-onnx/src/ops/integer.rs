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
//! The precision policy keeps integer and f64 GEMMs in their own type (`Rule::OwnType`).

use super::{NodeCx, nn};
use crate::OnnxError;
use fp8c_ir::{DType, Op, Value};

/// `cast(v, to) − cast(zp, to)`. A 1-D zero point of more than one element gets
/// `trailing_ones` unit axes appended, so that one per row of A (`[M]` → `[M, 1]`) or one
/// per output channel of a conv weight (`[M]` → `[M, 1, k..]`) broadcasts along its axis 0.
fn shifted(
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
    let y = cx.add(quantize, &[x, scale, zp])?;
    Ok(vec![y, scale, zp])
}
