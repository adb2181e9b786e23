//! What Scan (`scan.rs`) and If (`if_node.rs`) share: reading a subgraph's free values (for
//! the outer graph's pruning and ordering), adding its initializers, and mapping its nodes
//! into a scope that also holds the outer graph's values.

use crate::OnnxError;
use crate::import::{MapCx, map_node};
use crate::proto::{GraphProto, NodeProto};
use crate::tensor::tensor_from_proto;
use fp8c_ir::{Graph, Op, Value};
use std::collections::{HashMap, HashSet};

/// The values a graph reads from its enclosing scopes: names its nodes (and their subgraphs)
/// use that it does not define as an input, initializer or node output.
pub(crate) fn free_values(g: &GraphProto) -> Vec<&str> {
    let mut defined: HashSet<&str> = g.input.iter().map(|i| i.name()).collect();
    defined.extend(g.initializer.iter().map(|t| t.name()));
    for n in &g.node {
        defined.extend(n.output.iter().map(String::as_str));
    }
    let mut free = Vec::new();
    let mut seen = HashSet::new();
    for n in &g.node {
        for r in node_refs(n) {
            if !r.is_empty() && !defined.contains(r) && seen.insert(r) {
                free.push(r);
            }
        }
    }
    free
}

/// Every value a node reads: its inputs, then what its graph attributes (Scan's body, If's
/// branches, Loop's body) read from outside them.
pub(crate) fn node_refs(n: &NodeProto) -> Vec<&str> {
    let mut refs: Vec<&str> = n.input.iter().map(String::as_str).collect();
    for a in &n.attribute {
        for g in a.g.iter().chain(a.graphs.iter()) {
            refs.extend(free_values(g));
        }
    }
    refs
}

/// Adds `sub`'s initializers as constants `{prefix}.{name}` and binds them in `scope`.
pub(crate) fn add_initializers(
    g: &mut Graph,
    scope: &mut HashMap<String, Value>,
    sub: &GraphProto,
    prefix: &str,
    mcx: &MapCx<'_>,
) -> Result<(), OnnxError> {
    for t in &sub.initializer {
        let tensor = tensor_from_proto(t, mcx.base_dir)?;
        let v = g
            .add_node(
                &format!("{prefix}.{}", t.name()),
                Op::Constant { value: tensor },
                &[],
            )
            .map_err(|e| OnnxError::tensor(t.name(), e.to_string()))?[0];
        scope.insert(t.name().to_string(), v);
    }
    Ok(())
}

/// Maps `sub`'s nodes (named `{prefix}.{node}`) into `scope` with the importer's own
/// `map_node`, every node output counted as used.
pub(crate) fn map_nodes(
    g: &mut Graph,
    scope: &mut HashMap<String, Value>,
    sub: &GraphProto,
    prefix: &str,
    mcx: &mut MapCx<'_>,
) -> Result<(), OnnxError> {
    let used: HashSet<String> = sub
        .node
        .iter()
        .flat_map(|n| n.output.iter().cloned())
        .chain(sub.output.iter().map(|o| o.name().to_string()))
        .collect();
    let mut bcx = MapCx {
        opset: mcx.opset,
        used: &used,
        base_dir: mcx.base_dir,
        warnings: &mut *mcx.warnings,
        strings: &mut *mcx.strings,
        four_bit: mcx.four_bit,
    };
    for (k, n) in sub.node.iter().enumerate() {
        let local = if n.name().is_empty() {
            format!("{}_{k}", n.op_type())
        } else {
            n.name().to_string()
        };
        map_node(g, scope, n, &format!("{prefix}.{local}"), &mut bcx)?;
    }
    Ok(())
}
