//! What the CPU backend hands over by moving a buffer instead of computing or copying it: a
//! `where` whose condition is a single bool selects one operand whole (a training step's
//! guards, `where(apply ∧ finite, updated, old)` for every weight, moment and history), and a
//! run's outputs and state updates leave the slots they were computed in. The bits are those
//! of the evaluated step and of a copy; what it saves is a buffer per weight and moment at the
//! end of a training step, where the old state, the updated one and the guards' results were
//! all alive at once (and then copied again into the run's results).

use crate::backend::RuntimeError;
use crate::cpu_backend::same_dims;
use crate::program::{BufId, Program};
use fp8c_ir::{DType, Op, Tensor};
use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};

/// The slots of a run: each buffer's value, borrowed (inputs, params, state, constants) or
/// made by this run.
pub(crate) type Slots<'a> = [Option<Cow<'a, Tensor>>];

/// Step `i` as a whole-operand select: `where(c, a, b)` with `c` one bool and the chosen
/// operand already of the output's type and shape. Returns the chosen operand, moved out of
/// `slots` when this run made it and it dies at this step, copied otherwise; None when the
/// step is no such select (and `slots` as they were).
pub(crate) fn select_whole(p: &Program, i: usize, slots: &mut Slots<'_>) -> Option<Tensor> {
    let step = &p.steps()[i];
    if !matches!(step.op, Op::Where) || step.inputs.len() != 3 || step.outputs.len() != 1 {
        return None;
    }
    let c = slots[step.inputs[0].index()].as_deref()?;
    if c.dtype() != DType::Bool || c.len() != 1 {
        return None;
    }
    let pick = step.inputs[if c.bytes()[0] != 0 { 1 } else { 2 }];
    let want = p.buffer(step.outputs[0]);
    let chosen = slots[pick.index()].as_deref()?;
    if chosen.dtype() != want.ty.dtype || !same_dims(chosen.shape(), &want.dims) {
        return None;
    }
    let movable = step.inputs.iter().filter(|b| **b == pick).count() == 1
        && p.frees_after(i).contains(&pick)
        && matches!(slots[pick.index()], Some(Cow::Owned(_)));
    if !movable {
        return Some(chosen.clone());
    }
    slots[pick.index()].take().map(Cow::into_owned)
}

/// A run's graph outputs by name, and the new value of each updated state buffer.
pub(crate) type Results = (BTreeMap<String, Tensor>, Vec<(BufId, Tensor)>);

/// The run's graph outputs by name and its state updates, each buffer moved out of `slots`
/// at its last use among them when this run made it, copied otherwise (a param, a constant,
/// an input passed through, or a buffer wanted twice).
pub(crate) fn take_results(p: &Program, slots: &mut Slots<'_>) -> Result<Results, RuntimeError> {
    let updates: Vec<(BufId, BufId)> = p
        .state()
        .iter()
        .filter_map(|s| s.update.map(|u| (s.buf, u)))
        .collect();
    let mut uses: HashMap<BufId, usize> = HashMap::new();
    for b in p
        .outputs()
        .iter()
        .map(|(_, b)| *b)
        .chain(updates.iter().map(|u| u.1))
    {
        *uses.entry(b).or_default() += 1;
    }
    let mut take = |b: BufId| -> Result<Tensor, RuntimeError> {
        let left = uses.get_mut(&b).map_or(0, |n| {
            *n -= 1;
            *n
        });
        let slot = &mut slots[b.index()];
        let gone = || RuntimeError::Other(format!("internal: result {b} was freed"));
        if left == 0 {
            slot.take().map(Cow::into_owned).ok_or_else(gone)
        } else {
            slot.as_deref().cloned().ok_or_else(gone)
        }
    };
    let mut out = BTreeMap::new();
    for (name, b) in p.outputs() {
        out.insert(name.clone(), take(*b)?);
    }
    let mut news = Vec::with_capacity(updates.len());
    for (buf, u) in updates {
        news.push((buf, take(u)?));
    }
    Ok((out, news))
}
