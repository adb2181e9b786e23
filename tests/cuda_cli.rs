//! The CUDA side of the CLI on a machine without a GPU (CI's): `fp8c run --device cuda` and
//! `fp8c bench` fail with the backend's one clear message and exit code 1, never a panic. On a
//! machine with a GPU the failure cannot happen, so those checks print why they are skipped
//! (scripts/gpu-check.sh exercises the success path there).

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
