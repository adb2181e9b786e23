//! Output-type inference: one rule per op. The builder, the verifier, the importer and
//! canonicalize all use [`infer`]; it never panics, whatever the inputs.
//!
//! Conventions:
//! - Semantics are ONNX's (opsets 13–21) unless the op's doc in `op.rs` says otherwise. The
//!   importer fills in optional ONNX inputs, so arities are fixed, except for one trailing
//!   optional input (gemm's C, conv's and layer_norm's bias, the Q/DQ zero point).
//! - Messages name the input by position and ONNX role and say what was expected and what
//!   was found: `input 1 (B) has shape f32[256,10], its first dim (256) must equal input 0's
//!   last dim (128)`. The caller adds the node's name.
//! - Broadcasting is numpy's: a `1` stretches. With symbols: `batch` vs `1` → `batch`;
//!   `batch` vs `batch` → `batch`; `batch` or `?` vs a known `n ≠ 1` → `n` (a valid model is
//!   assumed, as ONNX does); two different symbols → `?`; `?` vs anything else → `?`.
//! - Dims that must be equal (matmul's K, concat's other axes, a bias and its channels):
//!   known sizes must agree; otherwise the more specific dim is kept (known, then symbol).
//! - Shapes that depend on the *value* of an input (reshape, expand, slice, tile, pad, range,
//!   constant_of_shape) are computed when that input is a constant; otherwise the rank is
//!   still exact and the sizes that cannot be known are `?`.
//! - Shape-like inputs (reshape's shape, slice's starts/ends/axes/steps, pads, repeats, ...)
//!   must be 1-D i64 or i32.
//! - Arithmetic ops take "math" floats only (FP8 is a storage type: it flows through data
//!   movement ops, `cast`, `amax`, `dequantize`, `scaled_matmul`).
//! - Never panics: indexing is checked, sizes use checked arithmetic, sizes computed from
//!   values are limited to [`MAX_ELEMENTS`](crate::MAX_ELEMENTS) elements, and ranks built
//!   from a shape tensor's length to [`MAX_RANK`].
//!
//! Layout: this file holds the public API and the dispatch by family ([`Op::view`]); one
//! module per op family (named as in `Family::name`) holds its ops' rules and matches its
//! family exhaustively; `common` holds the input checks, dtype predicates, axis helpers,
//! broadcasting and the symbolic window sizes shared by several families.

mod attention;
mod common;
mod conv;
mod elementwise;
mod fp8;
mod fused;
mod interface;
mod linalg;
mod loss;
mod movement;
pub use movement::{EQUAL_PARTS, split_sizes};
mod normalize;
mod optim;
mod pool;
mod reduce;

use crate::{Op, OpView, Tensor, TensorType};

pub use common::broadcast_shapes;
pub use fused::ew_expr;

/// The operands of `op` whose *values* decide the shape of its output (a `range`'s start,
/// limit and delta, a `reshape`'s target shape, ...): inference computes the output's dims
/// from them when they are constants, and leaves `?` otherwise.
pub fn shape_operands(op: &Op) -> &'static [usize] {
    match op {
        Op::Range => &[0, 1, 2],
        Op::ConstantOfShape { .. } => &[0],
        Op::Reshape { .. } | Op::Expand | Op::Tile | Op::TopK { .. } | Op::Pad { .. } => &[1],
        Op::Slice => &[1, 2, 3, 4],
        _ => &[],
    }
}

/// Largest rank inference builds from the length of a shape tensor.
pub const MAX_RANK: usize = 64;

/// What inference knows about one input: its type and, if it is a constant, its value.
#[derive(Clone, Copy, Debug)]
pub struct InferInput<'a> {
    /// The input's type.
    pub ty: &'a TensorType,
    /// Its value, when produced by a `constant` node.
    pub value: Option<&'a Tensor>,
}

impl<'a> InferInput<'a> {
    /// An input of type `ty` whose value is not known.
    pub fn new(ty: &'a TensorType) -> Self {
        InferInput { ty, value: None }
    }
}

/// The output types of `op` applied to `inputs`, or a message saying what is wrong
/// (the caller adds the node's name).
pub fn infer(op: &Op, inputs: &[InferInput<'_>]) -> Result<Vec<TensorType>, String> {
    match op.view() {
        OpView::Interface(o) => interface::infer(o, inputs),
        OpView::Elementwise(o) => elementwise::infer(o, inputs),
        OpView::Linalg(o) => linalg::infer(o, inputs),
        OpView::Conv(o) => conv::infer(o, inputs),
        OpView::Pool(o) => pool::infer(o, inputs),
        OpView::Normalize(o) => normalize::infer(o, inputs),
        OpView::Reduce(o) => reduce::infer(o, inputs),
        OpView::Movement(o) => movement::infer(o, inputs),
        OpView::Fp8(o) => fp8::infer(o, inputs),
        OpView::Loss(o) => loss::infer(o, inputs),
        OpView::Optim(o) => optim::infer(o, inputs),
        OpView::Fused(o) => fused::infer(o, inputs),
        OpView::Attention(o) => attention::infer(o, inputs),
    }
}
