//! How the host devices accumulate the FP8 GEMMs a recipe lets use fast accumulation, through
//! the commands a user types: `fp8c run` and `fp8c train` sum them in f32 on the CPU unless
//! `--hopper-accum` asks for the model of Hopper's accumulator (whose closeness to an H100
//! `crates/fp8c-eval/tests/hopper_accum.rs` checks). The emulated CUDA device's side is in
//! `cuda_cli.rs`, the emitted MLIR's in fp8c-mlir's suite.

mod support;

use support::{copy_npz_member, repo_root, run_fp8c, run_outputs, scratch};

/// The forward GEMMs keep `fast_accum=true` in the IR (TransformerEngine's recipe, what a
/// CUDA device runs), yet the CPU's outputs are those of `--fast-accum none` bit for bit;
/// `--hopper-accum` runs the model instead, which gives other bits, and with
/// `--fast-accum none` it has nothing to model.
#[test]
fn the_cpu_sums_fast_accumulation_gemms_in_f32_unless_hopper_accum() {
    let dir = scratch("accum_run");
    let model = repo_root().join("examples/models/gpt2-tiny.onnx");
    let inputs = dir.join("in.npz");
    copy_npz_member(
        &repo_root().join("examples/models/gpt2-tiny.ref.npz"),
        "input_ids",
        &inputs,
    );
    let ir = run_fp8c([
        "compile".as_ref(),
        model.as_os_str(),
        "--input-shape".as_ref(),
        "input_ids=2x16".as_ref(),
        "--min-fp8-flops".as_ref(),
        "0".as_ref(),
    ]);
    assert!(ir.ok, "{}", ir.stderr);
    let fast = ir.stdout.matches("fast_accum=true").count();
    assert!(
        fast >= 4,
        "the forward GEMMs ask for fast accumulation:\n{fast}"
    );
    let run = |name: &str, flags: &[&str]| {
        let mut all = vec!["--min-fp8-flops", "0"];
        all.extend_from_slice(flags);
        let out = run_outputs(
            name,
            &model,
            &inputs,
            &all,
            &dir.join(format!("{name}.npz")),
        );
        out["logits"].bytes().to_vec()
    };
    let default = run("default", &[]);
    let none = run("none", &["--fast-accum", "none"]);
    let hopper = run("hopper", &["--hopper-accum"]);
    let hopper_none = run("hopper_none", &["--hopper-accum", "--fast-accum", "none"]);
    assert_eq!(default, none, "the CPU's default sums in f32");
    assert_ne!(
        default, hopper,
        "--hopper-accum models the narrow accumulator"
    );
    assert_eq!(
        hopper_none, none,
        "no fast-accumulation GEMM, nothing to model"
    );
}

/// `fp8c train` on the CPU: the default recipe's forward GEMMs sum in f32 (the losses of
/// `--fast-accum none` exactly); `--hopper-accum` gives the modelled losses.
#[test]
fn training_on_the_cpu_sums_in_f32_unless_hopper_accum() {
    let dir = scratch("accum_train");
    let losses = |name: &str, flags: &[&str]| -> Vec<String> {
        let log = dir.join(format!("{name}.csv"));
        let mut args: Vec<&std::ffi::OsStr> = vec![
            "train".as_ref(),
            "examples/models/llama-tiny.onnx".as_ref(),
            "--text".as_ref(),
            "examples/data/shakespeare.txt".as_ref(),
            "--seq-len".as_ref(),
            "16".as_ref(),
            "--batch".as_ref(),
            "4".as_ref(),
            "--steps".as_ref(),
            "3".as_ref(),
            "--min-fp8-flops".as_ref(),
            "0".as_ref(),
            "--quiet".as_ref(),
            "--log".as_ref(),
            log.as_os_str(),
        ];
        args.extend(flags.iter().map(std::ffi::OsStr::new));
        let r = support::fp8c()
            .current_dir(repo_root())
            .args(args)
            .output()
            .unwrap();
        assert!(
            r.status.success(),
            "train {name}: {}",
            String::from_utf8_lossy(&r.stderr)
        );
        support::csv_column(&log, "loss")
    };
    let default = losses("default", &[]);
    assert_eq!(default.len(), 3);
    assert_eq!(default, losses("none", &["--fast-accum", "none"]));
    assert_ne!(default, losses("hopper", &["--hopper-accum"]));
}
