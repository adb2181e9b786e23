//! Loss rules: softmax cross-entropy's gradient w.r.t. the logits (`softmax_cross_entropy_grad`)
//! and, when its log-probabilities output is used too, the log-softmax gradient added to it.

use super::{At, Grads, R, SECOND_ORDER};
use crate::autodiff::emit::Emit;
use fp8c_ir::{LossOp, Op, Support};

/// The loss has a rule; its gradient op does not (second order).
pub(super) fn support(o: LossOp<'_>) -> Support {
    match o {
        LossOp::SoftmaxCrossEntropy => Support::Yes,
        LossOp::SoftmaxCrossEntropyGrad => Support::No(SECOND_ORDER),
        LossOp::__Lifetime(never, _) => match never {},
    }
}

pub(super) fn vjp(e: &mut Emit<'_>, at: &At<'_>) -> R<Option<Grads>> {
    Ok(Some(match at.op {
        Op::SoftmaxCrossEntropy => {
            let (labels, lp) = (at.ins[1], at.outs[1]);
            let mut d = None;
            if let Some(dloss) = at.dys[0] {
                d = Some(e.op(
                    &at.n("d0"),
                    Op::SoftmaxCrossEntropyGrad,
                    &[lp, labels, dloss],
                )?);
            }
            if let Some(dlp) = at.dys.get(1).copied().flatten() {
                let s = e.op(
                    &at.n("d0.log_probs"),
                    Op::SoftmaxGrad {
                        axis: -1,
                        log: true,
                    },
                    &[lp, dlp],
                )?;
                d = Some(match d {
                    Some(prev) => e.add(&at.n("d0.acc"), prev, s)?,
                    None => s,
                });
            }
            vec![d, None]
        }
        _ => return Ok(None),
    }))
}
