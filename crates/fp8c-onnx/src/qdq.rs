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
//! - scales have the operand's type (f32, f16 or bf16: opset 19's `y_scale` has `x`'s type, and
//!   DequantizeLinear returns the scale's type, so an f16 MatMul gets f16 operands);
//! - GEMMs are named as fp8c's graph names them; an importer's helper GEMM maps back to its
//!   ONNX node only when that is exact ([`crate::qdq_origin`]), else it stays high precision;
//! - the result is self-contained: external initializers are read in from `base_dir`.
//!
//! FP8 QuantizeLinear needs opset 19, so an older model is brought to opset 19 first: the ops
//! whose form changed on the way (reduction, Squeeze/Unsqueeze and Split axes moving from
//! attributes to inputs) are rewritten; every other op keeps its meaning across those opsets.

use crate::OnnxError;
use crate::proto::{AttributeProto, ModelProto, NodeProto, TensorProto};
use crate::qdq_current::{Builder, CurrentTiles, int_attr};
use crate::qdq_origin::EinsumPair;
use crate::tensor::{dtype_from_onnx, tensor_to_proto};
use fp8c_core::Fp8Format;
use fp8c_ir::{DType, Tensor};
use std::collections::{BTreeMap, HashSet};
use std::path::Path;

/// One GEMM input to quantize.
#[derive(Clone, Debug, PartialEq)]
pub struct QdqInput {
    /// The GEMM's name in fp8c's graph: the ONNX node's name (`{op_type}_{index}` for a node
    /// without one, as the importer names it), or an importer helper's (an Einsum's product,
    /// `{node}.matmul{n}`; see [`crate::qdq_origin`] for which map back).
    pub node: String,
    /// Which input of the node (0 or 1 for MatMul/Gemm/Conv/Einsum).
    pub input: usize,
    /// How its scale is chosen.
    pub scale: QdqScale,
    /// The FP8 type (`F8E4M3` or `F8E5M2`).
    pub to: DType,
    /// The input's element type in the model (`F32`, `F16` or `BF16`): the type of its
    /// scale and of the DequantizeLinear output that replaces it.
    pub dtype: DType,
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

/// What [`export_qdq`] made.
#[derive(Clone, Debug)]
pub struct QdqExport {
    /// The rewritten model, self-contained (external data read in).
    pub model: ModelProto,
    /// Weights stored in FP8 behind a DequantizeLinear.
    pub weights: usize,
    /// Activations given a QuantizeLinear/DequantizeLinear pair.
    pub activations: usize,
    /// FP8 GEMMs left in high precision in the file, one line each saying why (their operands
    /// are no ONNX node's inputs).
    pub kept_high: Vec<String>,
}

/// `src` with the inputs in `qdq` quantized (see the module docs). `base_dir` is the source
/// model's folder, where its external data lives; every external initializer is read into the
/// result. A GEMM whose operands are no ONNX node's inputs ([`crate::qdq_origin`]) is left as
/// it was and listed in [`QdqExport::kept_high`].
pub fn export_qdq(
    src: &ModelProto,
    qdq: &[QdqInput],
    base_dir: Option<&Path>,
) -> Result<QdqExport, OnnxError> {
    let mut model = src.clone();
    let opset = crate::ai_onnx_opset(&model)?;
    let current = qdq.iter().any(|q| matches!(q.scale, QdqScale::Current(_)));
    let target = if current {
        BLOCKED_QDQ_OPSET
    } else {
        FP8_QDQ_OPSET
    };
    // Nothing to quantize: the model keeps its opset (no FP8 type is written).
    if opset < target && !qdq.is_empty() {
        upgrade(&mut model, opset, target)?;
    }
    if model.ir_version() < 9 && !qdq.is_empty() {
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
    // Each GEMM's ONNX node, or why it has none (then none of its inputs is quantized).
    let mut origin: BTreeMap<&str, Result<usize, String>> = BTreeMap::new();
    for q in qdq {
        let per_tile = matches!(&q.scale, QdqScale::Current(t) if !t.tensorwise());
        let found = crate::qdq_origin::gemm_node(&names, &graph.node, &q.node, per_tile);
        match origin.get(q.node.as_str()) {
            Some(Ok(_)) | None => {
                origin.insert(&q.node, found);
            }
            Some(Err(_)) => {}
        }
    }
    let kept_high: Vec<String> = origin
        .values()
        .filter_map(|o| o.as_ref().err())
        .map(|why| format!("{why}: kept in high precision in the ONNX file"))
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
        let Some(Ok(k)) = origin.get(q.node.as_str()) else {
            continue;
        };
        let k = *k;
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
        if !matches!(q.dtype, DType::F32 | DType::F16 | DType::BF16) {
            return Err(err(format!(
                "input {} (\"{value}\") is {}; FP8 Q/DQ takes f32, f16 or bf16",
                q.input, q.dtype
            )));
        }
        // A weight: a float initializer of the operand's type (inline or external data).
        let float_init = inits
            .get(&value)
            .filter(|t| dtype_from_onnx(t.data_type()).is_ok_and(|d| d == q.dtype));
        let read_weight = |init: &TensorProto| {
            let w = crate::tensor_from_proto(init, base_dir)
                .map_err(|e| err(format!("weight \"{value}\": {e}")))?;
            let v = w.to_f32_vec().map_err(|e| err(e.to_string()))?;
            Ok::<_, OnnxError>(Tensor::from_f32(w.shape().to_vec(), &v))
        };
        let scale = match &q.scale {
            QdqScale::Static(s) => *s,
            QdqScale::Current(tiles) => {
                let base = sanitize(&format!("{}.in{}", names[k], q.input));
                let dq_out = match float_init {
                    Some(init) => {
                        let w = read_weight(init)?;
                        let k_axis = weight_k_axis(&graph.node[k], q.input);
                        let (codes, inv, attrs) =
                            crate::qdq_current::weight(&w, k_axis, tiles, q.to, q.dtype)
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
                            .activation(&value, k_len, tiles, q.to, q.dtype)
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
        let (inv, inv_value) = typed_scale_inv(scale, q.dtype)
            .map_err(|e| err(format!("input {} (\"{value}\"): {e}", q.input)))?;
        let zero = Tensor::from_bytes(q.to, vec![], vec![0]).expect("one FP8 zero");
        let base = sanitize(&format!("{}.in{}", names[k], q.input));
        let scale_name = fresh(format!("{base}.scale_inv"));
        let zp_name = fresh(format!("{base}.zero_point"));
        graph.initializer.push(tensor_to_proto(&scale_name, &inv));
        graph.initializer.push(tensor_to_proto(&zp_name, &zero));
        let dq_out = fresh(format!("{base}.dq"));
        if let Some(init) = float_init {
            // A weight: stored in FP8, dequantized in the graph. In f32, `x · scale` as fp8c
            // quantizes; in f16/bf16, `x / y_scale` with the y_scale the file holds (rounded
            // to that type), as QuantizeLinear would.
            let w = read_weight(init)?;
            let v = w.to_f32_vec().map_err(|e| err(e.to_string()))?;
            let codes: Vec<u8> = v
                .iter()
                .map(|&x| {
                    let y = if q.dtype == DType::F32 {
                        x * scale
                    } else {
                        x / inv_value
                    };
                    fp8c_core::encode_f32(fmt, y, true)
                })
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
    // The source's external data paths are relative to its folder, not the output's.
    crate::external_data::read_in(&mut model, base_dir)?;
    Ok(QdqExport {
        model,
        weights,
        activations: acts,
        kept_high,
    })
}

/// `1 / scale` as a scalar of `dtype` (the operand's type: ONNX's y_scale has x's type),
/// and its value. Below f32 it is rounded up, so that `x / y_scale` never exceeds the
/// range the calibrated scale allows.
fn typed_scale_inv(scale: f32, dtype: DType) -> Result<(Tensor, f32), String> {
    let inv = 1.0 / scale;
    if dtype == DType::F32 {
        return Ok((Tensor::scalar_f32(inv), inv));
    }
    let t = Tensor::from_f64_as(dtype, vec![], &[f64::from(inv)])?;
    let value = |t: &Tensor| t.to_f32_vec().map(|v| v[0]);
    let t = if value(&t)? < inv {
        // The next representable value up: f16 and bf16 are 16-bit sign-magnitude.
        let bits = u16::from_le_bytes([t.bytes()[0], t.bytes()[1]]) + 1;
        Tensor::from_bytes(dtype, vec![], bits.to_le_bytes().to_vec())?
    } else {
        t
    };
    let v = value(&t)?;
    if !(v.is_finite() && v > 0.0) {
        return Err(format!(
            "its scale's inverse {inv:e} is out of {dtype}'s range"
        ));
    }
    Ok((t, v))
}

/// The reduction axis of GEMM input `input` (a weight) of `n`: 0 for MatMul's `[K, N]` and
/// Gemm's B unless `transB`, 1 for a transposed Gemm B (`[N, K]`); a MatMul-shaped Einsum's
/// contracted axis.
fn weight_k_axis(n: &NodeProto, input: usize) -> usize {
    let trans = |name: &str| n.attribute.iter().any(|a| a.name() == name && a.i() != 0);
    if n.op_type() == "Einsum"
        && let Some((ka, kb)) = EinsumPair::of(n).ok().and_then(|p| p.matmul_k_axes())
    {
        return if input == 0 { ka } else { kb };
    }
    match (n.op_type(), input) {
        ("Gemm", 1) if trans("transB") => 1,
        ("Gemm", 0) if !trans("transA") => 1,
        ("MatMul", 0) => 1,
        _ => 0,
    }
}

/// The reduction length K of activation input `input` of node `k`, read from its weight
/// operand's initializer (MatMul's `[K, N]`, Gemm's B by `transB`, a MatMul-shaped Einsum's
/// operand 1 by its contracted axis); `None` when unknown or when
/// the activation's K is not its last axis (a Gemm with `transA`).
fn reduction_len(
    graph: &crate::proto::GraphProto,
    inits: &BTreeMap<String, TensorProto>,
    k: usize,
    input: usize,
) -> Option<i64> {
    let n = &graph.node[k];
    let trans = |name: &str| n.attribute.iter().any(|a| a.name() == name && a.i() != 0);
    if input != 0 || !matches!(n.op_type(), "MatMul" | "Gemm" | "Einsum") || trans("transA") {
        return None;
    }
    let w = inits.get(n.input.get(1)?)?;
    let axis = match n.op_type() {
        "Gemm" if trans("transB") => 1,
        "Einsum" => EinsumPair::of(n).ok()?.matmul_k_axes()?.1,
        _ => 0,
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
