//! Fused ops have no gradient rules: autodiff runs before fusion, on the unfused ops whose
//! rules cover them.

use fp8c_ir::{FusedOp, Support};

/// Why no fused op is differentiated.
pub(super) fn support(o: FusedOp<'_>) -> Support {
    const WHY: &str = "fused ops are made after autodiff; differentiate the unfused graph";
    match o {
        FusedOp::QuantizeAmax { .. }
        | FusedOp::CastTranspose { .. }
        | FusedOp::LayerNormQuantize { .. }
        | FusedOp::ElementwiseQuantize { .. }
        | FusedOp::ElementwiseBlockQuantize { .. }
        | FusedOp::LayerNormBlockQuantize { .. }
        | FusedOp::ScaledMatMulEpilogue { .. }
        | FusedOp::BatchedScaleUpdate { .. } => Support::No(WHY),
        FusedOp::__Lifetime(never, _) => match never {},
    }
}
