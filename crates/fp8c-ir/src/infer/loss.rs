//! Inference for the loss family: softmax cross-entropy over the last axis with integer
//! labels, and its gradient w.r.t. the logits.

use super::InferInput;
use super::common::{Arg, MATH_FLOAT, Res, args, fmt_shape, is_index, is_math_float, unify};
use crate::{LossOp, TensorType};

/// The output types of a loss op.
pub(super) fn infer(op: LossOp<'_>, inputs: &[InferInput<'_>]) -> Res<Vec<TensorType>> {
    Ok(match op {
        LossOp::SoftmaxCrossEntropy => {
            let [logits, labels] = args(inputs, ["logits", "labels"])?;
            cross_entropy_operands(&logits, &labels)?;
            vec![TensorType::scalar(logits.dtype()), logits.ty.clone()]
        }
        LossOp::SoftmaxCrossEntropyGrad => {
            let [log_probs, labels, dloss] = args(inputs, ["log_probs", "labels", "dloss"])?;
            cross_entropy_operands(&log_probs, &labels)?;
            dloss.expect_same_dtype(&log_probs)?;
            dloss.expect_rank(0)?;
            vec![log_probs.ty.clone()]
        }
        LossOp::__Lifetime(never, _) => match never {},
    })
}

/// Logits `[.., C]` of a float type and integer labels of the leading dims.
fn cross_entropy_operands(logits: &Arg<'_>, labels: &Arg<'_>) -> Res<()> {
    logits.expect(is_math_float(logits.dtype()), MATH_FLOAT)?;
    logits.expect_min_rank(1, "the last axis holds the classes")?;
    labels.expect(is_index(labels.dtype()), "i64 or i32 class indices")?;
    let lead = &logits.shape()[..logits.rank() - 1];
    let fits = labels.rank() == lead.len()
        && labels
            .shape()
            .iter()
            .zip(lead)
            .all(|(a, b)| unify(a, b).is_some());
    if !fits {
        return Err(labels.shape_err(format!(
            "expected {} (the dims of {logits} before its class axis)",
            fmt_shape(lead)
        )));
    }
    Ok(())
}
