//! Reductions: `axes` is an attribute before `input_since` (13 for ReduceSum, 18 for the
//! others) and an optional constant input from then on. CumSum, the running sum, whose axis
//! is an input (any scalar-like i64/i32 value: the IR op reads it at run time).

use super::NodeCx;
use crate::OnnxError;
use fp8c_ir::{Op, Value};

pub(super) fn reduce(
    cx: &mut NodeCx<'_>,
    input_since: i64,
    make: fn(Option<Vec<i64>>, bool) -> Op,
) -> Result<Vec<Value>, OnnxError> {
    let x = cx.input(0)?;
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
        return Ok(vec![cx.add(Op::Identity, &[x])?]);
    }
    Ok(vec![cx.add(make(axes, keepdims), &[x])?])
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
