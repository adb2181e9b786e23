//! Builder-made models, one or a few per op family: each imports to the expected IR ops,
//! attributes and output types.

mod common;

use common::{compute_nodes, import, import_with, op_names, op_of, output_ty};
use fp8c_ir::{AutoPad, DType, GeluApprox, Op, PadMode, Tensor};
use fp8c_onnx::ImportOptions;
use fp8c_onnx::builder::{ModelBuilder, dim};

fn f32_in(b: ModelBuilder, name: &str, dims: &[u64]) -> ModelBuilder {
    let d: Vec<fp8c_ir::Dim> = dims.iter().map(|&n| n.into()).collect();
    b.input(name, DType::F32, &d)
}

// ------------------------------------------------------------------ linear algebra

#[test]
fn matmul_with_symbolic_batch_and_param() {
    let b = ModelBuilder::new()
        .input("x", DType::F32, &[dim("batch"), 4.into()])
        .initializer_f32("w", &[4, 8], &[0.5; 32])
        .node("MatMul", &["x", "w"], &["y"])
        .name("mm")
        .output("y", DType::F32, &[dim("batch"), 8.into()]);
    let imp = import(b);
    assert_eq!(op_names(&imp.graph), ["matmul"]);
    assert_eq!(op_of(&imp.graph, "mm"), &Op::MatMul);
    assert_eq!(output_ty(&imp, "y"), "f32[batch,8]");
    assert_eq!(imp.graph.inputs().len(), 1);
    assert_eq!(imp.graph.params().len(), 1);
    assert_eq!(
        imp.graph.weights()["w"],
        Tensor::from_f32(vec![4, 8], &[0.5; 32])
    );
    assert_eq!(imp.opset, 17);
    assert_eq!(imp.producer, "fp8c-onnx-builder");
    assert!(imp.values.contains_key("y"));
}

#[test]
fn gemm_attributes_and_optional_bias() {
    let b = f32_in(ModelBuilder::new(), "a", &[2, 4])
        .initializer_f32("w", &[8, 4], &[1.0; 32])
        .initializer_f32("c", &[8], &[0.0; 8])
        .node("Gemm", &["a", "w", "c"], &["y"])
        .name("fc")
        .attr_float("alpha", 0.5)
        .attr_int("transB", 1)
        .node("Gemm", &["a", "w", ""], &["z"])
        .name("fc_nobias")
        .attr_int("transB", 1)
        .output_untyped("y")
        .output_untyped("z");
    let imp = import(b);
    assert_eq!(
        op_of(&imp.graph, "fc"),
        &Op::Gemm {
            alpha: 0.5,
            beta: 1.0,
            trans_a: false,
            trans_b: true
        }
    );
    let g = &imp.graph;
    assert_eq!(g.node(g.find_node("fc").unwrap()).inputs().len(), 3);
    assert_eq!(g.node(g.find_node("fc_nobias").unwrap()).inputs().len(), 2);
    assert_eq!(output_ty(&imp, "y"), "f32[2,8]");
    assert_eq!(output_ty(&imp, "z"), "f32[2,8]");
}

// ------------------------------------------------------------------ elementwise

#[test]
fn unary_ops_keep_the_input_type() {
    let cases = [
        ("Identity", "identity"),
        ("Neg", "neg"),
        ("Abs", "abs"),
        ("Sqrt", "sqrt"),
        ("Reciprocal", "reciprocal"),
        ("Exp", "exp"),
        ("Log", "log"),
        ("Erf", "erf"),
        ("Tanh", "tanh"),
        ("Sigmoid", "sigmoid"),
        ("Relu", "relu"),
        ("Floor", "floor"),
        ("Ceil", "ceil"),
        ("Sin", "sin"),
        ("Cos", "cos"),
        ("LeakyRelu", "leaky_relu"),
    ];
    for (onnx, ir) in cases {
        let b = ModelBuilder::new()
            .input("x", DType::F32, &[dim("n"), 3.into()])
            .node(onnx, &["x"], &["y"])
            .output_untyped("y");
        let imp = import(b);
        assert_eq!(op_names(&imp.graph), [ir], "{onnx}");
        assert_eq!(output_ty(&imp, "y"), "f32[n,3]", "{onnx}");
    }
}

#[test]
fn activation_attributes_have_onnx_defaults() {
    let b = f32_in(ModelBuilder::new().opset(20), "x", &[2, 3])
        .node("LeakyRelu", &["x"], &["a"])
        .name("lr")
        .node("Gelu", &["x"], &["b"])
        .name("gelu")
        .node("Gelu", &["x"], &["c"])
        .name("gelu_tanh")
        .attr_str("approximate", "tanh")
        .node("IsInf", &["x"], &["d"])
        .name("isinf")
        .attr_int("detect_negative", 0)
        .output_untyped("a")
        .output_untyped("b")
        .output_untyped("c")
        .output_untyped("d");
    let imp = import(b);
    let g = &imp.graph;
    assert_eq!(op_of(g, "lr"), &Op::LeakyRelu { alpha: 0.01 });
    assert_eq!(
        op_of(g, "gelu"),
        &Op::Gelu {
            approximate: GeluApprox::None
        }
    );
    assert_eq!(
        op_of(g, "gelu_tanh"),
        &Op::Gelu {
            approximate: GeluApprox::Tanh
        }
    );
    assert_eq!(
        op_of(g, "isinf"),
        &Op::IsInf {
            detect_negative: false,
            detect_positive: true
        }
    );
    assert_eq!(output_ty(&imp, "d"), "bool[2,3]");
}

#[test]
fn binary_ops_broadcast_and_comparisons_give_bool() {
    let arith = [
        ("Add", "add"),
        ("Sub", "sub"),
        ("Mul", "mul"),
        ("Div", "div"),
        ("Pow", "pow"),
    ];
    for (onnx, ir) in arith {
        let b = ModelBuilder::new()
            .input("x", DType::F32, &[dim("n"), 3.into()])
            .initializer_f32("b", &[3], &[1.0, 2.0, 3.0])
            .node(onnx, &["x", "b"], &["y"])
            .output_untyped("y");
        let imp = import(b);
        assert_eq!(op_names(&imp.graph), [ir], "{onnx}");
        assert_eq!(output_ty(&imp, "y"), "f32[n,3]", "{onnx}");
    }
    let cmp = [
        ("Equal", "equal"),
        ("Less", "less"),
        ("Greater", "greater"),
        ("LessOrEqual", "less_or_equal"),
        ("GreaterOrEqual", "greater_or_equal"),
    ];
    for (onnx, ir) in cmp {
        let b = f32_in(f32_in(ModelBuilder::new(), "x", &[2, 3]), "z", &[1, 3])
            .node(onnx, &["x", "z"], &["y"])
            .output_untyped("y");
        let imp = import(b);
        assert_eq!(op_names(&imp.graph), [ir], "{onnx}");
        assert_eq!(output_ty(&imp, "y"), "bool[2,3]", "{onnx}");
    }
}

#[test]
fn logical_ops() {
    let b = ModelBuilder::new()
        .input("p", DType::Bool, &[4.into()])
        .input("q", DType::Bool, &[4.into()])
        .node("And", &["p", "q"], &["a"])
        .node("Or", &["a", "q"], &["o"])
        .node("Xor", &["o", "p"], &["x"])
        .node("Not", &["x"], &["y"])
        .output_untyped("y");
    let imp = import(b);
    assert_eq!(op_names(&imp.graph), ["and", "or", "xor", "not"]);
    assert_eq!(output_ty(&imp, "y"), "bool[4]");
}

#[test]
fn mod_is_nan_where() {
    let b = f32_in(f32_in(ModelBuilder::new(), "x", &[2, 3]), "z", &[2, 3])
        .node("Mod", &["x", "z"], &["m"])
        .name("mod")
        .attr_int("fmod", 1)
        .node("IsNaN", &["m"], &["nan"])
        .node("Where", &["nan", "x", "z"], &["y"])
        .output_untyped("y");
    let imp = import(b);
    assert_eq!(op_names(&imp.graph), ["mod", "is_nan", "where"]);
    assert_eq!(op_of(&imp.graph, "mod"), &Op::Mod { fmod: true });
    assert_eq!(output_ty(&imp, "y"), "f32[2,3]");
}

#[test]
fn variadic_max_min_sum_mean_fold_into_binary_chains() {
    let b = f32_in(
        f32_in(f32_in(ModelBuilder::new(), "a", &[3]), "b", &[3]),
        "c",
        &[3],
    )
    .node("Max", &["a", "b", "c"], &["mx"])
    .name("max")
    .node("Min", &["a"], &["mn"])
    .name("min")
    .node("Sum", &["a", "b", "c"], &["s"])
    .name("sum")
    .node("Mean", &["a", "b"], &["m"])
    .name("mean")
    .output_untyped("mx")
    .output_untyped("mn")
    .output_untyped("s")
    .output_untyped("m");
    let imp = import(b);
    let g = &imp.graph;
    assert_eq!(
        op_names(g),
        ["max", "max", "identity", "add", "add", "add", "div"]
    );
    assert_eq!(op_of(g, "max"), &Op::Max);
    assert_eq!(op_of(g, "max.0"), &Op::Max);
    assert_eq!(op_of(g, "min"), &Op::Identity);
    assert_eq!(op_of(g, "mean"), &Op::Div);
    for o in ["mx", "mn", "s", "m"] {
        assert_eq!(output_ty(&imp, o), "f32[3]");
    }
}

#[test]
fn clip_fills_absent_bounds_with_infinities() {
    let b = f32_in(ModelBuilder::new().opset(13), "x", &[4])
        .initializer_f32("lo", &[], &[0.0])
        .node("Clip", &["x", "lo"], &["y"])
        .name("clip")
        .output_untyped("y");
    let imp = import(b);
    let g = &imp.graph;
    let clip = g.node(g.find_node("clip").unwrap());
    assert_eq!(clip.op, Op::Clip);
    assert_eq!(clip.inputs().len(), 3);
    let hi = g
        .constant_value(clip.inputs()[2])
        .expect("max is a constant");
    assert_eq!(hi.to_f64_vec().unwrap(), [f64::INFINITY]);
    assert_eq!(output_ty(&imp, "y"), "f32[4]");
}

#[test]
fn clip_before_opset_11_reads_attributes() {
    let b = f32_in(ModelBuilder::new().opset(9), "x", &[4])
        .node("Clip", &["x"], &["y"])
        .name("clip")
        .attr_float("min", 0.0)
        .attr_float("max", 6.0)
        .output_untyped("y");
    let imp = import(b);
    let g = &imp.graph;
    let clip = g.node(g.find_node("clip").unwrap());
    let lo = g
        .constant_value(clip.inputs()[1])
        .unwrap()
        .to_f64_vec()
        .unwrap();
    let hi = g
        .constant_value(clip.inputs()[2])
        .unwrap()
        .to_f64_vec()
        .unwrap();
    assert_eq!((lo, hi), (vec![0.0], vec![6.0]));
}

#[test]
fn clip_on_integers_uses_the_type_extremes() {
    let b = ModelBuilder::new()
        .input("x", DType::I64, &[4.into()])
        .node("Clip", &["x"], &["y"])
        .name("clip")
        .output_untyped("y");
    let imp = import(b);
    let g = &imp.graph;
    let clip = g.node(g.find_node("clip").unwrap());
    let lo = g
        .constant_value(clip.inputs()[1])
        .unwrap()
        .to_i64_vec()
        .unwrap();
    let hi = g
        .constant_value(clip.inputs()[2])
        .unwrap()
        .to_i64_vec()
        .unwrap();
    assert_eq!((lo, hi), (vec![i64::MIN], vec![i64::MAX]));
}

#[test]
fn cast_and_cast_like() {
    let b = f32_in(ModelBuilder::new().opset(19), "x", &[2])
        .input("h", DType::F16, &[1.into()])
        .node("Cast", &["x"], &["a"])
        .name("cast")
        .attr_int("to", 17)
        .attr_int("saturate", 0)
        .node("CastLike", &["x", "h"], &["b"])
        .name("like")
        .output_untyped("a")
        .output_untyped("b");
    let imp = import(b);
    assert_eq!(
        op_of(&imp.graph, "cast"),
        &Op::Cast {
            to: DType::F8E4M3,
            saturate: false
        }
    );
    assert_eq!(
        op_of(&imp.graph, "like"),
        &Op::Cast {
            to: DType::F16,
            saturate: true
        }
    );
    assert_eq!(output_ty(&imp, "a"), "f8e4m3[2]");
    assert_eq!(output_ty(&imp, "b"), "f16[2]");
}

// ------------------------------------------------------------------ normalisation, softmax

#[test]
fn layer_norm_and_softmax_opset_17() {
    let b = ModelBuilder::new()
        .input("x", DType::F32, &[dim("b"), dim("s"), 8.into()])
        .initializer_f32("g", &[8], &[1.0; 8])
        .initializer_f32("beta", &[8], &[0.0; 8])
        .node("LayerNormalization", &["x", "g", "beta"], &["n"])
        .name("ln")
        .attr_float("epsilon", 1e-6)
        .node("Softmax", &["n"], &["y"])
        .name("sm")
        .node("LogSoftmax", &["n"], &["z"])
        .name("lsm")
        .attr_int("axis", 1)
        .output_untyped("y")
        .output_untyped("z");
    let imp = import(b);
    let g = &imp.graph;
    assert_eq!(
        op_of(g, "ln"),
        &Op::LayerNormalization {
            axis: -1,
            epsilon: 1e-6
        }
    );
    assert_eq!(op_of(g, "sm"), &Op::Softmax { axis: -1 });
    assert_eq!(op_of(g, "lsm"), &Op::LogSoftmax { axis: 1 });
    assert_eq!(output_ty(&imp, "y"), "f32[b,s,8]");
}

#[test]
fn softmax_before_13_on_the_last_axis_is_one_op() {
    let b = f32_in(ModelBuilder::new().opset(11), "x", &[2, 10])
        .node("Softmax", &["x"], &["y"])
        .name("sm")
        .output_untyped("y");
    let imp = import(b);
    assert_eq!(op_names(&imp.graph), ["softmax"]);
    assert_eq!(op_of(&imp.graph, "sm"), &Op::Softmax { axis: 1 });
}

#[test]
fn softmax_before_13_elsewhere_flattens_to_2d() {
    let b = ModelBuilder::new()
        .opset(9)
        .input("x", DType::F32, &[dim("n"), 3.into(), 4.into()])
        .node("Softmax", &["x"], &["y"])
        .name("sm")
        .output_untyped("y");
    let imp = import(b);
    let g = &imp.graph;
    assert_eq!(op_names(g), ["flatten", "softmax", "shape", "reshape"]);
    assert_eq!(op_of(g, "sm.flatten"), &Op::Flatten { axis: 1 });
    assert_eq!(op_of(g, "sm.2d"), &Op::Softmax { axis: 1 });
    assert_eq!(op_of(g, "sm"), &Op::Reshape { allowzero: false });
    assert_eq!(output_ty(&imp, "y").split('[').next(), Some("f32"));
}

#[test]
fn softmax_before_13_with_a_static_shape_keeps_its_dims() {
    let b = f32_in(ModelBuilder::new().opset(9), "x", &[1, 1000, 1, 1])
        .node("Softmax", &["x"], &["y"])
        .name("sm")
        .output_untyped("y");
    let imp = import(b);
    assert_eq!(op_names(&imp.graph), ["flatten", "softmax", "reshape"]);
    assert_eq!(output_ty(&imp, "y"), "f32[1,1000,1,1]");
}

#[test]
fn batch_norm_and_dropout_at_inference() {
    let mut b = ModelBuilder::new().opset(9).input(
        "x",
        DType::F32,
        &[1.into(), 2.into(), 4.into(), 4.into()],
    );
    for p in ["s", "bias", "mean", "var"] {
        b = b.initializer_f32(p, &[2], &[1.0, 1.0]);
    }
    let b = b
        .node(
            "BatchNormalization",
            &["x", "s", "bias", "mean", "var"],
            &["n"],
        )
        .name("bn")
        .node("Dropout", &["n"], &["y", "mask"])
        .name("drop")
        .attr_float("ratio", 0.1)
        .output_untyped("y");
    let imp = import(b);
    let g = &imp.graph;
    assert_eq!(op_of(g, "bn"), &Op::BatchNormalization { epsilon: 1e-5 });
    assert_eq!(op_of(g, "drop"), &Op::Identity);
    assert_eq!(output_ty(&imp, "y"), "f32[1,2,4,4]");
}

#[test]
fn hard_sigmoid_and_hard_swish_decompose() {
    let b = f32_in(ModelBuilder::new().opset(14), "x", &[4])
        .node("HardSigmoid", &["x"], &["a"])
        .name("hs")
        .node("HardSwish", &["x"], &["b"])
        .name("hw")
        .output_untyped("a")
        .output_untyped("b");
    let imp = import(b);
    let g = &imp.graph;
    assert_eq!(op_of(g, "hs"), &Op::Clip);
    assert_eq!(op_of(g, "hw"), &Op::Mul);
    let alpha = g
        .constant_value(g.node(g.find_node("hs.scale").unwrap()).inputs()[1])
        .unwrap();
    assert_eq!(alpha.to_f32_vec().unwrap(), [0.2]);
    assert_eq!(output_ty(&imp, "a"), "f32[4]");
    assert_eq!(output_ty(&imp, "b"), "f32[4]");
}

// ------------------------------------------------------------------ conv and pooling

#[test]
fn conv_pool_family() {
    let b = ModelBuilder::new()
        .opset(13)
        .input("x", DType::F32, &[dim("n"), 3.into(), 8.into(), 8.into()])
        .initializer_f32("w", &[4, 3, 3, 3], &[0.1; 108])
        .initializer_f32("bias", &[4], &[0.0; 4])
        .node("Conv", &["x", "w", "bias"], &["c"])
        .name("conv")
        .attr_ints("pads", &[1, 1, 1, 1])
        .node("MaxPool", &["c"], &["p"])
        .name("pool")
        .attr_ints("kernel_shape", &[2, 2])
        .attr_ints("strides", &[2, 2])
        .node("AveragePool", &["p"], &["a"])
        .name("avg")
        .attr_ints("kernel_shape", &[2, 2])
        .attr_int("count_include_pad", 1)
        .node("GlobalAveragePool", &["a"], &["gap"])
        .node("GlobalMaxPool", &["a"], &["gmp"])
        .node("Flatten", &["gap"], &["f"])
        .output_untyped("f")
        .output_untyped("gmp");
    let imp = import(b);
    let g = &imp.graph;
    assert_eq!(
        op_of(g, "conv"),
        &Op::Conv {
            kernel_shape: vec![3, 3],
            strides: vec![1, 1],
            pads: vec![1, 1, 1, 1],
            dilations: vec![1, 1],
            group: 1,
            auto_pad: AutoPad::NotSet
        }
    );
    assert_eq!(
        op_of(g, "pool"),
        &Op::MaxPool {
            kernel_shape: vec![2, 2],
            strides: vec![2, 2],
            pads: vec![0, 0, 0, 0],
            dilations: vec![1, 1],
            ceil_mode: false,
            auto_pad: AutoPad::NotSet
        }
    );
    assert!(matches!(
        op_of(g, "avg"),
        Op::AveragePool {
            count_include_pad: true,
            ..
        }
    ));
    assert_eq!(output_ty(&imp, "f"), "f32[n,4]");
    assert_eq!(output_ty(&imp, "gmp"), "f32[n,4,1,1]");
}

// ------------------------------------------------------------------ reductions

#[test]
fn reductions_axes_as_attribute_or_input_by_opset() {
    // Opset 13: ReduceMean takes an attribute, ReduceSum an input.
    let b = ModelBuilder::new()
        .opset(13)
        .input("x", DType::F32, &[2.into(), 3.into(), 4.into()])
        .initializer_i64("ax", &[1], &[-1])
        .node("ReduceMean", &["x"], &["m"])
        .name("mean")
        .attr_ints("axes", &[-1])
        .node("ReduceSum", &["x", "ax"], &["s"])
        .name("sum")
        .attr_int("keepdims", 0)
        .node("ReduceMax", &["x"], &["mx"])
        .name("max")
        .output_untyped("m")
        .output_untyped("s")
        .output_untyped("mx");
    let imp = import(b);
    let g = &imp.graph;
    assert_eq!(
        op_of(g, "mean"),
        &Op::ReduceMean {
            axes: Some(vec![-1]),
            keepdims: true
        }
    );
    assert_eq!(
        op_of(g, "sum"),
        &Op::ReduceSum {
            axes: Some(vec![-1]),
            keepdims: false
        }
    );
    assert_eq!(
        op_of(g, "max"),
        &Op::ReduceMax {
            axes: None,
            keepdims: true
        }
    );
    assert_eq!(output_ty(&imp, "m"), "f32[2,3,1]");
    assert_eq!(output_ty(&imp, "s"), "f32[2,3]");
    assert_eq!(output_ty(&imp, "mx"), "f32[1,1,1]");

    // Opset 18: every reduction takes an input; noop_with_empty_axes makes an identity.
    let b = f32_in(ModelBuilder::new().opset(18), "x", &[2, 3])
        .initializer_i64("ax", &[1], &[0])
        .node("ReduceMin", &["x", "ax"], &["a"])
        .name("min")
        .node("ReduceProd", &["x"], &["b"])
        .name("prod")
        .attr_int("noop_with_empty_axes", 1)
        .output_untyped("a")
        .output_untyped("b");
    let imp = import(b);
    assert_eq!(
        op_of(&imp.graph, "min"),
        &Op::ReduceMin {
            axes: Some(vec![0]),
            keepdims: true
        }
    );
    assert_eq!(op_of(&imp.graph, "prod"), &Op::Identity);
}

// ------------------------------------------------------------------ shape ops

#[test]
fn reshape_transpose_flatten() {
    let b = f32_in(ModelBuilder::new(), "x", &[2, 3, 4])
        .initializer_i64("shape", &[2], &[0, -1])
        .node("Reshape", &["x", "shape"], &["r"])
        .name("reshape")
        .node("Transpose", &["r"], &["t"])
        .name("tr")
        .node("Transpose", &["x"], &["u"])
        .name("tr2")
        .attr_ints("perm", &[0, 2, 1])
        .output_untyped("t")
        .output_untyped("u");
    let imp = import(b);
    let g = &imp.graph;
    assert_eq!(op_of(g, "reshape"), &Op::Reshape { allowzero: false });
    assert_eq!(op_of(g, "tr"), &Op::Transpose { perm: vec![1, 0] });
    assert_eq!(output_ty(&imp, "t"), "f32[12,2]");
    assert_eq!(output_ty(&imp, "u"), "f32[2,4,3]");
}

#[test]
fn unsqueeze_squeeze_axes_by_opset() {
    let old = f32_in(ModelBuilder::new().opset(11), "x", &[3])
        .node("Unsqueeze", &["x"], &["u"])
        .name("unsq")
        .attr_ints("axes", &[0])
        .node("Squeeze", &["u"], &["s"])
        .name("sq")
        .output_untyped("s");
    let imp = import(old);
    assert_eq!(op_of(&imp.graph, "unsq"), &Op::Unsqueeze { axes: vec![0] });
    assert_eq!(op_of(&imp.graph, "sq"), &Op::Squeeze { axes: None });
    assert_eq!(output_ty(&imp, "s"), "f32[3]");

    let new = f32_in(ModelBuilder::new().opset(13), "x", &[3])
        .initializer_i64("a", &[2], &[0, -1])
        .node("Unsqueeze", &["x", "a"], &["u"])
        .name("unsq")
        .node("Squeeze", &["u", "a"], &["s"])
        .name("sq")
        .output_untyped("u")
        .output_untyped("s");
    let imp = import(new);
    assert_eq!(
        op_of(&imp.graph, "unsq"),
        &Op::Unsqueeze { axes: vec![0, -1] }
    );
    assert_eq!(
        op_of(&imp.graph, "sq"),
        &Op::Squeeze {
            axes: Some(vec![0, -1])
        }
    );
    assert_eq!(output_ty(&imp, "u"), "f32[1,3,1]");
    assert_eq!(output_ty(&imp, "s"), "f32[3]");
}

#[test]
fn concat_gather_shape_expand_tile() {
    let b = ModelBuilder::new()
        .input("x", DType::F32, &[dim("n"), 4.into()])
        .input("y", DType::F32, &[dim("n"), 2.into()])
        .initializer_i64("idx", &[], &[1])
        .initializer_i64("reps", &[2], &[1, 2])
        .initializer_i64("shp", &[3], &[2, 1, 1])
        .node("Concat", &["x", "y"], &["c"])
        .name("cat")
        .attr_int("axis", 1)
        .node("Gather", &["c", "idx"], &["g"])
        .name("gather")
        .attr_int("axis", 1)
        .node("Shape", &["c"], &["s"])
        .name("shape")
        .attr_int("start", 1)
        .node("Tile", &["c", "reps"], &["t"])
        .node("Expand", &["c", "shp"], &["e"])
        .output_untyped("g")
        .output_untyped("s")
        .output_untyped("t")
        .output_untyped("e");
    let imp = import(b);
    let g = &imp.graph;
    assert_eq!(op_of(g, "cat"), &Op::Concat { axis: 1 });
    assert_eq!(op_of(g, "gather"), &Op::Gather { axis: 1 });
    assert_eq!(
        op_of(g, "shape"),
        &Op::Shape {
            start: 1,
            end: None
        }
    );
    assert_eq!(op_names(g), ["concat", "gather", "shape", "tile", "expand"]);
    assert_eq!(output_ty(&imp, "g"), "f32[n]");
    assert_eq!(output_ty(&imp, "s"), "i64[1]");
    assert_eq!(output_ty(&imp, "t"), "f32[n,12]");
    assert_eq!(output_ty(&imp, "e").split('[').next(), Some("f32"));
}

#[test]
fn slice_always_gets_five_inputs() {
    let b = f32_in(ModelBuilder::new().opset(13), "x", &[4, 6])
        .initializer_i64("st", &[1], &[1])
        .initializer_i64("en", &[1], &[3])
        .node("Slice", &["x", "st", "en"], &["y"])
        .name("slice")
        .output_untyped("y");
    let imp = import(b);
    let g = &imp.graph;
    let n = g.node(g.find_node("slice").unwrap());
    assert_eq!(n.op, Op::Slice);
    assert_eq!(n.inputs().len(), 5);
    assert_eq!(
        g.constant_value(n.inputs()[3])
            .unwrap()
            .to_i64_vec()
            .unwrap(),
        [0]
    );
    assert_eq!(
        g.constant_value(n.inputs()[4])
            .unwrap()
            .to_i64_vec()
            .unwrap(),
        [1]
    );
    assert_eq!(output_ty(&imp, "y"), "f32[2,6]");
}

#[test]
fn slice_before_opset_10_reads_attributes() {
    let b = f32_in(ModelBuilder::new().opset(9), "x", &[4, 6])
        .node("Slice", &["x"], &["y"])
        .name("slice")
        .attr_ints("starts", &[0, 2])
        .attr_ints("ends", &[2, 6])
        .output_untyped("y");
    let imp = import(b);
    let g = &imp.graph;
    let n = g.node(g.find_node("slice").unwrap());
    assert_eq!(n.inputs().len(), 5);
    assert_eq!(
        g.constant_value(n.inputs()[3])
            .unwrap()
            .to_i64_vec()
            .unwrap(),
        [0, 1]
    );
    assert_eq!(output_ty(&imp, "y"), "f32[2,4]");
}

#[test]
fn constants_of_every_kind() {
    let b = ModelBuilder::new()
        .node("Constant", &[], &["t"])
        .attr_tensor("value", &Tensor::from_i64(vec![2], &[3, 4]))
        .node("Constant", &[], &["f"])
        .attr_float("value_float", 2.5)
        .node("Constant", &[], &["fs"])
        .attr_floats("value_floats", &[1.0, 2.0])
        .node("Constant", &[], &["i"])
        .attr_int("value_int", 7)
        .node("Constant", &[], &["is"])
        .attr_ints("value_ints", &[1, 2, 3])
        .node("ConstantOfShape", &["t"], &["z"])
        .name("cos")
        .node("ConstantOfShape", &["t"], &["o"])
        .name("cos_one")
        .attr_tensor("value", &Tensor::from_i64(vec![1], &[1]))
        .node("Range", &["i", "i", "i"], &["r"])
        .output_untyped("t")
        .output_untyped("f")
        .output_untyped("fs")
        .output_untyped("i")
        .output_untyped("is")
        .output_untyped("z")
        .output_untyped("o")
        .output_untyped("r");
    let imp = import(b);
    assert_eq!(output_ty(&imp, "t"), "i64[2]");
    assert_eq!(output_ty(&imp, "f"), "f32[]");
    assert_eq!(output_ty(&imp, "fs"), "f32[2]");
    assert_eq!(output_ty(&imp, "i"), "i64[]");
    assert_eq!(output_ty(&imp, "is"), "i64[3]");
    assert_eq!(output_ty(&imp, "z"), "f32[3,4]");
    assert_eq!(output_ty(&imp, "o"), "i64[3,4]");
    assert_eq!(
        op_of(&imp.graph, "cos"),
        &Op::ConstantOfShape {
            value: Tensor::from_f32(vec![1], &[0.0])
        }
    );
    // Integer ops of constants are folded as they are imported (shape arithmetic).
    assert_eq!(
        op_of(&imp.graph, "Range_7"),
        &Op::Constant {
            value: Tensor::from_i64(vec![0], &[])
        }
    );
}

#[test]
fn pad_forms() {
    // Opset 11: pads input, constant value absent -> zero of x's type.
    let b = f32_in(ModelBuilder::new().opset(13), "x", &[2, 3])
        .initializer_i64("pads", &[4], &[0, 1, 0, 1])
        .node("Pad", &["x", "pads"], &["y"])
        .name("pad")
        .attr_str("mode", "reflect")
        .output_untyped("y");
    let imp = import(b);
    let g = &imp.graph;
    let n = g.node(g.find_node("pad").unwrap());
    assert_eq!(
        n.op,
        Op::Pad {
            mode: PadMode::Reflect
        }
    );
    assert_eq!(n.inputs().len(), 3);
    assert_eq!(output_ty(&imp, "y"), "f32[2,5]");

    // Opset 18: axes folded into full-rank pads.
    let b = f32_in(ModelBuilder::new().opset(18), "x", &[2, 3])
        .initializer_i64("pads", &[2], &[1, 2])
        .initializer_i64("axes", &[1], &[-1])
        .node("Pad", &["x", "pads", "", "axes"], &["y"])
        .name("pad")
        .output_untyped("y");
    let imp = import(b);
    let g = &imp.graph;
    let n = g.node(g.find_node("pad").unwrap());
    assert_eq!(
        g.constant_value(n.inputs()[1])
            .unwrap()
            .to_i64_vec()
            .unwrap(),
        [0, 1, 0, 2]
    );
    assert_eq!(output_ty(&imp, "y"), "f32[2,6]");

    // Opset 9: attributes.
    let b = f32_in(ModelBuilder::new().opset(9), "x", &[2, 3])
        .node("Pad", &["x"], &["y"])
        .name("pad")
        .attr_ints("pads", &[1, 0, 1, 0])
        .attr_float("value", 1.5)
        .output_untyped("y");
    let imp = import(b);
    let g = &imp.graph;
    let n = g.node(g.find_node("pad").unwrap());
    assert_eq!(
        g.constant_value(n.inputs()[2])
            .unwrap()
            .to_f64_vec()
            .unwrap(),
        [1.5]
    );
    assert_eq!(output_ty(&imp, "y"), "f32[4,3]");
}

#[test]
fn split_forms() {
    // Before 13: `split` attribute.
    let b = f32_in(ModelBuilder::new().opset(11), "x", &[2, 6])
        .node("Split", &["x"], &["a", "b"])
        .name("split")
        .attr_int("axis", 1)
        .attr_ints("split", &[2, 4])
        .output_untyped("a")
        .output_untyped("b");
    let imp = import(b);
    assert_eq!(
        op_of(&imp.graph, "split"),
        &Op::Split {
            axis: 1,
            split: vec![2, 4]
        }
    );
    assert_eq!(output_ty(&imp, "a"), "f32[2,2]");
    assert_eq!(output_ty(&imp, "b"), "f32[2,4]");

    // 13: constant input, or equal parts.
    let b = f32_in(ModelBuilder::new().opset(13), "x", &[6])
        .initializer_i64("sizes", &[2], &[1, 5])
        .node("Split", &["x", "sizes"], &["a", "b"])
        .name("s1")
        .node("Split", &["x"], &["c", "d", "e"])
        .name("s2")
        .output_untyped("a")
        .output_untyped("e");
    let imp = import(b);
    assert_eq!(
        op_of(&imp.graph, "s1"),
        &Op::Split {
            axis: 0,
            split: vec![1, 5]
        }
    );
    assert_eq!(
        op_of(&imp.graph, "s2"),
        &Op::Split {
            axis: 0,
            split: vec![2, 2, 2]
        }
    );

    // 18: num_outputs, last chunk smaller.
    let b = f32_in(ModelBuilder::new().opset(18), "x", &[7])
        .node("Split", &["x"], &["a", "b", "c"])
        .name("s")
        .attr_int("num_outputs", 3)
        .output_untyped("c");
    let imp = import(b);
    assert_eq!(
        op_of(&imp.graph, "s"),
        &Op::Split {
            axis: 0,
            split: vec![3, 3, 1]
        }
    );
    assert_eq!(output_ty(&imp, "c"), "f32[1]");
}

// ------------------------------------------------------------------ quantization

#[test]
fn quantize_linear_output_type_rules() {
    let b = f32_in(ModelBuilder::new().opset(21), "x", &[2, 4])
        .initializer_f32("scale", &[], &[0.1])
        .initializer(
            "zp8",
            &Tensor::from_bytes(DType::F8E4M3, vec![], vec![0]).unwrap(),
        )
        .node("QuantizeLinear", &["x", "scale"], &["q_u8"])
        .name("q_default")
        .node("QuantizeLinear", &["x", "scale", "zp8"], &["q_f8"])
        .name("q_zp")
        .attr_int("saturate", 0)
        .node("QuantizeLinear", &["x", "scale"], &["q_i8"])
        .name("q_attr")
        .attr_int("output_dtype", 3)
        .node("DequantizeLinear", &["q_f8", "scale", "zp8"], &["dq"])
        .name("dq")
        .node("DequantizeLinear", &["q_u8", "scale"], &["dq_u8"])
        .name("dq_nozp")
        .output_untyped("q_i8")
        .output_untyped("dq")
        .output_untyped("dq_u8");
    let imp = import(b);
    let g = &imp.graph;
    assert_eq!(
        op_of(g, "q_default"),
        &Op::QuantizeLinear {
            axis: 1,
            saturate: true,
            to: DType::U8,
            block_size: 0,
        }
    );
    assert_eq!(
        op_of(g, "q_zp"),
        &Op::QuantizeLinear {
            axis: 1,
            saturate: false,
            to: DType::F8E4M3,
            block_size: 0,
        }
    );
    assert_eq!(
        op_of(g, "q_attr"),
        &Op::QuantizeLinear {
            axis: 1,
            saturate: true,
            to: DType::I8,
            block_size: 0,
        }
    );
    assert_eq!(
        op_of(g, "dq"),
        &Op::DequantizeLinear {
            axis: 1,
            block_size: 0
        }
    );
    let zp = g.node(g.find_node("q_default").unwrap()).inputs()[2];
    assert_eq!(g.value_type(zp).to_string(), "u8[]");
    let zp = g.node(g.find_node("dq_nozp").unwrap()).inputs()[2];
    assert_eq!(g.value_type(zp).to_string(), "u8[]");
    assert_eq!(output_ty(&imp, "q_i8"), "i8[2,4]");
    assert_eq!(output_ty(&imp, "dq"), "f32[2,4]");
    assert_eq!(output_ty(&imp, "dq_u8"), "f32[2,4]");
}

#[test]
fn quantize_precision_and_dequantize_output_dtype_from_opset_23() {
    let b = f32_in(ModelBuilder::new().opset(23), "x", &[4])
        .initializer_f32("scale", &[], &[0.5])
        .node("QuantizeLinear", &["x", "scale"], &["q"])
        .name("q")
        .attr_int("precision", 1)
        .attr_int("output_dtype", 17)
        .node("DequantizeLinear", &["q", "scale"], &["y"])
        .name("dq")
        .attr_int("output_dtype", 10)
        .output_untyped("y");
    let imp = import(b);
    let g = &imp.graph;
    assert_eq!(
        op_of(g, "q"),
        &Op::QuantizeLinear {
            axis: 1,
            saturate: true,
            to: DType::F8E4M3,
            block_size: 0,
        }
    );
    assert_eq!(
        op_of(g, "dq.dq"),
        &Op::DequantizeLinear {
            axis: 1,
            block_size: 0
        }
    );
    assert_eq!(
        op_of(g, "dq"),
        &Op::Cast {
            to: DType::F16,
            saturate: true
        }
    );
    assert_eq!(output_ty(&imp, "y"), "f16[4]");
}

// ------------------------------------------------------------------ graph-level behaviour

#[test]
fn initializers_split_into_params_and_constants() {
    let b = ModelBuilder::new()
        .ir_version(3)
        .input("x", DType::F32, &[2.into()])
        // Old exporters list initializers as inputs too: they are not inputs.
        .input("w", DType::F16, &[2.into()])
        .initializer(
            "w",
            &Tensor::from_f64_as(DType::F16, vec![2], &[1.0, 2.0]).unwrap(),
        )
        .initializer_i64("shape", &[1], &[2])
        .initializer_f32("unused", &[1], &[0.0])
        .node("Cast", &["w"], &["wf"])
        .attr_int("to", 1)
        .node("Add", &["x", "wf"], &["s"])
        .node("Reshape", &["s", "shape"], &["y"])
        .output_untyped("y");
    let imp = import(b);
    let g = &imp.graph;
    assert_eq!(g.inputs().len(), 1);
    assert_eq!(
        g.params().len(),
        1,
        "the unused initializer is not imported"
    );
    assert_eq!(g.weights()["w"].dtype(), DType::F16);
    let shape = imp.values["shape"];
    assert!(g.constant_value(shape).is_some());
    assert_eq!(output_ty(&imp, "y"), "f32[2]");
}

#[test]
fn empty_node_names_become_op_type_and_index() {
    let b = f32_in(ModelBuilder::new(), "x", &[2])
        .node("Relu", &["x"], &["a"])
        .node("Neg", &["a"], &["b"])
        .output_untyped("b");
    let imp = import(b);
    assert!(imp.graph.find_node("Relu_0").is_some());
    assert!(imp.graph.find_node("Neg_1").is_some());
}

#[test]
fn nodes_out_of_order_are_sorted() {
    let b = f32_in(ModelBuilder::new(), "x", &[2])
        .node("Neg", &["a"], &["b"])
        .name("second")
        .node("Relu", &["x"], &["a"])
        .name("first")
        .output_untyped("b");
    let imp = import(b);
    let names: Vec<&str> = compute_nodes(&imp.graph)
        .into_iter()
        .map(|id| imp.graph.node(id).name.as_str())
        .collect();
    assert_eq!(names, ["first", "second"]);
}

#[test]
fn input_shapes_override_dims() {
    let b = ModelBuilder::new()
        .input("x", DType::F32, &[dim("batch"), dim("seq")])
        .node("Relu", &["x"], &["y"])
        .output_untyped("y");
    let opts = ImportOptions {
        input_shapes: [("x".to_string(), vec![2, 16])].into(),
        ..Default::default()
    };
    let imp = import_with(b, &opts).unwrap();
    assert_eq!(output_ty(&imp, "y"), "f32[2,16]");
}

#[test]
fn constant_inputs_freeze_graph_inputs() {
    let b = ModelBuilder::new()
        .opset(13)
        .input("x", DType::F32, &[3.into()])
        .input("axes", DType::I64, &[1.into()])
        .node("Unsqueeze", &["x", "axes"], &["y"])
        .name("unsq")
        .output_untyped("y");
    let opts = ImportOptions {
        constant_inputs: [("axes".to_string(), Tensor::from_i64(vec![1], &[0]))].into(),
        ..Default::default()
    };
    let imp = import_with(b.clone(), &opts).unwrap();
    assert_eq!(op_of(&imp.graph, "unsq"), &Op::Unsqueeze { axes: vec![0] });
    assert_eq!(imp.graph.inputs().len(), 1);
    assert_eq!(output_ty(&imp, "y"), "f32[1,3]");

    let wrong = ImportOptions {
        constant_inputs: [("axes".to_string(), Tensor::from_i32(vec![1], &[0]))].into(),
        ..Default::default()
    };
    assert_eq!(
        import_with(b, &wrong).unwrap_err().to_string(),
        r#"import options: constant_inputs: input "axes" is declared i64[1], but the value is i32[1]"#
    );
}

#[test]
fn outputs_option_selects_and_prunes() {
    let b = f32_in(ModelBuilder::new(), "x", &[2])
        .node("Relu", &["x"], &["a"])
        .node("Neg", &["x"], &["b"])
        .output_untyped("a")
        .output_untyped("b");
    let opts = ImportOptions {
        outputs: Some(vec!["b".into()]),
        ..Default::default()
    };
    let imp = import_with(b, &opts).unwrap();
    assert_eq!(op_names(&imp.graph), ["neg"]);
    let outs: Vec<&str> = imp
        .graph
        .outputs()
        .iter()
        .map(|o| o.name.as_str())
        .collect();
    assert_eq!(outs, ["b"]);
}

#[test]
fn intermediate_values_can_be_outputs() {
    let b = f32_in(ModelBuilder::new(), "x", &[2])
        .node("Relu", &["x"], &["a"])
        .node("Neg", &["a"], &["b"])
        .output_untyped("b");
    let opts = ImportOptions {
        outputs: Some(vec!["a".into()]),
        ..Default::default()
    };
    let imp = import_with(b, &opts).unwrap();
    assert_eq!(op_names(&imp.graph), ["relu"]);
}

#[test]
fn supported_ops_are_sorted_and_unique() {
    for (domain, ops) in [
        ("ai.onnx", fp8c_onnx::SUPPORTED_OPS),
        ("ai.onnx.ml", fp8c_onnx::ML_SUPPORTED_OPS),
        ("com.microsoft", fp8c_onnx::CONTRIB_SUPPORTED_OPS),
    ] {
        assert!(
            ops.windows(2).all(|w| w[0] < w[1]),
            "{domain}'s op list must be sorted: {ops:?}"
        );
    }
    assert!(fp8c_onnx::SUPPORTED_OPS.len() >= 75);
}
