//! Nothing lost, nothing silently wrong, round three (issue #46): each defect a hostile run
//! found has a test here, named after the case, at the command line where a user meets it:
//! concurrent writers of a checkpoint, leftovers of killed or failed runs, writes that fail
//! mid-run (a full disk), scaling parameters
//! out of range, calibration on non-finite data, sizes checked before allocation, recipe
//! fallbacks reported, messages that keep their cause, per-tile overflow.

mod support;

use fp8c_ir::DType;
use fp8c_onnx::builder::ModelBuilder;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use support::{repo_root, run_fp8c, scratch};

fn mlp() -> String {
    repo_root()
        .join("examples/models/mlp_digits.onnx")
        .to_string_lossy()
        .into_owned()
}

/// `fp8c ARGS`; returns (ok, stderr).
fn fp8c(args: &[&str]) -> (bool, String) {
    let r = run_fp8c(args);
    (r.ok, r.stderr)
}

fn must_fail(args: &[&str], needles: &[&str]) -> String {
    let r = run_fp8c(args);
    assert!(
        !r.ok,
        "expected failure: fp8c {}\n{}",
        args.join(" "),
        r.stderr
    );
    assert_eq!(r.code, Some(1), "a clean error exits 1: {}", r.stderr);
    for n in needles {
        assert!(r.stderr.contains(n), "missing `{n}` in:\n{}", r.stderr);
    }
    assert!(
        !r.stderr.contains("internal compiler error"),
        "{}",
        r.stderr
    );
    assert!(!r.stderr.contains("memory allocation"), "{}", r.stderr);
    r.stderr
}

/// A small .npz of digits-like data (`x` f32[n,64], `y` i64[n]).
fn digits(path: &Path, n: usize) {
    let x: Vec<f32> = (0..n * 64).map(|i| ((i * 37) % 17) as f32 / 16.0).collect();
    let y: Vec<i64> = (0..n).map(|i| (i % 10) as i64).collect();
    let xt = fp8c_ir::Tensor::from_f32(vec![n as u64, 64], &x);
    let yt = fp8c_ir::Tensor::from_i64(vec![n as u64], &y);
    fp8c_session::npy::write_npz(path, &[("x", &xt), ("y", &yt)]).unwrap();
}

/// `x` f32[8,64] for the digits MLP with `patch` applied.
fn mlp_inputs(path: &Path, patch: impl FnOnce(&mut Vec<f32>)) {
    let mut x: Vec<f32> = (0..8 * 64).map(|i| ((i * 29) % 23) as f32 / 23.0).collect();
    patch(&mut x);
    let t = fp8c_ir::Tensor::from_f32(vec![x.len() as u64 / 64, 64], &x);
    fp8c_session::npy::write_npz(path, &[("x", &t)]).unwrap();
}

fn train_args(data: &str, extra: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = [
        "train",
        &mlp(),
        "--data",
        data,
        "--labels",
        "y",
        "--batch",
        "16",
        "--quiet",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    v.extend(extra.iter().map(|s| s.to_string()));
    v
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

fn write_model(d: &Path, name: &str, b: ModelBuilder) -> String {
    let p = d.join(name);
    b.write(&p).unwrap();
    p.to_string_lossy().into_owned()
}

// ------------------------------------------------------------ 1, 11: checkpoint directories

/// Case 1: two `fp8c train … --checkpoint ck` at once lost one run. The second is refused at
/// its start, naming the first's pid; the first's checkpoint is whole and resumes.
#[test]
fn two_trains_on_one_checkpoint_directory_the_second_is_refused_in_use_by_pid() {
    let d = scratch("round3-two-writers");
    let data = d.join("d.npz");
    digits(&data, 64);
    let (ck, log) = (d.join("ck"), d.join("log.csv"));
    let ds = data.to_str().unwrap();
    let first = support::fp8c()
        .args(train_args(
            ds,
            &[
                "--steps",
                "1000000",
                "--log",
                log.to_str().unwrap(),
                "--checkpoint",
                ck.to_str().unwrap(),
            ],
        ))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while std::fs::read_to_string(&log).map_or(0, |t| t.lines().count()) < 3 {
        assert!(
            start.elapsed() < Duration::from_secs(180),
            "the first run never started"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let pid = first.id();
    let second = train_args(ds, &["--steps", "3", "--checkpoint", ck.to_str().unwrap()]);
    must_fail(&strs(&second), &[&format!("in use by pid {pid}")]);
    // The same for a second run resuming from it.
    let resume = train_args(
        ds,
        &[
            "--steps",
            "3",
            "--checkpoint",
            ck.to_str().unwrap(),
            "--resume",
            ck.to_str().unwrap(),
        ],
    );
    must_fail(&strs(&resume), &["in use by pid"]);
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .unwrap()
            .success()
    );
    let out = first.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("interrupted after step"), "{err}");
    // Its checkpoint is whole, and the directory is free again.
    let meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(ck.join("meta.json")).unwrap()).unwrap();
    let step = meta["step"].as_u64().unwrap();
    let total = (step + 1).to_string();
    let cks = ck.to_str().unwrap();
    let (ok, err) = fp8c(&strs(&train_args(
        ds,
        &["--steps", &total, "--resume", cks, "--checkpoint", cks],
    )));
    assert!(ok, "{err}");
    assert!(err.contains(&format!("resuming at step {step}")), "{err}");
    assert!(!ck.join("fp8c.lock").exists(), "the lock goes with its run");
}

/// Case 11a: a kill -9 during a checkpoint write left a full-size temporary file forever.
/// What such a kill leaves (the write's temporary file next to a whole checkpoint) is removed
/// by the next run that takes the directory.
#[test]
fn kill_9_during_a_checkpoint_write_leaves_no_temporary_file_after_the_next_start() {
    let d = scratch("round3-killed-write");
    let data = d.join("d.npz");
    digits(&data, 64);
    let ck = d.join("ck");
    let (ds, cks) = (data.to_str().unwrap(), ck.to_str().unwrap());
    let (ok, err) = fp8c(&strs(&train_args(
        ds,
        &["--steps", "2", "--checkpoint", cks],
    )));
    assert!(ok, "{err}");
    let state_len = std::fs::metadata(ck.join("state.safetensors"))
        .unwrap()
        .len();
    let leftover = ck.join(".fp8c-Xk3q9Z.tmp");
    std::fs::write(&leftover, vec![7u8; state_len as usize]).unwrap();
    let (ok, err) = fp8c(&strs(&train_args(
        ds,
        &["--steps", "3", "--resume", cks, "--checkpoint", cks],
    )));
    assert!(ok, "{err}");
    assert!(
        !leftover.exists(),
        "the killed write's temporary file is gone"
    );
    let names: Vec<String> = std::fs::read_dir(&ck)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(names.iter().all(|n| !n.ends_with(".tmp")), "{names:?}");
}

/// Case 11b: `--checkpoint` with a backend that fails (or data that fails) left an empty
/// directory behind.
#[test]
fn checkpoint_with_a_backend_that_fails_leaves_no_directory() {
    let d = scratch("round3-failed-backend");
    let data = d.join("d.npz");
    digits(&data, 64);
    let ck = d.join("ck");
    let ds = data.to_str().unwrap();
    // This build has no MLIR (the default build): the backend fails after the checks.
    let args = train_args(
        ds,
        &[
            "--steps",
            "2",
            "--device",
            "mlir",
            "--checkpoint",
            ck.to_str().unwrap(),
        ],
    );
    let r = run_fp8c(strs(&args));
    assert!(!r.ok, "{}", r.stderr);
    assert!(!ck.exists(), "a run that never started leaves no directory");
    // Data without the labels named: the same.
    let bad = train_args(ds, &["--steps", "2", "--checkpoint", ck.to_str().unwrap()]);
    let mut bad = bad;
    let i = bad.iter().position(|a| a == "y").unwrap();
    bad[i] = "no_such_key".into();
    must_fail(&strs(&bad), &["no_such_key"]);
    assert!(!ck.exists());
    // A nested directory is created whole, and kept once a checkpoint is in it.
    let nested = d.join("a/b/ck");
    let (ok, err) = fp8c(&strs(&train_args(
        ds,
        &["--steps", "1", "--checkpoint", nested.to_str().unwrap()],
    )));
    assert!(ok, "{err}");
    assert!(nested.join("meta.json").is_file());
}

/// Case 11c: a directory holding someone else's meta.json had it overwritten.
#[test]
fn a_directory_holding_someone_elses_meta_json_is_refused_and_kept() {
    let d = scratch("round3-foreign-meta");
    let data = d.join("d.npz");
    digits(&data, 64);
    let ck = d.join("results");
    std::fs::create_dir_all(&ck).unwrap();
    let theirs = r#"{"experiment": "ablation 7", "accuracy": 0.91}"#;
    std::fs::write(ck.join("meta.json"), theirs).unwrap();
    let args = train_args(
        data.to_str().unwrap(),
        &["--steps", "2", "--checkpoint", ck.to_str().unwrap()],
    );
    must_fail(&strs(&args), &["meta.json", "not an fp8c checkpoint's"]);
    assert_eq!(
        std::fs::read_to_string(ck.join("meta.json")).unwrap(),
        theirs
    );
    assert!(!ck.join("state.safetensors").exists() && !ck.join("fp8c.lock").exists());
}

// ------------------------------------------------------------- 2, 3: writes that fail later

/// `fp8c train ARGS` with every file it writes limited to `kib` KiB (`ulimit -f`, SIGXFSZ
/// ignored, so a write past it fails with EFBIG as one on a full disk fails with ENOSPC);
/// returns (exit code, stderr).
fn train_with_file_limit(kib: u64, dir: &Path, args: &[&str]) -> (Option<i32>, String) {
    let bin = support::fp8c().get_program().to_owned();
    let out = Command::new("bash")
        .arg("-c")
        .arg(format!("trap '' XFSZ; ulimit -f {kib}; exec \"$0\" \"$@\""))
        .arg(bin)
        .arg("train")
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Case 3: the disk filled during training: the error named no file, and the last steps,
/// `-o` and the CSV's last row were lost. Here a periodic checkpoint cannot be written (the
/// state is larger than what the file system takes, the trained model is not): the error
/// names `--checkpoint` and the file, and the plot, the trained model and every CSV row of
/// the steps run are still written; no empty checkpoint directory stays.
#[test]
fn disk_full_during_training_names_the_file_and_still_writes_model_plot_and_log() {
    let d = scratch("round3-disk-full");
    let model = mlp();
    let data = repo_root().join("examples/data/digits_train.npz");
    let data = data.to_str().unwrap();
    let (code, err) = train_with_file_limit(
        600,
        &d,
        &[
            &model,
            "--data",
            data,
            "--labels",
            "y",
            "--steps",
            "20",
            "--quiet",
            "--checkpoint",
            "ck",
            "--checkpoint-every",
            "5",
            "-o",
            "out.onnx",
            "--log",
            "run.csv",
            "--plot",
            "loss.svg",
        ],
    );
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("--checkpoint ck/state.safetensors: cannot write"),
        "the flag and the file: {err}"
    );
    assert!(err.contains("-o out.onnx"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    let trained = std::fs::read(d.join("out.onnx")).expect("the trained model is written");
    assert_ne!(
        trained,
        std::fs::read(&model).unwrap(),
        "-o holds the trained weights"
    );
    assert!(d.join("loss.svg").is_file(), "the plot is written");
    let log = std::fs::read_to_string(d.join("run.csv")).unwrap();
    let rows: Vec<&str> = log.lines().collect();
    assert_eq!(rows.len(), 1 + 5, "the header and steps 0..4:\n{log}");
    assert!(rows[5].starts_with("4,"), "{log}");
    assert!(
        !d.join("ck").exists(),
        "the directory it made and never saved into is removed"
    );
}

/// Case 2/3: a write that failed after the last step (here `-o`, larger than the file system
/// takes; the state of the one trained bias is not) lost every step run. The error names
/// `-o` and the file, and the whole state is saved as on a signal: the same state a run with
/// `--checkpoint` writes.
#[test]
fn a_model_write_failing_after_training_saves_the_state_as_sigint_does() {
    let d = scratch("round3-o-full");
    let data = repo_root().join("examples/data/digits_train.npz");
    let model = mlp();
    let mut args = vec![
        model.as_str(),
        "--data",
        data.to_str().unwrap(),
        "--labels",
        "y",
        "--steps",
        "20",
        "--quiet",
        "--freeze",
        "fc1.*",
        "--freeze",
        "fc2.*",
        "--freeze",
        "fc3.weight",
    ];
    let (code, err) =
        train_with_file_limit(200, &d, &[args.as_slice(), &["-o", "out.onnx"]].concat());
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("-o out.onnx: cannot write"), "{err}");
    let saved = err
        .split("the whole training state after step 20 is in ")
        .nth(1)
        .and_then(|t| t.split(' ').next())
        .unwrap_or_else(|| panic!("the state is saved: {err}"));
    let ck = d.join("ck");
    args.insert(0, "train");
    args.extend(["--checkpoint", ck.to_str().unwrap()]);
    let r = run_fp8c(&args);
    assert!(r.ok, "{}", r.stderr);
    assert_eq!(
        std::fs::read(d.join(saved).join("state.safetensors")).unwrap(),
        std::fs::read(ck.join("state.safetensors")).unwrap(),
        "the state after the 20 steps"
    );
}

/// Case 2/3: the `--log` CSV that cannot take its next row (a full disk) left a torn row. The
/// error names `--log` and the file, and the file keeps whole rows only.
#[test]
fn a_log_on_a_full_disk_keeps_whole_rows_and_names_its_flag() {
    let d = scratch("round3-log-full");
    let data = repo_root().join("examples/data/digits_train.npz");
    let (code, err) = train_with_file_limit(
        2,
        &d,
        &[
            &mlp(),
            "--data",
            data.to_str().unwrap(),
            "--labels",
            "y",
            "--steps",
            "200",
            "--quiet",
            "--log",
            "run.csv",
        ],
    );
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("--log run.csv: cannot write"),
        "the flag and the file: {err}"
    );
    let log = std::fs::read_to_string(d.join("run.csv")).unwrap();
    assert!(log.ends_with('\n'), "no torn row at the end:\n{log}");
    for row in log.lines() {
        assert_eq!(row.split(',').count(), 7, "a whole row: {row:?}");
    }
    assert!(log.lines().count() > 10, "{log}");
}

// ------------------------------------------------------------------- 4: scaling ranges

/// Case 4: `--margin 100`, `--margin -10`, `--amax-epsilon 1e30` (flag or TOML) gave NaN
/// outputs from finite inputs and a training run that skipped every step. They are refused
/// before any work, saying the range.
#[test]
fn margin_100_minus_10_and_amax_epsilon_1e30_are_refused_from_flags_and_toml() {
    let d = scratch("round3-scale-ranges");
    let data = d.join("d.npz");
    digits(&data, 64);
    let x = d.join("x.npz");
    mlp_inputs(&x, |_| {});
    let (m, xs, out) = (mlp(), x.to_str().unwrap(), d.join("o.npz"));
    let os = out.to_str().unwrap();
    for flags in [
        &["--margin", "100"][..],
        &["--margin", "-10"],
        &["--recipe", "current", "--amax-epsilon", "1e30"],
    ] {
        let mut run = vec!["run", &m, "--inputs", xs, "-o", os];
        run.extend_from_slice(flags);
        must_fail(&run, &["is out of range"]);
        let train = train_args(data.to_str().unwrap(), flags);
        must_fail(&strs(&train), &["is out of range"]);
    }
    assert!(!out.exists());
    let cfg = d.join("r.toml");
    std::fs::write(&cfg, "[recipe]\nkind = \"delayed\"\nmargin = 100\n").unwrap();
    let train = train_args(data.to_str().unwrap(), &["--config", cfg.to_str().unwrap()]);
    must_fail(
        &strs(&train),
        &["margin = 100 is out of range", "between 0 and 14.81"],
    );
    std::fs::write(&cfg, "[recipe]\nkind = \"current\"\namax_epsilon = 1e30\n").unwrap();
    must_fail(
        &[
            "run",
            &m,
            "--inputs",
            xs,
            "-o",
            os,
            "--config",
            cfg.to_str().unwrap(),
        ],
        &["amax_epsilon", "at most 448"],
    );
    // The ends of the ranges still run.
    let (ok, err) = fp8c(&["run", &m, "--inputs", xs, "-o", os, "--margin", "14"]);
    assert!(ok, "{err}");
}

// ------------------------------------------------------------------------ 5: calibration

/// The scale of every FP8 QuantizeLinear/DequantizeLinear of an exported model.
fn qdq_scales(path: &Path) -> Vec<f32> {
    use prost::Message;
    let m = fp8c_onnx::proto::ModelProto::decode(std::fs::read(path).unwrap().as_slice()).unwrap();
    let g = m.graph.unwrap();
    let inits: std::collections::HashMap<&str, &fp8c_onnx::proto::TensorProto> =
        g.initializer.iter().map(|t| (t.name(), t)).collect();
    g.node
        .iter()
        .filter(|n| matches!(n.op_type(), "QuantizeLinear" | "DequantizeLinear"))
        .filter_map(|n| inits.get(n.input[1].as_str()))
        .flat_map(|t| {
            if t.float_data.is_empty() {
                t.raw_data()
                    .chunks_exact(4)
                    .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .collect::<Vec<_>>()
            } else {
                t.float_data.clone()
            }
        })
        .collect()
}

/// Case 5: `compile --emit onnx --calibrate` with one Inf left activation scales at 1.0 while
/// it printed "4 of 4 FP8 tensors calibrated"; all NaN, all zero or zero samples the same.
/// The Inf is left out (and reported with the finite count); no finite amax is an error.
#[test]
fn calibrate_with_one_inf_reports_finite_counts_and_all_nan_zero_or_no_samples_is_an_error() {
    let d = scratch("round3-calibration");
    let (m, out) = (mlp(), d.join("q.onnx"));
    let os = out.to_str().unwrap();
    let inf = d.join("inf.npz");
    mlp_inputs(&inf, |x| x[2 * 64 + 5] = f32::INFINITY);
    let (ok, err) = fp8c(&[
        "compile",
        &m,
        "--emit",
        "onnx",
        "--calibrate",
        inf.to_str().unwrap(),
        "-o",
        os,
    ]);
    assert!(ok, "{err}");
    assert!(err.contains("511 of 512 values finite"), "{err}");
    let scales = qdq_scales(&out);
    assert!(!scales.is_empty());
    assert!(
        scales.iter().all(|&s| s.is_finite() && s > 0.0 && s != 1.0),
        "every scale calibrated: {scales:?}"
    );
    for (name, patch, needle) in [
        (
            "nan",
            &(|x: &mut Vec<f32>| x.fill(f32::NAN)) as &dyn Fn(&mut Vec<f32>),
            "no finite value",
        ),
        ("zero", &|x: &mut Vec<f32>| x.fill(0.0), "only zeros"),
        ("empty", &|x: &mut Vec<f32>| x.clear(), "no values"),
    ] {
        let p = d.join(format!("{name}.npz"));
        mlp_inputs(&p, patch);
        must_fail(
            &[
                "compile",
                &m,
                "--emit",
                "onnx",
                "--calibrate",
                p.to_str().unwrap(),
                "-o",
                os,
            ],
            &["FP8 tensor", needle, "cannot be calibrated"],
        );
        // `fp8c run --calibrate` the same (zero samples there are a shape error: the run's
        // inputs fix the batch).
        if name != "empty" {
            let x = d.join("x.npz");
            mlp_inputs(&x, |_| {});
            must_fail(
                &[
                    "run",
                    &m,
                    "--inputs",
                    x.to_str().unwrap(),
                    "--calibrate",
                    p.to_str().unwrap(),
                    "--min-fp8-flops",
                    "0",
                ],
                &[needle],
            );
        }
    }
}

// --------------------------------------------------------------------------- 6, 7: sizes

/// Case 6: an output of rank 22,000 written to .npz panicked inside npyz.
#[test]
fn an_output_of_rank_22000_written_to_npz_is_an_error_naming_it() {
    let d = scratch("round3-rank");
    let ones: Vec<fp8c_ir::Dim> = (0..22000).map(|_| 1.into()).collect();
    let m = write_model(
        &d,
        "id.onnx",
        ModelBuilder::new()
            .input("x", DType::F32, &ones)
            .node("Identity", &["x"], &["y"])
            .output_untyped("y"),
    );
    // The input: one element of rank 22,000, as a version-2 .npy (a 4-byte header length).
    let dims = vec!["1"; 22000].join(", ");
    let mut header = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': ({dims}), }}");
    while (12 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut npy = b"\x93NUMPY\x02\x00".to_vec();
    npy.extend_from_slice(&(header.len() as u32).to_le_bytes());
    npy.extend_from_slice(header.as_bytes());
    npy.extend_from_slice(&1f32.to_le_bytes());
    let x = d.join("x.npy");
    std::fs::write(&x, npy).unwrap();
    let out = d.join("o.npz");
    let input = format!("x={}", x.display());
    must_fail(
        &["run", &m, "--input", &input, "-o", out.to_str().unwrap()],
        &["\"y\"", "rank 22000", "64 dimensions"],
    );
    assert!(!out.exists());
}

/// Case 7: Resize with scales 1e9, ConstantOfShape / Expand / Tile to huge sizes ran out of
/// memory with a backtrace (exit 134), Resize even in `compile`. They are errors naming the
/// node and the size, before anything is allocated.
#[test]
fn resize_by_1e9_and_expand_constant_of_shape_tile_to_2_pow_34_are_errors_before_allocating() {
    let d = scratch("round3-sizes");
    let resize = write_model(
        &d,
        "resize.onnx",
        ModelBuilder::new()
            .opset(19)
            .input("x", DType::F32, &[1.into(), 1.into(), 2.into(), 2.into()])
            .initializer_f32("sc", &[4], &[1.0, 1.0, 1e9, 1e9])
            .node("Resize", &["x", "", "sc"], &["y"])
            .name("up")
            .attr_str("mode", "linear")
            .output_untyped("y"),
    );
    must_fail(
        &[
            "compile",
            &resize,
            "-o",
            d.join("r.fp8ir").to_str().unwrap(),
        ],
        &["node \"up\" (Resize)", "elements"],
    );
    // 2^34 i64 elements: 128 GiB, more than any machine these tests run on may give one tensor.
    let n = 1i64 << 34;
    let models = [
        (
            "cos",
            ModelBuilder::new()
                .initializer_i64("s", &[1], &[n])
                .node("ConstantOfShape", &["s"], &["y"])
                .name("fill")
                .attr_tensor("value", &fp8c_ir::Tensor::from_i64(vec![1], &[3]))
                .output_untyped("y"),
        ),
        (
            "expand",
            ModelBuilder::new()
                .initializer_i64("v", &[1], &[3])
                .initializer_i64("s", &[1], &[n])
                .node("Expand", &["v", "s"], &["y"])
                .name("fill")
                .output_untyped("y"),
        ),
        (
            "tile",
            ModelBuilder::new()
                .initializer_i64("v", &[1], &[3])
                .initializer_i64("s", &[1], &[n])
                .node("Tile", &["v", "s"], &["y"])
                .name("fill")
                .output_untyped("y"),
        ),
    ];
    for (name, b) in models {
        let p = write_model(&d, &format!("{name}.onnx"), b);
        let out = d.join("o.npz");
        must_fail(
            &["run", &p, "-o", out.to_str().unwrap()],
            &[
                "node \"fill\"",
                "137438953472 bytes",
                "refused before allocating",
            ],
        );
    }
}

// --------------------------------------------------------------------- 9: fallbacks shown

/// Case 9: `--recipe block` on a GEMM with K < 128 quietly fell back to per-tensor scaling
/// while `--report` said "gemm with a weight operand". The fallback is in `--report`, the JSON
/// report and the run and train summaries.
#[test]
fn block_recipe_on_a_gemm_with_k_below_128_reports_its_per_tensor_fallback() {
    let d = scratch("round3-fallback");
    let m = mlp();
    let r = run_fp8c([
        "compile",
        &m,
        "--recipe",
        "block",
        "--input-shape",
        "x=16x64",
        "--report",
        "-o",
        "/dev/null",
    ]);
    assert!(r.ok, "{}", r.stderr);
    let row = r
        .stdout
        .lines()
        .find(|l| l.starts_with("fc1 "))
        .unwrap_or_default();
    assert!(
        row.contains("per-tensor scaling instead of block") && row.contains("K = 64"),
        "{}",
        r.stdout
    );
    let j = run_fp8c([
        "compile",
        &m,
        "--recipe",
        "block",
        "--input-shape",
        "x=16x64",
        "--report=json",
        "-o",
        "/dev/null",
    ]);
    assert!(j.ok, "{}", j.stderr);
    let v: serde_json::Value = serde_json::from_str(&j.stdout).unwrap();
    let fc1 = v["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == "fc1")
        .unwrap();
    assert!(
        fc1["scaling_fallback"].as_str().unwrap().contains("K = 64"),
        "{fc1}"
    );
    let fc2 = v["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == "fc2")
        .unwrap();
    assert!(
        fc2.get("scaling_fallback").is_none(),
        "fc2 (K = 256) is block-scaled: {fc2}"
    );
    let x = d.join("x.npz");
    mlp_inputs(&x, |_| {});
    let run = run_fp8c([
        "run",
        &m,
        "--inputs",
        x.to_str().unwrap(),
        "--recipe",
        "block",
    ]);
    assert!(run.ok, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("1 FP8 GEMM gets per-tensor scaling instead of block")
            && run.stderr.contains("(fc1)"),
        "{}",
        run.stderr
    );
    let data = d.join("d.npz");
    digits(&data, 64);
    let train = train_args(
        data.to_str().unwrap(),
        &["--steps", "1", "--recipe", "block", "--min-fp8-flops", "0"],
    );
    let (ok, err) = fp8c(&strs(&train));
    assert!(ok, "{err}");
    assert!(err.contains("per-tensor scaling instead of block"), "{err}");
}

// ----------------------------------------------------------------------- 10: messages

/// Case 10a: a model nested too deeply: the protobuf reason was cut off.
#[test]
fn protobuf_nesting_too_deep_keeps_its_reason() {
    fn varint(mut n: u64, out: &mut Vec<u8>) {
        loop {
            let b = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 {
                out.push(b);
                return;
            }
            out.push(b | 0x80);
        }
    }
    fn field(num: u64, payload: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        varint((num << 3) | 2, &mut v);
        varint(payload.len() as u64, &mut v);
        v.extend_from_slice(payload);
        v
    }
    // GraphProto.node → NodeProto.attribute → AttributeProto.g → GraphProto ..., 150 deep.
    let mut g = field(2, b"g");
    for _ in 0..150 {
        let mut attr = field(1, b"then_branch");
        attr.extend(field(6, &g));
        attr.extend([20 << 3, 5]);
        let mut node = field(4, b"If");
        node.extend(field(5, &attr));
        g = field(1, &node);
    }
    let mut model = vec![1 << 3, 8];
    model.extend(field(7, &g));
    let mut opset = field(1, b"");
    opset.extend([2 << 3, 17]);
    model.extend(field(8, &opset));
    let d = scratch("round3-deep");
    let p = d.join("deep.onnx");
    std::fs::write(&p, model).unwrap();
    let err = must_fail(
        &["compile", p.to_str().unwrap()],
        &["recursion limit reached"],
    );
    assert!(err.lines().all(|l| l.chars().count() < 1200), "{err}");
}

/// Case 10b: `--data` or `--text` naming a directory or a FIFO said "no such file".
#[test]
fn data_or_text_naming_a_directory_or_fifo_says_what_it_is() {
    let d = scratch("round3-data-kinds");
    let fifo = d.join("fifo");
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let (ds, fs) = (d.to_str().unwrap(), fifo.to_str().unwrap());
    must_fail(
        &strs(&train_args(ds, &["--steps", "1"])),
        &["--data", "is a directory"],
    );
    must_fail(
        &strs(&train_args(fs, &["--steps", "1"])),
        &["--data", "is not a regular file"],
    );
    let m = mlp();
    for (path, needle) in [(ds, "is a directory"), (fs, "is not a regular file")] {
        must_fail(
            &["train", &m, "--text", path, "--steps", "1", "--quiet"],
            &["--text", needle],
        );
    }
}

/// Case 10c: a constant Range with a NaN limit said "not static (give every input's shape)".
#[test]
fn a_constant_range_with_a_nan_limit_says_the_limit_is_nan() {
    let d = scratch("round3-range");
    let range = |limit: f32| {
        ModelBuilder::new()
            .initializer_f32("start", &[], &[0.0])
            .initializer_f32("limit", &[], &[limit])
            .initializer_f32("delta", &[], &[1.0])
            .node("Range", &["start", "limit", "delta"], &["y"])
            .name("r")
            .output_untyped("y")
    };
    let bad = write_model(&d, "nan.onnx", range(f32::NAN));
    let out = d.join("o.npz");
    must_fail(
        &["run", &bad, "-o", out.to_str().unwrap()],
        &["\"r\"", "the limit of Range is NaN"],
    );
    // The same model with a finite limit runs (the initializers are constants to it).
    let good = write_model(&d, "five.onnx", range(5.0));
    let (ok, err) = fp8c(&["run", &good, "-o", out.to_str().unwrap()]);
    assert!(ok, "{err}");
    let y = support::npy::read_npz(&out).unwrap();
    assert_eq!(y[0].1.to_f32_vec().unwrap(), [0.0, 1.0, 2.0, 3.0, 4.0]);
}

// ---------------------------------------------------------------- 12: per-tile overflow

/// Case 12: rowwise / block / mxfp8 with one input of 1e37 gave a row of NaN where f32 and
/// per-tensor FP8 are finite.
#[test]
fn rowwise_block_and_mxfp8_with_one_input_of_1e37_stay_finite_as_per_tensor_does() {
    let d = scratch("round3-overflow");
    let x = d.join("x.npz");
    mlp_inputs(&x, |x| x[2 * 64 + 5] = 1e37);
    let out = d.join("o.npz");
    let row2 = |flags: &[&str]| -> Vec<f32> {
        let m = mlp();
        let mut args = vec![
            "run",
            &m,
            "--inputs",
            x.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
        ];
        args.extend_from_slice(flags);
        let r = run_fp8c(&args);
        assert!(r.ok, "{flags:?}: {}", r.stderr);
        let y = support::npy::read_npz(&out).unwrap().remove(0).1;
        y.to_f32_vec().unwrap()[20..30].to_vec()
    };
    let f32_row = row2(&["--precision", "f32"]);
    let largest = f32_row.iter().fold(0f32, |m, v| m.max(v.abs()));
    assert!(largest.is_finite() && largest > 1e30, "{f32_row:?}");
    for recipe in ["current", "rowwise", "block", "mxfp8"] {
        let got = row2(&["--recipe", recipe, "--min-fp8-flops", "0", "--pad-to-16"]);
        assert!(got.iter().all(|v| v.is_finite()), "{recipe}: {got:?}");
        // The same large logits as f32, up to FP8's rounding.
        for (g, r) in got.iter().zip(&f32_row) {
            assert!(
                (g - r).abs() <= 0.25 * largest,
                "{recipe}: {got:?} vs f32 {f32_row:?}"
            );
        }
    }
}
