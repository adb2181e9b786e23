//! Import of GatherElements, ScatterElements, ScatterND and Trilu: attributes with their ONNX
//! defaults, `reduction` values by opset, Trilu's optional `k` input. (ops.rs holds the other
//! families; these run end to end in the ONNX node tests.)

mod common;

use common::{import, import_err, op_of, output_ty};
use fp8c_ir::{DType, Op, ScatterReduction};
use fp8c_onnx::builder::ModelBuilder;

fn data_and_indices(opset: i64) -> ModelBuilder {
    ModelBuilder::new()
        .opset(opset)
        .input("x", DType::F32, &[3.into(), 4.into()])
        .input("i", DType::I64, &[2.into(), 4.into()])
        .input("u", DType::F32, &[2.into(), 4.into()])
}

#[test]
fn gather_and_scatter_elements_read_axis_and_reduction() {
    let b = data_and_indices(18)
        .node("GatherElements", &["x", "i"], &["g"])
        .name("gather")
        .node("ScatterElements", &["x", "i", "u"], &["s"])
        .name("scatter")
        .attr_int("axis", -2)
        .attr_str("reduction", "max")
        .output_untyped("g")
        .output_untyped("s");
    let imp = import(b);
    assert_eq!(op_of(&imp.graph, "gather"), &Op::GatherElements { axis: 0 });
    assert_eq!(
        op_of(&imp.graph, "scatter"),
        &Op::ScatterElements {
            axis: -2,
            reduction: ScatterReduction::Max
        }
    );
    assert_eq!(output_ty(&imp, "g"), "f32[2,4]");
    assert_eq!(output_ty(&imp, "s"), "f32[3,4]");
}

#[test]
fn scatter_reductions_follow_the_opset() {
    // opset 16 knows none, add and mul; max and min arrive in 18.
    let scatter = |opset, reduction| {
        ModelBuilder::new()
            .opset(opset)
            .input("x", DType::F32, &[4.into(), 2.into()])
            .input("i", DType::I64, &[1.into(), 1.into()])
            .input("u", DType::F32, &[1.into(), 2.into()])
            .node("ScatterND", &["x", "i", "u"], &["y"])
            .name("snd")
            .attr_str("reduction", reduction)
            .output_untyped("y")
    };
    let imp = import(scatter(16, "mul"));
    assert_eq!(
        op_of(&imp.graph, "snd"),
        &Op::ScatterNd {
            reduction: ScatterReduction::Mul
        }
    );
    let e = import_err(scatter(16, "min"));
    assert!(
        e.contains("attribute `reduction` = \"min\" needs opset 18, the model has 16"),
        "{e}"
    );
    let e = import_err(scatter(18, "sum"));
    assert!(e.contains("unknown value \"sum\""), "{e}");
    let imp = import(scatter(18, "min"));
    assert_eq!(output_ty(&imp, "y"), "f32[4,2]");
}

#[test]
fn trilu_k_is_an_optional_input() {
    let b = ModelBuilder::new()
        .opset(14)
        .input("x", DType::F32, &[3.into(), 3.into()])
        .initializer_i64("k", &[], &[-1])
        .node("Trilu", &["x"], &["up"])
        .name("up")
        .node("Trilu", &["x", "k"], &["low"])
        .name("low")
        .attr_int("upper", 0)
        .output_untyped("up")
        .output_untyped("low");
    let imp = import(b);
    assert_eq!(op_of(&imp.graph, "up"), &Op::Trilu { upper: true });
    assert_eq!(op_of(&imp.graph, "low"), &Op::Trilu { upper: false });
    assert_eq!(output_ty(&imp, "low"), "f32[3,3]");
}
