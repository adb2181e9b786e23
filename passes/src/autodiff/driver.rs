//! The reverse-mode driver: walks the forward graph backwards from the loss, asks each node's
//! gradient rule for its inputs' adjoints, and sums the adjoints of values read more than once.
//!
//! Invariants:
//! - Only nodes that lie on a path from a target (a trained parameter) to the loss are
//!   differentiated, and only through differentiable values (float types, FP8 included;
//!   integer and bool values carry no gradient).
//! - The adjoint of a value has the value's dtype and shape, except that the adjoint of an
//!   FP8 value is f32: it is the adjoint of the real number the FP8 code stands for
//!   (`q · scale_inv`), which is what the quantize/dequantize/scaled_matmul rules exchange.
//! - Nodes are visited in reverse deterministic topological order, so the backward graph (and
//!   every summation order in it) is the same on every run.
//! - Ops without a rule are errors only when a gradient actually has to flow through them;
//!   all such ops are reported at once.

use super::emit::Emit;
use super::fp8::GradQuantizer;
use super::rules::{self, At};
use fp8c_ir::{DType, Graph, IrError, NodeId, Value};
use std::collections::{BTreeSet, HashMap, HashSet};

type R<T> = Result<T, IrError>;

/// True for values that carry a gradient.
pub(crate) fn differentiable(g: &Graph, v: Value) -> bool {
    g.value_type(v).dtype.is_float()
}

/// The dtype of a value's adjoint (f32 for FP8 values).
pub(crate) fn adjoint_dtype(d: DType) -> DType {
    if d.is_fp8() { DType::F32 } else { d }
}

/// Each target's gradient (None where the loss does not depend on it) and every adjoint.
type Backprop = (Vec<Option<Value>>, HashMap<Value, Value>);

/// Backpropagates `seed` (the adjoint of `loss`) to every target; returns each target's
/// gradient, or None when the loss does not depend on it, and the adjoint of every value that
/// got one (what the memory options wait on).
pub(crate) fn backprop(
    g: &mut Graph,
    loss: Value,
    seed: Value,
    targets: &[Value],
    quant: &mut GradQuantizer,
) -> R<Backprop> {
    let order = g.topo_order()?;
    let target_nodes: HashSet<NodeId> = targets.iter().map(|v| v.node).collect();

    // Forward from the targets through differentiable values.
    let mut active: HashSet<NodeId> = HashSet::new();
    for &id in &order {
        let n = g.node(id);
        let reached = target_nodes.contains(&id)
            || n.inputs()
                .iter()
                .any(|&v| active.contains(&v.node) && differentiable(g, v));
        if reached {
            active.insert(id);
        }
    }
    // Backward from the loss.
    let mut useful: HashSet<NodeId> = HashSet::from([loss.node]);
    for &id in order.iter().rev() {
        if useful.contains(&id) {
            for v in g.node(id).inputs() {
                useful.insert(v.node);
            }
        }
    }

    let mut adj: HashMap<Value, Value> = HashMap::from([(loss, seed)]);
    let mut missing: BTreeSet<String> = BTreeSet::new();
    for &id in order.iter().rev() {
        if !(active.contains(&id) && useful.contains(&id)) {
            continue;
        }
        let n = g.node(id).clone();
        if n.op.is_interface() {
            continue;
        }
        let outs: Vec<Value> = (0..n.outputs.len() as u32)
            .map(|s| Value::new(id, s))
            .collect();
        let dys: Vec<Option<Value>> = outs.iter().map(|v| adj.get(v).copied()).collect();
        if dys.iter().all(Option::is_none) {
            continue;
        }
        let wants: Vec<bool> = n
            .inputs()
            .iter()
            .map(|&v| active.contains(&v.node) && differentiable(g, v))
            .collect();
        if !wants.iter().any(|&w| w) {
            continue;
        }
        let at = At {
            name: &n.name,
            op: &n.op,
            ins: n.inputs(),
            outs: &outs,
            dys: &dys,
            wants: &wants,
        };
        let mut e = Emit::new(g);
        let Some(grads) = rules::vjp(&mut e, quant, &at)? else {
            let why = match rules::differentiability(&n.op) {
                fp8c_ir::Support::No(why) => why,
                fp8c_ir::Support::Yes => "internal: its rule gave no gradient",
            };
            missing.insert(format!("`{}` (node \"{}\": {why})", n.op.name(), n.name));
            continue;
        };
        for (i, (&v, d)) in n.inputs().iter().zip(grads).enumerate() {
            let Some(d) = d.filter(|_| wants[i]) else {
                continue;
            };
            let want_ty = e.g.value_type(v).clone();
            let got = e.g.value_type(d).clone();
            if got.shape != want_ty.shape || got.dtype != adjoint_dtype(want_ty.dtype) {
                return Err(IrError::node(
                    n.name.clone(),
                    n.op.name(),
                    format!(
                        "internal: the gradient rule gave {got} for input {i}, which is {want_ty}"
                    ),
                ));
            }
            let acc = match adj.get(&v) {
                Some(&prev) => e.add(&format!("{}.dacc", n.name), prev, d)?,
                None => d,
            };
            adj.insert(v, acc);
        }
    }
    if !missing.is_empty() {
        return Err(IrError::Other(format!(
            "autodiff: no gradient rule for {} on the path from the parameters to the loss: {}",
            if missing.len() == 1 {
                "this op"
            } else {
                "these ops"
            },
            missing.into_iter().collect::<Vec<_>>().join(", ")
        )));
    }
    let grads = targets.iter().map(|t| adj.get(t).copied()).collect();
    Ok((grads, adj))
}
