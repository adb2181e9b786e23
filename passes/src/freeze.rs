//! Freeze weights (inference only): the FP8 copies of the weights are computed once, at
//! compile time, and stored as FP8 params, so an inference program holds one byte per weight
//! element of its FP8 GEMMs instead of the f32 master weight, and does not re-quantize it on
//! every call (issue #17).
//!
//! A value is *frozen* when it is computed from params and constants alone (no input, no
//! state). The pass evaluates, with the CPU reference (the same kernels that would run), every
//! FP8-family node (`amax`, `compute_scale`, `quantize`, ...) whose inputs are all frozen, and
//! every data-movement node on frozen FP8 data (the transpose of a quantized weight). The
//! frozen results read by the rest of the graph become params (`{node}` names, data in the
//! weights); params no longer read are dropped. Results are bit-identical: the same ops run
//! on the same values, only earlier. Training graphs (and graphs whose weights are scaled from
//! state, as delayed scaling does) are left alone: their weights change or their scales do.

use crate::{Pass, PassCx};
use fp8c_ir::{Graph, IrError, Op, OpView, Tensor, Value};
use std::collections::HashMap;

/// The freeze-weights pass (see the module docs).
pub struct FreezeWeights;

impl Pass for FreezeWeights {
    fn name(&self) -> &'static str {
        "freeze-weights"
    }

    fn about(&self) -> &'static str {
        "inference: quantize weights once at compile time; FP8 params replace f32 master weights"
    }

    fn run(&self, g: &mut Graph, cx: &mut PassCx) -> Result<bool, IrError> {
        if cx.options.train.is_some() || cx.options.keep_weights {
            return Ok(false);
        }
        let f = freeze(g)?;
        let (frozen, dropped) = (f.nodes, f.dropped_params);
        cx.frozen_weight_bytes = (f.dropped_bytes, f.added_bytes);
        if frozen > 0 {
            cx.notes.push(format!(
                "freeze-weights: {frozen} weight-only FP8 node(s) evaluated at compile time; \
                 {dropped} f32 param(s) no longer held"
            ));
        }
        Ok(frozen > 0)
    }
}

/// Whether `op` is worth evaluating at compile time when its inputs are frozen: the FP8 family
/// (quantizing a weight), and data movement of FP8 data (its transpose).
fn freezable(op: &Op, out_is_fp8: bool) -> bool {
    match op.view() {
        OpView::Fp8(_) => true,
        OpView::Movement(_) => out_is_fp8,
        _ => false,
    }
}

/// What [`freeze`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Frozen {
    /// Nodes evaluated at compile time.
    pub nodes: usize,
    /// Params no longer read, dropped.
    pub dropped_params: usize,
    /// Their bytes.
    pub dropped_bytes: u64,
    /// Bytes of the params added (FP8 codes and scales).
    pub added_bytes: u64,
}

/// Freezes the weight-only FP8 nodes of `g`.
pub fn freeze(g: &mut Graph) -> Result<Frozen, IrError> {
    let mut added_bytes = 0u64;
    let mut values: HashMap<Value, Tensor> = HashMap::new();
    let mut evaluated = Vec::new();
    for id in g.topo_order()? {
        let n = g.node(id);
        match &n.op {
            Op::Param { name } => {
                if let Some(t) = g.weights().get(name) {
                    values.insert(Value::new(id, 0), t.clone());
                }
                continue;
            }
            Op::Constant { value } => {
                values.insert(Value::new(id, 0), value.clone());
                continue;
            }
            _ => {}
        }
        let out_is_fp8 = n.outputs.iter().any(|t| t.dtype.is_fp8());
        if !freezable(&n.op, out_is_fp8) {
            continue;
        }
        let Some(ins) = n
            .inputs()
            .iter()
            .map(|v| values.get(v))
            .collect::<Option<Vec<&Tensor>>>()
        else {
            continue;
        };
        let outs = fp8c_eval::eval_op(&n.op, &ins)
            .map_err(|e| IrError::node(&n.name, n.op.name(), e.to_string()))?;
        for (slot, t) in outs.into_iter().enumerate() {
            values.insert(Value::new(id, slot as u32), t);
        }
        evaluated.push(id);
    }
    // Keep only what quantizes a weight: FP8 results and the nodes leading to them (in
    // delayed scaling a weight's scale comes from state, so its amax alone is not worth
    // freezing: the weight stays f32 and is quantized each call).
    let mut keep: std::collections::HashSet<fp8c_ir::NodeId> = std::collections::HashSet::new();
    for &id in evaluated.iter().rev() {
        let n = g.node(id);
        let fp8_out = n.outputs.iter().any(|t| t.dtype.is_fp8());
        let feeds_kept = (0..n.outputs.len() as u32)
            .flat_map(|s| g.users(Value::new(id, s)))
            .any(|(u, _)| keep.contains(&u));
        if fp8_out || feeds_kept {
            keep.insert(id);
        }
    }
    evaluated.retain(|id| keep.contains(id));
    let is_evaluated: std::collections::HashSet<_> = evaluated.iter().copied().collect();
    // Results read by nodes that are not evaluated (or by the graph's outputs) become params.
    for &id in &evaluated {
        let (name, n_out) = (g.node(id).name.clone(), g.node(id).outputs.len());
        for slot in 0..n_out as u32 {
            let v = Value::new(id, slot);
            let outside =
                g.is_graph_result(v) || g.users(v).iter().any(|(u, _)| !is_evaluated.contains(u));
            if !outside {
                continue;
            }
            let t = values.remove(&v).expect("evaluated");
            let base = if n_out == 1 {
                name.clone()
            } else {
                format!("{name}.{slot}")
            };
            let pname = g.fresh_name(&base);
            added_bytes += t.bytes().len() as u64;
            let p = g.add_param(&pname, t.ty(), Some(t))?;
            g.replace_uses(v, p)?;
        }
    }
    // Params nobody reads any more (the f32 master weights of frozen GEMMs) go with DCE.
    let param_bytes = |g: &Graph| -> std::collections::HashMap<String, u64> {
        g.params()
            .iter()
            .map(|&p| {
                let n = g.node(p);
                (n.name.clone(), n.outputs[0].num_bytes().unwrap_or(0))
            })
            .collect()
    };
    let before = param_bytes(g);
    g.dce();
    for p in g.params().to_vec() {
        let v = Value::new(p, 0);
        if !evaluated.is_empty() && g.users(v).is_empty() && !g.is_graph_result(v) {
            g.remove_node(p)?;
        }
    }
    let after = param_bytes(g);
    let gone: Vec<u64> = before
        .iter()
        .filter(|(k, _)| !after.contains_key(*k))
        .map(|(_, &b)| b)
        .collect();
    let (dropped, dropped_bytes) = (gone.len(), gone.iter().sum::<u64>());
    Ok(Frozen {
        nodes: evaluated.len(),
        dropped_params: dropped,
        dropped_bytes,
        added_bytes,
    })
}
