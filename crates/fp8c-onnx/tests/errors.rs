//! Every bad input gives one clear error naming the file, node, value and problem.

mod common;

use common::{import_err, import_with};
use fp8c_ir::{DType, Tensor};
use fp8c_onnx::builder::{ModelBuilder, dim};
use fp8c_onnx::proto::{StringStringEntryProto, TensorProto};
use fp8c_onnx::{ImportOptions, OnnxError, inspect, load_model, tensor_to_proto};
use std::path::PathBuf;

/// A fresh scratch directory for one test.
fn scratch(test: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("fp8c-onnx-errors")
        .join(test);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn load_err(path: &std::path::Path) -> String {
    load_model(path, &ImportOptions::default())
        .expect_err("load should fail")
        .to_string()
}

fn relu_model() -> ModelBuilder {
    ModelBuilder::new()
        .input("x", DType::F32, &[2.into()])
        .node("Relu", &["x"], &["y"])
        .name("r")
        .output_untyped("y")
}

// ------------------------------------------------------------------ undecodable files

#[test]
fn empty_file_is_not_a_model() {
    let dir = scratch("empty");
    let path = dir.join("empty.onnx");
    std::fs::write(&path, b"").unwrap();
    assert_eq!(
        load_err(&path),
        format!("{}: not an ONNX model (no graph)", path.display())
    );
    let e = inspect(&path).unwrap_err();
    assert!(matches!(e.kind(), OnnxError::NoGraph));
}

#[test]
fn random_bytes_are_not_a_model() {
    let dir = scratch("random");
    let path = dir.join("random.onnx");
    std::fs::write(&path, [0xffu8, 0xff, 0xff, 0xff, 0x0f, 0x01, 0x02]).unwrap();
    let msg = load_err(&path);
    assert!(
        msg.starts_with(&format!("{}: not a valid ONNX model: ", path.display())),
        "{msg}"
    );
}

#[test]
fn truncated_file_is_not_a_model() {
    let dir = scratch("truncated");
    let path = dir.join("truncated.onnx");
    let bytes = relu_model().to_bytes();
    std::fs::write(&path, &bytes[..bytes.len() - 3]).unwrap();
    let msg = load_err(&path);
    assert!(
        msg.starts_with(&format!("{}: not a valid ONNX model: ", path.display())),
        "{msg}"
    );
}

#[test]
fn missing_file_names_it() {
    let path = PathBuf::from("/nonexistent/model.onnx");
    let msg = load_err(&path);
    assert!(
        msg.starts_with("/nonexistent/model.onnx: cannot read: "),
        "{msg}"
    );
}

// ------------------------------------------------------------------ graph structure

#[test]
fn cycle_is_one_error_naming_its_nodes() {
    let b = ModelBuilder::new()
        .input("x", DType::F32, &[2.into()])
        .node("Add", &["x", "c"], &["a"])
        .name("n_add")
        .node("Relu", &["a"], &["b"])
        .name("n_relu")
        .node("Neg", &["b"], &["c"])
        .name("n_neg")
        .output_untyped("b");
    assert_eq!(
        import_err(b),
        r#"graph has a cycle: "n_add" -> "n_relu" -> "n_neg" -> "n_add""#
    );
}

#[test]
fn missing_input_names_node_and_value() {
    let b = ModelBuilder::new()
        .input("x", DType::F32, &[2.into()])
        .node("Add", &["x", "nowhere"], &["y"])
        .name("add1")
        .output_untyped("y");
    assert_eq!(
        import_err(b),
        r#"node "add1" (Add): input "nowhere" is not produced by any node, graph input or initializer"#
    );
}

#[test]
fn missing_graph_output() {
    let b = relu_model().output_untyped("ghost");
    assert_eq!(
        import_err(b),
        r#"graph output "ghost": is not produced by any node, graph input or initializer"#
    );
}

#[test]
fn value_defined_twice() {
    let b = relu_model().node("Neg", &["x"], &["y"]).name("again");
    assert_eq!(
        import_err(b),
        r#"value "y": is defined twice: by node "r" and by node "again""#
    );
}

#[test]
fn unsupported_ops_are_listed_at_once() {
    let b = ModelBuilder::new()
        .input("x", DType::F32, &[2.into(), 2.into()])
        .node("BiasSplitGelu", &["x", "x"], &["a"])
        .name("n1")
        .domain("com.microsoft")
        .node("Relu", &["a"], &["b"])
        .node("Unique", &["b"], &["c", "i"])
        .name("n7")
        .node("NonMaxSuppression", &["c"], &["y"])
        .output_untyped("y");
    let msg = import_err(b);
    assert_eq!(
        msg,
        r#"unsupported ONNX ops (3): "n1" (com.microsoft::BiasSplitGelu), "n7" (Unique), "NonMaxSuppression_3" (NonMaxSuppression)"#
    );
}

#[test]
fn unsupported_op_in_a_pruned_branch_passes() {
    let b = ModelBuilder::new()
        .input("x", DType::F32, &[2.into()])
        .node("Relu", &["x"], &["y"])
        .node("Unique", &["x"], &["k", "i"])
        .name("unique")
        .output_untyped("y")
        .output_untyped("k");
    let full = import_with(b.clone(), &ImportOptions::default())
        .unwrap_err()
        .to_string();
    assert_eq!(full, r#"unsupported ONNX ops (1): "unique" (Unique)"#);
    let opts = ImportOptions {
        outputs: Some(vec!["y".into()]),
        ..Default::default()
    };
    let imp = import_with(b, &opts).unwrap();
    assert_eq!(imp.graph.outputs().len(), 1);
}

#[test]
fn unknown_output_in_options() {
    let opts = ImportOptions {
        outputs: Some(vec!["zzz".into()]),
        ..Default::default()
    };
    let msg = import_with(relu_model(), &opts).unwrap_err().to_string();
    assert_eq!(
        msg,
        r#"import options: no value named "zzz" to output: no such output or intermediate value (graph outputs are: y)"#
    );
}

// ------------------------------------------------------------------ opsets

#[test]
fn opset_out_of_range_or_absent() {
    assert_eq!(
        import_err(relu_model().opset(28)),
        "opset: ai.onnx opset 28 is not supported (supported: 1 to 27)"
    );
    assert_eq!(
        import_err(relu_model().opset(0)),
        "opset: ai.onnx opset 0 is not supported (supported: 1 to 27)"
    );
    assert_eq!(
        import_err(relu_model().clear_opsets()),
        "opset: the model imports no ai.onnx opset"
    );
}

#[test]
fn old_opset_forms_that_change_values_are_refused() {
    // BatchNormalization-6 without is_test is training mode (is_test defaults to 0).
    let bn = |is_test: Option<i64>| {
        let mut b = ModelBuilder::new()
            .input("x", DType::F32, &[1.into(), 2.into(), 3.into()])
            .initializer_f32("s", &[2], &[1.0, 1.0])
            .initializer_f32("b", &[2], &[0.0, 0.0])
            .initializer_f32("m", &[2], &[0.0, 0.0])
            .initializer_f32("v", &[2], &[1.0, 1.0])
            .node("BatchNormalization", &["x", "s", "b", "m", "v"], &["y"])
            .name("bn");
        if let Some(t) = is_test {
            b = b.attr_int("is_test", t);
        }
        b.output_untyped("y").opset(6)
    };
    assert_eq!(
        import_err(bn(None)),
        "node \"bn\" (BatchNormalization): attribute `is_test` = 0 (training mode) of \
         BatchNormalization before opset 7 is not supported: give is_test = 1"
    );
    import_with(bn(Some(1)), &ImportOptions::default()).unwrap();
    // Reshape-1's `shape` attribute (an input from opset 5 on).
    let reshape = ModelBuilder::new()
        .input("x", DType::F32, &[2.into(), 3.into()])
        .node("Reshape", &["x"], &["y"])
        .name("r")
        .attr_ints("shape", &[3, 2])
        .output_untyped("y")
        .opset(4);
    assert_eq!(
        import_err(reshape),
        "node \"r\" (Reshape): attribute `shape` of Reshape before opset 7 (opset 4) is not supported"
    );
}

#[test]
fn dropout_in_training_mode_is_the_identity_only_at_ratio_zero() {
    // ratio a float initializer (a param), training_mode a bool initializer (a constant).
    let drop = |ratio: f32, training: bool| {
        ModelBuilder::new()
            .opset(13)
            .input("x", DType::F32, &[2.into(), 3.into()])
            .initializer_f32("r", &[], &[ratio])
            .initializer("t", &Tensor::from_bool(vec![], &[training]))
            .node("Dropout", &["x", "r", "t"], &["y"])
            .name("d")
            .output_untyped("y")
    };
    for (ratio, training) in [(0.5, false), (0.0, true)] {
        let g = common::import(drop(ratio, training)).graph;
        assert_eq!(common::op_names(&g), ["identity"], "{ratio} {training}");
    }
    assert_eq!(
        import_err(drop(0.5, true)),
        "node \"d\" (Dropout): training_mode = true with ratio 0.5 drops a random mask: fp8c \
         imports Dropout at inference (or with ratio 0) only; ONNX leaves the random generator \
         to the runtime"
    );
}

#[test]
fn old_opset_broadcast_with_axis_aligns_b_from_axis() {
    // Add-6, broadcast = 1, axis = 1: B of shape [3] lines up with A's axis 1.
    let b = ModelBuilder::new()
        .input("a", DType::F32, &[2.into(), 3.into(), 4.into()])
        .input("b", DType::F32, &[3.into()])
        .node("Add", &["a", "b"], &["y"])
        .attr_int("broadcast", 1)
        .attr_int("axis", 1)
        .output_untyped("y")
        .opset(6);
    let imp = import_with(b, &ImportOptions::default()).unwrap();
    let y = imp.graph.outputs()[0].value;
    assert_eq!(imp.graph.value_type(y).to_string(), "f32[2,3,4]");
}

// ------------------------------------------------------------------ inputs

#[test]
fn untyped_input_is_named() {
    let b = ModelBuilder::new()
        .input_untyped("x")
        .node("Relu", &["x"], &["y"])
        .output_untyped("y");
    assert_eq!(import_err(b), r#"graph input "x": has no type"#);
}

#[test]
fn unsupported_input_dtype_is_named() {
    let mut b = relu_model();
    let vi = &mut b.model_mut().graph.as_mut().unwrap().input[0];
    if let Some(fp8c_onnx::proto::type_proto::Value::TensorType(t)) =
        &mut vi.r#type.as_mut().unwrap().value
    {
        t.elem_type = Some(22); // INT4
    }
    assert_eq!(
        import_err(b),
        r#"graph input "x": unsupported element type INT4"#
    );
}

#[test]
fn input_shape_overrides_are_checked() {
    let b = ModelBuilder::new()
        .input("x", DType::F32, &[dim("b"), 4.into()])
        .node("Relu", &["x"], &["y"])
        .output_untyped("y");
    let opts = ImportOptions {
        input_shapes: [("x".to_string(), vec![1, 2, 3])].into(),
        ..Default::default()
    };
    assert_eq!(
        import_with(b.clone(), &opts).unwrap_err().to_string(),
        r#"import options: input_shapes: input "x" has rank 2, but 3 dims were given ([1, 2, 3])"#
    );
    let opts = ImportOptions {
        input_shapes: [("q".to_string(), vec![1])].into(),
        ..Default::default()
    };
    assert_eq!(
        import_with(b, &opts).unwrap_err().to_string(),
        r#"import options: input_shapes: no graph input named "q" (inputs are: x)"#
    );
}

// ------------------------------------------------------------------ tensors

fn with_initializer(t: TensorProto) -> ModelBuilder {
    ModelBuilder::new()
        .input("x", DType::F32, &[2.into()])
        .initializer_proto(t)
        .node("Add", &["x", "w"], &["y"])
        .output_untyped("y")
}

fn f32_proto(dims: &[i64]) -> TensorProto {
    TensorProto {
        name: Some("w".into()),
        dims: dims.to_vec(),
        data_type: Some(1),
        ..Default::default()
    }
}

#[test]
fn negative_dims_are_rejected() {
    let t = TensorProto {
        float_data: vec![1.0, 2.0],
        ..f32_proto(&[-2])
    };
    assert_eq!(
        import_err(with_initializer(t)),
        r#"tensor "w": negative dimension -2 in dims [-2]"#
    );
}

#[test]
fn absurd_dims_are_rejected_without_allocating() {
    let t = TensorProto {
        raw_data: Some(vec![0; 8]),
        ..f32_proto(&[1 << 40, 1 << 40])
    };
    assert_eq!(
        import_err(with_initializer(t)),
        r#"tensor "w": dims [1099511627776, 1099511627776] are too large (17179869184 elements at most)"#
    );
}

#[test]
fn corrupt_raw_data_length() {
    let t = TensorProto {
        raw_data: Some(vec![0; 7]),
        ..f32_proto(&[2])
    };
    assert_eq!(
        import_err(with_initializer(t)),
        r#"tensor "w": raw_data has 7 bytes, but f32 dims [2] need 8"#
    );
}

#[test]
fn typed_data_count_mismatch_and_no_data() {
    let t = TensorProto {
        float_data: vec![1.0, 2.0, 3.0],
        ..f32_proto(&[2])
    };
    assert_eq!(
        import_err(with_initializer(t)),
        r#"tensor "w": float_data has 3 values, but the dims hold 2"#
    );
    let t = f32_proto(&[2]);
    assert_eq!(
        import_err(with_initializer(t)),
        r#"tensor "w": has no data (f32 needs raw_data or float_data with 2 values)"#
    );
}

fn external(location: &str, offset: Option<u64>, length: Option<u64>) -> TensorProto {
    let mut kv = vec![StringStringEntryProto {
        key: Some("location".into()),
        value: Some(location.into()),
    }];
    if let Some(o) = offset {
        kv.push(StringStringEntryProto {
            key: Some("offset".into()),
            value: Some(o.to_string()),
        });
    }
    if let Some(l) = length {
        kv.push(StringStringEntryProto {
            key: Some("length".into()),
            value: Some(l.to_string()),
        });
    }
    TensorProto {
        external_data: kv,
        data_location: Some(1),
        ..f32_proto(&[2])
    }
}

#[test]
fn external_data_paths_must_stay_inside_the_model_dir() {
    let dir = scratch("external_escape");
    let path = dir.join("m.onnx");
    for loc in ["../secret.bin", "/etc/passwd", "a/../../b.bin"] {
        with_initializer(external(loc, None, None))
            .write(&path)
            .unwrap();
        assert_eq!(
            load_err(&path),
            format!(
                r#"{}: tensor "w": external data location "{loc}" must be a relative path inside the model's directory"#,
                path.display()
            )
        );
    }
}

#[test]
fn external_data_is_read_and_checked() {
    let dir = scratch("external_ok");
    let path = dir.join("m.onnx");
    let mut data = vec![0u8; 4];
    data.extend(1.5f32.to_le_bytes());
    data.extend(2.5f32.to_le_bytes());
    std::fs::create_dir_all(dir.join("sub")).unwrap();
    std::fs::write(dir.join("sub/w.bin"), &data).unwrap();

    with_initializer(external("sub/w.bin", Some(4), Some(8)))
        .write(&path)
        .unwrap();
    let imp = load_model(&path, &ImportOptions::default()).unwrap();
    assert_eq!(imp.graph.weights()["w"].to_f32_vec().unwrap(), [1.5, 2.5]);

    // Length defaults to the rest of the file.
    with_initializer(external("sub/w.bin", Some(4), None))
        .write(&path)
        .unwrap();
    assert!(load_model(&path, &ImportOptions::default()).is_ok());

    with_initializer(external("sub/w.bin", Some(8), Some(8)))
        .write(&path)
        .unwrap();
    assert_eq!(
        load_err(&path),
        format!(
            r#"{}: tensor "w": external data file "{}" has 12 bytes, too short for offset 8 + length 8"#,
            path.display(),
            dir.join("sub/w.bin").display()
        )
    );
    with_initializer(external("sub/w.bin", Some(0), Some(4)))
        .write(&path)
        .unwrap();
    assert_eq!(
        load_err(&path),
        format!(
            r#"{}: tensor "w": external data length is 4 bytes, but the dims need 8"#,
            path.display()
        )
    );
    with_initializer(external("missing.bin", None, None))
        .write(&path)
        .unwrap();
    assert!(
        load_err(&path).contains(r#"tensor "w": external data file ""#),
        "{}",
        load_err(&path)
    );
}

#[test]
fn external_data_without_a_directory() {
    let msg = import_err(with_initializer(external("w.bin", None, None)));
    assert_eq!(
        msg,
        r#"tensor "w": external data "w.bin" needs the model's directory (load the model from a file)"#
    );
}

#[test]
fn unsupported_initializer_dtype() {
    let t = TensorProto {
        data_type: Some(15),
        raw_data: Some(vec![0; 32]),
        ..f32_proto(&[2])
    };
    assert_eq!(
        import_err(with_initializer(t)),
        r#"tensor "w": unsupported element type COMPLEX128"#
    );
}

#[test]
fn sparse_constant_is_rejected() {
    let b = ModelBuilder::new()
        .node("Constant", &[], &["y"])
        .name("c")
        .attr(fp8c_onnx::proto::AttributeProto {
            name: Some("sparse_value".into()),
            r#type: Some(11),
            ..Default::default()
        })
        .output_untyped("y");
    assert_eq!(
        import_err(b),
        r#"node "c" (Constant): sparse constants (`sparse_value`) are not supported"#
    );
}

// ------------------------------------------------------------------ nodes

#[test]
fn non_constant_axes_name_the_node() {
    let b = ModelBuilder::new()
        .opset(13)
        .input("x", DType::F32, &[3.into()])
        .input("axes", DType::I64, &[1.into()])
        .node("Unsqueeze", &["x", "axes"], &["y"])
        .name("unsq")
        .output_untyped("y");
    assert_eq!(
        import_err(b),
        r#"node "unsq" (Unsqueeze): input 1 (`axes`, value "axes") must be a constant: the IR takes axes as an attribute"#
    );
}

#[test]
fn type_inference_failure_names_the_node() {
    let b = ModelBuilder::new()
        .input("a", DType::F32, &[2.into(), 3.into()])
        .input("b", DType::F32, &[4.into(), 5.into()])
        .node("MatMul", &["a", "b"], &["y"])
        .name("mm")
        .output_untyped("y");
    let msg = import_err(b);
    assert!(msg.starts_with(r#"node "mm" (MatMul): matmul: "#), "{msg}");
}

#[test]
fn wrong_input_count() {
    let b = ModelBuilder::new()
        .input("x", DType::F32, &[2.into()])
        .node("Relu", &["x", "x"], &["y"])
        .name("r")
        .output_untyped("y");
    assert_eq!(
        import_err(b),
        r#"node "r" (Relu): expects 1 input(s), got 2"#
    );
}

#[test]
fn unsupported_extra_outputs_when_used() {
    let mut b = ModelBuilder::new().opset(15).input(
        "x",
        DType::F32,
        &[1.into(), 2.into(), 4.into(), 4.into()],
    );
    for p in ["s", "bias", "mean", "var"] {
        b = b.initializer_f32(p, &[2], &[1.0, 1.0]);
    }
    let bn = b
        .clone()
        .node(
            "BatchNormalization",
            &["x", "s", "bias", "mean", "var"],
            &["y", "rm", "rv"],
        )
        .name("bn")
        .output_untyped("rm");
    assert_eq!(
        import_err(bn),
        r#"node "bn" (BatchNormalization): output 1 ("rm") is used, but the running and saved statistics are outputs of training mode only (opset 14's training_mode = 1)"#
    );
    // Dropout's mask at inference is all true: supported.
    let drop = b
        .clone()
        .node("Dropout", &["x"], &["y", "mask"])
        .name("d")
        .output_untyped("mask");
    let g = common::import(drop).graph;
    let mask = g.outputs().iter().find(|o| o.name == "mask").unwrap();
    let t = g.constant_value(mask.value).expect("a constant mask");
    assert_eq!((t.dtype(), t.shape()), (DType::Bool, &[1u64, 2, 4, 4][..]));
    assert!(t.bytes().iter().all(|&b| b == 1));
    let pool = b
        .node("MaxPool", &["x"], &["y", "idx"])
        .name("p")
        .attr_ints("kernel_shape", &[2, 2])
        .output_untyped("idx");
    // MaxPool's Indices: planned at import (ops/pool_indices.rs).
    let g = common::import(pool).graph;
    let idx = g.outputs().iter().find(|o| o.name == "idx").unwrap();
    assert_eq!(g.value_type(idx.value).to_string(), "i64[1,2,3,3]");
}

#[test]
fn missing_required_attribute() {
    let b = ModelBuilder::new()
        .input("x", DType::F32, &[2.into()])
        .node("Concat", &["x", "x"], &["y"])
        .name("cat")
        .output_untyped("y");
    assert_eq!(
        import_err(b),
        r#"node "cat" (Concat): attribute `axis` is required"#
    );
    let b = ModelBuilder::new()
        .input("x", DType::F32, &[2.into()])
        .node("Cast", &["x"], &["y"])
        .name("c")
        .attr_int("to", 22)
        .output_untyped("y");
    assert_eq!(
        import_err(b),
        r#"node "c" (Cast): attribute `to`: unsupported element type INT4"#
    );
}

#[test]
fn errors_keep_their_kind_under_the_file_prefix() {
    let dir = scratch("kind");
    let path = dir.join("m.onnx");
    let b = ModelBuilder::new()
        .input("x", DType::F32, &[2.into()])
        .node("Unique", &["x"], &["y"])
        .output_untyped("y");
    b.write(&path).unwrap();
    let e = load_model(&path, &ImportOptions::default()).unwrap_err();
    assert!(matches!(e.kind(), OnnxError::Unsupported(list) if list.len() == 1));
    assert_eq!(
        e.to_string(),
        format!(
            r#"{}: unsupported ONNX ops (1): "Unique_0" (Unique)"#,
            path.display()
        )
    );
    let _ = tensor_to_proto("t", &Tensor::scalar_f32(1.0));
}

#[test]
fn huge_declared_scale_is_an_error_not_an_allocation() {
    let b = ModelBuilder::new()
        .input("x", DType::F32, &[2.into()])
        .input("scale", DType::F32, &[(1u64 << 33).into()])
        .node("QuantizeLinear", &["x", "scale"], &["q"])
        .name("q")
        .output_untyped("q");
    assert_eq!(
        import_err(b),
        r#"node "q" (QuantizeLinear): scale has type f32[8589934592]: too large to make a zero point for it"#
    );
}
