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
use crate::proto::{NodeProto, TensorProto};
use fp8c_ir::{Graph, Op, Tensor, Value};
use std::collections::HashMap;

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
