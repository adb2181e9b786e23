//! ONNX `If`, inlined at import (the IR has no control flow). A condition known at import (a
//! constant, or folded from static shapes) inlines the branch it picks; otherwise both
//! branches are inlined and each output is `where(cond, then, else)`, which needs the two
//! branches' outputs to have one type and shape. Branch nodes are mapped by the importer's
//! own `map_node` (names `{if}.then.{node}` / `{if}.else.{node}`) and see the outer values.

use crate::OnnxError;
use crate::import::MapCx;
use crate::proto::{GraphProto, NodeProto};
use crate::subgraph::{add_initializers, map_nodes};
use fp8c_ir::{Graph, Op, Value};
use std::collections::HashMap;

/// Maps branch `branch` into the graph; returns its outputs.
fn inline(
    g: &mut Graph,
    values: &HashMap<String, Value>,
    branch: &GraphProto,
    prefix: &str,
    mcx: &mut MapCx<'_>,
) -> Result<Vec<Value>, OnnxError> {
    let mut scope = values.clone();
    add_initializers(g, &mut scope, branch, prefix, mcx)?;
    map_nodes(g, &mut scope, branch, prefix, mcx)?;
    branch
        .output
        .iter()
        .map(|o| {
            scope.get(o.name()).copied().ok_or_else(|| {
                OnnxError::node(
                    prefix,
                    "If",
                    format!("branch output \"{}\" is not produced", o.name()),
                )
            })
        })
        .collect()
}

/// Maps an If node and records its outputs in `values`.
pub(crate) fn map_if(
    g: &mut Graph,
    values: &mut HashMap<String, Value>,
    node: &NodeProto,
    name: &str,
    mcx: &mut MapCx<'_>,
) -> Result<(), OnnxError> {
    let err = |msg: String| OnnxError::node(name, "If", msg);
    let branch = |n: &str| {
        node.attribute
            .iter()
            .find(|a| a.name() == n)
            .and_then(|a| a.g.as_ref())
            .ok_or_else(|| err(format!("attribute `{n}` is required")))
    };
    let (then_b, else_b) = (branch("then_branch")?, branch("else_branch")?);
    let cond_name = node
        .input
        .first()
        .filter(|c| !c.is_empty())
        .ok_or_else(|| err("input `cond` is required".into()))?;
    let cond = values
        .get(cond_name)
        .copied()
        .ok_or_else(|| OnnxError::MissingInput {
            node: name.into(),
            op_type: "If".into(),
            value: cond_name.clone(),
        })?;
    let n_out = node.output.len();
    if then_b.output.len() < n_out || else_b.output.len() < n_out {
        return Err(err(format!(
            "{n_out} outputs, but the branches give {} and {}",
            then_b.output.len(),
            else_b.output.len()
        )));
    }
    let known = g
        .constant_value(cond)
        .and_then(|t| t.to_f64_vec().ok())
        .filter(|v| v.len() == 1)
        .map(|v| v[0] != 0.0);
    let outs = match known {
        Some(true) => inline(g, values, then_b, &format!("{name}.then"), mcx)?,
        Some(false) => inline(g, values, else_b, &format!("{name}.else"), mcx)?,
        None => {
            let a = inline(g, values, then_b, &format!("{name}.then"), mcx)?;
            let b = inline(g, values, else_b, &format!("{name}.else"), mcx)?;
            let mut outs = Vec::with_capacity(n_out);
            for (i, (x, y)) in a.into_iter().zip(b).take(n_out).enumerate() {
                let (tx, ty) = (g.value_type(x).clone(), g.value_type(y).clone());
                if tx != ty {
                    return Err(err(format!(
                        "the condition is only known when the model runs, so both branches are \
                         computed and selected, but output {i} is {tx} in one and {ty} in the other"
                    )));
                }
                let v = g
                    .add_node(&format!("{name}.select{i}"), Op::Where, &[cond, x, y])
                    .map_err(|e| err(e.to_string()))?[0];
                outs.push(v);
            }
            outs
        }
    };
    for (o, v) in node.output.iter().zip(outs) {
        if !o.is_empty() {
            values.insert(o.clone(), v);
        }
    }
    Ok(())
}
