//! TransformerEngine's scaling rules on hand-made cases, each with the expected number and why.

use fp8c_core::{
    AmaxComputeAlgo, CoreError, CurrentScaling, DelayedScaling, Format, Fp8Format, ScalingState,
    compute_scale, current_scale, delayed_update, record_amax,
};

const E4M3_MAX: f32 = 448.0;

#[test]
fn amax_zero_inf_nan_keep_the_previous_scale() {
    // _default_sf_compute: where(amax > 0, sf, scale) and where(isfinite(amax), sf, scale).
    let prev = 3.5;
    for amax in [0.0, -0.0, f32::INFINITY, f32::NAN, -1.0] {
        assert_eq!(
            compute_scale(amax, E4M3_MAX, 0.0, prev),
            prev,
            "amax {amax}"
        );
    }
}

#[test]
fn tiny_amax_gives_f32_max_not_inf() {
    // 448 / 1e-38 = 4.48e40 overflows f32 to inf; TE replaces an infinite scale by FP32 max.
    assert_eq!(compute_scale(1e-38, E4M3_MAX, 0.0, 1.0), f32::MAX);
    assert_eq!(
        compute_scale(f32::from_bits(1), E4M3_MAX, 0.0, 1.0),
        f32::MAX
    );
    // An infinite previous scale kept for amax = 0 is also clamped (the where() runs last).
    assert_eq!(compute_scale(0.0, E4M3_MAX, 0.0, f32::INFINITY), f32::MAX);
    // Just large enough not to overflow: the result is finite and below FP32 max.
    let s = compute_scale(1.4e-36, E4M3_MAX, 0.0, 1.0);
    assert!(s.is_finite() && s < f32::MAX);
}

#[test]
fn scale_is_fp8_max_over_amax_over_two_to_the_margin() {
    assert_eq!(compute_scale(448.0, E4M3_MAX, 0.0, 9.0), 1.0);
    assert_eq!(compute_scale(2.0, E4M3_MAX, 0.0, 9.0), 224.0);
    assert_eq!(compute_scale(2.0, E4M3_MAX, 1.0, 9.0), 112.0); // 448 / 2 / 2
    assert_eq!(compute_scale(2.0, E4M3_MAX, -2.0, 9.0), 896.0); // negative margin: 448 / 2 * 4
    assert_eq!(compute_scale(57344.0, 57344.0, 0.0, 9.0), 1.0); // E5M2
    // f32 arithmetic: 448 / 3 rounds once to the nearest f32.
    assert_eq!(compute_scale(3.0, E4M3_MAX, 0.0, 9.0), 448.0f32 / 3.0);
}

/// History [h0 = 2 (this step), 0.5 (oldest), 8, 1 (most recent past step)].
fn hand_made_state() -> ScalingState {
    ScalingState {
        amax_history: vec![2.0, 0.5, 8.0, 1.0],
        scale: 7.0,
        scale_inv: 1.0 / 7.0,
    }
}

#[test]
fn max_and_most_recent_differ_on_a_hand_made_history() {
    let recipe = |algo| DelayedScaling {
        amax_compute_algo: algo,
        amax_history_len: 4,
        ..Default::default()
    };
    // "max" takes the largest amax in the window, 8, so scale = 448 / 8 = 56.
    let mut s = hand_made_state();
    delayed_update(&mut s, Fp8Format::E4M3, &recipe(AmaxComputeAlgo::Max)).unwrap();
    assert_eq!((s.scale, s.scale_inv), (56.0, 1.0 / 56.0));
    // "most_recent" takes this step's amax h[0] = 2, so scale = 448 / 2 = 224.
    let mut s = hand_made_state();
    delayed_update(
        &mut s,
        Fp8Format::E4M3,
        &recipe(AmaxComputeAlgo::MostRecent),
    )
    .unwrap();
    assert_eq!((s.scale, s.scale_inv), (224.0, 1.0 / 224.0));
    // Either way the roll is torch.roll(h, -1) then h[0] = 0: this step's 2 moves to the end,
    // the oldest 0.5 drops out.
    assert_eq!(s.amax_history, vec![0.0, 8.0, 1.0, 2.0]);
    // For E5M2 (gradients under HYBRID) the same history gives 57344 / 8 = 7168.
    let mut s = hand_made_state();
    delayed_update(&mut s, Fp8Format::E5M2, &recipe(AmaxComputeAlgo::Max)).unwrap();
    assert_eq!(s.scale, 7168.0);
}

#[test]
fn window_covers_this_step_and_the_previous_len_minus_one() {
    // amax_history_len = 3; per-step amaxes 1, 4, 2, 0.5, 0.25.
    // max over {1}, {1,4}, {1,4,2}, {4,2,0.5}, {2,0.5,0.25} = 1, 4, 4, 4, 2.
    // most_recent = 1, 4, 2, 0.5, 0.25.
    let steps = [1.0, 4.0, 2.0, 0.5, 0.25];
    for (algo, want) in [
        (AmaxComputeAlgo::Max, [448.0, 112.0, 112.0, 112.0, 224.0]),
        (
            AmaxComputeAlgo::MostRecent,
            [448.0, 112.0, 224.0, 896.0, 1792.0],
        ),
    ] {
        let recipe = DelayedScaling::new(0.0, Format::Hybrid, 3, algo, true).unwrap();
        let mut state = ScalingState::for_recipe(&recipe).unwrap();
        let got: Vec<f32> = steps
            .iter()
            .map(|&a| {
                record_amax(&mut state, a).unwrap();
                delayed_update(&mut state, Fp8Format::E4M3, &recipe).unwrap();
                state.scale
            })
            .collect();
        assert_eq!(got, want, "{algo}");
    }
}

#[test]
fn record_amax_keeps_the_largest_of_a_step_and_nan_wins() {
    let mut s = ScalingState::new(2).unwrap();
    record_amax(&mut s, 3.0).unwrap();
    record_amax(&mut s, 1.0).unwrap(); // a second quantization of the same tensor, smaller
    assert_eq!(s.amax_history[0], 3.0);
    record_amax(&mut s, f32::NAN).unwrap();
    assert!(s.amax_history[0].is_nan());
}

#[test]
fn nan_in_history_keeps_the_scale_under_max_only_while_it_is_in_the_window() {
    // torch.max propagates NaN, so "max" keeps the previous scale while the NaN is in the
    // window; "most_recent" only looks at h[0].
    let recipe = DelayedScaling {
        amax_history_len: 2,
        ..Default::default()
    };
    let mut s = ScalingState::new(2).unwrap();
    s.scale = 5.0;
    record_amax(&mut s, f32::NAN).unwrap();
    delayed_update(&mut s, Fp8Format::E4M3, &recipe).unwrap();
    assert_eq!(s.scale, 5.0); // NaN amax: previous scale kept
    assert!(s.amax_history[1].is_nan());
    record_amax(&mut s, 4.0).unwrap();
    delayed_update(&mut s, Fp8Format::E4M3, &recipe).unwrap();
    assert_eq!(s.scale, 5.0); // window {4, NaN}: still NaN
    record_amax(&mut s, 4.0).unwrap();
    delayed_update(&mut s, Fp8Format::E4M3, &recipe).unwrap();
    assert_eq!(s.scale, 112.0); // window {4, 4}: 448 / 4
}

#[test]
fn step_without_an_amax_still_rolls_and_uses_the_window() {
    // The PyTorch reference always rolls; with history [0, 8] ("max") the scale is 448 / 8.
    let recipe = DelayedScaling {
        amax_history_len: 2,
        ..Default::default()
    };
    let mut s = ScalingState {
        amax_history: vec![0.0, 8.0],
        scale: 1.0,
        scale_inv: 1.0,
    };
    delayed_update(&mut s, Fp8Format::E4M3, &recipe).unwrap();
    assert_eq!(s.scale, 56.0);
    assert_eq!(s.amax_history, vec![0.0, 0.0]);
}

#[test]
fn length_one_history_is_most_recent_and_zeroed_by_the_roll() {
    let recipe = DelayedScaling {
        amax_history_len: 1,
        ..Default::default()
    };
    let mut s = ScalingState::for_recipe(&recipe).unwrap();
    record_amax(&mut s, 7.0).unwrap();
    delayed_update(&mut s, Fp8Format::E4M3, &recipe).unwrap();
    assert_eq!((s.scale, s.amax_history.as_slice()), (64.0, &[0.0][..]));
}

#[test]
fn delayed_power_of_two_scales_round_down_and_keep_the_previous_scale_rules() {
    let recipe = DelayedScaling {
        amax_history_len: 2,
        power_2_scale: true,
        ..Default::default()
    };
    let mut s = ScalingState::for_recipe(&recipe).unwrap();
    record_amax(&mut s, 3.0).unwrap();
    delayed_update(&mut s, Fp8Format::E4M3, &recipe).unwrap();
    // 448 / 3 = 149.33 rounds down to 128; scale_inv is its exact reciprocal.
    assert_eq!((s.scale, s.scale_inv), (128.0, 1.0 / 128.0));
    // E5M2: 57344 / 3 = 19114.67 -> 16384.
    let mut g = ScalingState::for_recipe(&recipe).unwrap();
    record_amax(&mut g, 3.0).unwrap();
    delayed_update(&mut g, Fp8Format::E5M2, &recipe).unwrap();
    assert_eq!(g.scale, 16384.0);
    // No amax in the window: the previous (already power-of-two) scale stays.
    delayed_update(&mut s, Fp8Format::E4M3, &recipe).unwrap();
    delayed_update(&mut s, Fp8Format::E4M3, &recipe).unwrap();
    assert_eq!(s.scale, 128.0);
}

#[test]
fn invalid_recipe_or_state_is_an_error_not_a_panic() {
    assert_eq!(ScalingState::new(0), Err(CoreError::AmaxHistoryLen(0)));
    let mut s = ScalingState::new(4).unwrap();
    let bad = DelayedScaling {
        margin: f32::NAN,
        ..Default::default()
    };
    let err = delayed_update(&mut s, Fp8Format::E4M3, &bad).unwrap_err();
    assert_eq!(err.to_string(), "margin must be finite, got NaN");
    let mut empty = ScalingState {
        amax_history: vec![],
        scale: 1.0,
        scale_inv: 1.0,
    };
    assert_eq!(record_amax(&mut empty, 1.0), Err(CoreError::EmptyHistory));
    assert_eq!(
        delayed_update(&mut empty, Fp8Format::E4M3, &DelayedScaling::default()),
        Err(CoreError::EmptyHistory)
    );
}

#[test]
fn current_scaling_follows_compute_scale_from_amax() {
    let plain = CurrentScaling::default();
    // amax 0, inf, NaN: there is no previous scale, TE returns 1.
    for amax in [0.0, f32::INFINITY, f32::NAN] {
        assert_eq!(current_scale(amax, Fp8Format::E4M3, &plain), (1.0, 1.0));
    }
    assert_eq!(
        current_scale(2.0, Fp8Format::E4M3, &plain),
        (224.0, 1.0 / 224.0)
    );
    assert_eq!(current_scale(57344.0, Fp8Format::E5M2, &plain), (1.0, 1.0));
    // Tiny amax: inf becomes FP32 max.
    assert_eq!(current_scale(1e-39, Fp8Format::E4M3, &plain).0, f32::MAX);
    // amax_epsilon floors the amax: amax 0 with epsilon 0.5 gives 448 / 0.5 = 896.
    let eps = CurrentScaling::new(Format::Hybrid, 0.5, false).unwrap();
    assert_eq!(current_scale(0.0, Fp8Format::E4M3, &eps).0, 896.0);
    assert_eq!(current_scale(0.25, Fp8Format::E4M3, &eps).0, 896.0);
    assert_eq!(current_scale(1.0, Fp8Format::E4M3, &eps).0, 448.0);
    // power_2_scale clears the mantissa: 448 / 3 = 149.33 -> 128; FP32 max -> 2^127.
    let pow2 = CurrentScaling::new(Format::Hybrid, 0.0, true).unwrap();
    assert_eq!(
        current_scale(3.0, Fp8Format::E4M3, &pow2),
        (128.0, 1.0 / 128.0)
    );
    assert_eq!(
        current_scale(1e-39, Fp8Format::E4M3, &pow2).0,
        2f32.powi(127)
    );
    // amax 0 returns 1 before the power-of-two rounding (1 is already a power of two).
    assert_eq!(current_scale(0.0, Fp8Format::E4M3, &pow2), (1.0, 1.0));
}
