//! Per-tensor scaling math, exactly as TransformerEngine computes it.
//!
//! Conventions (TE's): `q = cast(x * scale)`, `x' = f32(q) * scale_inv`, `scale_inv = 1 / scale`.
//! A large scale stretches small values up into the FP8 range.
//!
//! Delayed scaling mirrors TE's PyTorch reference update `_amax_and_scale_update`
//! (`transformer_engine/pytorch/quantization.py`, formerly `fp8.py`), step by step:
//! 1. during the step, each quantization max-accumulates the tensor's amax into
//!    `amax_history[0]` (TE's cast kernels `atomicMaxFloat` into the quantizer's amax, which is
//!    a view of `amax_history[0]`) — [`record_amax`];
//! 2. at the update, `_default_get_amax_and_update_history` takes the amax from the history as
//!    it stands (`torch.max` over all slots for "max", `amax_history[0]` for "most_recent"),
//!    then rolls: `torch.roll(h, -1)` and `h[0] = 0`, so the step's amax moves to the last slot
//!    and the oldest (old `h[1]`) drops out — [`history_amax`], [`roll_history`];
//! 3. `_default_sf_compute` turns that amax into the new scale — [`compute_scale`].
//!
//! TE's default *fused* CUDA update (`common/recipe/delayed_scaling.cu`) agrees with this except
//! on corner cases fp8c does not follow, documented so nobody is surprised:
//! * it reduces the history with `fmaxf`, which skips NaNs (the PyTorch path propagates them);
//! * its bulk kernel skips the roll (and keeps the scale) when `amax_history[0] == 0`, i.e. when
//!   a tensor was not seen this step;
//! * it computes `(fp8_max * 2^-margin) / amax` instead of `(fp8_max / amax) / 2^margin`: equal
//!   for integer margins except where the intermediate overflows.
//!
//! Current scaling mirrors TE's `compute_scale_from_amax` (`common/recipe/recipe_common.cuh`).
//!
//! ONNX export: `QuantizeLinear` computes `x / y_scale` and `DequantizeLinear` `q * x_scale`, so
//! TE's ONNX export writes `y_scale = x_scale = scale_inv = 1 / scale` (TE's
//! `onnx_quantize_fp8_op` passes `1 / scale`). Note `x / scale_inv` and `x * scale` can differ
//! in the last bit of the product before the cast; fp8c's runtime uses TE's `x * scale`.

use serde::{Deserialize, Serialize};

use crate::error::CoreError;
use crate::format::Fp8Format;
use crate::recipe::{AmaxComputeAlgo, CurrentScaling, DelayedScaling};

/// The scaling state of one FP8 tensor under delayed scaling: its amax history and scale.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScalingState {
    /// `amax_history[0]` collects the current step's amax; after a roll, the last slot holds
    /// the most recent past step and `[1]` the oldest.
    pub amax_history: Vec<f32>,
    /// Multiplier applied before the cast.
    pub scale: f32,
    /// `1 / scale`, applied after decoding.
    pub scale_inv: f32,
}

impl ScalingState {
    /// A fresh state as TE initialises it: zero history, scale = scale_inv = 1.
    pub fn new(history_len: usize) -> Result<Self, CoreError> {
        if history_len == 0 {
            return Err(CoreError::AmaxHistoryLen(history_len));
        }
        Ok(ScalingState {
            amax_history: vec![0.0; history_len],
            scale: 1.0,
            scale_inv: 1.0,
        })
    }

    /// A fresh state sized for `recipe` (validates it).
    pub fn for_recipe(recipe: &DelayedScaling) -> Result<Self, CoreError> {
        recipe.validate()?;
        Self::new(recipe.amax_history_len)
    }
}

/// TE's scale rule: `(fp8_max / amax) / 2^margin` in f32, except that an amax of 0, ±inf or NaN
/// (or negative) keeps `prev_scale`, and an infinite result (tiny amax) becomes `f32::MAX`.
///
/// Mirrors `_default_sf_compute`: `sf = (fp8_max / amax) / (2**margin)`, then
/// `where(amax > 0, sf, scale)`, `where(isfinite(amax), sf, scale)`,
/// `where(isinf(sf), fp32_max, sf)` — the last also applies to an infinite previous scale.
pub fn compute_scale(amax: f32, fp8_max: f32, margin: f32, prev_scale: f32) -> f32 {
    // torch divides an f32 tensor by the Python float 2**margin: the divisor is rounded to f32.
    let pow2_margin = 2f64.powf(f64::from(margin)) as f32;
    let sf = (fp8_max / amax) / pow2_margin;
    let sf = if amax > 0.0 && amax.is_finite() {
        sf
    } else {
        prev_scale
    };
    if sf.is_infinite() { f32::MAX } else { sf }
}

/// The amax delayed scaling uses: `torch.max(history)` (NaN propagates) or `history[0]`.
/// An empty history gives 0 (which keeps the previous scale).
pub fn history_amax(history: &[f32], algo: AmaxComputeAlgo) -> f32 {
    match algo {
        AmaxComputeAlgo::MostRecent => history.first().copied().unwrap_or(0.0),
        AmaxComputeAlgo::Max => {
            let mut it = history.iter().copied();
            let first = it.next().unwrap_or(0.0);
            it.fold(first, nan_max)
        }
    }
}

/// TE's history roll: `h = torch.roll(h, -1); h[0] = 0`. The current step's amax (old `h[0]`)
/// moves to the last slot and the oldest entry (old `h[1]`) is dropped.
pub fn roll_history(history: &mut [f32]) {
    if history.is_empty() {
        return;
    }
    history.rotate_left(1); // a length-1 history is simply zeroed, as in TE
    history[0] = 0.0;
}

/// Records a tensor's amax for this step: `history[0] = max(history[0], amax)`, NaN winning,
/// as TE's quantize kernels `atomicMaxFloat` into `amax_history[0]` (so several quantizations
/// of one tensor in a step keep the largest).
pub fn record_amax(state: &mut ScalingState, amax: f32) -> Result<(), CoreError> {
    let slot = state
        .amax_history
        .first_mut()
        .ok_or(CoreError::EmptyHistory)?;
    *slot = nan_max(*slot, amax);
    Ok(())
}

/// End-of-step delayed-scaling update: new scale (and scale_inv) from the history as it
/// stands, then the roll. `fmt` is the tensor's element type (`recipe.fp8_format.forward()` for
/// activations and weights, `.backward()` for gradients).
pub fn delayed_update(
    state: &mut ScalingState,
    fmt: Fp8Format,
    recipe: &DelayedScaling,
) -> Result<(), CoreError> {
    recipe.validate()?;
    if state.amax_history.is_empty() {
        return Err(CoreError::EmptyHistory);
    }
    let amax = history_amax(&state.amax_history, recipe.amax_compute_algo);
    state.scale = compute_scale(amax, fmt.max(), recipe.margin, state.scale);
    if recipe.power_2_scale {
        state.scale = f32::from_bits(state.scale.to_bits() & 0xFF80_0000);
    }
    state.scale_inv = 1.0 / state.scale;
    roll_history(&mut state.amax_history);
    Ok(())
}

/// Current scaling: `(scale, scale_inv)` from the tensor's own amax, as TE's
/// `compute_scale_from_amax`: amax is raised to `amax_epsilon`; an amax of 0, inf or NaN gives
/// scale 1 (there is no previous scale); `fp8_max / amax` overflowing gives `f32::MAX`; with
/// `power_2_scale` the scale is rounded down to a power of two by clearing its mantissa.
pub fn current_scale(amax: f32, fmt: Fp8Format, recipe: &CurrentScaling) -> (f32, f32) {
    let mut amax = amax;
    if amax < recipe.amax_epsilon {
        amax = recipe.amax_epsilon;
    }
    if amax.is_infinite() || amax == 0.0 || amax.is_nan() {
        return (1.0, 1.0);
    }
    let mut scale = fmt.max() / amax;
    if scale.is_infinite() {
        scale = f32::MAX;
    }
    if recipe.power_2_scale {
        scale = f32::from_bits(scale.to_bits() & 0xFF80_0000);
    }
    (scale, 1.0 / scale)
}

/// max(a, b) with NaN winning, like `torch.max` (and integer `atomicMax` on amax bits).
fn nan_max(a: f32, b: f32) -> f32 {
    if a.is_nan() || b.is_nan() {
        f32::NAN
    } else if b > a {
        b
    } else {
        a
    }
}
