//! String values at import: the IR has no string tensors, so a value that holds strings (a
//! scikit-learn classifier's class labels, a string initializer they are picked from) is
//! imported as i64 indices into a table of its strings, kept beside the graph
//! (`MapCx::strings`, then `Imported::string_outputs` for the graph outputs among them).
//!
//! Indices only move: a string value may flow through the ops that rearrange or pick elements
//! (Identity, Reshape, Gather, ArrayFeatureExtractor, ...), which compute the same on the
//! indices; any other op reading one (a comparison, a Cast, a string LabelEncoder) is an
//! error naming the node and the value.

use crate::OnnxError;
use crate::proto::{GraphProto, NodeProto, TensorProto, ValueInfoProto};
use fp8c_ir::{DType, Graph, Op, Tensor, TensorType, Value};
use std::collections::{BTreeSet, HashMap, HashSet};

/// Ops whose first input's elements they only move or pick, so that indices into a string
/// table give the indices of the strings they would give.
const MOVES: &[&str] = &[
    "Identity",
    "Reshape",
    "Squeeze",
    "Unsqueeze",
    "Flatten",
    "Transpose",
    "Gather",
    "ArrayFeatureExtractor",
    "Slice",
    "Expand",
    "Tile",
];

/// The ai.onnx.ml ops that compare a string input with their string attributes, and those
/// attributes: their output is numeric.
const COMPARES: &[(&str, &str)] = &[
    ("OneHotEncoder", "cats_strings"),
    ("LabelEncoder", "keys_strings"),
];

/// The graph inputs declared as strings, each with its vocabulary: every string the kept
/// nodes compare it with (through the ops that move its elements), sorted.
pub(crate) fn input_vocabularies(
    graph: &GraphProto,
    inputs: &[&ValueInfoProto],
    order: &[usize],
) -> HashMap<String, Vec<String>> {
    let mut out = HashMap::new();
    for vi in inputs {
        let is_string = crate::value_info::value_info_parts(vi)
            .is_ok_and(|(code, _)| code == crate::proto::tensor_proto::DataType::String as i32);
        if !is_string {
            continue;
        }
        let mut reach: HashSet<&str> = HashSet::from([vi.name()]);
        let mut vocab = BTreeSet::new();
        for &k in order {
            let n = &graph.node[k];
            let Some(first) = n.input.first() else {
                continue;
            };
            if !reach.contains(first.as_str()) {
                continue;
            }
            if MOVES.contains(&n.op_type()) {
                reach.extend(n.output.first().map(String::as_str));
            }
            for (op, attr) in COMPARES {
                if n.op_type() == *op
                    && let Some(a) = n.attribute.iter().find(|a| a.name() == *attr)
                {
                    vocab.extend(
                        a.strings
                            .iter()
                            .map(|s| String::from_utf8_lossy(s).into_owned()),
                    );
                }
            }
        }
        out.insert(vi.name().to_string(), vocab.into_iter().collect());
    }
    out
}

/// The IR type of a string graph input: i64 of its declared (or given) shape.
pub(crate) fn input_type(
    vi: &ValueInfoProto,
    dims: Option<&Vec<u64>>,
) -> Result<TensorType, OnnxError> {
    let (_, declared) = crate::value_info::value_info_parts(vi).map_err(|m| OnnxError::Value {
        kind: "graph input",
        name: vi.name().into(),
        msg: m.into(),
    })?;
    let shape = match (dims, declared) {
        (Some(d), _) => fp8c_ir::shape_of(d),
        (None, Some(s)) => s,
        (None, None) => {
            return Err(OnnxError::Value {
                kind: "graph input",
                name: vi.name().into(),
                msg: "has no shape (unknown rank); give its dims in input_shapes".into(),
            });
        }
    };
    Ok(TensorType::new(DType::I64, shape))
}

/// A string initializer as an i64 constant of indices 0..n (in its shape), its strings
/// recorded in `strings` under its name.
pub(crate) fn index_constant(
    g: &mut Graph,
    t: &TensorProto,
    strings: &mut HashMap<String, Vec<String>>,
) -> Result<Value, OnnxError> {
    let table = t
        .string_data
        .iter()
        .map(|b| String::from_utf8(b.clone()))
        .collect::<Result<Vec<String>, _>>()
        .map_err(|_| OnnxError::tensor(t.name(), "holds a string that is not UTF-8"))?;
    let dims: Vec<u64> = t.dims.iter().map(|&d| d.max(0) as u64).collect();
    let n: u64 = dims.iter().product();
    if n != table.len() as u64 {
        return Err(OnnxError::tensor(
            t.name(),
            format!("has shape {dims:?} but {} strings", table.len()),
        ));
    }
    let index: Vec<i64> = (0..n as i64).collect();
    let value = Tensor::from_i64(dims, &index);
    let v = g.add_node(t.name(), Op::Constant { value }, &[])?[0];
    strings.insert(t.name().to_string(), table);
    Ok(v)
}

/// Checks the inputs of `node` against the string values: `None` if it reads none, the
/// table its first output takes if it moves the elements of one (its first input, the only
/// string one), and an error if it would compute on strings.
pub(crate) fn check_inputs(
    node: &NodeProto,
    name: &str,
    strings: &HashMap<String, Vec<String>>,
) -> Result<Option<Vec<String>>, OnnxError> {
    let read: Vec<(usize, &String)> = node
        .input
        .iter()
        .enumerate()
        .filter(|(_, i)| strings.contains_key(*i))
        .collect();
    let Some(&(at, first)) = read.first() else {
        return Ok(None);
    };
    if MOVES.contains(&node.op_type()) && at == 0 && read.len() == 1 {
        return Ok(Some(strings[first].clone()));
    }
    // A comparison of a string input with string attributes gives numbers.
    if COMPARES.iter().any(|(op, _)| *op == node.op_type()) && at == 0 && read.len() == 1 {
        return Ok(None);
    }
    Err(OnnxError::node(
        name,
        node.op_type(),
        format!(
            "input {at} (\"{first}\") holds strings, which fp8c tensors cannot hold (string \
             class labels reach the outputs through Identity, Reshape, Gather and the like, \
             and are written as strings); select the numeric outputs with --output"
        ),
    ))
}
