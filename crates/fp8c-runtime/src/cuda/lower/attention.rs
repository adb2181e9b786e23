//! The attention family on CUDA: no kernel yet. The session runs the decomposition of each
//! attention node into the unfused ops (`fp8c_passes::attention::decompose`) on a device
//! whose [`support`] says no, so a CUDA run still computes every fused attention.

use super::{Action, Lowerer, R, not_supported};
use crate::program::Step;
use fp8c_ir::{AttentionOp, Support};

/// Why CUDA does not run the family's ops itself.
const NO_KERNEL: &str = "no CUDA attention kernel yet (the session runs its unfused decomposition)";

/// Whether CUDA runs `op` (see [`super::support`]).
pub(crate) fn support(op: AttentionOp<'_>) -> Support {
    match op {
        AttentionOp::Attention { .. } | AttentionOp::AttentionGrad { .. } => Support::No(NO_KERNEL),
        AttentionOp::__Lifetime(never, _) => match never {},
    }
}

impl Lowerer<'_> {
    pub(super) fn lower_attention(&mut self, a: AttentionOp<'_>, step: &Step) -> R<Vec<Action>> {
        match support(a) {
            Support::No(why) => Err(not_supported(&step.op, why)),
            Support::Yes => Err(format!("internal: `{}` has no lowering", step.op.name())),
        }
    }
}
