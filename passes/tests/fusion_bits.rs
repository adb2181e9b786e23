//! Fused and unfused graphs of the example models compute the same bits on the CPU backend,
//! step after step (the scaling state included), and fusion reaches its kernel targets.

mod fusion_common;

use fp8c_ir::Tensor;
use fp8c_passes::report;
use fusion_common::*;
use std::collections::BTreeMap;

fn mlp_inputs(steps: usize) -> Vec<BTreeMap<String, Tensor>> {
    let mut rng = Rng::new(7);
    (0..steps)
        .map(|_| BTreeMap::from([("x".to_string(), rng.tensor(&[256, 256], 2.0))]))
        .collect()
}

/// Token ids over the whole vocabulary and a mask with padding at the end of row 1.
fn bert_inputs(steps: usize) -> Vec<BTreeMap<String, Tensor>> {
    let mut rng = Rng::new(11);
    (0..steps)
        .map(|_| {
            let ids: Vec<i64> = (0..128).map(|_| (rng.next_u64() % 30522) as i64).collect();
            let mask: Vec<i64> = (0..128).map(|i| i64::from(i < 64 + 40)).collect();
            BTreeMap::from([
                ("input_ids".to_string(), Tensor::from_i64(vec![2, 64], &ids)),
                (
                    "attention_mask".to_string(),
                    Tensor::from_i64(vec![2, 64], &mask),
                ),
            ])
        })
        .collect()
}

/// Runs `g` fused and unfused, one step per input set; returns the fused report totals.
fn check_model(
    what: &str,
    g: &fp8c_ir::Graph,
    recipe: fp8c_core::Recipe,
    inputs: &[BTreeMap<String, Tensor>],
) -> report::Totals {
    let (fused, fcx) = compile(g, recipe, true);
    let (unfused, _) = compile(g, recipe, false);
    let a = run(&fused, inputs);
    let b = run(&unfused, inputs);
    assert_bit_identical(what, &a, &b);
    let totals = report::build(&fused, &fcx, false).totals;
    assert!(
        totals.kernels_after_fusion < totals.kernels_before_fusion,
        "{what}: nothing fused"
    );
    totals
}

fn mlp() -> fp8c_ir::Graph {
    let mut g = load_ir(
        &repo_root().join("examples/ir/mlp.fp8ir"),
        &[("x", &[256, 256])],
    );
    fill_weights(&mut g, &mut Rng::new(1));
    g
}

#[test]
fn mlp_delayed_is_bit_identical_and_fused_to_three_kernels_per_gemm() {
    let t = check_model("mlp (delayed)", &mlp(), delayed(), &mlp_inputs(3));
    assert_eq!(t.fp8_gemms, 2);
    assert!(t.fp8_kernels_per_gemm_before_fusion >= 7.0, "{t:?}");
    assert!(t.fp8_kernels_per_gemm_after_fusion <= 3.0, "{t:?}");
    // The input is quantized by quantize_amax (one read, one FP8 write) and the hidden
    // activation by the GEMM's D scale (just the FP8 write).
    assert!(
        t.act_quant_bytes_per_element_after_fusion <= t.act_quant_bytes_per_element_floor,
        "{t:?}"
    );
}

#[test]
fn mlp_current_scaling_is_bit_identical() {
    check_model("mlp (current)", &mlp(), current(), &mlp_inputs(2));
}

#[test]
fn bert_delayed_is_bit_identical_and_fused_below_three_kernels_per_gemm() {
    let Some(path) = cached_model("minilm-l3-paraphrase") else {
        return;
    };
    let g = load_onnx(
        &path,
        &[("input_ids", &[2, 64]), ("attention_mask", &[2, 64])],
    );
    let t = check_model("bert (delayed)", &g, delayed(), &bert_inputs(2));
    assert_eq!(t.fp8_gemms, 18);
    assert!(t.fp8_kernels_per_gemm_before_fusion >= 7.0, "{t:?}");
    assert!(t.fp8_kernels_per_gemm_after_fusion <= 3.0, "{t:?}");
    assert!(
        t.act_quant_bytes_per_element_after_fusion <= t.act_quant_bytes_per_element_floor,
        "{t:?}"
    );
}

#[test]
fn bert_current_scaling_is_bit_identical() {
    let Some(path) = cached_model("minilm-l3-paraphrase") else {
        return;
    };
    let g = load_onnx(
        &path,
        &[("input_ids", &[2, 64]), ("attention_mask", &[2, 64])],
    );
    check_model("bert (current)", &g, current(), &bert_inputs(1));
}

/// The per-tile recipes (issue #16): TE's 1×128 / 128×128 blocks, torchao's rowwise and MX's
/// 1×32 tiles.
fn per_tile_recipes() -> [(&'static str, fp8c_core::Recipe); 3] {
    use fp8c_core::{CurrentScaling, Granularity, Recipe};
    [
        (
            "block",
            Recipe::Current(CurrentScaling::tiled(Granularity::Block)),
        ),
        (
            "rowwise",
            Recipe::Current(CurrentScaling::tiled(Granularity::Rowwise)),
        ),
        (
            "mxfp8",
            Recipe::Current(CurrentScaling::tiled(Granularity::Mxfp8)),
        ),
    ]
}

/// How many nodes of `g` run `op`.
fn count_op(g: &fp8c_ir::Graph, op: &str) -> usize {
    g.node_ids()
        .into_iter()
        .filter(|&id| g.node(id).op.name() == op)
        .count()
}

/// MiniLM under each per-tile recipe: the GELU and LayerNorm-fed activations' one-row tiles
/// are emitted by their elementwise producers (`elementwise_block_quantize`), and the fused
/// graph computes the unfused one's bits.
#[test]
fn bert_per_tile_recipes_are_bit_identical_with_producers_emitting_the_tiles() {
    let Some(path) = cached_model("minilm-l3-paraphrase") else {
        return;
    };
    let g = load_onnx(
        &path,
        &[("input_ids", &[2, 64]), ("attention_mask", &[2, 64])],
    );
    for (name, recipe) in per_tile_recipes() {
        let (fused, _) = compile(&g, recipe, true);
        let n = count_op(&fused, "elementwise_block_quantize");
        eprintln!("bert ({name}): {n} elementwise_block_quantize nodes");
        assert!(n >= 3, "bert ({name}): {n} fused tile quantizers");
        check_model(&format!("bert ({name})"), &g, recipe, &bert_inputs(1));
    }
}

/// The training step of the example MLP: forward, loss, FP8 dgrad/wgrad, AdamW, guard.
fn training_graph(fuse: bool, recipe: fp8c_core::Recipe) -> fp8c_ir::Graph {
    use fp8c_passes::autodiff::{Loss, TrainSpec};
    use fp8c_passes::{PassCx, PassManager, PassOptions};
    let mut g = load_ir(
        &repo_root().join("examples/ir/mlp.fp8ir"),
        &[("x", &[64, 256])],
    );
    fill_weights(&mut g, &mut Rng::new(3));
    // The pipeline ends with fusion; `no_fuse` turns it off.
    let mut options = PassOptions {
        recipe,
        no_fuse: !fuse,
        train: Some(TrainSpec::new("logits", Loss::CrossEntropy)),
        ..Default::default()
    };
    options.policy.min_fp8_flops = Some(0);
    let mut cx = PassCx::new(options);
    PassManager::default()
        .run(&mut g, &mut cx)
        .unwrap_or_else(|e| panic!("{e}"));
    g
}

#[test]
fn training_step_is_bit_identical_with_fusion() {
    let tiled = per_tile_recipes().map(|(_, r)| r);
    for recipe in [delayed(), current()].into_iter().chain(tiled) {
        let fused = training_graph(true, recipe);
        let unfused = training_graph(false, recipe);
        let before = fp8c_passes::fusion::step_cost(&unfused);
        let after = fp8c_passes::fusion::step_cost(&fused);
        assert!(after.kernels < before.kernels, "{before:?} -> {after:?}");
        let mut rng = Rng::new(5);
        let inputs: Vec<BTreeMap<String, Tensor>> = (0..3)
            .map(|_| {
                let labels: Vec<i64> = (0..64).map(|_| (rng.next_u64() % 256) as i64).collect();
                BTreeMap::from([
                    ("x".to_string(), rng.tensor(&[64, 256], 2.0)),
                    ("labels".to_string(), Tensor::from_i64(vec![64], &labels)),
                ])
            })
            .collect();
        assert_bit_identical(
            "mlp training step",
            &run(&fused, &inputs),
            &run(&unfused, &inputs),
        );
    }
}

#[test]
fn hitting_a_limit_still_gives_a_correct_graph() {
    // One iteration, or a tiny node budget: the search stops early (a warning), whatever
    // was found is still exact.
    use fp8c_passes::fusion::{Limits, fuse};
    let (scaled, _) = compile(&mlp(), delayed(), false);
    let inputs = mlp_inputs(2);
    let want = run(&scaled, &inputs);
    for limits in [
        Limits {
            iterations: 1,
            nodes: 100_000,
        },
        Limits {
            iterations: 30,
            nodes: 60,
        },
    ] {
        let mut g = scaled.clone();
        let stats = fuse(&mut g, limits).unwrap();
        assert!(stats.stop_reason.contains("limit"), "{}", stats.stop_reason);
        fp8c_ir::verify(&g).unwrap();
        assert!(stats.after.kernels <= stats.before.kernels);
        assert_bit_identical(&stats.stop_reason, &run(&g, &inputs), &want);
    }
}
