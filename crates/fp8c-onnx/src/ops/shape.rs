//! Shape and data-movement ops, and constants.

use super::{NodeCx, normalize_axis};
use crate::OnnxError;
use fp8c_ir::{DType, Op, PadMode, ScatterReduction, Tensor, Value};

/// Largest rank the importer makes index constants for.
const MAX_RANK: u64 = 1024;

pub(super) fn reshape(cx: &mut NodeCx<'_>) -> Result<Vec<Value>, OnnxError> {
    let allowzero = cx.attr_bool("allowzero", false)?;
    let (x, shape) = (cx.input(0)?, cx.input(1)?);
    Ok(vec![cx.add(Op::Reshape { allowzero }, &[x, shape])?])
}

pub(super) fn transpose(cx: &mut NodeCx<'_>) -> Result<Vec<Value>, OnnxError> {
    let x = cx.input(0)?;
    let perm = match cx.attr_ints("perm") {
        Some(p) => p,
        None => (0..cx.ty(x).rank() as i64).rev().collect(),
    };
    Ok(vec![cx.add(Op::Transpose { perm }, &[x])?])
}

pub(super) fn flatten(cx: &mut NodeCx<'_>) -> Result<Vec<Value>, OnnxError> {
    let axis = cx.attr_int("axis", 1)?;
    let x = cx.input(0)?;
    Ok(vec![cx.add(Op::Flatten { axis }, &[x])?])
}

/// `axes` as an attribute before opset 13, as a (constant) second input from 13.
fn axes_13(cx: &NodeCx<'_>) -> Result<Option<Vec<i64>>, OnnxError> {
    if cx.opset < 13 {
        Ok(cx.attr_ints("axes"))
    } else {
        cx.const_ints_input(1, "axes")
    }
}

pub(super) fn unsqueeze(cx: &mut NodeCx<'_>) -> Result<Vec<Value>, OnnxError> {
    let x = cx.input(0)?;
    let axes = axes_13(cx)?.ok_or_else(|| cx.err("`axes` is required"))?;
    Ok(vec![cx.add(Op::Unsqueeze { axes }, &[x])?])
}

pub(super) fn squeeze(cx: &mut NodeCx<'_>) -> Result<Vec<Value>, OnnxError> {
    let x = cx.input(0)?;
    let axes = axes_13(cx)?;
    Ok(vec![cx.add(Op::Squeeze { axes }, &[x])?])
}

pub(super) fn concat(cx: &mut NodeCx<'_>) -> Result<Vec<Value>, OnnxError> {
    let axis = cx
        .attr_int_opt("axis")?
        .ok_or_else(|| cx.err("attribute `axis` is required"))?;
    let inputs = cx.all_inputs()?;
    Ok(vec![cx.add(Op::Concat { axis }, &inputs)?])
}

pub(super) fn gather(cx: &mut NodeCx<'_>) -> Result<Vec<Value>, OnnxError> {
    let axis = cx.attr_int("axis", 0)?;
    let (x, idx) = (cx.input(0)?, cx.input(1)?);
    Ok(vec![cx.add(Op::Gather { axis }, &[x, idx])?])
}

pub(super) fn gather_elements(cx: &mut NodeCx<'_>) -> Result<Vec<Value>, OnnxError> {
    let axis = cx.attr_int("axis", 0)?;
    let (x, idx) = (cx.input(0)?, cx.input(1)?);
    Ok(vec![cx.add(Op::GatherElements { axis }, &[x, idx])?])
}

pub(super) fn gather_nd(cx: &mut NodeCx<'_>) -> Result<Vec<Value>, OnnxError> {
    let batch_dims = cx.attr_int("batch_dims", 0)?;
    let (x, idx) = (cx.input(0)?, cx.input(1)?);
    Ok(vec![cx.add(Op::GatherNd { batch_dims }, &[x, idx])?])
}

/// Trilu: `upper` (default 1) and an optional k input (default 0, made a constant).
pub(super) fn trilu(cx: &mut NodeCx<'_>) -> Result<Vec<Value>, OnnxError> {
    let upper = cx.attr_bool("upper", true)?;
    let x = cx.input(0)?;
    let k = match cx.opt_input(1) {
        Some(k) => k,
        None => cx.add_helper(
            "k",
            Op::Constant {
                value: fp8c_ir::Tensor::from_i64(vec![], &[0]),
            },
            &[],
        )?,
    };
    Ok(vec![cx.add(Op::Trilu { upper }, &[x, k])?])
}

pub(super) fn shape(cx: &mut NodeCx<'_>) -> Result<Vec<Value>, OnnxError> {
    let start = cx.attr_int("start", 0)?;
    let end = cx.attr_int_opt("end")?;
    let x = cx.input(0)?;
    Ok(vec![cx.add(Op::Shape { start, end }, &[x])?])
}

/// Size: the element count of its input as an i64 scalar, `reduce_prod(shape(x))` (a rank-0
/// input's empty shape multiplies to 1). Folded at import when the dims are known, and by
/// canonicalize once `--input-shape` binds them.
pub(super) fn size(cx: &mut NodeCx<'_>) -> Result<Vec<Value>, OnnxError> {
    let x = cx.input(0)?;
    let shape = cx.add_helper(
        "shape",
        Op::Shape {
            start: 0,
            end: None,
        },
        &[x],
    )?;
    let op = Op::ReduceProd {
        axes: None,
        keepdims: false,
    };
    Ok(vec![cx.add(op, &[shape])?])
}

/// Slice: `starts`/`ends`/`axes` attributes before opset 10, inputs from 10. The IR op always
/// has 5 inputs, so absent `axes` (0..n) and `steps` (ones) are made constants of the
/// index type.
pub(super) fn slice(cx: &mut NodeCx<'_>) -> Result<Vec<Value>, OnnxError> {
    let x = cx.input(0)?;
    if cx.opset < 10 {
        if cx.num_inputs() != 1 {
            return Err(cx.err(format!(
                "takes 1 input before opset 10, got {}",
                cx.num_inputs()
            )));
        }
        let starts = cx
            .attr_ints("starts")
            .ok_or_else(|| cx.err("attribute `starts` is required"))?;
        let ends = cx
            .attr_ints("ends")
            .ok_or_else(|| cx.err("attribute `ends` is required"))?;
        let n = starts.len();
        let axes = cx
            .attr_ints("axes")
            .unwrap_or_else(|| (0..n as i64).collect());
        if ends.len() != n || axes.len() != n {
            return Err(cx.err("attributes `starts`, `ends` and `axes` differ in length"));
        }
        let mut inputs = vec![x];
        for (suffix, v) in [
            ("starts", starts),
            ("ends", ends),
            ("axes", axes),
            ("steps", vec![1; n]),
        ] {
            inputs.push(cx.constant(suffix, Tensor::from_i64(vec![n as u64], &v))?);
        }
        return Ok(vec![cx.add(Op::Slice, &inputs)?]);
    }
    if cx.num_inputs() < 3 {
        return Err(cx.err("needs at least 3 inputs (data, starts, ends)"));
    }
    let (starts, ends) = (cx.input(1)?, cx.input(2)?);
    let sty = cx.ty(starts).clone();
    let index_len = match sty.shape.as_slice() {
        [d] => d.known(),
        _ => return Err(cx.err(format!("starts has type {sty}; expected a 1-D tensor"))),
    };
    let fill = |cx: &mut NodeCx<'_>, suffix: &str, f: fn(u64) -> f64| -> Result<Value, OnnxError> {
        // One entry per sliced axis: more than MAX_RANK is a corrupt type, not a real model.
        let n = index_len.filter(|&n| n <= MAX_RANK).ok_or_else(|| {
            cx.err(format!(
                "starts has type {sty}; its length must be known (and small) to fill in `{suffix}`"
            ))
        })?;
        let values: Vec<f64> = (0..n).map(f).collect();
        let t = Tensor::from_f64_as(sty.dtype, vec![n], &values).map_err(|e| cx.err(e))?;
        cx.constant(suffix, t)
    };
    let axes = match cx.opt_input(3) {
        Some(v) => v,
        None => fill(cx, "axes", |i| i as f64)?,
    };
    let steps = match cx.opt_input(4) {
        Some(v) => v,
        None => fill(cx, "steps", |_| 1.0)?,
    };
    Ok(vec![cx.add(Op::Slice, &[x, starts, ends, axes, steps])?])
}

/// A `Constant` node: exactly one of the value attributes.
pub(super) fn constant(cx: &mut NodeCx<'_>) -> Result<Vec<Value>, OnnxError> {
    let value = if let Some(t) = cx.attr_tensor("value")? {
        t
    } else if let Some(a) = cx.attr("value_float") {
        Tensor::scalar_f32(a.f.ok_or_else(|| cx.err("attribute `value_float` must be a float"))?)
    } else if let Some(v) = cx.attr_floats("value_floats") {
        Tensor::from_f32(vec![v.len() as u64], &v)
    } else if let Some(a) = cx.attr("value_int") {
        Tensor::scalar_i64(a.i.ok_or_else(|| cx.err("attribute `value_int` must be an int"))?)
    } else if let Some(v) = cx.attr_ints("value_ints") {
        Tensor::from_i64(vec![v.len() as u64], &v)
    } else if cx.attr("sparse_value").is_some() {
        return Err(cx.err("sparse constants (`sparse_value`) are not supported"));
    } else if cx.attr("value_string").is_some() || cx.attr("value_strings").is_some() {
        return Err(cx.err("string constants are not supported"));
    } else {
        return Err(cx.err("has no value attribute"));
    };
    Ok(vec![cx.add(Op::Constant { value }, &[])?])
}

pub(super) fn constant_of_shape(cx: &mut NodeCx<'_>) -> Result<Vec<Value>, OnnxError> {
    let value = match cx.attr_tensor("value")? {
        Some(t) if t.len() == 1 => t,
        Some(t) => {
            return Err(cx.err(format!(
                "attribute `value` has {} elements, expected 1",
                t.len()
            )));
        }
        None => Tensor::from_f32(vec![1], &[0.0]),
    };
    let shape = cx.input(0)?;
    Ok(vec![cx.add(Op::ConstantOfShape { value }, &[shape])?])
}

/// Pad: `pads`/`value` attributes before opset 11, inputs from 11 (with optional `axes`
/// from 18, folded into full-rank pads here). The IR op always has 3 inputs.
pub(super) fn pad(cx: &mut NodeCx<'_>) -> Result<Vec<Value>, OnnxError> {
    let mode = match cx.attr_string("mode", "constant")?.as_str() {
        "constant" => PadMode::Constant,
        "reflect" => PadMode::Reflect,
        "edge" => PadMode::Edge,
        "wrap" => PadMode::Wrap,
        other => return Err(cx.err(format!("attribute `mode`: unknown value \"{other}\""))),
    };
    let x = cx.input(0)?;
    let dtype = cx.ty(x).dtype;
    let rank = cx.ty(x).rank();
    let (pads, value) = if cx.opset < 11 {
        let pads = cx
            .attr_ints("pads")
            .ok_or_else(|| cx.err("attribute `pads` is required"))?;
        let value = f64::from(cx.attr_float("value", 0.0)?);
        let n = pads.len() as u64;
        (
            cx.constant("pads", Tensor::from_i64(vec![n], &pads))?,
            cx.scalar("value", dtype, value)?,
        )
    } else {
        let pads = match cx.const_ints_input(3, "axes")? {
            None => cx.input(1)?,
            Some(axes) => {
                let given = cx
                    .const_ints_input(1, "pads")?
                    .ok_or_else(|| cx.err("input 1 (`pads`) is required"))?;
                if given.len() != 2 * axes.len() {
                    return Err(cx.err(format!(
                        "`pads` has {} entries for {} axes",
                        given.len(),
                        axes.len()
                    )));
                }
                let mut full = vec![0i64; 2 * rank];
                for (k, &axis) in axes.iter().enumerate() {
                    let a = normalize_axis(axis, rank).ok_or_else(|| {
                        cx.err(format!("axis {axis} is out of range for rank {rank}"))
                    })?;
                    full[a] = given[k];
                    full[a + rank] = given[k + axes.len()];
                }
                cx.constant("pads", Tensor::from_i64(vec![2 * rank as u64], &full))?
            }
        };
        let value = match cx.opt_input(2) {
            Some(v) => v,
            None => zero(cx, dtype)?,
        };
        (pads, value)
    };
    Ok(vec![cx.add(Op::Pad { mode }, &[x, pads, value])?])
}

/// A scalar zero of any dtype (FP8 included: all bits zero).
fn zero(cx: &mut NodeCx<'_>, dtype: DType) -> Result<Value, OnnxError> {
    let t = Tensor::zeros(dtype, vec![]).map_err(|e| cx.err(e))?;
    cx.constant("value", t)
}

/// Split: sizes from the `split` attribute (before 13) or constant input (from 13), else
/// `num_outputs` (from 18, last chunk smaller) or equal parts, which need the axis size.
pub(super) fn split(cx: &mut NodeCx<'_>) -> Result<Vec<Value>, OnnxError> {
    let x = cx.input(0)?;
    let axis = cx.attr_int("axis", 0)?;
    let n = cx.num_outputs();
    if n == 0 {
        return Err(cx.err("has no outputs"));
    }
    let given = if cx.opset < 13 {
        cx.attr_ints("split")
    } else {
        cx.const_ints_input(1, "split")?
    };
    let sizes = match given {
        Some(s) => s,
        None => {
            let xty = cx.ty(x).clone();
            let Some(a) = normalize_axis(axis, xty.rank()) else {
                return Err(cx.err(format!("axis {axis} is out of range for {xty}")));
            };
            let num_outputs = if cx.opset >= 18 {
                cx.attr_int_opt("num_outputs")?
            } else {
                None
            };
            let parts = n as i64;
            let Some(dim) = xty.shape[a].known().and_then(|d| i64::try_from(d).ok()) else {
                // The size is known only once shapes are bound: equal parts, resolved then.
                if let Some(k) = num_outputs.filter(|&k| k != parts) {
                    return Err(cx.err(format!(
                        "attribute `num_outputs` = {k}, but the node has {n} outputs"
                    )));
                }
                let name = cx.name;
                return cx.add_multi(
                    name,
                    Op::Split {
                        axis,
                        split: vec![fp8c_ir::infer::EQUAL_PARTS; n],
                    },
                    &[x],
                );
            };
            match num_outputs {
                Some(k) if k != parts => {
                    return Err(cx.err(format!(
                        "attribute `num_outputs` = {k}, but the node has {n} outputs"
                    )));
                }
                Some(_) => {
                    // dim >= 0 and parts >= 1, so this cannot overflow.
                    let chunk = dim / parts + i64::from(dim % parts != 0);
                    let last = chunk
                        .checked_mul(parts - 1)
                        .and_then(|used| dim.checked_sub(used))
                        .filter(|&l| l >= 0);
                    let Some(last) = last else {
                        return Err(cx.err(format!("cannot split size {dim} into {n} outputs")));
                    };
                    let mut s = vec![chunk; n - 1];
                    s.push(last);
                    s
                }
                None if dim % parts == 0 => vec![dim / parts; n],
                None => {
                    return Err(cx.err(format!("size {dim} does not split into {n} equal parts")));
                }
            }
        }
    };
    if sizes.len() != n {
        return Err(cx.err(format!(
            "`split` has {} sizes, but the node has {n} outputs",
            sizes.len()
        )));
    }
    let name = cx.name;
    cx.add_multi(name, Op::Split { axis, split: sizes }, &[x])
}

/// The `reduction` attribute of ScatterElements/ScatterND: `none`, `add` and `mul` from opset
/// 16, `max` and `min` from 18.
fn scatter_reduction(cx: &NodeCx<'_>) -> Result<ScatterReduction, OnnxError> {
    let word = cx.attr_string("reduction", "none")?;
    let r = match word.as_str() {
        "none" => ScatterReduction::None,
        "add" => ScatterReduction::Add,
        "mul" => ScatterReduction::Mul,
        "max" => ScatterReduction::Max,
        "min" => ScatterReduction::Min,
        other => {
            return Err(cx.err(format!(
                "attribute `reduction`: unknown value \"{other}\" (none, add, mul, max, min)"
            )));
        }
    };
    if matches!(r, ScatterReduction::Max | ScatterReduction::Min) && cx.opset < 18 {
        return Err(cx.err(format!(
            "attribute `reduction` = \"{word}\" needs opset 18, the model has {}",
            cx.opset
        )));
    }
    Ok(r)
}

pub(super) fn scatter_elements(cx: &mut NodeCx<'_>) -> Result<Vec<Value>, OnnxError> {
    let axis = cx.attr_int("axis", 0)?;
    let reduction = scatter_reduction(cx)?;
    let ins = [cx.input(0)?, cx.input(1)?, cx.input(2)?];
    Ok(vec![cx.add(Op::ScatterElements { axis, reduction }, &ins)?])
}

pub(super) fn scatter_nd(cx: &mut NodeCx<'_>) -> Result<Vec<Value>, OnnxError> {
    let reduction = scatter_reduction(cx)?;
    let ins = [cx.input(0)?, cx.input(1)?, cx.input(2)?];
    Ok(vec![cx.add(Op::ScatterNd { reduction }, &ins)?])
}
