//! `inspect` reads the proto alone: it works on models the importer cannot map.

use fp8c_ir::DType;
use fp8c_onnx::builder::{ModelBuilder, dim};
use fp8c_onnx::{OpsetInfo, ValueSummary, inspect, inspect_bytes};

fn model() -> ModelBuilder {
    ModelBuilder::new()
        .opset(17)
        .opset_import("com.microsoft", 1)
        .producer("pytorch", "2.3")
        .graph_name("g")
        .input("x", DType::F32, &[dim("batch"), 4.into()])
        .initializer_f32("w", &[4, 8], &[0.0; 32])
        .initializer_i64("shape", &[2], &[0, -1])
        .node("MatMul", &["x", "w"], &["a"])
        .node("FusedGelu", &["a"], &["b"])
        .domain("com.microsoft")
        .node("Unique", &["b"], &["c", "i"])
        .node("Relu", &["c"], &["y"])
        .node("Relu", &["y"], &["z"])
        .output("z", DType::F32, &[dim("batch"), fp8c_ir::Dim::Unknown])
}

#[test]
fn inspect_summarises_a_model_with_unsupported_ops() {
    let info = inspect_bytes(&model().to_bytes()).unwrap();
    assert_eq!(info.ir_version, 8);
    assert_eq!(
        info.opset_imports,
        [
            OpsetInfo {
                domain: "".into(),
                version: 17
            },
            OpsetInfo {
                domain: "com.microsoft".into(),
                version: 1
            }
        ]
    );
    assert_eq!(
        (info.producer_name.as_str(), info.producer_version.as_str()),
        ("pytorch", "2.3")
    );
    assert_eq!(info.graph_name, "g");
    assert_eq!(info.node_count, 5);
    let hist: Vec<(&str, usize)> = info
        .op_histogram
        .iter()
        .map(|(k, v)| (k.as_str(), *v))
        .collect();
    assert_eq!(
        hist,
        [
            ("MatMul", 1),
            ("Relu", 2),
            ("Unique", 1),
            ("com.microsoft::FusedGelu", 1)
        ]
    );
    assert_eq!(info.unsupported_ops, ["Unique", "com.microsoft::FusedGelu"]);
    assert_eq!(info.initializer_count, 2);
    assert_eq!(info.parameter_count, 34);
    assert_eq!(info.parameter_bytes, 32 * 4 + 2 * 8);
    assert_eq!(
        info.inputs,
        [ValueSummary {
            name: "x".into(),
            dtype: "f32".into(),
            shape: Some(vec!["batch".into(), "4".into()])
        }]
    );
    assert_eq!(
        info.outputs[0].shape,
        Some(vec!["batch".into(), "?".into()])
    );
    let json = serde_json::to_value(&info).unwrap();
    assert_eq!(json["op_histogram"]["Relu"], 2);
    let text = info.to_string();
    assert!(text.contains("input  x: f32[batch,4]"), "{text}");
}

#[test]
fn inspect_file_errors_name_the_file() {
    let path = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("inspect-empty.onnx");
    std::fs::write(&path, b"").unwrap();
    assert_eq!(
        inspect(&path).unwrap_err().to_string(),
        format!("{}: not an ONNX model (no graph)", path.display())
    );
}
