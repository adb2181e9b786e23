//! From the extracted selection back to the graph.
//!
//! Every root (a region value read outside the region) is computed by its selected node.
//! A node equal to an input graph node with the same inputs *is* that node (kept, with its
//! id and name); any other node is added, named after the node it replaces: a fused kernel
//! after its anchor (the GEMM for an epilogue, the quantize for a quantizer, the LayerNorm for
//! `layer_norm_quantize`), an unfused node whose inputs changed after its old self. Readers of
//! the roots are rewired, dead nodes removed, and the new nodes get their names back once
//! the nodes they replace are gone.

use super::extract::Selection;
use super::lang::{Fx, FxGraph, lookup_proj, node_op, slot_of};
use super::region::Region;
use egg::{FromOp, Id, Language};
use fp8c_ir::{Graph, IrError, NodeId, Op, Value};
use std::collections::HashMap;

/// The name of the batched scale update (it replaces one node per tensor).
pub const BATCHED_UPDATE_NAME: &str = "fp8.scale_update";

struct Rebuilder<'a> {
    eg: &'a FxGraph,
    region: &'a Region,
    sel: &'a Selection,
    /// Input graph nodes by the canonical class of their e-node, with that e-node.
    originals: HashMap<Id, Vec<(NodeId, Fx)>>,
    values: HashMap<Id, Value>,
    kernels: HashMap<Id, NodeId>,
    /// Nodes added, with the name they should end up with.
    added: Vec<(NodeId, String)>,
}

/// Rewrites `g` to compute its region as `sel` says. Returns whether anything changed.
pub fn rebuild(
    g: &mut Graph,
    eg: &FxGraph,
    region: &Region,
    sel: &Selection,
) -> Result<bool, IrError> {
    let mut originals: HashMap<Id, Vec<(NodeId, Fx)>> = HashMap::new();
    for (id, node) in &region.nodes {
        let canonical = node.clone().map_children(|c| eg.find(c));
        let class = eg.lookup(canonical.clone()).ok_or_else(|| {
            IrError::Other(format!(
                "fusion: node \"{}\" is missing from the e-graph",
                g.node(*id).name
            ))
        })?;
        originals
            .entry(eg.find(class))
            .or_default()
            .push((*id, canonical));
    }
    let mut r = Rebuilder {
        eg,
        region,
        sel,
        originals,
        values: HashMap::new(),
        kernels: HashMap::new(),
        added: Vec::new(),
    };
    let mut replace = Vec::new();
    for &(old, class) in &region.roots {
        let new = r.value(g, class)?;
        if new != old {
            replace.push((old, new));
        }
    }
    for &(old, new) in &replace {
        g.replace_uses(old, new)?;
    }
    let changed = !replace.is_empty();
    if changed {
        g.dce();
    }
    for (id, name) in std::mem::take(&mut r.added) {
        if g.contains(id) {
            g.rename_node(id, &name);
        }
    }
    Ok(changed)
}

impl Rebuilder<'_> {
    /// The graph value computing value class `c`.
    fn value(&mut self, g: &mut Graph, c: Id) -> Result<Value, IrError> {
        let c = self.eg.find(c);
        if let Some(&v) = self.values.get(&c) {
            return Ok(v);
        }
        let v = match self.sel.node(self.eg, c).clone() {
            Fx::Sym(s) => *self.region.leaves.get(&s).ok_or_else(|| {
                IrError::Other(format!("fusion: leaf {s} stands for no graph value"))
            })?,
            Fx::Proj([k, t]) => {
                let slot = super::lang::slot_of(self.eg, k).unwrap_or(0) as u32;
                Value::new(self.kernel(g, t)?, slot)
            }
            Fx::Slot(_) => {
                return Err(IrError::Other("fusion: a slot selected as a value".into()));
            }
            _ => Value::new(self.kernel(g, c)?, 0),
        };
        self.values.insert(c, v);
        Ok(v)
    }

    /// The graph node computing the selected op node of class `c` (a value or a tuple).
    fn kernel(&mut self, g: &mut Graph, c: Id) -> Result<NodeId, IrError> {
        let c = self.eg.find(c);
        if let Some(&id) = self.kernels.get(&c) {
            return Ok(id);
        }
        let node = self.sel.node(self.eg, c).clone();
        let (op, inputs) =
            node_op(self.eg, &node).map_err(|e| IrError::Other(format!("fusion: {e}")))?;
        let mut values = Vec::with_capacity(inputs.len());
        for i in inputs {
            values.push(self.value(g, i)?);
        }
        let reuse = self.originals.get(&c).and_then(|list| {
            list.iter()
                .find(|(id, n)| *n == node && g.node(*id).inputs() == values.as_slice())
                .map(|(id, _)| *id)
        });
        let id = match reuse {
            Some(id) => id,
            None => {
                let name = self.name_for(g, c, &op);
                let id = g.add_node(&name, op, &values)?[0].node;
                self.added.push((id, name));
                id
            }
        };
        self.kernels.insert(c, id);
        Ok(id)
    }

    /// The first input graph node of class `c`, if any.
    fn original_name(&self, g: &Graph, c: Option<Id>) -> Option<String> {
        let c = self.eg.find(c?);
        let (id, _) = self.originals.get(&c)?.first()?;
        Some(g.node(*id).name.clone())
    }

    /// The name of a node added for class `c`: after the node it replaces.
    fn name_for(&self, g: &Graph, c: Id, op: &Op) -> String {
        let proj = |k: usize| lookup_proj(self.eg, k, c);
        let anchor = match op {
            Op::QuantizeAmax { .. } | Op::CastTranspose { .. } | Op::LayerNormQuantize { .. } => {
                self.original_name(g, proj(0))
            }
            Op::ElementwiseQuantize { .. } => self.original_name(g, proj(1)),
            // Its codes are output 0 of the block_quantize it replaces, a tuple node.
            Op::ElementwiseBlockQuantize { .. } | Op::LayerNormBlockQuantize { .. } => proj(1)
                .and_then(|q| {
                    self.eg[q].nodes.iter().find_map(|n| match n {
                        Fx::Proj([k, t]) if slot_of(self.eg, *k) == Some(0) => {
                            self.original_name(g, Some(*t))
                        }
                        _ => None,
                    })
                }),
            Op::ScaledMatMulEpilogue { .. } => self.gemm_name(g, c),
            Op::BatchedScaleUpdate { .. } => Some(BATCHED_UPDATE_NAME.to_string()),
            _ => None,
        };
        anchor
            .or_else(|| self.original_name(g, Some(c)))
            .unwrap_or_else(|| op.name().to_string())
    }

    /// The name of the `scaled_matmul` an epilogue node of class `c` extends.
    fn gemm_name(&self, g: &Graph, c: Id) -> Option<String> {
        let node = self.sel.node(self.eg, c);
        let (
            Op::ScaledMatMulEpilogue {
                out, fast_accum, ..
            },
            ins,
        ) = node_op(self.eg, node).ok()?
        else {
            return None;
        };
        let leaf =
            fp8c_ir::fused::compact_attrs(&Op::ScaledMatMul { out, fast_accum }.attrs()).ok()?;
        let leaf = self.eg.lookup(Fx::Sym(format!("{{{leaf}}}").into()))?;
        let mut gemm = vec![leaf];
        gemm.extend_from_slice(ins.get(..4)?);
        let product = self.eg.lookup(Fx::from_op("scaled_matmul", gemm).ok()?)?;
        self.original_name(g, Some(product))
    }
}
