//! InstanceNormalization and GroupNormalization, decomposed at import into reductions and
//! elementwise ops (the IR's `layer_norm` takes a scale over the normalised axes, not one per
//! channel): over each instance's (or group's) elements,
//! `(x − mean) / √(mean((x − mean)²) + ε)`, then `· scale + bias` per channel (per group for
//! GroupNormalization-18). The means accumulate in f64 (the IR's `reduce_mean`); f16/bf16
//! inputs are normalised in f32 (GroupNormalization-21's `stash_type`, default float) and the
//! result cast back, as onnxruntime computes them.

use super::NodeCx;
use crate::OnnxError;
use fp8c_ir::{DType, Op, Tensor, Value};

/// InstanceNormalization: X `[N, C, D1, ..]`, scale and B `[C]`, `epsilon` (default 1e-5);
/// statistics over `D1..` of each (n, c).
pub(super) fn instance_norm(cx: &mut NodeCx<'_>) -> Result<Vec<Value>, OnnxError> {
    let epsilon = cx.attr_float("epsilon", 1e-5)?;
    let (x, scale, bias) = (cx.input(0)?, cx.input(1)?, cx.input(2)?);
    let rank = need_channels(cx, x)?;
    let channels = cx.ty(x).shape[1].known();
    need_per(cx, &[(1, scale), (2, bias)], channels, "channel of X")?;
    let dtype = cx.ty(x).dtype;
    let stash = compute_type(dtype);
    let xs = cast(cx, "stash", x, stash, false)?;
    let xhat = standardize(cx, xs, (2..rank as i64).collect(), epsilon, stash)?;
    let trailing = rank - 2;
    let y = affine(cx, xhat, scale, bias, trailing, stash, dtype == stash)?;
    Ok(vec![cast(cx, "cast", y, dtype, true)?])
}

/// GroupNormalization: X `[N, C, D1, ..]` viewed as `[N, G, C/G · D1 · ..]`, statistics over
/// the last axis. From opset 21 scale and bias are `[C]` and the statistics are taken in
/// `stash_type`; opset 18's scale and bias are `[G]`, applied per group.
pub(super) fn group_norm(cx: &mut NodeCx<'_>) -> Result<Vec<Value>, OnnxError> {
    let epsilon = cx.attr_float("epsilon", 1e-5)?;
    let groups = cx
        .attr_int_opt("num_groups")?
        .ok_or_else(|| cx.err("attribute `num_groups` is required"))?;
    let (x, scale, bias) = (cx.input(0)?, cx.input(1)?, cx.input(2)?);
    let rank = need_channels(cx, x)?;
    let xty = cx.ty(x).clone();
    if groups < 1 || xty.shape[1].known().is_some_and(|c| c % groups as u64 != 0) {
        return Err(cx.err(format!(
            "attribute `num_groups` = {groups} does not divide the channels of X {xty}"
        )));
    }
    let (per, what) = if cx.opset >= 21 {
        (xty.shape[1].known(), "channel of X")
    } else {
        (Some(groups as u64), "group (GroupNormalization-18)")
    };
    need_per(cx, &[(1, scale), (2, bias)], per, what)?;
    let dtype = xty.dtype;
    let stash = if cx.opset >= 21 {
        super::nn::stash_type(cx)?
    } else {
        compute_type(dtype)
    };
    let xs = cast(cx, "stash", x, stash, false)?;
    let grouped_shape = Tensor::from_i64(vec![3], &[0, groups, -1]);
    let grouped_shape = cx.constant("grouped_shape", grouped_shape)?;
    let reshape = Op::Reshape { allowzero: false };
    let grouped = cx.add_helper("grouped", reshape.clone(), &[xs, grouped_shape])?;
    let xhat = standardize(cx, grouped, vec![2], epsilon, stash)?;
    let x_shape = cx.add_helper(
        "shape",
        Op::Shape {
            start: 0,
            end: None,
        },
        &[x],
    )?;
    let y = if cx.opset >= 21 {
        let back = cx.add_helper("ungrouped", reshape, &[xhat, x_shape])?;
        affine(cx, back, scale, bias, rank - 2, stash, dtype == stash)?
    } else {
        let y = affine(cx, xhat, scale, bias, 1, stash, false)?;
        let last = dtype == stash;
        cx.add_step(last, "ungrouped", reshape, &[y, x_shape])?
    };
    Ok(vec![cast(cx, "cast", y, dtype, true)?])
}

/// The rank of X, which must have a channel axis and at least one more.
fn need_channels(cx: &NodeCx<'_>, x: Value) -> Result<usize, OnnxError> {
    let ty = cx.ty(x);
    if ty.rank() < 3 || !ty.dtype.is_float() {
        return Err(cx.err(format!(
            "X has type {ty}; expected a float tensor of rank ≥ 3 (N, C, D1, ...)"
        )));
    }
    Ok(ty.rank())
}

/// Each of `params` (input index, value) must be 1-D with `len` entries (when known).
fn need_per(
    cx: &NodeCx<'_>,
    params: &[(usize, Value)],
    len: Option<u64>,
    what: &str,
) -> Result<(), OnnxError> {
    for &(i, p) in params {
        let ty = cx.ty(p);
        let fits = ty.rank() == 1
            && match (ty.shape[0].known(), len) {
                (Some(a), Some(b)) => a == b,
                _ => true,
            };
        if !fits {
            return Err(cx.err(format!(
                "input {i} (\"{}\") has type {ty}; expected 1-D, one entry per {what}{}",
                cx.input_name(i),
                len.map_or(String::new(), |n| format!(" ({n})"))
            )));
        }
    }
    Ok(())
}

/// The type statistics are computed in: f32 for the 16-bit floats, the input's own otherwise.
fn compute_type(dtype: DType) -> DType {
    match dtype {
        DType::F16 | DType::BF16 => DType::F32,
        d => d,
    }
}

/// `v` cast to `to` (as `{node}.{suffix}`, or as the node itself when `last`); `v` itself when
/// it already has that type.
fn cast(
    cx: &mut NodeCx<'_>,
    suffix: &str,
    v: Value,
    to: DType,
    last: bool,
) -> Result<Value, OnnxError> {
    if cx.ty(v).dtype == to {
        return Ok(v);
    }
    let op = Op::Cast { to, saturate: true };
    cx.add_step(last, suffix, op, &[v])
}

/// `(v − mean) / √(mean((v − mean)²) + ε)` over `axes` (kept as 1 for broadcasting).
fn standardize(
    cx: &mut NodeCx<'_>,
    v: Value,
    axes: Vec<i64>,
    epsilon: f32,
    dtype: DType,
) -> Result<Value, OnnxError> {
    let mean_op = Op::ReduceMean {
        axes: Some(axes),
        keepdims: true,
    };
    let mean = cx.add_helper("mean", mean_op.clone(), &[v])?;
    let d = cx.add_helper("centered", Op::Sub, &[v, mean])?;
    let dd = cx.add_helper("squared", Op::Mul, &[d, d])?;
    let var = cx.add_helper("var", mean_op, &[dd])?;
    let eps = cx.scalar("epsilon", dtype, f64::from(epsilon))?;
    let ve = cx.add_helper("var_eps", Op::Add, &[var, eps])?;
    let sd = cx.add_helper("std", Op::Sqrt, &[ve])?;
    cx.add_helper("normalized", Op::Div, &[d, sd])
}

/// `v · scale + bias`, scale and bias 1-D along axis 1 of `v` (unsqueezed over the
/// `trailing` axes after it, cast to `dtype`); the add is the node itself when `last`.
fn affine(
    cx: &mut NodeCx<'_>,
    v: Value,
    scale: Value,
    bias: Value,
    trailing: usize,
    dtype: DType,
    last: bool,
) -> Result<Value, OnnxError> {
    let axes: Vec<i64> = (1..=trailing as i64).collect();
    let per_channel = |cx: &mut NodeCx<'_>, p: Value, what: &str| {
        let p = cast(cx, &format!("{what}_stash"), p, dtype, false)?;
        let op = Op::Unsqueeze { axes: axes.clone() };
        cx.add_helper(&format!("{what}_per_channel"), op, &[p])
    };
    let s = per_channel(cx, scale, "scale")?;
    let b = per_channel(cx, bias, "bias")?;
    let scaled = cx.add_helper("scaled", Op::Mul, &[v, s])?;
    cx.add_step(last, "shifted", Op::Add, &[scaled, b])
}
