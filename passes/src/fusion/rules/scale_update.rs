//! Every delayed-scaling update of a step in one kernel.

use super::Rule;
use crate::fusion::lang::{
    Data, FusionAnalysis, Fx, FxGraph, add_proj, attr_symbol, node_op, slot_of,
};
use egg::{Applier, Id, PatternAst, Rewrite, SearchMatches, Searcher, Subst, Symbol, Var};
use fp8c_ir::{AmaxSource, Op};
use std::collections::BTreeMap;

/// The rules of this file.
pub fn rules() -> Vec<Rule> {
    vec![
        // compute_scale(amax_history_update(h_i, a_i).recorded, s_i) and the rolled history,
        // for every tensor i = the outputs of one batched_scale_update(h_0, a_0, s_0, ...).
        Rewrite::new("batched-scale-update", Batch, Batch).expect("binds no variables"),
    ]
}

/// The batching rule: it searches every class, then applies once over all matches.
#[derive(Clone, Copy)]
struct Batch;

/// One tensor's update, found at a `compute_scale` class.
struct Entry {
    history: Symbol,
    h: Id,
    amax: Id,
    prev_scale: Id,
    scale: Id,
    next: Id,
}

/// The update at class `c`: a history-based `compute_scale` over the recorded output of an
/// `amax_history_update` of a batchable history. Returns its attribute leaf and the entry.
fn entry(eg: &mut FxGraph, c: Id) -> Option<(Symbol, Entry)> {
    let (attrs, src, prev) = eg[c].nodes.iter().find_map(|n| match n {
        Fx::ComputeScale([a, src, prev]) => Some((*a, *src, *prev)),
        _ => None,
    })?;
    let cs = Fx::ComputeScale([attrs, src, prev]);
    match node_op(eg, &cs).ok()?.0 {
        Op::ComputeScale { source, .. } if source != AmaxSource::Current => {}
        _ => return None,
    }
    let (hist_class, h, amax) = eg[src].nodes.iter().find_map(|n| match n {
        Fx::Proj([k, t]) if slot_of(eg, *k) == Some(0) => {
            eg[*t].nodes.iter().find_map(|m| match m {
                Fx::HistoryUpdate([h, a]) => Some((*t, *h, *a)),
                _ => None,
            })
        }
        _ => None,
    })?;
    let history = eg[h].nodes.iter().find_map(|n| match n {
        Fx::Sym(s) if eg.analysis.batchable.contains(s) => Some(*s),
        _ => None,
    })?;
    let next = add_proj(eg, 1, hist_class);
    Some((
        attr_symbol(eg, attrs)?,
        Entry {
            history,
            h,
            amax,
            prev_scale: prev,
            scale: eg.find(c),
            next,
        },
    ))
}

impl Searcher<Fx, FusionAnalysis> for Batch {
    fn search_eclass_with_limit(
        &self,
        egraph: &FxGraph,
        eclass: Id,
        limit: usize,
    ) -> Option<SearchMatches<'_, Fx>> {
        let is_cs = egraph[eclass]
            .nodes
            .iter()
            .any(|n| matches!(n, Fx::ComputeScale(_)));
        (limit > 0 && is_cs).then(|| SearchMatches {
            eclass,
            substs: vec![Subst::default()],
            ast: None,
        })
    }

    fn vars(&self) -> Vec<Var> {
        Vec::new()
    }
}

impl Applier<Fx, FusionAnalysis> for Batch {
    fn apply_matches(
        &self,
        egraph: &mut FxGraph,
        matches: &[SearchMatches<Fx>],
        _rule: Symbol,
    ) -> Vec<Id> {
        // Group by compute_scale attributes (one kernel per format and recipe), order each
        // group by history name: the batched node does not depend on e-class numbering.
        let mut groups: BTreeMap<String, (Symbol, BTreeMap<String, Entry>)> = BTreeMap::new();
        for m in matches {
            let c = egraph.find(m.eclass);
            if let Some((attrs, e)) = entry(egraph, c) {
                let g = groups
                    .entry(attrs.as_str().to_string())
                    .or_insert_with(|| (attrs, BTreeMap::new()));
                g.1.insert(e.history.as_str().to_string(), e);
            }
        }
        let mut changed = Vec::new();
        for (_, (attrs, entries)) in groups {
            let mut children = vec![egraph.add(Fx::Sym(attrs))];
            for e in entries.values() {
                children.extend([e.h, e.amax, e.prev_scale]);
            }
            let t = egraph.add(Fx::Op(Symbol::from("batched_scale_update"), children));
            if !matches!(&egraph[t].data, Data::Values(v) if v.len() == 3 * entries.len()) {
                continue;
            }
            for (i, e) in entries.values().enumerate() {
                let outs = [3 * i, 3 * i + 1, 3 * i + 2].map(|k| add_proj(egraph, k, t));
                let scale = add_proj(egraph, 0, e.scale);
                let scale_inv = add_proj(egraph, 1, e.scale);
                for (a, b) in [(e.next, outs[0]), (scale, outs[1]), (scale_inv, outs[2])] {
                    super::union_into(egraph, a, b, &mut changed);
                }
            }
        }
        changed
    }

    fn apply_one(
        &self,
        _egraph: &mut FxGraph,
        _eclass: Id,
        _subst: &Subst,
        _ast: Option<&PatternAst<Fx>>,
        _rule: Symbol,
    ) -> Vec<Id> {
        // Only `apply_matches` is called (by the runner's scheduler).
        Vec::new()
    }
}
