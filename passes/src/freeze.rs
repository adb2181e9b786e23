//! Freeze weights (inference only): the FP8 copies of the weights are computed once, at
//! compile time, and stored as FP8 params, so an inference program holds one byte per weight
//! element of its FP8 GEMMs instead of the f32 master weight, and does not re-quantize it on
//! every call (issue #17).
//!
//! A value is *frozen* when it is computed from params and constants alone (no input, no
//! state). The pass evaluates, with the CPU reference (the same kernels that would run), every
//! FP8-family node (`amax`, `compute_scale`, `quantize`, ...) whose inputs are all frozen and
//! that leads to an FP8 result, with the pure movement and elementwise nodes on the way: the
//! transpose of a quantized weight, and the ops an export builds a weight with (ONNX zoo's
//! "light" models fill theirs with `ConstantOfShape`, which ResNet-50's FP8 run had filled,
//! measured and quantized again on every call: 52 weights, 23M elements). The
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

/// Whether `op` may be evaluated at compile time when its inputs are frozen: the FP8 family
/// (quantizing a weight) and the pure ops an export builds or moves a weight with (an
/// `ConstantOfShape` fill, a cast, a transpose). Only those leading to an FP8 result are
/// kept (see [`freeze`]), so an f32 computation on weights alone is not moved to compile
/// time unless a quantize reads it.
fn freezable(op: &Op) -> bool {
    match op.view() {
        OpView::Fp8(_) => true,
        OpView::Movement(_) | OpView::Elementwise(_) => !op.is_interface(),
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

/// Freezes the weight-only FP8 nodes of `g`. Nodes are evaluated in order, each result
/// dropped after its last reader, and each f32 weight read only by frozen nodes leaves the
/// graph as soon as its last frozen reader has run, so a model's f32 weights and all their
/// FP8 copies are never resident together (the pass manager's backup holds weights by
/// handle, not by value).
pub fn freeze(g: &mut Graph) -> Result<Frozen, IrError> {
    use std::collections::HashSet;
    let order = g.topo_order()?;
    // Which nodes can be evaluated: freezable ones whose inputs all come from params with
    // data, constants or other such nodes.
    let mut known: HashSet<fp8c_ir::NodeId> = HashSet::new();
    let mut candidates = Vec::new();
    for &id in &order {
        let n = g.node(id);
        let ok = match &n.op {
            Op::Param { name } => g.weights().contains_key(name),
            Op::Constant { .. } => true,
            op => {
                let from_known = n.inputs().iter().all(|v| known.contains(&v.node));
                let ok = freezable(op) && from_known;
                if ok {
                    candidates.push(id);
                }
                ok
            }
        };
        if ok {
            known.insert(id);
        }
    }
    // Keep only what quantizes a weight: FP8 results and the nodes leading to them (in
    // delayed scaling a weight's scale comes from state, so its amax alone is not worth
    // freezing: the weight stays f32 and is quantized each call).
    let mut keep: HashSet<fp8c_ir::NodeId> = HashSet::new();
    for &id in candidates.iter().rev() {
        let n = g.node(id);
        let fp8_out = n.outputs.iter().any(|t| t.dtype.is_fp8());
        let feeds_kept = (0..n.outputs.len() as u32)
            .flat_map(|s| g.users(Value::new(id, s)))
            .any(|(u, _)| keep.contains(&u));
        if fp8_out || feeds_kept {
            keep.insert(id);
        }
    }
    let evaluated: Vec<fp8c_ir::NodeId> = candidates
        .into_iter()
        .filter(|id| keep.contains(id))
        .collect();
    // Readers left among the evaluated nodes, per value they read.
    let mut readers: HashMap<Value, usize> = HashMap::new();
    for &id in &evaluated {
        for v in g.node(id).inputs() {
            *readers.entry(*v).or_default() += 1;
        }
    }
    // A value read outside the evaluated nodes (or a graph result) is needed afterwards.
    let read_outside = |g: &Graph, v: Value| {
        g.is_graph_result(v) || g.users(v).iter().any(|(u, _)| !keep.contains(u))
    };
    let mut values: HashMap<Value, Tensor> = HashMap::new();
    let mut results: Vec<(Value, Tensor)> = Vec::new();
    for &id in &evaluated {
        let n = g.node(id);
        let mut ins = Vec::with_capacity(n.inputs().len());
        for v in n.inputs() {
            let t = match &g.node(v.node).op {
                Op::Param { name } => g.weights().get(name).cloned(),
                Op::Constant { value } => Some(value.clone()),
                _ => values.get(v).cloned(),
            };
            ins.push(t.ok_or_else(|| {
                IrError::node(
                    &n.name,
                    n.op.name(),
                    format!("internal: {v:?} is not frozen"),
                )
            })?);
        }
        let refs: Vec<&Tensor> = ins.iter().collect();
        let outs = fp8c_eval::eval_op(&n.op, &refs)
            .map_err(|e| IrError::node(&n.name, n.op.name(), e.to_string()))?;
        drop(refs);
        drop(ins);
        for (slot, t) in outs.into_iter().enumerate() {
            let v = Value::new(id, slot as u32);
            if read_outside(g, v) {
                results.push((v, t.clone()));
            }
            if readers.get(&v).is_some_and(|&r| r > 0) {
                values.insert(v, t);
            }
        }
        // Inputs read for the last time: drop them, and an f32 weight nothing else reads.
        let inputs: Vec<Value> = g.node(id).inputs().to_vec();
        for v in inputs {
            let left = readers.get_mut(&v).map(|r| {
                *r -= 1;
                *r
            });
            if left != Some(0) {
                continue;
            }
            values.remove(&v);
            if let Op::Param { name } = &g.node(v.node).op
                && !read_outside(g, v)
            {
                let name = name.clone();
                g.take_weight(&name);
            }
        }
    }
    let mut added_bytes = 0u64;
    // Results read by nodes that are not evaluated (or by the graph's outputs) become params.
    for (v, t) in results {
        let (name, n_out) = (g.node(v.node).name.clone(), g.node(v.node).outputs.len());
        let base = if n_out == 1 {
            name.clone()
        } else {
            format!("{name}.{}", v.slot)
        };
        let pname = g.fresh_name(&base);
        added_bytes += t.bytes().len() as u64;
        let p = g.add_param(&pname, t.ty(), Some(t))?;
        g.replace_uses(v, p)?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use fp8c_ir::{AmaxSource, DType, TensorType};
    use fp8c_runtime::{Backend, CpuBackend};

    /// `x[2,4] · dequantize(quantize(w))` where `w = constant_of_shape([4, 3])` filled with
    /// 0.75 (how ONNX zoo's light models build their weights) and `w` is scaled from its own
    /// amax, as current scaling does.
    fn built_weight() -> Graph {
        let mut g = Graph::new("built_weight");
        let x = g
            .add_input("x", TensorType::fixed(DType::F32, &[2, 4]))
            .unwrap();
        let dims = Tensor::from_vec(DType::I64, vec![2], vec![4i64, 3]).unwrap();
        let shape = g
            .add_node("shape", Op::Constant { value: dims }, &[])
            .unwrap()[0];
        let fill = Tensor::from_f32(vec![1], &[0.75]);
        let w = g
            .add_node("w", Op::ConstantOfShape { value: fill }, &[shape])
            .unwrap()[0];
        let amax = g.add_node("w.amax", Op::Amax, &[w]).unwrap()[0];
        let one = g
            .add_node(
                "w.scale_init",
                Op::Constant {
                    value: Tensor::from_f32(vec![], &[1.0]),
                },
                &[],
            )
            .unwrap()[0];
        let scale = g
            .add_node(
                "w.compute_scale",
                Op::ComputeScale {
                    fmt: DType::F8E4M3,
                    margin: 0.0,
                    source: AmaxSource::Current,
                    epsilon: 0.0,
                    power_2: false,
                },
                &[amax, one],
            )
            .unwrap();
        let q = g
            .add_node(
                "w.q",
                Op::Quantize {
                    to: DType::F8E4M3,
                    saturate: true,
                },
                &[w, scale[0]],
            )
            .unwrap()[0];
        let dq = g
            .add_node("w.dq", Op::Dequantize { to: DType::F32 }, &[q, scale[1]])
            .unwrap()[0];
        let y = g.add_node("mm", Op::MatMul, &[x, dq]).unwrap()[0];
        g.set_output("y", y).unwrap();
        g
    }

    fn run(g: &Graph) -> Vec<u8> {
        let x = Tensor::from_f32(vec![2, 4], &[1.0, -2.0, 0.5, 3.0, 0.25, 1.5, -1.0, 2.0]);
        let inputs = [("x".to_string(), x)].into();
        let program = fp8c_runtime::lower(g).unwrap();
        let mut exe = CpuBackend.prepare(&program, g.weights()).unwrap();
        exe.run(&inputs).unwrap()["y"].bytes().to_vec()
    }

    /// A weight an export builds with `ConstantOfShape` is quantized at compile time like a
    /// stored one: the fill, its amax, scale and quantize leave the graph, an FP8 param takes
    /// their place, and the result is the same bits.
    #[test]
    fn a_weight_built_from_constants_is_frozen_too() {
        let mut g = built_weight();
        let want = run(&g);
        let f = freeze(&mut g).unwrap();
        assert_eq!(f.nodes, 4, "fill, amax, compute_scale, quantize");
        let ops: Vec<&str> = g
            .topo_order()
            .unwrap()
            .into_iter()
            .map(|id| g.node(id).op.name())
            .collect();
        for gone in ["constant_of_shape", "amax", "compute_scale", "quantize"] {
            assert!(!ops.contains(&gone), "{gone} left in {ops:?}");
        }
        let fp8: Vec<&Tensor> = g
            .weights()
            .values()
            .filter(|t| t.dtype() == DType::F8E4M3)
            .collect();
        assert_eq!(fp8.len(), 1);
        assert_eq!(fp8[0].shape(), [4, 3]);
        assert_eq!(run(&g), want);
    }
}
