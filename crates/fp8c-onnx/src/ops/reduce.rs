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
