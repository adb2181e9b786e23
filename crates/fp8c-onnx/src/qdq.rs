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
use crate::proto::attribute_proto::AttributeType;
use crate::proto::{AttributeProto, ModelProto, NodeProto, TensorProto};
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
    /// The scale, TransformerEngine's convention: `q = cast(x · scale)`.
    pub scale: f32,
    /// The FP8 type (`F8E4M3` or `F8E5M2`).
    pub to: DType,
}

/// The opset FP8 QuantizeLinear/DequantizeLinear need.
pub const FP8_QDQ_OPSET: i64 = 19;

/// `src` with the inputs in `qdq` quantized (see the module docs); how many weights were
/// stored in FP8 and how many activation Q/DQ pairs were inserted.
pub fn export_qdq(
    src: &ModelProto,
    qdq: &[QdqInput],
) -> Result<(ModelProto, usize, usize), OnnxError> {
    let mut model = src.clone();
    let opset = crate::ai_onnx_opset(&model)?;
    if opset < FP8_QDQ_OPSET {
        upgrade_to_19(&mut model, opset)?;
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
        if !(q.scale.is_finite() && q.scale > 0.0) {
            return Err(err(format!(
                "input {} (\"{value}\") has scale {}: calibrate first",
                q.input, q.scale
            )));
        }
        let inv = Tensor::scalar_f32(1.0 / q.scale);
        let zero = Tensor::from_bytes(q.to, vec![], vec![0]).expect("one FP8 zero");
        let base = sanitize(&format!("{}.in{}", names[k], q.input));
        let scale_name = fresh(format!("{base}.scale_inv"));
        let zp_name = fresh(format!("{base}.zero_point"));
        graph.initializer.push(tensor_to_proto(&scale_name, &inv));
        graph.initializer.push(tensor_to_proto(&zp_name, &zero));
        let dq_out = fresh(format!("{base}.dq"));
        let float_init = inits.get(&value).filter(|t| {
            dtype_from_onnx(t.data_type()).is_ok_and(|d| matches!(d, DType::F32))
                && t.data_location != Some(1)
        });
        if let Some(init) = float_init {
            // A weight: stored in FP8, dequantized in the graph.
            let w = crate::tensor_from_proto(init, None)
                .map_err(|e| err(format!("weight \"{value}\": {e}")))?;
            let v = w.to_f32_vec().map_err(|e| err(e.to_string()))?;
            let codes: Vec<u8> = v
                .iter()
                .map(|&x| fp8c_core::encode_f32(fmt, x * q.scale, true))
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

fn int_attr(name: &str, v: i64) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::Int as i32),
        i: Some(v),
        ..Default::default()
    }
}

/// Brings an ai.onnx opset ≥ 11 model to opset 19, rewriting the ops whose form changed:
/// Squeeze/Unsqueeze/Split/ReduceSum `axes`/`split` (inputs since 13) and the other reductions'
/// `axes` (an input since 18). Other ops of the default domain mean the same from 11 to 19.
fn upgrade_to_19(model: &mut ModelProto, opset: i64) -> Result<(), OnnxError> {
    if opset < 11 {
        return Err(OnnxError::Opset(format!(
            "ai.onnx opset {opset}: FP8 Q/DQ needs opset {FP8_QDQ_OPSET}, and fp8c brings models to it from opset 11 on; upgrade the model first (onnx.version_converter)"
        )));
    }
    let graph = model.graph.as_mut().ok_or(OnnxError::NoGraph)?;
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
            o.version = Some(FP8_QDQ_OPSET);
        }
    }
    Ok(())
}
