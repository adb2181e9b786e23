//! Attention as one op: recognition of the scaled dot-product attention chains exports
//! contain (canonicalize calls [`fuse`]), and the op's decomposition back into the unfused ops
//! ([`decompose`]) for backends without an attention kernel.
//!
//! Recognition (`pattern.rs` for the chain, `mask.rs` for the mask, `consts.rs` for the
//! compile-time values both read) replaces `softmax(scale·q·kᵀ + mask)·v` by `attention`, whose
//! kernels never hold the score matrix. It changes results by f32 rounding only (the same
//! products, sums and exponentials, tiled: ≤ 1e-5 relative, checked on the committed exports
//! by `tests/attention_fusion.rs`) and leaves every chain it cannot prove equivalent as it
//! is: a softmax over another axis, a scale that is not a constant, probabilities read
//! elsewhere, a mask of another type, a non-additive mask. `--no-fuse-attention`
//! (`PassOptions::no_fuse_attention`) skips it, giving the unfused graph to compare with; so
//! does `--fp8-attention` for now (the fused op has no FP8 path: the products then stay
//! separate GEMMs the precision policy puts in FP8).

mod consts;
pub mod decompose;
mod mask;
mod pattern;

use crate::PassCx;
use consts::Consts;
use fp8c_ir::{Graph, IrError, Op, Tensor, Value};
use mask::MaskPlan;
use std::collections::HashMap;

pub use decompose::{decompose, decompose_if};
pub use mask::HIDDEN_BELOW;

/// Replaces every recognised attention chain of `g` by one `attention` node; returns how many.
pub fn fuse(g: &mut Graph, cx: &PassCx) -> Result<usize, IrError> {
    let trained = match cx
        .options
        .train
        .as_ref()
        .and_then(|t| t.train_only.as_ref())
    {
        Some(globs) => {
            Some(crate::precision::compile_globs("--train", globs).map_err(IrError::Other)?)
        }
        None => None,
    };
    let consts = Consts::new(trained.as_ref());
    // Layers share one mask: its plan (and any smaller mask built for it) is made once.
    type Key = (
        Vec<(Value, bool, u64, Option<Value>)>,
        Option<Value>,
        u64,
        u64,
    );
    let mut plans: HashMap<Key, Option<MaskPlan>> = HashMap::new();
    let mut built: HashMap<Key, Value> = HashMap::new();
    let mut count = 0;
    for id in g.topo_order()? {
        if !g.contains(id) || !matches!(g.node(id).op, Op::Softmax { .. }) {
            continue;
        }
        let Some(m) = pattern::match_at(g, &consts, id) else {
            continue;
        };
        let dims = |v: Value| g.value_type(v).known_dims().unwrap_or_default();
        let (tq, tk) = (dims(m.q)[2], dims(m.k)[2]);
        let hides = m
            .hides
            .iter()
            .map(|h| (h.cond, h.visible_if, h.neg.to_bits(), h.from));
        let key: Key = (hides.collect(), m.additive, tq, tk);
        let plan = match plans.get(&key) {
            Some(p) => p.clone(),
            None => {
                let p = mask::plan(g, &consts, &m.hides, m.additive, tq, tk)?;
                plans.insert(key.clone(), p.clone());
                p
            }
        };
        let Some(plan) = plan else {
            continue;
        };
        let (causal, mask) = match plan {
            MaskPlan::Direct { causal, mask } => (causal, mask),
            MaskPlan::Small { conds, neg } => match built.get(&key) {
                Some(&w) => (false, Some(w)),
                None => {
                    let dt = g.value_type(m.q).dtype;
                    let base = g.node(conds[0].0.node).name.clone();
                    let mut cond = None;
                    for &(c, visible_if) in &conds {
                        let c = if visible_if {
                            c
                        } else {
                            g.add_node(&format!("{base}.not"), Op::Not, &[c])?[0]
                        };
                        cond = Some(match cond {
                            Some(prev) => {
                                g.add_node(&format!("{base}.and"), Op::And, &[prev, c])?[0]
                            }
                            None => c,
                        });
                    }
                    let cond =
                        cond.ok_or_else(|| IrError::Other("attention: no mask condition".into()))?;
                    let scalar =
                        |x: f64| Tensor::from_f64_as(dt, vec![], &[x]).map_err(IrError::Other);
                    let zero = g.add_node(
                        &format!("{base}.visible"),
                        Op::Constant {
                            value: scalar(0.0)?,
                        },
                        &[],
                    )?[0];
                    let hidden = g.add_node(
                        &format!("{base}.hidden"),
                        Op::Constant {
                            value: scalar(neg)?,
                        },
                        &[],
                    )?[0];
                    let w =
                        g.add_node(&format!("{base}.mask"), Op::Where, &[cond, zero, hidden])?[0];
                    built.insert(key, w);
                    (false, Some(w))
                }
            },
        };
        let op = Op::Attention {
            scale: m.scale,
            causal,
        };
        let mut inputs = vec![m.q, m.k, m.v];
        inputs.extend(mask);
        let name = g.node(m.out).name.clone();
        // A mask that does not broadcast to the scores (never in a valid model) is left alone.
        if g.infer_node(&name, &op, &inputs).is_err() {
            continue;
        }
        let tmp = g.fresh_name(&format!("{name}.attention"));
        let o = g.add_node(&tmp, op, &inputs)?[0];
        g.replace_uses(Value::new(m.out, 0), o)?;
        g.remove_node(m.out)?;
        g.rename_node(o.node, &name);
        count += 1;
    }
    Ok(count)
}
