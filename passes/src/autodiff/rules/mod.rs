//! Gradient rules (vector-Jacobian products), one file per op family.
//!
//! A rule receives the forward node (its op, input values, output values), the adjoints of its
//! outputs (`None` where an output has none: it then counts as zero) and which inputs want a
//! gradient, and returns one optional adjoint per input. It builds the backward computation
//! from ordinary IR ops (plus the backward ops of `op.rs`'s training block) and may read any
//! forward value: the forward and backward passes are one graph.
//!
//! To add a rule: pick the family file, add an arm to its `vjp` and a gradient check in
//! `passes/tests/autodiff_gradcheck.rs`. Ops that have no gradient (comparisons, shapes,
//! integer ops) need no rule: integer and bool values carry no adjoint.

mod conv;
mod elementwise;
mod linalg;
mod movement;
mod normalize;
mod reduce;

pub(crate) use linalg::broadcast_dims as broadcast_batch;

use super::emit::Emit;
use super::fp8::GradQuantizer;
use fp8c_ir::{IrError, Op, Value};

/// One adjoint per forward input (None: no gradient, or not wanted).
pub(crate) type Grads = Vec<Option<Value>>;

type R<T> = Result<T, IrError>;

/// The forward node a rule differentiates.
pub(crate) struct At<'n> {
    /// Node name (backward nodes are named after it).
    pub name: &'n str,
    /// The forward op.
    pub op: &'n Op,
    /// Its input values.
    pub ins: &'n [Value],
    /// Its output values.
    pub outs: &'n [Value],
    /// The adjoints of its outputs.
    pub dys: &'n [Option<Value>],
    /// Which inputs want a gradient.
    pub wants: &'n [bool],
}

impl At<'_> {
    /// The adjoint of output 0 (the driver calls a rule only when some output has one; for
    /// single-output ops that is this one).
    pub fn dy(&self) -> R<Value> {
        self.dys.first().copied().flatten().ok_or_else(|| {
            IrError::node(
                self.name,
                self.op.name(),
                "internal: no adjoint for output 0",
            )
        })
    }

    /// A backward node name: `{node}.{suffix}`.
    pub fn n(&self, suffix: &str) -> String {
        format!("{}.{suffix}", self.name)
    }

    /// True if input `i` wants a gradient.
    pub fn want(&self, i: usize) -> bool {
        self.wants.get(i).copied().unwrap_or(false)
    }

    /// An error about this node.
    pub fn err(&self, msg: impl Into<String>) -> IrError {
        IrError::node(self.name, self.op.name(), msg)
    }
}

/// The gradient rule of `at.op`: Some(adjoints per input), or None when the op has no rule.
pub(crate) fn vjp(e: &mut Emit<'_>, q: &mut GradQuantizer, at: &At<'_>) -> R<Option<Grads>> {
    let op = at.op;
    if op.is_elementwise_unary() || op.is_elementwise_binary() {
        return elementwise::vjp(e, at);
    }
    match op {
        Op::Where | Op::Clip | Op::Cast { .. } => elementwise::vjp(e, at),
        Op::MatMul | Op::Gemm { .. } => linalg::vjp(e, at),
        Op::Quantize { .. } | Op::Dequantize { .. } | Op::ScaledMatMul { .. } => {
            super::fp8::vjp(e, q, at)
        }
        // Scaling bookkeeping carries no gradient (quantize's scale input is not differentiated).
        Op::Amax | Op::ComputeScale { .. } | Op::AmaxHistoryUpdate => {
            Ok(Some(vec![None; at.ins.len()]))
        }
        Op::Conv { .. }
        | Op::MaxPool { .. }
        | Op::AveragePool { .. }
        | Op::GlobalAveragePool
        | Op::GlobalMaxPool => conv::vjp(e, at),
        Op::LayerNormalization { .. }
        | Op::BatchNormalization { .. }
        | Op::Softmax { .. }
        | Op::LogSoftmax { .. }
        | Op::SoftmaxCrossEntropy => normalize::vjp(e, at),
        Op::ReduceMean { .. }
        | Op::ReduceSum { .. }
        | Op::ReduceMax { .. }
        | Op::ReduceMin { .. } => reduce::vjp(e, at),
        _ => movement::vjp(e, at),
    }
}
