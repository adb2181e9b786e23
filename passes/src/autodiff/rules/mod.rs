//! Gradient rules (vector-Jacobian products), one file per op family.
//!
//! A rule receives the forward node (its op, input values, output values), the adjoints of its
//! outputs (`None` where an output has none: it then counts as zero) and which inputs want a
//! gradient, and returns one optional adjoint per input. It builds the backward computation
//! from ordinary IR ops (plus the backward ops of `op.rs`'s training block) and may read any
//! forward value: the forward and backward passes are one graph.
//!
//! One file per op family (the families of `fp8c_ir::op`). Each states, in an exhaustive
//! `support` match, whether every op of its family has a rule or why not; elementwise rules
//! come from the table's derivative formulas. To add a rule: the family file's `support` and
//! `vjp`, and a gradient check in `passes/tests/autodiff_gradcheck.rs`. Integer and bool
//! values carry no adjoint, so rules never see them.

mod attention;
mod conv;
mod elementwise;
mod fp8;
mod fused;
mod linalg;
mod loss;
mod movement;
mod normalize;
mod optim;
mod pool;
mod reduce;

pub(crate) use linalg::broadcast_dims as broadcast_batch;

use super::emit::Emit;
use super::fp8::GradQuantizer;
use fp8c_ir::{IrError, LinalgOp, Op, OpView, Support, Value};

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

/// Why the gradient ops the autodiff pass emits have no rule of their own.
const SECOND_ORDER: &str = "it is a gradient op; second-order gradients are not supported";
/// Why ops with bool or integer results carry no gradient.
const NOT_FLOAT: &str = "its result is not a float function of its inputs";

/// Whether `op` has a gradient rule (`Yes`), or why not: one exhaustive answer per family, so
/// a new op must state one (the coverage test walks every op).
pub fn differentiability(op: &Op) -> Support {
    match op.view() {
        OpView::Interface(_) => Support::Yes,
        OpView::Elementwise(o) => elementwise::support(o),
        OpView::Linalg(o) => linalg::support(o),
        OpView::Conv(o) => conv::support(o),
        OpView::Pool(o) => pool::support(o),
        OpView::Normalize(o) => normalize::support(o),
        OpView::Reduce(o) => reduce::support(o),
        OpView::Movement(o) => movement::support(o),
        OpView::Fp8(o) => fp8::support(o),
        OpView::Loss(o) => loss::support(o),
        OpView::Optim(o) => optim::support(o),
        OpView::Fused(o) => fused::support(o),
        OpView::Attention(o) => attention::support(o),
    }
}

/// The gradient rule of `at.op`: Some(adjoints per input), or None when the op has no rule
/// ([`differentiability`] says why).
pub(crate) fn vjp(e: &mut Emit<'_>, q: &mut GradQuantizer, at: &At<'_>) -> R<Option<Grads>> {
    if let Support::No(_) = differentiability(at.op) {
        return Ok(None);
    }
    match at.op.view() {
        // A constant has no inputs; graph inputs, params and state are where gradients stop.
        OpView::Interface(_) => Ok(Some(vec![None; at.ins.len()])),
        OpView::Elementwise(o) => elementwise::vjp(o, e, at),
        OpView::Linalg(LinalgOp::ScaledMatMul { .. } | LinalgOp::BlockScaledMatMul { .. })
        | OpView::Fp8(_) => fp8::vjp(e, q, at),
        OpView::Linalg(_) => linalg::vjp(e, at),
        OpView::Conv(_) => conv::vjp(e, at),
        OpView::Pool(_) => pool::vjp(e, at),
        OpView::Normalize(_) => normalize::vjp(e, at),
        OpView::Reduce(_) => reduce::vjp(e, at),
        OpView::Movement(_) => movement::vjp(e, at),
        OpView::Loss(_) => loss::vjp(e, at),
        OpView::Attention(_) => attention::vjp(e, at),
        OpView::Optim(_) | OpView::Fused(_) => Ok(None),
    }
}
