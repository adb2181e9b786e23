//! Recomputation in backward (`--recompute layer|attention`), as TransformerEngine's
//! `te.distributed.checkpoint` and PyTorch's activation checkpointing do it: a region's
//! forward values that backward reads are computed again in backward, from the values at
//! the region's boundary, instead of being kept from the forward pass.
//!
//! Regions:
//! - **layer**: the forward pass is cut at the values every path from the tokens to the loss
//!   goes through (the post-dominators of the node with the longest such chain, the token
//!   embedding for a language model: the residual stream after each attention and each MLP,
//!   then the head). The nodes between
//!   two cuts that read parameters named with the same layer number
//!   (`model.layers.3.input_layernorm.weight` → `model.layers.3`; dynamo exports keep the
//!   norms' names) make one region with the cuts between them, so a layer is recomputed from
//!   the residual value it starts from (the one value per layer that stays saved, with the
//!   values every layer reads: the mask, the rotary tables). Stretches without such a name
//!   (the embedding, the head) stay. A model whose names do not tell two layers apart (none,
//!   or one shared by all: exporters fold equal initializers, so every norm weight can be
//!   `model.layers.0.input_layernorm.weight`) gets one region per stretch: each attention
//!   block and each MLP block.
//! - **attention**: from the `matmul` of the scaled Q·Kᵀ through the mask, `softmax` and the
//!   exporters' NaN guard to the `matmul` with V: the tensors that grow with the square of
//!   the sequence. A fused `attention` op already recomputes its probabilities from the
//!   log-sum-exp and is left alone (noted).
//!
//! For each region: its *triggers* are the adjoints of the forward nodes outside it that read
//! its values (the region's own nodes add to its outputs' adjoints, so those come too late);
//! they exist once backward reaches the region. Each boundary value the
//! recomputation reads becomes `after(boundary, trigger)`, so the copy runs no earlier; the
//! region's nodes up to every saved value are copied (`{node}.recompute`), and every backward
//! reader of a saved value reads the copy, except readers the triggers themselves depend on
//! (rewiring those would make a cycle: they keep the forward value). Parameters, state and
//! constants are read directly: a copied `quantize` reads the scale state the forward read
//! and the copy updates no state (the amax history and scale updates are not copied), so the
//! recomputed codes, and the losses, are the forward's bit for bit.

use super::{Backward, Recompute, ancestors, backward_readers};
use fp8c_ir::{Graph, IrError, NodeId, Op, Value};
use std::collections::{BTreeSet, HashMap, HashSet};

type R<T> = Result<T, IrError>;

/// What the recomputation did.
pub(super) struct Done {
    /// Regions recomputed.
    pub regions: usize,
    /// Nodes copied into backward.
    pub nodes: usize,
    /// Remarks for the user.
    pub notes: Vec<String>,
}

pub(super) fn apply(g: &mut Graph, b: &Backward<'_>, mode: Recompute) -> R<Done> {
    let order: Vec<NodeId> = g
        .topo_order()?
        .into_iter()
        .filter(|n| b.forward.contains(n))
        .collect();
    let mut notes = Vec::new();
    let regions = match mode {
        Recompute::None => Vec::new(),
        Recompute::Layer => {
            let r = layers(g, &order, b.loss.node);
            if r.is_empty() {
                return Err(IrError::Other(
                    "--recompute layer: no parameter name has a layer number (as in model.layers.3.mlp.up_proj.weight), so the layers cannot be told apart; use --recompute attention or none".into(),
                ));
            }
            r
        }
        Recompute::Attention => {
            let fused = order
                .iter()
                .filter(|&&n| g.node(n).op.name() == "attention")
                .count();
            if fused > 0 {
                notes.push(format!(
                    "--recompute attention: {fused} fused attention op(s) already recompute their probabilities in backward from the saved log-sum-exp; nothing more to recompute there"
                ));
            }
            attentions(g, &order)
        }
    };
    let mut done = Done {
        regions: 0,
        nodes: 0,
        notes,
    };
    for region in regions {
        let copied = recompute(g, b, &region)?;
        if copied > 0 {
            done.regions += 1;
            done.nodes += copied;
        }
    }
    if mode == Recompute::Attention && done.regions == 0 && done.notes.is_empty() {
        done.notes.push(
            "--recompute attention: no unfused attention (matmul, softmax, matmul) in the model; nothing recomputed".into(),
        );
    }
    Ok(done)
}

/// The layer of a parameter name: the prefix up to its first all-digit component.
fn layer_key(name: &str) -> Option<String> {
    let parts: Vec<&str> = name.split('.').collect();
    let i = parts
        .iter()
        .enumerate()
        .skip(1)
        .find(|(_, p)| !p.is_empty() && p.bytes().all(|c| c.is_ascii_digit()))?
        .0;
    Some(parts[..=i].join("."))
}

/// The forward nodes of each layer, in topological order (see the module docs).
fn layers(g: &Graph, order: &[NodeId], loss: NodeId) -> Vec<Vec<NodeId>> {
    let pos: HashMap<NodeId, usize> = order.iter().enumerate().map(|(i, &n)| (n, i)).collect();
    // Activations on a path to the loss.
    let mut data: HashSet<NodeId> = g.inputs().iter().copied().collect();
    for &n in order {
        if g.node(n).inputs().iter().any(|v| data.contains(&v.node)) {
            data.insert(n);
        }
    }
    let to_loss = ancestors(g, &[Value::new(loss, 0)]);
    let live: Vec<NodeId> = order
        .iter()
        .copied()
        .filter(|n| data.contains(n) && to_loss.contains(n))
        .collect();
    let inside: HashSet<NodeId> = live.iter().copied().collect();
    // Immediate post-dominators (every path to the loss passes there), last node first; a
    // post-dominator comes later in the order than what it post-dominates.
    let mut ipdom: HashMap<NodeId, NodeId> = HashMap::new();
    for &n in live.iter().rev() {
        if n == loss {
            continue;
        }
        let mut users: Vec<NodeId> = (0..g.node(n).outputs.len() as u32)
            .flat_map(|s| g.users(Value::new(n, s)))
            .map(|(u, _)| u)
            .filter(|u| inside.contains(u))
            .collect();
        users.sort_unstable();
        users.dedup();
        let Some((&first, rest)) = users.split_first() else {
            continue;
        };
        let mut d = first;
        for &u in rest {
            let mut a = d;
            let mut b = u;
            while a != b {
                if pos[&a] < pos[&b] {
                    match ipdom.get(&a) {
                        Some(&x) => a = x,
                        None => break,
                    }
                } else {
                    match ipdom.get(&b) {
                        Some(&x) => b = x,
                        None => break,
                    }
                }
            }
            d = if a == b { a } else { loss };
        }
        ipdom.insert(n, d);
    }
    let chain_of = |s: NodeId| {
        let mut c = vec![s];
        while let Some(&d) = ipdom.get(c.last().expect("not empty")) {
            c.push(d);
        }
        c
    };
    // Two candidate chains of cuts (the residual stream, then the head): from the graph input
    // with the longest one (the tokens), and from the node with the most post-dominators.
    // The second matters where an input also feeds every layer by a side path (the token
    // ids' shape giving the rotary tables' positions): that input is post-dominated by the
    // last layer only. Chain lengths by one pass from the loss back (a node's immediate
    // post-dominator comes later in the order); ties go to the earliest node. The candidate
    // giving more regions wins, then the one recomputing more nodes.
    let mut depth: HashMap<NodeId, usize> = HashMap::new();
    for &n in live.iter().rev() {
        let d = ipdom
            .get(&n)
            .map_or(0, |p| depth.get(p).copied().unwrap_or(0) + 1);
        depth.insert(n, d);
    }
    let mut candidates: Vec<Vec<NodeId>> = Vec::new();
    if let Some(c) = g
        .inputs()
        .iter()
        .filter(|n| inside.contains(n))
        .map(|&s| chain_of(s))
        .max_by_key(Vec::len)
    {
        candidates.push(c);
    }
    if let Some(s) = live.iter().copied().rev().max_by_key(|n| depth[n]) {
        candidates.push(chain_of(s));
    }
    candidates
        .iter()
        .map(|chain| regions_along(g, &live, &pos, chain))
        .max_by_key(|r| (r.len(), r.iter().map(Vec::len).sum::<usize>()))
        .unwrap_or_default()
}

/// The regions between the cuts of `chain` (see the module docs).
fn regions_along(
    g: &Graph,
    live: &[NodeId],
    pos: &HashMap<NodeId, usize>,
    chain: &[NodeId],
) -> Vec<Vec<NodeId>> {
    let cut: HashMap<NodeId, usize> = chain.iter().enumerate().map(|(i, &n)| (n, i)).collect();
    // Segment k: the nodes after cut k and before cut k + 1.
    let mut seg: HashMap<NodeId, usize> = HashMap::new();
    for &n in live {
        if let Some(&k) = cut.get(&n) {
            seg.insert(n, k);
            continue;
        }
        if let Some(k) = g
            .node(n)
            .inputs()
            .iter()
            .filter_map(|v| seg.get(&v.node).copied())
            .max()
        {
            seg.insert(n, k);
        }
    }
    let mut segments: Vec<Vec<NodeId>> = vec![Vec::new(); chain.len()];
    for &n in live {
        if let Some(&k) = seg.get(&n)
            && !cut.contains_key(&n)
        {
            segments[k].push(n);
        }
    }
    // Each segment's layers: the layer numbers of the parameters its nodes read.
    let tags: Vec<BTreeSet<String>> = segments
        .iter()
        .map(|nodes| {
            nodes
                .iter()
                .flat_map(|&n| g.node(n).inputs().iter().copied())
                .filter_map(|v| match &g.node(v.node).op {
                    Op::Param { name } => layer_key(name),
                    _ => None,
                })
                .collect()
        })
        .collect();
    let mut out: Vec<Vec<NodeId>> = Vec::new();
    // The names tell layers apart only if at least two stretches carry different ones: an
    // exporter that folds equal initializers into one (the norms' weights, all ones at
    // initialisation, become `model.layers.0.input_layernorm.weight` for every layer) and
    // names the rest `val_N` leaves one layer name on every stretch, and merging by it
    // would make the whole stack one region, recomputed at once.
    let distinct: BTreeSet<&BTreeSet<String>> = tags.iter().filter(|t| !t.is_empty()).collect();
    if distinct.len() < 2 {
        // No layer names to go by: every stretch between two cuts is a region.
        out.extend(segments.into_iter().filter(|s| s.len() > 1));
    } else {
        // Consecutive segments of the same layer make one region, the cuts between them
        // included.
        let mut k = 0;
        while k < segments.len() {
            if tags[k].is_empty() {
                k += 1;
                continue;
            }
            let mut region = segments[k].clone();
            let mut j = k + 1;
            while j < segments.len() && tags[j] == tags[k] {
                region.push(chain[j]);
                region.extend(segments[j].iter().copied());
                j += 1;
            }
            region.sort_by_key(|n| pos[n]);
            out.push(region);
            k = j;
        }
    }
    out
}

/// Elementwise ops an exported attention puts between its two matmuls (scale, mask, softmax
/// guard, casts).
fn between(op: &Op) -> bool {
    matches!(
        op,
        Op::Add
            | Op::Sub
            | Op::Mul
            | Op::Div
            | Op::Where
            | Op::Cast { .. }
            | Op::IsNaN
            | Op::Max
            | Op::Min
            | Op::Softmax { .. }
    )
}

/// The forward nodes of each unfused attention, from its Q·Kᵀ matmul to its P·V matmul.
fn attentions(g: &Graph, order: &[NodeId]) -> Vec<Vec<NodeId>> {
    let fwd: HashSet<NodeId> = order.iter().copied().collect();
    let mut out = Vec::new();
    let mut taken: HashSet<NodeId> = HashSet::new();
    for &s in order {
        if !matches!(g.node(s).op, Op::Softmax { .. }) || taken.contains(&s) {
            continue;
        }
        let scores = g.value_type(Value::new(s, 0)).clone();
        let same = |v: Value| g.value_type(v).shape == scores.shape;
        // Up to the Q·Kᵀ matmul, through ops of the scores' shape.
        let mut cur = g.node(s).inputs()[0];
        let qk = loop {
            let n = g.node(cur.node);
            if !fwd.contains(&cur.node) {
                break None;
            }
            match &n.op {
                Op::MatMul => break Some(cur.node),
                op if between(op) => match n.inputs().iter().find(|&&v| same(v)) {
                    Some(&v) => cur = v,
                    None => break None,
                },
                _ => break None,
            }
        };
        // Down to the matmul that reads the probabilities as its A operand.
        let mut chain = vec![Value::new(s, 0)];
        let mut pv = None;
        let mut i = 0;
        while i < chain.len() && pv.is_none() {
            for (u, k) in g.users(chain[i]) {
                if !fwd.contains(&u) {
                    continue;
                }
                match &g.node(u).op {
                    Op::MatMul if k == 0 => pv = Some(u),
                    op if between(op) && same(Value::new(u, 0)) => chain.push(Value::new(u, 0)),
                    _ => {}
                }
            }
            i += 1;
        }
        let (Some(qk), Some(pv)) = (qk, pv) else {
            continue;
        };
        // Nodes on a path from qk to pv.
        let up = ancestors(g, &[Value::new(pv, 0)]);
        let mut region = Vec::new();
        let mut reached: HashSet<NodeId> = HashSet::from([qk]);
        for &n in order {
            let on_path = n == qk || g.node(n).inputs().iter().any(|v| reached.contains(&v.node));
            if on_path && up.contains(&n) {
                reached.insert(n);
                region.push(n);
            }
        }
        taken.extend(region.iter().copied());
        out.push(region);
    }
    out
}

/// Recomputes one region (see the module docs); returns the number of nodes copied.
fn recompute(g: &mut Graph, b: &Backward<'_>, region: &[NodeId]) -> R<usize> {
    let inside: HashSet<NodeId> = region.iter().copied().collect();
    let mut triggers: Vec<Value> = Vec::new();
    let mut saved: Vec<(Value, Vec<(NodeId, usize)>)> = Vec::new();
    for &n in region {
        for slot in 0..g.node(n).outputs.len() as u32 {
            let v = Value::new(n, slot);
            for (u, _) in g.users(v) {
                if !b.forward.contains(&u) || inside.contains(&u) {
                    continue;
                }
                for s in 0..g.node(u).outputs.len() as u32 {
                    if let Some(&d) = b.adjoints.get(&Value::new(u, s))
                        && !triggers.contains(&d)
                    {
                        triggers.push(d);
                    }
                }
            }
            let readers = backward_readers(g, b.forward, v);
            if !readers.is_empty() {
                saved.push((v, readers));
            }
        }
    }
    if triggers.is_empty() || saved.is_empty() {
        return Ok(0);
    }
    let before_triggers = ancestors(g, &triggers);
    let saved: Vec<(Value, Vec<(NodeId, usize)>)> = saved
        .into_iter()
        .map(|(v, r)| {
            let r: Vec<_> = r
                .into_iter()
                .filter(|(u, _)| !before_triggers.contains(u))
                .collect();
            (v, r)
        })
        .filter(|(_, r)| !r.is_empty())
        .collect();
    if saved.is_empty() {
        return Ok(0);
    }
    // The region's nodes the saved values need.
    let needed = {
        let up = ancestors(g, &saved.iter().map(|(v, _)| *v).collect::<Vec<_>>());
        region
            .iter()
            .copied()
            .filter(|n| up.contains(n))
            .collect::<Vec<_>>()
    };
    let mut copy: HashMap<Value, Value> = HashMap::new();
    let mut boundary: HashMap<Value, Value> = HashMap::new();
    for &n in &needed {
        let node = g.node(n).clone();
        let mut ins = Vec::with_capacity(node.inputs().len());
        for &u in node.inputs() {
            let src = g.node(u.node);
            let resident = src.op.is_interface() || matches!(src.op, Op::Constant { .. });
            let src_name = src.name.clone();
            let v = if inside.contains(&u.node) {
                copy[&u]
            } else if resident {
                u
            } else if let Some(&w) = boundary.get(&u) {
                w
            } else {
                let mut w = u;
                for &t in &triggers {
                    w = g.add_node(&format!("{src_name}.recompute.after"), Op::After, &[w, t])?[0];
                }
                boundary.insert(u, w);
                w
            };
            ins.push(v);
        }
        let outs = g.add_node(&format!("{}.recompute", node.name), node.op.clone(), &ins)?;
        for (slot, o) in outs.into_iter().enumerate() {
            copy.insert(Value::new(n, slot as u32), o);
        }
    }
    for (v, readers) in &saved {
        for &(u, i) in readers {
            g.set_input(u, i, copy[v])?;
        }
    }
    Ok(needed.len())
}
