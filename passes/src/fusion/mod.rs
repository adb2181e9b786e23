//! Fusion by equality saturation: turns the amax/scale/quantize nodes the scaling pass
//! inserted, and the ops around FP8 GEMMs, into the fused kernels TransformerEngine writes
//! by hand, choosing among them with a cost model.
//!
//! Steps (`fuse`):
//! 1. `region.rs`: the region (FP8 ops, GEMMs, transposes, LayerNorms, elementwise ops) goes
//!    into one e-graph; every other value is an opaque leaf.
//! 2. `rules/`: egg's runner applies the rules with explicit iteration and node limits and no
//!    time limit (the result must not depend on the machine's speed). Hitting a limit is a
//!    warning, not an error: the e-graph is still sound, only less explored.
//! 3. `extract.rs`: a DAG-aware extraction under the cost model of `cost.rs` (bytes moved +
//!    a fixed cost per launch); never worse than the input graph.
//! 4. `rebuild.rs`: the graph is rewritten to what was extracted, keeping node names.
//!
//! Fused kernels compute exactly what the unfused ops compute (the same f32 operations in the
//! same order per element); their CPU kernels are the unfused kernels composed, so fused and
//! unfused graphs give bit-identical results (tests/fusion_bits.rs checks it).
//!
//! Current scaling: `quantize` depends on `amax` of the same tensor through `compute_scale`,
//! so one-pass fusions of the pair (`quantize_amax`, a GEMM's D scale) would be cycles; the
//! rules may propose them, extraction refuses them. Two passes over x are inherent (a
//! two-pass amax-then-quantize kernel would save one launch; not done), and there is no
//! history to batch. Producer and epilogue fusions still apply.
//!
//! Deterministic: egg's `deterministic` feature, no time limit, rules applied in a fixed order,
//! extraction in class-id order, and names taken from the graph.

pub mod cost;
mod extract;
pub mod lang;
mod program;
mod rebuild;
mod region;
mod rules;

use crate::{Pass, PassCx};
use egg::{Id, Language, RecExpr, Runner, SimpleScheduler, StopReason};
use fp8c_ir::{Graph, IrError, TensorType};
use lang::{FusionAnalysis, Fx, FxGraph};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

pub use cost::{LAUNCH_COST_BYTES, StepCost, step_cost};
pub use rebuild::BATCHED_UPDATE_NAME;

/// The fusion pass (see the module docs). Skipped with `PassOptions::no_fuse`.
pub struct FusionPass;

impl Pass for FusionPass {
    fn name(&self) -> &'static str {
        "fusion"
    }

    fn about(&self) -> &'static str {
        "egg equality saturation: fused quantizers, FP8-emitting producers, GEMM epilogues, batched scale update"
    }

    fn run(&self, g: &mut Graph, cx: &mut PassCx) -> Result<bool, IrError> {
        if cx.options.no_fuse {
            return Ok(false);
        }
        let stats = fuse(g, Limits::for_graph(g))?;
        let changed = stats.before != stats.after;
        cx.notes.push(format!(
            "fusion: {} -> {} kernels, {} -> {} bytes per step ({}, {} iterations, {} e-nodes)",
            stats.before.kernels,
            stats.after.kernels,
            stats.before.bytes,
            stats.after.bytes,
            stats.stop_reason,
            stats.iterations,
            stats.enodes
        ));
        cx.fusion = Some(stats);
        Ok(changed)
    }
}

/// The runner's limits (there is no time limit).
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Most iterations (each applies every rule once).
    pub iterations: usize,
    /// Most e-nodes.
    pub nodes: usize,
}

impl Limits {
    /// Limits for a graph: 30 iterations (a program grows one op per iteration, and the longest
    /// program is 16 ops), and 20 e-nodes per graph node plus 10,000.
    pub fn for_graph(g: &Graph) -> Self {
        Limits {
            iterations: 30,
            nodes: 10_000 + 20 * g.node_count(),
        }
    }
}

/// What fusion did.
#[derive(Clone, Debug, Default, Serialize)]
pub struct FusionStats {
    /// The graph's totals before fusion.
    pub before: StepCost,
    /// And after.
    pub after: StepCost,
    /// Why the runner stopped (`saturated`, or the limit it hit).
    pub stop_reason: String,
    /// Iterations run.
    pub iterations: usize,
    /// E-nodes at the end.
    pub enodes: usize,
    /// E-classes at the end.
    pub eclasses: usize,
    /// Times each rule changed the e-graph.
    pub applied: BTreeMap<String, usize>,
}

fn stop_text(r: &Option<StopReason>) -> String {
    match r {
        Some(StopReason::Saturated) => "saturated".into(),
        Some(StopReason::IterationLimit(n)) => format!("iteration limit ({n})"),
        Some(StopReason::NodeLimit(n)) => format!("node limit ({n})"),
        Some(StopReason::TimeLimit(s)) => format!("time limit ({s} s)"),
        Some(StopReason::Other(s)) => s.clone(),
        None => "not run".into(),
    }
}

fn run_rules(egraph: FxGraph, limits: Limits) -> Runner<Fx, FusionAnalysis> {
    let mut runner = Runner::default()
        .with_egraph(egraph)
        .with_iter_limit(limits.iterations)
        .with_node_limit(limits.nodes)
        .with_time_limit(Duration::MAX)
        .with_scheduler(SimpleScheduler)
        .run(&rules::rules());
    // A limit can stop the runner between a rule's unions and the next search; extraction
    // and rebuilding need the congruence invariant back.
    runner.egraph.rebuild();
    match &runner.stop_reason {
        Some(StopReason::Saturated) => tracing::debug!(
            iterations = runner.iterations.len(),
            enodes = runner.egraph.total_size(),
            "fusion: e-graph saturated"
        ),
        other => tracing::warn!(
            "fusion: the rewrite search stopped early ({}); fusion may be incomplete",
            stop_text(other)
        ),
    }
    runner
}

/// Fuses `g` in place.
pub fn fuse(g: &mut Graph, limits: Limits) -> Result<FusionStats, IrError> {
    let before = step_cost(g);
    let mut region = region::build(g)?;
    if region.fp8_ops == 0 {
        return Ok(FusionStats {
            after: before.clone(),
            before,
            stop_reason: "no FP8 ops".into(),
            ..Default::default()
        });
    }
    let egraph = std::mem::take(&mut region.egraph);
    let runner = run_rules(egraph, limits);
    let eg = &runner.egraph;
    if let Some(c) = &eg.analysis.conflict {
        return Err(IrError::Other(format!("fusion: {c}")));
    }
    let mut initial: HashMap<Id, Fx> = HashMap::new();
    for (_, node) in &region.nodes {
        let n = node.clone().map_children(|c| eg.find(c));
        if let Some(c) = eg.lookup(n.clone()) {
            initial.entry(eg.find(c)).or_insert(n);
        }
    }
    let roots: Vec<Id> = region.roots.iter().map(|&(_, c)| c).collect();
    let (selection, ex) = extract::extract(eg, &roots, &initial);
    tracing::debug!(
        initial = ex.initial_cost,
        r#final = ex.final_cost,
        moves = ex.moves,
        sweeps = ex.sweeps,
        "fusion: extraction"
    );
    rebuild::rebuild(g, eg, &region, &selection)?;
    let mut applied = BTreeMap::new();
    for it in &runner.iterations {
        for (rule, n) in &it.applied {
            *applied.entry(rule.to_string()).or_insert(0) += n;
        }
    }
    Ok(FusionStats {
        before,
        after: step_cost(g),
        stop_reason: stop_text(&runner.stop_reason),
        iterations: runner.iterations.len(),
        enodes: eg.total_size(),
        eclasses: eg.number_of_classes(),
        applied,
    })
}

/// Runs the rules on terms and returns each one's extracted form: the egg-level entry for
/// tests and experiments. Terms are s-expressions of the fusion language (`lang.rs`) over
/// leaves `%name` whose types `leaves` gives; `batchable` names the history leaves whose
/// update may be batched.
pub fn fuse_terms(
    terms: &[&str],
    leaves: &[(&str, TensorType)],
    batchable: &[&str],
) -> Result<Vec<String>, String> {
    let mut eg = FxGraph::default();
    for (name, ty) in leaves {
        eg.analysis
            .leaf_types
            .insert(lang::value_leaf(name), ty.clone());
    }
    for name in batchable {
        eg.analysis.batchable.insert(lang::value_leaf(name));
    }
    let mut initial: HashMap<Id, Fx> = HashMap::new();
    let mut roots = Vec::new();
    for t in terms {
        let expr: RecExpr<Fx> = t.parse().map_err(|e| format!("{t}: {e}"))?;
        let mut ids: Vec<Id> = Vec::new();
        for node in expr.as_ref() {
            let n = node.clone().map_children(|c| ids[usize::from(c)]);
            let c = eg.add(n.clone());
            initial.entry(c).or_insert(n);
            ids.push(c);
        }
        roots.push(*ids.last().ok_or("an empty term")?);
    }
    eg.rebuild();
    let runner = run_rules(
        eg,
        Limits {
            iterations: 30,
            nodes: 100_000,
        },
    );
    let eg = &runner.egraph;
    if let Some(c) = &eg.analysis.conflict {
        return Err(c.clone());
    }
    let initial: HashMap<Id, Fx> = initial
        .into_iter()
        .map(|(c, n)| (eg.find(c), n.map_children(|i| eg.find(i))))
        .collect();
    let (selection, _) = extract::extract(eg, &roots, &initial);
    Ok(roots
        .iter()
        .map(|&r| {
            let mut out = String::new();
            term(eg, &selection, r, &mut out);
            out
        })
        .collect())
}

/// Writes the selected term of class `c` (symbols as they are, unquoted).
fn term(eg: &FxGraph, sel: &extract::Selection, c: Id, out: &mut String) {
    let node = sel.node(eg, c);
    if node.is_leaf() {
        out.push_str(&node.to_string());
        return;
    }
    out.push('(');
    out.push_str(&node.to_string());
    for &ch in node.children() {
        out.push(' ');
        term(eg, sel, ch, out);
    }
    out.push(')');
}
