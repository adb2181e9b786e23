//! Step robustness: a step whose loss or any gradient is not finite changes nothing.
//!
//! One `all_finite` node reads the loss and every gradient. Every state update of the
//! training graph (new params, optimizer moments, every amax history, scale and scale_inv,
//! forward and backward) becomes `where(finite, new, old)`, so a skipped step records no amax
//! and leaves the weights as they were. Only the counters move: `train.step` always,
//! `train.skipped_steps` when the step was skipped.

use super::emit::Emit;
use fp8c_ir::{IrError, Op, Value};

/// Makes every state update except those named in `keep` conditional on `finite`.
pub(crate) fn guard_updates(
    e: &mut Emit<'_>,
    finite: Value,
    keep: &[&str],
) -> Result<usize, IrError> {
    let updates: Vec<(String, Value)> =
        e.g.state_updates()
            .iter()
            .filter(|(k, _)| !keep.contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), *v))
            .collect();
    for (name, new) in &updates {
        let id = e.g.find_interface(name).ok_or_else(|| {
            IrError::Other(format!(
                "autodiff: state \"{name}\" has an update but no node"
            ))
        })?;
        let old = Value::new(id, 0);
        let sel = e.op(&format!("{name}.guarded"), Op::Where, &[finite, *new, old])?;
        e.g.set_state_update(name, sel)?;
    }
    Ok(updates.len())
}
