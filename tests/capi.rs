//! fp8c's C API from C: tests/c/run_model.c, compiled with the system's C compiler (`$CC`,
//! else `cc`) against the generated header include/fp8c.h and linked to libfp8c.so (the
//! fp8c-capi cdylib), loads an example model, runs it and must give `fp8c run`'s outputs bit
//! for bit; a bad model returns an error status and the library's message.

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The folder holding libfp8c.so: this test's own target folder (`deps/`, or the one above).
fn lib_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    for dir in [deps, deps.parent().unwrap()] {
        if dir.join("libfp8c.so").is_file() {
            return dir.to_path_buf();
        }
    }
    panic!(
        "libfp8c.so (the fp8c-capi cdylib) is not in {} or its parent",
        deps.display()
    );
}

/// Builds tests/c/run_model.c into `dir` and returns the program.
fn build_program(dir: &Path) -> PathBuf {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let lib = lib_dir();
    let exe = dir.join("run_model");
    let out = Command::new(&cc)
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-o"])
        .arg(&exe)
        .arg(root().join("tests/c/run_model.c"))
        .arg("-I")
        .arg(root().join("include"))
        .arg("-L")
        .arg(&lib)
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .arg("-lfp8c")
        .output()
        .unwrap_or_else(|e| panic!("{cc}: {e} (a C compiler is needed: set $CC)"));
    assert!(
        out.status.success(),
        "{cc} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

/// `fp8c run MODEL --inputs in.npz -o out.npz FLAGS` and the C program on the same input
/// and options: the first output's bytes must be equal.
fn same_as_cli(model: &str, input: &str, x: fp8c_session::Tensor, flags: &[(&str, &str)]) {
    let dir = tempfile::tempdir().unwrap();
    let exe = build_program(dir.path());
    let model = root().join("examples/models").join(model);
    let npz = dir.path().join("in.npz");
    fp8c_session::npy::write_npz(&npz, &[(input, &x)]).unwrap();
    let out_npz = dir.path().join("out.npz");
    let mut cli = Command::new(env!("CARGO_BIN_EXE_fp8c"));
    cli.arg("run")
        .arg(&model)
        .arg("--inputs")
        .arg(&npz)
        .arg("-o")
        .arg(&out_npz);
    for (k, v) in flags {
        cli.arg(format!("--{k}")).arg(v);
    }
    let o = cli.output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let want = fp8c_session::npy::read_npz(&out_npz).unwrap();
    let raw = dir.path().join("x.bin");
    std::fs::write(&raw, x.bytes()).unwrap();
    let out_bin = dir.path().join("out.bin");
    let dtype = if x.dtype() == fp8c_session::DType::I64 {
        "i64"
    } else {
        "f32"
    };
    let dims: Vec<String> = x.shape().iter().map(u64::to_string).collect();
    let mut c = Command::new(&exe);
    c.arg(&model)
        .arg(input)
        .arg(dtype)
        .arg(dims.join("x"))
        .arg(&raw)
        .arg(&out_bin);
    for (k, v) in flags {
        c.arg(format!("{k}={v}"));
    }
    let o = c.output().unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "run_model failed:\n{stdout}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let (name, t) = &want[0];
    assert!(
        stdout.starts_with(&format!("{name} dtype 0 shape")),
        "{stdout}"
    );
    assert!(
        stdout.contains("wrong shape: status 4: input \""),
        "{stdout}"
    );
    let got = std::fs::read(&out_bin).unwrap();
    assert_eq!(got.len(), t.bytes().len());
    assert!(
        got == t.bytes(),
        "{model:?}: the C API's \"{name}\" differs from fp8c run's"
    );
}

#[test]
fn a_c_program_gets_the_clis_outputs_bit_for_bit_on_the_cnn() {
    let x: Vec<f32> = (0..16 * 64)
        .map(|i| ((i * 37 % 101) as f32 - 50.0) / 25.0)
        .collect();
    same_as_cli(
        "cnn_digits.onnx",
        "x",
        fp8c_session::Tensor::from_f32(vec![16, 64], &x),
        &[("min-fp8-flops", "0")],
    );
}

#[test]
fn a_c_program_gets_the_clis_outputs_bit_for_bit_on_the_llm() {
    let ids: Vec<i64> = (0..2 * 16).map(|i| (i * 61 % 256) as i64).collect();
    same_as_cli(
        "llama-tiny.onnx",
        "input_ids",
        fp8c_session::Tensor::from_i64(vec![2, 16], &ids),
        &[("min-fp8-flops", "0"), ("recipe", "block")],
    );
}

#[test]
fn a_bad_model_returns_an_error_status_and_the_message() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build_program(dir.path());
    let bad = dir.path().join("bad.onnx");
    std::fs::write(&bad, b"not a model").unwrap();
    let o = Command::new(&exe).arg("--bad").arg(&bad).output().unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(stdout.starts_with("status 1: "), "{stdout}");
    assert!(
        stdout.contains("bad.onnx"),
        "the message names the file: {stdout}"
    );
    let missing = dir.path().join("missing.onnx");
    let o = Command::new(&exe)
        .arg("--bad")
        .arg(&missing)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success() && stdout.contains("missing.onnx: no such file"),
        "{stdout}"
    );
}
