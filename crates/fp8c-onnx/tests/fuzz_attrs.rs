//! Structure-aware fuzzing: single-op models whose attributes and constant inputs take
//! extreme values (i64::MIN, huge sizes, out-of-range axes). The import must give a result
//! or an error, never a panic or a huge allocation (type inference included).

use fp8c_ir::DType;
use fp8c_onnx::builder::{ModelBuilder, dim};
use fp8c_onnx::{ImportOptions, import_bytes};
use proptest::prelude::*;

fn interesting_int() -> impl Strategy<Value = i64> {
    prop_oneof![
        -4i64..=4,
        Just(i64::MIN),
        Just(i64::MAX),
        Just(i64::MIN + 1),
        Just(1 << 40),
        Just(-(1 << 40)),
        Just(1 << 33),
        any::<i64>(),
    ]
}

fn ints(max_len: usize) -> impl Strategy<Value = Vec<i64>> {
    proptest::collection::vec(interesting_int(), 0..=max_len)
}

/// A model with input x: f32[batch,3,4,5], one node of `op` reading x and optional i64
/// constant inputs, and int / ints attributes.
fn model(
    opset: i64,
    op: &str,
    consts: &[Vec<i64>],
    int_attrs: &[(&str, i64)],
    ints_attrs: &[(&str, Vec<i64>)],
) -> Vec<u8> {
    let mut b = ModelBuilder::new().opset(opset).input(
        "x",
        DType::F32,
        &[dim("batch"), 3.into(), 4.into(), 5.into()],
    );
    let mut inputs = vec!["x".to_string()];
    for (i, c) in consts.iter().enumerate() {
        let name = format!("c{i}");
        b = b.initializer_i64(&name, &[c.len() as u64], c);
        inputs.push(name);
    }
    let refs: Vec<&str> = inputs.iter().map(String::as_str).collect();
    b = b.node(op, &refs, &["y", "y2", "y3"]);
    for (k, v) in int_attrs {
        b = b.attr_int(k, *v);
    }
    for (k, v) in ints_attrs {
        b = b.attr_ints(k, v);
    }
    b.output_untyped("y").to_bytes()
}

fn run(bytes: &[u8]) {
    let _ = import_bytes(bytes, None, &ImportOptions::default());
}

const AXIS_OPS: &[(&str, i64)] = &[
    ("Softmax", 11),
    ("Softmax", 13),
    ("LogSoftmax", 9),
    ("Flatten", 13),
    ("Gather", 13),
    ("Concat", 13),
    ("LayerNormalization", 17),
    ("Split", 13),
    ("Split", 18),
    ("Shape", 15),
];

const AXES_OPS: &[(&str, i64)] = &[
    ("Unsqueeze", 11),
    ("Squeeze", 11),
    ("ReduceMean", 13),
    ("ReduceSum", 11),
    ("Transpose", 13),
    ("Slice", 9),
];

const INPUT_OPS: &[(&str, i64, usize)] = &[
    ("Reshape", 14, 1),
    ("Expand", 13, 1),
    ("Tile", 13, 1),
    ("Slice", 13, 4),
    ("Pad", 13, 1),
    ("Pad", 18, 3),
    ("Unsqueeze", 13, 1),
    ("Squeeze", 13, 1),
    ("ReduceMax", 18, 1),
    ("ReduceSum", 13, 1),
    ("Split", 13, 1),
];

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn axis_attributes(op in 0..AXIS_OPS.len(), axis in interesting_int(), other in interesting_int()) {
        let (op, opset) = AXIS_OPS[op];
        run(&model(opset, op, &[], &[("axis", axis), ("start", other), ("end", axis), ("num_outputs", other)], &[]));
    }

    #[test]
    fn axes_attributes(op in 0..AXES_OPS.len(), axes in ints(6), more in ints(6)) {
        let (op, opset) = AXES_OPS[op];
        run(&model(opset, op, &[], &[], &[("axes", axes.clone()), ("perm", axes), ("starts", more.clone()), ("ends", more)]));
    }

    #[test]
    fn constant_inputs(op in 0..INPUT_OPS.len(), values in proptest::collection::vec(ints(8), 4)) {
        let (op, opset, n) = INPUT_OPS[op];
        run(&model(opset, op, &values[..n], &[], &[]));
    }

    #[test]
    fn window_attributes(
        op in prop_oneof![Just("MaxPool"), Just("AveragePool"), Just("Conv")],
        kernel in ints(3), strides in ints(3), pads in ints(6), dilations in ints(3), group in interesting_int(),
    ) {
        let mut b = ModelBuilder::new()
            .input("x", DType::F32, &[dim("batch"), 3.into(), 8.into(), 8.into()])
            .initializer_f32("w", &[2, 3, 3, 3], &[0.0; 54]);
        b = if op == "Conv" { b.node(op, &["x", "w"], &["y"]) } else { b.node(op, &["x"], &["y"]) };
        let b = b
            .attr_ints("kernel_shape", &kernel)
            .attr_ints("strides", &strides)
            .attr_ints("pads", &pads)
            .attr_ints("dilations", &dilations)
            .attr_int("group", group)
            .output_untyped("y");
        run(&b.to_bytes());
    }

    #[test]
    fn generators(shape in ints(4), start in interesting_int(), limit in interesting_int(), delta in interesting_int()) {
        let b = ModelBuilder::new()
            .initializer_i64("shape", &[shape.len() as u64], &shape)
            .initializer_i64("start", &[], &[start])
            .initializer_i64("limit", &[], &[limit])
            .initializer_i64("delta", &[], &[delta])
            .node("ConstantOfShape", &["shape"], &["z"])
            .node("Range", &["start", "limit", "delta"], &["r"])
            .output_untyped("z")
            .output_untyped("r");
        run(&b.to_bytes());
    }
}
