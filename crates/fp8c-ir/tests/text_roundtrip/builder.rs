//! Graphs made with the builder round trip exactly: every attribute kind, every dtype's
//! tensors, FP8 and bool literals by value, interface entries added after nodes, renamed
//! interface nodes and shared names.

use super::*;

/// A graph touching every attribute kind, quoted names, multi-output nodes, symbolic and
/// unknown dims, special float values and state with updates.
pub(super) fn kitchen_sink() -> Graph {
    let mut g = Graph::new("onnx::model/v1");
    let sym = TensorType::new(
        DType::F32,
        vec![
            Dim::Sym("batch".into()),
            Dim::Sym("seq len".into()),
            Dim::Unknown,
            Dim::Known(768),
        ],
    );
    let x = g.add_input("/encoder/layer.0/input", sym.clone()).unwrap();
    let m = g.add_input("onnx::MatMul_12", f32t(&[768, 768])).unwrap();
    let w = g.add_param("0weight", f32t(&[768]), None).unwrap();
    let h = g.add_state("x.h", f32t(&[16]), 0.0).unwrap();
    let s = g.add_state("x.s", f32t(&[]), 1.0).unwrap();
    let odd = g.add_state("odd init", f32t(&[]), -0.1).unwrap();
    let mm = g
        .add_node_typed(
            "/encoder/layer.0/MatMul",
            Op::MatMul,
            &[x, m],
            vec![sym.clone()],
        )
        .unwrap()[0];
    let split = g
        .add_node_typed(
            "split \"3\"",
            Op::Split {
                axis: -1,
                split: vec![384, 384],
            },
            &[mm],
            vec![sym.clone(), sym.clone()],
        )
        .unwrap();
    let conv = Op::Conv {
        kernel_shape: vec![3, 3],
        strides: vec![1, 1],
        pads: vec![],
        dilations: vec![1, 1],
        group: 1,
        auto_pad: fp8c_ir::AutoPad::SameUpper,
    };
    g.add_node_typed("conv", conv, &[split[0], w], vec![sym.clone()])
        .unwrap();
    let gemm = Op::Gemm {
        alpha: 0.1,
        beta: 1e-7,
        trans_a: true,
        trans_b: false,
    };
    g.add_node_typed("", gemm, &[split[1], m, w], vec![sym.clone()])
        .unwrap();
    g.add_node_typed(
        "lrelu",
        Op::LeakyRelu {
            alpha: f32::INFINITY,
        },
        &[x],
        vec![sym.clone()],
    )
    .unwrap();
    g.add_node_typed(
        "ln",
        Op::LayerNormalization {
            axis: -1,
            epsilon: 1e-5,
        },
        &[x, w],
        vec![sym.clone()],
    )
    .unwrap();
    g.add_node_typed(
        "rm",
        Op::ReduceMean {
            axes: None,
            keepdims: false,
        },
        &[x],
        vec![f32t(&[])],
    )
    .unwrap();
    g.add_node_typed(
        "rs",
        Op::ReduceSum {
            axes: Some(vec![]),
            keepdims: true,
        },
        &[x],
        vec![sym.clone()],
    )
    .unwrap();
    g.add_node_typed(
        "sh",
        Op::Shape {
            start: 0,
            end: Some(-1),
        },
        &[x],
        vec![TensorType::fixed(DType::I64, &[3])],
    )
    .unwrap();
    g.add_node_typed(
        "gelu",
        Op::Gelu {
            approximate: fp8c_ir::GeluApprox::None,
        },
        &[x],
        vec![sym.clone()],
    )
    .unwrap();
    g.add_node_typed(
        "gelu_t",
        Op::Gelu {
            approximate: fp8c_ir::GeluApprox::Tanh,
        },
        &[x],
        vec![sym.clone()],
    )
    .unwrap();
    g.add_node_typed(
        "pad",
        Op::Pad {
            mode: fp8c_ir::PadMode::Reflect,
        },
        &[x],
        vec![sym.clone()],
    )
    .unwrap();
    g.add_node_typed(
        "input",
        Op::Input {
            name: "not in the interface".into(),
        },
        &[],
        vec![f32t(&[1])],
    )
    .unwrap();
    let specials = Tensor::from_f32(
        vec![2, 3],
        &[
            f32::NAN,
            -0.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::MIN_POSITIVE / 4.0,
            -1.5e-42,
        ],
    );
    let c = g
        .add_node_typed(
            "specials",
            Op::Constant {
                value: specials.clone(),
            },
            &[],
            vec![specials.ty()],
        )
        .unwrap()[0];
    let mut payload = Tensor::from_f32(vec![2], &[0.0, 0.0]);
    payload.bytes_mut()[..4].copy_from_slice(&0xffc0_0001u32.to_le_bytes());
    payload.bytes_mut()[4..].copy_from_slice(&0x7fc0_0000u32.to_le_bytes());
    g.add_node_typed(
        "nan payload",
        Op::Constant {
            value: payload.clone(),
        },
        &[],
        vec![payload.ty()],
    )
    .unwrap();
    let big = Tensor::from_f32(
        vec![10, 10],
        &(0..100).map(|i| i as f32 * 0.37 - 5.0).collect::<Vec<_>>(),
    );
    g.add_node_typed(
        "big",
        Op::Constant { value: big.clone() },
        &[],
        vec![big.ty()],
    )
    .unwrap();
    let empty = Tensor::from_f32(vec![0, 3], &[]);
    g.add_node_typed(
        "empty",
        Op::Constant {
            value: empty.clone(),
        },
        &[],
        vec![empty.ty()],
    )
    .unwrap();
    let cos = Op::ConstantOfShape {
        value: Tensor::from_bool(vec![1], &[true]),
    };
    g.add_node_typed(
        "cos",
        cos,
        &[c],
        vec![TensorType::fixed(DType::Bool, &[2, 3])],
    )
    .unwrap();
    let amax = g
        .add_node_typed("x.amax", Op::Amax, &[x], vec![f32t(&[])])
        .unwrap()[0];
    let hist = g
        .add_node_typed(
            "x.hist",
            Op::AmaxHistoryUpdate,
            &[h, amax],
            vec![f32t(&[16]), f32t(&[16])],
        )
        .unwrap();
    let cs = Op::ComputeScale {
        fmt: DType::F8E5M2,
        margin: 2.0,
        source: AmaxSource::Current,
        epsilon: f32::MIN_POSITIVE,
        power_2: true,
    };
    let scale = g
        .add_node_typed("x.scale", cs, &[hist[0], s], vec![f32t(&[]), f32t(&[])])
        .unwrap();
    let q = g
        .add_node_typed(
            "x.q",
            Op::Quantize {
                to: DType::F8E5M2,
                saturate: false,
            },
            &[x, scale[0]],
            vec![TensorType::new(DType::F8E5M2, sym.shape.clone())],
        )
        .unwrap()[0];
    g.add_node_typed("nothing", Op::Identity, &[q], vec![])
        .unwrap();
    g.set_output("y", mm).unwrap();
    g.set_output("the \"scale\"\n", scale[1]).unwrap();
    g.set_output("x again", x).unwrap();
    g.set_state_update("x.h", hist[1]).unwrap();
    g.set_state_update("x.s", scale[0]).unwrap();
    g.set_state_update("odd init", odd).unwrap();
    g
}

#[test]
fn builder_graph_round_trips_exactly() {
    let g = kitchen_sink();
    let text = assert_round_trip(&g);
    for needle in [
        r#"graph @"onnx::model/v1"(%"/encoder/layer.0/input": f32[batch,"seq len",?,768], %"onnx::MatMul_12": f32[768,768])"#,
        r#"params(%"0weight": f32[768])"#,
        r#"state(%x.h: f32[16] = 0, %x.s: f32[] = 1, %"odd init": f32[] = -0.1)"#,
        r#"= split %0 axis=-1 split=[384,384]  # "split \"3\"""#,
        r#"= gemm %1#1, %"onnx::MatMul_12", %"0weight" alpha=0.1 beta=1e-7 trans_a=true trans_b=false  # """#,
        "pads=[] dilations=[1,1] group=1 auto_pad=same_upper  # conv",
        "leaky_relu %\"/encoder/layer.0/input\" alpha=inf  # lrelu",
        "epsilon=1e-5  # ln",
        "reduce_mean %\"/encoder/layer.0/input\" axes=none keepdims=false",
        "axes=[] keepdims=true",
        "start=0 end=-1",
        "approximate=none  # gelu\n",
        "approximate=tanh  # gelu_t",
        "mode=reflect",
        r#"= input name="not in the interface"  # input"#,
        "value=dense<f32[2,3]>[nan,-0.0,inf,-inf,2.938736e-39,-1.5e-42]  # specials",
        "value=dense<f32[2]>[0xffc00001,nan]",
        "value=dense<f32[10,10]>hex\"0000a0c0",
        "value=dense<f32[0,3]>[]",
        "value=dense<bool[1]>[true]",
        "%19: (f32[16], f32[16]) = amax_history_update %x.h, %18  # x.hist",
        "fmt=f8e5m2 margin=2.0 source=current epsilon=1.1754944e-38 power_2=true",
        "%22: () = identity %21  # nothing",
        r#"return %20#1 as "the \"scale\"\n""#,
        r#"return %"/encoder/layer.0/input" as "x again""#,
        "update %\"odd init\" = %\"odd init\"\n  update %x.h = %19#1\n  update %x.s = %20\n}",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in\n{text}");
    }
}

#[test]
fn tensors_of_every_dtype_are_exact() {
    let mut g = Graph::new("tensors");
    let mut add = |name: &str, t: Tensor| {
        g.add_node_typed(name, Op::Constant { value: t.clone() }, &[], vec![t.ty()])
            .unwrap();
    };
    for dtype in DType::ALL {
        // Every byte pattern of the first 256 elements (or all of a 1-byte type), in a small
        // (printed as values) and a large (hex) tensor.
        let size = dtype.size();
        let pattern: Vec<u8> = (0..64 * size)
            .map(|i| (i * 37 + i / size * 101) as u8)
            .collect();
        add(
            &format!("{dtype}.small"),
            Tensor::from_bytes(dtype, vec![64], pattern).unwrap(),
        );
        let pattern: Vec<u8> = (0..256 * size).map(|i| (i * 7 + i / size) as u8).collect();
        add(
            &format!("{dtype}.big"),
            Tensor::from_bytes(dtype, vec![16, 16], pattern).unwrap(),
        );
        if size == 1 {
            for chunk in 0..4u8 {
                let bytes: Vec<u8> = (0..64u8).map(|b| chunk * 64 + b).collect();
                add(
                    &format!("{dtype}.codes{chunk}"),
                    Tensor::from_bytes(dtype, vec![64], bytes).unwrap(),
                );
            }
        }
        add(
            &format!("{dtype}.scalar"),
            Tensor::zeros(dtype, vec![]).unwrap(),
        );
    }
    add(
        "f16.specials",
        Tensor::from_f64_as(
            DType::F16,
            vec![4],
            &[-0.0, f64::INFINITY, f64::NAN, 6.0e-8],
        )
        .unwrap(),
    );
    add(
        "bf16.specials",
        Tensor::from_f64_as(DType::BF16, vec![3], &[-0.0, f64::NEG_INFINITY, f64::NAN]).unwrap(),
    );
    add(
        "f64.specials",
        Tensor::from_f64(vec![4], &[-0.0, f64::NAN, 5e-324, f64::MAX]),
    );
    add(
        "i64.extremes",
        Tensor::from_i64(vec![2], &[i64::MIN, i64::MAX]),
    );
    let text = assert_round_trip(&g);
    assert!(
        text.contains("dense<f16[4]>[-0.0,inf,nan,5.9604645e-8]"),
        "{text}"
    );
    assert!(text.contains("dense<bf16[3]>[-0.0,-inf,nan]"), "{text}");
    assert!(
        text.contains("dense<f64[4]>[-0.0,nan,5e-324,1.7976931348623157e308]"),
        "{text}"
    );
    assert!(
        text.contains("dense<i64[2]>[-9223372036854775808,9223372036854775807]"),
        "{text}"
    );
    // FP8 values print as decimals, NaNs as bits: E4M3 0x7e is 448 and 0x7f is NaN.
    assert!(
        text.contains("416.0,448.0,0x7f]  # f8e4m3.codes1"),
        "{text}"
    );
    assert!(
        text.contains("=dense<f8e4m3[64]>[-0.0,-0.001953125,"),
        "{text}"
    );
    assert!(
        text.contains("57344.0,inf,0x7d,0x7e,0x7f]  # f8e5m2.codes1"),
        "{text}"
    );
}

#[test]
fn fp8_and_bool_literals_parse_by_value() {
    let text = r#"graph @g() {
  %0: f8e4m3[4] = constant value=dense<f8e4m3[4]>[448.0,-0.001953125,0x7f,1]  # a
  %1: f8e5m2[3] = constant value=dense<f8e5m2[3]>[-inf,0.5,nan]  # b
  %2: bool[3] = constant value=dense<bool[3]>[true,false,0x02]  # c
  %3: u8[2] = constant value=dense<u8[2]>[255,0xff]  # d
}
"#;
    let g = parse(text).unwrap();
    let bytes = |name: &str| match &g.node(g.find_node(name).unwrap()).op {
        Op::Constant { value } => value.bytes().to_vec(),
        op => panic!("{op:?}"),
    };
    assert_eq!(bytes("a"), [0x7e, 0x81, 0x7f, 0x38]);
    assert_eq!(bytes("b"), [0xfc, 0x38, 0x7f]);
    assert_eq!(bytes("c"), [1, 0, 2]);
    assert_eq!(bytes("d"), [255, 255]);
    let (_, _, msg) = parse_err(&text.replace("448.0", "449.0"));
    assert!(
        msg.contains("449.0 is not exactly representable in f8e4m3"),
        "{msg}"
    );
    let (_, _, msg) = parse_err(&text.replace("-inf,0.5", "-inf,0.51"));
    assert!(msg.contains("not exactly representable in f8e5m2"), "{msg}");
}

#[test]
fn interface_added_after_nodes_prints_in_the_header_order() {
    // As the scaling pass does: state is added after the nodes that exist. The canonical
    // order puts interface nodes first, so no placement lines are needed.
    let mut g = Graph::new("late");
    let c = Tensor::scalar_f32(2.0);
    let k = g
        .add_node_typed("two", Op::Constant { value: c.clone() }, &[], vec![c.ty()])
        .unwrap()[0];
    let x = g.add_input("x", f32t(&[4])).unwrap();
    let y = g
        .add_node_typed("y", Op::Mul, &[x, k], vec![f32t(&[4])])
        .unwrap()[0];
    let h = g.add_state("y.h", f32t(&[16]), 0.0).unwrap();
    let w = g.add_param("w", f32t(&[4]), None).unwrap();
    let a = g
        .add_node_typed("y.amax", Op::Amax, &[y], vec![f32t(&[])])
        .unwrap()[0];
    let u = g
        .add_node_typed(
            "y.hist",
            Op::AmaxHistoryUpdate,
            &[h, a],
            vec![f32t(&[16]), f32t(&[16])],
        )
        .unwrap();
    let z = g
        .add_node_typed("z", Op::Add, &[y, w], vec![f32t(&[4])])
        .unwrap()[0];
    g.set_output("z", z).unwrap();
    g.set_state_update("y.h", u[1]).unwrap();
    let text = assert_round_trip(&g);
    assert_eq!(
        text,
        r#"graph @late(%x: f32[4]) params(%w: f32[4]) state(%y.h: f32[16] = 0) {
  %0: f32[] = constant value=dense<f32[]>[2.0]  # two
  %1: f32[4] = mul %x, %0  # y
  %2: f32[] = amax %1  # y.amax
  %3: (f32[16], f32[16]) = amax_history_update %y.h, %2  # y.hist
  %4: f32[4] = add %1, %w  # z
  return %4 as "z"
  update %y.h = %3#1
}
"#
    );
}

#[test]
fn renamed_interface_nodes_and_shared_names_round_trip() {
    let mut g = Graph::new("names");
    let t = g
        .add_node_typed(
            "x",
            Op::Constant {
                value: Tensor::scalar_f32(1.0),
            },
            &[],
            vec![f32t(&[])],
        )
        .unwrap()[0];
    let x = g.add_input("x", f32t(&[])).unwrap(); // node name becomes "x.1"
    g.add_param("x", f32t(&[]), None).unwrap(); // node name becomes "x.2"
    let s = g.add_state("s", f32t(&[]), 0.5).unwrap();
    g.rename_node(s.node, "renamed/state:0");
    let sum = g
        .add_node_typed("sum", Op::Add, &[x, t], vec![f32t(&[])])
        .unwrap()[0];
    let p = g.find_interface("x").unwrap();
    assert_eq!(p, x.node);
    let params: Vec<Value> = g.params().iter().map(|&id| Value::new(id, 0)).collect();
    let sum2 = g
        .add_node_typed("sum2", Op::Add, &[sum, params[0]], vec![f32t(&[])])
        .unwrap()[0];
    g.set_output("out", sum2).unwrap();
    g.set_state_update("s", s).unwrap();
    let text = assert_round_trip(&g);
    assert!(text.starts_with("graph @names(%x: f32[] # x.1) params(%x: f32[] # x.2) state(%s: f32[] = 0.5 # renamed/state:0) {\n"), "{text}");
    assert!(text.contains("= add %x@input, %0  # sum"), "{text}");
    assert!(text.contains("= add %1, %x@param  # sum2"), "{text}");
    let (_, _, msg) = parse_err(&text.replace("%x@param", "%x"));
    assert!(
        msg.contains("%x is ambiguous: write %x@input or %x@param"),
        "{msg}"
    );
}
