//! The scaling pass alone (`fp8c_passes::scaling`): each `.fp8ir` here is a static graph; the
//! precision pass runs first because scaling reads its decisions from the context (it leaves
//! the IR unchanged in FP8 mode). The snapshot holds what scaling inserted and the IR after
//! it: delayed scaling's amax history and scale as graph state, updated at the end of the
//! step, against current scaling's scale from this step's amax, with no state.

mod pass_common;

use fp8c_core::{CurrentScaling, DelayedScaling, Recipe};
use fp8c_passes::precision::{PolicyOptions, PrecisionPass};
use fp8c_passes::scaling::ScalingPass;
use fp8c_passes::{Pass, PassCx};
use pass_common::{load, options, run_deterministic, snapshot};

fn delayed() -> Recipe {
    Recipe::Delayed(DelayedScaling {
        amax_history_len: 4,
        ..Default::default()
    })
}

fn current() -> Recipe {
    Recipe::Current(CurrentScaling::default())
}

fn scaling(file: &str, name: &str, recipe: Recipe) -> PassCx {
    let g = load("scaling", file);
    let passes = || -> Vec<Box<dyn Pass>> { vec![Box::new(PrecisionPass), Box::new(ScalingPass)] };
    let (after, cx) = run_deterministic(&g, passes, options(PolicyOptions::default(), recipe));
    let s = &cx.scaling;
    let text = format!(
        "inserted: {} amax, {} compute_scale, {} quantize, {} amax_history_update; {} state entries; quantized params {:?}\n\nIR after scaling:\n{}",
        s.amax,
        s.compute_scale,
        s.quantize,
        s.history_update,
        s.state_entries,
        s.quantized_params,
        fp8c_ir::print(&after)
    );
    snapshot("scaling", file, name, &text);
    cx
}

#[test]
fn delayed_scaling_keeps_an_amax_history_and_last_steps_scale() {
    let cx = scaling("linear.fp8ir", "linear_delayed", delayed());
    assert_eq!(cx.scaling.history_update, 2);
}

#[test]
fn current_scaling_scales_by_this_steps_amax_without_state() {
    let cx = scaling("linear.fp8ir", "linear_current", current());
    assert_eq!(
        (cx.scaling.history_update, cx.scaling.state_entries),
        (0, 0)
    );
}

#[test]
fn an_activation_read_by_two_gemms_is_quantized_once() {
    let cx = scaling("shared_operand.fp8ir", "shared_operand_delayed", delayed());
    // x once, each weight once.
    assert_eq!(cx.scaling.quantize, 3);
}
