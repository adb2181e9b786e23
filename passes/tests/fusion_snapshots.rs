//! Snapshots of the IR after fusion for the example models (`snapshots/fusion/`), with the
//! pass's totals; compiling twice must give the same text (the output is deterministic).
//! Re-bless with `INSTA_UPDATE=always cargo test -p fp8c-passes --test fusion_snapshots`.

mod fusion_common;

use fp8c_core::Recipe;
use fp8c_ir::Graph;
use fp8c_passes::{PassCx, PassManager, PassOptions, report};
use fusion_common::{cached_model, current, load_ir, load_onnx, repo_root};
use std::fmt::Write;

/// Compiles with the default policy (what `fp8c compile` does, plus `--fp8-attention` when
/// asked) and the given recipe.
fn compile(g: &Graph, recipe: Recipe, fp8_attention: bool) -> (Graph, PassCx) {
    let mut g = g.clone();
    let mut options = PassOptions {
        recipe,
        ..Default::default()
    };
    options.policy.fp8_attention = fp8_attention;
    let mut cx = PassCx::new(options);
    PassManager::default()
        .run(&mut g, &mut cx)
        .unwrap_or_else(|e| panic!("{e}"));
    (g, cx)
}

/// The pass's totals and rule counts, one per line.
fn stats(g: &Graph, cx: &PassCx) -> String {
    let f = cx.fusion.as_ref().expect("fusion ran");
    let t = report::build(g, cx, false).totals;
    let mut s = String::new();
    let _ = writeln!(s, "stop reason: {}", f.stop_reason);
    let _ = writeln!(
        s,
        "iterations: {}, e-nodes: {}, e-classes: {}",
        f.iterations, f.enodes, f.eclasses
    );
    let _ = writeln!(
        s,
        "kernels: {} -> {}",
        t.kernels_before_fusion, t.kernels_after_fusion
    );
    let _ = writeln!(
        s,
        "bytes: {} -> {}",
        t.bytes_before_fusion, t.bytes_after_fusion
    );
    let _ = writeln!(
        s,
        "FP8 kernels per FP8 GEMM ({}): {:.3} -> {:.3}",
        t.fp8_gemms, t.fp8_kernels_per_gemm_before_fusion, t.fp8_kernels_per_gemm_after_fusion
    );
    let _ = writeln!(
        s,
        "activation quantization bytes per element: {:.3} -> {:.3} (floor {:.3})",
        t.act_quant_bytes_per_element_before_fusion,
        t.act_quant_bytes_per_element_after_fusion,
        t.act_quant_bytes_per_element_floor
    );
    for (rule, n) in &f.applied {
        let _ = writeln!(s, "rule {rule}: {n}");
    }
    s
}

fn check(name: &str, g: &Graph, recipe: Recipe, fp8_attention: bool) {
    let (a, cx) = compile(g, recipe, fp8_attention);
    let (b, _) = compile(g, recipe, fp8_attention);
    let text = fp8c_ir::text::print(&a);
    assert_eq!(
        text,
        fp8c_ir::text::print(&b),
        "{name}: two compiles differ"
    );
    // The fused ops print and parse back (text and JSON), and the result verifies.
    let parsed = fp8c_ir::text::parse(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_eq!(
        fp8c_ir::text::print(&parsed),
        text,
        "{name}: text round trip"
    );
    let json = fp8c_ir::text::from_json(&fp8c_ir::text::to_json(&a)).unwrap();
    assert_eq!(fp8c_ir::text::print(&json), text, "{name}: JSON round trip");
    fp8c_ir::verify(&parsed).unwrap_or_else(|e| panic!("{name}: {e}"));
    insta::with_settings!({ snapshot_path => "../../snapshots/fusion", prepend_module_to_snapshot => false }, {
        insta::assert_snapshot!(format!("{name}.ir"), text);
        insta::assert_snapshot!(format!("{name}.stats"), stats(&a, &cx));
    });
}

#[test]
fn mlp() {
    let g = load_ir(
        &repo_root().join("examples/ir/mlp.fp8ir"),
        &[("x", &[128, 256])],
    );
    check("mlp.delayed", &g, Recipe::default(), false);
    check("mlp.current", &g, current(), false);
}

#[test]
fn squeezenet() {
    // Its convolutions read weights computed in the graph, so the policy sees two activation
    // operands: --fp8-attention puts them in FP8 (quantize, dequantize, conv).
    let path = repo_root().join("examples/models/light_squeezenet.onnx");
    check(
        "squeezenet.delayed",
        &load_onnx(&path, &[]),
        Recipe::default(),
        true,
    );
}

#[test]
fn minilm_l3() {
    let Some(path) = cached_model("minilm-l3-paraphrase") else {
        return;
    };
    let g = load_onnx(
        &path,
        &[("input_ids", &[2, 64]), ("attention_mask", &[2, 64])],
    );
    check("minilm-l3.delayed", &g, Recipe::default(), false);
}
