//! The CUDA side of the CLI on a machine without a GPU (CI's): `fp8c run --device cuda` and
//! `fp8c bench` fail with the backend's one clear message and exit code 1, never a panic. On a
//! machine with a GPU the failure cannot happen, so those checks print why they are skipped
//! (scripts/gpu-check.sh exercises the success path there). The success path without a GPU:
//! `--device cuda-emulated` runs the same CUDA backend on the emulated device.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn fp8c(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_fp8c"))
        .args(args)
        .current_dir(root())
        .output()
        .expect("run fp8c")
}

/// Whether this machine has an NVIDIA driver (then the no-GPU failure cannot be observed).
fn has_gpu_driver() -> bool {
    fp8c_runtime::cuda::libs::presence().driver
}

/// Requires a clean failure of the CUDA backend: exit code 1, one `error:` line naming the
/// backend and the missing driver, no panic.
fn assert_clean_cuda_failure(args: &[&str]) {
    let o = fp8c(args);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(
        o.status.code(),
        Some(1),
        "fp8c {args:?}: expected exit code 1\n{err}"
    );
    assert!(err.starts_with("error: "), "fp8c {args:?}: {err}");
    assert!(
        err.contains("backend `cuda` is unavailable"),
        "fp8c {args:?}: {err}"
    );
    assert!(err.contains("libcuda.so"), "fp8c {args:?}: {err}");
    assert!(
        !err.contains("panicked") && !err.contains("internal compiler error"),
        "{err}"
    );
    assert_eq!(
        err.trim_end().lines().count(),
        1,
        "one message expected:\n{err}"
    );
    assert!(o.stdout.is_empty(), "nothing on stdout expected");
}

#[test]
fn run_on_cuda_without_a_gpu_fails_cleanly() {
    if has_gpu_driver() {
        println!("SKIPPED: this machine has an NVIDIA driver");
        return;
    }
    assert_clean_cuda_failure(&[
        "run",
        "examples/models/light_squeezenet.onnx",
        "--device",
        "cuda",
    ]);
    assert_clean_cuda_failure(&[
        "run",
        "examples/ir/mlp.fp8ir",
        "--device",
        "cuda",
        "--precision",
        "fp8",
    ]);
}

#[test]
fn bench_without_a_gpu_fails_cleanly() {
    if has_gpu_driver() {
        println!("SKIPPED: this machine has an NVIDIA driver");
        return;
    }
    assert_clean_cuda_failure(&["bench"]);
    assert_clean_cuda_failure(&["bench", "--json", "--quick"]);
}

#[test]
fn bench_help_lists_its_options() {
    let o = fp8c(&["bench", "--help"]);
    assert!(o.status.success());
    let out = String::from_utf8_lossy(&o.stdout);
    for opt in [
        "--json",
        "--sizes",
        "--elements",
        "--layer",
        "--quick",
        "--device",
    ] {
        assert!(out.contains(opt), "{opt} missing from:\n{out}");
    }
}

/// `fp8c run --device cuda-emulated`: the CUDA backend (lowering, kernels, cuBLASLt requests)
/// on the emulated device gives the CPU reference's outputs, with the forward GEMMs summed in
/// f32 (the hosts' default) and under `--hopper-accum`, for the digits MLP (bit for bit),
/// the Llama-style decoder export (FP8 GEMMs, RoPE, attention) and the BERT-style encoder
/// export (gather_nd on its mask); transcendental kernels use the host's math library, so
/// those two within 1e-5.
#[test]
fn example_models_run_on_the_emulated_cuda_device_like_the_cpu() {
    let dir = tempfile::tempdir().unwrap();
    let llama_inputs = dir.path().join("llama_in.npz");
    let ids: Vec<i64> = (0..32).map(|i| (i * 37 % 256) as i64).collect();
    fp8c_session::npy::write_npz(
        &llama_inputs,
        &[("input_ids", &fp8c_ir::Tensor::from_i64(vec![2, 16], &ids))],
    )
    .unwrap();
    // The BERT-style encoder's integer inputs (ids and the attention mask, which its export
    // feeds through gather_nd) from its reference file.
    let bert_inputs = bert_int_inputs(dir.path());
    let cases = [
        (
            "examples/models/mlp_digits.onnx",
            root().join("examples/data/digits_test.npz"),
            0.0,
        ),
        ("examples/models/llama-tiny.onnx", llama_inputs, 1e-5),
        ("examples/models/bert-tiny-enc.onnx", bert_inputs, 1e-5),
    ];
    for (model, inputs, tol) in cases {
        cpu_and_emulated_agree(dir.path(), model, &inputs, &[], tol);
        // Both hosts model Hopper's accumulator in the forward GEMMs when asked (the CPU's
        // model, and the emulated cuBLASLt's for the CUDA lowering's fast-accumulation
        // requests).
        if !model.contains("bert") {
            cpu_and_emulated_agree(dir.path(), model, &inputs, &["--hopper-accum"], tol);
        }
    }
}

/// Per-tile recipes on CUDA (issue #16): `fp8c run --recipe rowwise|block|mxfp8 --device
/// cuda-emulated` gives the CPU reference's outputs bit for bit on the digits MLP and within
/// 1e-5 on the Llama-style and BERT-style exports (host math library in its transcendental
/// kernels): the tile quantize kernels, the producers fused with them (elementwise and
/// LayerNorm), the exact block-scaled GEMM kernel and the cuBLASLt block-scaled
/// requests (their scale layouts read back by the emulated cuBLASLt) all agree with the CPU.
#[test]
fn per_tile_recipes_run_on_the_emulated_cuda_device_like_the_cpu() {
    let dir = tempfile::tempdir().unwrap();
    let llama_inputs = dir.path().join("llama_in.npz");
    let ids: Vec<i64> = (0..64).map(|i| (i * 37 % 256) as i64).collect();
    fp8c_session::npy::write_npz(
        &llama_inputs,
        &[("input_ids", &fp8c_ir::Tensor::from_i64(vec![4, 16], &ids))],
    )
    .unwrap();
    // The BERT-style encoder (LayerNorm feeding block-scaled GEMMs: the fused
    // layer_norm_block_quantize kernel; GELU feeding one: elementwise_block_quantize).
    let bert_inputs = bert_int_inputs(dir.path());
    let cases = [
        (
            "examples/models/mlp_digits.onnx",
            root().join("examples/data/digits_test.npz"),
            0.0,
        ),
        ("examples/models/llama-tiny.onnx", llama_inputs, 1e-5),
        ("examples/models/bert-tiny-enc.onnx", bert_inputs, 1e-5),
    ];
    for (model, inputs, tol) in &cases {
        // The MLP takes every recipe; the decoder (slower on the emulated device) the block
        // recipe, whose cuBLASLt requests it exercises.
        let recipes: &[&str] = if model.contains("mlp") {
            &["rowwise", "block", "mxfp8"]
        } else {
            &["block"]
        };
        for recipe in recipes {
            cpu_and_emulated_agree(dir.path(), model, inputs, &["--recipe", recipe], *tol);
        }
    }
}

/// The BERT-style encoder's integer inputs (ids and the attention mask, which its export feeds
/// through gather_nd) from its reference file, written to `dir/bert_in.npz`.
fn bert_int_inputs(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("bert_in.npz");
    let reference =
        fp8c_session::npy::read_npz(&root().join("examples/models/bert-tiny-enc.ref.npz")).unwrap();
    let ints: Vec<(&str, &fp8c_ir::Tensor)> = reference
        .iter()
        .filter(|(_, t)| !t.dtype().is_float())
        .map(|(k, t)| (k.as_str(), t))
        .collect();
    fp8c_session::npy::write_npz(&path, &ints).unwrap();
    path
}

/// `fp8c run MODEL --inputs INPUTS EXTRA` on the CPU and on the emulated CUDA device: every
/// output bit for bit (`tol` 0) or within `tol` relative L2.
fn cpu_and_emulated_agree(dir: &Path, model: &str, inputs: &Path, extra: &[&str], tol: f64) {
    let out = |dev: &str| {
        let path = dir.join(format!("out_{}_{dev}.npz", extra.join("_")));
        let mut args = vec![
            "run",
            model,
            "--inputs",
            inputs.to_str().unwrap(),
            "--device",
            dev,
            "--min-fp8-flops",
            "0",
            "-o",
            path.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        let o = fp8c(&args);
        assert!(
            o.status.success(),
            "{model} {extra:?} on {dev}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        fp8c_session::npy::read_npz(&path).unwrap()
    };
    let (cpu, emu) = (out("cpu"), out("cuda-emulated"));
    assert_eq!(cpu.len(), emu.len());
    for ((k, c), (_, e)) in cpu.iter().zip(&emu) {
        let cmp = fp8c_runtime::compare(e, c).unwrap();
        println!(
            "{model} {extra:?} \"{k}\": emulated CUDA vs CPU rel L2 {:.3e}",
            cmp.rel_l2
        );
        if tol == 0.0 {
            assert_eq!(c.bytes(), e.bytes(), "{model} {extra:?} \"{k}\"");
        } else {
            assert!(cmp.rel_l2 <= tol, "{model} {extra:?} \"{k}\": {cmp:?}");
        }
    }
}

/// `fp8c train --device cuda-emulated`: FP8 training steps (forward, E5M2 gradients,
/// delayed-scaling updates, AdamW) of the digits MLP, of the Llama-style decoder export and of
/// a small CNN (convolution and pooling gradients) on the emulated CUDA device log the CPU
/// reference's losses; so do the Llama export under the block recipe and the MLP under MXFP8
/// (block-scaled backward GEMMs).
#[test]
fn fp8_training_steps_on_the_emulated_cuda_device_match_the_cpu() {
    let dir = tempfile::tempdir().unwrap();
    let losses = |name: &str, args: &[&str], dev: &str| -> Vec<f64> {
        let log = dir.path().join(format!("{name}_{dev}.csv"));
        let mut all: Vec<&str> = vec!["train"];
        all.extend_from_slice(args);
        all.extend_from_slice(&[
            "--min-fp8-flops",
            "0",
            "--device",
            dev,
            "--log",
            log.to_str().unwrap(),
            "--quiet",
        ]);
        let o = fp8c(&all);
        assert!(
            o.status.success(),
            "train {name} on {dev}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        std::fs::read_to_string(&log)
            .unwrap()
            .lines()
            .skip(1)
            .map(|l| l.split(',').nth(1).unwrap().parse().unwrap())
            .collect()
    };
    let mlp: &[&str] = &[
        "examples/models/mlp_digits.onnx",
        "--data",
        "examples/data/digits_train.npz",
        "--labels",
        "y",
        "--batch",
        "32",
        "--steps",
        "3",
    ];
    let llama: &[&str] = &[
        "examples/models/llama-tiny.onnx",
        "--text",
        "examples/data/shakespeare.txt",
        "--seq-len",
        "16",
        "--batch",
        "4",
        "--steps",
        "2",
    ];
    // A CNN (scripts/fixtures/make_cnn_example.py): conv, max and average pooling and their
    // gradients.
    let cnn: &[&str] = &[
        "examples/models/cnn_digits.onnx",
        "--data",
        "examples/data/digits_train.npz",
        "--labels",
        "y",
        "--batch",
        "16",
        "--steps",
        "3",
    ];
    // Per-tile recipes (issue #16): block-scaled forward, dgrad and wgrad GEMMs. The decoder's
    // fast-accumulation GEMMs sum as Hopper's model (--hopper-accum), whose exact block sums
    // do not depend on their order: summed in f32, the two hosts' different summation orders
    // flip the sign of near-zero gradients, which AdamW's first step turns into whole
    // learning-rate steps (losses 2e-4 apart after one step).
    let llama_block: &[&str] = &[llama, &["--recipe", "block", "--hopper-accum"]].concat();
    let mlp_mx: &[&str] = &[mlp, &["--recipe", "mxfp8"]].concat();
    for (name, args, steps) in [
        ("mlp", mlp, 3),
        ("llama", llama, 2),
        ("cnn", cnn, 3),
        ("llama_block", llama_block, 2),
        ("mlp_mxfp8", mlp_mx, 3),
    ] {
        let (cpu, emu) = (
            losses(name, args, "cpu"),
            losses(name, args, "cuda-emulated"),
        );
        assert_eq!(cpu.len(), steps, "{name}");
        for (step, (c, e)) in cpu.iter().zip(&emu).enumerate() {
            assert!(
                (c - e).abs() <= 1e-5 * c.abs(),
                "{name} step {step}: CPU loss {c}, emulated CUDA {e}"
            );
        }
    }
}
