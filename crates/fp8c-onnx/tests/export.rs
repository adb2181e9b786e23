//! Writing weights back into a model (`export::with_weights`): initializers and `Constant`
//! values are replaced, unknown names are reported, external data is refused.

use fp8c_ir::{DType, Dim, Tensor};
use fp8c_onnx::builder::ModelBuilder;
use fp8c_onnx::{OnnxError, decode_model, export, tensor_from_proto};
use std::collections::BTreeMap;

/// y = (x + w) * c, with `w` an initializer and `c` a `Constant` node.
fn model() -> ModelBuilder {
    ModelBuilder::new()
        .input("x", DType::F32, &[Dim::Known(2)])
        .initializer_f32("w", &[2], &[1.0, 2.0])
        .node("Constant", &[], &["c"])
        .attr_tensor("value", &Tensor::from_f32(vec![2], &[3.0, 4.0]))
        .node("Add", &["x", "w"], &["s"])
        .node("Mul", &["s", "c"], &["y"])
        .output("y", DType::F32, &[Dim::Known(2)])
}

#[test]
fn initializers_and_constants_are_replaced_and_unknown_names_reported() {
    let src = model().to_bytes();
    let weights = BTreeMap::from([
        ("w".to_string(), Tensor::from_f32(vec![2], &[10.0, 20.0])),
        ("c".to_string(), Tensor::from_f32(vec![2], &[30.0, 40.0])),
        ("nope".to_string(), Tensor::from_f32(vec![1], &[0.0])),
    ]);
    let (bytes, missing) = export::with_weights(&src, &weights).unwrap();
    assert_eq!(missing, ["nope"]);
    let m = decode_model(&bytes).unwrap();
    let g = m.graph.unwrap();
    let w = tensor_from_proto(&g.initializer[0], None).unwrap();
    assert_eq!(w.to_f32_vec().unwrap(), [10.0, 20.0]);
    let c = g.node[0].attribute[0].t.as_ref().unwrap();
    assert_eq!(
        tensor_from_proto(c, None).unwrap().to_f32_vec().unwrap(),
        [30.0, 40.0]
    );
    assert_eq!(g.node.len(), 3, "nodes are kept");
    // Nothing to write: the same model back.
    let (same, none) = export::with_weights(&src, &BTreeMap::new()).unwrap();
    assert!(none.is_empty());
    assert_eq!(decode_model(&same).unwrap(), decode_model(&src).unwrap());
}

#[test]
fn external_data_and_non_models_are_errors() {
    let mut b = model();
    b.model_mut().graph.as_mut().unwrap().initializer[0].data_location = Some(1);
    let weights = BTreeMap::from([("w".to_string(), Tensor::from_f32(vec![2], &[0.0, 0.0]))]);
    let e = export::with_weights(&b.to_bytes(), &weights).unwrap_err();
    assert!(
        matches!(&e, OnnxError::ExternalData { name } if name == "w"),
        "{e}"
    );
    assert!(e.to_string().contains("\"w\" uses external data"), "{e}");
    let e = export::with_weights(b"\x08\x01garbage", &weights).unwrap_err();
    assert!(matches!(e, OnnxError::Decode { .. }), "{e}");
}
