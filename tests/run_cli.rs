//! `fp8c run` through the real binary on a small ONNX model: the input and output formats
//! (.npz, .npy, ONNX .pb directories), FP8 runs with `--compare`, `--stats` and
//! `--calibrate`, and bad input — a missing input, a wrong dtype or rank, an .npz key that is
//! not a graph input, corrupt files — each a clear error naming the input, never a panic.
//! NaN and Inf inputs are numbers like any other. A skl2onnx classifier runs and trains
//! through `--output` (its ai.onnx.ml label branch pruned).

mod support;

use fp8c_ir::{DType, Tensor};
use fp8c_onnx::builder::{ModelBuilder, dim};
use std::path::{Path, PathBuf};
use support::{Run, npy, run_fp8c, scratch};

/// y = relu(x · w1) · w2, x: f32[batch, 16]; w1 16×16, w2 16×4.
fn model(dir: &Path) -> PathBuf {
    let w1: Vec<f32> = (0..256)
        .map(|i| ((i * 37 % 17) as f32 - 8.0) / 8.0)
        .collect();
    let w2: Vec<f32> = (0..64).map(|i| ((i * 11 % 7) as f32 - 3.0) / 4.0).collect();
    let bytes = ModelBuilder::new()
        .opset(17)
        .input("x", DType::F32, &[dim("batch"), 16.into()])
        .initializer_f32("w1", &[16, 16], &w1)
        .initializer_f32("w2", &[16, 4], &w2)
        .node("MatMul", &["x", "w1"], &["h"])
        .name("fc1")
        .node("Relu", &["h"], &["a"])
        .name("act")
        .node("MatMul", &["a", "w2"], &["y"])
        .name("fc2")
        .output("y", DType::F32, &[dim("batch"), 4.into()])
        .to_bytes();
    let path = dir.join("mlp.onnx");
    std::fs::write(&path, bytes).unwrap();
    path
}

fn x(batch: u64) -> Tensor {
    let v: Vec<f32> = (0..batch * 16)
        .map(|i| ((i % 13) as f32 - 6.0) / 3.0)
        .collect();
    Tensor::from_f32(vec![batch, 16], &v)
}

fn npz(dir: &Path, file: &str, arrays: &[(&str, &Tensor)]) -> PathBuf {
    let p = dir.join(file);
    npy::write_npz(&p, arrays).unwrap();
    p
}

fn npy_file(dir: &Path, file: &str, t: &Tensor) -> PathBuf {
    let p = dir.join(file);
    std::fs::write(&p, npy::npy_bytes(t).unwrap().0).unwrap();
    p
}

fn run(args: &[&dyn AsRef<std::ffi::OsStr>]) -> Run {
    run_fp8c(args.iter().map(|a| a.as_ref()))
}

/// The run failed cleanly: exit code 1, one `error:` line containing every `want`, no panic.
fn fails_with(r: &Run, want: &[&str]) {
    assert!(!r.ok, "expected a failure, stderr:\n{}", r.stderr);
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    assert!(
        !r.stderr.contains("panicked") && !r.stderr.contains("internal compiler error"),
        "{}",
        r.stderr
    );
    for w in want {
        assert!(r.stderr.contains(w), "missing `{w}` in:\n{}", r.stderr);
    }
}

fn y_of(path: &Path) -> Vec<f32> {
    support::read_npz(path)["y"].to_f32_vec().unwrap()
}

#[test]
fn runs_from_npz_npy_and_pb_directories_alike() {
    let dir = scratch("run_cli_formats");
    let m = model(&dir);
    let xs = x(2);
    let ins = npz(&dir, "in.npz", &[("x", &xs)]);
    let a = dir.join("a.npz");
    let r = run(&[
        &"run",
        &m,
        &"--inputs",
        &ins,
        &"--precision",
        &"f32",
        &"--outputs",
        &a,
    ]);
    assert!(r.ok, "{}", r.stderr);
    assert!(r.stderr.contains("output \"y\": f32[2,4]"), "{}", r.stderr);
    assert!(r.stderr.contains("peak planned"), "{}", r.stderr);

    let one = npy_file(&dir, "x.npy", &xs);
    let spec = format!("x={}", one.display());
    let b = dir.join("b.npz");
    let pbs = dir.join("pb");
    let r = run(&[
        &"run",
        &m,
        &"--input",
        &spec,
        &"--precision",
        &"f32",
        &"--outputs",
        &b,
        &"--output-dir",
        &pbs,
    ]);
    assert!(r.ok, "{}", r.stderr);
    assert_eq!(y_of(&a), y_of(&b));

    // The ONNX layout round-trips: output_0.pb becomes input_0.pb of another run.
    let data = dir.join("data");
    std::fs::create_dir_all(&data).unwrap();
    fp8c_onnx::save_tensor_pb(&data.join("input_0.pb"), "x", &xs).unwrap();
    let c = dir.join("c.npz");
    let r = run(&[
        &"run",
        &m,
        &"--data",
        &data,
        &"--precision",
        &"f32",
        &"--outputs",
        &c,
    ]);
    assert!(r.ok, "{}", r.stderr);
    assert_eq!(y_of(&a), y_of(&c));
    let pb = fp8c_onnx::load_tensor_pb(&pbs.join("output_0.pb")).unwrap();
    assert_eq!(pb.to_f32_vec().unwrap(), y_of(&a));
}

#[test]
fn fp8_runs_compare_report_stats_and_calibrate() {
    let dir = scratch("run_cli_fp8");
    let m = model(&dir);
    let xs = x(16);
    let ins = npz(&dir, "in.npz", &[("x", &xs)]);
    let stats = dir.join("stats.json");
    let out = dir.join("out.npz");
    // fc1 is 16×16×16: FP8 once the size rule is off; fc2 (N = 4) stays high.
    let r = run(&[
        &"run",
        &m,
        &"--inputs",
        &ins,
        &"--min-fp8-flops",
        &"0",
        &"--compare",
        &"--stats",
        &stats,
        &"--outputs",
        &out,
    ]);
    assert!(r.ok, "{}", r.stderr);
    assert!(r.stderr.contains("recipe current"), "{}", r.stderr);
    let cmp = support::parse_compare(&r.stdout);
    let (_, _, cos) = cmp["y"];
    assert!(cos > 0.99, "{}", r.stdout);
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
    let tensors = doc["tensors"].as_array().unwrap();
    let names: Vec<&str> = tensors
        .iter()
        .map(|t| t["tensor"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"fc1.x") && names.contains(&"fc1.w"),
        "{names:?}"
    );
    let xq = tensors.iter().find(|t| t["tensor"] == "fc1.x").unwrap();
    assert_eq!(xq["amax"].as_f64().unwrap(), 2.0);
    assert_eq!(xq["scale"].as_f64().unwrap(), 224.0);
    assert_eq!(xq["overflow"].as_f64().unwrap(), 0.0);

    // Delayed scaling calibrated on the same inputs quantizes with the same scales.
    let cal_out = dir.join("cal.npz");
    let r = run(&[
        &"run",
        &m,
        &"--inputs",
        &ins,
        &"--min-fp8-flops",
        &"0",
        &"--calibrate",
        &ins,
        &"--outputs",
        &cal_out,
    ]);
    assert!(r.ok, "{}", r.stderr);
    assert!(r.stderr.contains("recipe delayed"), "{}", r.stderr);
    assert!(
        r.stderr.contains("calibrated 2 of 2 FP8 tensors"),
        "{}",
        r.stderr
    );
    assert_eq!(y_of(&out), y_of(&cal_out));

    // Without calibration delayed scaling warns that it starts from scale 1.
    let r = run(&[
        &"run",
        &m,
        &"--inputs",
        &ins,
        &"--min-fp8-flops",
        &"0",
        &"--recipe",
        &"delayed",
    ]);
    assert!(
        r.ok && r.stderr.contains("without --calibrate"),
        "{}",
        r.stderr
    );
}

#[test]
fn nan_and_inf_inputs_are_numbers() {
    let dir = scratch("run_cli_nan");
    let m = model(&dir);
    let mut v = x(16).to_f32_vec().unwrap();
    v[0] = f32::NAN; // row 0
    v[16] = f32::INFINITY; // row 1
    let xs = Tensor::from_f32(vec![16, 16], &v);
    let ins = npz(&dir, "in.npz", &[("x", &xs)]);
    for precision in ["f32", "bf16", "fp8"] {
        let out = dir.join(format!("{precision}.npz"));
        let r = run(&[
            &"run",
            &m,
            &"--inputs",
            &ins,
            &"--precision",
            &precision,
            &"--min-fp8-flops",
            &"0",
            &"--outputs",
            &out,
            &"--compare",
            &"--stats",
            &dir.join("s.json"),
        ]);
        assert!(r.ok, "{precision}: {}", r.stderr);
        let y = y_of(&out);
        assert!(y[..4].iter().any(|v| v.is_nan()), "{precision}: {y:?}");
        assert!(y.iter().any(|v| !v.is_finite()), "{precision}");
    }
}

#[test]
fn bad_inputs_are_clear_errors() {
    let dir = scratch("run_cli_bad");
    let m = model(&dir);
    let good = x(2);
    let ins = npz(&dir, "in.npz", &[("x", &good)]);

    // A missing input.
    let r = run(&[&"run", &m]);
    fails_with(&r, &["input \"x\"", "is missing", "--inputs"]);
    let empty = npz(&dir, "empty.npz", &[]);
    fails_with(
        &run(&[&"run", &m, &"--inputs", &empty]),
        &["input \"x\"", "missing"],
    );

    // A wrong dtype, a wrong rank, a wrong fixed dim.
    let f64x = Tensor::from_f64(vec![2, 16], &[0.5; 32]);
    let p = npz(&dir, "f64.npz", &[("x", &f64x)]);
    fails_with(
        &run(&[&"run", &m, &"--inputs", &p]),
        &["input \"x\"", "dtype f64", "f32[batch,16]", "f64.npz"],
    );
    let rank3 = Tensor::from_f32(vec![1, 2, 16], &[0.5; 32]);
    let p = npz(&dir, "rank.npz", &[("x", &rank3)]);
    fails_with(
        &run(&[&"run", &m, &"--inputs", &p]),
        &["input \"x\"", "rank 3"],
    );
    let wide = Tensor::from_f32(vec![2, 8], &[0.5; 16]);
    let p = npz(&dir, "wide.npz", &[("x", &wide)]);
    fails_with(
        &run(&[&"run", &m, &"--inputs", &p]),
        &["input \"x\"", "dim 1 is fixed to 16"],
    );

    // An .npz key that is not a graph input (ONNX-style names survive verbatim).
    let p = npz(&dir, "extra.npz", &[("x", &good), ("onnx::Mask/0", &good)]);
    fails_with(
        &run(&[&"run", &m, &"--inputs", &p]),
        &[
            "\"onnx::Mask/0\" is not an input of the model",
            "(its inputs are: x)",
            "extra.npz",
        ],
    );
    let spec = format!("nope={}", npy_file(&dir, "n.npy", &good).display());
    fails_with(
        &run(&[&"run", &m, &"--input", &spec]),
        &["\"nope\" is not an input"],
    );

    // The same input twice.
    let spec = format!("x={}", npy_file(&dir, "x.npy", &good).display());
    fails_with(
        &run(&[&"run", &m, &"--inputs", &ins, &"--input", &spec]),
        &["input \"x\" is given twice"],
    );

    // Corrupt files: garbage, a truncated array, an absurd header, a broken archive.
    let garbage = dir.join("garbage.npy");
    std::fs::write(&garbage, b"\x93NUMPY garbage that is not a header").unwrap();
    let spec = format!("x={}", garbage.display());
    fails_with(
        &run(&[&"run", &m, &"--input", &spec]),
        &["garbage.npy", "input \"x\""],
    );
    let (mut bytes, _) = npy::npy_bytes(&good).unwrap();
    bytes.truncate(bytes.len() - 10);
    let short = dir.join("short.npy");
    std::fs::write(&short, &bytes).unwrap();
    let spec = format!("x={}", short.display());
    fails_with(
        &run(&[&"run", &m, &"--input", &spec]),
        &["short.npy", "truncated"],
    );
    let mut header = b"\x93NUMPY\x01\x00".to_vec();
    let dict = b"{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296, 16), }";
    header.extend_from_slice(&(dict.len() as u16 + 1).to_le_bytes());
    header.extend_from_slice(dict);
    header.push(b'\n');
    let huge = dir.join("huge.npy");
    std::fs::write(&huge, &header).unwrap();
    let spec = format!("x={}", huge.display());
    fails_with(&run(&[&"run", &m, &"--input", &spec]), &["huge.npy"]);
    let bad_zip = dir.join("bad.npz");
    std::fs::write(&bad_zip, b"PK\x03\x04 not really a zip").unwrap();
    fails_with(&run(&[&"run", &m, &"--inputs", &bad_zip]), &["bad.npz"]);
    let nofile = dir.join("absent.npz");
    fails_with(&run(&[&"run", &m, &"--inputs", &nofile]), &["absent.npz"]);

    // Unsupported element types and backends.
    let u16s = dir.join("u16.npz");
    {
        // np.uint16 reads as u16; the model declares f32: a dtype mismatch naming both.
        use npyz::WriterBuilder;
        let mut buf = Vec::new();
        let mut w = npyz::WriteOptions::new()
            .default_dtype()
            .shape(&[2, 16])
            .writer(&mut buf)
            .begin_nd()
            .unwrap();
        w.extend(vec![1u16; 32]).unwrap();
        w.finish().unwrap();
        let mut z = zip::ZipWriter::new(std::fs::File::create(&u16s).unwrap());
        z.start_file("x.npy", zip::write::SimpleFileOptions::default())
            .unwrap();
        std::io::Write::write_all(&mut z, &buf).unwrap();
        z.finish().unwrap();
    }
    fails_with(
        &run(&[&"run", &m, &"--inputs", &u16s]),
        &["u16.npz", "input \"x\" has dtype u16", "declares f32"],
    );
    // Without a GPU (CI), --device cuda is a clean error naming the backend.
    let r = run(&[&"run", &m, &"--inputs", &ins, &"--device", &"cuda"]);
    if !r.ok {
        fails_with(&r, &["cuda"]);
    }

    // Calibration inputs must have the run's shapes.
    let other = npz(&dir, "cal.npz", &[("x", &x(3))]);
    fails_with(
        &run(&[&"run", &m, &"--inputs", &ins, &"--calibrate", &other]),
        &["--calibrate", "cal.npz", "input \"x\"", "shape [3, 16]"],
    );
}

#[test]
fn npz_round_trips_every_numpy_dtype() {
    let dir = scratch("run_cli_npz");
    let path = dir.join("t.npz");
    let ts = [
        (
            "a/b:0",
            Tensor::from_f32(vec![2, 3], &[1.0, -2.0, f32::NAN, 4.0, 5.0, 6.0]),
        ),
        ("i", Tensor::from_i64(vec![3], &[1, -2, 3])),
        ("m", Tensor::from_bool(vec![2], &[true, false])),
        ("s", Tensor::scalar_f32(0.5)),
        (
            "h",
            Tensor::from_f64_as(DType::F16, vec![2], &[1.5, -0.25]).unwrap(),
        ),
        (
            "b",
            Tensor::from_f64_as(DType::I8, vec![2], &[-1.0, 7.0]).unwrap(),
        ),
    ];
    let refs: Vec<(&str, &Tensor)> = ts.iter().map(|(k, t)| (*k, t)).collect();
    assert!(npy::write_npz(&path, &refs).unwrap().is_empty());
    let back = npy::read_npz(&path).unwrap();
    assert_eq!(back.len(), ts.len());
    for ((k, t), (k2, t2)) in ts.iter().zip(&back) {
        assert_eq!((k, t.ty()), (&k2.as_str(), t2.ty()));
        assert_eq!(t.bytes(), t2.bytes(), "{k}");
    }
    // bf16 and FP8 have no NumPy type: widened to f32, raw codes as u8, and said so.
    let bf = Tensor::from_f64_as(DType::BF16, vec![1], &[1.5]).unwrap();
    let notes = npy::write_npz(&path, &[("bf", &bf)]).unwrap();
    assert_eq!(notes.len(), 1);
    assert_eq!(npy::read_npz(&path).unwrap()[0].1.dtype(), DType::F32);
}

#[test]
fn numpy_written_files_read_back() {
    // Fortran order, compression and big-endian data, as NumPy writes them.
    let dir = scratch("run_cli_numpy");
    let script = format!(
        "import numpy as np\n\
         a = np.asfortranarray(np.arange(6, dtype=np.float32).reshape(2, 3))\n\
         np.savez_compressed(r'{0}/c.npz', **{{'x/y:0': a, 'be': np.arange(3, dtype='>i4')}})\n",
        dir.display()
    );
    let st = std::process::Command::new(support::python())
        .arg("-c")
        .arg(script)
        .status()
        .unwrap();
    assert!(st.success());
    let back: std::collections::BTreeMap<_, _> = npy::read_npz(&dir.join("c.npz"))
        .unwrap()
        .into_iter()
        .collect();
    assert_eq!(back["x/y:0"].shape(), [2, 3]);
    assert_eq!(
        back["x/y:0"].to_f32_vec().unwrap(),
        [0., 1., 2., 3., 4., 5.]
    );
    assert_eq!(back["be"].to_i64_vec().unwrap(), [0, 1, 2]);
    assert!(npy::tensor_from_npy(b"not numpy").is_err());
}

/// Inference quantizes the FP8 GEMMs' weights once, at compile time (issue #17): the program
/// holds their FP8 codes, not the f32 master weights, and gives bit-identical outputs to a run
/// that re-quantizes them every call (`--stats` keeps them f32 to measure every quantization).
#[test]
fn inference_holds_fp8_weights_once_with_identical_results() {
    let d = scratch("run-frozen-weights");
    let m = support::repo_root().join("examples/models/mlp_digits.onnx");
    let n = 512u64;
    let xs: Vec<f32> = (0..n * 64)
        .map(|i| ((i * 29) % 23) as f32 / 11.0 - 1.0)
        .collect();
    let inputs = npz(&d, "x.npz", &[("x", &Tensor::from_f32(vec![n, 64], &xs))]);
    let go = |extra: &[&str], out: &str| -> (Vec<f32>, f64) {
        let o = d.join(out);
        let mut a: Vec<&dyn AsRef<std::ffi::OsStr>> =
            vec![&"run", &m, &"--inputs", &inputs, &"-o", &o];
        for e in extra {
            a.push(e);
        }
        let r = run(&a);
        assert!(r.ok, "{}", r.stderr);
        let resident = r
            .stderr
            .split("resident ")
            .nth(1)
            .and_then(|s| s.split(" KiB").next())
            .and_then(|s| s.trim().parse::<f64>().ok())
            .unwrap_or_else(|| panic!("no resident KiB figure in:\n{}", r.stderr));
        let y = npy::read_npz(&o).unwrap().into_iter().next().unwrap().1;
        (y.to_f32_vec().unwrap(), resident)
    };
    let (frozen, frozen_kib) = go(&[], "a.npz");
    let stats = d.join("stats.json");
    let stats = stats.to_str().unwrap();
    let (live, live_kib) = go(&["--stats", stats], "b.npz");
    assert_eq!(
        frozen.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
        live.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
    );
    // fc1 (64x256) and fc2 (256x256) run in FP8: 81,920 weights, 320 KiB in f32, 80 KiB in FP8.
    assert!(
        frozen_kib + 200.0 < live_kib,
        "resident {frozen_kib} KiB with FP8 weights vs {live_kib} KiB"
    );
}

/// A scikit-learn classifier exported by skl2onnx (`tests/models/sklearn/`, made by
/// `scripts/fixtures/make_sklearn_model.py`; issue #12): its label branch uses the ai.onnx.ml ops
/// ArrayFeatureExtractor and ZipMap. A plain `run` gives the labels and ZipMap's
/// probabilities as a dense array, equal to onnxruntime's; with `--output`, only what the
/// named values need is imported: the probabilities and the ArgMax index equal onnxruntime's
/// outputs, and `train --output add_result1` (the logits, an intermediate value) trains.
#[test]
fn sklearn_classifier_runs_and_trains_through_output_selection() {
    let dir = scratch("sklearn_classifier");
    let root = support::repo_root().join("tests/models/sklearn");
    let model = root.join("mlp_digits_clf.onnx");
    let reference = support::read_npz(&root.join("mlp_digits_clf.ref.npz"));
    let inputs = npz(&dir, "x.npz", &[("X", &reference["X"])]);

    let plain = dir.join("plain.npz");
    let r = run(&[
        &"run",
        &model,
        &"--inputs",
        &inputs,
        &"--precision",
        &"f32",
        &"-o",
        &plain,
    ]);
    assert!(r.ok, "{}", r.stderr);
    let got = support::read_npz(&plain);
    let c = fp8c_runtime::compare(&got["output_probability"], &reference["probabilities"]).unwrap();
    assert!(
        c.rel_l2 <= 1e-5,
        "ZipMap's probabilities: rel L2 {:.3e}",
        c.rel_l2
    );
    let label = got["output_label"].to_i64_vec().unwrap();
    assert_eq!(label, reference["label"].to_i64_vec().unwrap());

    let out = dir.join("out.npz");
    let r = run(&[
        &"run",
        &model,
        &"--inputs",
        &inputs,
        &"--precision",
        &"f32",
        &"--output",
        &"out_activations_result",
        &"--output",
        &"argmax_output",
        &"-o",
        &out,
    ]);
    assert!(r.ok, "{}", r.stderr);
    let got = support::read_npz(&out);
    let c =
        fp8c_runtime::compare(&got["out_activations_result"], &reference["probabilities"]).unwrap();
    assert!(c.rel_l2 <= 1e-5, "probabilities: rel L2 {:.3e}", c.rel_l2);
    let index = got["argmax_output"].to_i64_vec().unwrap();
    assert_eq!(index, reference["label"].to_i64_vec().unwrap());

    let data = npz(
        &dir,
        "train.npz",
        &[("X", &reference["X"]), ("y", &reference["y"])],
    );
    let mut args: Vec<&dyn AsRef<std::ffi::OsStr>> = vec![
        &"train",
        &model,
        &"--data",
        &data,
        &"--labels",
        &"y",
        &"--loss",
        &"ce",
        &"--steps",
        &"20",
        &"--batch",
        &"16",
    ];
    let r = run(&args);
    fails_with(&r, &["2 outputs", "choose the one to train with --output"]);
    args.extend([&"--output" as &dyn AsRef<std::ffi::OsStr>, &"add_result1"]);
    let r = run(&args);
    assert!(r.ok, "{}", r.stderr);
    assert!(r.stderr.contains("output \"add_result1\""), "{}", r.stderr);
}

/// scikit-learn models exported by skl2onnx with its defaults (`tests/models/sklearn/*.onnx`
/// with `*.ort.npz`, made by `scripts/fixtures/make_sklearn_model.py`: linear and logistic models,
/// pipelines with Scaler, Normalizer and PCA, naive Bayes): `fp8c run MODEL --inputs X`,
/// as a user types it, gives every output onnxruntime gives, labels equal and scores within
/// 1e-5 (ZipMap's maps as dense `[N, classes]` arrays).
#[test]
fn sklearn_zoo_matches_onnxruntime() {
    let dir = scratch("sklearn_zoo");
    let root = support::repo_root().join("tests/models/sklearn");
    let mut names: Vec<String> = std::fs::read_dir(&root)
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().unwrap();
            name.strip_suffix(".ort.npz").map(str::to_string)
        })
        .collect();
    names.sort();
    assert!(names.len() >= 8, "the zoo shrank: {names:?}");
    let mut failures = Vec::new();
    for name in &names {
        let ref_path = root.join(format!("{name}.ort.npz"));
        let (reference, labels) = support::read_npz_mixed(&ref_path);
        // A string input (categories by name) is given as the numpy string array it is.
        let inputs = match reference.get("X") {
            Some(x) => npz(&dir, &format!("{name}_x.npz"), &[("X", x)]),
            None => {
                let p = dir.join(format!("{name}_x.npz"));
                support::copy_npz_member(&ref_path, "X", &p);
                p
            }
        };
        let out = dir.join(format!("{name}_out.npz"));
        let r = run(&[
            &"run",
            &root.join(format!("{name}.onnx")),
            &"--inputs",
            &inputs,
            &"-o",
            &out,
        ]);
        if !r.ok {
            failures.push(format!("{name}: {}", r.stderr.trim()));
            continue;
        }
        let (got, got_labels) = support::read_npz_mixed(&out);
        // String class labels come back as strings, equal to onnxruntime's.
        for (key, want) in labels.iter().filter(|(k, _)| k.as_str() != "X") {
            if got_labels.get(key) != Some(want) {
                failures.push(format!(
                    "{name}: {key} is {:?}, onnxruntime's {want:?}",
                    got_labels.get(key)
                ));
            }
        }
        for (key, want) in reference.iter().filter(|(k, _)| k.as_str() != "X") {
            let Some(g) = got.get(key) else {
                failures.push(format!("{name}: output {key} missing"));
                continue;
            };
            if want.dtype().is_int() {
                if g.to_i64_vec().unwrap() != want.to_i64_vec().unwrap() {
                    failures.push(format!("{name}: {key} labels differ"));
                }
                continue;
            }
            let c = fp8c_runtime::compare(g, want).unwrap();
            if c.rel_l2 > 1e-5 {
                failures.push(format!("{name}: {key} rel L2 {:.3e}", c.rel_l2));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// String class labels through `--output-dir`: a STRING `TensorProto` holding onnxruntime's
/// labels (as ONNX's test data stores string outputs).
#[test]
fn string_labels_to_an_output_dir_are_string_tensors() {
    use prost::Message;
    let dir = scratch("sklearn_string_pb");
    let root = support::repo_root().join("tests/models/sklearn");
    let (reference, labels) = support::read_npz_mixed(&root.join("iris_names_knn.ort.npz"));
    let inputs = npz(&dir, "x.npz", &[("X", &reference["X"])]);
    let out = dir.join("pb");
    let model = root.join("iris_names_knn.onnx");
    let r = run(&[&"run", &model, &"--inputs", &inputs, &"--output-dir", &out]);
    assert!(r.ok, "{}", r.stderr);
    assert!(
        r.stderr
            .contains("output \"output_label\": string[16] (class labels: \"setosa\""),
        "{}",
        r.stderr
    );
    let bytes = std::fs::read(out.join("output_0.pb")).unwrap();
    let t = fp8c_onnx::proto::TensorProto::decode(bytes.as_slice()).unwrap();
    assert_eq!(t.data_type, Some(8), "STRING");
    let got: Vec<String> = t
        .string_data
        .iter()
        .map(|b| String::from_utf8(b.clone()).unwrap())
        .collect();
    assert_eq!(&got, &labels["output_label"]);
}

/// `compile --emit onnx` of a model whose GEMMs all stay in high precision (a small sklearn
/// classifier: N = 3, K = 4) needs no `--calibrate`: there is nothing to quantize, the file
/// keeps the model's opset and runs to the same labels.
#[test]
fn emit_onnx_without_fp8_gemms_needs_no_calibration() {
    let dir = scratch("emit_onnx_no_fp8");
    let root = support::repo_root().join("tests/models/sklearn");
    let model = root.join("iris_scaler_logreg.onnx");
    let out = dir.join("out.onnx");
    let r = run(&[&"compile", &model, &"--emit", &"onnx", &"-o", &out]);
    assert!(r.ok, "{}", r.stderr);
    assert!(r.stderr.contains("nothing to calibrate"), "{}", r.stderr);
    let reference = support::read_npz(&root.join("iris_scaler_logreg.ort.npz"));
    let inputs = npz(&dir, "x.npz", &[("X", &reference["X"])]);
    let got = dir.join("got.npz");
    let r = run(&[&"run", &out, &"--inputs", &inputs, &"-o", &got]);
    assert!(r.ok, "{}", r.stderr);
    let got = support::read_npz(&got);
    assert_eq!(
        got["output_label"].to_i64_vec().unwrap(),
        reference["output_label"].to_i64_vec().unwrap()
    );
}

/// The precision report names the type a high-precision GEMM keeps: an f16 export's GEMMs
/// stay f16 (the report said "stay f32"), an f32 model's f32.
#[test]
fn the_report_names_the_type_high_precision_gemms_keep() {
    let dir = scratch("report_f16");
    let root = support::repo_root();
    let x = Tensor::from_f64_as(DType::F16, vec![4, 32], &[0.5; 128]).unwrap();
    let inputs = npz(&dir, "x.npz", &[("x", &x)]);
    let model = root.join("tests/models/export/mlp_f16.onnx");
    let big = "1000000000";
    let r = run(&[
        &"run",
        &model,
        &"--inputs",
        &inputs,
        &"--min-fp8-flops",
        &big,
    ]);
    assert!(r.ok, "{}", r.stderr);
    assert!(
        r.stderr.contains("2 GEMMs stay f16: too small to gain"),
        "{}",
        r.stderr
    );
    let model = root.join("tests/models/export/mlp_external.onnx");
    let x = Tensor::from_f32(vec![4, 32], &[0.5; 128]);
    let inputs = npz(&dir, "x32.npz", &[("x", &x)]);
    let r = run(&[
        &"run",
        &model,
        &"--inputs",
        &inputs,
        &"--min-fp8-flops",
        &big,
    ]);
    assert!(r.ok, "{}", r.stderr);
    assert!(
        r.stderr.contains("2 GEMMs stay f32: too small to gain"),
        "{}",
        r.stderr
    );
}

/// A model with external data named without a directory (`fp8c run m.onnx` in its folder, as
/// PyTorch's dynamo exporter leaves `m.onnx` and `m.onnx.data` side by side) finds its data:
/// the model's directory is then `.`, not the empty path.
#[test]
fn external_data_of_a_model_named_without_a_directory() {
    let dir = scratch("external_bare_name");
    let models = support::repo_root().join("tests/models/export");
    let x = Tensor::from_f32(vec![2, 32], &[0.25; 64]);
    let inputs = npz(&dir, "x.npz", &[("x", &x)]);
    let bin = std::env::var_os("FP8C_BIN").unwrap_or_else(|| env!("CARGO_BIN_EXE_fp8c").into());
    let out = std::process::Command::new(bin)
        .current_dir(&models)
        .args(["run", "mlp_external.onnx", "--precision", "f32", "--inputs"])
        .arg(&inputs)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("output \"y\": f32[2,16]"), "{stderr}");
}

/// Per-tile recipes (issue #16) from the command line and a config file: `--recipe rowwise`,
/// `block` (TE's Float8BlockScaling) and `mxfp8` run the digits MLP with block-scaled GEMMs
/// close to f32; a GEMM whose K is not a multiple of the K block keeps per-tensor scaling and
/// says why (`-v`); TE's class names work in `[recipe] kind`; an unknown name lists the
/// accepted ones. (Training with them: tests/train_cli.rs.)
#[test]
fn per_tile_recipes_run_with_block_scaled_gemms() {
    let dir = scratch("run_cli_block");
    let root = support::repo_root();
    let model = root.join("examples/models/mlp_digits.onnx");
    let data = root.join("examples/data/digits_test.npz");
    let out = |name: &str| dir.join(format!("{name}.npz"));
    let mut outputs = Vec::new();
    for (recipe, label) in [
        ("current", "recipe current hybrid ("),
        ("rowwise", "per tile (rowwise, power-of-two scales)"),
        ("block", "per tile (block, power-of-two scales)"),
        ("MXFP8BlockScaling", "per tile (mxfp8, power-of-two scales)"),
    ] {
        let r = run(&[
            &"run",
            &model,
            &"--inputs",
            &data,
            &"--recipe",
            &recipe,
            &"--min-fp8-flops",
            &"0",
            &"--compare",
            &"-v",
            &"-o",
            &out(recipe),
        ]);
        assert!(r.ok, "{recipe}: {}", r.stderr);
        assert!(r.stderr.contains(label), "{recipe}: {}", r.stderr);
        // fc1 has K = 64: not a multiple of the block recipe's 128-wide K blocks.
        assert_eq!(
            r.stderr
                .contains("fc1: per-tensor scaling instead of block: K = 64"),
            recipe == "block",
            "{recipe}: {}",
            r.stderr
        );
        let cos = support::parse_compare(&r.stdout)["logits"].2;
        assert!(cos > 0.995, "{recipe}: cosine {cos}");
        eprintln!("{recipe}: logits cosine to f32 {cos:.6}");
        outputs.push(support::read_npz(&out(recipe))["logits"].clone());
    }
    for (k, o) in outputs.iter().enumerate().skip(1) {
        assert_ne!(
            o.bytes(),
            outputs[0].bytes(),
            "recipe {k} computed per tensor"
        );
    }

    let cfg = dir.join("recipe.toml");
    std::fs::write(
        &cfg,
        "[recipe]\nkind = \"Float8BlockScaling\"\npower_2_scale = false\n",
    )
    .unwrap();
    let r = run(&[
        &"run",
        &model,
        &"--inputs",
        &data,
        &"--config",
        &cfg,
        &"--min-fp8-flops",
        &"0",
    ]);
    assert!(
        r.ok && r.stderr.contains("per tile (block)"),
        "{}",
        r.stderr
    );
    std::fs::write(&cfg, "[recipe]\nkind = \"Float8BlockScalin\"\n").unwrap();
    let r = run(&[&"run", &model, &"--inputs", &data, &"--config", &cfg]);
    assert!(
        !r.ok
            && r.stderr.contains("recipe.toml")
            && r.stderr.contains("Float8BlockScaling, MXFP8BlockScaling"),
        "{}",
        r.stderr
    );
    let r = run(&[
        &"run",
        &model,
        &"--inputs",
        &data,
        &"--recipe",
        &"blockwise",
    ]);
    assert!(
        !r.ok && r.stderr.contains("rowwise, block or mxfp8"),
        "{}",
        r.stderr
    );
}

/// `--stats` under a per-tile recipe (issue #16): block-quantized tensors are measured with
/// their tile scales, and every FP8 tensor carries what-if figures for tensorwise, rowwise,
/// block and mxfp8 (TE's debug "what-if" statistics); the figures of the recipe in use equal
/// its what-if row (block for the block-scaled GEMM, tensorwise for the GEMM that keeps
/// per-tensor current scaling); stdout summarises them per recipe.
#[test]
fn stats_measure_tiles_and_report_what_if_recipes() {
    let dir = scratch("run_cli_what_if");
    let root = support::repo_root();
    for recipe in ["block", "current"] {
        let stats = dir.join(format!("stats_{recipe}.json"));
        let r = run(&[
            &"run",
            &root.join("examples/models/mlp_digits.onnx"),
            &"--inputs",
            &root.join("examples/data/digits_test.npz"),
            &"--recipe",
            &recipe,
            &"--min-fp8-flops",
            &"0",
            &"--stats",
            &stats,
            &"-o",
            &dir.join("out.npz"),
        ]);
        assert!(r.ok, "{}", r.stderr);
        for line in [
            "in use",
            "what-if tensorwise",
            "what-if block",
            "what-if mxfp8",
        ] {
            assert!(r.stdout.contains(line), "{line}:\n{}", r.stdout);
        }
        let doc: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
        let tensors = doc["tensors"].as_array().unwrap();
        assert!(tensors.len() >= 4, "{tensors:?}");
        let mut checked = 0;
        for t in tensors {
            let name = t["tensor"].as_str().unwrap();
            let w = t["what_if"].as_array().unwrap();
            let recipes: Vec<&str> = w.iter().map(|r| r["recipe"].as_str().unwrap()).collect();
            assert_eq!(
                recipes,
                ["tensorwise", "rowwise", "block", "mxfp8"],
                "{name}"
            );
            // Under `block`, fc1 (K = 64) keeps one (power-of-two) scale per tensor: only
            // the block-scaled tensors have a what-if twin there.
            let twin = match (recipe, t["scales"].as_u64().unwrap() > 1) {
                ("block", true) => &w[2],
                ("current", false) => &w[0],
                _ => continue,
            };
            for k in ["sqnr_db", "underflow", "overflow"] {
                let (a, b) = (&t[k], &twin[k]);
                assert!(
                    a == b || (a.as_f64().unwrap() - b.as_f64().unwrap()).abs() < 1e-9,
                    "{recipe} {name} {k}: in use {a}, what-if {b}"
                );
            }
            checked += 1;
        }
        assert!(checked >= 2, "{recipe}: {checked} tensors checked");
    }
}

/// `fp8c run --profile` and `fp8c train --profile` (issue #19): time and share per op kind
/// (the shares add up to the whole) and the slowest nodes, over every step run.
#[test]
fn profile_tables_cover_every_step() {
    let dir = scratch("run_cli_profile");
    let root = support::repo_root();
    let model = root.join("examples/models/mlp_digits.onnx");
    let digits = root.join("examples/data/digits_test.npz");
    // `fp8c run MODEL --inputs DIGITS --profile EXTRA...`.
    let profiled = |extra: &[&dyn AsRef<std::ffi::OsStr>]| {
        let mut args: Vec<&dyn AsRef<std::ffi::OsStr>> =
            vec![&"run", &model, &"--inputs", &digits, &"--profile"];
        args.extend_from_slice(extra);
        run(&args)
    };
    let shares = |text: &str| -> (Vec<String>, f64) {
        let mut ops = Vec::new();
        let mut total = 0.0;
        let lines: Vec<&str> = text.lines().collect();
        let start = lines
            .iter()
            .position(|l| l.starts_with("profile: "))
            .unwrap();
        for l in &lines[start + 2..] {
            if l.trim_start().starts_with("slowest nodes") {
                break;
            }
            let f: Vec<&str> = l.split_whitespace().collect();
            ops.push(f[0].to_string());
            total += f[2].trim_end_matches('%').parse::<f64>().unwrap();
        }
        (ops, total)
    };
    let out = dir.join("out.npz");
    let r = profiled(&[&"--min-fp8-flops", &"0", &"-o", &out]);
    assert!(r.ok, "{}", r.stderr);
    assert!(r.stderr.contains("profile: 1 run,"), "{}", r.stderr);
    let (ops, total) = shares(&r.stderr);
    assert!(ops.iter().any(|o| o.contains("matmul")), "{ops:?}");
    assert!(
        (total - 100.0).abs() < 1.0,
        "shares add to {total}:\n{}",
        r.stderr
    );
    assert!(r.stderr.contains("slowest nodes"), "{}", r.stderr);

    // With --repeat the profile covers every run, times per run.
    let r = profiled(&[&"--repeat", &"3"]);
    assert!(r.ok, "{}", r.stderr);
    assert!(
        r.stderr.contains("profile: 3 runs, per run"),
        "{}",
        r.stderr
    );
    let (_, total) = shares(&r.stderr);
    assert!((total - 100.0).abs() < 1.0, "shares add to {total}");

    // --profile-nodes N lists the N slowest nodes (0: none); it needs --profile.
    let node_rows = |err: &str| {
        let lines: Vec<&str> = err.lines().collect();
        let at = lines.iter().position(|l| l.contains("slowest nodes"));
        at.map(|i| {
            lines[i + 2..]
                .iter()
                .take_while(|l| l.starts_with("  "))
                .count()
        })
    };
    for (n, want) in [("2", Some(2)), ("0", None)] {
        let r = profiled(&[&"--profile-nodes", &n]);
        assert!(r.ok, "{}", r.stderr);
        assert_eq!(node_rows(&r.stderr), want, "{}", r.stderr);
    }
    let r = run(&[&"run", &model, &"--profile-nodes", &"3"]);
    assert!(!r.ok && r.stderr.contains("--profile"), "{}", r.stderr);

    let r = run(&[
        &"train",
        &model,
        &"--data",
        &root.join("examples/data/digits_train.npz"),
        &"--labels",
        &"y",
        &"--steps",
        &"4",
        &"--quiet",
        &"--profile",
    ]);
    assert!(r.ok, "{}", r.stderr);
    assert!(r.stderr.contains("profile: 4 runs,"), "{}", r.stderr);
    let (ops, total) = shares(&r.stderr);
    assert!(ops.iter().any(|o| o == "adamw_update"), "{ops:?}");
    assert!(
        (total - 100.0).abs() < 1.0,
        "shares add to {total}:\n{}",
        r.stderr
    );
}

/// `fp8c --threads N` (any subcommand) and `fp8c run --repeat N` for benchmarks
/// (scripts/bench/bench_vs_ort.py uses both): the summary gives the fastest and median run and the
/// outputs are the first run's; 0 is refused for either.
#[test]
fn threads_and_repeat_for_benchmarks() {
    let dir = scratch("run_cli_repeat");
    let root = support::repo_root();
    let model = root.join("examples/models/mlp_digits.onnx");
    let data = root.join("examples/data/digits_test.npz");
    let out = |n: &str| dir.join(format!("{n}.npz"));
    let r = run(&[
        &"--threads",
        &"1",
        &"run",
        &model,
        &"--inputs",
        &data,
        &"-o",
        &out("once"),
    ]);
    assert!(r.ok, "{}", r.stderr);
    let r = run(&[
        &"run",
        &model,
        &"--inputs",
        &data,
        &"--threads",
        &"2",
        &"--repeat",
        &"3",
        &"-o",
        &out("three"),
    ]);
    assert!(r.ok, "{}", r.stderr);
    assert!(r.stderr.contains("(fastest of 3; median "), "{}", r.stderr);
    assert_eq!(
        support::read_npz(&out("once"))["logits"].bytes(),
        support::read_npz(&out("three"))["logits"].bytes()
    );
    for bad in [["--threads", "0"], ["--repeat", "0"]] {
        let r = run(&[&"run", &model, &"--inputs", &data, &bad[0], &bad[1]]);
        assert!(!r.ok && r.stderr.contains(bad[0]), "{bad:?}: {}", r.stderr);
    }
}

/// A per-GEMM recipe choice (issue #16): `--granularity GLOB=NAME` and a config's `[[gemms]]`
/// entries give the GEMMs they match their own granularity under current scaling (fc2
/// rowwise: one scale per row of its activation and per column of its weight; fc1 keeps one
/// scale per tensor); a bad name is an error naming the flag; under delayed scaling the
/// choice is ignored with a note (`-v`).
#[test]
fn granularity_per_gemm_from_flags_and_config() {
    let dir = scratch("run_cli_granularity");
    let root = support::repo_root();
    let model = root.join("examples/models/mlp_digits.onnx");
    let data = root.join("examples/data/digits_test.npz");
    let cfg = dir.join("gemms.toml");
    std::fs::write(
        &cfg,
        "[[gemms]]\nmatch = \"fc2\"\ngranularity = \"rowwise\"\n\n[[gemms]]\nmatch = \"*\"\ngranularity = \"tensorwise\"\n",
    )
    .unwrap();
    let stats = dir.join("stats.json");
    for how in [
        vec!["--granularity", "fc2=rowwise"],
        vec!["--config", cfg.to_str().unwrap()],
    ] {
        let mut args: Vec<&dyn AsRef<std::ffi::OsStr>> = vec![
            &"run",
            &model,
            &"--inputs",
            &data,
            &"--min-fp8-flops",
            &"0",
            &"--stats",
            &stats,
            &"-o",
        ];
        let out = dir.join("out.npz");
        args.push(&out);
        for a in &how {
            args.push(a);
        }
        let r = run(&args);
        assert!(r.ok, "{how:?}: {}", r.stderr);
        let doc: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
        let scales = |t: &str| {
            doc["tensors"]
                .as_array()
                .unwrap()
                .iter()
                .find(|x| x["tensor"] == t)
                .unwrap_or_else(|| panic!("{how:?}: no {t}"))["scales"]
                .as_u64()
                .unwrap()
        };
        assert_eq!(scales("fc1.x"), 1, "{how:?}");
        assert_eq!(scales("fc1.w"), 1, "{how:?}");
        assert!(scales("fc2.x") > 1 && scales("fc2.w") > 1, "{how:?}");
    }
    let r = run(&[
        &"run",
        &model,
        &"--inputs",
        &data,
        &"--granularity",
        &"fc2=blocky",
    ]);
    assert!(
        !r.ok && r.stderr.contains("--granularity fc2=blocky"),
        "{}",
        r.stderr
    );
    let r = run(&[
        &"run",
        &model,
        &"--inputs",
        &data,
        &"--min-fp8-flops",
        &"0",
        &"--recipe",
        &"delayed",
        &"--granularity",
        &"fc2=rowwise",
        &"-v",
        &"-o",
        &dir.join("d.npz"),
    ]);
    assert!(r.ok, "{}", r.stderr);
    // The fallback is in the run's summary, naming the GEMM.
    assert!(
        r.stderr.lines().any(|l| l
            .contains("per-tensor delayed scaling: --granularity rowwise ignored")
            && l.contains("(fc2)")),
        "{}",
        r.stderr
    );
}

/// NumPy has no bf16: `--inputs` and `--calibrate` take f32 arrays for a bf16 input and round
/// them to bf16 (nearest even). The same values rounded beforehand by the `half` crate give
/// the same outputs bit for bit, and the model's f32 inputs no longer fail the type check.
#[test]
fn f32_arrays_feed_bf16_inputs_rounded_to_nearest_even() {
    let model = support::repo_root().join("tests/models/export/mlp_bf16.onnx");
    let dir = support::scratch("run_cli_bf16_inputs");
    // Values with bits below bf16's precision, ties included (0x3f80_8000 is 1 + 2^-8).
    let mut x: Vec<f32> = (0..4 * 32)
        .map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0 + 1e-3)
        .collect();
    x[0] = f32::from_bits(0x3f80_8000);
    x[1] = f32::from_bits(0x3f81_8000);
    let rounded: Vec<f32> = x
        .iter()
        .map(|&v| half::bf16::from_f32(v).to_f32())
        .collect();
    assert_ne!(x, rounded, "the inputs must need rounding");
    let mut outs = Vec::new();
    for (tag, values) in [("f32", &x), ("rounded", &rounded)] {
        let t = Tensor::from_vec(DType::F32, vec![4, 32], values.clone()).unwrap();
        let inputs = dir.join(format!("{tag}.npz"));
        fp8c_session::npy::write_npz(&inputs, &[("x", &t)]).unwrap();
        let out = dir.join(format!("{tag}_out.npz"));
        let r = support::run_fp8c([
            "run".as_ref(),
            model.as_os_str(),
            "--inputs".as_ref(),
            inputs.as_os_str(),
            "--precision".as_ref(),
            "f32".as_ref(),
            "-o".as_ref(),
            out.as_os_str(),
        ]);
        assert!(r.ok, "{tag}: {}", r.stderr);
        outs.push(support::read_npz(&out).remove("y").expect("output y"));
        // The FP8 path calibrated from the same f32 file.
        let r = support::run_fp8c([
            "run".as_ref(),
            model.as_os_str(),
            "--inputs".as_ref(),
            inputs.as_os_str(),
            "--calibrate".as_ref(),
            inputs.as_os_str(),
        ]);
        assert!(r.ok, "{tag} --calibrate: {}", r.stderr);
    }
    assert_eq!(outs[0].bytes(), outs[1].bytes());
    // An f64 array is still an error that names the input and both types.
    let t = Tensor::from_vec(DType::F64, vec![4, 32], vec![0f64; 128]).unwrap();
    let inputs = dir.join("f64.npz");
    fp8c_session::npy::write_npz(&inputs, &[("x", &t)]).unwrap();
    let r = support::run_fp8c([
        "run".as_ref(),
        model.as_os_str(),
        "--inputs".as_ref(),
        inputs.as_os_str(),
    ]);
    assert!(!r.ok);
    assert!(
        r.stderr.contains("input \"x\" has dtype f64") && r.stderr.contains("bf16"),
        "{}",
        r.stderr
    );
}
