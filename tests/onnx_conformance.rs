//! ONNX's own backend node tests, run the way a user runs them: one `fp8c run model.onnx
//! --data test_data_set_N --out-dir OUT --precision f32` process per data set, whose
//! `output_K.pb` files are compared with the test's expected outputs. Nothing is frozen or
//! patched by this harness: inputs that decide shapes (Reshape's shape, Slice bounds, axes fed
//! as inputs) are specialised on by `fp8c run` itself.
//!
//! The tests come from the pinned onnx wheel (`scripts/fixtures/gen_onnx_node_tests.py`, generated
//! into `.cache/onnx-node-tests` on first use). `tests/onnx-node-manifest.txt` lists the tests
//! expected to pass (like tract's `node.txt`); a manifest test that fails fails this test. The
//! other tests run too and are reported, so the manifest can grow: `FP8C_BLESS_MANIFEST=1`
//! appends every newly passing test to it. The output gives the passing count per op family,
//! and the count passing of those selected and of those whose inputs have an element type
//! the IR lacks (int2/int4, uint2/uint4).
//!
//! Comparison, as ONNX's backend runner: floats within `rtol = 1e-3`, `atol = 1e-7`
//! (`|got − want| ≤ atol + rtol·|want|`) with NaN equal to NaN; integers, bools and FP8 codes
//! exactly (any FP8 NaN code equals any other).

mod support;

use fp8c_ir::{DType, Tensor};
use fp8c_onnx::load_tensor_pb;
use prost::Message;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

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

/// One data set's expected outputs, in the model's order (its inputs are read by `fp8c run`).
struct DataSet {
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
            outputs: load("output")?,
        });
    }
    if sets.is_empty() {
        return Err("no test_data_set_N directory".into());
    }
    Ok(sets)
}

/// ONNX element types with no IR dtype: UINT4, INT4, UINT2, INT2.
const NARROW_INT_TYPES: [i32; 4] = [21, 22, 25, 26];

/// True if an input of the test's first data set has an element type in
/// [`NARROW_INT_TYPES`] (read from the TensorProto itself, which fp8c cannot load).
fn narrow_int_inputs(dir: &Path) -> bool {
    let set = dir.join("test_data_set_0");
    (0..)
        .map(|k| set.join(format!("input_{k}.pb")))
        .take_while(|p| p.is_file())
        .any(|p| {
            std::fs::read(&p)
                .ok()
                .and_then(|b| fp8c_onnx::proto::TensorProto::decode(b.as_slice()).ok())
                .is_some_and(|t| NARROW_INT_TYPES.contains(&t.data_type()))
        })
}

/// Runs one test directory through the `fp8c` binary; `Err` says what went wrong.
fn run_test(dir: &Path, scratch: &Path) -> Result<(), String> {
    let model = dir.join("model.onnx");
    for (i, set) in load_sets(dir)?.iter().enumerate() {
        let set_dir = dir.join(format!("test_data_set_{i}"));
        let out = scratch.join(format!("set{i}"));
        let _ = std::fs::remove_dir_all(&out);
        let run = support::run_fp8c([
            "run".as_ref(),
            model.as_os_str(),
            "--data".as_ref(),
            set_dir.as_os_str(),
            "--out-dir".as_ref(),
            out.as_os_str(),
            "--precision".as_ref(),
            "f32".as_ref(),
        ]);
        if !run.ok {
            let msg = run.stderr.trim().lines().last().unwrap_or("").to_string();
            return Err(format!("data set {i}: {msg}"));
        }
        for (k, want) in set.outputs.iter().enumerate() {
            let path = out.join(format!("output_{k}.pb"));
            let got = load_tensor_pb(&path).map_err(|e| format!("output {k}: {e}"))?;
            same(&got, want).map_err(|m| format!("data set {i}, output {k}: {m}"))?;
        }
    }
    Ok(())
}

/// The op family of a test, for the per-family counts: the family of the op the test is
/// named after (the longest op name of the test's ops found in its name), in fp8c's family
/// names.
fn family_of(test: &str, ops: &[&str]) -> &'static str {
    let name = test.to_lowercase().replace('_', "");
    let main = ops
        .iter()
        .filter(|o| name.contains(&o.to_lowercase()))
        .max_by_key(|o| o.len())
        .or(ops.first())
        .copied()
        .unwrap_or("");
    match main {
        "MatMul" | "Gemm" | "Einsum" | "MatMulInteger" | "QLinearMatMul" => "linalg",
        "Conv" | "ConvTranspose" | "ConvInteger" | "QLinearConv" => "conv",
        m if m.ends_with("Pool") || m == "LpPool" => "pool",
        m if m.contains("Normalization") || m.contains("Softmax") || m == "LRN" => "normalize",
        m if m.starts_with("Reduce") || m.starts_with("Arg") || m == "TopK" => "reduce",
        "QuantizeLinear" | "DequantizeLinear" | "DynamicQuantizeLinear" => "fp8",
        "Cast" | "CastLike" if name.contains("float8") || name.contains("e8m0") => "fp8",
        "Reshape" | "Transpose" | "Unsqueeze" | "Squeeze" | "Flatten" | "Concat" | "Split"
        | "Slice" | "Gather" | "GatherND" | "GatherElements" | "ScatterND" | "ScatterElements"
        | "Expand" | "ConstantOfShape" | "Range" | "Pad" | "Tile" | "Shape" | "Size" | "Trilu"
        | "CumSum" | "Identity" | "Constant" | "OneHot" | "DepthToSpace" | "SpaceToDepth"
        | "Resize" => "movement",
        _ => "elementwise",
    }
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

/// `test name → its ops`, from the suite's MANIFEST.tsv.
fn suite_ops(suite: &Path) -> BTreeMap<String, Vec<String>> {
    let text = std::fs::read_to_string(suite.join("MANIFEST.tsv")).unwrap_or_default();
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let mut f = l.split('\t');
            let (name, ops) = (f.next()?, f.next()?);
            Some((
                name.to_string(),
                ops.split(';').map(str::to_string).collect(),
            ))
        })
        .collect()
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
    let ops = suite_ops(&suite);
    let scratch = support::scratch("onnx-node-cli");

    // Two workers: this machine (and CI) has two cores; each test is one or a few processes.
    let results: Mutex<Vec<(String, Result<(), String>)>> = Mutex::new(Vec::new());
    let next = Mutex::new(0usize);
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                loop {
                    let i = {
                        let mut n = next.lock().unwrap();
                        *n += 1;
                        *n - 1
                    };
                    let Some(dir) = dirs.get(i) else { break };
                    let name = name_of(dir);
                    let r = run_test(dir, &scratch.join(&name));
                    results.lock().unwrap().push((name, r));
                }
            });
        }
    });
    let mut results = results.into_inner().unwrap();
    results.sort_by(|a, b| a.0.cmp(&b.0));
    let narrow: Vec<String> = dirs
        .iter()
        .filter(|d| narrow_int_inputs(d))
        .map(|d| name_of(d))
        .collect();

    let (mut passed, mut failed) = (0usize, Vec::new());
    let mut newly = Vec::new();
    let mut others_failing = 0usize;
    let mut by_family: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    for (name, result) in &results {
        let test_ops: Vec<&str> = ops
            .get(name)
            .map(|v| v.iter().map(String::as_str).collect())
            .unwrap_or_default();
        let fam = by_family.entry(family_of(name, &test_ops)).or_default();
        fam.1 += 1;
        if result.is_ok() {
            fam.0 += 1;
        }
        if listed.iter().any(|l| l == name) {
            match result {
                Ok(()) => passed += 1,
                Err(e) => failed.push(format!("{name}: {e}")),
            }
        } else {
            match result {
                Ok(()) => newly.push(name.clone()),
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
        "passing per op family (all {} selected tests, through `fp8c run`):",
        results.len()
    );
    for (fam, (ok, all)) in &by_family {
        eprintln!("  {fam:<12} {ok:>4} of {all:>4}");
    }
    eprintln!(
        "outside the manifest: {} pass, {others_failing} fail (FP8C_CONFORMANCE_VERBOSE=1 lists why)",
        newly.len()
    );
    let all_ok = results.iter().filter(|(_, r)| r.is_ok()).count();
    let other: Vec<&(String, Result<(), String>)> = results
        .iter()
        .filter(|(n, _)| !narrow.contains(n))
        .collect();
    let other_ok = other.iter().filter(|(_, r)| r.is_ok()).count();
    eprintln!(
        "{all_ok} of {} selected tests pass; {} are excluded by dtype (int2/int4/uint2/uint4 inputs); {other_ok} of the other {} pass",
        results.len(),
        narrow.len(),
        other.len()
    );
    for f in &failed {
        eprintln!("FAILED {f}");
    }
    eprintln!("{passed} manifest tests passed, {} failed", failed.len());
    assert!(
        failed.is_empty(),
        "{} manifest test(s) failed:\n{}",
        failed.len(),
        failed.join("\n")
    );
}
