//! Producers that emit FP8 directly: LayerNorm, and any chain (or DAG) of elementwise ops,
//! per tensor or (for 1×N tiles) per tile.

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
        // block_quantize[rows=1](f(a..)) = outputs 1 and 2 of elementwise_block_quantize[f](a..),
        // whose first output is f(a..): per-tile FP8 (1×N tiles of the last axis) straight
        // from the producer.
        class_rule(
            "elementwise-block-quantize",
            |eg, n| row_block_source(eg, n).is_some(),
            elementwise_block_quantize,
        ),
        // block_quantize[rows=1](layer_norm(x, g, b)) over the last axis = outputs 1 and 2 of
        // layer_norm_block_quantize(x, g, b), whose first output is layer_norm(x, g, b).
        class_rule(
            "layer-norm-block-quantize",
            |eg, n| row_block_layer_norm(eg, n).is_some(),
            layer_norm_block_quantize,
        ),
        // elementwise_quantize[P](.., g(b..), .., s) = elementwise_quantize[P ∘ g](.., b.., .., s),
        // and the same for elementwise_block_quantize: a producer of an input joins the
        // program (chains and DAGs, one op per iteration).
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
    matches!(
        op_name(n),
        Some("elementwise_quantize" | "elementwise_block_quantize")
    )
}

/// The elementwise class a `block_quantize` with tiles of one row quantizes (None for any
/// other node, or another producer).
fn row_block_source(eg: &FxGraph, n: &Fx) -> Option<Id> {
    if op_name(n) != Some("block_quantize") {
        return None;
    }
    let (Op::BlockQuantize { rows: 1, .. }, ins) = node_op(eg, n).ok()? else {
        return None;
    };
    let x = eg.find(*ins.first()?);
    (has_generic_op(eg, x) && ew_node(eg, x).is_some()).then_some(x)
}

/// The LayerNorm (its class, axis, epsilon and inputs) whose output a `block_quantize` with
/// tiles of one row quantizes (None for any other node).
fn row_block_layer_norm(eg: &FxGraph, n: &Fx) -> Option<(Id, i64, f32, Vec<Id>)> {
    if op_name(n) != Some("block_quantize") {
        return None;
    }
    let (Op::BlockQuantize { rows: 1, .. }, ins) = node_op(eg, n).ok()? else {
        return None;
    };
    let y = eg.find(*ins.first()?);
    eg[y].nodes.iter().find_map(|m| {
        if op_name(m) != Some("layer_norm") {
            return None;
        }
        match node_op(eg, m).ok()? {
            (Op::LayerNormalization { axis, epsilon }, ins) => Some((y, axis, epsilon, ins)),
            _ => None,
        }
    })
}

fn layer_norm_block_quantize(eg: &mut FxGraph, class: Id) -> Vec<Id> {
    let mut changed = Vec::new();
    let nodes: Vec<Fx> = eg[class].nodes.clone();
    for n in &nodes {
        let Some((y, axis, ln_eps, ins)) = row_block_layer_norm(eg, n) else {
            continue;
        };
        let Some((to, saturate, cols, scaling, epsilon)) = block_attrs(eg, n) else {
            continue;
        };
        let op = Op::LayerNormBlockQuantize {
            axis,
            epsilon: ln_eps,
            to,
            saturate,
            cols,
            scaling,
            amax_epsilon: epsilon,
        };
        fuse_tiles(eg, class, y, &op, &ins, &mut changed);
    }
    changed
}

/// Adds `op` over `inputs`, a fused producer whose outputs are (y, codes, scale_inv), and
/// makes them equal to the class `y` and to the outputs of the block_quantize tuple `class`,
/// if its codes and scales have the very types of that block_quantize's.
fn fuse_tiles(eg: &mut FxGraph, class: Id, y: Id, op: &Op, inputs: &[Id], changed: &mut Vec<Id>) {
    let same = match (check_op(eg, op, inputs), &eg[class].data) {
        (Some(t), Data::Values(old)) => t.len() == 3 && t[1..] == old[..],
        _ => false,
    };
    let Some(t) = same.then(|| add_op(eg, op, inputs).ok()).flatten() else {
        return;
    };
    let (y_out, q_out, s_out) = (add_proj(eg, 0, t), add_proj(eg, 1, t), add_proj(eg, 2, t));
    let (q_old, s_old) = (add_proj(eg, 0, class), add_proj(eg, 1, class));
    union_into(eg, q_old, q_out, changed);
    union_into(eg, s_old, s_out, changed);
    union_into(eg, y, y_out, changed);
}

/// The program-independent attributes of an elementwise block quantize:
/// (to, saturate, cols, scaling, epsilon).
type BlockAttrs = (fp8c_ir::DType, bool, i64, fp8c_ir::BlockScaling, f32);

/// The attributes of a `block_quantize` node, but its tile's rows.
fn block_attrs(eg: &FxGraph, n: &Fx) -> Option<BlockAttrs> {
    match node_op(eg, n).ok()?.0 {
        Op::BlockQuantize {
            to,
            saturate,
            cols,
            scaling,
            epsilon,
            ..
        } => Some((to, saturate, cols, scaling, epsilon)),
        _ => None,
    }
}

/// Adds `elementwise_block_quantize[p](p.inputs..)`; None if it does not type-check.
fn add_ewbq(
    eg: &mut FxGraph,
    p: Program,
    (to, saturate, cols, scaling, epsilon): BlockAttrs,
) -> Option<Id> {
    let op = Op::ElementwiseBlockQuantize {
        expr: p.expr,
        to,
        saturate,
        cols,
        scaling,
        epsilon,
    };
    check_op(eg, &op, &p.inputs)?;
    add_op(eg, &op, &p.inputs).ok()
}

fn elementwise_block_quantize(eg: &mut FxGraph, class: Id) -> Vec<Id> {
    let mut changed = Vec::new();
    let nodes: Vec<Fx> = eg[class].nodes.clone();
    for n in &nodes {
        let Some(y) = row_block_source(eg, n) else {
            continue;
        };
        let Some((to, saturate, cols, scaling, epsilon)) = block_attrs(eg, n) else {
            continue;
        };
        let Some(p) = build(eg, y, &BTreeSet::from([y]), &[]) else {
            continue;
        };
        let op = Op::ElementwiseBlockQuantize {
            expr: p.expr,
            to,
            saturate,
            cols,
            scaling,
            epsilon,
        };
        fuse_tiles(eg, class, y, &op, &p.inputs, &mut changed);
    }
    changed
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

/// How `grow` makes an elementwise quantizer again around a grown program.
#[derive(Clone, Copy)]
enum Remake {
    /// elementwise_quantize with (to, saturate) and the scale's class.
    Scaled(fp8c_ir::DType, bool, Id),
    /// elementwise_block_quantize with its attributes.
    Tiled(BlockAttrs),
}

fn grow(eg: &mut FxGraph, class: Id) -> Vec<Id> {
    let mut changed = Vec::new();
    let nodes: Vec<Fx> = eg[class].nodes.clone();
    for n in nodes.iter().filter(|n| is_ewq(n)) {
        let Ok((op, ins)) = node_op(eg, n) else {
            continue;
        };
        // The program's inputs, and how to make the op again around a grown program.
        let (expr, inputs, remake): (_, &[Id], Remake) = match op {
            Op::ElementwiseQuantize { expr, to, saturate } => {
                let Some((&s, inputs)) = ins.split_last() else {
                    continue;
                };
                (expr, inputs, Remake::Scaled(to, saturate, s))
            }
            Op::ElementwiseBlockQuantize {
                expr,
                to,
                saturate,
                cols,
                scaling,
                epsilon,
            } => (
                expr,
                &ins[..],
                Remake::Tiled((to, saturate, cols, scaling, epsilon)),
            ),
            _ => continue,
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
            let t = match remake {
                Remake::Scaled(to, saturate, s) => add_ewq(eg, p, to, saturate, s),
                Remake::Tiled(attrs) => add_ewbq(eg, p, attrs),
            };
            if let Some(t) = t {
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
