//! The canonicalize pass alone (`fp8c_passes::canonicalize`): each `.fp8ir` here is a graph
//! as an import leaves it; the snapshot holds the IR after the pass and its notes.

mod pass_common;

use fp8c_core::Recipe;
use fp8c_passes::Pass;
use fp8c_passes::canonicalize::Canonicalize;
use fp8c_passes::precision::PolicyOptions;
use pass_common::{load, options, run_deterministic, snapshot};

/// Canonicalizes `file` and snapshots the result; returns the node count before and after.
fn canonicalize(file: &str, name: &str) -> (usize, usize) {
    let g = load("canonicalize", file);
    let passes = || -> Vec<Box<dyn Pass>> { vec![Box::new(Canonicalize)] };
    let opts = options(PolicyOptions::default(), Recipe::default());
    let (after, cx) = run_deterministic(&g, passes, opts);
    let text = format!(
        "notes: {:?}\n\nIR after canonicalize:\n{}",
        cx.notes,
        fp8c_ir::print(&after)
    );
    snapshot("canonicalize", file, name, &text);
    (g.node_ids().len(), after.node_ids().len())
}

#[test]
fn a_shape_chain_folds_into_a_static_reshape() {
    let (before, after) = canonicalize("shape_chain.fp8ir", "shape_chain");
    assert!(after < before, "{before} -> {after} nodes");
}

#[test]
fn identities_same_type_casts_and_same_shape_reshapes_are_bypassed() {
    let (before, after) = canonicalize("noops.fp8ir", "noops");
    assert!(after < before, "{before} -> {after} nodes");
}

#[test]
fn constant_arithmetic_folds_and_dead_nodes_go() {
    let (before, after) = canonicalize("constants.fp8ir", "constants");
    assert!(after < before, "{before} -> {after} nodes");
}
