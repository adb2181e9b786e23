//! The precision pass alone (`fp8c_passes::precision`): each `.fp8ir` here is a static graph
//! (as canonicalize leaves it); the snapshot holds the pass's decision for every GEMM-like
//! node with its reason, what it says about every other computing node, and the IR after it
//! (unchanged in FP8 mode, where the scaling pass materialises the decisions; rewritten to
//! compute in bf16 in bf16 mode).

mod pass_common;

use fp8c_core::Recipe;
use fp8c_passes::precision::{PolicyOptions, PrecisionMode, PrecisionPass};
use fp8c_passes::{Pass, PassCx};
use pass_common::{decisions, load, options, run_deterministic, snapshot};

fn precision(file: &str, name: &str, policy: PolicyOptions) -> PassCx {
    let g = load("precision", file);
    let passes = || -> Vec<Box<dyn Pass>> { vec![Box::new(PrecisionPass)] };
    let (after, cx) = run_deterministic(&g, passes, options(policy, Recipe::default()));
    let text = format!(
        "decisions:\n{}\nothers:\n{}\nIR after precision:\n{}",
        decisions(&cx.decisions),
        decisions(&cx.others),
        fp8c_ir::print(&after)
    );
    snapshot("precision", file, name, &text);
    cx
}

#[test]
fn an_aligned_gemm_goes_fp8_and_the_norm_stays_high() {
    let cx = precision(
        "linear_and_norm.fp8ir",
        "linear_and_norm",
        PolicyOptions::default(),
    );
    assert_eq!(cx.decisions.len(), 1);
}

#[test]
fn user_globs_and_the_alignment_rule_decide_in_order() {
    let policy = PolicyOptions {
        keep_high: vec!["head*".into()],
        force_fp8: vec!["proj".into()],
        ..Default::default()
    };
    precision("keep_high.fp8ir", "keep_high", policy);
}

#[test]
fn attention_products_stay_high_unless_fp8_attention() {
    precision(
        "attention_scores.fp8ir",
        "attention_scores",
        PolicyOptions::default(),
    );
    let policy = PolicyOptions {
        fp8_attention: true,
        ..Default::default()
    };
    precision(
        "attention_scores.fp8ir",
        "attention_scores_fp8_attention",
        policy,
    );
}

#[test]
fn bf16_mode_rewrites_each_gemm_to_compute_in_bf16() {
    let policy = PolicyOptions {
        mode: PrecisionMode::Bf16,
        ..Default::default()
    };
    precision("linear_and_norm.fp8ir", "linear_and_norm_bf16", policy);
}
