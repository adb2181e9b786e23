//! One set of flag names across subcommands: every flag `fp8c compile --help` lists is
//! accepted by `fp8c run` and `fp8c train` (they run with it), or refused with a message that
//! names the flag and says why it does not apply there — never clap's "unexpected argument".
//! A new compile flag fails this test until its value is added to `sample_value` below.
//! Also the training loop's failure cases: outputs that cannot be written fail before the
//! first step, and a run whose every step was skipped fails and writes no trained model.

mod support;

use std::path::{Path, PathBuf};
use support::{run_fp8c, scratch};

fn root() -> PathBuf {
    support::repo_root()
}

/// The long flags a subcommand's `--help` lists (`--input-shape`, ...), in order.
fn help_flags(cmd: &str) -> Vec<String> {
    let r = run_fp8c([cmd, "--help"]);
    assert!(r.ok, "fp8c {cmd} --help: {}", r.stderr);
    r.stdout
        .lines()
        .filter_map(|l| {
            let l = l.trim_start();
            let l = l.strip_prefix("-o, ").unwrap_or(l);
            let flag = l.strip_prefix("--")?.split([' ', '[', '=']).next()?;
            (!flag.is_empty()).then(|| format!("--{flag}"))
        })
        .filter(|f| {
            !matches!(
                f.as_str(),
                "--help" | "--version" | "--threads" | "--verbose"
            )
        })
        .collect()
}

/// A value that makes sense for compile flag `flag` on the digits MLP (`cal`: an inputs
/// archive), or None for a switch. Panics on an unknown flag: add it here.
fn sample_value(flag: &str, cal: &Path, cfg: &Path, rows: u64) -> Option<String> {
    let v = match flag {
        "--input-shape" => return Some(format!("x={rows}x64")),
        "--output" => "logits",
        "--emit" => "ir",
        "--out" => return Some("OUT".into()),
        "--calibrate" => return Some(cal.display().to_string()),
        "--print-after" => "scaling",
        "--stop-after" => "precision",
        "--report" => return Some("=json".into()),
        "--precision" => "fp8",
        "--recipe" => "delayed",
        "--format" => "hybrid",
        "--amax-history" => "8",
        "--amax-algo" => "max",
        "--margin" => "0",
        "--amax-epsilon" => "0",
        "--fast-accum" => "none",
        "--config" => return Some(cfg.display().to_string()),
        "--keep-high" => "fc2*",
        "--granularity" => "*=tensorwise",
        "--force-fp8" => "fc1*",
        "--min-fp8-flops" => "0",
        "--no-verify"
        | "--report-all"
        | "--power-2-scale"
        | "--hopper-accum"
        | "--keep-first-last"
        | "--fp8-attention"
        | "--pad-to-16"
        | "--no-fuse"
        | "--no-fuse-attention" => return None,
        other => panic!("compile flag {other} has no sample value in tests/cli_flags.rs"),
    };
    Some(v.to_string())
}

/// The arguments for `flag` with its sample value (`--report=json` is one argument).
fn with_value(flag: &str, value: Option<String>, out: &Path) -> Vec<String> {
    match value.as_deref() {
        None => vec![flag.into()],
        Some(v) if v.starts_with('=') => vec![format!("{flag}{v}")],
        Some("OUT") => vec![flag.into(), out.display().to_string()],
        Some(v) => vec![flag.into(), v.into()],
    }
}

#[test]
fn run_and_train_take_every_compile_flag_or_say_why_not() {
    let dir = scratch("cli_flags");
    let model = root().join("examples/models/mlp_digits.onnx");
    let data = root().join("examples/data/digits_train.npz");
    let cal = root().join("examples/data/digits_test.npz");
    let cfg = dir.join("fp8.toml");
    std::fs::write(&cfg, "[recipe]\nkind = \"delayed\"\n").unwrap();
    // The digits test archive has the model's input `x` (and labels, which run refuses):
    // run reads `x` alone.
    let inputs = dir.join("x.npz");
    support::copy_npz_member(&cal, "x", &inputs);
    let rows = support::read_npz(&inputs)["x"].shape()[0];
    let flags = help_flags("compile");
    assert!(flags.len() > 20, "compile --help lists {flags:?}");
    let mut refused = Vec::new();
    for flag in &flags {
        let value = sample_value(flag, &inputs, &cfg, rows);
        for cmd in ["run", "train"] {
            let out = dir.join(format!("{cmd}.out"));
            let mut args: Vec<String> = vec![cmd.into(), model.display().to_string()];
            if cmd == "run" {
                args.extend(["--inputs".into(), inputs.display().to_string()]);
            } else {
                args.extend(
                    [
                        "--data",
                        &data.display().to_string(),
                        "--labels",
                        "y",
                        "--steps",
                        "2",
                    ]
                    .map(String::from),
                );
                args.extend(["--batch".into(), rows.to_string(), "--quiet".into()]);
            }
            args.extend(with_value(flag, value.clone(), &out));
            // A run writes its outputs somewhere harmless when the flag itself is not -o.
            if flag != "--out" && cmd == "run" {
                args.extend(["-o".into(), dir.join("run.npz").display().to_string()]);
            }
            let r = run_fp8c(&args);
            assert!(
                !r.stderr.contains("unexpected argument") && !r.stderr.contains("unrecognized"),
                "fp8c {cmd} does not know {flag}: {}",
                r.stderr
            );
            if !r.ok {
                let first = r
                    .stderr
                    .lines()
                    .find(|l| l.starts_with("error:"))
                    .unwrap_or("");
                assert!(
                    first.contains(flag.as_str()) && first.len() > flag.len() + 30,
                    "fp8c {cmd} {flag}: a refusal must name the flag and say why: {}",
                    r.stderr
                );
                refused.push(format!("{cmd} {flag}"));
            }
        }
    }
    // What does not apply is refused, by name: compile's output forms and its early stop.
    for expected in [
        "run --emit",
        "train --emit",
        "train --calibrate",
        "run --stop-after",
        "train --stop-after",
    ] {
        assert!(
            refused.iter().any(|r| r == expected),
            "{expected} should be refused; refused: {refused:?}"
        );
    }
    assert!(
        refused.len() <= 6,
        "more refusals than expected: {refused:?}"
    );
}

#[test]
fn run_binds_input_shape_and_refuses_a_conflicting_one() {
    let dir = scratch("cli_flags_shape");
    let model = root().join("examples/models/mlp_digits.onnx");
    let inputs = dir.join("x.npz");
    support::copy_npz_member(&root().join("examples/data/digits_test.npz"), "x", &inputs);
    let n = support::read_npz(&inputs)["x"].shape()[0];
    let same = run_fp8c([
        "run".as_ref(),
        model.as_os_str(),
        "--inputs".as_ref(),
        inputs.as_os_str(),
        "--input-shape".as_ref(),
        format!("x={n}x64").as_ref(),
    ]);
    assert!(same.ok, "{}", same.stderr);
    let other = run_fp8c([
        "run".as_ref(),
        model.as_os_str(),
        "--inputs".as_ref(),
        inputs.as_os_str(),
        "--input-shape".as_ref(),
        "x=3x64".as_ref(),
    ]);
    assert!(!other.ok);
    assert!(
        other.stderr.contains("input \"x\" has shape") && other.stderr.contains("--input-shape"),
        "{}",
        other.stderr
    );
}

/// `-o`, `--plot` and `--log` in a folder that takes no new file (here `/proc`, which refuses
/// even root) fail before the first step, naming the flag and the folder; nothing is created.
#[test]
fn outputs_in_a_folder_it_cannot_write_fail_before_training() {
    let dir = scratch("cli_flags_unwritable");
    let model = root().join("examples/models/mlp_digits.onnx");
    let data = root().join("examples/data/digits_train.npz");
    for (flag, target) in [
        ("-o", "/proc/trained.onnx"),
        ("--plot", "/proc/loss.svg"),
        ("--log", "/proc/run.csv"),
    ] {
        let ck = dir.join(format!("ck{}", flag.trim_start_matches('-')));
        let r = run_fp8c([
            "train".as_ref(),
            model.as_os_str(),
            "--data".as_ref(),
            data.as_os_str(),
            "--labels".as_ref(),
            "y".as_ref(),
            "--steps".as_ref(),
            "200".as_ref(),
            "--quiet".as_ref(),
            "--checkpoint".as_ref(),
            ck.as_os_str(),
            flag.as_ref(),
            target.as_ref(),
        ]);
        assert!(!r.ok, "{flag} {target}: {}", r.stderr);
        assert!(
            r.stderr.contains(&format!("{flag} {target}")) && r.stderr.contains("/proc"),
            "{flag}: {}",
            r.stderr
        );
        assert!(
            !r.stderr.contains("steps in"),
            "{flag}: trained before failing: {}",
            r.stderr
        );
    }
}

/// A run in which every step was skipped (non-finite gradients) trains nothing: it exits
/// non-zero and writes no "trained" model, while its checkpoint keeps the state.
#[test]
fn a_run_whose_every_step_was_skipped_fails_and_writes_no_model() {
    let dir = scratch("cli_flags_all_skipped");
    let model = root().join("examples/models/mlp_digits.onnx");
    let data = root().join("examples/data/digits_train.npz");
    let out = dir.join("trained.onnx");
    let ck = dir.join("ck");
    let r = run_fp8c([
        "train".as_ref(),
        model.as_os_str(),
        "--data".as_ref(),
        data.as_os_str(),
        "--labels".as_ref(),
        "y".as_ref(),
        "--steps".as_ref(),
        "2".as_ref(),
        "--quiet".as_ref(),
        "--poison-step".as_ref(),
        "0".as_ref(),
        "--poison-step".as_ref(),
        "1".as_ref(),
        "--checkpoint".as_ref(),
        ck.as_os_str(),
        "-o".as_ref(),
        out.as_os_str(),
    ]);
    assert!(!r.ok, "{}", r.stderr);
    assert!(
        r.stderr.contains("every one of the 2 steps was skipped"),
        "{}",
        r.stderr
    );
    assert!(!out.exists(), "a model nothing trained was written");
    assert!(!r.stderr.contains("trained model:"), "{}", r.stderr);
    assert!(ck.join("meta.json").is_file(), "the state is kept");
    // One skipped step of two is a normal run.
    let r = run_fp8c([
        "train".as_ref(),
        model.as_os_str(),
        "--data".as_ref(),
        data.as_os_str(),
        "--labels".as_ref(),
        "y".as_ref(),
        "--steps".as_ref(),
        "2".as_ref(),
        "--quiet".as_ref(),
        "--poison-step".as_ref(),
        "0".as_ref(),
        "-o".as_ref(),
        out.as_os_str(),
    ]);
    assert!(r.ok, "{}", r.stderr);
    assert!(out.is_file());
}
