//! A mixture-of-experts decoder as PyTorch exports it today (issue #45): the experts' GEMMs
//! go to FP8 as weight GEMMs, the routing stays high, and the model runs and trains.
//!
//! `examples/models/mixtral-tiny.onnx` (`scripts/fixtures/export_llms.py mixtral-tiny`): a
//! transformers `MixtralConfig` with random weights, 2 layers of 4 experts with 2 per token,
//! transformers' `batched_mm` experts, dynamo export at opset 20. Each expert GEMM is a `bmm`
//! whose left operand is gathered (`GatherND`) from an `[experts, out, in]` weight table by
//! the router's top-k indices. `fp8c compile --report=json` must put every one of them in FP8
//! with the reason "expert GEMM", keep both routers high, have at least 60% of the GEMM
//! FLOPs in FP8 at the reference's shape (batch 2, seq 16), and store the expert tables in
//! FP8, quantized once with one scale per expert; `fp8c train --text` (100 steps)
//! must reach an FP8 loss within 2% of f32's, and every expert table must have trained (the
//! gradient of `gather_nd` scatter-adds into the table). (`tests/llm_exports.rs` checks the model
//! against onnxruntime in f32 and FP8's cosine against f32.)

mod support;

use std::ffi::OsStr;

fn model() -> std::path::PathBuf {
    support::repo_root().join("examples/models/mixtral-tiny.onnx")
}

#[test]
fn expert_gemms_are_fp8_weight_gemms_and_the_router_stays_high() {
    let m = model();
    let r = support::run_fp8c([
        "compile".as_ref(),
        m.as_os_str(),
        "--input-shape".as_ref(),
        "input_ids=2x16".as_ref(),
        "--report=json".as_ref(),
    ]);
    assert!(r.ok, "{}", r.stderr);
    let report: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    let nodes = report["nodes"].as_array().unwrap();
    let text = |n: &serde_json::Value, k: &str| n[k].as_str().unwrap_or_default().to_string();
    let experts: Vec<_> = nodes
        .iter()
        .filter(|n| text(n, "name").starts_with("node_bmm"))
        .collect();
    assert_eq!(experts.len(), 4, "two expert GEMMs per layer: {nodes:#?}");
    for n in &experts {
        assert_eq!(text(n, "precision"), "fp8", "{n}");
        assert!(text(n, "reason").starts_with("expert GEMM"), "{n}");
    }
    let routers: Vec<_> = nodes
        .iter()
        .filter(|n| text(n, "reason").starts_with("MoE router"))
        .collect();
    assert_eq!(routers.len(), 2, "one router per layer: {nodes:#?}");
    assert!(routers.iter().all(|n| text(n, "precision") == "f32"));
    let share = report["totals"]["fp8_flops_fraction"].as_f64().unwrap();
    // The expert tables (most of the weights) are stored in FP8, quantized once with one
    // scale per expert: block_quantize's scale_inv is [experts, 1, 1].
    let bytes = |k: &str| report["totals"][k].as_u64().unwrap();
    let (before, after) = (bytes("weight_bytes_before"), bytes("weight_bytes_after"));
    assert!(after * 2 < before, "weight bytes {before} -> {after}");
    let ir = support::run_fp8c([
        "compile".as_ref(),
        m.as_os_str(),
        "--input-shape".as_ref(),
        "input_ids=2x16".as_ref(),
    ]);
    assert!(ir.ok, "{}", ir.stderr);
    for (gemm, table) in [("node_bmm", "[4,256,64]"), ("node_bmm_1", "[4,64,128]")] {
        let codes = format!("%{gemm}.w.block_quantize.0: f8e4m3{table}");
        assert!(ir.stdout.contains(&codes), "no {codes}:\n{}", ir.stdout);
    }
    assert!(
        ir.stdout
            .contains("%node_bmm.w.block_quantize.1: f32[4,1,1]"),
        "no per-expert scales:\n{}",
        ir.stdout
    );
    eprintln!("mixtral-tiny: {:.1}% of GEMM FLOPs in FP8", 100.0 * share);
    assert!(
        share >= 0.6,
        "only {:.1}% of GEMM FLOPs in FP8",
        100.0 * share
    );
}

/// The final loss `fp8c train` prints.
fn final_loss(stderr: &str) -> f64 {
    stderr
        .split("final loss ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no final loss in:\n{stderr}"))
}

#[test]
fn a_moe_decoder_trains_in_fp8_as_in_f32() {
    let root = support::repo_root();
    let (m, text) = (model(), root.join("examples/data/shakespeare.txt"));
    let dir = support::scratch("moe_train");
    let train = |precision: &str| {
        let out = dir.join(format!("{precision}.onnx"));
        let args: Vec<&OsStr> = vec![
            "train".as_ref(),
            m.as_os_str(),
            "--text".as_ref(),
            text.as_os_str(),
            "--seq-len".as_ref(),
            "16".as_ref(),
            "--batch".as_ref(),
            "8".as_ref(),
            "--steps".as_ref(),
            "100".as_ref(),
            "--lr".as_ref(),
            "0.003".as_ref(),
            // The tiny model's GEMMs are all below the recipe's size rule.
            "--min-fp8-flops".as_ref(),
            "0".as_ref(),
            "--precision".as_ref(),
            precision.as_ref(),
            "--quiet".as_ref(),
            "-o".as_ref(),
            out.as_os_str(),
        ];
        let r = support::run_fp8c(args);
        assert!(r.ok, "--precision {precision}:\n{}", r.stderr);
        assert!(r.stderr.contains("0 skipped steps"), "{}", r.stderr);
        final_loss(&r.stderr)
    };
    let (f32_loss, fp8_loss) = (train("f32"), train("fp8"));
    // The experts train: their gradients scatter back into the tables they were gathered
    // from (the four [experts, out, in] initializers).
    let load = |p: &std::path::Path| fp8c_onnx::load_model(p, &Default::default()).unwrap();
    let (before, after) = (load(&m), load(&dir.join("fp8.onnx")));
    let tables: Vec<_> = before
        .graph
        .weights()
        .iter()
        .filter(|(_, t)| t.shape().len() == 3)
        .collect();
    assert_eq!(tables.len(), 4, "the expert tables");
    for (name, t) in tables {
        let moved = after.graph.weights()[name].to_f64_vec().unwrap();
        let delta = t
            .to_f64_vec()
            .unwrap()
            .iter()
            .zip(&moved)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f64::max);
        assert!(
            delta > 1e-4,
            "expert table {name} did not train (max change {delta:e})"
        );
    }
    let gap = (fp8_loss - f32_loss).abs() / f32_loss;
    eprintln!(
        "mixtral-tiny, 100 steps: f32 loss {f32_loss:.4}, fp8 loss {fp8_loss:.4} ({gap:.2e})"
    );
    assert!(f32_loss < 5.0, "f32 training did not learn: {f32_loss}");
    assert!(gap <= 0.02, "fp8 {fp8_loss} vs f32 {f32_loss}");
}

/// `fp8c compile --emit onnx` writes a Q/DQ model of the MoE decoder under both kinds of
/// scales: calibrated static ones (the expert GEMMs, scaled per expert, stay in float there)
/// and current scaling computed in the graph.
#[test]
fn a_moe_decoder_exports_to_qdq_onnx() {
    let (m, dir) = (model(), support::scratch("moe_emit_onnx"));
    let reference =
        support::read_npz(&support::repo_root().join("examples/models/mixtral-tiny.ref.npz"));
    let inputs = dir.join("inputs.npz");
    fp8c_session::npy::write_npz(&inputs, &[("input_ids", &reference["input_ids"])]).unwrap();
    let calibrate: [&OsStr; 2] = ["--calibrate".as_ref(), inputs.as_os_str()];
    let current: [&OsStr; 2] = ["--recipe".as_ref(), "current".as_ref()];
    for (tag, extra) in [("calibrated", calibrate), ("current", current)] {
        let out = dir.join(format!("{tag}.onnx"));
        let mut args: Vec<&OsStr> = vec![
            "compile".as_ref(),
            m.as_os_str(),
            "--emit".as_ref(),
            "onnx".as_ref(),
            "-o".as_ref(),
            out.as_os_str(),
        ];
        args.extend(extra);
        let r = support::run_fp8c(args);
        assert!(r.ok, "{tag}: {}", r.stderr);
        assert!(r.stderr.contains("weights in FP8"), "{tag}: {}", r.stderr);
        assert!(out.is_file(), "{tag}");
    }
}
