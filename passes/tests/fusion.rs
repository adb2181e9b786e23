//! The fusion pass alone (`fp8c_passes::fusion`): each `.fp8ir` here is a graph as the
//! scaling pass leaves it (the comment at its top says how it was made); the snapshot holds
//! the pass's kernel and byte counts and the IR after it. Fused and unfused graphs compute
//! the same bits (`tests/fusion_bits.rs`); these snapshots show which fusions fire.

mod pass_common;

use fp8c_core::Recipe;
use fp8c_passes::Pass;
use fp8c_passes::fusion::FusionPass;
use fp8c_passes::precision::PolicyOptions;
use pass_common::{load, options, run_deterministic, snapshot};

/// Fuses `file`, snapshots the result, and returns the op names after fusion.
fn fusion(file: &str, name: &str) -> Vec<String> {
    let g = load("fusion", file);
    let passes = || -> Vec<Box<dyn Pass>> { vec![Box::new(FusionPass)] };
    let opts = options(PolicyOptions::default(), Recipe::default());
    let (after, cx) = run_deterministic(&g, passes, opts);
    let f = cx.fusion.as_ref().expect("fusion ran");
    let text = format!(
        "kernels: {} -> {}, bytes per step: {} -> {}\nrules applied: {:?}\n\nIR after fusion:\n{}",
        f.before.kernels,
        f.after.kernels,
        f.before.bytes,
        f.after.bytes,
        f.applied,
        fp8c_ir::print(&after)
    );
    snapshot("fusion", file, name, &text);
    after
        .node_ids()
        .into_iter()
        .map(|id| after.node(id).op.name().to_string())
        .collect()
}

#[test]
fn bias_and_gelu_become_the_fp8_gemms_epilogue() {
    let ops = fusion("epilogue.fp8ir", "epilogue");
    assert!(ops.iter().any(|o| o == "scaled_matmul_epilogue"), "{ops:?}");
}

#[test]
fn a_norm_emits_fp8_and_the_scale_updates_batch() {
    let ops = fusion("ln_quantize.fp8ir", "ln_quantize");
    assert!(ops.iter().any(|o| o == "layer_norm_quantize"), "{ops:?}");
}
