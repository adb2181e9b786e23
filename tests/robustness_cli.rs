//! Nothing lost, nothing silently wrong: each defect a hostile user found (issue #13) has a
//! test here, at the command line where the user meets it. Output files never replace what
//! the user did not name; bad targets, hyper-parameters and attributes are refused before
//! work starts; special files and oversized inputs are refused before anything is read into
//! memory; interrupted training leaves a checkpoint; messages print once, escaped and short.

mod support;

use fp8c_ir::DType;
use fp8c_onnx::builder::ModelBuilder;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use support::{repo_root, run_fp8c, scratch};

fn mlp() -> PathBuf {
    repo_root().join("examples/models/mlp_digits.onnx")
}

/// `fp8c ARGS`; returns (ok, stderr).
fn fp8c(args: &[&str]) -> (bool, String) {
    let r = run_fp8c(args);
    (r.ok, r.stderr)
}

fn must_fail(args: &[&str], needles: &[&str]) -> String {
    let (ok, err) = fp8c(args);
    assert!(!ok, "expected failure: fp8c {}\n{err}", args.join(" "));
    for n in needles {
        assert!(err.contains(n), "missing `{n}` in:\n{err}");
    }
    assert!(!err.contains("internal compiler error"), "{err}");
    err
}

/// A small .npz of digits-like data (`x` f32[n,64], `y` i64[n]) written with numpy's layout.
fn digits(path: &Path, n: usize) {
    let x: Vec<f32> = (0..n * 64).map(|i| ((i * 37) % 17) as f32 / 16.0).collect();
    let y: Vec<i64> = (0..n).map(|i| (i % 10) as i64).collect();
    let xt = fp8c_ir::Tensor::from_f32(vec![n as u64, 64], &x);
    let yt = fp8c_ir::Tensor::from_i64(vec![n as u64], &y);
    fp8c_session::npy::write_npz(path, &[("x", &xt), ("y", &yt)]).unwrap();
}

fn train_args<'a>(data: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut v = vec![
        "train",
        mlp_str(),
        "--data",
        data,
        "--labels",
        "y",
        "--batch",
        "16",
        "--quiet",
    ];
    v.extend_from_slice(extra);
    v
}

fn mlp_str() -> &'static str {
    Box::leak(mlp().to_string_lossy().into_owned().into_boxed_str())
}

// ---------------------------------------------------------------- data loss and escapes

#[test]
fn train_output_to_a_link_or_a_device_is_refused_before_any_step() {
    let d = scratch("robust-train-out");
    let data = d.join("d.npz");
    digits(&data, 64);
    let target = d.join("real.onnx");
    std::fs::write(&target, b"precious").unwrap();
    let link = d.join("link.onnx");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let (ds, ls) = (data.to_str().unwrap(), link.to_str().unwrap());
    let err = must_fail(
        &train_args(ds, &["--steps", "5", "-o", ls]),
        &["symbolic link"],
    );
    assert!(!err.contains("steps in"), "no step may run first:\n{err}");
    assert_eq!(std::fs::read(&target).unwrap(), b"precious");
    assert!(
        std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    // A device: refused (only /dev/null, meaning "discard", is accepted), never replaced.
    must_fail(
        &train_args(ds, &["--steps", "5", "-o", "/dev/zero"]),
        &["not a regular file"],
    );
    let (ok, err) = fp8c(&train_args(ds, &["--steps", "2", "-o", "/dev/null"]));
    assert!(ok, "{err}");
    let meta = std::fs::metadata("/dev/null").unwrap();
    assert!(!meta.is_file(), "/dev/null must stay a device");
}

#[test]
fn compile_over_its_own_input_is_refused_and_dev_null_gets_no_sidecar() {
    let d = scratch("robust-compile-self");
    let m = d.join("m.onnx");
    std::fs::copy(mlp(), &m).unwrap();
    let before = std::fs::read(&m).unwrap();
    let ms = m.to_str().unwrap();
    must_fail(
        &["compile", ms, "-o", ms],
        &["is the input", "refusing to overwrite"],
    );
    assert_eq!(std::fs::read(&m).unwrap(), before);
    let (ok, err) = fp8c(&["compile", ms, "--input-shape", "x=16x64", "-o", "/dev/null"]);
    assert!(ok, "{err}");
    assert!(!Path::new("/dev/null.safetensors").exists());
}

#[test]
fn a_failed_pass_dumps_to_a_private_fresh_file() {
    let d = scratch("robust-dump");
    // A symbolic K that the bound shape contradicts: canonicalize's inference fails.
    let ir = d.join("sym.fp8ir");
    std::fs::write(
        &ir,
        "graph @g(%x: f32[n,k]) params(%w: f32[8,4]) {\n  \
         %0: f32[n,4] = matmul %x, %w  # mm\n  \
         return %0 as \"y\"\n}\n",
    )
    .unwrap();
    let err = must_fail(
        &["compile", ir.to_str().unwrap(), "--input-shape", "x=2x5"],
        &[
            "pass `canonicalize` failed",
            "the last IR that verified is in",
        ],
    );
    let line = err
        .lines()
        .find(|l| l.contains("the last IR that verified is in"))
        .unwrap();
    let path = line.rsplit(' ').next().unwrap();
    assert!(
        !path.ends_with("fp8c-last-good.fp8ir"),
        "a fixed name: {path}"
    );
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(path).unwrap().permissions().mode();
    assert_eq!(mode & 0o077, 0, "the dump must be private: {mode:o}");
    assert!(std::fs::read_to_string(path).unwrap().contains("graph @g"));
    let _ = std::fs::remove_file(path);
}

#[test]
fn external_data_may_not_lead_outside_the_model_folder() {
    let d = scratch("robust-extdata");
    std::os::unix::fs::symlink("/etc/passwd", d.join("link.bin")).unwrap();
    let mut t = fp8c_onnx::tensor_to_proto("w", &fp8c_ir::Tensor::from_f32(vec![2], &[0.0, 0.0]));
    t.raw_data = None;
    t.data_location = Some(1);
    t.external_data = vec![fp8c_onnx::proto::StringStringEntryProto {
        key: Some("location".into()),
        value: Some("link.bin".into()),
    }];
    let b = ModelBuilder::new()
        .input("x", DType::F32, &[2.into()])
        .initializer_proto(t)
        .node("Add", &["x", "w"], &["y"])
        .output_untyped("y");
    let m = d.join("m.onnx");
    b.write(&m).unwrap();
    must_fail(
        &["compile", m.to_str().unwrap()],
        &["leads outside the model's directory"],
    );
}

#[test]
fn bad_plot_and_checkpoint_targets_are_refused_before_training() {
    let d = scratch("robust-targets");
    let data = d.join("d.npz");
    digits(&data, 64);
    let ds = data.to_str().unwrap();
    let err = must_fail(
        &train_args(ds, &["--steps", "5", "--plot", "loss.txt"]),
        &["must end in .svg or .png"],
    );
    assert!(!err.contains("steps in"), "{err}");
    let file = d.join("file");
    std::fs::write(&file, b"x").unwrap();
    must_fail(
        &train_args(
            ds,
            &["--steps", "5", "--checkpoint", file.to_str().unwrap()],
        ),
        &["not a directory"],
    );
}

#[test]
fn sigterm_finishes_the_step_and_leaves_a_checkpoint_that_resumes() {
    let d = scratch("robust-sigterm");
    let data = d.join("d.npz");
    digits(&data, 64);
    let ck = d.join("ck");
    let log = d.join("log.csv");
    let ds = data.to_str().unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_fp8c"))
        .args(train_args(
            ds,
            &["--steps", "1000000", "--log", log.to_str().unwrap()],
        ))
        .args(["--checkpoint", ck.to_str().unwrap()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait for a few steps to be logged, then ask it to stop.
    let start = Instant::now();
    loop {
        let rows = std::fs::read_to_string(&log)
            .map(|t| t.lines().count())
            .unwrap_or(0);
        if rows > 3 || start.elapsed() > Duration::from_secs(120) {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let pid = child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "an interrupted run exits non-zero");
    assert!(err.contains("interrupted after step"), "{err}");
    let meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(ck.join("meta.json")).unwrap()).unwrap();
    let step = meta["step"].as_u64().unwrap();
    assert!(step >= 1);
    // Every logged row is whole (line-buffered), one per step run.
    let text = std::fs::read_to_string(&log).unwrap();
    for line in text.lines().skip(1) {
        assert_eq!(line.split(',').count(), 7, "torn row: {line}");
    }
    // And the run continues from it.
    let total = (step + 2).to_string();
    let (ok, err) = fp8c(&train_args(
        ds,
        &["--steps", &total, "--resume", ck.to_str().unwrap()],
    ));
    assert!(ok, "{err}");
    assert!(err.contains(&format!("resuming at step {step}")), "{err}");
}

// ------------------------------------------------------------------ silent wrong results

#[test]
fn non_finite_or_absurd_hyper_parameters_are_refused_before_step_0() {
    let d = scratch("robust-hyper");
    let data = d.join("d.npz");
    digits(&data, 64);
    let ds = data.to_str().unwrap();
    for (flag, v) in [
        ("--lr", "nan"),
        ("--lr", "inf"),
        ("--lr", "1e30"),
        ("--lr", "-1"),
        ("--weight-decay", "nan"),
        ("--momentum", "nan"),
        ("--min-lr", "nan"),
    ] {
        let err = must_fail(&train_args(ds, &["--steps", "3", flag, v]), &[flag]);
        assert!(!err.contains("steps in"), "{flag} {v}: {err}");
    }
    must_fail(
        &[
            "compile",
            mlp_str(),
            "--recipe",
            "delayed",
            "--amax-history",
            "1000000000",
        ],
        &["amax_history_len must be between 1 and 65536"],
    );
    must_fail(
        &["compile", mlp_str(), "--margin", "1e308"],
        &["beyond the f32 range"],
    );
}

/// Writes a one-node model and returns its path.
fn one_node(d: &Path, name: &str, b: ModelBuilder) -> String {
    let p = d.join(name);
    b.write(&p).unwrap();
    p.to_string_lossy().into_owned()
}

#[test]
fn misplaced_or_mistyped_attributes_are_errors_naming_node_and_attribute() {
    let d = scratch("robust-attrs");
    let x = |b: ModelBuilder| b.input("x", DType::F32, &[2.into(), 3.into()]);
    let reduce = one_node(
        &d,
        "reduce.onnx",
        x(ModelBuilder::new().opset(18))
            .node("ReduceSum", &["x"], &["y"])
            .name("rs")
            .attr_ints("axes", &[1])
            .output_untyped("y"),
    );
    must_fail(
        &["compile", &reduce],
        &["node \"rs\" (ReduceSum)", "attribute `axes`", "as an input"],
    );
    let clip = one_node(
        &d,
        "clip.onnx",
        x(ModelBuilder::new().opset(13))
            .node("Clip", &["x"], &["y"])
            .name("c")
            .attr_float("min", 0.0)
            .output_untyped("y"),
    );
    must_fail(
        &["compile", &clip],
        &["node \"c\" (Clip)", "attribute `min`"],
    );
    let transpose = one_node(
        &d,
        "transpose.onnx",
        x(ModelBuilder::new().opset(13))
            .node("Transpose", &["x"], &["y"])
            .name("t")
            .attr_str("perm", "1,0")
            .output_untyped("y"),
    );
    must_fail(
        &["compile", &transpose],
        &["node \"t\" (Transpose)", "`perm` must be INTS, got STRING"],
    );
    let twice = one_node(
        &d,
        "twice.onnx",
        x(ModelBuilder::new().opset(13).opset_import("ai.onnx", 17))
            .node("Relu", &["x"], &["y"])
            .output_untyped("y"),
    );
    must_fail(&["compile", &twice], &["imports the ai.onnx opset twice"]);
    let unknown = one_node(
        &d,
        "unknown.onnx",
        x(ModelBuilder::new().opset(13))
            .node("Relu", &["x"], &["y"])
            .name("r")
            .attr_int("exporter_hint", 1)
            .output_untyped("y"),
    );
    let r = run_fp8c(["compile", &unknown]);
    assert!(r.ok, "{}", r.stderr);
    assert!(
        r.stderr.contains("warning:") && r.stderr.contains("exporter_hint"),
        "{}",
        r.stderr
    );
}

#[test]
fn an_empty_config_keeps_the_inference_default() {
    let d = scratch("robust-empty-config");
    let cfg = d.join("empty.toml");
    std::fs::write(&cfg, "").unwrap();
    let x = d.join("x.npz");
    let t = fp8c_ir::Tensor::from_f32(vec![16, 64], &vec![0.5; 16 * 64]);
    fp8c_session::npy::write_npz(&x, &[("x", &t)]).unwrap();
    let r = run_fp8c([
        "run",
        mlp_str(),
        "--inputs",
        x.to_str().unwrap(),
        "--config",
        cfg.to_str().unwrap(),
        "--min-fp8-flops",
        "0",
    ]);
    assert!(r.ok, "{}", r.stderr);
    assert!(r.stderr.contains("recipe current"), "{}", r.stderr);
    assert!(
        !r.stderr.contains("delayed scaling without --calibrate"),
        "{}",
        r.stderr
    );
}

#[test]
fn checkpoints_keep_an_exact_integer_step_and_refuse_another_model_or_damage() {
    let d = scratch("robust-ckpt");
    let data = d.join("d.npz");
    digits(&data, 64);
    let ds = data.to_str().unwrap();
    let ck = d.join("ck");
    let cks = ck.to_str().unwrap();
    let (ok, err) = fp8c(&train_args(ds, &["--steps", "3", "--checkpoint", cks]));
    assert!(ok, "{err}");
    // Python's safetensors reads the state; here: the header holds the dtypes.
    let meta_text = std::fs::read_to_string(ck.join("meta.json")).unwrap();
    let meta: serde_json::Value = serde_json::from_str(&meta_text).unwrap();
    assert_eq!(meta["step"].as_u64(), Some(3));
    assert_eq!(meta["format"].as_u64(), Some(2));
    // A step beyond 2^24 survives exactly (the graph's counter is f32; the checkpoint's is not).
    let big = meta_text.replace("\"step\": 3", "\"step\": 16777219");
    std::fs::write(ck.join("meta.json"), &big).unwrap();
    let (ok, err) = fp8c(&train_args(ds, &["--steps", "16777219", "--resume", cks]));
    assert!(ok, "{err}");
    assert!(err.contains("the checkpoint is at step 16777219"), "{err}");
    std::fs::write(ck.join("meta.json"), &meta_text).unwrap();
    // Another model: the same graph with another producer, so only its digest differs.
    let mut other_model = fp8c_onnx::decode_model(&std::fs::read(mlp()).unwrap()).unwrap();
    other_model.producer_name = Some("someone-else".into());
    let other = d.join("other.onnx");
    std::fs::write(&other, prost::Message::encode_to_vec(&other_model)).unwrap();
    let mut args = train_args(ds, &["--steps", "4", "--resume", cks]);
    let other_s = other.to_string_lossy().into_owned();
    args[1] = &other_s;
    must_fail(&args, &["made for another model"]);
    // Damage: one flipped byte in the state file.
    let state = ck.join("state.safetensors");
    let mut s = std::fs::read(&state).unwrap();
    let n = s.len();
    s[n - 1] ^= 0x40;
    std::fs::write(&state, &s).unwrap();
    must_fail(
        &train_args(ds, &["--steps", "4", "--resume", cks]),
        &["does not match meta.json"],
    );
}

/// A save killed between writing its state and its metadata (the window a kill -9 can hit):
/// the previous state is still there under the .prev name and the run resumes from it, with
/// the same losses as a run that was never interrupted.
#[test]
fn a_save_killed_between_state_and_metadata_resumes_from_the_previous_state() {
    let d = scratch("robust-ckpt-window");
    let data = d.join("d.npz");
    digits(&data, 64);
    let ds = data.to_str().unwrap();
    let (base, ck) = (d.join("base.csv"), d.join("ck"));
    let (ok, err) = fp8c(&train_args(
        ds,
        &["--steps", "6", "--log", base.to_str().unwrap()],
    ));
    assert!(ok, "{err}");
    let cks = ck.to_str().unwrap();
    let (ok, err) = fp8c(&train_args(ds, &["--steps", "3", "--checkpoint", cks]));
    assert!(ok, "{err}");
    // What a save at step 4 killed after its state rename leaves: the step-3 state under the
    // .prev name, a newer state file, step 3's metadata.
    let state = ck.join("state.safetensors");
    std::fs::rename(&state, ck.join("state.prev.safetensors")).unwrap();
    let mut newer = std::fs::read(ck.join("state.prev.safetensors")).unwrap();
    let n = newer.len();
    newer[n - 1] ^= 0x01;
    std::fs::write(&state, &newer).unwrap();
    let resumed = d.join("resumed.csv");
    let (ok, err) = fp8c(&train_args(
        ds,
        &[
            "--steps",
            "6",
            "--resume",
            cks,
            "--log",
            resumed.to_str().unwrap(),
        ],
    ));
    assert!(ok, "{err}");
    assert!(err.contains("write was interrupted"), "{err}");
    assert_eq!(
        support::csv_column(&resumed, "loss"),
        support::csv_column(&base, "loss")[3..].to_vec()
    );
    // The folder is whole again: the state matches the metadata, no .prev is left.
    assert!(!ck.join("state.prev.safetensors").exists());
}

// --------------------------------------------------------------- panics, hangs, memory

#[test]
fn a_closed_stdout_ends_quietly() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_fp8c"))
        .args(["inspect", mlp_str()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("internal compiler error"), "{err}");
    assert!(err.trim().is_empty(), "nothing to say: {err}");
}

#[test]
fn an_archive_claiming_a_huge_array_is_refused_before_inflating() {
    let d = scratch("robust-npz-bomb");
    // 1. An archive whose directory declares a 3 GiB member: refused from the declared size.
    let p = d.join("bomb.npz");
    {
        let f = std::fs::File::create(&p).unwrap();
        let mut z = zip::ZipWriter::new(f);
        let opts = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Stored);
        z.start_file("x.npy", opts).unwrap();
        z.write_all(&[0u8; 64]).unwrap();
        z.finish().unwrap();
    }
    let mut bytes = std::fs::read(&p).unwrap();
    let cd = bytes
        .windows(4)
        .rposition(|w| w == [0x50, 0x4b, 0x01, 0x02])
        .expect("a central directory entry");
    bytes[cd + 24..cd + 28].copy_from_slice(&0xC000_0000u32.to_le_bytes());
    std::fs::write(&p, &bytes).unwrap();
    let start = Instant::now();
    must_fail(
        &["run", mlp_str(), "--inputs", p.to_str().unwrap()],
        &["more than the"],
    );
    // 2. An array whose header declares 20 GiB over a few bytes of data: refused, not allocated.
    let q = d.join("short.npz");
    {
        let f = std::fs::File::create(&q).unwrap();
        let mut z = zip::ZipWriter::new(f);
        let opts = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Deflated);
        z.start_file("x.npy", opts).unwrap();
        let mut header =
            "{'descr': '<f4', 'fortran_order': False, 'shape': (1073741824, 5), }".to_string();
        while !(10 + header.len() + 1).is_multiple_of(64) {
            header.push(' ');
        }
        header.push('\n');
        z.write_all(b"\x93NUMPY\x01\x00").unwrap();
        z.write_all(&(header.len() as u16).to_le_bytes()).unwrap();
        z.write_all(header.as_bytes()).unwrap();
        z.write_all(&[0u8; 4096]).unwrap();
        z.finish().unwrap();
    }
    must_fail(
        &["run", mlp_str(), "--inputs", q.to_str().unwrap()],
        &["truncated"],
    );
    assert!(start.elapsed() < Duration::from_secs(20));
}

#[test]
fn special_files_are_refused_as_models_and_inputs() {
    must_fail(&["compile", "/dev/zero"], &["not a regular file"]);
    must_fail(&["inspect", "/dev/zero"], &["not a regular file"]);
    let d = scratch("robust-fifo");
    let fifo = d.join("in.npz");
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let start = Instant::now();
    must_fail(
        &["run", mlp_str(), "--inputs", fifo.to_str().unwrap()],
        &["not a regular file"],
    );
    assert!(start.elapsed() < Duration::from_secs(20));
}

#[test]
fn plot_of_extreme_values_returns_an_error_quickly() {
    let d = scratch("robust-plot");
    let csv = d.join("log.csv");
    std::fs::write(&csv, "step,loss\n0,1e308\n1,-1e308\n").unwrap();
    let out = d.join("p.svg");
    let start = Instant::now();
    must_fail(
        &[
            "plot",
            csv.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
            "--smooth",
            "0",
        ],
        &["more than a float can hold"],
    );
    assert!(start.elapsed() < Duration::from_secs(20));
}

// --------------------------------------------------------------------------- messages

#[test]
fn messages_print_once_escaped_and_short() {
    let d = scratch("robust-messages");
    // A path with a control character is echoed escaped.
    let weird = d.join("bad\u{1b}[31mname.onnx");
    std::fs::write(&weird, b"not a model").unwrap();
    let err = must_fail(&["compile", weird.to_str().unwrap()], &["\\u{1b}"]);
    assert!(!err.contains('\u{1b}'), "{err}");
    // An import error is printed once.
    assert_eq!(err.matches("not a valid ONNX model").count(), 1, "{err}");
    // A config with an enormous line is not echoed whole.
    let cfg = d.join("big.toml");
    std::fs::write(
        &cfg,
        format!("[recipe]\nkind = \"{}\"\n", "x".repeat(200_000)),
    )
    .unwrap();
    let err = must_fail(
        &["compile", mlp_str(), "--config", cfg.to_str().unwrap()],
        &["big.toml"],
    );
    assert!(err.len() < 2_000, "{} bytes of message", err.len());
    // `--report` takes its format only with '=': the model path is not read as one.
    let r = run_fp8c(["compile", "--report", mlp_str(), "--input-shape", "x=16x64"]);
    assert!(r.ok, "{}", r.stderr);
    assert!(
        r.stdout.contains("GEMM") || r.stdout.contains("gemm"),
        "{}",
        r.stdout
    );
    // Negative values are values, and the message names the flag.
    let data = d.join("d.npz");
    digits(&data, 32);
    must_fail(
        &train_args(data.to_str().unwrap(), &["--lr", "-1"]),
        &["--lr -1: must be in"],
    );
    // The user's own names: --labels, not the internal input name.
    let err = must_fail(
        &train_args(data.to_str().unwrap(), &["--loss", "mse"]),
        &["--labels y"],
    );
    assert!(!err.contains("train.labels"), "{err}");
}

// ---------------------------------------------------------------- silent wrong results

/// One +inf in the input: f32 gives NaN in that row, and so must FP8 — under current scaling
/// and under calibrated delayed scaling — never finite, plausible numbers (issue #13).
#[test]
fn an_infinite_input_gives_nan_in_fp8_as_in_f32() {
    let d = scratch("robust-inf-input");
    let (n, k) = (512usize, 64usize);
    let clean: Vec<f32> = (0..n * k)
        .map(|i| ((i * 37) % 17) as f32 / 8.0 - 1.0)
        .collect();
    let mut dirty = clean.clone();
    dirty[3 * k + 5] = f32::INFINITY;
    let write = |name: &str, v: &[f32]| {
        let p = d.join(name);
        let t = fp8c_ir::Tensor::from_f32(vec![n as u64, k as u64], v);
        fp8c_session::npy::write_npz(&p, &[("x", &t)]).unwrap();
        p
    };
    let (clean, dirty) = (write("clean.npz", &clean), write("dirty.npz", &dirty));
    let nonfinite_rows = |args: &[&str]| -> Vec<usize> {
        let out = d.join("out.npz");
        let mut a = vec!["run", mlp_str(), "--inputs", dirty.to_str().unwrap()];
        a.extend_from_slice(args);
        a.extend_from_slice(&["-o", out.to_str().unwrap()]);
        let (ok, err) = fp8c(&a);
        assert!(ok, "{err}");
        let y = support::read_npz(&out)["logits"].to_f32_vec().unwrap();
        let mut rows: Vec<usize> = (0..y.len())
            .filter(|&i| !y[i].is_finite())
            .map(|i| i / 10)
            .collect();
        rows.dedup();
        rows
    };
    assert_eq!(nonfinite_rows(&["--precision", "f32"]), [3]);
    // The first two GEMMs run in FP8 at this batch (the report says so).
    assert_eq!(
        nonfinite_rows(&["--precision", "fp8", "--recipe", "current"]),
        [3]
    );
    assert_eq!(
        nonfinite_rows(&[
            "--precision",
            "fp8",
            "--recipe",
            "delayed",
            "--calibrate",
            clean.to_str().unwrap()
        ]),
        [3]
    );
}

/// Malformed recurrent, classic-ML and contrib nodes are clean errors naming the node and
/// what is wrong (no panic): an LSTM whose W does not match hidden_size, an SVM with a
/// negative support-vector count, a LabelEncoder with an empty default tensor, a
/// MatMulNBits whose B is too short or whose g_idx misses rows, and GatherBlockQuantized tables with scales of the wrong
/// shape or an unsupported bit width.
#[test]
fn malformed_rnn_ml_and_contrib_nodes_are_errors() {
    let d = scratch("robust-new-ops");
    let lstm = one_node(
        &d,
        "lstm.onnx",
        ModelBuilder::new()
            .opset(17)
            .input("x", DType::F32, &[5.into(), 2.into(), 3.into()])
            .initializer_f32("w", &[1, 8, 3], &[0.1; 24])
            .initializer_f32("r", &[1, 8, 2], &[0.1; 16])
            .node("LSTM", &["x", "w", "r"], &["y"])
            .name("lstm")
            .attr_int("hidden_size", 3)
            .output_untyped("y"),
    );
    must_fail(
        &["compile", &lstm],
        &["node \"lstm\" (LSTM)", "input W", "[1, 12, 3]"],
    );
    let svm = one_node(
        &d,
        "svm.onnx",
        ModelBuilder::new()
            .opset(17)
            .opset_import("ai.onnx.ml", 1)
            .input("x", DType::F32, &[2.into(), 2.into()])
            .node("SVMClassifier", &["x"], &["label", "scores"])
            .domain("ai.onnx.ml")
            .name("svc")
            .attr_ints("classlabels_ints", &[0, 1])
            .attr_ints("vectors_per_class", &[-1, 2])
            .attr_floats("coefficients", &[1.0, 1.0])
            .attr_floats("rho", &[0.0])
            .attr_floats("support_vectors", &[0.0; 4])
            .output_untyped("label"),
    );
    must_fail(
        &["compile", &svm],
        &["node \"svc\" (SVMClassifier)", "negative count"],
    );
    let encoder = one_node(
        &d,
        "encoder.onnx",
        ModelBuilder::new()
            .opset(17)
            .opset_import("ai.onnx.ml", 4)
            .input("x", DType::I64, &[3.into()])
            .node("LabelEncoder", &["x"], &["y"])
            .domain("ai.onnx.ml")
            .name("enc")
            .attr_ints("keys_int64s", &[1, 2])
            .attr_ints("values_int64s", &[5, 6])
            .attr_tensor("default_tensor", &fp8c_ir::Tensor::from_i64(vec![0], &[]))
            .output_untyped("y"),
    );
    must_fail(
        &["compile", &encoder],
        &["node \"enc\" (LabelEncoder)", "`default_tensor` is empty"],
    );
    // MatMulNBits with K = 32, N = 4 in one block of 32: B of `b_len` bytes (64 is right) and
    // g_idx of `g_len` rows when given (32 is right).
    let nbits = |b_len: u64, g_len: Option<u64>| {
        let mut m = ModelBuilder::new()
            .opset(17)
            .opset_import("com.microsoft", 1)
            .input("a", DType::F32, &[2.into(), 32.into()])
            .initializer(
                "b",
                &fp8c_ir::Tensor::from_f64_as(
                    DType::U8,
                    vec![4, 1, b_len / 4],
                    &vec![17.0; b_len as usize],
                )
                .unwrap(),
            )
            .initializer_f32("s", &[4], &[0.5; 4]);
        let mut ins = vec!["a", "b", "s"];
        if let Some(g) = g_len {
            m = m.initializer(
                "g",
                &fp8c_ir::Tensor::from_i64(vec![g], &vec![0; g as usize]),
            );
            ins.extend(["", "g"]);
        }
        m.node("MatMulNBits", &ins, &["y"])
            .domain("com.microsoft")
            .name("mm4")
            .attr_int("K", 32)
            .attr_int("N", 4)
            .attr_int("block_size", 32)
            .output_untyped("y")
    };
    let short = one_node(&d, "nbits.onnx", nbits(32, None));
    must_fail(
        &["compile", &short],
        &["node \"mm4\" (MatMulNBits)", "B must be uint8 [4, 1, 16]"],
    );
    let g_idx = one_node(&d, "nbits_g_idx.onnx", nbits(64, Some(31)));
    must_fail(
        &["compile", &g_idx],
        &[
            "node \"mm4\" (MatMulNBits)",
            "g_idx has 31 entries for K = 32",
        ],
    );
    // A packed 4-bit table of 4 × 32 codes has 2 blocks of 16 a row, not 1.
    let gbq = |scales: &[u64], bits: i64| {
        let n: u64 = scales.iter().product();
        ModelBuilder::new()
            .opset(21)
            .opset_import("com.microsoft", 1)
            .input("ids", DType::I64, &[3.into()])
            .initializer(
                "data",
                &fp8c_ir::Tensor::from_f64_as(DType::U8, vec![4, 16], &[17.0; 64]).unwrap(),
            )
            .initializer_f32("s", scales, &vec![0.5; n as usize])
            .node("GatherBlockQuantized", &["data", "ids", "s"], &["y"])
            .domain("com.microsoft")
            .name("emb")
            .attr_int("block_size", 16)
            .attr_int("bits", bits)
            .output_untyped("y")
    };
    let bad_scales = one_node(&d, "gbq.onnx", gbq(&[4, 1], 4));
    must_fail(
        &["compile", &bad_scales],
        &[
            "node \"emb\" (GatherBlockQuantized)",
            "scales [4, 1] must be the data's shape [4, 32]",
        ],
    );
    // Zero points of a lower rank than the table (packed: 2 bytes hold the 4 of the first row).
    let bad_zp = one_node(
        &d,
        "gbq_zp.onnx",
        gbq(&[4, 2], 4)
            .initializer(
                "zp",
                &fp8c_ir::Tensor::from_f64_as(DType::U8, vec![2], &[8.0; 2]).unwrap(),
            )
            .node("GatherBlockQuantized", &["data", "ids", "s", "zp"], &["y2"])
            .domain("com.microsoft")
            .name("emb_zp")
            .attr_int("block_size", 16)
            .output_untyped("y2"),
    );
    must_fail(
        &["compile", &bad_zp],
        &[
            "node \"emb_zp\" (GatherBlockQuantized)",
            "zero_points [4] must have the scales' shape [4, 2]",
        ],
    );
    let bad_bits = one_node(&d, "gbq_bits.onnx", gbq(&[4, 1], 2));
    must_fail(
        &["compile", &bad_bits],
        &[
            "node \"emb\" (GatherBlockQuantized)",
            "bits = 2 is not supported",
        ],
    );
}

/// Malformed opset-23 attention nodes are clean errors naming the node and what is wrong:
/// 3-D inputs without head counts, query heads that no key/value head count divides, an
/// odd rotary dimension and a cos cache of the wrong width.
#[test]
fn malformed_attention_and_rotary_nodes_are_errors() {
    let d = scratch("robust-attention");
    let f = |n: u64| fp8c_ir::Dim::Known(n);
    let attention = |name: &str, q: u64, kv: u64, three_d: bool| {
        let dims = |h: u64| {
            if three_d {
                vec![f(2), f(4), f(16)]
            } else {
                vec![f(2), f(h), f(4), f(8)]
            }
        };
        one_node(
            &d,
            name,
            ModelBuilder::new()
                .opset(23)
                .input("q", DType::F32, &dims(q))
                .input("k", DType::F32, &dims(kv))
                .input("v", DType::F32, &dims(kv))
                .node("Attention", &["q", "k", "v"], &["y"])
                .name("attn")
                .output_untyped("y"),
        )
    };
    must_fail(
        &["compile", &attention("att3d.onnx", 2, 2, true)],
        &[
            "node \"attn\" (Attention)",
            "`q_num_heads` and `kv_num_heads`",
        ],
    );
    must_fail(
        &["compile", &attention("gqa.onnx", 3, 2, false)],
        &[
            "node \"attn\" (Attention)",
            "3 query heads cannot share 2 key/value heads",
        ],
    );
    let rotary = |name: &str, cache: u64, dim: i64| {
        one_node(
            &d,
            name,
            ModelBuilder::new()
                .opset(23)
                .input("x", DType::F32, &[f(1), f(2), f(3), f(8)])
                .input("c", DType::F32, &[f(1), f(3), f(cache)])
                .input("s", DType::F32, &[f(1), f(3), f(cache)])
                .node("RotaryEmbedding", &["x", "c", "s"], &["y"])
                .name("rope")
                .attr_int("rotary_embedding_dim", dim)
                .output_untyped("y"),
        )
    };
    must_fail(
        &["compile", &rotary("odd.onnx", 4, 3)],
        &[
            "node \"rope\" (RotaryEmbedding)",
            "rotary_embedding_dim 3 must be even",
        ],
    );
    must_fail(
        &["compile", &rotary("cache.onnx", 3, 0)],
        &[
            "node \"rope\" (RotaryEmbedding)",
            "cos_cache (at the positions) has type f32[1,3,3]",
        ],
    );
}

/// Malformed com.microsoft attention nodes (onnxruntime's transformer optimizer and dynamic
/// quantizer write them) are clean errors naming the node and the bad value: a missing
/// `num_heads`, hidden sizes it does not divide, `do_rotary`, a 4-D or wrongly sized mask,
/// unequal Q and K sizes, MultiHeadAttention's `[3·B + 2]` mask and a packed query with a
/// key, and an EmbedLayerNormalization with segment ids but no segment table.
#[test]
fn malformed_com_microsoft_attention_nodes_are_errors() {
    let d = scratch("robust-ms-attention");
    let f = |n: u64| fp8c_ir::Dim::Known(n);
    let attention = |file: &str, cols: usize, attrs: &[(&str, i64)], mask: Option<&[u64]>| {
        let mut b = ModelBuilder::new()
            .opset(17)
            .opset_import("com.microsoft", 1)
            .input("x", DType::F32, &[f(2), f(4), f(16)])
            .initializer_f32("w", &[16, cols as u64], &vec![0.1; 16 * cols])
            .initializer_f32("b", &[cols as u64], &vec![0.0; cols]);
        let mut ins = vec!["x", "w", "b"];
        if let Some(m) = mask {
            let dims: Vec<_> = m.iter().map(|&n| f(n)).collect();
            b = b.input("m", DType::I32, &dims);
            ins.push("m");
        }
        let mut b = b
            .node("Attention", &ins, &["y"])
            .domain("com.microsoft")
            .name("att");
        for &(k, v) in attrs {
            b = b.attr_int(k, v);
        }
        one_node(&d, file, b.output_untyped("y"))
    };
    let node = "node \"att\" (Attention)";
    for (file, cols, attrs, mask, want) in [
        (
            "heads.onnx",
            48,
            &[][..],
            None,
            "attribute `num_heads` is required",
        ),
        (
            "divide.onnx",
            48,
            &[("num_heads", 5)][..],
            None,
            "multiples of num_heads = 5",
        ),
        (
            "rotary.onnx",
            48,
            &[("num_heads", 2), ("do_rotary", 1)][..],
            None,
            "`do_rotary` = 1 is not supported",
        ),
        (
            "mask4d.onnx",
            48,
            &[("num_heads", 2)][..],
            Some(&[2, 1, 4, 4][..]),
            "4-D (Megatron) masks are not supported",
        ),
        (
            "mask1d.onnx",
            48,
            &[("num_heads", 2)][..],
            Some(&[3][..]),
            "a 1-D mask holds batch_size (2) or 2·batch_size positions",
        ),
        (
            "mask2d.onnx",
            48,
            &[("num_heads", 2)][..],
            Some(&[2, 5][..]),
            "its last axis must be the total key length 4",
        ),
        (
            "cols.onnx",
            40,
            &[("num_heads", 2)][..],
            None,
            "40 columns, not three equal Q, K and V parts",
        ),
    ] {
        must_fail(
            &["compile", &attention(file, cols, attrs, mask)],
            &[node, want],
        );
    }
    let sizes = one_node(
        &d,
        "sizes.onnx",
        ModelBuilder::new()
            .opset(17)
            .opset_import("com.microsoft", 1)
            .input("x", DType::F32, &[f(2), f(4), f(16)])
            .initializer_f32("w", &[16, 40], &[0.1; 640])
            .node("Attention", &["x", "w"], &["y"])
            .domain("com.microsoft")
            .name("att")
            .attr_int("num_heads", 2)
            .attr_ints("qkv_hidden_sizes", &[16, 8, 16])
            .output_untyped("y"),
    );
    must_fail(
        &["compile", &sizes],
        &[
            node,
            "qkv_hidden_sizes [16, 8, 16] must be three positive sizes",
        ],
    );
    let mha = |file: &str, query: &[u64], mask: &[u64]| {
        let q: Vec<_> = query.iter().map(|&n| f(n)).collect();
        let m: Vec<_> = mask.iter().map(|&n| f(n)).collect();
        one_node(
            &d,
            file,
            ModelBuilder::new()
                .opset(17)
                .opset_import("com.microsoft", 1)
                .input("q", DType::F32, &q)
                .input("k", DType::F32, &[f(2), f(4), f(16)])
                .input("v", DType::F32, &[f(2), f(4), f(16)])
                .input("m", DType::I32, &m)
                .node("MultiHeadAttention", &["q", "k", "v", "", "m"], &["y"])
                .domain("com.microsoft")
                .name("mha")
                .attr_int("num_heads", 2)
                .output_untyped("y"),
        )
    };
    must_fail(
        &["compile", &mha("mha_mask.onnx", &[2, 4, 16], &[8])],
        &[
            "node \"mha\" (MultiHeadAttention)",
            "the [3·batch + 2] format",
        ],
    );
    must_fail(
        &["compile", &mha("mha_packed.onnx", &[2, 4, 2, 3, 8], &[2])],
        &[
            "node \"mha\" (MultiHeadAttention)",
            "a packed QKV query (5-D) takes no key or value input",
        ],
    );
    let embed = one_node(
        &d,
        "embed.onnx",
        ModelBuilder::new()
            .opset(17)
            .opset_import("com.microsoft", 1)
            .input("ids", DType::I32, &[f(2), f(4)])
            .input("seg", DType::I32, &[f(2), f(4)])
            .initializer_f32("word", &[10, 8], &[0.1; 80])
            .initializer_f32("pos", &[10, 8], &[0.1; 80])
            .initializer_f32("g", &[8], &[1.0; 8])
            .initializer_f32("b", &[8], &[0.0; 8])
            .node(
                "EmbedLayerNormalization",
                &["ids", "seg", "word", "pos", "", "g", "b"],
                &["y"],
            )
            .domain("com.microsoft")
            .name("emb")
            .output_untyped("y"),
    );
    must_fail(
        &["compile", &embed],
        &[
            "node \"emb\" (EmbedLayerNormalization)",
            "segment_ids and segment_embedding must be given together",
        ],
    );
}

/// Malformed com.microsoft GroupQueryAttention nodes (onnxruntime-genai's attention) are clean
/// errors naming the node and the bad value: kv_num_heads that does not divide num_heads, a
/// packed query whose width is not whole heads, rotary without its caches, and the
/// attention_bias input it does not take.
#[test]
fn malformed_group_query_attention_nodes_are_errors() {
    let d = scratch("robust-gqa");
    let f = |n: u64| fp8c_ir::Dim::Known(n);
    let gqa = |file: &str, width: u64, attrs: &[(&str, i64)], bias: bool| {
        let mut ins = vec!["q", "", "", "", "", "lens", "total"];
        let mut b = ModelBuilder::new()
            .opset(21)
            .opset_import("com.microsoft", 1)
            .input("q", DType::F32, &[f(1), f(4), f(width)])
            .input("lens", DType::I32, &[f(1)])
            .input("total", DType::I32, &[]);
        if bias {
            b = b.input("bias", DType::F32, &[f(1), f(1), f(4), f(4)]);
            ins.extend(["", "", "", "bias"]);
        }
        let mut b = b
            .node("GroupQueryAttention", &ins, &["y"])
            .domain("com.microsoft")
            .name("gqa");
        for &(k, v) in attrs {
            b = b.attr_int(k, v);
        }
        one_node(&d, file, b.output_untyped("y"))
    };
    let node = "node \"gqa\" (GroupQueryAttention)";
    let heads = [("num_heads", 4), ("kv_num_heads", 2)];
    for (file, width, attrs, bias, want) in [
        (
            "divide.onnx",
            64,
            &[("num_heads", 4), ("kv_num_heads", 3)][..],
            false,
            "num_heads 4 must be a multiple of kv_num_heads 3",
        ),
        (
            "width.onnx",
            60,
            &heads[..],
            false,
            "packed query width 60 is not (num_heads + 2·kv_num_heads = 8) · head_size",
        ),
        (
            "rotary.onnx",
            64,
            &[("num_heads", 4), ("kv_num_heads", 2), ("do_rotary", 1)][..],
            false,
            "do_rotary = 1 needs the cos_cache and sin_cache inputs",
        ),
        (
            "bias.onnx",
            64,
            &heads[..],
            true,
            "the attention_bias input is not supported",
        ),
    ] {
        must_fail(&["compile", &gqa(file, width, attrs, bias)], &[node, want]);
    }
}

/// What onnxruntime's graph optimizer saves, malformed: a FusedConv activation fp8c does not
/// have and a FusedMatMul batch transpose are errors naming the node and the value.
#[test]
fn unsupported_onnxruntime_graph_fusions_are_errors() {
    let d = scratch("robust-ort-graph");
    let f = |n: u64| fp8c_ir::Dim::Known(n);
    let conv = one_node(
        &d,
        "fused_conv.onnx",
        ModelBuilder::new()
            .opset(17)
            .opset_import("com.microsoft", 1)
            .input("x", DType::F32, &[f(1), f(2), f(4), f(4)])
            .initializer_f32("w", &[3, 2, 1, 1], &[0.1; 6])
            .node("FusedConv", &["x", "w"], &["y"])
            .domain("com.microsoft")
            .name("fc")
            .attr_str("activation", "Elu")
            .output_untyped("y"),
    );
    must_fail(
        &["compile", &conv],
        &[
            "node \"fc\" (FusedConv)",
            "activation \"Elu\" is not supported",
        ],
    );
    let matmul = one_node(
        &d,
        "fused_matmul.onnx",
        ModelBuilder::new()
            .opset(17)
            .opset_import("com.microsoft", 1)
            .input("a", DType::F32, &[f(2), f(3), f(4)])
            .input("b", DType::F32, &[f(2), f(4), f(5)])
            .node("FusedMatMul", &["a", "b"], &["y"])
            .domain("com.microsoft")
            .name("fm")
            .attr_int("transBatchA", 1)
            .output_untyped("y"),
    );
    must_fail(
        &["compile", &matmul],
        &[
            "node \"fm\" (FusedMatMul)",
            "transBatchA = 1 is not supported",
        ],
    );
}
