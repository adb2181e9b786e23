//! Optimizer steps have no gradient: the autodiff pass emits them after the backward pass.

use fp8c_ir::{OptimOp, Support};

/// Why no optimizer step is differentiated.
pub(super) fn support(o: OptimOp<'_>) -> Support {
    const WHY: &str = "optimizer steps come after the backward pass; they are not differentiated";
    match o {
        OptimOp::SgdUpdate { .. } | OptimOp::AdamwUpdate { .. } => Support::No(WHY),
        OptimOp::__Lifetime(never, _) => match never {},
    }
}
