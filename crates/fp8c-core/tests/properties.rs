//! Property tests: quantize/dequantize error bounds, saturation, history roll, amax edge cases.

use fp8c_core::{
    AmaxComputeAlgo, CurrentScaling, DelayedScaling, Fp8Format, ScalingState, amax_f32,
    compute_scale, current_scale, decode, delayed_update, dequantize_slice, encode_f32, float8_ref,
    history_amax, quantize, quantize_slice, record_amax,
};
use proptest::prelude::*;

fn fmt() -> impl Strategy<Value = Fp8Format> {
    prop_oneof![Just(Fp8Format::E4M3), Just(Fp8Format::E5M2)]
}

/// Finite f32s spread over many binades, including zeros and f32 subnormals.
fn finite_f32() -> impl Strategy<Value = f32> {
    prop_oneof![
        (-1e4f32..1e4),
        (-1e-3f32..1e-3),
        any::<u32>()
            .prop_map(f32::from_bits)
            .prop_filter("finite", |x| x.is_finite()),
        Just(0.0f32),
        Just(-0.0f32),
    ]
}

fn algo() -> impl Strategy<Value = AmaxComputeAlgo> {
    prop_oneof![
        Just(AmaxComputeAlgo::Max),
        Just(AmaxComputeAlgo::MostRecent)
    ]
}

proptest! {
    /// With the current-scaling scale of a tensor, every element comes back within half an
    /// FP8 ulp (relative 2^-(m+1)), plus half the smallest subnormal for tiny values, plus a
    /// few f32 roundings (x * scale, 1 / scale, q * scale_inv).
    #[test]
    fn quantize_dequantize_error_is_within_half_an_fp8_ulp(
        fmt in fmt(),
        xs in prop::collection::vec(finite_f32(), 1..64),
    ) {
        let amax = amax_f32(&xs);
        let (scale, scale_inv) = current_scale(amax, fmt, &CurrentScaling::default());
        let mut q = vec![0u8; xs.len()];
        quantize_slice(fmt, &xs, scale, &mut q, true);
        let mut back = vec![0f32; xs.len()];
        dequantize_slice(fmt, &q, scale_inv, &mut back);
        let rel = 2f64.powi(-(fmt.mantissa_bits() as i32 + 1)) + 2f64.powi(-21);
        let abs = f64::from(fmt.min_subnormal()) / 2.0 * f64::from(scale_inv) * (1.0 + 2f64.powi(-21));
        for (&x, &y) in xs.iter().zip(&back) {
            let err = (f64::from(y) - f64::from(x)).abs();
            let bound = rel * f64::from(x).abs() + abs + f64::from(f32::from_bits(1));
            prop_assert!(err <= bound, "x={x:e} back={y:e} err={err:e} bound={bound:e} scale={scale:e}");
        }
    }

    /// Saturating quantization never leaves [-max, max], for any input and positive scale;
    /// only a NaN product gives NaN.
    #[test]
    fn saturated_values_never_exceed_fp8_max(
        fmt in fmt(),
        bits in any::<u32>(),
        scale in prop_oneof![(1e-30f32..1e30), Just(f32::MAX), Just(f32::MIN_POSITIVE)],
    ) {
        let x = f32::from_bits(bits);
        let y = decode(fmt, quantize(fmt, x, scale, true));
        if (x * scale).is_nan() {
            prop_assert!(y.is_nan());
        } else {
            prop_assert!(y.abs() <= fmt.max(), "x={x:e} scale={scale:e} -> {y:e}");
        }
    }

    /// Without saturation, a finite result is within max and the rest is overflow:
    /// NaN for E4M3, ±inf for E5M2, exactly when the saturating cast gives ±max from beyond it.
    #[test]
    fn non_saturating_overflow_is_nan_or_inf(fmt in fmt(), bits in any::<u32>()) {
        let x = f32::from_bits(bits);
        let sat = decode(fmt, encode_f32(fmt, x, true));
        let nosat = decode(fmt, encode_f32(fmt, x, false));
        if x.is_nan() {
            prop_assert!(sat.is_nan() && nosat.is_nan());
        } else if nosat.is_finite() {
            prop_assert_eq!(sat.to_bits(), nosat.to_bits());
        } else {
            prop_assert_eq!(sat.abs(), fmt.max());
            prop_assert!(x.abs() > fmt.max());
            match fmt {
                Fp8Format::E4M3 => prop_assert!(nosat.is_nan()),
                Fp8Format::E5M2 => prop_assert_eq!(nosat, f32::INFINITY.copysign(x)),
            }
        }
    }

    /// The fast encoder and the float8-crate wrapper agree on arbitrary bit patterns.
    #[test]
    fn fast_encoder_matches_float8_reference(fmt in fmt(), bits in any::<u32>(), sat in any::<bool>()) {
        let x = f32::from_bits(bits);
        prop_assert_eq!(encode_f32(fmt, x, sat), float8_ref::encode_f32(fmt, x, sat));
    }

    /// One update: scale from the history as it stands, then torch.roll(h, -1) and h[0] = 0.
    #[test]
    fn history_roll_invariants(
        history in prop::collection::vec(prop_oneof![0f32..1e6, Just(0.0f32)], 1..40),
        algo in algo(),
        prev_scale in 1e-3f32..1e3,
        margin in 0i32..4,
    ) {
        let recipe = DelayedScaling {
            margin: margin as f32,
            amax_history_len: history.len(),
            amax_compute_algo: algo,
            ..Default::default()
        };
        let mut state = ScalingState { amax_history: history.clone(), scale: prev_scale, scale_inv: 1.0 / prev_scale };
        delayed_update(&mut state, Fp8Format::E4M3, &recipe).unwrap();
        let n = history.len();
        let h = &state.amax_history;
        prop_assert_eq!(h.len(), n);
        prop_assert_eq!(h[0], 0.0);
        if n > 1 {
            prop_assert_eq!(h[n - 1], history[0]);
            prop_assert_eq!(&h[1..n - 1], &history[2..]);
        }
        let want = compute_scale(history_amax(&history, algo), 448.0, margin as f32, prev_scale);
        prop_assert_eq!(state.scale, want);
        prop_assert_eq!(state.scale_inv, 1.0 / want);
        prop_assert!(state.scale.is_finite() && state.scale > 0.0);
    }

    /// Over many steps, "max" is the max of the last `len` recorded amaxes (this step's and
    /// the len - 1 before it) and "most_recent" is this step's: a plain sliding-window model.
    #[test]
    fn history_is_a_sliding_window(
        len in 1usize..6,
        amaxes in prop::collection::vec(prop_oneof![1e-3f32..1e3, Just(0.0f32)], 1..30),
        algo in algo(),
    ) {
        let recipe = DelayedScaling { amax_history_len: len, amax_compute_algo: algo, ..Default::default() };
        let mut state = ScalingState::for_recipe(&recipe).unwrap();
        for (step, &a) in amaxes.iter().enumerate() {
            let prev = state.scale;
            record_amax(&mut state, a).unwrap();
            delayed_update(&mut state, Fp8Format::E4M3, &recipe).unwrap();
            let window = &amaxes[(step + 1).saturating_sub(len)..=step];
            let amax = match algo {
                AmaxComputeAlgo::Max => window.iter().copied().fold(0.0, f32::max),
                AmaxComputeAlgo::MostRecent => a,
            };
            prop_assert_eq!(state.scale, compute_scale(amax, 448.0, 0.0, prev), "step {}", step);
        }
    }

    /// amax is max |x| (an exact fold), NaN anywhere gives NaN, and the scale it yields maps
    /// amax to at most fp8_max (up to one f32 rounding) and is never inf or NaN.
    #[test]
    fn amax_edge_cases(
        mut xs in prop::collection::vec(any::<u32>().prop_map(f32::from_bits), 0..64),
        nan_at in any::<prop::sample::Index>(),
    ) {
        let has_nan = xs.iter().any(|x| x.is_nan());
        let amax = amax_f32(&xs);
        if has_nan {
            prop_assert!(amax.is_nan());
        } else {
            prop_assert_eq!(amax, xs.iter().fold(0.0f32, |m, x| m.max(x.abs())));
            let scale = compute_scale(amax, 448.0, 0.0, 1.0);
            prop_assert!(scale.is_finite() && scale > 0.0);
            if amax > 0.0 && amax.is_finite() && scale < f32::MAX {
                prop_assert!(f64::from(amax) * f64::from(scale) <= 448.0 * (1.0 + 2f64.powi(-23)));
            }
            let pow2 = current_scale(amax, Fp8Format::E4M3, &CurrentScaling { power_2_scale: true, ..Default::default() }).0;
            prop_assert!(pow2.is_finite() && pow2 > 0.0 && pow2.to_bits() & 0x007F_FFFF == 0);
        }
        if !xs.is_empty() {
            let i = nan_at.index(xs.len());
            xs[i] = f32::NAN;
            prop_assert!(amax_f32(&xs).is_nan());
        }
    }
}
