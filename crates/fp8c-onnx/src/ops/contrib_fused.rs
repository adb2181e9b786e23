//! The com.microsoft fused ops onnxruntime's transformer optimizer
//! (`onnxruntime.transformers.optimizer`, also run by Optimum) writes into BERT, GPT-2 and
//! Llama-style graphs, decomposed back into IR ops: SkipLayerNormalization,
//! SkipSimplifiedLayerNormalization, BiasGelu, FastGelu, Gelu and QuickGelu (and
//! the default-domain SimplifiedLayerNormalization in `ops/mod.rs`). The fusion pass then
//! fuses them its own way.

use super::NodeCx;
use crate::OnnxError;
use fp8c_ir::{DType, GeluApprox, Op, Value};

/// `input + skip (+ bias)`: the sum Skip*LayerNormalization normalises (its output 3).
fn skip_sum(cx: &mut NodeCx<'_>, bias_at: usize) -> Result<Value, OnnxError> {
    let (x, skip) = (cx.input(0)?, cx.input(1)?);
    let s = cx.add_helper("skip_sum", Op::Add, &[x, skip])?;
    match cx.opt_input(bias_at) {
        Some(b) => cx.add_helper("skip_bias_sum", Op::Add, &[s, b]),
        None => Ok(s),
    }
}

/// Outputs 1 and 2 (mean, inverse standard deviation) are training-time statistics fp8c does
/// not give; output 3 is the normalised sum.
fn outputs(cx: &NodeCx<'_>, y: Value, sum: Value) -> Result<Vec<Value>, OnnxError> {
    if cx.output_used(1) || cx.output_used(2) {
        return Err(
            cx.err("outputs 1 and 2 (mean, inv_std_var) are used, but fp8c does not give them")
        );
    }
    Ok(vec![y, y, y, sum])
}

/// SkipLayerNormalization: inputs input, skip, gamma, beta, bias; LayerNorm over the last
/// axis of `input + skip + bias`, `epsilon` (default 1e-12).
pub(super) fn skip_layer_norm(cx: &mut NodeCx<'_>) -> Result<Vec<Value>, OnnxError> {
    let epsilon = cx.attr_float("epsilon", 1e-12)?;
    let sum = skip_sum(cx, 4)?;
    let mut inputs = vec![sum, cx.input(2)?];
    inputs.extend(cx.opt_input(3));
    let y = cx.add(Op::LayerNormalization { axis: -1, epsilon }, &inputs)?;
    outputs(cx, y, sum)
}

/// SkipSimplifiedLayerNormalization: inputs input, skip, gamma, bias; RMS normalisation of
/// `input + skip + bias` over the last axis, `epsilon` (default 1e-12).
pub(super) fn skip_simplified_layer_norm(cx: &mut NodeCx<'_>) -> Result<Vec<Value>, OnnxError> {
    let epsilon = cx.attr_float("epsilon", 1e-12)?;
    let sum = skip_sum(cx, 3)?;
    let y = cx.add(
        Op::RmsNormalization { axis: -1, epsilon },
        &[sum, cx.input(2)?],
    )?;
    outputs(cx, y, sum)
}

/// `x + bias` if a bias is given at input 1.
fn with_bias(cx: &mut NodeCx<'_>) -> Result<Value, OnnxError> {
    let x = cx.input(0)?;
    match cx.opt_input(1) {
        Some(b) => cx.add_helper("biased", Op::Add, &[x, b]),
        None => Ok(x),
    }
}

/// BiasGelu (exact, erf) and Gelu (input 1 absent) of `A + bias`.
pub(super) fn gelu(cx: &mut NodeCx<'_>) -> Result<Vec<Value>, OnnxError> {
    let x = with_bias(cx)?;
    let op = Op::Gelu {
        approximate: GeluApprox::None,
    };
    Ok(vec![cx.add(op, &[x])?])
}

/// FastGelu: the tanh approximation of GELU of `X + bias`.
pub(super) fn fast_gelu(cx: &mut NodeCx<'_>) -> Result<Vec<Value>, OnnxError> {
    let x = with_bias(cx)?;
    let op = Op::Gelu {
        approximate: GeluApprox::Tanh,
    };
    Ok(vec![cx.add(op, &[x])?])
}

/// QuickGelu: `x · sigmoid(alpha · x)`, `alpha` default 1.702.
pub(super) fn quick_gelu(cx: &mut NodeCx<'_>) -> Result<Vec<Value>, OnnxError> {
    let alpha = cx.attr_float("alpha", 1.702)?;
    let x = cx.input(0)?;
    let dtype = cx.ty(x).dtype;
    if !matches!(dtype, DType::F32 | DType::F16 | DType::BF16 | DType::F64) {
        return Err(cx.err(format!("input X must be float, got {}", cx.ty(x))));
    }
    let a = cx.scalar("alpha", dtype, f64::from(alpha))?;
    let ax = cx.add_helper("scaled", Op::Mul, &[a, x])?;
    let s = cx.add_helper("gate", Op::Sigmoid, &[ax])?;
    Ok(vec![cx.add(Op::Mul, &[x, s])?])
}
