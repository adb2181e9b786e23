//! Canonicalize: turn an imported graph into a clean static graph without changing what it
//! computes.
//!
//! One walk in topological order re-infers every node's types (so shapes given for the
//! inputs flow through) and folds every node whose inputs are all constants, using the CPU
//! reference evaluator (the same code that runs the model, so folding cannot disagree with
//! execution). `shape` of a statically shaped value folds even when the value is not
//! constant: that is what removes the Shape→Gather→Unsqueeze→Concat→Reshape chains exports
//! are full of. Then no-op nodes (identity, casts to the same type, reshapes and expands to
//! the same static shape) are bypassed and dead nodes removed.
//!
//! Everything that depends only on shapes and constants folds once the input shapes are
//! bound: shape arithmetic, `range`, `constant_of_shape`, and the grids exports build from
//! them (a detector's anchor points: `range` over a feature map's width and height, offset,
//! expanded and concatenated). Two rules make that hold for exports that store their scalars
//! as float initializers (which import as params): a param read where a value decides a shape
//! (`range`'s operands, a `reshape`'s target, directly or through the arithmetic computing
//! it) is read as the constant it holds ([`pin_shape_operands`]), in training too, since a
//! program's shapes are fixed; and at inference a one-element param counts as a constant for
//! folding (a grid's `+ 0.5`).
//!
//! Parameters themselves are never folded: they stay parameters (FP32 master weights).

use crate::{Pass, PassCx};
use fp8c_ir::{DType, Graph, IrError, Op, Tensor, Value};

/// Folded constants larger than this (in elements) are left as computations: they would
/// bloat the IR and the folding buys nothing (shape subgraphs fold to a few elements).
pub const FOLD_LIMIT_ELEMENTS: u64 = 4096;

/// Float constants with more elements than this are weights: they become params (data in
/// the weights sidecar, eligible for FP8 and for training) instead of inline literals.
/// Some exporters (PaddlePaddle) store every weight as a `Constant` node.
pub const PROMOTE_MIN_ELEMENTS: usize = 64;

/// The canonicalize pass (see the module docs).
pub struct Canonicalize;

impl Pass for Canonicalize {
    fn name(&self) -> &'static str {
        "canonicalize"
    }

    fn about(&self) -> &'static str {
        "shape inference, constant folding of shape subgraphs, no-op removal, attention fusion, dead-code elimination"
    }

    fn run(&self, g: &mut Graph, cx: &mut PassCx) -> Result<bool, IrError> {
        let pinned = pin_shape_operands(g)?;
        let folded = infer_and_fold(g, cx)? + pinned;
        resolve_equal_splits(g)?;
        let bypassed = bypass_noops(g)?;
        let fp8 = fp8_dequantize_linear(g)?;
        let attention = fuse_attention(g, cx)?;
        let removed = g.dce();
        let promoted = promote_weight_constants(g)?;
        if fp8 > 0 {
            cx.notes.push(format!(
                "canonicalize: {fp8} FP8 DequantizeLinear node(s) of the model read as fp8c dequantize (its own scales)"
            ));
        }
        if attention > 0 {
            cx.notes.push(format!(
                "canonicalize: {attention} attention chain(s) fused into `attention` (--no-fuse-attention keeps them)"
            ));
        }
        if folded + bypassed + removed + promoted + fp8 > 0 {
            cx.notes.push(format!(
                "canonicalize: folded {folded} node(s), bypassed {bypassed} no-op(s), removed {removed} dead node(s), \
                 promoted {promoted} float constant(s) to params"
            ));
        }
        Ok(folded + bypassed + removed + promoted + fp8 + attention > 0)
    }
}

/// Fuses the attention chains (`crate::attention`) unless the options say not to:
/// `--no-fuse-attention`, or `--fp8-attention` (the fused op has no FP8 path yet).
fn fuse_attention(g: &mut Graph, cx: &mut PassCx) -> Result<usize, IrError> {
    if cx.options.no_fuse_attention {
        return Ok(0);
    }
    if cx.options.policy.fp8_attention {
        cx.notes.push(
            "canonicalize: attention left unfused: --fp8-attention puts its GEMMs in FP8, which the fused op does not do yet"
                .to_string(),
        );
        return Ok(0);
    }
    crate::attention::fuse(g, cx)
}

/// Re-infers types in topological order and folds constant nodes. Returns the fold count.
pub fn infer_and_fold(g: &mut Graph, cx: &mut PassCx) -> Result<usize, IrError> {
    let mut folded = 0;
    let training = cx.options.train.is_some();
    for id in g.topo_order()? {
        let node = g.node(id);
        if node.op.is_interface() || matches!(node.op, Op::Constant { .. }) {
            continue;
        }
        let (name, op, inputs) = (node.name.clone(), node.op.clone(), node.inputs().to_vec());
        let outputs = g.infer_node(&name, &op, &inputs)?;
        g.set_op(id, op.clone(), outputs.clone());
        if outputs.len() != 1
            || outputs[0]
                .num_elements()
                .is_none_or(|n| n > FOLD_LIMIT_ELEMENTS)
        {
            continue;
        }
        if let Some(value) = fold_shape(g, &op, &inputs) {
            g.make_constant(id, value)?;
            folded += 1;
            continue;
        }
        // A scalar param folds like a constant, but not as a scale of a quantization: an FP8
        // model's `dequantize(codes, scale)` stays, so its GEMMs keep the model's own scales.
        let scalars = !training
            && !matches!(
                op,
                Op::Dequantize { .. }
                    | Op::DequantizeLinear { .. }
                    | Op::Quantize { .. }
                    | Op::QuantizeLinear { .. }
            );
        let consts: Option<Vec<&Tensor>> = inputs
            .iter()
            .map(|&v| {
                g.constant_value(v)
                    .or_else(|| scalars.then(|| scalar_param(g, v)).flatten())
            })
            .collect();
        let Some(consts) = consts else { continue };
        if !is_foldable(&op) {
            continue;
        }
        match fp8c_eval::eval_op(&op, &consts) {
            Ok(mut vals) if vals.len() == 1 => {
                let value = vals.pop().expect("one value");
                if value.ty() != outputs[0] {
                    return Err(IrError::node(
                        name,
                        op.name(),
                        format!(
                            "folding produced {} but inference said {}",
                            value.ty(),
                            outputs[0]
                        ),
                    ));
                }
                g.make_constant(id, value)?;
                folded += 1;
            }
            Ok(_) => {}
            // A constant computation that fails is a model error the runtime will report in
            // context; folding just leaves it alone.
            Err(e) => cx.notes.push(format!(
                "canonicalize: node \"{name}\" ({}) not folded: {e}",
                op.name()
            )),
        }
    }
    Ok(folded)
}

/// The data of a one-element param, which inference folds like a constant (exporters keep
/// their scalar literals, a grid's `0.5`, a norm's epsilon, as float initializers).
fn scalar_param(g: &Graph, v: Value) -> Option<&Tensor> {
    param_value(g, v).filter(|t| t.len() <= 1)
}

/// Reads every param that decides a shape as the constant it holds: the params reached
/// backwards from the shape operands of every node (`fp8c_ir::infer::shape_operands`) through the nodes
/// computing them (except `shape`, which reads only its input's shape), each read by such a
/// node, get a constant copy `{param}.value` in their place there. Params whose data the graph
/// does not hold, or larger than [`FOLD_LIMIT_ELEMENTS`], are left alone. Returns how many
/// reads changed.
pub fn pin_shape_operands(g: &mut Graph) -> Result<usize, IrError> {
    use std::collections::{HashMap, HashSet};
    // The nodes whose outputs decide shapes.
    let mut deciding: HashSet<fp8c_ir::NodeId> = HashSet::new();
    let mut stack: Vec<(fp8c_ir::NodeId, usize)> = Vec::new();
    for id in g.node_ids() {
        for &i in fp8c_ir::infer::shape_operands(&g.node(id).op) {
            stack.push((id, i));
        }
    }
    let mut reads: Vec<(fp8c_ir::NodeId, usize)> = Vec::new();
    let mut seen: HashSet<(fp8c_ir::NodeId, usize)> = HashSet::new();
    while let Some((user, i)) = stack.pop() {
        if !seen.insert((user, i)) {
            continue;
        }
        let Some(&v) = g.node(user).inputs().get(i) else {
            continue;
        };
        let producer = g.node(v.node);
        match &producer.op {
            Op::Param { .. } => reads.push((user, i)),
            Op::Shape { .. } => {}
            op if op.is_interface() || matches!(op, Op::Constant { .. }) => {}
            _ => {
                if deciding.insert(v.node) {
                    for k in 0..producer.inputs().len() {
                        stack.push((v.node, k));
                    }
                }
            }
        }
    }
    reads.sort();
    let mut copies: HashMap<Value, Value> = HashMap::new();
    let mut changed = 0;
    for (user, i) in reads {
        let v = g.node(user).inputs()[i];
        let copy = match copies.get(&v) {
            Some(&c) => c,
            None => {
                let Some(t) = param_value(g, v).filter(|t| t.len() as u64 <= FOLD_LIMIT_ELEMENTS)
                else {
                    continue;
                };
                let name = g.fresh_name(&format!("{}.value", g.node(v.node).name));
                let value = t.clone();
                let c = g.add_node(&name, Op::Constant { value }, &[])?[0];
                copies.insert(v, c);
                c
            }
        };
        g.set_input(user, i, copy)?;
        changed += 1;
    }
    Ok(changed)
}

/// `shape(x)` of a statically shaped `x`, without needing x's value.
fn fold_shape(g: &Graph, op: &Op, inputs: &[Value]) -> Option<Tensor> {
    let Op::Shape { start, end } = op else {
        return None;
    };
    let dims = g.value_type(*inputs.first()?).known_dims()?;
    let r = dims.len() as i64;
    let clamp = |i: i64| if i < 0 { (i + r).clamp(0, r) } else { i.clamp(0, r) } as usize;
    let (s, e) = (clamp(*start), clamp(end.unwrap_or(r)));
    let picked: Vec<i64> = dims.get(s..e.max(s))?.iter().map(|&d| d as i64).collect();
    Some(Tensor::from_i64(vec![picked.len() as u64], &picked))
}

/// Ops folding may evaluate: pure, deterministic, and not FP8 scaling machinery (whose
/// state must stay visible as state).
fn is_foldable(op: &Op) -> bool {
    // The interface and the FP8 scaling ops (the table's `scaling` flag: quantize,
    // dequantize, amax, scales, histories, the FP8 GEMM) are never folded.
    !(matches!(op.view(), fp8c_ir::OpView::Interface(_)) || op.props().scaling)
}

/// Bypasses nodes that return their first input unchanged. Returns how many.
pub fn bypass_noops(g: &mut Graph) -> Result<usize, IrError> {
    let mut count = 0;
    for id in g.topo_order()? {
        let n = g.node(id);
        let Some(&first) = n.inputs().first() else {
            continue;
        };
        let in_ty = g.value_type(first);
        let same_type = n.outputs.len() == 1 && in_ty == &n.outputs[0];
        let noop = match &n.op {
            Op::Identity => true,
            Op::Concat { .. } => n.inputs().len() == 1 && same_type,
            Op::Cast { to, .. } => same_type && *to == in_ty.dtype,
            Op::Reshape { .. }
            | Op::Expand
            | Op::Squeeze { .. }
            | Op::Unsqueeze { .. }
            | Op::Flatten { .. } => same_type && in_ty.is_static(),
            _ => false,
        };
        if noop {
            let out = Value::new(id, 0);
            // A graph output that would become a bare graph input keeps its identity node:
            // outputs must be produced by the graph.
            if g.is_graph_result(out) && g.node(first.node).op.is_interface() {
                continue;
            }
            g.replace_uses(out, first)?;
            count += 1;
        }
    }
    Ok(count)
}

/// Turns large float `constant` nodes into params (same value, same readers). Returns how many.
pub fn promote_weight_constants(g: &mut Graph) -> Result<usize, IrError> {
    let mut count = 0;
    for id in g.topo_order()? {
        let n = g.node(id);
        let Op::Constant { value } = &n.op else {
            continue;
        };
        if !value.dtype().is_float() || value.len() <= PROMOTE_MIN_ELEMENTS {
            continue;
        }
        let (name, value) = (n.name.clone(), value.clone());
        let mut pname = name.clone();
        let mut k = 1;
        while g
            .params()
            .iter()
            .any(|&p| fp8c_ir::interface_name(&g.node(p).op) == pname)
        {
            pname = format!("{name}.{k}");
            k += 1;
        }
        let p = g.add_param(&pname, value.ty(), Some(value))?;
        g.replace_uses(Value::new(id, 0), p)?;
        g.remove_node(id)?;
        count += 1;
    }
    Ok(count)
}

/// Reads an FP8 model's own quantization (ONNX FP8 Q/DQ, as ModelOpt, TensorRT's tools and
/// `fp8c compile --emit onnx` write it): `DequantizeLinear(q: f8, scale: f32[], zero point 0
/// or absent)` is exactly fp8c's `dequantize(q, scale)` (`f32(q) · scale`; subtracting a +0
/// zero point changes nothing), so it becomes one. The precision policy then sees those GEMMs'
/// operands dequantized from FP8 and keeps them FP8 with the model's scales ("FP8 from the
/// model"); a QuantizeLinear before it stays as it is (ONNX divides by y_scale, which fp8c's
/// `quantize` does not). Per-axis or blocked scales and non-zero zero points stay
/// `dequantize_linear`. Returns how many nodes changed.
pub fn fp8_dequantize_linear(g: &mut Graph) -> Result<usize, IrError> {
    let mut count = 0;
    for id in g.topo_order()? {
        let n = g.node(id);
        if !matches!(n.op, Op::DequantizeLinear { .. }) {
            continue;
        }
        let ins = n.inputs().to_vec();
        let (Some(&q), Some(&scale)) = (ins.first(), ins.get(1)) else {
            continue;
        };
        let (qt, st) = (g.value_type(q), g.value_type(scale));
        let zero_point_is_zero = match ins.get(2) {
            None => true,
            Some(&z) => g
                .constant_value(z)
                .or_else(|| param_value(g, z))
                .is_some_and(|t| t.bytes().iter().all(|&b| b == 0)),
        };
        if !qt.dtype.is_fp8()
            || st.dtype != DType::F32
            || !st.shape.is_empty()
            || !zero_point_is_zero
        {
            continue;
        }
        let name = n.name.clone();
        let tmp = g.fresh_name(&format!("{name}.fp8"));
        let v = g.add_node(&tmp, Op::Dequantize { to: DType::F32 }, &[q, scale])?[0];
        g.replace_uses(Value::new(id, 0), v)?;
        g.remove_node(id)?;
        g.rename_node(v.node, &name);
        count += 1;
    }
    Ok(count)
}

/// The data of a param (initializer), if the graph holds it.
fn param_value(g: &Graph, v: Value) -> Option<&Tensor> {
    let n = g.node(v.node);
    match &n.op {
        Op::Param { name } => g.weights().get(name),
        _ => None,
    }
}

/// Writes the sizes of `split` nodes imported as equal parts (ONNX `num_outputs`, see
/// `fp8c_ir::infer::EQUAL_PARTS`) once the axis size is known, so that later passes and
/// backends see plain sizes.
pub fn resolve_equal_splits(g: &mut Graph) -> Result<(), IrError> {
    for id in g.node_ids() {
        let n = g.node(id);
        let Op::Split { axis, split } = &n.op else {
            continue;
        };
        if !split.iter().all(|&s| s == fp8c_ir::infer::EQUAL_PARTS) {
            continue;
        }
        let ty = g.value_type(n.inputs()[0]);
        let Some(dim) = usize::try_from(*axis)
            .ok()
            .or_else(|| ty.rank().checked_sub(axis.unsigned_abs() as usize))
            .and_then(|a| ty.shape.get(a))
            .and_then(|d| d.known())
        else {
            continue;
        };
        let sizes = fp8c_ir::infer::split_sizes(split, dim)
            .map_err(|e| IrError::node(&n.name, n.op.name(), e))?;
        let op = Op::Split {
            axis: *axis,
            split: sizes.iter().map(|&s| s as i64).collect(),
        };
        let outs = n.outputs.clone();
        g.set_op(id, op, outs);
    }
    Ok(())
}
