//! fp8c-eval, the CPU reference evaluator: [`eval_op`] computes one IR op on concrete tensors with
//! exactly ONNX's semantics. It folds constants for the passes and is the oracle every GPU
//! kernel is compared with, so it favours exactness and clarity over speed.
//!
//! Conventions every kernel follows:
//! - Never panics on any input: arity, dtypes, shapes and attributes are checked and reported
//!   as an [`EvalError`] naming the op; outputs (and large scratch buffers) beyond
//!   `fp8c_ir::MAX_ELEMENTS` elements are refused before anything is allocated.
//! - Floats: f16 and bf16 widen exactly to f32, compute, and round once to nearest even;
//!   f64 computes in f64. Elementwise math is f32: `exp` and `tanh` are fp8c's own
//!   (`fp8c_ir::fmath`: evaluated in f64 and rounded once, the same bits on every platform,
//!   vectorised), `erf` is musl's `erff` (the `libm` crate), `ln`, `sin`, `powf`, ... the
//!   platform's. GEMMs (matmul, gemm, conv, scaled_matmul)
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
//! Files by op family, named as the families of `fp8c_ir::Family`: [`eval_op`] matches
//! `op.view()` and hands the op to its family's module, which matches the family's enum
//! exhaustively, so an op added to the IR without a CPU kernel does not compile. The families:
//! `interface` (constant), `elementwise` (unary, binary, where, clip, cast, gelu_grad),
//! `linalg` (matmul, gemm, scaled_matmul), `conv` (and its gradients), `pool` (and its
//! gradients, the global pools), `normalize` (batch/layer norm, softmax, and their gradients),
//! `reduce` (reductions, all_finite), `movement` (shape and data movement, gather_grad), `fp8`
//! (FP8 scaling ops and ONNX Q/DQ), `loss` (cross-entropy), `optim` (SGD, AdamW) and `fused`
//! (the fusion pass's ops as compositions of the above). Helpers shared across families:
//! `data` (typed views of tensors), `broadcast`, `window` (the IR's window geometry),
//! `cast`, `quantize` (the Q/DQ kernels) and `error`. Elementwise scalar functions are not
//! written here: `elementwise` runs the closures of the IR's elementwise table
//! (`fp8c_ir::elementwise`), the rows the CUDA code generator and autodiff read too.
//!
//! [`support`] says, per op, whether the evaluator computes it (every op but the graph
//! interface `input` / `param` / `state`, whose values the caller feeds).

// The op families (`fp8c_ir::Family`), one module each.
mod attention;
mod block;
mod conv;
mod elementwise;
mod epilogue;
mod erf;
mod fast_accum;
mod fp8;
mod fp8_codes;
mod fp8_gemm;
mod fused;
mod gather;
pub mod golden;
mod in_place;
mod interface;
mod linalg;
mod loss;
mod movement;
mod normalize;
mod optim;
mod pool;
mod reduce;
mod scratch;
mod weight_cache;

// Helpers shared by the families.
mod broadcast;
mod cast;
mod data;
mod error;
mod quantize;
mod window;

pub use crate::block::Tiles as BlockTiles;
pub use crate::epilogue::{EpilogueStep, epilogue_arity, eval_conv_epilogue};
pub use crate::error::{ErrorKind, EvalError};
use crate::error::{Fail, KResult};
/// The fast-accumulation model's block length and kept bits (other executions of the model,
/// such as the MLIR emitter's, read them from here).
pub use crate::fast_accum::{BITS as FAST_ACCUM_BITS, BLOCK as FAST_ACCUM_BLOCK};
pub use crate::in_place::eval_in_place;
use fp8c_ir::{Op, OpView, Support, Tensor};

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

/// Whether [`eval_op`] computes `op`: `Yes` for every op but the graph interface (`input`,
/// `param`, `state`), whose values the caller feeds. Each family module answers for its own
/// ops with an exhaustive match, so a new op cannot be left out.
pub fn support(op: &Op) -> Support {
    match op.view() {
        OpView::Interface(o) => interface::support(o),
        OpView::Elementwise(o) => elementwise::support(o),
        OpView::Linalg(o) => linalg::support(o),
        OpView::Conv(o) => conv::support(o),
        OpView::Pool(o) => pool::support(o),
        OpView::Normalize(o) => normalize::support(o),
        OpView::Reduce(o) => reduce::support(o),
        OpView::Movement(o) => movement::support(o),
        OpView::Fp8(o) => fp8::support(o),
        OpView::Loss(o) => loss::support(o),
        OpView::Optim(o) => optim::support(o),
        OpView::Fused(o) => fused::support(o),
        OpView::Attention(o) => attention::support(o),
    }
}

/// Hands `op` to its family's module.
fn dispatch(op: &Op, inputs: &[&Tensor]) -> KResult<Vec<Tensor>> {
    match op.view() {
        OpView::Interface(o) => interface::eval(o, inputs),
        OpView::Elementwise(o) => elementwise::eval(o, inputs),
        OpView::Linalg(o) => linalg::eval(o, inputs),
        OpView::Conv(o) => conv::eval(o, inputs),
        OpView::Pool(o) => pool::eval(o, inputs),
        OpView::Normalize(o) => normalize::eval(o, inputs),
        OpView::Reduce(o) => reduce::eval(o, inputs),
        OpView::Movement(o) => movement::eval(o, inputs),
        OpView::Fp8(o) => fp8::eval(o, inputs),
        OpView::Loss(o) => loss::eval(o, inputs),
        OpView::Optim(o) => optim::eval(o, inputs),
        OpView::Fused(o) => fused::eval(o, inputs),
        OpView::Attention(o) => attention::eval(o, inputs),
    }
}
