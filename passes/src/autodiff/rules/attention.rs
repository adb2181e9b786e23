//! Attention rules: `attention`'s gradient is one `attention_grad` node (FlashAttention-2's
//! backward, the probabilities recomputed from q, k and the saved log-sum-exp), giving dq, dk
//! and dv; the mask gets none.

use super::{At, Grads, R, SECOND_ORDER};
use crate::autodiff::emit::Emit;
use fp8c_ir::{AttentionOp, Op, Support};

/// `attention` has a rule; its gradient op does not (second order).
pub(super) fn support(o: AttentionOp<'_>) -> Support {
    match o {
        AttentionOp::Attention { .. } => Support::Yes,
        AttentionOp::AttentionGrad { .. } => Support::No(SECOND_ORDER),
        AttentionOp::__Lifetime(never, _) => match never {},
    }
}

pub(super) fn vjp(e: &mut Emit<'_>, at: &At<'_>) -> R<Option<Grads>> {
    let Op::Attention { scale, causal } = at.op else {
        return Ok(None);
    };
    if at.dys.get(1).copied().flatten().is_some() {
        return Err(at.err("the log-sum-exp output is read by the loss: it has no gradient rule"));
    }
    if at.want(3) {
        return Err(at.err(
            "the mask needs a gradient (a learned attention bias): attention gives the mask none; \
             compile with --no-fuse-attention to differentiate the unfused graph",
        ));
    }
    let (o, lse) = (at.outs[0], at.outs[1]);
    let mut inputs = vec![at.ins[0], at.ins[1], at.ins[2], o, lse, at.dy()?];
    inputs.extend(at.ins.get(3));
    let outs = e.ops(
        &at.n("grad"),
        Op::AttentionGrad {
            scale: *scale,
            causal: *causal,
        },
        &inputs,
    )?;
    let mut g: Grads = (0..3).map(|i| at.want(i).then_some(outs[i])).collect();
    if at.ins.len() == 4 {
        g.push(None);
    }
    Ok(Some(g))
}
