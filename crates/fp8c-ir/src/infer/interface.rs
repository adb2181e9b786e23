//! Inference for the interface family: `input`, `param` and `state` have declared types
//! (nothing to infer); a `constant` has its value's type.

use super::InferInput;
use super::common::{Res, args};
use crate::{InterfaceOp, TensorType};

/// The output types of an interface op.
pub(super) fn infer(op: InterfaceOp<'_>, inputs: &[InferInput<'_>]) -> Res<Vec<TensorType>> {
    match op {
        InterfaceOp::Input { .. } | InterfaceOp::Param { .. } | InterfaceOp::State { .. } => {
            Err("interface ops have declared types; there is nothing to infer".into())
        }
        InterfaceOp::Constant { value } => {
            args(inputs, [])?;
            Ok(vec![value.ty()])
        }
        InterfaceOp::__Lifetime(never, _) => match never {},
    }
}
