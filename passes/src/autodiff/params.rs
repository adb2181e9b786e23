//! Which parameters train.
//!
//! Default rule (issue 7): a float parameter trains when it feeds, possibly through
//! layout-only ops (transpose, reshape, squeeze, unsqueeze, flatten, identity, cast) and the
//! scaling pass's quantize/dequantize, any of
//! - a GEMM or convolution (`matmul`, `gemm` including its C, `conv` including its bias,
//!   `scaled_matmul`);
//! - a normalisation's scale or bias (`layer_norm`, `batch_norm` inputs 1 and 2; batch norm's
//!   running mean and variance do not train);
//! - a bias add: an `add` whose other operand is produced (through the same layout ops) by a
//!   GEMM, a convolution or an embedding lookup; this covers a Linear's bias and a learned
//!   positional embedding;
//! - an embedding table: the data input of `gather`;
//! - a table read by `gather_nd` (batch_dims 0) whose gathered rows feed any of the above: a
//!   mixture of experts' expert weights, gathered per token by the router's indices.
//!
//! `--freeze GLOB` removes parameters by name.

use crate::precision::compile_globs;
use fp8c_ir::{Graph, IrError, Op, Value};

/// Ops that only move or re-type data: a parameter read through them is still the parameter.
fn is_passthrough(op: &Op, input: usize) -> bool {
    match op {
        Op::Transpose { .. }
        | Op::Reshape { .. }
        | Op::Squeeze { .. }
        | Op::Unsqueeze { .. }
        | Op::Flatten { .. }
        | Op::Identity
        | Op::Cast { .. } => input == 0,
        Op::Quantize { .. }
        | Op::Dequantize { .. }
        | Op::BlockQuantize { .. }
        | Op::BlockDequantize { .. } => input == 0,
        _ => false,
    }
}

/// The op producing `v`, looking back through pass-through ops.
fn producer(g: &Graph, mut v: Value) -> Op {
    loop {
        let n = g.node(v.node);
        match n.inputs().first() {
            Some(&i) if is_passthrough(&n.op, 0) => v = i,
            _ => return n.op.clone(),
        }
    }
}

fn is_gemm_or_embedding(op: &Op) -> bool {
    matches!(
        op,
        Op::MatMul
            | Op::Gemm { .. }
            | Op::Conv { .. }
            | Op::ScaledMatMul { .. }
            | Op::BlockScaledMatMul { .. }
            | Op::Gather { .. }
    )
}

/// True if parameter value `p` feeds a GEMM, a norm, a bias add or an embedding lookup.
fn feeds_trainable_use(g: &Graph, p: Value) -> bool {
    let mut stack = vec![p];
    let mut seen = std::collections::HashSet::new();
    while let Some(v) = stack.pop() {
        if !seen.insert(v) {
            continue;
        }
        for (user, idx) in g.users(v) {
            let n = g.node(user);
            // A table that rows are gathered from by index (`gather_nd`, as a mixture of
            // experts picks each token's expert weights) trains when what is gathered does.
            let gathered = idx == 0 && matches!(n.op, Op::GatherNd { batch_dims: 0 });
            if is_passthrough(&n.op, idx) || gathered {
                stack.push(Value::new(user, 0));
                continue;
            }
            let hit = match &n.op {
                Op::MatMul
                | Op::Gemm { .. }
                | Op::Conv { .. }
                | Op::ScaledMatMul { .. }
                | Op::BlockScaledMatMul { .. } => true,
                Op::LayerNormalization { .. } => idx >= 1,
                Op::BatchNormalization { .. } => idx == 1 || idx == 2,
                Op::Gather { .. } => idx == 0,
                Op::Add => {
                    let other = n.inputs()[1 - idx.min(1)];
                    is_gemm_or_embedding(&producer(g, other))
                }
                _ => false,
            };
            if hit {
                return true;
            }
        }
    }
    false
}

/// The trainable and the frozen parameters (names, graph order) of `g`; `only` replaces the
/// default rule by name globs.
pub(crate) fn select(
    g: &Graph,
    freeze: &[String],
    only: Option<&[String]>,
) -> Result<(Vec<String>, Vec<String>), IrError> {
    let frozen = compile_globs("--freeze", freeze).map_err(IrError::Other)?;
    let only = only
        .map(|o| compile_globs("--train", o).map_err(IrError::Other))
        .transpose()?;
    let (mut train, mut skip) = (Vec::new(), Vec::new());
    for &id in g.params() {
        let name = fp8c_ir::interface_name(&g.node(id).op).to_string();
        let v = Value::new(id, 0);
        let dt = g.value_type(v).dtype;
        let chosen = match &only {
            Some(set) => set.is_match(&name),
            None => feeds_trainable_use(g, v),
        };
        if !dt.is_float() || dt.is_fp8() || !chosen {
            continue;
        }
        if frozen.is_match(&name) {
            skip.push(name);
        } else {
            train.push(name);
        }
    }
    Ok((train, skip))
}
