//! Once every input shape is bound, what depends only on shapes and constants folds, and a
//! shape that truly depends on data is an error naming the node and the value.
//!
//! - `tests/models/export/detection_head.onnx` (`scripts/fixtures/make_detection_head.py`, a
//!   small torch module built like YOLOv8's head, dynamo export, dynamic batch, height and
//!   width): its anchor grids are Range / meshgrid (Expand) / Concat chains over the feature
//!   maps' shapes, with start and step stored as float initializers. `fp8c run` must match
//!   onnxruntime within 1e-5 (relative to the value's magnitude, at least 1) at two image
//!   sizes, and `fp8c compile --input-shape` must leave no range, expand or
//!   constant_of_shape in the IR.
//! - a Range whose limit is computed from a graph input's values: `fp8c run` fails naming the
//!   range node and the input.

mod support;

use fp8c_ir::DType;
use fp8c_onnx::builder::ModelBuilder;
use std::path::PathBuf;

fn detection_head() -> PathBuf {
    support::repo_root().join("tests/models/export/detection_head.onnx")
}

#[test]
fn a_detection_heads_anchor_grids_fold_and_it_matches_onnxruntime() {
    let model = detection_head();
    for shape in ["1x3x64x96", "2x3x96x64"] {
        let tag = format!("detection_head_{shape}");
        let (inputs, reference) =
            support::ort_reference(&model, &tag, &["--shape", &format!("images={shape}")]);
        let want = &support::read_npz(&reference)["boxes"];
        let out = support::scratch(&format!("shape_folding_{shape}")).join("out.npz");
        let got =
            &support::run_outputs(&tag, &model, &inputs, &["--precision", "f32"], &out)["boxes"];
        assert_eq!(got.ty(), want.ty());
        let (a, b) = (got.to_f64_vec().unwrap(), want.to_f64_vec().unwrap());
        let worst = a
            .iter()
            .zip(&b)
            .map(|(x, y)| (x - y).abs() / y.abs().max(1.0))
            .fold(0.0, f64::max);
        eprintln!("{tag}: max |fp8c - onnxruntime| / max(1, |onnxruntime|) = {worst:.3e}");
        assert!(worst <= 1e-5, "{tag}: {worst:e}");
    }
    // Compiled for a bound shape, the grids are constants (promoted to params, being larger
    // than 64 floats): no range, expand, constant_of_shape or shape is left to run.
    let r = support::run_fp8c([
        "compile".as_ref(),
        model.as_os_str(),
        "--input-shape".as_ref(),
        "images=1x3x64x96".as_ref(),
        "--precision".as_ref(),
        "f32".as_ref(),
    ]);
    assert!(r.ok, "{}", r.stderr);
    for op in [" range ", " expand ", " constant_of_shape ", " shape "] {
        assert!(
            !r.stdout.contains(op),
            "`{op}` left in the IR:\n{}",
            r.stdout
        );
    }
    assert!(
        r.stdout.contains("%node_unsqueeze: f32[1,2,120]"),
        "the anchor points are not a constant:\n{}",
        r.stdout
    );
    assert!(r.stdout.contains("f32[1,7,120] = concat"), "{}", r.stdout);
}

#[test]
fn a_shape_that_depends_on_data_names_the_node_and_the_input() {
    // r = range(0, i64(reduce_max(x)), 1): its length is a value of x.
    let dir = support::scratch("shape_folding_value_dependent");
    let model = dir.join("range_of_data.onnx");
    ModelBuilder::new()
        .input("x", DType::F32, &[4.into()])
        .initializer_i64("zero", &[], &[0])
        .initializer_i64("one", &[], &[1])
        .node("ReduceMax", &["x"], &["m"])
        .attr_int("keepdims", 0)
        .node("Cast", &["m"], &["limit"])
        .name("to_int")
        .attr_int("to", 7)
        .node("Range", &["zero", "limit", "one"], &["r"])
        .name("steps")
        .output("r", DType::I64, &[fp8c_ir::Dim::Unknown])
        .write(&model)
        .unwrap();
    let x = dir.join("x.npz");
    let t = fp8c_ir::Tensor::from_f32(vec![4], &[1.0, 5.0, 2.0, 3.0]);
    support::npy::write_npz(&x, &[("x", &t)]).unwrap();
    let r = support::run_fp8c([
        "run".as_ref(),
        model.as_os_str(),
        "--inputs".as_ref(),
        x.as_os_str(),
    ]);
    assert!(!r.ok);
    assert!(
        r.stderr.contains(
            "node \"steps\" (range): output 0 has type i64[?], which is not static: the shape \
             this node gives depends on the value of input 1 (\"to_int\", computed from graph \
             input \"x\")"
        ),
        "{}",
        r.stderr
    );
}
