//! Models whose work happens inside `If` branches, with `Size` in them, through the real
//! binary as a user types it: `fp8c run` against onnxruntime (max |difference| ≤ 1e-5 on
//! every output, f32) and `fp8c inspect --json` listing the ops of the subgraphs.
//!
//! - `tests/models/subgraphs/if_size.onnx` (onnx's helper API,
//!   `scripts/fixtures/make_subgraph_models.py`): Size outside and inside branches, an If on a
//!   bool input (specialised on), a nested If on a shape-only condition, and one on a value
//!   computed from the data (both branches computed and selected); run on the CPU reference
//!   and the CUDA backend's emulated device.
//! - the Silero voice-activity detector shipped in the `silero-vad` PyPI wheel
//!   (`scripts/fetch-models.sh`): the whole network sits in nested If branches chosen by the
//!   sample-rate input, 8 kHz and 16 kHz; and its f16 variant.

mod support;

use std::path::{Path, PathBuf};

const MAX_ABS: f64 = 1e-5;

fn subgraph_model(name: &str) -> PathBuf {
    support::repo_root().join(format!("tests/models/subgraphs/{name}.onnx"))
}

/// Runs `model` on onnxruntime's inputs (made by `ort_args`) with `flags` and checks every
/// output against onnxruntime's.
fn check(model: &Path, tag: &str, ort_args: &[&str], flags: &[&str]) {
    let (inputs, reference) = support::ort_reference(model, tag, ort_args);
    let want = support::read_npz(&reference);
    let out = support::scratch(&format!("subgraph_models_{tag}")).join("out.npz");
    let got = support::run_outputs(tag, model, &inputs, flags, &out);
    assert_eq!(
        got.keys().collect::<Vec<_>>(),
        want.keys().collect::<Vec<_>>()
    );
    for (name, w) in &want {
        let g = &got[name];
        assert_eq!(g.ty(), w.ty(), "{tag}: output {name}");
        let (a, b) = (g.to_f64_vec().unwrap(), w.to_f64_vec().unwrap());
        let max = a
            .iter()
            .zip(&b)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f64::max);
        eprintln!("{tag} {flags:?}: output {name}: max |fp8c - onnxruntime| = {max:.3e}");
        assert!(
            max <= MAX_ABS,
            "{tag}: output {name}: {max:e} > {MAX_ABS:e}"
        );
    }
}

#[test]
fn size_in_if_branches_matches_onnxruntime_on_cpu_and_the_emulated_cuda_device() {
    let model = subgraph_model("if_size");
    for (tag, args) in [
        (
            "if_size_b1_then",
            &["--shape", "x=1x8", "--fill", "flag=1"][..],
        ),
        ("if_size_b3_then", &["--shape", "x=3x8", "--fill", "flag=1"]),
        ("if_size_b3_else", &["--shape", "x=3x8", "--fill", "flag=0"]),
        (
            "if_size_b5_neg",
            &["--shape", "x=5x8", "--fill", "flag=1", "--seed", "3"],
        ),
    ] {
        check(&model, tag, args, &["--precision", "f32"]);
        check(
            &model,
            tag,
            args,
            &["--precision", "f32", "--device", "cuda-emulated"],
        );
    }
}

#[test]
fn inspect_json_lists_the_ops_of_the_subgraphs() {
    let r = support::run_fp8c([
        "inspect".as_ref(),
        subgraph_model("if_size").as_os_str(),
        "--json".as_ref(),
    ]);
    assert!(r.ok, "{}", r.stderr);
    let info: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(info["node_count"], 6);
    // Size: once outside, once per branch of each If, twice in the nested one.
    assert_eq!(info["op_histogram"]["Size"], 1);
    assert_eq!(info["op_histogram_with_subgraphs"]["Size"], 7);
    let paths: Vec<&str> = info["subgraphs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["path"].as_str().unwrap())
        .collect();
    assert!(paths.contains(&"flag_if.then.nested_if.then"), "{paths:?}");
    assert_eq!(info["unsupported_ops"], serde_json::json!([]));

    // Unsupported ops inside branches: inspect names them by path, the import lists all.
    let bad = subgraph_model("if_unsupported");
    let r = support::run_fp8c(["inspect".as_ref(), bad.as_os_str(), "--json".as_ref()]);
    let info: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(
        info["unsupported_nodes"],
        serde_json::json!([
            {"path": "choose.else.nonzero", "op": "NonZero"},
            {"path": "choose.then.uniq", "op": "Unique"}
        ])
    );
    let r = support::run_fp8c(["compile".as_ref(), bad.as_os_str()]);
    assert!(!r.ok);
    assert!(
        r.stderr.contains(
            "unsupported ONNX ops (2): \"choose.else.nonzero\" (NonZero), \"choose.then.uniq\" (Unique)"
        ),
        "{}",
        r.stderr
    );
}

#[test]
fn silero_vad_from_its_wheel_matches_onnxruntime_at_both_sample_rates() {
    let model = support::fetched_model("silero-vad");
    let r = support::run_fp8c(["inspect".as_ref(), model.as_os_str(), "--json".as_ref()]);
    let info: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(
        (
            info["node_count"].as_u64(),
            info["node_count_with_subgraphs"].as_u64()
        ),
        (Some(5), Some(689))
    );
    assert!(info["op_histogram_with_subgraphs"]["Size"].as_u64() > Some(0));
    assert!(info["op_histogram_with_subgraphs"]["LSTM"].as_u64() > Some(0));
    for (tag, args) in [
        (
            "silero_vad_16k",
            &[
                "--shape",
                "input=1x512",
                "--shape",
                "state=2x1x128",
                "--fill",
                "sr=16000",
            ][..],
        ),
        (
            "silero_vad_8k",
            &[
                "--shape",
                "input=1x256",
                "--shape",
                "state=2x1x128",
                "--fill",
                "sr=8000",
            ],
        ),
        (
            "silero_vad_16k_b2",
            &[
                "--shape",
                "input=2x512",
                "--shape",
                "state=2x2x128",
                "--fill",
                "sr=16000",
            ],
        ),
    ] {
        check(&model, tag, args, &["--precision", "f32"]);
    }
    let half = support::fetched_model("silero-vad-half");
    check(
        &half,
        "silero_vad_half",
        &["--shape", "input=1x512", "--shape", "state=2x1x128"],
        &["--precision", "f32"],
    );
}
