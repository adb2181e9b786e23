//! Which graph inputs are shapes in disguise: integer inputs whose *values* decide the shape
//! of a tensor (a Reshape's target shape, Slice bounds, reduction axes, Range limits, ...),
//! directly or through integer arithmetic on them, float scalars that do (a float Range's
//! start, limit and delta), Resize's and Upsample's float `scales` given as inputs, a
//! `tf_crop_and_resize` Resize's `roi`, and Dropout's `ratio` and `training_mode` (which
//! decide whether the node is the identity).
//!
//! A program is compiled for static shapes, so such an input is treated like an input shape:
//! the session specialises the model on the value it is given (the import turns the input
//! into a constant, `ImportOptions::constant_inputs`) and specialises again when a later
//! call's value differs. Data inputs are left alone, even when they are integers (token ids):
//! only inputs that reach a shape position count.
//!
//! The analysis runs backwards from every input position that ONNX defines as shape-like
//! (the table below), through the nodes that compute those values: every input of such a node
//! is shape-like too, except the data input of `Shape` and `Size`, which read only the shape.
//! An `If` condition counts as shape-like: the IR has no control flow, so the branch taken is
//! decided when the model is specialised (a voice-activity detector's sample-rate input picks
//! its 8 kHz or 16 kHz branch). The nodes of If/Scan/Loop bodies take part as well (a body's
//! Reshape may read an outer value).

use crate::proto::{GraphProto, NodeProto};
use std::collections::{HashMap, HashSet};

/// Input positions of `op_type` (default domain) whose values decide output shapes, or that
/// the IR takes as attributes (axes, split sizes, k).
fn shape_positions(op_type: &str) -> &'static [usize] {
    match op_type {
        "Reshape" | "Expand" | "Tile" | "Unsqueeze" | "Squeeze" | "Split" | "TopK" | "CumSum"
        | "OneHot" | "Trilu" | "Upsample" | "CenterCropPad" | "DFT" => &[1],
        "ReduceSum" | "ReduceMean" | "ReduceMax" | "ReduceMin" | "ReduceProd" | "ReduceL1"
        | "ReduceL2" | "ReduceLogSum" | "ReduceLogSumExp" | "ReduceSumSquare" => &[1],
        "ConstantOfShape" | "BlackmanWindow" | "HannWindow" | "HammingWindow" => &[0],
        "Range" => &[0, 1, 2],
        "If" => &[0],
        "Dropout" => &[1, 2],
        "Slice" => &[1, 2, 3, 4],
        "Pad" => &[1, 3],
        "Resize" => &[2, 3],
        "MaxUnpool" => &[2],
        "Col2Im" => &[1, 2],
        "STFT" => &[2, 3],
        _ => &[],
    }
}

/// The graph inputs (not initializers) of integer type, or float scalars, whose values decide
/// shapes, in the graph's input order.
pub fn shape_inputs(graph: &GraphProto) -> Vec<String> {
    // Every node, bodies included (depth first).
    let mut nodes: Vec<&NodeProto> = Vec::new();
    let mut todo: Vec<&NodeProto> = graph.node.iter().rev().collect();
    while let Some(n) = todo.pop() {
        nodes.push(n);
        for (_, body) in crate::subgraph::bodies(n).into_iter().rev() {
            todo.extend(body.node.iter().rev());
        }
    }
    let producer: HashMap<&str, usize> = nodes
        .iter()
        .enumerate()
        .flat_map(|(k, n)| n.output.iter().map(move |o| (o.as_str(), k)))
        .collect();
    let inits: HashSet<&str> = graph.initializer.iter().map(|t| t.name()).collect();
    let mut seen: HashSet<&str> = HashSet::new();
    let mut stack: Vec<&str> = Vec::new();
    for n in &nodes {
        for &i in shape_positions(n.op_type()) {
            if let Some(v) = n.input.get(i).filter(|v| !v.is_empty()) {
                stack.push(v);
            }
        }
        stack.extend(crop_roi(n).filter(|v| !v.is_empty()).map(String::as_str));
    }
    // Resize's and Upsample's float `scales`, given straight from a graph input, decide the
    // output shape as much as `sizes` do; so does a crop's `roi`, and Dropout's ratio.
    let scales: HashSet<&str> = nodes
        .iter()
        .filter_map(|n| match n.op_type() {
            "Resize" => n.input.get(2),
            "Upsample" | "Dropout" => n.input.get(1),
            _ => None,
        })
        .chain(nodes.iter().filter_map(|n| crop_roi(n)))
        .map(String::as_str)
        .collect();
    while let Some(v) = stack.pop() {
        if !seen.insert(v) || inits.contains(v) {
            continue;
        }
        let Some(&k) = producer.get(v) else { continue };
        let n = nodes[k];
        if matches!(n.op_type(), "Shape" | "Size") {
            continue;
        }
        stack.extend(n.input.iter().filter(|i| !i.is_empty()).map(String::as_str));
    }
    graph
        .input
        .iter()
        .filter(|i| seen.contains(i.name()) && !inits.contains(i.name()))
        .filter(|i| is_shape_like_input(i) || scales.contains(i.name()))
        .map(|i| i.name().to_string())
        .collect()
}

/// A cropping Resize's `roi` input: it decides which input positions the resize reads (the
/// plan is built at import).
fn crop_roi(n: &NodeProto) -> Option<&String> {
    let crop = n.attribute.iter().any(|a| {
        a.name() == "coordinate_transformation_mode"
            && a.s.as_deref() == Some(b"tf_crop_and_resize".as_slice())
    });
    (n.op_type() == "Resize" && crop)
        .then(|| n.input.get(1))
        .flatten()
}

/// True for a graph input declared with an integer (or bool) element type, or a float one
/// declared with one element (a float tensor reaching a shape position is data, not a shape).
fn is_shape_like_input(vi: &crate::proto::ValueInfoProto) -> bool {
    let Ok((code, shape)) = crate::value_info::value_info_parts(vi) else {
        return false;
    };
    let Ok(d) = crate::tensor::dtype_from_onnx(code) else {
        return false;
    };
    let one_element = shape.is_some_and(|s| s.iter().all(|d| *d == fp8c_ir::Dim::Known(1)));
    d.is_int() || d == fp8c_ir::DType::Bool || (d.is_float() && one_element)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builder::ModelBuilder;
    use fp8c_ir::DType;

    #[test]
    fn only_inputs_reaching_a_shape_position_count() {
        // y = reshape(x, concat(shape(x)[0], n + 1)); ids feed a gather (data, not a shape).
        let b = ModelBuilder::new()
            .input("x", DType::F32, &[2.into(), 6.into()])
            .input("n", DType::I64, &[1.into()])
            .input("ids", DType::I64, &[2.into()])
            .input("table", DType::F32, &[4.into(), 3.into()])
            .node("Shape", &["x"], &["s"])
            .node("Add", &["n", "n"], &["n2"])
            .node("Concat", &["s", "n2"], &["target"])
            .attr_int("axis", 0)
            .node("Reshape", &["x", "target"], &["y"])
            .node("Gather", &["table", "ids"], &["e"])
            .output_untyped("y")
            .output_untyped("e");
        let model = b.into_model();
        assert_eq!(shape_inputs(model.graph.as_ref().unwrap()), ["n"]);
    }

    #[test]
    fn float_scalars_reaching_a_range_count_and_float_tensors_do_not() {
        // r = range(start, limit, 1.0) with float scalars; x (a float tensor) feeds a Reshape
        // through a Cast, which makes it data that happens to reach a shape, not a shape.
        let b = ModelBuilder::new()
            .input("start", DType::F32, &[])
            .input("limit", DType::F32, &[1.into()])
            .input("delta", DType::F32, &[])
            .input("x", DType::F32, &[2.into()])
            .node("Range", &["start", "limit", "delta"], &["r"])
            .node("Cast", &["x"], &["xi"])
            .attr_int("to", 7)
            .node("Reshape", &["r", "xi"], &["y"])
            .output_untyped("y");
        let model = b.into_model();
        assert_eq!(
            shape_inputs(model.graph.as_ref().unwrap()),
            ["start", "limit", "delta"]
        );
    }

    #[test]
    fn float_resize_scales_given_as_inputs_count() {
        // Resize's scales (a float tensor) straight from an input decide y's shape; the same
        // kind of tensor scaled first is data (as above).
        let b = ModelBuilder::new()
            .input("x", DType::F32, &[1.into(), 1.into(), 2.into(), 2.into()])
            .input("scales", DType::F32, &[4.into()])
            .input("s", DType::F32, &[4.into()])
            .node("Resize", &["x", "", "scales"], &["y"])
            .node("Mul", &["s", "s"], &["s2"])
            .node("Resize", &["x", "", "s2"], &["z"])
            .output_untyped("y")
            .output_untyped("z");
        let model = b.into_model();
        assert_eq!(shape_inputs(model.graph.as_ref().unwrap()), ["scales"]);
    }
}
