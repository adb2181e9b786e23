//! ONNX `Scan` (opset 9+), unrolled at import: the IR has no control flow, and a Scan whose
//! scanned axis has a static length (skl2onnx's nearest-neighbour distances scan the training
//! set, a constant) is that many copies of its body.
//!
//! Per iteration i the body's inputs are bound to the loop state and to slice i of each
//! scanned input (the last slice first for `scan_input_directions` 1); the body's nodes are
//! mapped by the importer's own `map_node` (names `{scan}.{i}.{node}`), seeing the outer
//! graph's values; its first outputs are the next state, the others are stacked along
//! `scan_output_axes` (in reverse for `scan_output_directions` 1). A body's subgraph
//! references to outer values are part of the Scan node's inputs for pruning and ordering
//! (`subgraph::node_refs`).

use crate::OnnxError;
use crate::import::MapCx;
use crate::proto::NodeProto;
use crate::subgraph::{add_initializers, map_nodes};
use fp8c_ir::{Graph, Op, Tensor, Value};
use std::collections::HashMap;

/// Most iterations unrolled (each is a copy of the body).
pub(crate) const MAX_ITERATIONS: u64 = 4096;

/// Maps a Scan node: unrolls its body and records its outputs in `values`.
pub(crate) fn map_scan(
    g: &mut Graph,
    values: &mut HashMap<String, Value>,
    node: &NodeProto,
    name: &str,
    mcx: &mut MapCx<'_>,
) -> Result<(), OnnxError> {
    let err = |msg: String| OnnxError::node(name, "Scan", msg);
    if mcx.opset < 9 {
        return Err(err(
            "Scan-8 (with sequence_lens and a batch axis) is not supported".into(),
        ));
    }
    let attr = |n: &str| node.attribute.iter().find(|a| a.name() == n);
    let body = attr("body")
        .and_then(|a| a.g.as_ref())
        .ok_or_else(|| err("attribute `body` is required".into()))?;
    let n_scan = attr("num_scan_inputs")
        .and_then(|a| a.i)
        .filter(|&n| n > 0)
        .ok_or_else(|| err("attribute `num_scan_inputs` is required".into()))?
        as usize;
    let ints = |n: &str, len: usize| -> Result<Vec<i64>, OnnxError> {
        match attr(n) {
            None => Ok(vec![0; len]),
            Some(a) if a.ints.len() == len => Ok(a.ints.clone()),
            Some(a) => Err(err(format!(
                "attribute `{n}` has {} entries for {len}",
                a.ints.len()
            ))),
        }
    };
    let given = node.input.len();
    if given < n_scan || body.input.len() != given {
        return Err(err(format!(
            "{given} inputs with num_scan_inputs = {n_scan}, and a body of {} inputs",
            body.input.len()
        )));
    }
    let n_state = given - n_scan;
    let n_out = body.output.len();
    if n_out < n_state || node.output.len() > n_out {
        return Err(err(format!(
            "the body gives {n_out} outputs for {n_state} state values and {} node outputs",
            node.output.len()
        )));
    }
    let in_axes = ints("scan_input_axes", n_scan)?;
    let in_dirs = ints("scan_input_directions", n_scan)?;
    let out_axes = ints("scan_output_axes", n_out - n_state)?;
    let out_dirs = ints("scan_output_directions", n_out - n_state)?;
    let value = |i: usize| {
        values
            .get(&node.input[i])
            .copied()
            .ok_or_else(|| OnnxError::MissingInput {
                node: name.into(),
                op_type: "Scan".into(),
                value: node.input[i].clone(),
            })
    };
    let mut state: Vec<Value> = (0..n_state).map(value).collect::<Result<_, _>>()?;
    let scanned: Vec<Value> = (n_state..given).map(value).collect::<Result<_, _>>()?;
    // Each scanned input's axis (made non-negative) and the common trip count.
    let mut axes = Vec::with_capacity(n_scan);
    let mut trips = None;
    for (j, (&v, &axis)) in scanned.iter().zip(&in_axes).enumerate() {
        let ty = g.value_type(v).clone();
        let rank = ty.rank() as i64;
        let a = if axis < 0 { axis + rank } else { axis };
        if !(0..rank).contains(&a) {
            return Err(err(format!("scan input {j} {ty} has no axis {axis}")));
        }
        let len = ty.shape[a as usize].known().ok_or_else(|| {
            err(format!(
                "scan input {j} ({}) {ty} has no static length along axis {a}: fp8c unrolls a \
                 Scan and needs it",
                node.input[n_state + j]
            ))
        })?;
        if trips.is_some_and(|t| t != len) {
            return Err(err(format!(
                "scan inputs of lengths {} and {len}",
                trips.unwrap_or(0)
            )));
        }
        trips = Some(len);
        axes.push(a);
    }
    let trips = trips.unwrap_or(0);
    if trips > MAX_ITERATIONS {
        return Err(err(format!(
            "{trips} iterations: fp8c unrolls Scan up to {MAX_ITERATIONS}"
        )));
    }
    let ir = |e: fp8c_ir::IrError| OnnxError::NodeIr {
        node: name.into(),
        op_type: "Scan".into(),
        source: e,
    };
    // The body sees the outer values; its own names shadow them.
    let mut scope = values.clone();
    add_initializers(g, &mut scope, body, name, mcx)?;
    let mut stacked: Vec<Vec<Value>> = vec![Vec::new(); n_out - n_state];
    for i in 0..trips {
        for (j, &v) in state.iter().enumerate() {
            scope.insert(body.input[j].name().to_string(), v);
        }
        for (j, (&v, &axis)) in scanned.iter().zip(&axes).enumerate() {
            let at = if in_dirs[j] == 1 { trips - 1 - i } else { i };
            let idx = g
                .add_node(
                    &format!("{name}.in{j}.{i}.index"),
                    Op::Constant {
                        value: Tensor::scalar_i64(at as i64),
                    },
                    &[],
                )
                .map_err(ir)?[0];
            let slice = g
                .add_node(&format!("{name}.in{j}.{i}"), Op::Gather { axis }, &[v, idx])
                .map_err(ir)?[0];
            scope.insert(body.input[n_state + j].name().to_string(), slice);
        }
        map_nodes(g, &mut scope, body, &format!("{name}.{i}"), mcx)?;
        let out = |o: usize| {
            let n = body.output[o].name();
            scope
                .get(n)
                .copied()
                .ok_or_else(|| err(format!("the body's output \"{n}\" is not produced")))
        };
        state = (0..n_state).map(out).collect::<Result<_, _>>()?;
        for (j, s) in stacked.iter_mut().enumerate() {
            s.push(out(n_state + j)?);
        }
    }
    for (o, out_name) in node.output.iter().enumerate() {
        if out_name.is_empty() {
            continue;
        }
        let v = if o < n_state {
            state[o]
        } else {
            let j = o - n_state;
            let mut parts = std::mem::take(&mut stacked[j]);
            if parts.is_empty() {
                return Err(err(format!(
                    "scan output {j} of zero iterations has no shape to give"
                )));
            }
            if out_dirs[j] == 1 {
                parts.reverse();
            }
            let rank = g.value_type(parts[0]).rank() as i64 + 1;
            let axis = if out_axes[j] < 0 {
                out_axes[j] + rank
            } else {
                out_axes[j]
            };
            let mut ups = Vec::with_capacity(parts.len());
            for (i, p) in parts.iter().enumerate() {
                let u = g
                    .add_node(
                        &format!("{name}.out{j}.{i}"),
                        Op::Unsqueeze { axes: vec![axis] },
                        &[*p],
                    )
                    .map_err(ir)?[0];
                ups.push(u);
            }
            g.add_node(&format!("{name}.out{j}"), Op::Concat { axis }, &ups)
                .map_err(ir)?[0]
        };
        values.insert(out_name.clone(), v);
    }
    Ok(())
}
