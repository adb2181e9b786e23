//! Why a value has no static shape, for the lowering's error: the node where the unknown dims
//! start (every input of it static, its output not), which of its inputs' *values* decide its
//! shape, and the graph inputs (or params, or state) those values are computed from. After
//! canonicalize, with every input shape bound, what is left is a shape that truly depends on
//! data: the message names it so the user knows which value to make a constant.

use fp8c_ir::{Graph, NodeId, Op, Value, interface_name};
use std::collections::HashSet;

/// Why output `slot` of node `id` is not static, as the tail of an error message.
pub(crate) fn why_not_static(g: &Graph, id: NodeId, slot: usize) -> String {
    let ty = &g.node(id).outputs[slot];
    // Walk to where the unknown dims start.
    let mut at = id;
    let mut guard = 0;
    while let Some(&v) = g
        .node(at)
        .inputs()
        .iter()
        .find(|v| !g.value_type(**v).is_static())
    {
        at = v.node;
        guard += 1;
        if guard > g.node_count() {
            break;
        }
    }
    let origin = g.node(at);
    if let Op::Input { name } = &origin.op {
        return format!(
            "output {slot} has type {ty}, which is not static: graph input \"{name}\" has type {}; \
             give its shape (--input-shape {name}=...)",
            origin.outputs[0]
        );
    }
    let deciding: Vec<(usize, Value)> = fp8c_ir::infer::shape_operands(&origin.op)
        .iter()
        .filter_map(|&i| origin.inputs().get(i).map(|&v| (i, v)))
        .filter(|(_, v)| g.constant_value(*v).is_none())
        .collect();
    let deciding = if deciding.is_empty() {
        origin
            .inputs()
            .iter()
            .enumerate()
            .filter(|(_, v)| g.constant_value(**v).is_none())
            .map(|(i, &v)| (i, v))
            .collect()
    } else {
        deciding
    };
    let parts: Vec<String> = deciding
        .iter()
        .map(|&(i, v)| {
            let producer = g.node(v.node);
            let roots = sources(g, v);
            let from = if producer.op.is_interface() {
                String::new()
            } else if roots.is_empty() {
                format!(" (\"{}\")", producer.name)
            } else {
                format!(
                    " (\"{}\", computed from {})",
                    producer.name,
                    roots.join(", ")
                )
            };
            let what = match &producer.op {
                op if op.is_interface() => describe(g, v.node),
                _ => format!("input {i}{from}"),
            };
            format!("the value of {what}")
        })
        .collect();
    let here = if at == id {
        "this node".to_string()
    } else {
        format!(
            "node \"{}\" ({}), where the unknown dims start,",
            origin.name,
            origin.op.name()
        )
    };
    format!(
        "output {slot} has type {ty}, which is not static: the shape {here} gives depends on {}, \
         not only on shapes and constants (fp8c runs static shapes: make that value a constant \
         or an input fp8c specialises on)",
        if parts.is_empty() {
            "values only known when the model runs".to_string()
        } else {
            parts.join(" and ")
        }
    )
}

/// The graph inputs, params and state `v` is computed from, as `graph input "x"`, in the
/// graph's order.
fn sources(g: &Graph, v: Value) -> Vec<String> {
    let mut seen = HashSet::new();
    let mut stack = vec![v.node];
    let mut found: Vec<NodeId> = Vec::new();
    while let Some(id) = stack.pop() {
        if !seen.insert(id) {
            continue;
        }
        let n = g.node(id);
        if n.op.is_interface() {
            found.push(id);
        } else {
            stack.extend(n.inputs().iter().map(|i| i.node));
        }
    }
    found.sort();
    found.into_iter().map(|id| describe(g, id)).collect()
}

/// `graph input "x"`, `param "w"` or `state "s"`.
fn describe(g: &Graph, id: NodeId) -> String {
    let op = &g.node(id).op;
    let kind = match op {
        Op::Input { .. } => "graph input",
        Op::Param { .. } => "param",
        _ => "state",
    };
    format!("{kind} \"{}\"", interface_name(op))
}
