//! Reductions: `axes` is an attribute before `input_since` (13 for ReduceSum, 18 for the
//! others) and an optional constant input from then on. CumSum, the running sum, whose axis
//! is an input (any scalar-like i64/i32 value: the IR op reads it at run time). ArgMax, ArgMin
//! and TopK.

use super::NodeCx;
use crate::OnnxError;
use fp8c_ir::{Op, Tensor, Value};

pub(super) fn reduce(
    cx: &mut NodeCx<'_>,
    input_since: i64,
    make: fn(Option<Vec<i64>>, bool) -> Op,
) -> Result<Vec<Value>, OnnxError> {
    let x = cx.input(0)?;
    let Some((axes, keepdims)) = reduce_axes(cx, input_since)? else {
        return Ok(vec![cx.add(Op::Identity, &[x])?]);
    };
    Ok(vec![cx.add(make(axes, keepdims), &[x])?])
}

/// A reduction's axes; `None`: every axis.
type Axes = Option<Vec<i64>>;

/// A reduction's `axes` (`None`: every axis) and `keepdims`, or `None` when empty axes with
/// `noop_with_empty_axes` make the op an identity. `axes` is an input from `input_since`.
fn reduce_axes(cx: &NodeCx<'_>, input_since: i64) -> Result<Option<(Axes, bool)>, OnnxError> {
    let keepdims = cx.attr_bool("keepdims", true)?;
    let (axes, noop_with_empty_axes) = if cx.opset < input_since {
        if cx.num_inputs() > 1 {
            return Err(cx.err(format!(
                "takes `axes` as an attribute before opset {input_since}, not an input"
            )));
        }
        (cx.attr_ints("axes"), false)
    } else {
        (
            cx.const_ints_input(1, "axes")?,
            cx.attr_bool("noop_with_empty_axes", false)?,
        )
    };
    // Empty axes mean "every axis", unless noop_with_empty_axes makes the op an identity.
    let axes = axes.filter(|a| !a.is_empty());
    if axes.is_none() && noop_with_empty_axes {
        return Ok(None);
    }
    Ok(Some((axes, keepdims)))
}

/// The reductions ONNX defines from a sum (axes an input from opset 18).
#[derive(Clone, Copy)]
pub(super) enum SumKind {
    /// ReduceL1: Σ|x|.
    L1,
    /// ReduceL2: √Σx².
    L2,
    /// ReduceSumSquare: Σx².
    SumSquare,
    /// ReduceLogSum: log Σx.
    LogSum,
    /// ReduceLogSumExp: log Σexp(x), as `m + log Σexp(x − m)` with m the maximum (as
    /// onnxruntime, so large x does not overflow).
    LogSumExp,
}

/// ReduceL1, ReduceL2, ReduceSumSquare, ReduceLogSum, ReduceLogSumExp, decomposed into an
/// elementwise op, `reduce_sum` (which accumulates in f64) and an elementwise op.
pub(super) fn reduce_sum_of(cx: &mut NodeCx<'_>, kind: SumKind) -> Result<Vec<Value>, OnnxError> {
    let x = cx.input(0)?;
    let Some((axes, keepdims)) = reduce_axes(cx, 18)? else {
        // onnxruntime's no-op reductions still apply the elementwise parts.
        return Ok(vec![match kind {
            SumKind::L1 => cx.add(Op::Abs, &[x])?,
            SumKind::SumSquare => cx.add(Op::Mul, &[x, x])?,
            SumKind::L2 => {
                let sq = cx.add_helper("square", Op::Mul, &[x, x])?;
                cx.add(Op::Sqrt, &[sq])?
            }
            SumKind::LogSum => cx.add(Op::Log, &[x])?,
            SumKind::LogSumExp => {
                let e = cx.add_helper("exp", Op::Exp, &[x])?;
                cx.add(Op::Log, &[e])?
            }
        }]);
    };
    let sum = |axes: Option<Vec<i64>>, keepdims| Op::ReduceSum { axes, keepdims };
    let y = match kind {
        SumKind::L1 => {
            let a = cx.add_helper("abs", Op::Abs, &[x])?;
            cx.add(sum(axes, keepdims), &[a])?
        }
        SumKind::SumSquare => {
            let sq = cx.add_helper("square", Op::Mul, &[x, x])?;
            cx.add(sum(axes, keepdims), &[sq])?
        }
        SumKind::L2 => {
            let sq = cx.add_helper("square", Op::Mul, &[x, x])?;
            let s = cx.add_helper("sum", sum(axes, keepdims), &[sq])?;
            cx.add(Op::Sqrt, &[s])?
        }
        SumKind::LogSum => {
            let s = cx.add_helper("sum", sum(axes, keepdims), &[x])?;
            cx.add(Op::Log, &[s])?
        }
        SumKind::LogSumExp => {
            let max = Op::ReduceMax {
                axes: axes.clone(),
                keepdims: true,
            };
            let m = cx.add_helper("max", max, &[x])?;
            let d = cx.add_helper("shifted", Op::Sub, &[x, m])?;
            let e = cx.add_helper("exp", Op::Exp, &[d])?;
            let s = cx.add_helper("sum", sum(axes.clone(), true), &[e])?;
            let l = cx.add_helper("log", Op::Log, &[s])?;
            if keepdims {
                cx.add(Op::Add, &[l, m])?
            } else {
                let r = cx.add_helper("keepdims", Op::Add, &[l, m])?;
                cx.add(Op::Squeeze { axes }, &[r])?
            }
        }
    };
    Ok(vec![y])
}

pub(super) fn cum_sum(cx: &mut NodeCx<'_>) -> Result<Vec<Value>, OnnxError> {
    let exclusive = cx.attr_bool("exclusive", false)?;
    let reverse = cx.attr_bool("reverse", false)?;
    let (x, axis) = (cx.input(0)?, cx.input(1)?);
    Ok(vec![cx.add(Op::CumSum { exclusive, reverse }, &[x, axis])?])
}

/// ArgMax (`max`) / ArgMin: `axis` (default 0), `keepdims` (default 1), `select_last_index`
/// (opset 12+, default 0).
pub(super) fn arg_extreme(cx: &mut NodeCx<'_>, max: bool) -> Result<Vec<Value>, OnnxError> {
    let axis = cx.attr_int("axis", 0)?;
    let keepdims = cx.attr_bool("keepdims", true)?;
    let select_last_index = cx.attr_bool("select_last_index", false)?;
    let x = cx.input(0)?;
    let op = if max {
        Op::ArgMax {
            axis,
            keepdims,
            select_last_index,
        }
    } else {
        Op::ArgMin {
            axis,
            keepdims,
            select_last_index,
        }
    };
    Ok(vec![cx.add(op, &[x])?])
}

/// TopK: inputs X and K (opset 10+; opset 1 had the attribute `k`); `axis` (default -1),
/// `largest` and `sorted` (opset 11+, default 1). Outputs Values and Indices.
pub(super) fn top_k(cx: &mut NodeCx<'_>) -> Result<Vec<Value>, OnnxError> {
    let axis = cx.attr_int("axis", -1)?;
    let largest = cx.attr_bool("largest", true)?;
    let sorted = cx.attr_bool("sorted", true)?;
    let x = cx.input(0)?;
    let k = match cx.opt_input(1) {
        Some(k) => k,
        None => {
            let k = cx.attr_int_opt("k")?.ok_or_else(|| {
                cx.err("input K (or, before opset 10, attribute `k`) is required")
            })?;
            cx.constant("k", Tensor::from_i64(vec![1], &[k]))?
        }
    };
    let op = Op::TopK {
        axis,
        largest,
        sorted,
    };
    let name = cx.name.to_string();
    cx.add_multi(&name, op, &[x, k])
}
