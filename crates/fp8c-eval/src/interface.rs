//! The interface family: `constant` evaluates to its value; `input`, `param` and `state` have
//! no evaluation (the caller feeds their values), which is an [`ErrorKind::Interface`] error.

use crate::args;
use crate::error::{ErrorKind, Fail, KResult};
use fp8c_ir::{InterfaceOp, Support, Tensor};

/// Why the graph interface is not evaluated (the error message and the [`support`] reason).
const FED_BY_THE_CALLER: &str = "graph interface: fed by the caller";

/// Evaluates an op of the interface family.
pub(crate) fn eval(op: InterfaceOp<'_>, inputs: &[&Tensor]) -> KResult<Vec<Tensor>> {
    match op {
        InterfaceOp::Input { .. } | InterfaceOp::Param { .. } | InterfaceOp::State { .. } => {
            Err(Fail::new(
                ErrorKind::Interface,
                "graph interface ops have no evaluation; their values are fed by the caller",
            ))
        }
        InterfaceOp::Constant { value } => {
            args::<0>(inputs)?;
            Ok(vec![value.clone()])
        }
        InterfaceOp::__Lifetime(never, _) => match never {},
    }
}

/// `constant` is evaluated; the graph interface is not.
pub(crate) fn support(op: InterfaceOp<'_>) -> Support {
    match op {
        InterfaceOp::Input { .. } | InterfaceOp::Param { .. } | InterfaceOp::State { .. } => {
            Support::No(FED_BY_THE_CALLER)
        }
        InterfaceOp::Constant { .. } => Support::Yes,
        InterfaceOp::__Lifetime(never, _) => match never {},
    }
}
