//! `--activations bf16`: saved f32 activations kept in bf16 until backward reads them.
//!
//! A saved value is one that the forward side computes (a node that does not depend on the
//! loss's seed: the forward pass, and backward factors that only read forward values, such
//! as `1 − tanh²`) and a backward node reads. When it is an activation (it depends on a graph
//! input; weights stay as they are), an f32 tensor of at least [`MIN_BYTES`], and not the
//! loss's own output, it becomes `cast(v, bf16)` once the forward is done with it, and each
//! backward reader reads `cast(after(that, d), f32)`, where `d` is one of the reader's own
//! backward inputs: the widening waits until the reader could run. FP8 codes (GEMM inputs
//! under the FP8 recipes) and bf16 values (under `--precision bf16`) are already narrow, and
//! the boundary of a recomputed region (read through `after`) stays exact, so that the
//! recomputation is the forward's.

use super::Backward;
use fp8c_ir::{DType, Graph, IrError, NodeId, Op, Value};
use std::collections::{BTreeMap, HashSet};

type R<T> = Result<T, IrError>;

/// Saved values smaller than this stay f32 (a cast pair costs more than it saves).
pub(super) const MIN_BYTES: u64 = 4096;

/// Narrows every eligible saved value; returns how many.
pub(super) fn apply(g: &mut Graph, b: &Backward<'_>) -> R<usize> {
    let order = g.topo_order()?;
    let mut backward: HashSet<NodeId> = HashSet::from([b.seed.node]);
    let mut data: HashSet<NodeId> = g.inputs().iter().copied().collect();
    for &n in &order {
        let ins = g.node(n).inputs();
        if ins.iter().any(|v| backward.contains(&v.node)) {
            backward.insert(n);
        }
        if ins.iter().any(|v| data.contains(&v.node)) {
            data.insert(n);
        }
    }
    let mut narrowed = 0;
    for &n in &order {
        let node = g.node(n);
        if backward.contains(&n)
            || !data.contains(&n)
            || node.op.is_interface()
            || matches!(node.op, Op::Constant { .. } | Op::SoftmaxCrossEntropy)
        {
            continue;
        }
        for slot in 0..node.outputs.len() as u32 {
            let v = Value::new(n, slot);
            let ty = g.value_type(v).clone();
            if ty.dtype != DType::F32 || ty.rank() == 0 || ty.num_bytes().unwrap_or(0) < MIN_BYTES {
                continue;
            }
            let users = g.users(v);
            if users
                .iter()
                .any(|(u, _)| matches!(g.node(*u).op, Op::After))
            {
                continue;
            }
            // Backward readers, each with the input positions reading v.
            let mut readers: BTreeMap<NodeId, Vec<usize>> = BTreeMap::new();
            for (u, i) in users {
                if backward.contains(&u) {
                    readers.entry(u).or_default().push(i);
                }
            }
            if readers.is_empty() {
                continue;
            }
            let name = g.node(n).name.clone();
            let name = if slot == 0 {
                name
            } else {
                format!("{name}.{slot}")
            };
            let narrow = g.add_node(
                &format!("{name}.saved_bf16"),
                Op::Cast {
                    to: DType::BF16,
                    saturate: false,
                },
                &[v],
            )?[0];
            for (u, positions) in readers {
                let wait = g
                    .node(u)
                    .inputs()
                    .iter()
                    .copied()
                    .find(|w| backward.contains(&w.node))
                    .expect("a backward node reads a backward value");
                let reader = g.node(u).name.clone();
                let later =
                    g.add_node(&format!("{reader}.saved.after"), Op::After, &[narrow, wait])?[0];
                let wide = g.add_node(
                    &format!("{reader}.saved.f32"),
                    Op::Cast {
                        to: DType::F32,
                        saturate: false,
                    },
                    &[later],
                )?[0];
                for i in positions {
                    g.set_input(u, i, wide)?;
                }
            }
            narrowed += 1;
        }
    }
    Ok(narrowed)
}
