//! Gradient accumulation over micro-batches (`TrainSpec::accumulate` = N > 1), in the graph.
//!
//! One execution of the training step is one micro-batch. The input `train.apply` is 1 on the
//! last micro-batch of a step and 0 before it. Each parameter's gradient adds into the state
//! `{param}.grad_acc`; the optimizer reads `acc / N` (the mean loss over the N micro-batches,
//! as PyTorch's `loss / N` before `backward`), and every optimizer, scale and counter update
//! takes effect only when `train.apply` is 1 (the non-finite guard's `where`, with the
//! condition `apply ∧ finite`). The accumulators restart from 0 after the last micro-batch.
//!
//! FP8 scaling follows TransformerEngine: the amax of every micro-batch of a step goes into
//! one history entry. Each `amax_history_update` records `max(amax, history[0])` (slot 0 is 0
//! at the start of a step, after the roll), the history keeps that record without rolling on
//! the micro-batches before the last, and rolls once on the last; scales change once per step.
//! A step skipped for a non-finite gradient keeps its recorded slot 0 (the next step's amaxes
//! add to it).

use super::emit::Emit;
use fp8c_ir::{DType, IrError, Op, TensorType, Value};

type R<T> = Result<T, IrError>;

/// The graph input that says "last micro-batch of the step" (f32[]: 1 or 0).
pub const APPLY_INPUT: &str = "train.apply";

/// What the accumulation adds before the optimizer.
pub(crate) struct Accumulation {
    /// `train.apply` as f32[].
    pub apply: Value,
    /// `train.apply > 0.5` as bool[].
    pub apply_bool: Value,
    /// `(accumulator state name, acc + grad)` per parameter.
    pub sums: Vec<(String, Value)>,
}

/// Adds `train.apply`, one accumulator per gradient, and returns the gradients the optimizer
/// reads (`(acc + grad) / n`) with what [`finish`] needs.
pub(crate) fn accumulate(
    e: &mut Emit<'_>,
    grads: &[(String, Value)],
    n: u32,
) -> R<(Vec<Value>, Accumulation)> {
    let apply = e.g.add_input(APPLY_INPUT, TensorType::scalar(DType::F32))?;
    let half = e.scalar("train.apply.half", DType::F32, 0.5)?;
    let apply_bool = e.op("train.apply.bool", Op::Greater, &[apply, half])?;
    let mut out = Vec::with_capacity(grads.len());
    let mut sums = Vec::with_capacity(grads.len());
    for (name, g) in grads {
        let ty = e.ty(*g);
        let state = format!("{name}.grad_acc");
        let acc = e.g.add_state(&state, ty.clone(), 0.0)?;
        let sum = e.add(&format!("{state}.sum"), acc, *g)?;
        let inv = e.scalar(&format!("{state}.inv_n"), ty.dtype, 1.0 / f64::from(n))?;
        out.push(e.mul(&format!("{state}.mean"), sum, inv)?);
        sums.push((state, sum));
    }
    Ok((
        out,
        Accumulation {
            apply,
            apply_bool,
            sums,
        },
    ))
}

/// After the guard: the accumulators restart at 0 on the last micro-batch and keep the sum
/// before it; every amax history records the running max of the step's micro-batches and
/// rolls only on the last one (see the module docs).
pub(crate) fn finish(e: &mut Emit<'_>, acc: &Accumulation) -> R<()> {
    let zero = e.scalar("train.grad_acc.zero", DType::F32, 0.0)?;
    for (state, sum) in &acc.sums {
        let dt = e.dtype(*sum);
        let z = if dt == DType::F32 {
            zero
        } else {
            e.cast(&format!("{state}.zero"), zero, dt)?
        };
        let next = e.op(
            &format!("{state}.next"),
            Op::Where,
            &[acc.apply_bool, z, *sum],
        )?;
        e.g.set_state_update(state, next)?;
    }
    let histories: Vec<fp8c_ir::NodeId> =
        e.g.node_ids()
            .into_iter()
            .filter(|&id| matches!(e.g.node(id).op, Op::AmaxHistoryUpdate))
            .collect();
    for id in histories {
        let node = e.g.node(id).clone();
        let (hist, amax) = (node.inputs()[0], node.inputs()[1]);
        let Op::State { .. } = &e.g.node(hist.node).op else {
            continue;
        };
        let hist_name = e.g.node(hist.node).name.clone();
        // amax' = max(amax, history[0]): the running max of this step's micro-batches.
        let first = slot0(e, &format!("{}.acc.slot0", node.name), hist)?;
        let running = e.op(&format!("{}.acc.amax", node.name), Op::Max, &[amax, first])?;
        e.g.set_input(id, 1, running)?;
        let recorded = Value::new(id, 0);
        let Some(&update) = e.g.state_updates().get(&hist_name) else {
            continue;
        };
        let sel = e.op(
            &format!("{hist_name}.acc"),
            Op::Where,
            &[acc.apply_bool, update, recorded],
        )?;
        e.g.set_state_update(&hist_name, sel)?;
    }
    Ok(())
}

/// `history[0]` as a scalar.
fn slot0(e: &mut Emit<'_>, name: &str, hist: Value) -> R<Value> {
    let starts = e.i64s(&format!("{name}.starts"), &[0])?;
    let ends = e.i64s(&format!("{name}.ends"), &[1])?;
    let axes = e.i64s(&format!("{name}.axes"), &[0])?;
    let steps = e.i64s(&format!("{name}.steps"), &[1])?;
    let s = e.op(name, Op::Slice, &[hist, starts, ends, axes, steps])?;
    e.reshape(&format!("{name}.scalar"), s, &[])
}
