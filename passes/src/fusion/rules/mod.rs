//! The rewrite rules of the fusion pass, grouped by topic; each states its identity in one
//! comment. Every rule only adds terms equal to existing ones; the cost model picks.
//!
//! - `quantize.rs`: a quantizer reading a tensor once (quantize + amax, cast + transpose);
//! - `producers.rs`: a producer emitting FP8 (LayerNorm, chains of elementwise ops);
//! - `gemm.rs`: GEMM epilogues (elementwise consumers, D scale and amax of D);
//! - `scale_update.rs`: every delayed-scaling update of a step in one kernel.
//!
//! Rules that fit egg's patterns are `rewrite!`s. Rules over a variable number of operands
//! (elementwise programs, the batched update) are Rust functions over one e-class
//! ([`ClassRule`]); they check types with `infer` before adding anything. See README.md for
//! how to write one.

mod gemm;
mod producers;
mod quantize;
mod scale_update;

use super::lang::{FusionAnalysis, Fx, FxGraph};
use egg::{
    Applier, Id, MultiPattern, PatternAst, Rewrite, SearchMatches, Searcher, Subst, Symbol, Var,
};

/// A rewrite of the fusion language.
pub type Rule = Rewrite<Fx, FusionAnalysis>;

/// Every rule, in a fixed order.
pub fn rules() -> Vec<Rule> {
    let mut r = Vec::new();
    r.extend(quantize::rules());
    r.extend(producers::rules());
    r.extend(gemm::rules());
    r.extend(scale_update::rules());
    r
}

/// A rule written in Rust: it fires on classes holding a node `wants` accepts, and `apply`
/// adds the equal terms it finds there, returning the classes it changed.
#[derive(Clone, Copy)]
pub struct ClassRule {
    wants: fn(&Fx) -> bool,
    apply: fn(&mut FxGraph, Id) -> Vec<Id>,
}

/// A [`ClassRule`] as an egg rewrite.
pub fn class_rule(
    name: &str,
    wants: fn(&Fx) -> bool,
    apply: fn(&mut FxGraph, Id) -> Vec<Id>,
) -> Rule {
    let r = ClassRule { wants, apply };
    Rewrite::new(name, r, r).expect("a class rule binds no variables")
}

impl Searcher<Fx, FusionAnalysis> for ClassRule {
    fn search_eclass_with_limit(
        &self,
        egraph: &FxGraph,
        eclass: Id,
        limit: usize,
    ) -> Option<SearchMatches<'_, Fx>> {
        (limit > 0 && egraph[eclass].nodes.iter().any(self.wants)).then(|| SearchMatches {
            eclass,
            substs: vec![Subst::default()],
            ast: None,
        })
    }

    fn vars(&self) -> Vec<Var> {
        Vec::new()
    }
}

impl Applier<Fx, FusionAnalysis> for ClassRule {
    fn apply_one(
        &self,
        egraph: &mut FxGraph,
        eclass: Id,
        _subst: &Subst,
        _ast: Option<&PatternAst<Fx>>,
        _rule: Symbol,
    ) -> Vec<Id> {
        let c = egraph.find(eclass);
        (self.apply)(egraph, c)
    }
}

/// Unions `a` and `b`, recording `a` in `changed` if they were different.
pub fn union_into(eg: &mut FxGraph, a: Id, b: Id, changed: &mut Vec<Id>) {
    if eg.union(a, b) {
        changed.push(eg.find(a));
    }
}

/// A rewrite over several patterns at once (egg's multi-patterns): `lhs` binds classes
/// (`?q = (quantize ?qa ?x ?s), ?a = (amax ?x)`), `rhs` makes each named class equal to a term.
pub fn multi(name: &str, lhs: &str, rhs: &str) -> Rule {
    let searcher: MultiPattern<Fx> = lhs.parse().expect("a valid left-hand side");
    let applier: MultiPattern<Fx> = rhs.parse().expect("a valid right-hand side");
    Rewrite::new(name, searcher, OnlyChanges(applier))
        .expect("the right-hand side binds no new variables")
}

/// An applier that reports a match only when it changed the e-graph (egg's multi-pattern
/// applier reports every match, so the runner could never see saturation).
struct OnlyChanges<A>(A);

impl<A: Applier<Fx, FusionAnalysis>> Applier<Fx, FusionAnalysis> for OnlyChanges<A> {
    fn apply_matches(
        &self,
        egraph: &mut FxGraph,
        matches: &[SearchMatches<Fx>],
        rule: Symbol,
    ) -> Vec<Id> {
        let mut changed = Vec::new();
        for m in matches {
            for subst in &m.substs {
                let one = SearchMatches {
                    eclass: m.eclass,
                    substs: vec![subst.clone()],
                    ast: None,
                };
                let before = (egraph.total_size(), egraph.number_of_classes());
                self.0
                    .apply_matches(egraph, std::slice::from_ref(&one), rule);
                if (egraph.total_size(), egraph.number_of_classes()) != before {
                    changed.push(egraph.find(m.eclass));
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

    fn vars(&self) -> Vec<Var> {
        self.0.vars()
    }
}
