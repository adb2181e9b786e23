//! Output-type inference: one rule per op. The builder, the verifier, the importer and
//! canonicalize all use [`infer`]; it never panics, whatever the inputs.

use crate::{Dim, Op, Tensor, TensorType};

/// What inference knows about one input: its type and, if it is a constant, its value.
#[derive(Clone, Copy, Debug)]
pub struct InferInput<'a> {
    /// The input's type.
    pub ty: &'a TensorType,
    /// Its value, when produced by a `constant` node.
    pub value: Option<&'a Tensor>,
}

/// The output types of `op` applied to `inputs`, or a message saying what is wrong
/// (the caller adds the node's name).
pub fn infer(op: &Op, inputs: &[InferInput<'_>]) -> Result<Vec<TensorType>, String> {
    let _ = Dim::Unknown;
    match op {
        Op::Input { .. } | Op::Param { .. } | Op::State { .. } => {
            Err("interface ops have declared types".into())
        }
        Op::Constant { value } => Ok(vec![value.ty()]),
        _ if op.is_elementwise_unary() => {
            let [x] = inputs else { return Err(format!("expects 1 input, got {}", inputs.len())) };
            Ok(vec![x.ty.clone()])
        }
        _ => Err(format!("no type rule for `{}` yet", op.name())),
    }
}
