//! What Scan (`scan.rs`) and If (`if_node.rs`) share: reading a subgraph's free values (for
//! the outer graph's pruning and ordering), the main graph's import checks applied to every
//! body (one definition per value, pruning to the body's outputs, topological order, every
//! kept node's op supported, listed with its full path), adding a body's initializers, and
//! mapping its nodes into a scope that also holds the outer graph's values.

use crate::import::{MapCx, is_supported, map_node, topo_order, value_err};
use crate::proto::{GraphProto, NodeProto};
use crate::tensor::tensor_from_proto;
use crate::{OnnxError, UnsupportedOp};
use fp8c_ir::{Graph, Op, Value};
use std::collections::{HashMap, HashSet};

/// A node's graph attributes with the path segment each adds to the names of its nodes:
/// If's `then_branch` and `else_branch` are `then` and `else` (as `if_node.rs` names them),
/// Scan's and Loop's `body` is `body`, any other graph attribute keeps its name.
pub(crate) fn bodies(n: &NodeProto) -> Vec<(String, &GraphProto)> {
    let seg = |a: &str| match a {
        "then_branch" => "then".to_string(),
        "else_branch" => "else".to_string(),
        other => other.to_string(),
    };
    let mut out = Vec::new();
    for a in &n.attribute {
        if let Some(g) = &a.g {
            out.push((seg(a.name()), g));
        }
        for (i, g) in a.graphs.iter().enumerate() {
            out.push((format!("{}.{i}", seg(a.name())), g));
        }
    }
    out
}

/// The name of node `k` of a body mapped under `prefix`: `{prefix}.{node}`, with
/// `{op_type}_{k}` for a node the model leaves unnamed.
pub(crate) fn local_name(prefix: &str, n: &NodeProto, k: usize) -> String {
    if n.name().is_empty() {
        format!("{prefix}.{}_{k}", n.op_type())
    } else {
        format!("{prefix}.{}", n.name())
    }
}

/// The main graph's checks on `sub` (mapped under `prefix`): every value it defines is
/// defined once; only the nodes that feed its outputs are kept; they are returned in
/// topological order (a cycle is an error naming its nodes).
pub(crate) fn body_order(sub: &GraphProto, prefix: &str) -> Result<Vec<usize>, OnnxError> {
    let nodes = &sub.node;
    let mut defined: HashMap<&str, String> = HashMap::new();
    for i in &sub.input {
        defined.insert(i.name(), format!("an input of {prefix}"));
    }
    for t in &sub.initializer {
        if defined
            .insert(t.name(), format!("an initializer of {prefix}"))
            .is_some()
        {
            return Err(value_err(
                "value",
                t.name(),
                format!("is defined twice in {prefix}"),
            ));
        }
    }
    let mut producer: HashMap<&str, usize> = HashMap::new();
    for (k, n) in nodes.iter().enumerate() {
        for o in n.output.iter().filter(|o| !o.is_empty()) {
            let by = format!("node \"{}\"", local_name(prefix, n, k));
            if let Some(prev) = defined.insert(o, by.clone()) {
                return Err(value_err(
                    "value",
                    o,
                    format!("is defined twice: by {prev} and by {by}"),
                ));
            }
            producer.insert(o, k);
        }
    }
    let mut keep = vec![false; nodes.len()];
    let mut stack: Vec<&str> = sub.output.iter().map(|o| o.name()).collect();
    let mut seen: HashSet<&str> = stack.iter().copied().collect();
    while let Some(v) = stack.pop() {
        let Some(&k) = producer.get(v) else { continue };
        if std::mem::replace(&mut keep[k], true) {
            continue;
        }
        for i in node_refs(&nodes[k]) {
            if !i.is_empty() && seen.insert(i) {
                stack.push(i);
            }
        }
    }
    topo_order(nodes, &keep, &producer).map_err(|cycle| {
        OnnxError::Cycle(
            cycle
                .into_iter()
                .map(|k| local_name(prefix, &nodes[k], k))
                .collect(),
        )
    })
}

/// Runs [`body_order`] on every body of `node` (named `name`) and, recursively, on the
/// bodies of their kept nodes; every kept body node whose op the importer does not map is
/// added to `unsupported` under its full path (`{if}.then.{node}`, `{scan}.body.{node}`).
pub(crate) fn check_bodies(
    node: &NodeProto,
    name: &str,
    unsupported: &mut Vec<UnsupportedOp>,
) -> Result<(), OnnxError> {
    for (seg, sub) in bodies(node) {
        let prefix = format!("{name}.{seg}");
        for k in body_order(sub, &prefix)? {
            let n = &sub.node[k];
            let path = local_name(&prefix, n, k);
            if !is_supported(n) {
                unsupported.push(UnsupportedOp::of(n, &path));
            }
            check_bodies(n, &path, unsupported)?;
        }
    }
    Ok(())
}

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

/// Maps `sub`'s kept nodes (named `{prefix}.{node}`, in [`body_order`]) into `scope` with the
/// importer's own `map_node`, every node output counted as used.
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
    for k in body_order(sub, prefix)? {
        let n = &sub.node[k];
        map_node(g, scope, n, &local_name(prefix, n, k), &mut bcx)?;
    }
    Ok(())
}
