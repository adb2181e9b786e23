//! The memory section of the explain report: a lowered program's planned peak by role
//! (`fp8c_runtime`'s breakdown) in the report's terms, for training steps.

use fp8c_passes::report::{Memory, MemoryRow};
use fp8c_runtime::Program;

/// What `program`'s planned peak holds, by role.
pub fn memory_report(program: &Program) -> Memory {
    let b = fp8c_runtime::memory_breakdown(program);
    Memory {
        peak_step: b.peak_step,
        peak_node: b.peak_node.clone(),
        steps: b.steps,
        total_bytes: b.total(),
        rows: b
            .rows()
            .into_iter()
            .map(|(role, bytes, what)| MemoryRow {
                role: role.to_string(),
                bytes,
                what: what.to_string(),
            })
            .collect(),
    }
}

/// True for graphs with training ops (a loss, gradients, an optimizer): their report has a
/// memory section.
pub(crate) fn is_training(g: &fp8c_ir::Graph) -> bool {
    g.node_ids()
        .into_iter()
        .any(|id| g.node(id).op.props().training)
}
