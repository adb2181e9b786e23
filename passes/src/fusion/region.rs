//! From the graph to the e-graph: which nodes take part, and how they become e-nodes.
//!
//! The region is every node whose op some rule can look at: the FP8 ops of the scaling pass
//! (per-tile `block_quantize` included), `scaled_matmul`, `transpose`, `layer_norm` and the elementwise ops (the producers and
//! consumers that fuse into quantizers and GEMM epilogues). Every other value, interface
//! nodes and constants included, enters as an opaque leaf `%name`. One e-graph holds the whole
//! region; its connected parts simply do not touch. The roots are the region's values read
//! outside it: by other nodes, as graph outputs or as state updates.

use super::lang::{Fx, FxGraph, add_proj, attr_leaf_symbol, value_leaf};
use egg::{FromOp, Id, Symbol};
use fp8c_ir::{AmaxSource, Graph, IrError, NodeId, Op, Value};
use std::collections::{BTreeSet, HashMap};

/// True for ops that enter the e-graph as e-nodes.
pub fn is_region_op(op: &Op) -> bool {
    fp8c_ir::fused::is_program_op(op)
        || matches!(
            op,
            Op::LayerNormalization { .. }
                | Op::Transpose { .. }
                | Op::Quantize { .. }
                | Op::Amax
                | Op::AmaxHistoryUpdate
                | Op::ComputeScale { .. }
                | Op::ScaledMatMul { .. }
                | Op::BlockQuantize { .. }
        )
}

/// True for the FP8 ops whose presence makes fusion worth running.
fn is_fp8_op(op: &Op) -> bool {
    matches!(
        op,
        Op::Quantize { .. }
            | Op::Amax
            | Op::ComputeScale { .. }
            | Op::ScaledMatMul { .. }
            | Op::BlockQuantize { .. }
    )
}

/// The region of a graph in an e-graph.
pub struct Region {
    /// The e-graph (before any rule ran).
    pub egraph: FxGraph,
    /// Region values read outside the region, with their classes.
    pub roots: Vec<(Value, Id)>,
    /// Leaf symbol → the graph value it stands for.
    pub leaves: HashMap<Symbol, Value>,
    /// Each region node with its e-node as added (children as then).
    pub nodes: Vec<(NodeId, Fx)>,
    /// Number of FP8 ops in the region.
    pub fp8_ops: usize,
}

/// Builds the region of `g`.
pub fn build(g: &Graph) -> Result<Region, IrError> {
    let order = g.topo_order()?;
    let in_region = |id: NodeId| is_region_op(&g.node(id).op);
    let mut eg = FxGraph::default();
    let mut class_of: HashMap<Value, Id> = HashMap::new();
    let mut leaves = HashMap::new();
    let mut nodes = Vec::new();
    let mut fp8_ops = 0;
    for &id in &order {
        if !in_region(id) {
            continue;
        }
        let n = g.node(id);
        if is_fp8_op(&n.op) {
            fp8_ops += 1;
        }
        let mut children = Vec::with_capacity(n.inputs().len() + 1);
        let leaf = attr_leaf_symbol(&n.op.attrs())
            .map_err(|e| IrError::node(n.name.clone(), n.op.name(), e))?;
        if let Some(s) = leaf {
            children.push(eg.add(Fx::Sym(s)));
        }
        for &v in n.inputs() {
            let c = match class_of.get(&v) {
                Some(&c) => c,
                None => {
                    let p = g.node(v.node);
                    let name = if p.outputs.len() == 1 {
                        p.name.clone()
                    } else {
                        format!("{}#{}", p.name, v.slot)
                    };
                    let sym = value_leaf(&name);
                    eg.analysis.leaf_types.insert(sym, g.value_type(v).clone());
                    leaves.insert(sym, v);
                    let c = eg.add(Fx::Sym(sym));
                    class_of.insert(v, c);
                    c
                }
            };
            children.push(c);
        }
        let node = Fx::from_op(n.op.name(), children)
            .map_err(|e| IrError::node(n.name.clone(), n.op.name(), e.to_string()))?;
        let c = eg.add(node.clone());
        nodes.push((id, node));
        if n.outputs.len() == 1 {
            class_of.insert(Value::new(id, 0), c);
        } else {
            for k in 0..n.outputs.len() {
                let p = add_proj(&mut eg, k, c);
                class_of.insert(Value::new(id, k as u32), p);
            }
        }
    }
    let results: BTreeSet<Value> = g
        .outputs()
        .iter()
        .map(|o| o.value)
        .chain(g.state_updates().values().copied())
        .collect();
    let mut roots = Vec::new();
    for &(id, _) in &nodes {
        for k in 0..g.node(id).outputs.len() as u32 {
            let v = Value::new(id, k);
            let outside = results.contains(&v) || g.users(v).iter().any(|&(u, _)| !in_region(u));
            if outside {
                roots.push((v, class_of[&v]));
            }
        }
    }
    eg.analysis.batchable = batchable_histories(g, &results);
    eg.rebuild();
    Ok(Region {
        egraph: eg,
        roots,
        leaves,
        nodes,
        fp8_ops,
    })
}

/// Leaves of the amax histories whose update can be batched: the history is a state entry
/// and its `recorded` output feeds only a history-based `compute_scale` (the batched kernel
/// does not output it). Whoever reads the rolled history and the scales (state updates, the
/// training step's non-finite guard) reads the batched kernel's outputs instead; should that
/// make a cycle, extraction refuses it.
fn batchable_histories(g: &Graph, results: &BTreeSet<Value>) -> BTreeSet<Symbol> {
    let mut out = BTreeSet::new();
    for id in g.node_ids() {
        let n = g.node(id);
        if !matches!(n.op, Op::AmaxHistoryUpdate) {
            continue;
        }
        let h = n.inputs()[0];
        if !matches!(g.node(h.node).op, Op::State { .. }) {
            continue;
        }
        let users = g.users(Value::new(id, 0));
        let [(cs, 0)] = users.as_slice() else {
            continue;
        };
        let cs_node = g.node(*cs);
        let history_based = matches!(
            cs_node.op,
            Op::ComputeScale { source, .. } if source != AmaxSource::Current
        );
        if history_based && !results.contains(&Value::new(id, 0)) {
            out.insert(value_leaf(&g.node(h.node).name));
        }
    }
    out
}
