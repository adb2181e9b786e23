//! The step order of a program: which topological order of the graph [`crate::lower`] turns
//! into steps. The order decides how long each result stays alive, so it decides the peak.
//!
//! Graphs without training ops keep the graph's own deterministic order
//! ([`Graph::topo_order`]: ties broken by node id), so inference programs are what they
//! always were. A training step also gets a memory-aware order (greedy list scheduling: of
//! the nodes ready to run, the one that frees the most bytes net of what it allocates, ties
//! by node id), and of the two the one with the lower planned peak is taken (the node-id
//! order on a tie). Node ids say little about when a node is needed in a training step: the
//! backward nodes fill the ids the forward graph's removed nodes left free, so some run in
//! the middle of the forward pass and keep their results alive through it; and a value kept
//! for backward in a narrower dtype only saves memory if its narrowing cast runs as soon as
//! the value's forward readers are done, which the greedy order does (the cast frees more
//! than it allocates).
//!
//! `after(x, dep)` (the autodiff pass's ordering edge) is no step: its result is `x`'s buffer,
//! read by its readers; `dep` only orders. Both orders respect the edge, and the greedy
//! order's only lever is which ready node runs first, so work that waits on a backward value
//! through `after` (a recomputed region, a value widened back for backward) runs no earlier
//! than that value.

use crate::RuntimeError;
use crate::program::ARENA_ALIGN;
use fp8c_ir::{Graph, NodeId, Op, Value};
use std::collections::{BinaryHeap, HashMap, HashSet};

type R<T> = Result<T, RuntimeError>;

fn aligned(bytes: u64) -> u64 {
    bytes.div_ceil(ARENA_ALIGN) * ARENA_ALIGN
}

/// True for nodes that become no step: the interface, constants and `after`.
pub(crate) fn is_stepless(op: &Op) -> bool {
    op.is_interface() || matches!(op, Op::Constant { .. } | Op::After)
}

/// The value whose buffer `v` is: `v` itself, or for `after(x, _)` the buffer of `x`.
pub(crate) fn buffer_of(g: &Graph, mut v: Value) -> Value {
    while let Op::After = g.node(v.node).op {
        v = g.node(v.node).inputs()[0];
    }
    v
}

/// Bytes of a value's buffer when it lives in the arena (a graph input or a step result);
/// None for resident values (params, state, constants).
fn arena_bytes(g: &Graph, v: Value) -> Option<u64> {
    let n = g.node(v.node);
    match n.op {
        Op::Param { .. } | Op::State { .. } | Op::Constant { .. } => None,
        _ => Some(aligned(
            n.outputs.get(v.slot as usize)?.num_bytes().unwrap_or(0),
        )),
    }
}

/// The node order `lower` makes steps from (see the module docs).
pub(crate) fn order(g: &Graph) -> R<Vec<NodeId>> {
    let by_id = g
        .topo_order()
        .map_err(|e| RuntimeError::Other(format!("cannot order the graph: {e}")))?;
    let training = by_id.iter().any(|&id| g.node(id).op.props().training);
    if !training {
        return Ok(by_id);
    }
    let greedy = greedy(g, &by_id);
    if peak(g, &greedy) < peak(g, &by_id) {
        Ok(greedy)
    } else {
        Ok(by_id)
    }
}

/// Per buffer (the value that owns it): the distinct step nodes reading it.
fn readers(g: &Graph, order: &[NodeId]) -> HashMap<Value, Vec<NodeId>> {
    let mut r: HashMap<Value, Vec<NodeId>> = HashMap::new();
    for &id in order {
        let n = g.node(id);
        if is_stepless(&n.op) {
            continue;
        }
        let mut seen = HashSet::new();
        for &v in n.inputs() {
            let b = buffer_of(g, v);
            if seen.insert(b) {
                r.entry(b).or_default().push(id);
            }
        }
    }
    r
}

/// Buffers kept to the end of the step: graph outputs and state updates.
fn kept(g: &Graph) -> HashSet<Value> {
    g.outputs()
        .iter()
        .map(|o| o.value)
        .chain(g.state_updates().values().copied())
        .map(|v| buffer_of(g, v))
        .collect()
}

/// The planned live peak of `order`: the largest sum of aligned arena buffer sizes live at
/// one step, with `lower`'s liveness (inputs from the first step, results from their step to
/// their last reader, kept results to the end).
pub(crate) fn peak(g: &Graph, order: &[NodeId]) -> u64 {
    let mut step_of: HashMap<NodeId, usize> = HashMap::new();
    let mut steps = 0usize;
    for &id in order {
        if !is_stepless(&g.node(id).op) {
            step_of.insert(id, steps);
            steps += 1;
        }
    }
    let last = steps.saturating_sub(1);
    let kept = kept(g);
    let mut delta = vec![0i128; steps + 2];
    let readers = readers(g, order);
    for &id in order {
        let n = g.node(id);
        let def = match &n.op {
            Op::Input { .. } => 0,
            op if is_stepless(op) => continue,
            _ => step_of[&id],
        };
        for slot in 0..n.outputs.len() as u32 {
            let v = Value::new(id, slot);
            let Some(bytes) = arena_bytes(g, v) else {
                continue;
            };
            let end = if kept.contains(&v) {
                last
            } else {
                readers
                    .get(&v)
                    .into_iter()
                    .flatten()
                    .map(|r| step_of[r])
                    .max()
                    .unwrap_or(def)
                    .max(def)
            };
            delta[def] += i128::from(bytes);
            delta[end + 1] -= i128::from(bytes);
        }
    }
    let (mut cur, mut top) = (0i128, 0i128);
    for d in delta {
        cur += d;
        top = top.max(cur);
    }
    top as u64
}

/// Greedy list scheduling (see the module docs). `by_id` is a topological order, used for
/// the node set and to break ties.
fn greedy(g: &Graph, by_id: &[NodeId]) -> Vec<NodeId> {
    let rank: HashMap<NodeId, usize> = by_id.iter().enumerate().map(|(i, &n)| (n, i)).collect();
    let kept = kept(g);
    let readers = readers(g, by_id);
    // Unscheduled step readers left per buffer.
    let mut left: HashMap<Value, usize> = readers.iter().map(|(b, r)| (*b, r.len())).collect();
    let mut indeg: HashMap<NodeId, usize> = HashMap::new();
    let mut users: HashMap<NodeId, Vec<NodeId>> = HashMap::new();
    for &id in by_id {
        let mut preds: Vec<NodeId> = g.node(id).inputs().iter().map(|v| v.node).collect();
        preds.sort_unstable();
        preds.dedup();
        indeg.insert(id, preds.len());
        for p in preds {
            users.entry(p).or_default().push(id);
        }
    }
    let alloc = |id: NodeId| -> i128 {
        let n = g.node(id);
        if is_stepless(&n.op) {
            return 0;
        }
        (0..n.outputs.len() as u32)
            .filter_map(|s| arena_bytes(g, Value::new(id, s)))
            .map(i128::from)
            .sum()
    };
    let score = |id: NodeId, left: &HashMap<Value, usize>| -> i128 {
        let n = g.node(id);
        if is_stepless(&n.op) {
            // No step: run at once, so that what waits on it becomes ready.
            return i128::MAX;
        }
        let mut freed = 0i128;
        let mut seen = HashSet::new();
        for &v in n.inputs() {
            let b = buffer_of(g, v);
            if seen.insert(b)
                && !kept.contains(&b)
                && left.get(&b) == Some(&1)
                && let Some(bytes) = arena_bytes(g, b)
            {
                freed += i128::from(bytes);
            }
        }
        freed - alloc(id)
    };
    // Max-heap on (score, earlier id first); entries go stale when a score changes.
    let mut heap: BinaryHeap<(i128, std::cmp::Reverse<usize>)> = BinaryHeap::new();
    let mut current: HashMap<NodeId, i128> = HashMap::new();
    let push = |id: NodeId,
                left: &HashMap<Value, usize>,
                heap: &mut BinaryHeap<_>,
                current: &mut HashMap<NodeId, i128>| {
        let s = score(id, left);
        current.insert(id, s);
        heap.push((s, std::cmp::Reverse(rank[&id])));
    };
    for &id in by_id {
        if indeg[&id] == 0 {
            push(id, &left, &mut heap, &mut current);
        }
    }
    let mut done: HashSet<NodeId> = HashSet::new();
    let mut out = Vec::with_capacity(by_id.len());
    while let Some((s, std::cmp::Reverse(r))) = heap.pop() {
        let id = by_id[r];
        if done.contains(&id) || current.get(&id) != Some(&s) {
            continue;
        }
        done.insert(id);
        out.push(id);
        let n = g.node(id);
        if !is_stepless(&n.op) {
            let mut seen = HashSet::new();
            for &v in n.inputs() {
                let b = buffer_of(g, v);
                if !seen.insert(b) {
                    continue;
                }
                let Some(l) = left.get_mut(&b) else { continue };
                *l -= 1;
                if *l == 1 {
                    // The last reader now frees the buffer: its score went up.
                    if let Some(&last) = readers[&b].iter().find(|r| !done.contains(r))
                        && indeg[&last] == 0
                    {
                        push(last, &left, &mut heap, &mut current);
                    }
                }
            }
        }
        for &u in users.get(&id).into_iter().flatten() {
            let d = indeg.get_mut(&u).expect("a node");
            *d -= 1;
            if *d == 0 {
                push(u, &left, &mut heap, &mut current);
            }
        }
    }
    debug_assert_eq!(out.len(), by_id.len());
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use fp8c_ir::{DType, Op, TensorType};

    /// A forward value `x`, a narrowing cast of it kept for a late reader, and a long chain of
    /// forward work after it: the node-id order runs the cast last (it was added last), the
    /// greedy order right after `x`'s forward reader, so `x` dies early.
    #[test]
    fn greedy_runs_a_narrowing_cast_once_its_input_is_done() {
        let mut g = Graph::new("t");
        let a = g
            .add_input("a", TensorType::fixed(DType::F32, &[1024]))
            .unwrap();
        let x = g.add_node("x", Op::Exp, &[a]).unwrap()[0];
        let mut y = g.add_node("y0", Op::Neg, &[x]).unwrap()[0];
        for i in 1..6 {
            y = g.add_node(&format!("y{i}"), Op::Neg, &[y]).unwrap()[0];
        }
        let c = g
            .add_node(
                "x.bf16",
                Op::Cast {
                    to: DType::BF16,
                    saturate: false,
                },
                &[x],
            )
            .unwrap()[0];
        // A small value at the end (a sum), so the end is not the peak of either order.
        let late = g
            .add_node(
                "late",
                Op::ReduceSum {
                    axes: None,
                    keepdims: true,
                },
                &[y],
            )
            .unwrap()[0];
        let c32 = g
            .add_node(
                "x.f32",
                Op::Cast {
                    to: DType::F32,
                    saturate: false,
                },
                &[c],
            )
            .unwrap()[0];
        let z = g.add_node("z", Op::Mul, &[late, c32]).unwrap()[0];
        g.set_output("z", z).unwrap();
        let by_id = g.topo_order().unwrap();
        let greedy = greedy(&g, &by_id);
        let pos = |o: &[NodeId], name: &str| o.iter().position(|&n| g.node(n).name == name);
        assert!(pos(&by_id, "x.bf16") > pos(&by_id, "y5"));
        assert!(pos(&greedy, "x.bf16") < pos(&greedy, "y1"));
        assert!(peak(&g, &greedy) < peak(&g, &by_id));
    }

    /// `after` makes no step and keeps what waits on it after its dependency.
    #[test]
    fn after_orders_without_a_step() {
        let mut g = Graph::new("t");
        let ty = TensorType::fixed(DType::F32, &[256]);
        let a = g.add_input("a", ty.clone()).unwrap();
        let x = g.add_node("x", Op::Exp, &[a]).unwrap()[0];
        let d = g.add_node("d", Op::Neg, &[x]).unwrap()[0];
        let d2 = g.add_node("d2", Op::Neg, &[d]).unwrap()[0];
        let xa = g.add_node("x.after", Op::After, &[x, d2]).unwrap()[0];
        let r = g.add_node("r", Op::Sqrt, &[xa]).unwrap()[0];
        let s = g.add_node("s", Op::Add, &[r, d2]).unwrap()[0];
        g.set_output("s", s).unwrap();
        let by_id = g.topo_order().unwrap();
        for o in [by_id.clone(), greedy(&g, &by_id)] {
            let pos = |name: &str| o.iter().position(|&n| g.node(n).name == name).unwrap();
            assert!(pos("r") > pos("d2"));
        }
        assert_eq!(buffer_of(&g, xa), x);
    }
}
