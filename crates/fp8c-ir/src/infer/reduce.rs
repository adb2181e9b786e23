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
        | ReduceOp::ReduceMax { axes, keepdims }
        | ReduceOp::ReduceMin { axes, keepdims }
        | ReduceOp::ReduceProd { axes, keepdims } => {
            one(reduce(inputs, axes.as_deref(), *keepdims)?)
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
        ReduceOp::__Lifetime(never, _) => match never {},
    })
}

/// `axes` None (or empty, as ONNX's absent axes input) reduces every axis.
fn reduce(inputs: &[InferInput<'_>], axes: Option<&[i64]>, keepdims: bool) -> Res<TensorType> {
    let [x] = args(inputs, ["data"])?;
    x.expect(is_numeric(x.dtype()), NUMERIC)?;
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
