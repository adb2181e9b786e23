//! Opsets 1–6: the forms of ops before opset 7, read as their opset-7 forms where that is the
//! same op. For a node of such a model, every attribute its op's schema has at the model's
//! opset but not at opset 7 (ONNX's schemas, `schema_table.rs`) is either handled here or an
//! error naming it, so an old form is never read another way:
//! - `consumed_inputs` (opsets 1–5) is a memory-reuse hint and has no effect on values;
//! - `broadcast` without `axis` (binary ops, Gemm) aligns trailing dims, as numpy's
//!   broadcasting does; with `axis`, binary ops unsqueeze B's trailing dims first
//!   (`math::binary`), and other ops are refused;
//! - `is_test` must be 1: its default 0 is training mode (BatchNormalization's batch
//!   statistics, Dropout's random mask), which those versions give no other way.

use super::schema::versions;
use crate::proto::AttributeProto;

/// The attributes of `op` at `opset` that its opset-7 form lacks.
fn dropped_since(op: &str, opset: i64) -> Vec<&'static str> {
    let all = versions(op);
    let at = |v: i64| all.iter().rev().find(|s| s.since <= v);
    match (at(opset), at(7)) {
        (Some(old), Some(new)) if old.since != new.since => old
            .attrs
            .iter()
            .map(|a| a.0)
            .filter(|n| !new.attrs.iter().any(|b| b.0 == *n))
            .collect(),
        _ => Vec::new(),
    }
}

/// Checks a default-domain node of an opset 1–6 model (see the module docs).
pub(crate) fn check(op: &str, opset: i64, attrs: &[AttributeProto]) -> Result<(), String> {
    if opset >= 7 {
        return Ok(());
    }
    let value = |name: &str| attrs.iter().find(|a| a.name() == name).and_then(|a| a.i);
    let binary = matches!(
        op,
        "Add" | "Sub" | "Mul" | "Div" | "Pow" | "And" | "Or" | "Xor" | "Equal" | "Greater" | "Less"
    );
    for name in dropped_since(op, opset) {
        let given = attrs.iter().any(|a| a.name() == name);
        match name {
            "consumed_inputs" => {}
            "broadcast" => {}
            "axis" if !given || binary => {}
            "is_test" if value("is_test") == Some(1) => {}
            "is_test" => {
                return Err(format!(
                    "attribute `is_test` = {} (training mode) of {op} before opset 7 is not \
                     supported: give is_test = 1",
                    value("is_test").unwrap_or(0)
                ));
            }
            _ if !given => {}
            _ => {
                return Err(format!(
                    "attribute `{name}` of {op} before opset 7 (opset {opset}) is not supported"
                ));
            }
        }
    }
    Ok(())
}
