//! Losses: what the training graph minimises, built on the model's output.
//!
//! - `ce`: mean softmax cross-entropy over the last axis with integer class labels (one
//!   `softmax_cross_entropy` node; its gradient is `softmax − onehot`, scaled by 1/N). The
//!   labels input has the output's shape without its class axis, i64.
//! - `mse`: `reduce_mean((y − target)²)` over every element; the target input has the
//!   output's type. Its gradient comes from the elementwise rules.
//! - `scalar`: the output is already the loss (a one-element float tensor).

use super::emit::Emit;
use fp8c_ir::{DType, IrError, Op, TensorType, Value};

/// The loss function.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Loss {
    /// Softmax cross-entropy with integer labels.
    CrossEntropy,
    /// Mean squared error against a target.
    Mse,
    /// The output itself is the loss.
    Scalar,
}

impl std::str::FromStr for Loss {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "ce" | "cross_entropy" => Ok(Loss::CrossEntropy),
            "mse" => Ok(Loss::Mse),
            "scalar" => Ok(Loss::Scalar),
            _ => Err(format!("unknown loss `{s}`; expected ce, mse or scalar")),
        }
    }
}

/// Adds the loss of `y` (and the labels/target input named `target`); returns the scalar loss.
pub(crate) fn build(
    e: &mut Emit<'_>,
    loss: Loss,
    y: Value,
    out_name: &str,
    target: &str,
) -> Result<Value, IrError> {
    let ty = e.ty(y);
    let dims = e.dims(y)?;
    let bad = |msg: String| IrError::Other(format!("loss on output \"{out_name}\" ({ty}): {msg}"));
    if !ty.dtype.is_float() || ty.dtype.is_fp8() {
        return Err(bad("a loss needs a float output".into()));
    }
    match loss {
        Loss::CrossEntropy => {
            let Some((_, lead)) = dims.split_last() else {
                return Err(bad("cross-entropy needs a class axis (the last one)".into()));
            };
            let labels = e.g.add_input(target, TensorType::fixed(DType::I64, lead))?;
            let outs = e.ops("loss", Op::SoftmaxCrossEntropy, &[y, labels])?;
            Ok(outs[0])
        }
        Loss::Mse => {
            let t = e.g.add_input(target, ty.clone())?;
            let d = e.sub("loss.diff", y, t)?;
            let sq = e.mul("loss.sq", d, d)?;
            e.op(
                "loss",
                Op::ReduceMean {
                    axes: None,
                    keepdims: false,
                },
                &[sq],
            )
        }
        Loss::Scalar => {
            if dims.iter().product::<u64>() != 1 {
                return Err(bad("loss `scalar` needs a one-element output".into()));
            }
            e.reshape("loss", y, &[])
        }
    }
}
