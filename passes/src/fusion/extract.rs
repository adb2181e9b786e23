//! Extraction: which node computes each class, chosen by the cost model of `cost.rs` over
//! the whole DAG.
//!
//! egg's `Extractor` adds up tree costs: a value read twice counts twice, and it cannot see
//! that two projections of one fused kernel share a launch. Fusion is all about such sharing
//! (quantize and amax of one tensor become one kernel only if *both* pick it), so this
//! extractor prices a whole selection as the graph it would produce: every reachable class
//! once, each kernel's launch, the distinct values it reads, and only the outputs somebody
//! reads. It starts from the input graph (every class computed as before) and improves it by
//! local search until no move helps:
//!
//! - switch one class to another of its nodes;
//! - switch every class that has a projection of a tuple class to that projection at once,
//!   trying each node of the tuple (this is how a fused kernel replaces all it subsumes).
//!
//! A move is kept only if the total cost drops. A selection with a cycle costs infinity, and
//! so does one that computes the same GEMM product in two kernels (the model counts bytes,
//! not FLOPs, so it would otherwise recompute a GEMM to save reading its output). The result
//! is never worse than the input and always a DAG. Classes are visited in id order, which is
//! deterministic.

use super::cost::{LAUNCH_COST_BYTES, bytes_of};
use super::lang::{Data, Fx, FxGraph, node_op, slot_of};
use egg::{Id, Language};
use fp8c_ir::Op;
use std::collections::{BTreeSet, HashMap};

/// The most improvement sweeps; each is a pass over every move.
const MAX_SWEEPS: usize = 16;

/// Visit states of a class during an evaluation.
const NEW: u8 = 0;
const OPEN: u8 = 1;
const DONE: u8 = 2;

#[derive(Clone, Debug)]
enum Kind {
    /// A leaf (value from outside, attribute, slot): free.
    Free,
    /// Output `slot` of tuple class `tuple`.
    Proj { slot: usize, tuple: usize },
    /// A kernel reading the distinct classes `inputs`; `in_bytes` is what it reads; `gemm`
    /// numbers the product it computes, if it is a GEMM (bare or with an epilogue).
    Kernel {
        inputs: Vec<usize>,
        in_bytes: u64,
        gemm: Option<usize>,
    },
    /// Never selected (types do not check).
    Invalid,
}

/// The chosen node of every class.
pub struct Selection {
    index: HashMap<Id, usize>,
    nodes: Vec<Vec<Fx>>,
    choice: Vec<usize>,
}

impl Selection {
    /// The node chosen for class `id`.
    pub fn node(&self, eg: &FxGraph, id: Id) -> &Fx {
        let c = self.index[&eg.find(id)];
        &self.nodes[c][self.choice[c]]
    }
}

/// What extraction did, for logs and tests.
#[derive(Clone, Debug, Default)]
pub struct ExtractStats {
    /// Cost of the input graph's selection.
    pub initial_cost: u64,
    /// Cost of the selection found.
    pub final_cost: u64,
    /// Moves kept.
    pub moves: usize,
    /// Sweeps run.
    pub sweeps: usize,
}

struct Problem {
    kinds: Vec<Vec<Kind>>,
    /// Bytes of each output slot of each class.
    out_bytes: Vec<Vec<u64>>,
    /// Offset of each class's slots in the flat `used` array.
    slot_offset: Vec<usize>,
    roots: Vec<usize>,
}

/// Chooses a node for every class reachable from `roots`; `initial` gives the node each class
/// starts from (the input graph's), or the first valid node if absent.
pub fn extract(eg: &FxGraph, roots: &[Id], initial: &HashMap<Id, Fx>) -> (Selection, ExtractStats) {
    let mut ids: Vec<Id> = eg.classes().map(|c| c.id).collect();
    ids.sort();
    let index: HashMap<Id, usize> = ids.iter().enumerate().map(|(i, &c)| (c, i)).collect();
    let nodes: Vec<Vec<Fx>> = ids.iter().map(|&c| eg[c].nodes.clone()).collect();
    let out_bytes: Vec<Vec<u64>> = ids
        .iter()
        .map(|&c| match &eg[c].data {
            Data::Values(v) => v.iter().map(bytes_of).collect(),
            _ => Vec::new(),
        })
        .collect();
    let mut gemms = HashMap::new();
    let kinds: Vec<Vec<Kind>> = nodes
        .iter()
        .enumerate()
        .map(|(c, ns)| {
            ns.iter()
                .map(|n| kind(eg, &index, &out_bytes, &mut gemms, c, n))
                .collect()
        })
        .collect();
    let mut slot_offset = Vec::with_capacity(ids.len());
    let mut total = 0;
    for b in &out_bytes {
        slot_offset.push(total);
        total += b.len();
    }
    let p = Problem {
        kinds,
        out_bytes,
        slot_offset,
        roots: roots.iter().map(|r| index[&eg.find(*r)]).collect(),
    };
    let mut choice: Vec<usize> = ids
        .iter()
        .enumerate()
        .map(|(c, id)| {
            let canonical = initial
                .get(id)
                .map(|n| n.clone().map_children(|i| eg.find(i)));
            canonical
                .and_then(|n| nodes[c].iter().position(|m| *m == n))
                .or_else(|| p.kinds[c].iter().position(|k| !matches!(k, Kind::Invalid)))
                .unwrap_or(0)
        })
        .collect();
    let mut scratch = Scratch::new(ids.len(), total, gemms.len());
    let mut best = p.evaluate(&choice, &mut scratch).unwrap_or(u64::MAX);
    // Classes the current best selection reaches: changing any other class changes nothing.
    let mut reach: Vec<bool> = scratch.state.iter().map(|&s| s == DONE).collect();
    let mut stats = ExtractStats {
        initial_cost: best,
        ..Default::default()
    };
    // Projections of each tuple class: (class, node index).
    let mut projections: Vec<Vec<(usize, usize)>> = vec![Vec::new(); ids.len()];
    for (c, ks) in p.kinds.iter().enumerate() {
        let mut seen = BTreeSet::new();
        for (j, k) in ks.iter().enumerate() {
            if let Kind::Proj { tuple, .. } = k
                && seen.insert(*tuple)
            {
                projections[*tuple].push((c, j));
            }
        }
    }
    for sweep in 0..MAX_SWEEPS {
        stats.sweeps = sweep + 1;
        let mut improved = false;
        // Group moves first: a fused kernel pays off only when all it replaces moves at once.
        for t in 0..ids.len() {
            if !projections[t].iter().any(|&(c, _)| reach[c]) {
                continue;
            }
            for k in 0..p.kinds[t].len() {
                let already = choice[t] == k && projections[t].iter().all(|&(c, j)| choice[c] == j);
                if already || !matches!(p.kinds[t][k], Kind::Kernel { .. }) {
                    continue;
                }
                let saved: Vec<(usize, usize)> = projections[t]
                    .iter()
                    .map(|&(c, _)| (c, choice[c]))
                    .chain([(t, choice[t])])
                    .collect();
                for &(c, j) in &projections[t] {
                    choice[c] = j;
                }
                choice[t] = k;
                match p.evaluate(&choice, &mut scratch) {
                    Some(cost) if cost < best => {
                        best = cost;
                        stats.moves += 1;
                        improved = true;
                        reach = scratch.state.iter().map(|&s| s == DONE).collect();
                    }
                    _ => {
                        for (c, j) in saved.into_iter().rev() {
                            choice[c] = j;
                        }
                    }
                }
            }
        }
        // Single moves.
        for c in 0..ids.len() {
            for j in 0..p.kinds[c].len() {
                if !reach[c] || j == choice[c] || matches!(p.kinds[c][j], Kind::Invalid) {
                    continue;
                }
                let old = choice[c];
                choice[c] = j;
                match p.evaluate(&choice, &mut scratch) {
                    Some(cost) if cost < best => {
                        best = cost;
                        stats.moves += 1;
                        improved = true;
                        reach = scratch.state.iter().map(|&s| s == DONE).collect();
                    }
                    _ => choice[c] = old,
                }
            }
        }
        if !improved {
            break;
        }
    }
    stats.final_cost = best;
    (
        Selection {
            index,
            nodes,
            choice,
        },
        stats,
    )
}

fn kind(
    eg: &FxGraph,
    index: &HashMap<Id, usize>,
    out_bytes: &[Vec<u64>],
    gemms: &mut HashMap<Vec<usize>, usize>,
    class: usize,
    n: &Fx,
) -> Kind {
    match n {
        Fx::Slot(_) | Fx::Sym(_) => Kind::Free,
        Fx::Proj([k, t]) => match slot_of(eg, *k) {
            Some(slot) => Kind::Proj {
                slot,
                tuple: index[&eg.find(*t)],
            },
            None => Kind::Invalid,
        },
        _ => {
            let Ok((op, ins)) = node_op(eg, n) else {
                return Kind::Invalid;
            };
            let distinct: BTreeSet<usize> = ins.iter().map(|i| index[&eg.find(*i)]).collect();
            let valid =
                !out_bytes[class].is_empty() && distinct.iter().all(|&c| out_bytes[c].len() == 1);
            if !valid {
                return Kind::Invalid;
            }
            let gemm = matches!(
                op,
                Op::ScaledMatMul { .. } | Op::ScaledMatMulEpilogue { .. }
            )
            .then(|| {
                let key: Vec<usize> = ins[..4].iter().map(|i| index[&eg.find(*i)]).collect();
                let next = gemms.len();
                *gemms.entry(key).or_insert(next)
            });
            Kind::Kernel {
                in_bytes: distinct.iter().map(|&c| out_bytes[c][0]).sum(),
                inputs: distinct.into_iter().collect(),
                gemm,
            }
        }
    }
}

struct Scratch {
    state: Vec<u8>,
    used: Vec<bool>,
    stack: Vec<(usize, usize)>,
    /// GEMM products already computed by a selected kernel.
    gemm_done: Vec<bool>,
}

impl Scratch {
    fn new(classes: usize, slots: usize, gemms: usize) -> Self {
        Scratch {
            state: vec![0; classes],
            used: vec![false; slots],
            stack: Vec::new(),
            gemm_done: vec![false; gemms],
        }
    }
}

impl Problem {
    /// The cost of a selection, or None if it has a cycle or an invalid node.
    fn evaluate(&self, choice: &[usize], s: &mut Scratch) -> Option<u64> {
        s.state.fill(NEW);
        s.used.fill(false);
        s.gemm_done.fill(false);
        let mut cost: u64 = 0;
        for &r in &self.roots {
            if s.state[r] == DONE {
                continue;
            }
            s.stack.clear();
            s.stack.push((r, 0));
            s.state[r] = OPEN;
            while let Some(top) = s.stack.len().checked_sub(1) {
                let (c, next) = s.stack[top];
                s.stack[top].1 += 1;
                let child = match &self.kinds[c][choice[c]] {
                    Kind::Free => None,
                    Kind::Invalid => return None,
                    Kind::Proj { tuple, .. } => (next == 0).then_some(*tuple),
                    Kind::Kernel { inputs, .. } => inputs.get(next).copied(),
                };
                match child {
                    Some(d) => match s.state[d] {
                        NEW => {
                            s.state[d] = OPEN;
                            s.stack.push((d, 0));
                        }
                        OPEN => return None,
                        _ => {}
                    },
                    None => {
                        s.stack.pop();
                        s.state[c] = DONE;
                        if let Kind::Kernel { gemm: Some(k), .. } = self.kinds[c][choice[c]] {
                            if s.gemm_done[k] {
                                return None;
                            }
                            s.gemm_done[k] = true;
                        }
                        cost = cost.saturating_add(self.own_cost(c, choice[c], s));
                    }
                }
            }
        }
        Some(cost)
    }

    /// The cost a class adds when its node is done: a kernel's launch, reads and (for a single
    /// value) its write; a projection marks its slot of the tuple as written, once.
    fn own_cost(&self, c: usize, j: usize, s: &mut Scratch) -> u64 {
        match &self.kinds[c][j] {
            Kind::Kernel { in_bytes, .. } => {
                let single = if self.out_bytes[c].len() == 1 {
                    self.out_bytes[c][0]
                } else {
                    0
                };
                LAUNCH_COST_BYTES + in_bytes + single
            }
            Kind::Proj { slot, tuple } => {
                let u = self.slot_offset[*tuple] + slot;
                if s.used[u] {
                    0
                } else {
                    s.used[u] = true;
                    self.out_bytes[*tuple].get(*slot).copied().unwrap_or(0)
                }
            }
            Kind::Free | Kind::Invalid => 0,
        }
    }
}
