//! The cost model fusion optimises and the report prints: bytes moved plus a fixed cost per
//! kernel launch, both per step.
//!
//! - A **kernel** is every node that is not an interface node (`input`, `param`, `state`), a
//!   `constant` or a view. Views — `reshape`, `squeeze`, `unsqueeze`, `flatten`, `identity` —
//!   are free (no launch, no bytes): on a GPU they change the descriptor, not the data. A
//!   `transpose` moves data and is a kernel. A multi-output node is one kernel.
//! - A kernel **moves** the bytes of each distinct value it reads, once, plus the bytes of each
//!   output someone reads (an output nobody reads is not written: the fused kernels take
//!   optional output pointers, as cuBLASLt's amax-of-D pointer is optional). Sizes come from
//!   the tensor types; a dim that is not static counts as 0 bytes.
//! - **Cost** = bytes + [`LAUNCH_COST_BYTES`] per kernel.
//!
//! The same numbers drive extraction in the fusion pass and the `--report` totals, so the
//! report shows exactly what the pass optimised.

use fp8c_ir::{Graph, Op, TensorType, Value};
use serde::Serialize;
use std::collections::BTreeSet;

/// The cost of one kernel launch, in bytes: 4 MiB, what an H100 (3.35 TB/s HBM3) moves in
/// about 1.25 µs, the gap between two back-to-back kernels of a replayed CUDA graph. It makes
/// one launch worth more than any elementwise pass over a tensor below 4 MiB, so fusion wins
/// on small and medium tensors, and bytes decide between equal launch counts.
pub const LAUNCH_COST_BYTES: u64 = 4 << 20;

/// How the cost model counts an op (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KernelClass {
    /// No launch, no bytes: the graph interface, constants and views (the table's `view` flag).
    Free,
    /// A kernel launch moving its inputs and read outputs.
    Kernel,
    /// A kernel that maintains FP8 scaling state (amax, scales, histories).
    ScaleUpdate,
}

/// The cost class of `op`: one answer per op, exhaustive per family where the family has
/// more than one class, from the op table's `view` flag elsewhere.
pub fn kernel_class(op: &Op) -> KernelClass {
    use fp8c_ir::{Fp8Op, FusedOp, OpView};
    if op.props().view {
        return KernelClass::Free;
    }
    match op.view() {
        OpView::Interface(_) => KernelClass::Free,
        OpView::Fp8(f) => match f {
            Fp8Op::Amax | Fp8Op::ComputeScale { .. } | Fp8Op::AmaxHistoryUpdate => {
                KernelClass::ScaleUpdate
            }
            Fp8Op::QuantizeLinear { .. }
            | Fp8Op::DequantizeLinear { .. }
            | Fp8Op::Quantize { .. }
            | Fp8Op::Dequantize { .. }
            | Fp8Op::CastE8m0 { .. }
            | Fp8Op::BlockQuantize { .. }
            | Fp8Op::BlockDequantize { .. } => KernelClass::Kernel,
            Fp8Op::__Lifetime(never, _) => match never {},
        },
        OpView::Fused(f) => match f {
            FusedOp::BatchedScaleUpdate { .. } => KernelClass::ScaleUpdate,
            FusedOp::QuantizeAmax { .. }
            | FusedOp::CastTranspose { .. }
            | FusedOp::LayerNormQuantize { .. }
            | FusedOp::ElementwiseQuantize { .. }
            | FusedOp::ElementwiseBlockQuantize { .. }
            | FusedOp::LayerNormBlockQuantize { .. }
            | FusedOp::ScaledMatMulEpilogue { .. } => KernelClass::Kernel,
            FusedOp::__Lifetime(never, _) => match never {},
        },
        OpView::Elementwise(_)
        | OpView::Linalg(_)
        | OpView::Conv(_)
        | OpView::Pool(_)
        | OpView::Normalize(_)
        | OpView::Reduce(_)
        | OpView::Movement(_)
        | OpView::Loss(_)
        | OpView::Optim(_)
        | OpView::Attention(_) => KernelClass::Kernel,
    }
}

/// True for ops that are views (free: no launch, no bytes): the op table's `view` flag.
pub fn is_view(op: &Op) -> bool {
    op.props().view
}

/// True for nodes that are kernel launches.
pub fn is_kernel(op: &Op) -> bool {
    kernel_class(op) != KernelClass::Free
}

/// Bytes of a tensor type (0 when a dim is not static).
pub fn bytes_of(t: &TensorType) -> u64 {
    t.num_bytes().unwrap_or(0)
}

/// True for kernels that exist because of FP8: they read or write an FP8 tensor, or they
/// maintain scaling state. This is what `--report` counts per FP8 GEMM.
pub fn is_fp8_kernel(op: &Op, inputs: &[&TensorType], outputs: &[&TensorType]) -> bool {
    kernel_class(op) == KernelClass::ScaleUpdate
        || inputs.iter().chain(outputs).any(|t| t.dtype.is_fp8())
}

/// Per-step totals of a graph under the cost model.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct StepCost {
    /// Kernel launches.
    pub kernels: u64,
    /// Bytes moved by all kernels.
    pub bytes: u64,
    /// Kernels that exist because of FP8 ([`is_fp8_kernel`]).
    pub fp8_kernels: u64,
    /// Bytes moved to quantize activations (not params): all bytes of standalone
    /// `quantize`/`amax`/`quantize_amax`/`cast_transpose` kernels, and only the FP8 output and
    /// amax of fused producers (the kernel runs anyway; that is what quantization adds).
    pub act_quant_bytes: u64,
    /// Elements of the activations quantized.
    pub act_quant_elements: u64,
    /// One read of each quantized activation in its own type plus one FP8 write: the floor
    /// for a standalone quantizer.
    pub act_quant_floor_bytes: u64,
}

impl StepCost {
    /// Bytes + launches × [`LAUNCH_COST_BYTES`].
    pub fn cost(&self) -> u64 {
        self.bytes
            .saturating_add(self.kernels.saturating_mul(LAUNCH_COST_BYTES))
    }
}

fn is_param(g: &Graph, v: Value) -> bool {
    matches!(g.node(v.node).op, Op::Param { .. })
}

fn elements(t: &TensorType) -> u64 {
    t.num_elements().unwrap_or(0)
}

/// The per-step totals of `g`.
pub fn step_cost(g: &Graph) -> StepCost {
    let results: BTreeSet<Value> = g
        .outputs()
        .iter()
        .map(|o| o.value)
        .chain(g.state_updates().values().copied())
        .collect();
    let mut c = StepCost::default();
    for id in g.node_ids() {
        let n = g.node(id);
        if !is_kernel(&n.op) {
            continue;
        }
        let distinct: BTreeSet<Value> = n.inputs().iter().copied().collect();
        let in_types: Vec<&TensorType> = distinct.iter().map(|&v| g.value_type(v)).collect();
        let used: Vec<bool> = (0..n.outputs.len() as u32)
            .map(|s| {
                let v = Value::new(id, s);
                results.contains(&v) || !g.users(v).is_empty()
            })
            .collect();
        let written = |slot: usize| {
            if used[slot] {
                bytes_of(&n.outputs[slot])
            } else {
                0
            }
        };
        let bytes: u64 = in_types.iter().map(|t| bytes_of(t)).sum::<u64>()
            + (0..n.outputs.len()).map(written).sum::<u64>();
        c.kernels += 1;
        c.bytes += bytes;
        let out_types: Vec<&TensorType> = n.outputs.iter().collect();
        let all_in: Vec<&TensorType> = n.inputs().iter().map(|&v| g.value_type(v)).collect();
        if is_fp8_kernel(&n.op, &all_in, &out_types) {
            c.fp8_kernels += 1;
        }
        match &n.op {
            Op::Quantize { .. } | Op::QuantizeAmax { .. } | Op::CastTranspose { .. } | Op::Amax
                if !n.inputs().is_empty() && !is_param(g, n.inputs()[0]) =>
            {
                c.act_quant_bytes += bytes;
                if !matches!(n.op, Op::Amax) {
                    let x = g.value_type(n.inputs()[0]);
                    c.act_quant_elements += elements(x);
                    c.act_quant_floor_bytes += elements(x) * (x.dtype.size() as u64 + 1);
                }
            }
            Op::LayerNormQuantize { .. }
            | Op::ElementwiseQuantize { .. }
            | Op::ScaledMatMulEpilogue { to: Some(_), .. }
                if n.outputs.len() == 3 =>
            {
                c.act_quant_bytes += written(1) + written(2);
                let y = &n.outputs[0];
                c.act_quant_elements += elements(y);
                c.act_quant_floor_bytes += elements(y) * (y.dtype.size() as u64 + 1);
            }
            _ => {}
        }
    }
    c
}
