//! GEMM epilogues: elementwise consumers of a `scaled_matmul` (bias, GELU, residual add, ...)
//! and the quantization of its result (cuBLASLt's D scale and amax of D).

use super::producers::quantize_attrs;
use super::{Rule, class_rule, has_gemm, union_into};
use crate::fusion::lang::{Fx, FxGraph, add_op, add_proj, check_op, node_op, value_type};
use crate::fusion::program::{build, ew_node, recover};
use egg::{FromOp, Id};
use fp8c_ir::fused::is_program_op;
use fp8c_ir::{DType, EwExpr, Op};
use std::collections::BTreeSet;

/// The rules of this file.
pub fn rules() -> Vec<Rule> {
    vec![
        // f(scaled_matmul(qa, qb, sa, sb), b..) = scaled_matmul_epilogue[f](qa, qb, sa, sb, b..)
        // for any elementwise f keeping the product's type; growing one consumer per
        // iteration: bias add, GELU (also decomposed), residual add...
        class_rule(
            "gemm-epilogue",
            |eg, n| matches!(n, Fx::Op(_, ch) if ch.iter().any(|&c| has_gemm(eg, c))),
            epilogue,
        ),
        // quantize(epilogue(..), s) = the FP8 output of the same GEMM with D scale s, whose
        // first output is the epilogue's result and third its amax (cuBLASLt D scale, amax D).
        class_rule(
            "gemm-d-scale",
            |eg, n| matches!(n, Fx::Quantize([_, d, _]) if has_gemm(eg, *d)),
            d_scale,
        ),
    ]
}

/// A GEMM whose result a consumer can fuse into: the four GEMM operands, the output type,
/// the epilogue so far (empty for a bare `scaled_matmul`), its extra inputs, the class of the
/// bare product, and the classes the epilogue computes inside.
struct Source {
    gemm: [Id; 4],
    out: DType,
    fast_accum: bool,
    expr: EwExpr,
    extras: Vec<Id>,
    product: Id,
    absorbed: BTreeSet<Id>,
}

/// The GEMMs computing class `c` without a D scale: a bare `scaled_matmul`, or an epilogue.
fn sources(eg: &FxGraph, c: Id) -> Vec<Source> {
    let c = eg.find(c);
    let mut out = Vec::new();
    for n in &eg[c].nodes {
        match n {
            Fx::ScaledMatMul([_, qa, qb, sa, sb]) => {
                let Ok((Op::ScaledMatMul { out: o, fast_accum }, _)) = node_op(eg, n) else {
                    continue;
                };
                out.push(Source {
                    gemm: [*qa, *qb, *sa, *sb].map(|i| eg.find(i)),
                    out: o,
                    fast_accum,
                    expr: EwExpr::default(),
                    extras: Vec::new(),
                    product: c,
                    absorbed: BTreeSet::new(),
                });
            }
            Fx::Op(..) => {
                let Ok((
                    Op::ScaledMatMulEpilogue {
                        out: o,
                        fast_accum,
                        expr,
                        to: None,
                        ..
                    },
                    ins,
                )) = node_op(eg, n)
                else {
                    continue;
                };
                let gemm = [ins[0], ins[1], ins[2], ins[3]];
                let Some(product) = bare_product(eg, o, fast_accum, gemm) else {
                    continue;
                };
                let mut prog_in = vec![product];
                prog_in.extend_from_slice(&ins[4..]);
                let Some(temps) = recover(eg, &expr, &prog_in) else {
                    continue;
                };
                out.push(Source {
                    gemm,
                    out: o,
                    fast_accum,
                    expr,
                    extras: ins[4..].to_vec(),
                    product,
                    absorbed: temps.iter().map(|&t| eg.find(t)).collect(),
                });
            }
            _ => {}
        }
    }
    out
}

/// The class of `scaled_matmul(qa, qb, sa, sb)` (it exists: every epilogue grows from one).
fn bare_product(eg: &FxGraph, out: DType, fast_accum: bool, gemm: [Id; 4]) -> Option<Id> {
    let s = crate::fusion::lang::attr_leaf_symbol(&Op::ScaledMatMul { out, fast_accum }.attrs())
        .ok()??;
    let leaf = eg.lookup(Fx::Sym(s))?;
    let node = Fx::from_op(
        "scaled_matmul",
        vec![leaf, gemm[0], gemm[1], gemm[2], gemm[3]],
    )
    .ok()?;
    eg.lookup(node)
}

fn epilogue(eg: &mut FxGraph, class: Id) -> Vec<Id> {
    let mut changed = Vec::new();
    let Some(ty) = value_type(eg, class).cloned() else {
        return changed;
    };
    let Some((op, ins)) = ew_node(eg, class) else {
        return changed;
    };
    debug_assert!(is_program_op(&op));
    let operands: BTreeSet<Id> = ins.iter().map(|&i| eg.find(i)).collect();
    for c in operands {
        for src in sources(eg, c) {
            if value_type(eg, src.product) != Some(&ty) || src.absorbed.contains(&class) {
                continue;
            }
            let mut absorbed = src.absorbed.clone();
            absorbed.insert(class);
            let Some(p) = build(eg, class, &absorbed, &[src.product]) else {
                continue;
            };
            let op = Op::ScaledMatMulEpilogue {
                out: src.out,
                fast_accum: src.fast_accum,
                expr: p.expr,
                to: None,
                saturate: false,
            };
            let mut inputs = src.gemm.to_vec();
            inputs.extend_from_slice(&p.inputs[1..]);
            if check_op(eg, &op, &inputs).is_none() {
                continue;
            }
            if let Ok(e) = add_op(eg, &op, &inputs) {
                union_into(eg, class, e, &mut changed);
            }
        }
    }
    changed
}

fn d_scale(eg: &mut FxGraph, class: Id) -> Vec<Id> {
    let mut changed = Vec::new();
    let nodes: Vec<Fx> = eg[class].nodes.clone();
    for q in &nodes {
        let Fx::Quantize([_, d, s]) = *q else {
            continue;
        };
        let Some((to, saturate)) = quantize_attrs(eg, q) else {
            continue;
        };
        for src in sources(eg, d) {
            let op = Op::ScaledMatMulEpilogue {
                out: src.out,
                fast_accum: src.fast_accum,
                expr: src.expr,
                to: Some(to),
                saturate,
            };
            let mut inputs = src.gemm.to_vec();
            inputs.extend_from_slice(&src.extras);
            inputs.push(s);
            if check_op(eg, &op, &inputs).is_none() {
                continue;
            }
            let Ok(t) = add_op(eg, &op, &inputs) else {
                continue;
            };
            let (d_out, q_out) = (add_proj(eg, 0, t), add_proj(eg, 1, t));
            union_into(eg, d, d_out, &mut changed);
            union_into(eg, class, q_out, &mut changed);
        }
    }
    changed
}
