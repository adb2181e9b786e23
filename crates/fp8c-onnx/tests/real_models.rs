//! Real exported models: the small ones committed in `examples/models/` always run; the
//! larger ones from `scripts/fetch-models.sh` (in `.cache/models/`, or `$FP8C_MODEL_CACHE/models`)
//! run when fetched and are skipped with a message otherwise. Expected output types were
//! checked against onnxruntime with the same input shapes.

use fp8c_ir::{Graph, Op};
use fp8c_onnx::{ImportOptions, Imported, OnnxError, inspect, load_model};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn example(name: &str) -> PathBuf {
    repo_root().join("examples/models").join(name)
}

/// A fetched model, or `None` (with a note on stderr) when it is not there.
fn cached(name: &str) -> Option<PathBuf> {
    let cache = std::env::var_os("FP8C_MODEL_CACHE")
        .map_or_else(|| repo_root().join(".cache"), PathBuf::from);
    let path = cache.join("models").join(format!("{name}.onnx"));
    if path.is_file() {
        Some(path)
    } else {
        eprintln!(
            "skipping {name}: {} not found (run scripts/fetch-models.sh)",
            path.display()
        );
        None
    }
}

fn shapes(list: &[(&str, &[u64])]) -> ImportOptions {
    let input_shapes: BTreeMap<String, Vec<u64>> = list
        .iter()
        .map(|(n, d)| (n.to_string(), d.to_vec()))
        .collect();
    ImportOptions {
        input_shapes,
        ..Default::default()
    }
}

fn load(path: &Path, opts: &ImportOptions) -> Imported {
    let imp = load_model(path, opts).unwrap_or_else(|e| panic!("{e}"));
    fp8c_ir::verify(&imp.graph).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    inspect(path).unwrap_or_else(|e| panic!("{e}"));
    imp
}

fn outputs(imp: &Imported) -> Vec<String> {
    imp.graph
        .outputs()
        .iter()
        .map(|o| format!("{}: {}", o.name, imp.graph.value_type(o.value)))
        .collect()
}

fn count(g: &Graph, pred: impl Fn(&Op) -> bool) -> usize {
    g.node_ids()
        .into_iter()
        .filter(|&id| pred(&g.node(id).op))
        .count()
}

#[test]
fn resnet50_caffe2_opset9() {
    let imp = load(&example("light_resnet50.onnx"), &ImportOptions::default());
    assert_eq!(imp.opset, 9);
    assert_eq!(outputs(&imp), ["gpu_0/softmax_1: f32[1,1000]"]);
    assert_eq!(count(&imp.graph, |op| matches!(op, Op::Conv { .. })), 53);
    assert_eq!(
        count(&imp.graph, |op| matches!(op, Op::BatchNormalization { .. })),
        53
    );
    // The model lists its initializers as inputs too (IR version 3): only the image remains.
    assert_eq!(imp.graph.inputs().len(), 1);
}

#[test]
fn squeezenet_caffe2_opset9() {
    let imp = load(&example("light_squeezenet.onnx"), &ImportOptions::default());
    assert_eq!(outputs(&imp), ["softmaxout_1: f32[1,1000,1,1]"]);
}

#[test]
fn ppocr_mobile_v2_cls_paddle_opset11() {
    let imp = load(
        &example("ppocr-mobile-v2-cls.onnx"),
        &shapes(&[("x", &[1, 3, 48, 192])]),
    );
    let out = imp.graph.value_type(imp.graph.outputs()[0].value);
    // onnxruntime: f32[1,2]. The batch dim comes from a Shape -> Cast -> Slice -> Concat
    // chain that only constant folding resolves.
    assert_eq!(out.dtype, fp8c_ir::DType::F32);
    assert_eq!(out.shape.len(), 2);
    assert_eq!(out.shape[1], fp8c_ir::Dim::Known(2));
    // HardSigmoid (and its HardSwish use) decomposed into mul/add/clip.
    assert!(count(&imp.graph, |op| matches!(op, Op::Clip)) >= 18);
}

#[test]
fn bert_style_encoder_minilm_l3() {
    let Some(path) = cached("minilm-l3-paraphrase") else {
        return;
    };
    let symbolic = load(&path, &ImportOptions::default());
    assert_eq!(symbolic.opset, 17);
    assert_eq!(symbolic.graph.params().len(), 53);
    let imp = load(
        &path,
        &shapes(&[("input_ids", &[2, 16]), ("attention_mask", &[2, 16])]),
    );
    assert_eq!(
        outputs(&imp),
        [
            "output: i64[2,16]",
            "463: i64[2,16]",
            "onnx::Shape_422: f32[2,16,384]",
            "461: f32[2,384]"
        ]
    );
    assert_eq!(count(&imp.graph, |op| matches!(op, Op::MatMul)), 24);
    assert_eq!(
        count(&imp.graph, |op| matches!(op, Op::LayerNormalization { .. })),
        7
    );
}

#[test]
fn cnn_orinet() {
    let Some(path) = cached("orinet") else { return };
    let imp = load(&path, &ImportOptions::default());
    assert_eq!(outputs(&imp), ["logits: f32[batch,4]"]);
    let imp = load(&path, &shapes(&[("x", &[2, 3, 320, 320])]));
    assert_eq!(outputs(&imp), ["logits: f32[2,4]"]);
}

#[test]
fn ppocrv4_rec_opset12() {
    let Some(path) = cached("ppocrv4-rec") else {
        return;
    };
    let imp = load(&path, &shapes(&[("x", &[1, 3, 48, 320])]));
    assert_eq!(outputs(&imp), ["softmax_11.tmp_0: f32[1,40,6625]"]);
}

/// PP-OCRv4's text detector (opset 12): its six nearest-neighbour Resize nodes (asymmetric,
/// floor, constant scales) and two ConvTranspose nodes import once the spatial dims are given.
#[test]
fn ppocrv4_det_opset12() {
    let Some(path) = cached("ppocrv4-det") else {
        return;
    };
    assert!(inspect(&path).unwrap().unsupported_ops.is_empty());
    let imp = load(&path, &shapes(&[("x", &[1, 3, 96, 128])]));
    assert_eq!(outputs(&imp), ["sigmoid_0.tmp_0: f32[1,1,96,128]"]);
}

#[test]
fn models_with_ops_outside_the_ir_are_listed() {
    if let Some(path) = cached("minilm-l6-int8w") {
        let e = load_model(&path, &ImportOptions::default()).unwrap_err();
        assert!(matches!(e.kind(), OnnxError::Unsupported(_)));
        assert!(
            e.to_string()
                .ends_with(r#"unsupported ONNX ops (1): "node_GatherND_40" (GatherND)"#),
            "{e}"
        );
        let info = inspect(&path).unwrap();
        assert_eq!(info.unsupported_ops, ["GatherND"]);
    }
}
