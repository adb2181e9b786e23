//! ONNX's own backend node tests (copied into `.cache/onnx-node-tests` by
//! `scripts/fixtures/gen_onnx_node_tests.py`; skipped with a message when absent): every model must
//! import, or fail with an error the importer means to give (`EXPECTED_ERRORS`) or a known
//! type-inference gap (`INFER_GAPS`); each imported output's type must match the dtype and
//! shape of the test's `output_0.pb`, and the input `.pb` files must load.

use fp8c_ir::{DType, Dim};
use fp8c_onnx::{ImportOptions, inspect, load_model, load_tensor_pb};
use std::path::{Path, PathBuf};

/// Import errors that are expected, by a piece of their message, with the reason.
const EXPECTED_ERRORS: &[(&str, &str)] = &[
    (
        "unsupported element type",
        "int2/int4/uint16.., FP8 FNUZ, FLOAT4, E8M0: not IR dtypes",
    ),
    ("is not a tensor", "optional and sequence inputs"),
    (
        "holds strings, which fp8c tensors cannot hold",
        "string Equal (test_equal_string*)",
    ),
    (
        "both branches are computed and selected",
        "If branches of different shapes under a condition known only at run time",
    ),
    (
        "drops a random mask",
        "training-mode Dropout with a ratio above 0",
    ),
    (
        "Scan-8 (with sequence_lens and a batch axis)",
        "Scan-8's batch axis and sequence_lens (test_scan_sum)",
    ),
    (
        "the Mean and InvStdDev outputs are not supported",
        "the IR's layer_norm has one output",
    ),
    (
        "blocked quantization",
        "QuantizeLinear/DequantizeLinear block_size",
    ),
    (
        "must be a constant",
        "pads/split computed inside function expansions",
    ),
];

/// Tests that fail because of a known gap in `fp8c_ir::infer` (reported to its owner).
const INFER_GAPS: &[(&str, &str)] = &[
    (
        "test_quantizelinear_e4m3fn",
        "zero point f8[1] with a scalar scale",
    ),
    (
        "test_quantizelinear_e5m2",
        "zero point f8[1] with a scalar scale",
    ),
    (
        "test_dequantizelinear_e4m3fn_zero_point",
        "zero point f8[1] with a scalar scale",
    ),
    (
        "test_reduce_max_bool_inputs",
        "ReduceMax over bool (opset 20)",
    ),
];

/// How many tests import today (onnx 1.22.0 selection); fewer is a regression.
const MIN_PASSING: usize = 398;

fn suite_dir() -> Option<PathBuf> {
    let cache = std::env::var_os("FP8C_MODEL_CACHE").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.cache"),
        PathBuf::from,
    );
    let dir = cache.join("onnx-node-tests");
    if dir.join("MANIFEST.tsv").is_file() {
        Some(dir)
    } else {
        eprintln!(
            "skipping: {} not found (run scripts/fixtures/gen_onnx_node_tests.py)",
            dir.display()
        );
        None
    }
}

/// Checks one test directory; `Err` says what went wrong. A model that needs an input as a
/// constant (`axes` fed as a graph input) is retried with its integer inputs frozen to the
/// test data's values.
fn check(dir: &Path) -> Result<(), String> {
    let model = dir.join("model.onnx");
    let data = dir.join("test_data_set_0");
    let imp = match load_model(&model, &ImportOptions::default()) {
        Ok(imp) => imp,
        Err(e) if e.to_string().contains("must be a constant") => {
            let info = inspect(&model).map_err(|e| e.to_string())?;
            let mut constant_inputs = std::collections::BTreeMap::new();
            for (k, input) in info.inputs.iter().enumerate() {
                let t = load_tensor_pb(&data.join(format!("input_{k}.pb")))
                    .map_err(|e| e.to_string())?;
                if matches!(t.dtype(), DType::I64 | DType::I32) {
                    constant_inputs.insert(input.name.clone(), t);
                }
            }
            let opts = ImportOptions {
                constant_inputs,
                ..Default::default()
            };
            load_model(&model, &opts).map_err(|e| e.to_string())?
        }
        Err(e) => return Err(e.to_string()),
    };
    for k in 0..imp.graph.inputs().len() {
        let input = data.join(format!("input_{k}.pb"));
        if input.is_file() {
            load_tensor_pb(&input).map_err(|e| e.to_string())?;
        }
    }
    for (k, o) in imp.graph.outputs().iter().enumerate() {
        let path = data.join(format!("output_{k}.pb"));
        if !path.is_file() {
            continue;
        }
        let want = load_tensor_pb(&path).map_err(|e| e.to_string())?;
        let got = imp.graph.value_type(o.value);
        let shape_ok = got.shape.len() == want.shape().len()
            && got.shape.iter().zip(want.shape()).all(|(g, &w)| match g {
                Dim::Known(n) => *n == w,
                _ => true,
            });
        if got.dtype != want.dtype() || !shape_ok {
            return Err(format!(
                "output {k} \"{}\": imported {got}, expected {}",
                o.name,
                want.ty()
            ));
        }
    }
    Ok(())
}

#[test]
fn onnx_backend_node_tests_import() {
    let Some(suite) = suite_dir() else { return };
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&suite)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("model.onnx").is_file())
        .collect();
    dirs.sort();
    let (mut passed, mut expected, mut gaps, mut failures) = (0, 0, 0, Vec::new());
    for dir in &dirs {
        let name = dir.file_name().unwrap().to_string_lossy().to_string();
        match check(dir) {
            Ok(()) => passed += 1,
            Err(e) if EXPECTED_ERRORS.iter().any(|(m, _)| e.contains(m)) => expected += 1,
            Err(_) if INFER_GAPS.iter().any(|(n, _)| *n == name) => gaps += 1,
            Err(e) => failures.push(format!("{name}: {e}")),
        }
    }
    eprintln!(
        "onnx node tests: {passed} imported, {expected} expected errors, {gaps} infer gaps, {} unexpected",
        failures.len()
    );
    assert!(
        failures.is_empty(),
        "{} unexpected failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(
        passed >= MIN_PASSING,
        "only {passed} tests imported (at least {MIN_PASSING} did before)"
    );
}
