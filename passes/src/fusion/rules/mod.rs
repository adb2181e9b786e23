//! The rewrite rules of the fusion pass, grouped by topic; each states its identity in one
//! comment. Every rule only adds terms equal to existing ones; the cost model picks.
//!
//! - `quantize.rs`: a quantizer reading a tensor once (quantize + amax, cast + transpose);
//! - `producers.rs`: a producer emitting FP8 (LayerNorm, chains of elementwise ops);
//! - `gemm.rs`: GEMM epilogues (elementwise consumers, D scale and amax of D);
//! - `scale_update.rs`: every delayed-scaling update of a step in one kernel.
//!
//! Rules that fit egg's patterns are multi-pattern rewrites ([`multi`], joined by lookup).
//! Rules over a variable number of operands (elementwise programs, the batched update) are
//! Rust functions over one e-class ([`ClassRule`]); they check types with `infer` before
//! adding anything. README.md lists every rule and says how to write one.

mod gemm;
mod producers;
mod quantize;
mod scale_update;

use super::lang::{FusionAnalysis, Fx, FxGraph};
use egg::{
    Applier, ENodeOrVar, Id, Language, MultiPattern, Pattern, PatternAst, Rewrite, SearchMatches,
    Searcher, Subst, Symbol, Var,
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

/// A rule written in Rust: it fires on classes holding a node `wants` accepts (a cheap look
/// at the node and its children's classes), and `apply` adds the equal terms it finds there,
/// returning the classes it changed.
#[derive(Clone, Copy)]
pub struct ClassRule {
    wants: fn(&FxGraph, &Fx) -> bool,
    apply: fn(&mut FxGraph, Id) -> Vec<Id>,
}

/// A [`ClassRule`] as an egg rewrite.
pub fn class_rule(
    name: &str,
    wants: fn(&FxGraph, &Fx) -> bool,
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
        let wanted = egraph[eclass].nodes.iter().any(|n| (self.wants)(egraph, n));
        (limit > 0 && wanted).then(|| SearchMatches {
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

/// True if class `c` holds a GEMM without a D scale's outputs: a bare `scaled_matmul` or an
/// epilogue (the rules check the details).
pub fn has_gemm(eg: &FxGraph, c: Id) -> bool {
    eg[c].nodes.iter().any(|m| match m {
        Fx::ScaledMatMul(_) => true,
        Fx::Op(s, _) => s.as_str() == "scaled_matmul_epilogue",
        _ => false,
    })
}

/// True if class `c` holds an op node of the generic kind (elementwise ops among them).
pub fn has_generic_op(eg: &FxGraph, c: Id) -> bool {
    eg[c].nodes.iter().any(|m| matches!(m, Fx::Op(..)))
}

/// Unions `a` and `b`, recording `a` in `changed` if they were different.
pub fn union_into(eg: &mut FxGraph, a: Id, b: Id, changed: &mut Vec<Id>) {
    if eg.union(a, b) {
        changed.push(eg.find(a));
    }
}

/// A rewrite over several patterns at once, in egg's multi-pattern syntax: `lhs` binds
/// classes (`?q = (quantize ?qa ?x ?s), ?a = (amax ?x)`), `rhs` makes each named class equal
/// to a term. The first pattern is searched everywhere; each later one must be anchored by
/// what is bound before it, either its class (`?q` in `?t = (transpose ?p ?q), ?q = (...)`)
/// or all of its variables (then it is found by hash-cons lookup). egg's own multi-pattern
/// search scans every class for each later pattern, which is quadratic in the graph.
pub fn multi(name: &str, lhs: &str, rhs: &str) -> Rule {
    let searcher = Joined::parse(lhs).unwrap_or_else(|e| panic!("rule {name}: {e}"));
    let applier: MultiPattern<Fx> = rhs.parse().expect("a valid right-hand side");
    Rewrite::new(name, searcher, OnlyChanges(applier))
        .expect("the right-hand side binds no new variables")
}

/// The searcher of [`multi`].
struct Joined {
    first: (Var, Pattern<Fx>),
    /// Later patterns with their binder and their variables.
    rest: Vec<(Var, Pattern<Fx>, Vec<Var>)>,
    vars: Vec<Var>,
}

impl Joined {
    fn parse(lhs: &str) -> Result<Self, String> {
        let mut parts = Vec::new();
        for part in lhs.split(',') {
            let (v, p) = part
                .split_once('=')
                .ok_or_else(|| format!("`{part}` is not `?var = pattern`"))?;
            let v: Var = v.trim().parse().map_err(|e| format!("{e:?}"))?;
            let p: PatternAst<Fx> = p.trim().parse().map_err(|e| format!("{e:?}"))?;
            parts.push((v, p));
        }
        let mut it = parts.into_iter();
        let (v0, p0) = it.next().ok_or("an empty left-hand side")?;
        let mut bound: Vec<Var> = vec![v0];
        bound.extend(Pattern::new(p0.clone()).vars());
        let mut rest = Vec::new();
        for (v, p) in it {
            let pat = Pattern::new(p);
            let pv = pat.vars();
            if !bound.contains(&v) && !pv.iter().all(|x| bound.contains(x)) {
                return Err(format!(
                    "pattern `{v} = {pat}` is not anchored by the variables bound before it"
                ));
            }
            bound.push(v);
            bound.extend(pv.iter().copied());
            rest.push((v, pat, pv));
        }
        bound.sort();
        bound.dedup();
        Ok(Joined {
            first: (v0, Pattern::new(p0)),
            rest,
            vars: bound,
        })
    }
}

/// The class of `ast` with its variables from `subst`, if the e-graph has it.
fn lookup_ground(eg: &FxGraph, ast: &PatternAst<Fx>, subst: &Subst) -> Option<Id> {
    let mut ids: Vec<Id> = Vec::with_capacity(ast.as_ref().len());
    for n in ast.as_ref() {
        let id = match n {
            ENodeOrVar::Var(v) => *subst.get(*v)?,
            ENodeOrVar::ENode(e) => eg.lookup(e.clone().map_children(|c| ids[usize::from(c)]))?,
        };
        ids.push(id);
    }
    ids.last().copied()
}

impl Searcher<Fx, FusionAnalysis> for Joined {
    fn search_eclass_with_limit(
        &self,
        egraph: &FxGraph,
        eclass: Id,
        limit: usize,
    ) -> Option<SearchMatches<'_, Fx>> {
        let first = self
            .first
            .1
            .search_eclass_with_limit(egraph, eclass, limit)?;
        let mut substs: Vec<Subst> = first
            .substs
            .into_iter()
            .map(|mut s| {
                s.insert(self.first.0, eclass);
                s
            })
            .collect();
        for (v, pat, pv) in &self.rest {
            let mut next = Vec::new();
            for s in substs {
                match s.get(*v) {
                    Some(&class) => {
                        // Match the pattern in the bound class, agreeing on shared variables.
                        let Some(m) = pat.search_eclass(egraph, class) else {
                            continue;
                        };
                        for found in m.substs {
                            let mut merged = s.clone();
                            let agrees = pv.iter().all(|x| match found.get(*x) {
                                Some(&fid) => match merged.insert(*x, fid) {
                                    Some(old) => egraph.find(old) == egraph.find(fid),
                                    None => true,
                                },
                                None => true,
                            });
                            if agrees {
                                next.push(merged);
                            }
                        }
                    }
                    None => {
                        if let Some(id) = lookup_ground(egraph, &pat.ast, &s) {
                            let mut s = s;
                            s.insert(*v, id);
                            next.push(s);
                        }
                    }
                }
            }
            substs = next;
        }
        substs.truncate(limit);
        (!substs.is_empty()).then(|| SearchMatches {
            eclass,
            substs,
            ast: None,
        })
    }

    fn vars(&self) -> Vec<Var> {
        self.vars.clone()
    }
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
