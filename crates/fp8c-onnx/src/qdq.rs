//! FP8 out as standard ONNX: a copy of the source model in which every input of an FP8 GEMM
//! goes through FP8 QuantizeLinear/DequantizeLinear, as NVIDIA ModelOpt exports FP8 models and
//! TensorRT and onnxruntime run them:
//!
//! - a **weight** (a float initializer) is stored quantized: a `FLOAT8E4M3FN` (or E5M2)
//!   initializer followed by `DequantizeLinear` ("compressed weights"), one byte per element;
//! - an **activation** gets a `QuantizeLinear` → `DequantizeLinear` pair with its scale frozen
//!   (from calibration or a trained checkpoint);
//! - every other node is kept as it was. `saturate` is 1 (ONNX's default), the zero points
//!   are FP8 zeros, and `y_scale = 1 / scale` (fp8c follows TransformerEngine's convention
//!   `q = cast(x · scale)`; ONNX's QuantizeLinear divides by `y_scale`).
//!
//! FP8 QuantizeLinear needs opset 19, so an older model is brought to opset 19 first: the ops
//! whose form changed on the way (reduction, Squeeze/Unsqueeze and Split axes moving from
//! attributes to inputs) are rewritten; every other op keeps its meaning across those opsets.

use crate::OnnxError;
use crate::proto::{AttributeProto, ModelProto, NodeProto, TensorProto};
use crate::qdq_current::{Builder, CurrentTiles, int_attr};
use crate::tensor::{dtype_from_onnx, tensor_to_proto};
use fp8c_core::Fp8Format;
use fp8c_ir::{DType, Tensor};
use std::collections::{BTreeMap, HashSet};

/// One GEMM input to quantize.
#[derive(Clone, Debug, PartialEq)]
pub struct QdqInput {
    /// The ONNX node's name (`{op_type}_{index}` for a node without one, as the importer names
    /// it).
    pub node: String,
    /// Which input of the node (0 or 1 for MatMul/Gemm/Conv).
    pub input: usize,
    /// How its scale is chosen.
    pub scale: QdqScale,
    /// The FP8 type (`F8E4M3` or `F8E5M2`).
    pub to: DType,
}

/// How an exported FP8 input is scaled.
#[derive(Clone, Debug, PartialEq)]
pub enum QdqScale {
    /// A frozen scale (calibration, a trained checkpoint), TransformerEngine's convention:
    /// `q = cast(x · scale)`.
    Static(f32),
    /// Current scaling, per tensor or per tile, computed by the exported graph for an
    /// activation and at export for a weight ([`crate::qdq_current`]).
    Current(CurrentTiles),
}

/// The opset FP8 QuantizeLinear/DequantizeLinear need.
pub const FP8_QDQ_OPSET: i64 = 19;

/// The opset of blocked QuantizeLinear/DequantizeLinear and their `output_dtype` (current
/// scaling's exports).
pub const BLOCKED_QDQ_OPSET: i64 = 21;

/// `src` with the inputs in `qdq` quantized (see the module docs); how many weights were
/// stored in FP8 and how many activation Q/DQ pairs were inserted.
pub fn export_qdq(
    src: &ModelProto,
    qdq: &[QdqInput],
) -> Result<(ModelProto, usize, usize), OnnxError> {
    let mut model = src.clone();
    let opset = crate::ai_onnx_opset(&model)?;
    let current = qdq.iter().any(|q| matches!(q.scale, QdqScale::Current(_)));
    let target = if current {
        BLOCKED_QDQ_OPSET
    } else {
        FP8_QDQ_OPSET
    };
    if opset < target {
        upgrade(&mut model, opset, target)?;
    }
    if model.ir_version() < 9 {
        // FLOAT8 element types need IR version 9.
        model.ir_version = Some(9);
    }
    let graph = model.graph.as_mut().ok_or(OnnxError::NoGraph)?;
    let names: Vec<String> = graph
        .node
        .iter()
        .enumerate()
        .map(|(i, n)| {
            if n.name().is_empty() {
                format!("{}_{i}", n.op_type())
            } else {
                n.name().to_string()
            }
        })
        .collect();
    let inits: BTreeMap<String, TensorProto> = graph
        .initializer
        .iter()
        .map(|t| (t.name().to_string(), t.clone()))
        .collect();
    let mut taken: HashSet<String> = graph
        .node
        .iter()
        .flat_map(|n| n.output.iter().cloned())
        .chain(inits.keys().cloned())
        .chain(graph.input.iter().map(|i| i.name().to_string()))
        .collect();
    let mut fresh = |base: String| -> String {
        let mut name = base.clone();
        let mut k = 1;
        while !taken.insert(name.clone()) {
            name = format!("{base}_{k}");
            k += 1;
        }
        name
    };
    let (mut weights, mut acts) = (0, 0);
    let mut new_nodes: Vec<(usize, NodeProto)> = Vec::new();
    for q in qdq {
        let k = names.iter().position(|n| *n == q.node).ok_or_else(|| {
            OnnxError::Options(format!("no node named \"{}\" to quantize", q.node))
        })?;
        let err = |m: String| OnnxError::node(&names[k], graph.node[k].op_type(), m);
        let value = graph.node[k]
            .input
            .get(q.input)
            .filter(|v| !v.is_empty())
            .cloned()
            .ok_or_else(|| err(format!("has no input {}", q.input)))?;
        let fmt = match q.to {
            DType::F8E4M3 => Fp8Format::E4M3,
            DType::F8E5M2 => Fp8Format::E5M2,
            other => return Err(err(format!("cannot quantize to {other}"))),
        };
        let float_init = inits.get(&value).filter(|t| {
            dtype_from_onnx(t.data_type()).is_ok_and(|d| matches!(d, DType::F32))
                && t.data_location != Some(1)
        });
        let scale = match &q.scale {
            QdqScale::Static(s) => *s,
            QdqScale::Current(tiles) => {
                let base = sanitize(&format!("{}.in{}", names[k], q.input));
                let dq_out = match float_init {
                    Some(init) => {
                        let w = crate::tensor_from_proto(init, None)
                            .map_err(|e| err(format!("weight \"{value}\": {e}")))?;
                        let k_axis = weight_k_axis(&graph.node[k], q.input);
                        let (codes, inv, attrs) =
                            crate::qdq_current::weight(&w, k_axis, tiles, q.to)
                                .map_err(|e| err(format!("weight \"{value}\": {e}")))?;
                        let (q_name, s_name) = (
                            fresh(format!("{base}.fp8")),
                            fresh(format!("{base}.scale_inv")),
                        );
                        graph.initializer.push(tensor_to_proto(&q_name, &codes));
                        graph.initializer.push(tensor_to_proto(&s_name, &inv));
                        let out = fresh(format!("{base}.dq"));
                        let name = fresh(format!("{base}.DequantizeLinear"));
                        new_nodes.push((
                            k,
                            node("DequantizeLinear", &name, &[&q_name, &s_name], &out, &attrs),
                        ));
                        weights += 1;
                        out
                    }
                    None => {
                        let k_len = reduction_len(graph, &inits, k, q.input);
                        let mut b = Builder {
                            nodes: Vec::new(),
                            inits: Vec::new(),
                            fresh: &mut fresh,
                            base,
                        };
                        let out = b
                            .activation(&value, k_len, tiles, q.to)
                            .map_err(|e| err(format!("input {} (\"{value}\"): {e}", q.input)))?;
                        graph.initializer.append(&mut b.inits);
                        new_nodes.extend(b.nodes.into_iter().map(|n| (k, n)));
                        acts += 1;
                        out
                    }
                };
                graph.node[k].input[q.input] = dq_out;
                continue;
            }
        };
        if !(scale.is_finite() && scale > 0.0) {
            return Err(err(format!(
                "input {} (\"{value}\") has scale {scale}: calibrate first",
                q.input
            )));
        }
        let inv = Tensor::scalar_f32(1.0 / scale);
        let zero = Tensor::from_bytes(q.to, vec![], vec![0]).expect("one FP8 zero");
        let base = sanitize(&format!("{}.in{}", names[k], q.input));
        let scale_name = fresh(format!("{base}.scale_inv"));
        let zp_name = fresh(format!("{base}.zero_point"));
        graph.initializer.push(tensor_to_proto(&scale_name, &inv));
        graph.initializer.push(tensor_to_proto(&zp_name, &zero));
        let dq_out = fresh(format!("{base}.dq"));
        if let Some(init) = float_init {
            // A weight: stored in FP8, dequantized in the graph.
            let w = crate::tensor_from_proto(init, None)
                .map_err(|e| err(format!("weight \"{value}\": {e}")))?;
            let v = w.to_f32_vec().map_err(|e| err(e.to_string()))?;
            let codes: Vec<u8> = v
                .iter()
                .map(|&x| fp8c_core::encode_f32(fmt, x * scale, true))
                .collect();
            let qt = Tensor::from_bytes(q.to, w.shape().to_vec(), codes)
                .map_err(|e| err(e.to_string()))?;
            let q_name = fresh(format!("{base}.fp8"));
            graph.initializer.push(tensor_to_proto(&q_name, &qt));
            new_nodes.push((
                k,
                node(
                    "DequantizeLinear",
                    &fresh(format!("{base}.DequantizeLinear")),
                    &[&q_name, &scale_name, &zp_name],
                    &dq_out,
                    &[],
                ),
            ));
            weights += 1;
        } else {
            let q_out = fresh(format!("{base}.q"));
            new_nodes.push((
                k,
                node(
                    "QuantizeLinear",
                    &fresh(format!("{base}.QuantizeLinear")),
                    &[&value, &scale_name, &zp_name],
                    &q_out,
                    &[int_attr("saturate", 1)],
                ),
            ));
            new_nodes.push((
                k,
                node(
                    "DequantizeLinear",
                    &fresh(format!("{base}.DequantizeLinear")),
                    &[&q_out, &scale_name, &zp_name],
                    &dq_out,
                    &[],
                ),
            ));
            acts += 1;
        }
        graph.node[k].input[q.input] = dq_out;
    }
    // Insert the new nodes right before the node they feed (keeps a topological order).
    let mut nodes = Vec::with_capacity(graph.node.len() + new_nodes.len());
    for (k, n) in std::mem::take(&mut graph.node).into_iter().enumerate() {
        nodes.extend(
            new_nodes
                .iter()
                .filter(|(at, _)| *at == k)
                .map(|(_, n)| n.clone()),
        );
        nodes.push(n);
    }
    graph.node = nodes;
    // Float initializers that no node reads any more (replaced by their FP8 copies) go.
    let read: HashSet<&str> = graph
        .node
        .iter()
        .flat_map(|n| n.input.iter().map(String::as_str))
        .chain(graph.output.iter().map(|o| o.name()))
        .collect();
    let read: HashSet<String> = read.into_iter().map(str::to_string).collect();
    graph
        .initializer
        .retain(|t| read.contains(t.name()) || !inits.contains_key(t.name()));
    let live: HashSet<String> = graph
        .initializer
        .iter()
        .map(|t| t.name().to_string())
        .collect();
    graph
        .input
        .retain(|i| !inits.contains_key(i.name()) || live.contains(i.name()));
    Ok((model, weights, acts))
}

/// The reduction axis of GEMM input `input` (a weight) of `n`: 0 for MatMul's `[K, N]` and
/// Gemm's B unless `transB`, 1 for a transposed Gemm B (`[N, K]`).
fn weight_k_axis(n: &NodeProto, input: usize) -> usize {
    let trans = |name: &str| n.attribute.iter().any(|a| a.name() == name && a.i() != 0);
    match (n.op_type(), input) {
        ("Gemm", 1) if trans("transB") => 1,
        ("Gemm", 0) if !trans("transA") => 1,
        ("MatMul", 0) => 1,
        _ => 0,
    }
}

/// The reduction length K of activation input `input` of node `k`, read from its weight
/// operand's initializer (MatMul's `[K, N]`, Gemm's B by `transB`); `None` when unknown or when
/// the activation's K is not its last axis (a Gemm with `transA`).
fn reduction_len(
    graph: &crate::proto::GraphProto,
    inits: &BTreeMap<String, TensorProto>,
    k: usize,
    input: usize,
) -> Option<i64> {
    let n = &graph.node[k];
    let trans = |name: &str| n.attribute.iter().any(|a| a.name() == name && a.i() != 0);
    if input != 0 || !matches!(n.op_type(), "MatMul" | "Gemm") || trans("transA") {
        return None;
    }
    let w = inits.get(n.input.get(1)?)?;
    let axis = if n.op_type() == "Gemm" && trans("transB") {
        1
    } else {
        0
    };
    (w.dims.len() == 2).then(|| w.dims[axis])
}

/// A name usable as an ONNX value name (ONNX allows any string; keep ours readable).
fn sanitize(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { '_' } else { c })
        .collect()
}

fn node(
    op: &str,
    name: &str,
    inputs: &[&str],
    output: &str,
    attrs: &[AttributeProto],
) -> NodeProto {
    NodeProto {
        op_type: Some(op.into()),
        name: Some(name.into()),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: vec![output.to_string()],
        attribute: attrs.to_vec(),
        ..Default::default()
    }
}

/// Brings an ai.onnx opset ≥ 11 model to opset `target` (19, or 21 for blocked Q/DQ),
/// rewriting the ops whose form changed:
/// Squeeze/Unsqueeze/Split/ReduceSum `axes`/`split` (inputs since 13) and the other reductions'
/// `axes` (an input since 18). Other ops of the default domain mean the same from 11 to 19.
fn upgrade(model: &mut ModelProto, opset: i64, target: i64) -> Result<(), OnnxError> {
    if opset < 11 {
        return Err(OnnxError::Opset(format!(
            "ai.onnx opset {opset}: FP8 Q/DQ needs opset {FP8_QDQ_OPSET}, and fp8c brings models to it from opset 11 on; upgrade the model first (onnx.version_converter)"
        )));
    }
    let graph = model.graph.as_mut().ok_or(OnnxError::NoGraph)?;
    // Opset 20 changed DFT's axis (an input) and GridSample's mode names; 21 only widened types.
    if target > 19
        && let Some(n) = graph
            .node
            .iter()
            .find(|n| matches!(n.op_type(), "DFT" | "GridSample") && n.domain().is_empty())
    {
        return Err(OnnxError::Opset(format!(
            "ai.onnx opset {opset}: the export needs opset {target}, and node \"{}\" ({}) changed form on the way; upgrade the model first (onnx.version_converter)",
            n.name(),
            n.op_type()
        )));
    }
    let mut taken: HashSet<String> = graph
        .node
        .iter()
        .flat_map(|n| n.output.iter().cloned())
        .chain(graph.initializer.iter().map(|t| t.name().to_string()))
        .collect();
    let mut extra = Vec::new();
    for (i, n) in graph.node.iter_mut().enumerate() {
        if !n.domain().is_empty() && n.domain() != "ai.onnx" {
            continue;
        }
        let moved = match n.op_type() {
            "Squeeze" | "Unsqueeze" | "ReduceSum" if opset < 13 => Some(("axes", 1)),
            "Split" if opset < 13 => Some(("split", 1)),
            "ReduceMean" | "ReduceMax" | "ReduceMin" | "ReduceProd" | "ReduceL1" | "ReduceL2"
            | "ReduceLogSum" | "ReduceLogSumExp" | "ReduceSumSquare"
                if opset < 18 =>
            {
                Some(("axes", 1))
            }
            _ => None,
        };
        let Some((attr, pos)) = moved else { continue };
        let Some(at) = n.attribute.iter().position(|a| a.name() == attr) else {
            continue;
        };
        let a = n.attribute.remove(at);
        let mut name = format!("{}_{attr}_{i}", n.op_type());
        while !taken.insert(name.clone()) {
            name.push('_');
        }
        let t = Tensor::from_i64(vec![a.ints.len() as u64], &a.ints);
        extra.push(tensor_to_proto(&name, &t));
        while n.input.len() < pos {
            n.input.push(String::new());
        }
        n.input.insert(pos, name);
    }
    graph.initializer.extend(extra);
    for o in model.opset_import.iter_mut() {
        if o.domain().is_empty() || o.domain() == "ai.onnx" {
            o.version = Some(target);
        }
    }
    Ok(())
}
