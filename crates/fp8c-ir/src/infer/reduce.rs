//! Inference for the reduce family: the five ONNX reductions (axes None or empty = every
//! axis), `all_finite`, and the running sum `cum_sum`.

use super::InferInput;
use super::common::{
    MATH_FLOAT, NUMERIC, Res, args, axes_of, axis_of, is_index, is_math_float, is_numeric, variadic,
};
use crate::{DType, Dim, ReduceOp, TensorType};
use std::collections::BTreeSet;

/// The output types of a reduce op.
pub(super) fn infer(op: ReduceOp<'_>, inputs: &[InferInput<'_>]) -> Res<Vec<TensorType>> {
    let one = |t: TensorType| vec![t];
    Ok(match op {
        ReduceOp::ReduceMean { axes, keepdims }
        | ReduceOp::ReduceSum { axes, keepdims }
        | ReduceOp::ReduceProd { axes, keepdims } => {
            one(reduce(inputs, axes.as_deref(), *keepdims, false)?)
        }
        // ONNX (opset 20) defines max and min on bool too: any and all.
        ReduceOp::ReduceMax { axes, keepdims } | ReduceOp::ReduceMin { axes, keepdims } => {
            one(reduce(inputs, axes.as_deref(), *keepdims, true)?)
        }
        ReduceOp::AllFinite => {
            for x in variadic(inputs)? {
                x.expect(is_math_float(x.dtype()), MATH_FLOAT)?;
            }
            vec![TensorType::scalar(DType::Bool)]
        }
        ReduceOp::CumSum { .. } => one(cum_sum(inputs)?),
        ReduceOp::ArgMax { axis, keepdims, .. } | ReduceOp::ArgMin { axis, keepdims, .. } => {
            one(arg_extreme(inputs, *axis, *keepdims)?)
        }
        ReduceOp::TopK { axis, .. } => top_k(inputs, *axis)?,
        ReduceOp::__Lifetime(never, _) => match never {},
    })
}

/// `top_k(x, k)`: values of x's type and i64 indices, x's shape with the axis dim `k` (known
/// when k is a constant; it must not exceed the axis).
fn top_k(inputs: &[InferInput<'_>], axis: i64) -> Res<Vec<TensorType>> {
    let [x, k] = args(inputs, ["x", "k"])?;
    x.expect(is_numeric(x.dtype()), NUMERIC)?;
    x.expect_min_rank(1, "it needs an axis to select along")?;
    k.expect(k.dtype() == DType::I64, "i64")?;
    k.expect_scalar_like()?;
    let ax = axis_of(&x, axis, "axis")?;
    let mut kd = Dim::Unknown;
    if let Some(t) = k.value {
        let v = t.to_i64_vec().map_err(|e| format!("{k}: {e}"))?;
        if let Some(&n) = v.first() {
            let n = u64::try_from(n).map_err(|_| format!("{k} holds k = {n}, expected ≥ 0"))?;
            if let Dim::Known(d) = x.shape()[ax]
                && n > d
            {
                return Err(x.shape_err(format!("k = {n} exceeds axis {ax} (size {d})")));
            }
            kd = Dim::Known(n);
        }
    }
    let mut shape = x.shape().to_vec();
    shape[ax] = kd;
    Ok(vec![
        TensorType::new(x.dtype(), shape.clone()),
        TensorType::new(DType::I64, shape),
    ])
}

/// `axes` None (or empty, as ONNX's absent axes input) reduces every axis.
fn reduce(
    inputs: &[InferInput<'_>],
    axes: Option<&[i64]>,
    keepdims: bool,
    bools: bool,
) -> Res<TensorType> {
    let [x] = args(inputs, ["data"])?;
    if bools {
        x.expect(
            is_numeric(x.dtype()) || x.dtype() == DType::Bool,
            "a numeric type or bool",
        )?;
    } else {
        x.expect(is_numeric(x.dtype()), NUMERIC)?;
    }
    let reduced: BTreeSet<usize> = match axes {
        Some(a) if !a.is_empty() => axes_of(&x, a, "axes")?.into_iter().collect(),
        _ => (0..x.rank()).collect(),
    };
    let shape = x
        .shape()
        .iter()
        .enumerate()
        .filter_map(|(i, d)| match (reduced.contains(&i), keepdims) {
            (false, _) => Some(d.clone()),
            (true, true) => Some(Dim::Known(1)),
            (true, false) => None,
        })
        .collect();
    Ok(TensorType::new(x.dtype(), shape))
}

/// `arg_max` / `arg_min`: i64 indices, the axis removed (or kept as 1 with `keepdims`).
fn arg_extreme(inputs: &[InferInput<'_>], axis: i64, keepdims: bool) -> Res<TensorType> {
    let [x] = args(inputs, ["data"])?;
    x.expect(is_numeric(x.dtype()), NUMERIC)?;
    x.expect_min_rank(1, "it needs an axis to search along")?;
    let ax = axis_of(&x, axis, "axis")?;
    let shape = x
        .shape()
        .iter()
        .enumerate()
        .filter_map(|(i, d)| match (i == ax, keepdims) {
            (false, _) => Some(d.clone()),
            (true, true) => Some(Dim::Known(1)),
            (true, false) => None,
        })
        .collect();
    Ok(TensorType::new(DType::I64, shape))
}

/// `cum_sum(x, axis)`: x's type; the axis (a scalar-like i64/i32) is checked when known.
fn cum_sum(inputs: &[InferInput<'_>]) -> Res<TensorType> {
    let [x, axis] = args(inputs, ["x", "axis"])?;
    x.expect(is_numeric(x.dtype()), NUMERIC)?;
    axis.expect(is_index(axis.dtype()), "i64 or i32")?;
    axis.expect_scalar_like()?;
    x.expect_min_rank(1, "it needs an axis to sum along")?;
    if let Some(t) = axis.value {
        let a = t.to_i64_vec().map_err(|e| format!("{axis}: {e}"))?;
        if let Some(&a) = a.first() {
            axis_of(&x, a, "axis")?;
        }
    }
    Ok(x.ty.clone())
}
