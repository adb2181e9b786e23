//! fp8c-eval, the CPU reference evaluator: [`eval_op`] computes one IR op on concrete tensors with
//! exactly ONNX's semantics. It folds constants for the passes and is the oracle every GPU
//! kernel is compared with, so it favours exactness and clarity over speed.
//!
//! Conventions every kernel follows:
//! - Never panics on any input: arity, dtypes, shapes and attributes are checked and reported
//!   as an [`EvalError`] naming the op; outputs (and large scratch buffers) beyond
//!   `fp8c_ir::MAX_ELEMENTS` elements are refused before anything is allocated.
//! - Floats: f16 and bf16 widen exactly to f32, compute, and round once to nearest even;
//!   f64 computes in f64. Elementwise math is f32 (libm-quality `exp`, `ln`, `tanh`, ..., and
//!   musl's `erff` through the `libm` crate). GEMMs (matmul, gemm, conv, scaled_matmul)
//!   accumulate in f32 like the GPU kernels they check. Reductions, pools and normalisations
//!   accumulate in f64 and round once: the reference is the nearly exact value.
//! - Integers wrap on overflow (numpy); division truncates toward zero (C, as ONNX); division
//!   or remainder by zero is an error.
//! - FP8 is a storage type: data movement ops, `cast`, `where`, `identity`, `is_nan`,
//!   `is_inf`, `amax`, the Q/DQ ops and the FP8 ops accept it; arithmetic does not. Every FP8
//!   rounding is fp8c-core's, bit-exact.
//! - Deterministic: parallel loops (rayon) split the work over independent output elements or
//!   rows and never reorder a floating-point reduction, so results do not depend on the number
//!   of threads.
//!
//! Files by op family: `elementwise` (unary, binary, where, clip), `cast`, `movement` (shape
//! and data movement), `linalg` (matmul, gemm, scaled_matmul), `conv`, `pool` (with the
//! shared `window` geometry), `normalize`, `reduce`, `quantize` (ONNX Q/DQ), `fp8`, `fused`
//! (the fusion pass's ops as compositions of the above), `train` (backward kernels, losses,
//! optimizer steps).

mod broadcast;
mod cast;
mod conv;
mod data;
mod elementwise;
mod error;
mod fp8;
mod fused;
mod linalg;
mod movement;
mod normalize;
mod pool;
mod quantize;
mod reduce;
mod train;
mod window;

pub use crate::error::{ErrorKind, EvalError};
use crate::error::{Fail, KResult};
use fp8c_ir::{Op, Tensor};
use reduce::Reduction;
use window::WindowAttrs;

/// Evaluates `op` on `inputs`, giving one tensor per output of the op.
pub fn eval_op(op: &Op, inputs: &[&Tensor]) -> Result<Vec<Tensor>, EvalError> {
    check_inputs(inputs)
        .and_then(|()| dispatch(op, inputs))
        .map_err(|f| f.at(op.name()))
}

/// Refuses inputs whose non-zero dims multiply past `MAX_ELEMENTS` (only possible for empty
/// tensors such as `[0, 2^40, 2^40]`), so kernels may multiply input dims freely.
fn check_inputs(inputs: &[&Tensor]) -> KResult<()> {
    for (i, t) in inputs.iter().enumerate() {
        data::numel(t.shape())
            .map_err(|f| Fail::new(f.kind, format!("input {i}: {}", f.message)))?;
    }
    Ok(())
}

/// Exactly `N` inputs, as an array.
fn args<'a, const N: usize>(inputs: &[&'a Tensor]) -> KResult<[&'a Tensor; N]> {
    <[&Tensor; N]>::try_from(inputs).or_else(|_| Fail::arity(&N.to_string(), inputs.len()))
}

fn dispatch(op: &Op, inputs: &[&Tensor]) -> KResult<Vec<Tensor>> {
    let one = |t: Tensor| Ok(vec![t]);
    match op {
        Op::Input { .. } | Op::Param { .. } | Op::State { .. } => Err(Fail::new(
            ErrorKind::Interface,
            "graph interface ops have no evaluation; their values are fed by the caller",
        )),
        Op::Constant { value } => {
            args::<0>(inputs)?;
            one(value.clone())
        }
        _ if op.is_elementwise_unary() => {
            let [x] = args(inputs)?;
            one(elementwise::unary(op, x)?)
        }
        _ if op.is_elementwise_binary() => one(elementwise::binary(op, inputs)?),
        Op::Where => one(elementwise::where_(inputs)?),
        Op::Clip => one(elementwise::clip(inputs)?),
        Op::Cast { to, saturate } => {
            let [x] = args(inputs)?;
            one(cast::cast(x, *to, *saturate)?)
        }

        Op::MatMul => {
            let [a, b] = args(inputs)?;
            one(linalg::matmul(a, b)?)
        }
        Op::Gemm {
            alpha,
            beta,
            trans_a,
            trans_b,
        } => one(linalg::gemm_op(inputs, *alpha, *beta, *trans_a, *trans_b)?),
        Op::Conv {
            kernel_shape,
            strides,
            pads,
            dilations,
            group,
            auto_pad,
        } => {
            let attrs = conv::ConvAttrs {
                kernel_shape,
                strides,
                pads,
                dilations,
                group: *group,
                auto_pad: *auto_pad,
            };
            one(conv::conv(inputs, &attrs)?)
        }

        Op::MaxPool {
            kernel_shape,
            strides,
            pads,
            dilations,
            ceil_mode,
            auto_pad,
        } => {
            let [x] = args(inputs)?;
            let win = WindowAttrs {
                strides,
                pads,
                dilations,
                auto_pad: *auto_pad,
                ceil_mode: *ceil_mode,
            };
            one(pool::pool(x, pool::PoolKind::Max, kernel_shape, &win)?)
        }
        Op::AveragePool {
            kernel_shape,
            strides,
            pads,
            dilations,
            ceil_mode,
            count_include_pad,
            auto_pad,
        } => {
            let [x] = args(inputs)?;
            let win = WindowAttrs {
                strides,
                pads,
                dilations,
                auto_pad: *auto_pad,
                ceil_mode: *ceil_mode,
            };
            let kind = pool::PoolKind::Average {
                count_include_pad: *count_include_pad,
            };
            one(pool::pool(x, kind, kernel_shape, &win)?)
        }
        Op::GlobalAveragePool => {
            let [x] = args(inputs)?;
            one(reduce::global_pool(x, Reduction::Mean)?)
        }
        Op::GlobalMaxPool => {
            let [x] = args(inputs)?;
            one(reduce::global_pool(x, Reduction::Max)?)
        }
        Op::BatchNormalization { epsilon } => one(normalize::batch_norm(inputs, *epsilon)?),
        Op::LayerNormalization { axis, epsilon } => {
            one(normalize::layer_norm(inputs, *axis, *epsilon)?)
        }
        Op::Softmax { axis } => {
            let [x] = args(inputs)?;
            one(normalize::softmax(x, *axis, false)?)
        }
        Op::LogSoftmax { axis } => {
            let [x] = args(inputs)?;
            one(normalize::softmax(x, *axis, true)?)
        }

        Op::ReduceMean { axes, keepdims } => reduce_op(inputs, Reduction::Mean, axes, *keepdims),
        Op::ReduceSum { axes, keepdims } => reduce_op(inputs, Reduction::Sum, axes, *keepdims),
        Op::ReduceMax { axes, keepdims } => reduce_op(inputs, Reduction::Max, axes, *keepdims),
        Op::ReduceMin { axes, keepdims } => reduce_op(inputs, Reduction::Min, axes, *keepdims),
        Op::ReduceProd { axes, keepdims } => reduce_op(inputs, Reduction::Prod, axes, *keepdims),

        Op::Shape { start, end } => {
            let [x] = args(inputs)?;
            one(movement::shape(x, *start, *end)?)
        }
        Op::Reshape { allowzero } => {
            let [x, shape] = args(inputs)?;
            one(movement::reshape(x, shape, *allowzero)?)
        }
        Op::Transpose { perm } => {
            let [x] = args(inputs)?;
            one(movement::transpose(x, perm)?)
        }
        Op::Unsqueeze { axes } => {
            let [x] = args(inputs)?;
            one(movement::unsqueeze(x, axes)?)
        }
        Op::Squeeze { axes } => {
            let [x] = args(inputs)?;
            one(movement::squeeze(x, axes.as_deref())?)
        }
        Op::Flatten { axis } => {
            let [x] = args(inputs)?;
            one(movement::flatten(x, *axis)?)
        }
        Op::Concat { axis } => one(movement::concat(inputs, *axis)?),
        Op::Split { axis, split } => {
            let [x] = args(inputs)?;
            movement::split(x, *axis, split)
        }
        Op::Slice => one(movement::slice(inputs)?),
        Op::Gather { axis } => {
            let [x, indices] = args(inputs)?;
            one(movement::gather(x, indices, *axis)?)
        }
        Op::Expand => {
            let [x, shape] = args(inputs)?;
            one(movement::expand(x, shape)?)
        }
        Op::ConstantOfShape { value } => {
            let [shape] = args(inputs)?;
            one(movement::constant_of_shape(shape, value)?)
        }
        Op::Range => one(movement::range(inputs)?),
        Op::Pad { mode } => one(movement::pad(inputs, *mode)?),
        Op::Tile => {
            let [x, repeats] = args(inputs)?;
            one(movement::tile(x, repeats)?)
        }

        Op::QuantizeLinear { axis, saturate, to } => {
            one(quantize::quantize_linear(inputs, *axis, *saturate, *to)?)
        }
        Op::DequantizeLinear { axis } => one(quantize::dequantize_linear(inputs, *axis)?),

        Op::Amax => {
            let [x] = args(inputs)?;
            one(fp8::amax(x)?)
        }
        Op::ComputeScale {
            fmt,
            margin,
            source,
            epsilon,
            power_2,
        } => fp8::compute_scale(inputs, *fmt, *margin, *source, *epsilon, *power_2),
        Op::AmaxHistoryUpdate => fp8::amax_history_update(inputs),
        Op::Quantize { to, saturate } => one(fp8::quantize(inputs, *to, *saturate)?),
        Op::Dequantize { to } => one(fp8::dequantize(inputs, *to)?),
        Op::ScaledMatMul { out } => one(linalg::scaled_matmul(inputs, *out)?),

        // Backward kernels, losses and optimizer steps (the autodiff pass emits them).
        _ if train::is_training_op(op) => train::eval(op, inputs),

        // The fusion pass's ops, as exactly the unfused ops they replace.
        _ if fused::is_fused_op(op) => fused::eval(op, inputs),

        // Every op is matched above; the guard arms make the compiler unable to see it.
        other => Err(Fail::new(
            ErrorKind::Unsupported,
            format!("no CPU kernel for `{}`", other.name()),
        )),
    }
}

fn reduce_op(
    inputs: &[&Tensor],
    kind: Reduction,
    axes: &Option<Vec<i64>>,
    keepdims: bool,
) -> KResult<Vec<Tensor>> {
    let [x] = args(inputs)?;
    Ok(vec![reduce::reduce(x, kind, axes.as_deref(), keepdims)?])
}
