//! Elementwise math, casts, matrix products.

use super::NodeCx;
use crate::OnnxError;
use crate::tensor::dtype_from_onnx;
use fp8c_ir::{DType, E8m0Round, Op, Value};

/// One input, one IR op.
pub(super) fn unary(cx: &mut NodeCx<'_>, op: Op) -> Result<Vec<Value>, OnnxError> {
    let x = cx.input(0)?;
    Ok(vec![cx.add(op, &[x])?])
}

/// Two inputs, one IR op. Before opset 7, `broadcast` = 1 with `axis` aligns B's dims with
/// A's from `axis` on: B gets trailing 1s so that numpy's broadcasting does the same.
pub(super) fn binary(cx: &mut NodeCx<'_>, op: Op) -> Result<Vec<Value>, OnnxError> {
    let (a, mut b) = (cx.input(0)?, cx.input(1)?);
    let legacy_axis = if cx.opset < 7 && cx.attr_bool("broadcast", false)? {
        cx.attr_int_opt("axis")?
    } else {
        None
    };
    if let Some(axis) = legacy_axis {
        let (ra, rb) = (cx.ty(a).rank(), cx.ty(b).rank());
        let start = super::normalize_axis(axis, ra)
            .filter(|s| s + rb <= ra)
            .ok_or_else(|| {
                cx.err(format!(
                    "attribute `axis` = {axis}: B of rank {rb} does not fit A of rank {ra} there"
                ))
            })?;
        let trailing = (rb..ra - start).map(|d| d as i64).collect::<Vec<_>>();
        if !trailing.is_empty() {
            b = cx.add_helper("legacy_broadcast", Op::Unsqueeze { axes: trailing }, &[b])?;
        }
    }
    Ok(vec![cx.add(op, &[a, b])?])
}

/// Every input in order, one IR op.
pub(super) fn plain(cx: &mut NodeCx<'_>, op: Op) -> Result<Vec<Value>, OnnxError> {
    let inputs = cx.all_inputs()?;
    Ok(vec![cx.add(op, &inputs)?])
}

/// Variadic Max/Min/Sum: a left fold of the binary op (one input: identity).
pub(super) fn variadic(cx: &mut NodeCx<'_>, op: Op) -> Result<Vec<Value>, OnnxError> {
    Ok(vec![fold(cx, op)?])
}

fn fold(cx: &mut NodeCx<'_>, op: Op) -> Result<Value, OnnxError> {
    let inputs = cx.all_inputs()?;
    let [first, rest @ ..] = inputs.as_slice() else {
        return Err(cx.err("needs at least one input"));
    };
    let Some((last, middle)) = rest.split_last() else {
        return cx.add(Op::Identity, &[*first]);
    };
    let mut acc = *first;
    for (i, v) in middle.iter().enumerate() {
        acc = cx.add_helper(&i.to_string(), op.clone(), &[acc, *v])?;
    }
    cx.add(op, &[acc, *last])
}

/// Mean = Sum / n.
pub(super) fn mean(cx: &mut NodeCx<'_>) -> Result<Vec<Value>, OnnxError> {
    let inputs = cx.all_inputs()?;
    let n = inputs.len();
    if n == 1 {
        return Ok(vec![cx.add(Op::Identity, &inputs)?]);
    }
    let mut acc = inputs[0];
    for (i, v) in inputs[1..].iter().enumerate() {
        acc = cx.add_helper(&format!("sum{i}"), Op::Add, &[acc, *v])?;
    }
    let dtype = cx.ty(acc).dtype;
    let count = cx.scalar("count", dtype, n as f64)?;
    Ok(vec![cx.add(Op::Div, &[acc, count])?])
}

/// Sign. Floats are the IR's `sign`; ONNX Sign takes integers too (torch.sign of int64
/// relative positions, as DeBERTa's bucketing does), computed exactly from comparisons:
/// `cast(x > 0) − cast(x < 0)`, just `cast(x > 0)` for unsigned types.
pub(super) fn sign(cx: &mut NodeCx<'_>) -> Result<Vec<Value>, OnnxError> {
    let x = cx.input(0)?;
    let dtype = cx.ty(x).dtype;
    if !dtype.is_int() {
        return unary(cx, Op::Sign);
    }
    let to_int = Op::Cast {
        to: dtype,
        saturate: true,
    };
    let zero = cx.scalar("zero", dtype, 0.0)?;
    let above = cx.add_helper("positive", Op::Greater, &[x, zero])?;
    let unsigned = matches!(dtype, DType::U8 | DType::U16 | DType::U32 | DType::U64);
    if unsigned {
        return Ok(vec![cx.add(to_int, &[above])?]);
    }
    let below = cx.add_helper("negative", Op::Less, &[x, zero])?;
    let up = cx.add_helper("plus_one", to_int.clone(), &[above])?;
    let down = cx.add_helper("minus_one", to_int, &[below])?;
    Ok(vec![cx.add(Op::Sub, &[up, down])?])
}

pub(super) fn modulo(cx: &mut NodeCx<'_>) -> Result<Vec<Value>, OnnxError> {
    let fmod = cx.attr_bool("fmod", false)?;
    binary(cx, Op::Mod { fmod })
}

pub(super) fn is_inf(cx: &mut NodeCx<'_>) -> Result<Vec<Value>, OnnxError> {
    let detect_negative = cx.attr_bool("detect_negative", true)?;
    let detect_positive = cx.attr_bool("detect_positive", true)?;
    unary(
        cx,
        Op::IsInf {
            detect_negative,
            detect_positive,
        },
    )
}

/// Clip: bounds are inputs from opset 11, `min`/`max` attributes before. Absent bounds become
/// the type's extremes (infinities for floats), so the IR op always has 3 inputs.
pub(super) fn clip(cx: &mut NodeCx<'_>) -> Result<Vec<Value>, OnnxError> {
    let x = cx.input(0)?;
    let dtype = cx.ty(x).dtype;
    let (lo, hi) = if cx.opset < 11 {
        let lo = cx.attr_float_opt("min")?.map(f64::from);
        let hi = cx.attr_float_opt("max")?.map(f64::from);
        (
            lo.map(|v| cx.scalar("min", dtype, v)).transpose()?,
            hi.map(|v| cx.scalar("max", dtype, v)).transpose()?,
        )
    } else {
        (cx.opt_input(1), cx.opt_input(2))
    };
    let lo = match lo {
        Some(v) => v,
        None => cx.scalar("min", dtype, extreme(dtype, false))?,
    };
    let hi = match hi {
        Some(v) => v,
        None => cx.scalar("max", dtype, extreme(dtype, true))?,
    };
    Ok(vec![cx.add(Op::Clip, &[x, lo, hi])?])
}

/// The largest (or smallest) value of `dtype`, infinities for floats; the conversion in
/// `Tensor::from_f64_as` saturates, so the integer extremes come out exact.
fn extreme(dtype: DType, high: bool) -> f64 {
    match (dtype.is_float(), high) {
        (true, true) => f64::INFINITY,
        (true, false) => f64::NEG_INFINITY,
        (false, true) => f64::MAX,
        (false, false) => f64::MIN,
    }
}

pub(super) fn cast(cx: &mut NodeCx<'_>) -> Result<Vec<Value>, OnnxError> {
    let code = cx
        .attr_int_opt("to")?
        .ok_or_else(|| cx.err("attribute `to` is required"))?;
    let to = i32::try_from(code)
        .map_err(|_| format!("unknown element type code {code}"))
        .and_then(dtype_from_onnx)
        .map_err(|e| cx.err(format!("attribute `to`: {e}")))?;
    let saturate = cx.attr_bool("saturate", true)?;
    let op = cast_op(cx, to, saturate)?;
    unary(cx, op)
}

/// The IR op of a Cast to `to`. Cast's `round_mode` (opset 24+) says how a cast to
/// FLOAT8E8M0 rounds: `up` (the default) is the IR's `cast`, `down` and `nearest` are
/// `cast_e8m0`; other targets ignore it, as ONNX does.
fn cast_op(cx: &NodeCx<'_>, to: DType, saturate: bool) -> Result<Op, OnnxError> {
    let mode = cx.attr_string("round_mode", "up")?;
    let round = match mode.as_str() {
        "up" => E8m0Round::Up,
        "down" => E8m0Round::Down,
        "nearest" => E8m0Round::Nearest,
        other => {
            return Err(cx.err(format!(
                "attribute `round_mode` = \"{other}\": expected \"up\", \"down\" or \"nearest\""
            )));
        }
    };
    Ok(match (to, round) {
        (DType::F8E8M0, E8m0Round::Down | E8m0Round::Nearest) => Op::CastE8m0 { round, saturate },
        _ => Op::Cast { to, saturate },
    })
}

/// Range. From opset 27, `stash_type` (FLOAT, the default, or DOUBLE) says in which type a
/// float16 / bfloat16 range is computed before it is rounded back, as ONNX's reference does
/// (`np.arange` in that type, then a cast); before 27, and for other types, the op as is.
pub(super) fn range(cx: &mut NodeCx<'_>) -> Result<Vec<Value>, OnnxError> {
    let mut inputs = cx.all_inputs()?;
    // Float initializers are params (weights), whose values type inference does not see; the
    // output length needs them: start, limit and delta given as initializers become constants.
    for (i, v) in inputs.iter_mut().enumerate() {
        if cx.constant_of(*v).is_none()
            && let Some(t) = cx.known_value(*v).filter(|t| t.len() == 1).cloned()
        {
            *v = cx.constant(["start", "limit", "delta"][i.min(2)], t)?;
        }
    }
    let dtype = cx.ty(inputs[0]).dtype;
    if cx.opset < 27 || !matches!(dtype, DType::F16 | DType::BF16) {
        return Ok(vec![cx.add(Op::Range, &inputs)?]);
    }
    let stash = match cx.attr_int("stash_type", 1)? {
        1 => DType::F32,
        11 => DType::F64,
        other => {
            return Err(cx.err(format!(
                "stash_type = {other} is not FLOAT (1) or DOUBLE (11)"
            )));
        }
    };
    let cast = |to| Op::Cast {
        to,
        saturate: false,
    };
    let mut wide = Vec::with_capacity(3);
    for (i, v) in inputs.iter().enumerate() {
        wide.push(cx.add_helper(&format!("stash{i}"), cast(stash), &[*v])?);
    }
    let r = cx.add_helper("range", Op::Range, &wide)?;
    Ok(vec![cx.add(cast(dtype), &[r])?])
}

/// CastLike: a Cast to the second input's element type.
pub(super) fn cast_like(cx: &mut NodeCx<'_>) -> Result<Vec<Value>, OnnxError> {
    let (x, like) = (cx.input(0)?, cx.input(1)?);
    let to = cx.ty(like).dtype;
    let saturate = cx.attr_bool("saturate", true)?;
    let op = cast_op(cx, to, saturate)?;
    Ok(vec![cx.add(op, &[x])?])
}

pub(super) fn gemm(cx: &mut NodeCx<'_>) -> Result<Vec<Value>, OnnxError> {
    Ok(vec![gemm_of(cx, true)?])
}

/// The node's Gemm (inputs A, B, C and its attributes), as the node's own IR node when `last`.
pub(super) fn gemm_of(cx: &mut NodeCx<'_>, last: bool) -> Result<Value, OnnxError> {
    let alpha = cx.attr_float("alpha", 1.0)?;
    let beta = cx.attr_float("beta", 1.0)?;
    let trans_a = cx.attr_bool("transA", false)?;
    let trans_b = cx.attr_bool("transB", false)?;
    let mut inputs = vec![cx.input(0)?, cx.input(1)?];
    inputs.extend(cx.opt_input(2));
    let op = Op::Gemm {
        alpha,
        beta,
        trans_a,
        trans_b,
    };
    cx.add_step(last, "gemm", op, &inputs)
}
