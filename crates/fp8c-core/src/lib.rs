//! fp8c-core: FP8 formats and casts, TransformerEngine-style scaling recipes and scaling math.
//!
//! No graph here: this crate is the numerics everything else in fp8c rests on.
//! * [`mod@format`]: the E4M3 / E5M2 element types and their limits.
//! * [`cast`]: bit-exact encode (f32 / bf16 / f16, both ONNX saturate modes) and decode, scalar
//!   and whole-slice, plus fused quantize / dequantize and amax: the CPU runtime's kernels.
//! * [`float8_ref`]: the `float8` crate wrapped to the same spec; the independent cross-check.
//! * [`recipe`]: `DelayedScaling`, `CurrentScaling` and `Format` with TE's names and defaults.
//! * [`scaling`]: amax history, scale and scale_inv updates, exactly as TE computes them.
//!
//! Correctness is pinned by golden tables generated from ml_dtypes (tests/golden/, made by
//! scripts/fixtures/gen_fp8_golden.py) and by property tests.

pub mod cast;
pub mod decode_simd;
mod encode_simd;
pub mod error;
pub mod float8_ref;
pub mod format;
pub mod narrow;
pub mod recipe;
pub mod scaling;

pub use cast::{
    amax_f32, decode, decode_slice, decode_table, dequantize, dequantize_into, dequantize_slice,
    encode_bf16, encode_bf16_slice, encode_f16, encode_f16_slice, encode_f32, encode_f32_slice,
    quantize, quantize_slice,
};
pub use error::CoreError;
pub use format::Fp8Format;
pub use narrow::{E8M0Rounding, NarrowFormat};
pub use recipe::{
    AmaxComputeAlgo, CurrentScaling, DelayedScaling, Format, Gemm, Granularity, MMParams, Recipe,
    Tiling,
};
pub use scaling::{
    ScalingState, compute_scale, current_scale, delayed_update, history_amax, record_amax,
    roll_history,
};

/// The longest amax history a delayed-scaling recipe may keep: 65,536 entries (256 KiB of
/// f32 per FP8 tensor). TransformerEngine's default is 1,024; the bound turns an absurd
/// request (`--amax-history 1000000000`) into an error instead of gigabytes of state.
pub const MAX_AMAX_HISTORY: usize = 1 << 16;
