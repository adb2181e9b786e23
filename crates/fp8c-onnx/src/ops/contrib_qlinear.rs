//! The com.microsoft QOperator ops onnxruntime's static quantizer writes around QLinearConv
//! and QLinearMatMul (`quantize_static(..., quant_format=QOperator)`): QGemm, QLinearAdd,
//! QLinearMul, QLinearSigmoid, QLinearLeakyRelu, QLinearAveragePool,
//! QLinearGlobalAveragePool, QLinearConcat and QLinearSoftmax (onnxruntime's own formula).
//!
//! - QGemm and QLinearGlobalAveragePool are exact integer sums (plus QGemm's i32 C), then
//!   onnxruntime's requantization: the f32 sum times an f32 multiplier (QGemm:
//!   `alpha · a_scale · b_scale / y_scale`; the pool: `x_scale / (y_scale · count)`), rounded
//!   half to even, offset and saturated. QGemm without y's scale and zero point gives f32.
//! - The others are their definition: dequantize each input, apply the float op, quantize.
//!   onnxruntime's AVX2 kernels compute the same formulas with fused multiply-adds or
//!   lookup tables built with its own sigmoid, so an element can land one quantum away from
//!   theirs where the exact value is within an ulp of a rounding boundary.

use super::{NodeCx, integer, nn, quant};
use crate::OnnxError;
use fp8c_ir::{DType, Op, Value};

/// `x` dequantized to f32 with `scale` and the optional `zero_point`.
fn dequantize(
    cx: &mut NodeCx<'_>,
    which: &str,
    x: Value,
    scale: Value,
    zero_point: Option<Value>,
) -> Result<Value, OnnxError> {
    let dtype = cx.ty(x).dtype;
    if !matches!(dtype, DType::U8 | DType::I8) {
        return Err(cx.err(format!(
            "input {which} must be uint8 or int8, got {}",
            cx.ty(x)
        )));
    }
    let zp = match zero_point {
        Some(z) => z,
        None => quant::zero_point(cx, dtype, scale)?,
    };
    let dq = Op::DequantizeLinear {
        axis: 1,
        block_size: 0,
    };
    cx.add_helper(&format!("{which}.dq"), dq, &[x, scale, zp])
}

/// `y` quantized with `scale` and the optional `zero_point` (absent: 0 of `dtype`), as the
/// node's own output.
fn quantize(
    cx: &mut NodeCx<'_>,
    y: Value,
    scale: Value,
    zero_point: Option<Value>,
    dtype: DType,
) -> Result<Vec<Value>, OnnxError> {
    let zp = match zero_point {
        Some(z) => z,
        None => quant::zero_point(cx, dtype, scale)?,
    };
    let to = cx.ty(zp).dtype;
    let q = Op::QuantizeLinear {
        axis: 1,
        saturate: true,
        to,
        block_size: 0,
    };
    Ok(vec![cx.add(q, &[y, scale, zp])?])
}

/// QLinearAdd / QLinearMul: A, A_scale, A_zero_point, B, B_scale, B_zero_point, C_scale,
/// C_zero_point (zero points optional), broadcasting as Add/Mul.
pub(super) fn binary(cx: &mut NodeCx<'_>, op: Op) -> Result<Vec<Value>, OnnxError> {
    let (a, b) = (cx.input(0)?, cx.input(3)?);
    let da = dequantize(cx, "A", a, cx.input(1)?, cx.opt_input(2))?;
    let db = dequantize(cx, "B", b, cx.input(4)?, cx.opt_input(5))?;
    let c = cx.add_helper("float", op, &[da, db])?;
    let dtype = cx.ty(a).dtype;
    quantize(cx, c, cx.input(6)?, cx.opt_input(7), dtype)
}

/// QLinearSigmoid / QLinearLeakyRelu: X, X_scale, X_zero_point, Y_scale, Y_zero_point.
pub(super) fn unary(cx: &mut NodeCx<'_>, op: Op) -> Result<Vec<Value>, OnnxError> {
    let x = cx.input(0)?;
    let dx = dequantize(cx, "X", x, cx.input(1)?, cx.opt_input(2))?;
    let y = cx.add_helper("float", op, &[dx])?;
    let dtype = cx.ty(x).dtype;
    quantize(cx, y, cx.input(3)?, cx.opt_input(4), dtype)
}

/// QLinearLeakyRelu's `alpha` (default 0.01).
pub(super) fn leaky_relu(cx: &mut NodeCx<'_>) -> Result<Vec<Value>, OnnxError> {
    let alpha = cx.attr_float("alpha", 0.01)?;
    unary(cx, Op::LeakyRelu { alpha })
}

/// Refuses `channels_last` = 1 where the op does not handle it.
fn channels_first(cx: &NodeCx<'_>) -> Result<(), OnnxError> {
    if cx.attr_bool("channels_last", false)? {
        return Err(cx.err("channels_last = 1 (NHWC) is not supported"));
    }
    Ok(())
}

/// QLinearAveragePool: AveragePool's attributes; X, x_scale, x_zero_point, y_scale,
/// y_zero_point.
pub(super) fn average_pool(cx: &mut NodeCx<'_>) -> Result<Vec<Value>, OnnxError> {
    channels_first(cx)?;
    let op = nn::average_pool_op(cx)?;
    unary(cx, op)
}

/// QLinearGlobalAveragePool: the mean over the spatial axes (`channels_last`: axes 1..r−1)
/// as onnxruntime computes it: the exact integer sum of `x − x_zero_point`, times
/// `x_scale / (y_scale · count)` in f32, requantized.
pub(super) fn global_average_pool(cx: &mut NodeCx<'_>) -> Result<Vec<Value>, OnnxError> {
    let channels_last = cx.attr_bool("channels_last", false)?;
    let x = cx.input(0)?;
    let ty = cx.ty(x).clone();
    let rank = ty.rank();
    if rank < 3 {
        return Err(cx.err(format!("X must have rank 3 or more, got {ty}")));
    }
    let axes: Vec<i64> = if channels_last {
        (1..rank as i64 - 1).collect()
    } else {
        (2..rank as i64).collect()
    };
    let count = axes
        .iter()
        .map(|&a| ty.shape[a as usize].known())
        .try_fold(1u64, |n, d| d.map(|d| n * d))
        .ok_or_else(|| cx.err(format!("X {ty} needs known spatial dims")))?;
    let shifted = integer::shifted(cx, "x", x, cx.opt_input(2), DType::F64, 0)?;
    let sum = Op::ReduceSum {
        axes: Some(axes),
        keepdims: true,
    };
    let acc = cx.add_helper("sum", sum, &[shifted])?;
    let (xs, ys) = (cx.input(1)?, cx.input(3)?);
    let n = cx.scalar("count", DType::F32, count as f64)?;
    let denominator = cx.add_helper("y_scale_count", Op::Mul, &[ys, n])?;
    let m = cx.add_helper("multiplier", Op::Div, &[xs, denominator])?;
    let zp = match cx.opt_input(4) {
        Some(z) => z,
        None => quant::zero_point(cx, ty.dtype, ys)?,
    };
    integer::requantize(cx, acc, m, zp)
}

/// QLinearConcat: Y_scale, Y_zero_point, then (X, X_scale, X_zero_point) per input; `axis`.
pub(super) fn concat(cx: &mut NodeCx<'_>) -> Result<Vec<Value>, OnnxError> {
    let axis = cx
        .attr_int_opt("axis")?
        .ok_or_else(|| cx.err("attribute `axis` is required"))?;
    let given = cx.num_inputs();
    if given < 5 || !(given - 2).is_multiple_of(3) {
        return Err(cx.err(format!(
            "expects Y_scale, Y_zero_point and (X, X_scale, X_zero_point) triples, got {given} inputs"
        )));
    }
    let mut parts = Vec::new();
    let mut dtype = None;
    for (i, at) in (2..given).step_by(3).enumerate() {
        let x = cx.input(at)?;
        dtype.get_or_insert(cx.ty(x).dtype);
        let d = dequantize(
            cx,
            &format!("X{i}"),
            x,
            cx.input(at + 1)?,
            cx.opt_input(at + 2),
        )?;
        parts.push(d);
    }
    let joined = cx.add_helper("float", Op::Concat { axis }, &parts)?;
    let dtype = dtype.unwrap_or(DType::U8);
    quantize(cx, joined, cx.input(0)?, cx.opt_input(1), dtype)
}

/// QGemm: A, a_scale, a_zero_point, B, b_scale, b_zero_point (per tensor or per column), C
/// (optional i32 bias), y_scale, y_zero_point (both optional: f32 output); `alpha`, `transA`,
/// `transB`.
pub(super) fn qgemm(cx: &mut NodeCx<'_>) -> Result<Vec<Value>, OnnxError> {
    let alpha = cx.attr_float("alpha", 1.0)?;
    let trans_a = cx.attr_bool("transA", false)?;
    let trans_b = cx.attr_bool("transB", false)?;
    let (a, b) = (cx.input(0)?, cx.input(3)?);
    for (what, v) in [("A", a), ("B", b)] {
        if cx.ty(v).rank() != 2 {
            return Err(cx.err(format!("input {what} must be 2-D, got {}", cx.ty(v))));
        }
    }
    let mut a = integer::shifted(cx, "A", a, Some(cx.input(2)?), DType::I32, 0)?;
    if trans_a {
        a = cx.add_helper("A.t", Op::Transpose { perm: vec![1, 0] }, &[a])?;
    }
    // A per-column zero point of B belongs to B's rows when B is transposed.
    let b = if trans_b {
        let s = integer::shifted(cx, "B", b, Some(cx.input(5)?), DType::I32, 1)?;
        cx.add_helper("B.t", Op::Transpose { perm: vec![1, 0] }, &[s])?
    } else {
        integer::shifted(cx, "B", b, Some(cx.input(5)?), DType::I32, 0)?
    };
    let mut acc = cx.add_helper("i32", Op::MatMul, &[a, b])?;
    if let Some(c) = cx.opt_input(6) {
        if cx.ty(c).dtype != DType::I32 {
            return Err(cx.err(format!("the bias C must be int32, got {}", cx.ty(c))));
        }
        acc = cx.add_helper("biased", Op::Add, &[acc, c])?;
    }
    let alpha = cx.scalar("alpha", DType::F32, f64::from(alpha))?;
    let sa = cx.add_helper("alpha_a_scale", Op::Mul, &[alpha, cx.input(1)?])?;
    let mut m = cx.add_helper("scale", Op::Mul, &[sa, cx.input(4)?])?;
    match (cx.opt_input(7), cx.opt_input(8)) {
        (Some(ys), Some(zp)) => {
            m = cx.add_helper("multiplier", Op::Div, &[m, ys])?;
            integer::requantize(cx, acc, m, zp)
        }
        (None, None) => {
            let f = Op::Cast {
                to: DType::F32,
                saturate: false,
            };
            let accf = cx.add_helper("acc.f32", f, &[acc])?;
            Ok(vec![cx.add(Op::Mul, &[accf, m])?])
        }
        _ => Err(cx.err("y_scale and y_zero_point must be given together")),
    }
}

/// QLinearSoftmax: X, X_scale, x_zero_point (unused: softmax ignores a shift), y_scale,
/// y_zero_point; `axis`, and `opset`, the Softmax it replaced (below 13: over the dims from
/// `axis` on, flattened; from 13: over `axis`).
///
/// Computed as onnxruntime's kernel does, so its bytes come out: `e = f32(exp((x − max(x) +
/// s) · x_scale))` in f64, where `s · x_scale = max(0, ln(f32::MAX / D) − 5)` keeps the sum
/// of the D terms finite; `y = round_half_even(e · ⌊1 / y_scale⌋ / Σe) + y_zero_point` in
/// f32, saturated. A NaN ratio (an infinite or zero X_scale, which onnxruntime's calibration
/// writes for attention scores masked with −inf) gives what onnxruntime's x86 build gives:
/// y_zero_point for uint8; for int8 the saturated `i32::MIN + y_zero_point`, wrapped as i32
/// (127 when y_zero_point is negative, else −128).
pub(super) fn softmax(cx: &mut NodeCx<'_>) -> Result<Vec<Value>, OnnxError> {
    let opset = cx
        .attr_int_opt("opset")?
        .ok_or_else(|| cx.err("attribute `opset` is required"))?;
    let x = cx.input(0)?;
    let ty = cx.ty(x).clone();
    if !matches!(ty.dtype, DType::U8 | DType::I8) {
        return Err(cx.err(format!("input X must be uint8 or int8, got {ty}")));
    }
    let rank = ty.rank();
    let axis = cx.attr_int("axis", if opset < 13 { 1 } else { -1 })?;
    let axis = super::normalize_axis(axis, rank)
        .ok_or_else(|| cx.err(format!("axis {axis} is out of range for X {ty}")))?;
    let cast = |to| Op::Cast {
        to,
        saturate: false,
    };
    let flat = opset < 13;
    let (xs, red) = if flat {
        let f = Op::Flatten { axis: axis as i64 };
        (cx.add_helper("X.2d", f, &[x])?, 1)
    } else {
        (x, axis as i64)
    };
    let axes = Some(vec![red]);
    let xf = cx.add_helper("X.f64", cast(DType::F64), &[xs])?;
    let max = Op::ReduceMax {
        axes: axes.clone(),
        keepdims: true,
    };
    let xmax = cx.add_helper("max", max, &[xf])?;
    let d = cx.add_helper("shifted", Op::Sub, &[xf, xmax])?;
    // D, the length of each softmax (from the run's shape: it may be symbolic).
    let len = cx.add_helper(
        "len",
        Op::Shape {
            start: red,
            end: Some(red + 1),
        },
        &[xs],
    )?;
    let len = cx.add_helper("len.f32", cast(DType::F32), &[len])?;
    let fmax = cx.scalar("f32_max", DType::F32, f64::from(f32::MAX))?;
    let room = cx.add_helper("room", Op::Div, &[fmax, len])?;
    let room = cx.add_helper("room.f64", cast(DType::F64), &[room])?;
    let room = cx.add_helper("room.ln", Op::Log, &[room])?;
    let reserve = cx.scalar("reserve", DType::F64, 5.0)?;
    let room = cx.add_helper("room.reserved", Op::Sub, &[room, reserve])?;
    let zero = cx.scalar("zero", DType::F64, 0.0)?;
    let room = cx.add_helper("room.nonneg", Op::Max, &[room, zero])?;
    let x_scale = cx.add_helper("X_scale.f64", cast(DType::F64), &[cx.input(1)?])?;
    let shift = cx.add_helper("bit_shift", Op::Div, &[room, x_scale])?;
    let t = cx.add_helper("exponent.biased", Op::Add, &[d, shift])?;
    let t = cx.add_helper("exponent", Op::Mul, &[t, x_scale])?;
    let e = cx.add_helper("exp.f64", Op::Exp, &[t])?;
    let e = cx.add_helper("exp", cast(DType::F32), &[e])?;
    let sum = Op::ReduceSum {
        axes,
        keepdims: true,
    };
    let total = cx.add_helper("sum", sum, &[e])?;
    let ys = cx.input(3)?;
    let one = cx.scalar("one", DType::F32, 1.0)?;
    let inv = cx.add_helper("y_scale.inv", Op::Div, &[one, ys])?;
    let inv = cx.add_helper("y_scale.inv.floor", Op::Floor, &[inv])?;
    let num = cx.add_helper("scaled", Op::Mul, &[e, inv])?;
    let mut p = cx.add_helper("ratio", Op::Div, &[num, total])?;
    if flat {
        let shape = cx.add_helper(
            "X.shape",
            Op::Shape {
                start: 0,
                end: None,
            },
            &[x],
        )?;
        p = cx.add_helper("ratio.nd", Op::Reshape { allowzero: false }, &[p, shape])?;
    }
    let zp = match cx.opt_input(4) {
        Some(z) => z,
        None => quant::zero_point(cx, ty.dtype, ys)?,
    };
    let y = integer::requantize_f32(cx, p, zp)?;
    if ty.dtype == DType::U8 {
        // Already y_zero_point: quantizing NaN gives 0 before the zero point.
        return Ok(y);
    }
    let nan = cx.add_helper("ratio.nan", Op::IsNaN, &[p])?;
    let zero = cx.scalar("zp.zero", DType::I8, 0.0)?;
    let negative = cx.add_helper("zp.negative", Op::Less, &[zp, zero])?;
    let hi = cx.scalar("i8.max", DType::I8, 127.0)?;
    let lo = cx.scalar("i8.min", DType::I8, -128.0)?;
    let wrapped = cx.add_helper("nan.code", Op::Where, &[negative, hi, lo])?;
    Ok(vec![cx.add(Op::Where, &[nan, wrapped, y[0]])?])
}
