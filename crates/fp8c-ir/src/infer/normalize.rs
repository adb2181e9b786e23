//! Inference for the normalize family: batch and layer normalisation, softmax and
//! log-softmax, and the layer-norm and softmax gradients.

use super::InferInput;
use super::common::{
    MATH_FLOAT, Res, args, args_opt, axis_of, fmt_shape, is_math_float, same_as, unify,
};
use crate::{NormalizeOp, TensorType};

/// The output types of a normalize op.
pub(super) fn infer(op: NormalizeOp<'_>, inputs: &[InferInput<'_>]) -> Res<Vec<TensorType>> {
    let one = |t: TensorType| vec![t];
    Ok(match op {
        NormalizeOp::BatchNormalization { .. } => one(batch_norm(inputs)?),
        NormalizeOp::LayerNormalization { axis, .. } => one(layer_norm(inputs, *axis)?),
        NormalizeOp::RmsNormalization { axis, .. } => {
            let [_, _] = super::common::args(inputs, ["X", "scale"])?;
            one(layer_norm(inputs, *axis)?)
        }
        NormalizeOp::Softmax { axis } | NormalizeOp::LogSoftmax { axis } => {
            let [x] = args(inputs, ["input"])?;
            x.expect(is_math_float(x.dtype()), MATH_FLOAT)?;
            axis_of(&x, *axis, "axis")?;
            one(x.ty.clone())
        }
        NormalizeOp::LayerNormGrad { axis, .. } => {
            let [x, scale, dy] = args(inputs, ["x", "scale", "dy"])?;
            layer_norm(&inputs[..2], *axis)?;
            same_as(&dy, &x)?;
            vec![x.ty.clone(), scale.ty.clone(), scale.ty.clone()]
        }
        NormalizeOp::SoftmaxGrad { axis, .. } => {
            let [y, dy] = args(inputs, ["y", "dy"])?;
            y.expect(is_math_float(y.dtype()), MATH_FLOAT)?;
            axis_of(&y, *axis, "axis")?;
            same_as(&dy, &y)?;
            vec![y.ty.clone()]
        }
        NormalizeOp::__Lifetime(never, _) => match never {},
    })
}

fn batch_norm(inputs: &[InferInput<'_>]) -> Res<TensorType> {
    let [x, params @ ..] = args(inputs, ["X", "scale", "B", "input_mean", "input_var"])?;
    x.expect(is_math_float(x.dtype()), MATH_FLOAT)?;
    let [_, c, ..] = x.shape() else {
        return Err(x.shape_err("expected rank ≥ 2 (N, C, ...)"));
    };
    for p in params {
        p.expect(is_math_float(p.dtype()), MATH_FLOAT)?;
        match p.shape() {
            [pc] if unify(pc, c).is_some() => {}
            _ => return Err(p.shape_err(format!("expected [{c}] (input 0's channel dim)"))),
        }
    }
    Ok(x.ty.clone())
}

pub(super) fn layer_norm(inputs: &[InferInput<'_>], axis: i64) -> Res<TensorType> {
    let ([x, scale], bias) = args_opt(inputs, ["X", "Scale"], "B")?;
    x.expect(is_math_float(x.dtype()), MATH_FLOAT)?;
    let ax = axis_of(&x, axis, "axis")?;
    let normalized = x.shape().get(ax..).unwrap_or_default();
    for p in std::iter::once(scale).chain(bias) {
        p.expect_same_dtype(&x)?;
        let fits = p.rank() == normalized.len()
            && p.shape()
                .iter()
                .zip(normalized)
                .all(|(a, b)| unify(a, b).is_some());
        if !fits {
            return Err(p.shape_err(format!(
                "expected the normalised dims {} of input 0 (axis={axis})",
                fmt_shape(normalized)
            )));
        }
    }
    Ok(x.ty.clone())
}
