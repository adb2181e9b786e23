//! The graph verifier: checks every invariant of a [`Graph`] and reports every violation,
//! not just the first, as one [`IrError::Verify`].
//!
//! Invariants (those of `graph.rs`, plus the interface checks):
//! - every node input refers to an existing node and an existing output slot;
//! - the graph is acyclic;
//! - each node's declared `outputs` agree with `infer` applied to its inputs: same count,
//!   same dtypes and ranks, and each declared dim equals the inferred one, except where
//!   inference says `?` (a declared type may be more precise than inference, e.g. from ONNX
//!   `value_info`, but never contradict it);
//! - interface nodes (`input`, `param`, `state`) have no inputs and exactly one output;
//! - node names are unique; interface names (inputs, params, state, outputs) are unique
//!   within their kind;
//! - every interface node is listed in the interface once, in the list of its kind, and every
//!   interface entry is a live node of that kind;
//! - every graph output and state update refers to an existing value; every state update
//!   names a state entry and has exactly that state's type;
//! - every weight belongs to a param and has exactly the param's type.
//!
//! Node problems are reported as [`IrError::Node`] (naming the node); interface problems as
//! [`IrError::Duplicate`] or [`IrError::Other`]; a cycle as [`IrError::Cycle`]. Errors come
//! in a deterministic order: nodes in insertion order, then the interface, then cycles.
//!
//! Cost: one pass over the nodes and one over each interface list, with name lookups in maps
//! (no per-node or per-entry scan of the graph), so verifying after every pass stays cheap
//! on large graphs (`tests/infer/verifier.rs` verifies a 200,000-node chain).

use crate::error::{IrError, Result};
use crate::graph::interface_name;
use crate::infer::{InferInput, infer};
use crate::{Dim, Graph, NodeId, Op, TensorType, Value};
use std::collections::{BTreeMap, HashMap, HashSet};

/// Checks every invariant of `g` (see the module docs); `Err(IrError::Verify(all problems))`
/// if any fails.
pub fn verify(g: &Graph) -> Result<()> {
    let mut errors = Vec::new();
    check_nodes(g, &mut errors);
    check_names(g, &mut errors);
    check_interface(g, &mut errors);
    check_results(g, &mut errors);
    check_weights(g, &mut errors);
    if let Err(e) = g.topo_order() {
        errors.push(e);
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(IrError::Verify(errors))
    }
}

/// The type of `v`, or why `v` does not name a value.
fn value_type(g: &Graph, v: Value) -> std::result::Result<&TensorType, String> {
    if !g.contains(v.node) {
        return Err(format!(
            "refers to a node (#{}) that does not exist",
            v.node.index()
        ));
    }
    let n = g.node(v.node);
    n.outputs.get(v.slot as usize).ok_or_else(|| {
        format!(
            "refers to output {} of node \"{}\", which has {} output(s)",
            v.slot,
            n.name,
            n.outputs.len()
        )
    })
}

/// True when a declared type agrees with the inferred one: a declared dim may be more
/// precise than an inferred `?`, never different from an inferred size or symbol.
fn agrees(declared: &TensorType, inferred: &TensorType) -> bool {
    declared.dtype == inferred.dtype
        && declared.rank() == inferred.rank()
        && declared
            .shape
            .iter()
            .zip(&inferred.shape)
            .all(|(d, i)| *i == Dim::Unknown || d == i)
}

fn check_nodes(g: &Graph, errors: &mut Vec<IrError>) {
    for id in g.node_ids() {
        let n = g.node(id);
        let op = n.op.name();
        let err = |msg: String| IrError::node(n.name.clone(), op, msg);
        if n.op.is_interface() {
            if !n.inputs().is_empty() {
                errors.push(err(format!(
                    "interface nodes take no inputs, this one has {}",
                    n.inputs().len()
                )));
            }
            if n.outputs.len() != 1 {
                errors.push(err(format!(
                    "interface nodes have exactly one output, this one declares {}",
                    n.outputs.len()
                )));
            }
            continue;
        }
        let mut inputs = Vec::with_capacity(n.inputs().len());
        let mut inputs_ok = true;
        for (i, &v) in n.inputs().iter().enumerate() {
            match value_type(g, v) {
                Ok(ty) => inputs.push(InferInput {
                    ty,
                    value: g.constant_value(v),
                }),
                Err(m) => {
                    errors.push(err(format!("input {i} {m}")));
                    inputs_ok = false;
                }
            }
        }
        if !inputs_ok {
            continue;
        }
        match infer(&n.op, &inputs) {
            Err(m) => errors.push(err(m)),
            Ok(inferred) if inferred.len() != n.outputs.len() => errors.push(err(format!(
                "declares {} output(s), but the op gives {}: declared ({}), inferred ({})",
                n.outputs.len(),
                inferred.len(),
                list_types(&n.outputs),
                list_types(&inferred)
            ))),
            Ok(inferred) => {
                for (slot, (d, i)) in n.outputs.iter().zip(&inferred).enumerate() {
                    if !agrees(d, i) {
                        errors.push(err(format!(
                            "output {slot} is declared {d}, but inference gives {i}"
                        )));
                    }
                }
            }
        }
    }
}

fn list_types(tys: &[TensorType]) -> String {
    tys.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

fn check_names(g: &Graph, errors: &mut Vec<IrError>) {
    let mut by_name: BTreeMap<&str, Vec<NodeId>> = BTreeMap::new();
    for id in g.node_ids() {
        by_name
            .entry(g.node(id).name.as_str())
            .or_default()
            .push(id);
    }
    for (name, ids) in by_name {
        if let [first, _, ..] = ids.as_slice() {
            let op = g.node(*first).op.name();
            errors.push(IrError::node(
                name,
                op,
                format!("{} nodes share this name", ids.len()),
            ));
        }
    }
}

/// Each interface list holds live nodes of its kind, once, with unique names; each interface
/// node appears in its list.
fn check_interface(g: &Graph, errors: &mut Vec<IrError>) {
    let state_ids: Vec<NodeId> = g.state().iter().map(|&(id, _)| id).collect();
    let lists: [(&'static str, &[NodeId]); 3] = [
        ("input", g.inputs()),
        ("param", g.params()),
        ("state", &state_ids),
    ];
    let mut listed: HashSet<NodeId> = HashSet::new();
    for (kind, ids) in lists {
        let mut names = HashSet::new();
        for &id in ids {
            if !g.contains(id) {
                errors.push(IrError::Other(format!(
                    "the {kind} list refers to a node (#{}) that does not exist",
                    id.index()
                )));
                continue;
            }
            let n = g.node(id);
            if n.op.name() != kind {
                errors.push(IrError::node(
                    n.name.clone(),
                    n.op.name(),
                    format!(
                        "is listed among the graph's {kind}s but is a {} node",
                        n.op.name()
                    ),
                ));
                continue;
            }
            if !listed.insert(id) {
                errors.push(IrError::node(
                    n.name.clone(),
                    kind,
                    format!("is listed more than once among the graph's {kind}s"),
                ));
                continue;
            }
            let name = interface_name(&n.op);
            if !names.insert(name) {
                errors.push(IrError::Duplicate {
                    kind,
                    name: name.to_string(),
                });
            }
        }
    }
    for id in g.node_ids() {
        let n = g.node(id);
        if n.op.is_interface() && !listed.contains(&id) {
            let kind = n.op.name();
            errors.push(IrError::node(
                n.name.clone(),
                kind,
                format!("is not listed among the graph's {kind}s"),
            ));
        }
    }
}

/// Outputs and state updates refer to values; state updates keep the state's type.
fn check_results(g: &Graph, errors: &mut Vec<IrError>) {
    let mut names = HashSet::new();
    for o in g.outputs() {
        if !names.insert(o.name.as_str()) {
            errors.push(IrError::Duplicate {
                kind: "output",
                name: o.name.clone(),
            });
        }
        if let Err(m) = value_type(g, o.value) {
            errors.push(IrError::Other(format!("output \"{}\" {m}", o.name)));
        }
    }
    // What each update may target: of each name, the first live state entry or param (state
    // entries first), in one map so that the check stays linear in the interface's size.
    let mut targets: HashMap<&str, NodeId> = HashMap::new();
    for id in g
        .state()
        .iter()
        .map(|&(id, _)| id)
        .chain(g.params().iter().copied())
    {
        if g.contains(id) {
            targets.entry(interface_name(&g.node(id).op)).or_insert(id);
        }
    }
    for (state, &v) in g.state_updates() {
        let Some(&target) = targets.get(state.as_str()) else {
            errors.push(IrError::Other(format!(
                "update \"{state}\" names no state entry or param"
            )));
            continue;
        };
        let sn = g.node(target);
        match (value_type(g, v), sn.outputs.first()) {
            (Err(m), _) => errors.push(IrError::Other(format!("state update \"{state}\" {m}"))),
            (Ok(got), Some(want)) if got != want => errors.push(IrError::node(
                sn.name.clone(),
                "state",
                format!("its update has type {got}, but the state is declared {want}"),
            )),
            _ => {}
        }
    }
}

/// Weights belong to params and have their declared type.
fn check_weights(g: &Graph, errors: &mut Vec<IrError>) {
    // The first live param node of each name (one map: linear in the number of params).
    let mut params: HashMap<&str, NodeId> = HashMap::new();
    for &id in g.params() {
        if g.contains(id)
            && let Op::Param { name } = &g.node(id).op
        {
            params.entry(name.as_str()).or_insert(id);
        }
    }
    for (name, t) in g.weights() {
        let Some(&param) = params.get(name.as_str()) else {
            errors.push(IrError::Other(format!(
                "weight \"{name}\" belongs to no param"
            )));
            continue;
        };
        let n = g.node(param);
        let got = t.ty();
        match n.outputs.first() {
            Some(want) if *want != got => errors.push(IrError::node(
                n.name.clone(),
                "param",
                format!("its weight data has type {got}, but the param is declared {want}"),
            )),
            _ => {}
        }
    }
}
