//! Producers that emit FP8 directly: LayerNorm, and any chain (or DAG) of elementwise ops.

use super::{Rule, class_rule, has_generic_op, multi, union_into};
use crate::fusion::lang::{Data, Fx, FxGraph, add_op, add_proj, check_op, node_op, op_name};
use crate::fusion::program::{Program, build, ew_node, recover};
use egg::Id;
use fp8c_ir::Op;
use std::collections::BTreeSet;

/// The rules of this file.
pub fn rules() -> Vec<Rule> {
    vec![
        // quantize(layer_norm(x), s) = the FP8 output of layer_norm_quantize(x, s), whose first
        // output is layer_norm(x) (TE's LayerNorm emitting FP8).
        multi(
            "layer-norm-quantize",
            "?q = (quantize ?qa ?y ?s), ?y = (layer_norm ?la ?x ?g ?b)",
            "?y = (proj 0 (layer_norm_quantize ?la ?qa ?x ?s ?g ?b)), ?q = (proj 1 (layer_norm_quantize ?la ?qa ?x ?s ?g ?b))",
        ),
        // The same without LayerNorm's optional bias.
        multi(
            "layer-norm-quantize-no-bias",
            "?q = (quantize ?qa ?y ?s), ?y = (layer_norm ?la ?x ?g)",
            "?y = (proj 0 (layer_norm_quantize ?la ?qa ?x ?s ?g)), ?q = (proj 1 (layer_norm_quantize ?la ?qa ?x ?s ?g))",
        ),
        // quantize(f(a..), s) = the FP8 output of elementwise_quantize[f](a.., s), whose first
        // output is f(a..), for any elementwise op f.
        class_rule(
            "elementwise-quantize",
            |eg, n| matches!(n, Fx::Quantize([_, y, _]) if has_generic_op(eg, *y)),
            elementwise_quantize,
        ),
        // elementwise_quantize[P](.., g(b..), .., s) = elementwise_quantize[P ∘ g](.., b.., .., s):
        // a producer of an input joins the program (chains and DAGs, one op per iteration).
        class_rule("elementwise-quantize-grow", |_, n| is_ewq(n), grow),
        // amax(y) = the amax output of a fused kernel whose first output is y
        // (layer_norm_quantize, elementwise_quantize, scaled_matmul_epilogue with a D scale).
        class_rule(
            "fused-amax",
            |eg, n| matches!(n, Fx::Amax(y) if eg[*y].nodes.iter().any(|m| matches!(m, Fx::Proj(_)))),
            fused_amax,
        ),
    ]
}

fn is_quantize(n: &Fx) -> bool {
    matches!(n, Fx::Quantize(_))
}

fn is_ewq(n: &Fx) -> bool {
    op_name(n) == Some("elementwise_quantize")
}

/// The `to` and `saturate` of a quantize's attribute leaf.
pub fn quantize_attrs(eg: &FxGraph, q: &Fx) -> Option<(fp8c_ir::DType, bool)> {
    match node_op(eg, q).ok()?.0 {
        Op::Quantize { to, saturate } => Some((to, saturate)),
        _ => None,
    }
}

/// Adds `elementwise_quantize[p](p.inputs.., s)`; None if it does not type-check.
fn add_ewq(eg: &mut FxGraph, p: Program, to: fp8c_ir::DType, saturate: bool, s: Id) -> Option<Id> {
    let op = Op::ElementwiseQuantize {
        expr: p.expr,
        to,
        saturate,
    };
    let mut inputs = p.inputs;
    inputs.push(s);
    check_op(eg, &op, &inputs)?;
    add_op(eg, &op, &inputs).ok()
}

fn elementwise_quantize(eg: &mut FxGraph, class: Id) -> Vec<Id> {
    let mut changed = Vec::new();
    let nodes: Vec<Fx> = eg[class].nodes.clone();
    for q in nodes.iter().filter(|n| is_quantize(n)) {
        let Fx::Quantize([_, y, s]) = *q else {
            continue;
        };
        let Some((to, saturate)) = quantize_attrs(eg, q) else {
            continue;
        };
        let y = eg.find(y);
        if ew_node(eg, y).is_none() {
            continue;
        }
        let Some(p) = build(eg, y, &BTreeSet::from([y]), &[]) else {
            continue;
        };
        let Some(t) = add_ewq(eg, p, to, saturate, s) else {
            continue;
        };
        let (y_out, q_out) = (add_proj(eg, 0, t), add_proj(eg, 1, t));
        union_into(eg, class, q_out, &mut changed);
        union_into(eg, y, y_out, &mut changed);
    }
    changed
}

fn grow(eg: &mut FxGraph, class: Id) -> Vec<Id> {
    let mut changed = Vec::new();
    let nodes: Vec<Fx> = eg[class].nodes.clone();
    for n in nodes.iter().filter(|n| is_ewq(n)) {
        let Ok((Op::ElementwiseQuantize { expr, to, saturate }, ins)) = node_op(eg, n) else {
            continue;
        };
        let Some((&s, inputs)) = ins.split_last() else {
            continue;
        };
        let Some(temps) = recover(eg, &expr, inputs) else {
            continue;
        };
        let Some(&root) = temps.last() else { continue };
        let absorbed: BTreeSet<Id> = temps.iter().map(|&t| eg.find(t)).collect();
        for &i in inputs {
            let i = eg.find(i);
            if absorbed.contains(&i) || ew_node(eg, i).is_none() {
                continue;
            }
            let mut more = absorbed.clone();
            more.insert(i);
            let Some(p) = build(eg, root, &more, &[]) else {
                continue;
            };
            if let Some(t) = add_ewq(eg, p, to, saturate, s) {
                union_into(eg, class, t, &mut changed);
            }
        }
    }
    changed
}

/// Fused ops whose outputs are `(y, quantize(y), amax(y))`.
fn is_quantizing_producer(eg: &FxGraph, n: &Fx) -> bool {
    match op_name(n) {
        Some("layer_norm_quantize" | "elementwise_quantize") => true,
        Some("scaled_matmul_epilogue") => matches!(
            node_op(eg, n),
            Ok((Op::ScaledMatMulEpilogue { to: Some(_), .. }, _))
        ),
        _ => false,
    }
}

fn fused_amax(eg: &mut FxGraph, class: Id) -> Vec<Id> {
    let mut changed = Vec::new();
    let ys: Vec<Id> = eg[class]
        .nodes
        .iter()
        .filter_map(|n| match n {
            Fx::Amax(y) => Some(*y),
            _ => None,
        })
        .collect();
    for y in ys {
        let tuples: Vec<Id> = eg[y]
            .nodes
            .iter()
            .filter_map(|n| match n {
                Fx::Proj([k, t]) if crate::fusion::lang::slot_of(eg, *k) == Some(0) => Some(*t),
                _ => None,
            })
            .collect();
        for t in tuples {
            let fits = matches!(&eg[t].data, Data::Values(v) if v.len() == 3)
                && eg[t].nodes.iter().any(|n| is_quantizing_producer(eg, n));
            if fits {
                let a = add_proj(eg, 2, t);
                union_into(eg, class, a, &mut changed);
            }
        }
    }
    changed
}
