//! Helpers shared by the integration tests.
#![allow(dead_code)]

use fp8c_ir::{Graph, NodeId, Op, TensorType};
use fp8c_onnx::builder::ModelBuilder;
use fp8c_onnx::{ImportOptions, Imported, OnnxError, import_bytes};

/// Imports a builder-made model with default options, panicking with the error text.
pub fn import(b: ModelBuilder) -> Imported {
    import_with(b, &ImportOptions::default()).unwrap_or_else(|e| panic!("import failed: {e}"))
}

/// Imports a builder-made model with options.
pub fn import_with(b: ModelBuilder, opts: &ImportOptions) -> Result<Imported, OnnxError> {
    import_bytes(&b.to_bytes(), None, opts)
}

/// The import error's text.
pub fn import_err(b: ModelBuilder) -> String {
    match import_with(b, &ImportOptions::default()) {
        Ok(_) => panic!("import unexpectedly succeeded"),
        Err(e) => e.to_string(),
    }
}

/// Non-interface, non-constant nodes in topological order.
pub fn compute_nodes(g: &Graph) -> Vec<NodeId> {
    g.topo_order()
        .unwrap()
        .into_iter()
        .filter(|&id| {
            !g.node(id).op.is_interface() && !matches!(g.node(id).op, Op::Constant { .. })
        })
        .collect()
}

/// Op text names of the compute nodes, in topological order.
pub fn op_names(g: &Graph) -> Vec<&'static str> {
    compute_nodes(g)
        .into_iter()
        .map(|id| g.node(id).op.name())
        .collect()
}

/// The op of the node called `name`.
pub fn op_of<'g>(g: &'g Graph, name: &str) -> &'g Op {
    let id = g
        .find_node(name)
        .unwrap_or_else(|| panic!("no node named {name}"));
    &g.node(id).op
}

/// The type of the graph output called `name`.
pub fn output_type(imp: &Imported, name: &str) -> TensorType {
    let o = imp
        .graph
        .outputs()
        .iter()
        .find(|o| o.name == name)
        .unwrap_or_else(|| panic!("no output {name}"));
    imp.graph.value_type(o.value).clone()
}

/// The type's text form (`f32[batch,8]`).
pub fn output_ty(imp: &Imported, name: &str) -> String {
    output_type(imp, name).to_string()
}
