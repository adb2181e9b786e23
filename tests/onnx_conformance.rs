//! ONNX's own backend node tests, run end to end on the CPU backend: import, compile with
//! `--precision f32` semantics (the whole pipeline, no FP8 rewriting), lower, run, and compare
//! with the test's expected outputs.
//!
//! The tests come from the pinned onnx wheel (`scripts/gen_onnx_node_tests.py`, generated into
//! `.cache/onnx-node-tests` on first use). `tests/onnx-node-manifest.txt` lists the tests
//! expected to pass (like tract's `node.txt`); a manifest test that fails fails this test. The
//! other tests run too and are reported, so the manifest can grow: `FP8C_BLESS_MANIFEST=1`
//! appends every newly passing test to it.
//!
//! Comparison, as ONNX's backend runner: floats within `rtol = 1e-3`, `atol = 1e-7`
//! (`|got − want| ≤ atol + rtol·|want|`) with NaN equal to NaN; integers, bools and FP8 codes
//! exactly (any FP8 NaN code equals any other).
//!
//! Inputs are fed at run time. A model that cannot be imported, compiled or lowered that way
//! (an input the IR needs as a constant: Reshape's shape, Slice's bounds, ...) is retried with
//! its integer inputs frozen to the test data as constants.

mod support;

use fp8c_ir::{DType, Graph, Tensor};
use fp8c_onnx::{ImportOptions, load_model, load_tensor_pb};
use fp8c_runtime::{Backend, CpuBackend};
use fp8c_session::{CompileOptions, Model};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

const RTOL: f64 = 1e-3;
const ATOL: f64 = 1e-7;

fn manifest_path() -> PathBuf {
    support::repo_root().join("tests/onnx-node-manifest.txt")
}

/// The test names of the manifest (comments start with `#`).
fn manifest() -> Vec<String> {
    let text = std::fs::read_to_string(manifest_path()).expect("tests/onnx-node-manifest.txt");
    text.lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect()
}

/// One data set: inputs and expected outputs, in the model's order.
struct DataSet {
    inputs: Vec<Tensor>,
    outputs: Vec<Tensor>,
}

fn load_sets(dir: &Path) -> Result<Vec<DataSet>, String> {
    let mut sets = Vec::new();
    for n in 0.. {
        let d = dir.join(format!("test_data_set_{n}"));
        if !d.is_dir() {
            break;
        }
        let load = |prefix: &str| -> Result<Vec<Tensor>, String> {
            let mut v = Vec::new();
            for k in 0.. {
                let p = d.join(format!("{prefix}_{k}.pb"));
                if !p.is_file() {
                    break;
                }
                v.push(load_tensor_pb(&p).map_err(|e| e.to_string())?);
            }
            Ok(v)
        };
        sets.push(DataSet {
            inputs: load("input")?,
            outputs: load("output")?,
        });
    }
    if sets.is_empty() {
        return Err("no test_data_set_N directory".into());
    }
    Ok(sets)
}

/// Import, bind shapes, compile in f32: the graph ready to lower.
fn build(
    model: &Path,
    names: &[String],
    set: &DataSet,
    freeze_ints: bool,
) -> Result<Graph, String> {
    let mut opts = ImportOptions::default();
    if freeze_ints {
        for (name, t) in names.iter().zip(&set.inputs) {
            if t.dtype().is_int() {
                opts.constant_inputs.insert(name.clone(), t.clone());
            }
        }
    }
    let g = load_model(model, &opts).map_err(|e| e.to_string())?.graph;
    let mut compile = CompileOptions::f32();
    compile.input_shapes = names
        .iter()
        .zip(&set.inputs)
        .filter(|(n, _)| !opts.constant_inputs.contains_key(*n))
        .map(|(n, t)| (n.clone(), t.shape().to_vec()))
        .collect();
    let compiled = Model::from_graph(g)
        .compile(&compile)
        .map_err(|e| e.to_string())?;
    Ok(compiled.graph)
}

/// Runs one test directory; `Err` says what went wrong.
fn run_test(dir: &Path) -> Result<(), String> {
    let model = dir.join("model.onnx");
    let info = fp8c_onnx::inspect(&model).map_err(|e| e.to_string())?;
    let names: Vec<String> = info.inputs.iter().map(|v| v.name.clone()).collect();
    let out_names: Vec<String> = info.outputs.iter().map(|v| v.name.clone()).collect();
    for (i, set) in load_sets(dir)?.iter().enumerate() {
        if set.inputs.len() != names.len() {
            return Err(format!(
                "data set {i} has {} inputs, the model {}",
                set.inputs.len(),
                names.len()
            ));
        }
        let lowered = |freeze| {
            build(&model, &names, set, freeze)
                .and_then(|g| Ok((fp8c_runtime::lower(&g).map_err(|e| e.to_string())?, g)))
        };
        let ((program, g), frozen) = match lowered(false) {
            Ok(x) => (x, false),
            Err(first) => match lowered(true) {
                Ok(x) => (x, true),
                Err(_) => return Err(first),
            },
        };
        let mut exe = CpuBackend
            .prepare(&program, g.weights())
            .map_err(|e| e.to_string())?;
        let feed: BTreeMap<String, Tensor> = names
            .iter()
            .zip(&set.inputs)
            .filter(|(n, t)| {
                !(frozen && t.dtype().is_int()) && program.inputs().iter().any(|(m, _)| m == *n)
            })
            .map(|(n, t)| (n.clone(), t.clone()))
            .collect();
        let got = exe.run(&feed).map_err(|e| e.to_string())?;
        for (k, want) in set.outputs.iter().enumerate() {
            let name = out_names
                .get(k)
                .ok_or_else(|| format!("output_{k}.pb has no model output"))?;
            let t = got
                .get(name)
                .ok_or_else(|| format!("output \"{name}\" was not produced"))?;
            same(t, want).map_err(|m| format!("data set {i}, output \"{name}\": {m}"))?;
        }
    }
    Ok(())
}

/// ONNX backend comparison (see the module docs).
fn same(got: &Tensor, want: &Tensor) -> Result<(), String> {
    if got.dtype() != want.dtype() || got.shape() != want.shape() {
        return Err(format!("got {}, expected {}", got.ty(), want.ty()));
    }
    let dt = want.dtype();
    if dt.is_fp8() {
        let fmt = match dt {
            DType::F8E4M3 => fp8c_core::Fp8Format::E4M3,
            _ => fp8c_core::Fp8Format::E5M2,
        };
        for (i, (&a, &b)) in got.bytes().iter().zip(want.bytes()).enumerate() {
            if a != b && !(fmt.is_nan_code(a) && fmt.is_nan_code(b)) {
                return Err(format!("element {i}: code {a:#04x}, expected {b:#04x}"));
            }
        }
        return Ok(());
    }
    if !dt.is_float() {
        if got.bytes() != want.bytes() {
            let (g, w) = (
                got.to_i64_vec().unwrap_or_default(),
                want.to_i64_vec().unwrap_or_default(),
            );
            let i = g.iter().zip(&w).position(|(a, b)| a != b).unwrap_or(0);
            return Err(format!(
                "element {i}: {:?}, expected {:?}",
                g.get(i),
                w.get(i)
            ));
        }
        return Ok(());
    }
    let (g, w) = (
        got.to_f64_vec().map_err(|e| e.to_string())?,
        want.to_f64_vec().map_err(|e| e.to_string())?,
    );
    for (i, (&a, &b)) in g.iter().zip(&w).enumerate() {
        let ok = (a.is_nan() && b.is_nan()) || a == b || (a - b).abs() <= ATOL + RTOL * b.abs();
        if !ok {
            return Err(format!("element {i}: {a}, expected {b}"));
        }
    }
    Ok(())
}

#[test]
fn onnx_backend_node_tests_run() {
    let suite = support::onnx_node_tests();
    let listed = manifest();
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&suite)
        .expect("the node test directory")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("model.onnx").is_file())
        .collect();
    dirs.sort();
    let name_of = |d: &Path| d.file_name().unwrap().to_string_lossy().to_string();
    let present: Vec<String> = dirs.iter().map(|d| name_of(d)).collect();
    let missing: Vec<&String> = listed.iter().filter(|n| !present.contains(n)).collect();
    assert!(
        missing.is_empty(),
        "manifest tests not in {}: {missing:?}",
        suite.display()
    );

    let (mut passed, mut failed) = (0usize, Vec::new());
    let mut newly = Vec::new();
    let mut others_failing = 0usize;
    for dir in &dirs {
        let name = name_of(dir);
        let result = run_test(dir);
        if listed.contains(&name) {
            match result {
                Ok(()) => passed += 1,
                Err(e) => failed.push(format!("{name}: {e}")),
            }
        } else {
            match result {
                Ok(()) => newly.push(name),
                Err(e) => {
                    others_failing += 1;
                    if std::env::var_os("FP8C_CONFORMANCE_VERBOSE").is_some() {
                        eprintln!("not in manifest, fails: {name}: {e}");
                    }
                }
            }
        }
    }
    if !newly.is_empty() {
        eprintln!(
            "{} test(s) outside the manifest pass now (add them to tests/onnx-node-manifest.txt, or run with FP8C_BLESS_MANIFEST=1):\n  {}",
            newly.len(),
            newly.join("\n  ")
        );
        if std::env::var_os("FP8C_BLESS_MANIFEST").is_some() {
            let mut text = std::fs::read_to_string(manifest_path()).unwrap();
            text.push_str("\n# added by FP8C_BLESS_MANIFEST=1\n");
            for n in &newly {
                text.push_str(n);
                text.push('\n');
            }
            std::fs::write(manifest_path(), text).unwrap();
        }
    }
    eprintln!(
        "outside the manifest: {} pass, {others_failing} fail (FP8C_CONFORMANCE_VERBOSE=1 lists why)",
        newly.len()
    );
    for f in &failed {
        eprintln!("FAILED {f}");
    }
    eprintln!("{passed} passed, {} failed", failed.len());
    assert!(
        failed.is_empty(),
        "{} manifest test(s) failed:\n{}",
        failed.len(),
        failed.join("\n")
    );
}
