//! fp8c's tensor files are standard safetensors (issue #17): Python's `safetensors` package
//! (`scripts/oracles/st_inspect.py`, not fp8c) reads the IR weights sidecar and a training
//! checkpoint,
//! with every dtype intact — FP8 weights stay `F8_E4M3` with the model's bytes, f32 files
//! load with `safetensors.numpy.load_file`.

mod support;

use serde_json::Value;
use std::path::Path;
use std::process::Command;

/// `scripts/oracles/st_inspect.py FILE [--onnx MODEL]`'s JSON.
fn inspect(file: &Path, onnx: Option<&Path>) -> Value {
    let mut cmd = Command::new(support::python());
    cmd.arg(support::repo_root().join("scripts/oracles/st_inspect.py"))
        .arg(file);
    if let Some(m) = onnx {
        cmd.arg("--onnx").arg(m);
    }
    let out = cmd.output().expect("python runs");
    assert!(
        out.status.success(),
        "Python's safetensors could not read {}:\n{}",
        file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("st_inspect.py prints JSON")
}

/// `fp8c compile MODEL --emit ir -o DIR/NAME.fp8ir EXTRA..`; returns the sidecar's path.
fn compile_ir(model: &Path, dir: &Path, name: &str, extra: &[&str]) -> std::path::PathBuf {
    let ir = dir.join(format!("{name}.fp8ir"));
    let mut args: Vec<&std::ffi::OsStr> = vec![
        "compile".as_ref(),
        model.as_os_str(),
        "--emit".as_ref(),
        "ir".as_ref(),
        "-o".as_ref(),
        ir.as_os_str(),
    ];
    args.extend(extra.iter().map(|e| std::ffi::OsStr::new(*e)));
    let r = support::run_fp8c(args);
    assert!(r.ok, "fp8c compile --emit ir failed:\n{}", r.stderr);
    dir.join(format!("{name}.fp8ir.safetensors"))
}

#[test]
fn weights_sidecar_keeps_fp8_and_f32_weights_as_python_reads_them() {
    let dir = support::scratch("st_sidecar");
    // A model with FP8 initializers (ModelOpt's form): the sidecar keeps them FP8.
    let qdq = support::repo_root().join("examples/models/qdq_mlp_fp8.onnx");
    let info = inspect(&compile_ir(&qdq, &dir, "qdq", &[]), Some(&qdq));
    assert_eq!(info["metadata"]["fp8c.graph"], "qdq_mlp", "{info}");
    let tensors = info["tensors"].as_object().unwrap();
    for w in ["w1", "w2"] {
        assert_eq!(tensors[w]["dtype"], "F8_E4M3", "{info}");
        assert_eq!(tensors[w]["matches_onnx"], true, "{info}");
    }
    assert_eq!(tensors["w1"]["shape"], serde_json::json!([64, 128]));

    // An f32 model compiled in f32: numpy's loader reads the sidecar as it is, bytes equal to
    // the ONNX ones.
    let mlp = support::repo_root().join("examples/models/mlp_digits.onnx");
    let info = inspect(
        &compile_ir(&mlp, &dir, "mlp", &["--precision", "f32"]),
        Some(&mlp),
    );
    assert_eq!(info["numpy_load_file"], true, "{info}");
    let tensors = info["tensors"].as_object().unwrap();
    assert_eq!(tensors.len(), 6, "{info}");
    for (name, t) in tensors {
        assert_eq!(t["dtype"], "F32", "{name}");
        assert_eq!(t["matches_onnx"], true, "{name}");
    }

    // Compiled for FP8 inference, the FP8 GEMMs' weights are quantized once, at compile time:
    // the sidecar holds their FP8 codes (and scales), not the f32 master weights.
    let info = inspect(
        &compile_ir(&mlp, &dir, "mlp8", &["--input-shape", "x=512x64"]),
        None,
    );
    let tensors = info["tensors"].as_object().unwrap();
    let fp8: Vec<&String> = tensors
        .iter()
        .filter(|(_, t)| t["dtype"] == "F8_E4M3")
        .map(|(k, _)| k)
        .collect();
    assert_eq!(fp8.len(), 2, "{info}");
    assert!(!tensors.contains_key("fc1.weight"), "{info}");

    // The sidecar is what fp8c reads back: the IR runs like the ONNX model.
    let r = support::run_fp8c([
        "compile".as_ref(),
        dir.join("mlp.fp8ir").as_os_str(),
        "--emit".as_ref(),
        "ir".as_ref(),
        "-o".as_ref(),
        "/dev/null".as_ref(),
    ]);
    assert!(r.ok, "{}", r.stderr);
}

#[test]
fn old_weights_sidecar_is_refused_naming_the_new_format() {
    let dir = support::scratch("st_old_sidecar");
    let mlp = support::repo_root().join("examples/models/mlp_digits.onnx");
    compile_ir(&mlp, &dir, "m", &[]);
    std::fs::rename(dir.join("m.fp8ir.safetensors"), dir.join("m.fp8ir.weights")).unwrap();
    let r = support::run_fp8c(["compile".as_ref(), dir.join("m.fp8ir").as_os_str()]);
    assert!(!r.ok);
    assert!(
        r.stderr.contains("m.fp8ir.weights") && r.stderr.contains("safetensors"),
        "{}",
        r.stderr
    );
}

#[test]
fn training_checkpoint_state_loads_with_numpy_safetensors() {
    let dir = support::scratch("st_checkpoint");
    let data = dir.join("d.npz");
    let n = 64u64;
    let x: Vec<f32> = (0..n * 64).map(|i| ((i * 37) % 17) as f32 / 16.0).collect();
    let y: Vec<i64> = (0..n).map(|i| (i % 10) as i64).collect();
    fp8c_session::npy::write_npz(
        &data,
        &[
            ("x", &fp8c_ir::Tensor::from_f32(vec![n, 64], &x)),
            ("y", &fp8c_ir::Tensor::from_i64(vec![n], &y)),
        ],
    )
    .unwrap();
    let ck = dir.join("ck");
    let mlp = support::repo_root().join("examples/models/mlp_digits.onnx");
    let r = support::run_fp8c([
        "train".as_ref(),
        mlp.as_os_str(),
        "--data".as_ref(),
        data.as_os_str(),
        "--labels".as_ref(),
        "y".as_ref(),
        "--batch".as_ref(),
        "16".as_ref(),
        "--steps".as_ref(),
        "3".as_ref(),
        "--quiet".as_ref(),
        "--checkpoint".as_ref(),
        ck.as_os_str(),
    ]);
    assert!(r.ok, "fp8c train failed:\n{}", r.stderr);
    let info = inspect(&ck.join("state.safetensors"), None);
    assert_eq!(info["numpy_load_file"], true, "{info}");
    let tensors = info["tensors"].as_object().unwrap();
    // The trained params (FP32 master weights), the optimizer's moments and the step count.
    assert_eq!(tensors["fc1.weight"]["dtype"], "F32", "{info}");
    assert_eq!(tensors["fc1.weight"]["shape"], serde_json::json!([256, 64]));
    assert_eq!(
        tensors["fc1.weight.m"]["shape"],
        serde_json::json!([256, 64])
    );
    assert_eq!(info["metadata"]["step"], "3", "{info}");
}
