//! The text form, JSON and the weights sidecar: exact round trips, error messages, and
//! robustness against garbage (nothing may panic).

use fp8c_ir::{
    AmaxSource, Attr, AttrMap, DType, Dim, Graph, IrError, Op, Tensor, TensorType, Value,
    from_json, parse, print, read_weights, to_json, to_json_with_weights, write_weights,
};
use proptest::prelude::*;
use std::collections::BTreeMap;

/// A small FP8 MLP in canonical form: `print(parse(MLP)) == MLP`.
const MLP: &str = r#"graph @mlp(
    %x: f32[batch,256]
) params(
    %w1: f32[256,512],
    %w2: f32[512,10]
) state(
    %x.h: f32[16] = 0,
    %x.s: f32[] = 1,
    %w1.h: f32[16] = 0,
    %w1.s: f32[] = 1
) {
  %0: f32[] = amax %x  # fc1.x.amax
  %1: (f32[16], f32[16]) = amax_history_update %x.h, %0  # fc1.x.hist
  %2: (f32[], f32[]) = compute_scale %1, %x.s fmt=f8e4m3 margin=0.0 source=history_max epsilon=0.0 power_2=false  # fc1.x.scale
  %3: f8e4m3[batch,256] = quantize %x, %2 to=f8e4m3 saturate=true  # fc1.x.q
  %4: f32[] = amax %w1  # fc1.w.amax
  %5: (f32[16], f32[16]) = amax_history_update %w1.h, %4  # fc1.w.hist
  %6: (f32[], f32[]) = compute_scale %5, %w1.s fmt=f8e4m3 margin=0.0 source=history_max epsilon=0.0 power_2=false  # fc1.w.scale
  %7: f8e4m3[256,512] = quantize %w1, %6 to=f8e4m3 saturate=true  # fc1.w.q
  %8: f32[batch,512] = scaled_matmul %3, %7, %2#1, %6#1 out=f32  # fc1
  %9: f32[batch,512] = gelu %8 approximate=none  # fc1.act
  %10: f32[] = constant value=dense<f32[]>[0.5]  # half
  %11: f32[batch,512] = mul %9, %10  # fc1.scaled
  %12: f32[batch,10] = matmul %11, %w2  # fc2
  %13: f32[batch,10] = softmax %12 axis=-1  # /head/Softmax
  return %13 as "probs"
  return %8 as "logits"
  update %w1.h = %5#1
  update %w1.s = %6
  update %x.h = %1#1
  update %x.s = %2
}
"#;

fn f32t(dims: &[u64]) -> TensorType {
    TensorType::fixed(DType::F32, dims)
}

/// `parse(print(g)) == g` and printing is stable.
#[track_caller]
fn assert_round_trip(g: &Graph) -> String {
    let text = print(g);
    let back = parse(&text).unwrap_or_else(|e| panic!("{e}\n--- text ---\n{text}"));
    assert!(
        back == *g,
        "graph changed in round trip\n--- text ---\n{text}\n--- reprinted ---\n{}",
        print(&back)
    );
    assert_eq!(print(&back), text);
    text
}

#[track_caller]
fn parse_err(text: &str) -> (usize, usize, String) {
    match parse(text) {
        Err(IrError::Parse { line, col, msg }) => (line, col, msg),
        Err(e) => panic!("expected a parse error, got {e}"),
        Ok(g) => panic!("expected a parse error, got a graph:\n{}", print(&g)),
    }
}

// ---------------------------------------------------------------- hand-written text

#[test]
fn mlp_text_prints_back_identically() {
    let g = parse(MLP).unwrap();
    assert_eq!(print(&g), MLP);
    assert_eq!(g.name(), "mlp");
    assert_eq!(g.inputs().len(), 1);
    assert_eq!(g.params().len(), 2);
    assert_eq!(g.state().len(), 4);
    assert_eq!(g.state()[1].1, 1.0);
    assert_eq!(
        g.outputs()
            .iter()
            .map(|o| o.name.as_str())
            .collect::<Vec<_>>(),
        ["probs", "logits"]
    );
    assert_eq!(g.state_updates().len(), 4);
    let fc1 = g.find_node("fc1").unwrap();
    assert_eq!(g.node(fc1).op, Op::ScaledMatMul { out: DType::F32 });
    assert_eq!(g.node(fc1).inputs()[2].slot, 1);
    let scale = g.find_node("fc1.x.scale").unwrap();
    assert_eq!(
        g.node(scale).op,
        Op::ComputeScale {
            fmt: DType::F8E4M3,
            margin: 0.0,
            source: AmaxSource::HistoryMax,
            epsilon: 0.0,
            power_2: false
        }
    );
    let sym = &g.node(g.inputs()[0]).outputs[0].shape[0];
    assert_eq!(*sym, Dim::Sym("batch".into()));
    assert!(g.weights().is_empty());
    assert_round_trip(&g);
}

#[test]
fn hand_written_conveniences_are_accepted() {
    // Comment lines, blank lines, a multi-line header, sparse numbering, unnamed nodes,
    // integer literals for float attributes.
    let text = r#"
// a comment before the graph
graph @g(
    %x: f32[4],
    %y: f32[4]
) {
  // a comment inside
  %10: f32[4] = add %x, %y

  %20: f32[4] = leaky_relu %10 alpha=1
  %30: f32[4] = add %20, %10  # add
  return %30 as "out"
}
// trailing comment
"#;
    let g = parse(text).unwrap();
    let names: Vec<String> = g
        .node_ids()
        .iter()
        .map(|&id| g.node(id).name.clone())
        .collect();
    assert_eq!(names, ["x", "y", "add.1", "leaky_relu", "add"]);
    assert_eq!(
        g.node(g.find_node("leaky_relu").unwrap()).op,
        Op::LeakyRelu { alpha: 1.0 }
    );
    let canonical = print(&g);
    assert!(
        canonical.contains("%0: f32[4] = add %x, %y  # add.1\n"),
        "{canonical}"
    );
    assert!(canonical.contains("alpha=1.0"), "{canonical}");
    assert_round_trip(&g);
}

// ---------------------------------------------------------------- builder graphs

/// A graph touching every attribute kind, quoted names, multi-output nodes, symbolic and
/// unknown dims, special float values and state with updates.
fn kitchen_sink() -> Graph {
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

// ---------------------------------------------------------------- errors

#[test]
fn errors_name_the_problem_and_its_position() {
    let cases: &[(&str, (usize, usize), &str)] = &[
        ("", (1, 1), "expected `graph`, found end of input"),
        (
            "graph @g() {\n  %0: f32[] relu %x\n}",
            (2, 13),
            "expected `=` after result type",
        ),
        (
            "graph @g(%x: f32[]) {\n  %0: f32[] = matmull %x\n}",
            (2, 15),
            "unknown op `matmull`",
        ),
        (
            "graph @g(%x: f32[]) {\n  %0: f32[] = relu %12\n}",
            (2, 20),
            "use of undefined value %12",
        ),
        (
            "graph @g(%x: f32[]) {\n  %0: f32[] = relu %y\n}",
            (2, 20),
            "use of undefined value %y",
        ),
        (
            "graph @g(%x: f32[]) {\n  %3: f32[] = relu %x\n  %3: f32[] = relu %x\n}",
            (3, 3),
            "value %3 defined twice",
        ),
        (
            "graph @g(%a: f32[2,2]) {\n  %0: f32[2,2] = gemm %a, %a alpha=1.0 beta=1.0 trans_a=1 trans_b=false  # fc1\n}",
            (2, 49),
            "node \"fc1\" (gemm): attribute `trans_a`: expected true or false",
        ),
        (
            "graph @g(%a: f32[]) {\n  %0: f32[] = softmax %a  # sm\n}",
            (2, 15),
            "node \"sm\" (softmax): missing attribute `axis`",
        ),
        (
            "graph @g(%a: f32[]) {\n  %0: f32[] = relu %a bogus=1\n}",
            (2, 23),
            "op `relu` has no attribute `bogus`",
        ),
        (
            "graph @g(%a: f32[]) {\n  %0: f32[] = softmax %a axis=1 axis=2\n}",
            (2, 33),
            "attribute `axis` given twice",
        ),
        (
            "graph @g(%a: f32[]) {\n  %0: (f32[], f32[]) = relu %a\n  %1: f32[] = relu %0#2\n}",
            (3, 20),
            "%0 has 2 result(s); there is no %0#2",
        ),
        ("graph @g(%a: f33[]) {\n}", (1, 14), "unknown dtype `f33`"),
        (
            "graph @g(%a: f32[]) {\n  return %a as \"y\"\n  return %a as \"y\"\n}",
            (3, 3),
            "output \"y\" returned twice (also at line 2)",
        ),
        (
            "graph @g(%a: f32[]) {\n  update %a = %a\n}",
            (2, 10),
            "update of %a, which is not declared in `params(...)` or `state(...)`",
        ),
        (
            "graph @g(%a: f32[]) {\n  %0: f32[] = relu %a  # n\n  %1: f32[] = relu %a  # n\n}",
            (3, 3),
            "node name \"n\" is used twice (also at line 2)",
        ),
        (
            "graph @g(%a: f32[]) {\n  %0: f32[] = relu %a  # a\n}",
            (2, 3),
            "node name \"a\" is used twice (also at line 1)",
        ),
        (
            "graph @g(%a: f32[]) {\n  %0: f32[] = relu %a  # a b\n}",
            (2, 27),
            "expected end of line after the node name",
        ),
        (
            "graph @g(%a: f32[], %a: f32[]) {\n}",
            (1, 21),
            "input %a declared twice",
        ),
        (
            "graph @g(%a: f32[]) {\n  %0: f32[] = relu %a\n",
            (3, 1),
            "missing `}`",
        ),
        (
            "graph @g(%a: f32[]) {\n}\nextra",
            (3, 1),
            "unexpected text after the closing `}`",
        ),
        (
            "graph @g() state(%s: f32[]) {\n  %0: f32[] = relu %s\n  state %s\n}",
            (3, 3),
            "`state %s` must come before the first use of %s (line 2)",
        ),
        (
            "graph @g() {\n  %0: f32[2] = constant value=dense<f32[2]>[1.0]\n}",
            (2, 31),
            "dense<f32[2]> needs 2 values, got 1",
        ),
        (
            "graph @g() {\n  %0: u8[1] = constant value=dense<u8[1]>[256]\n}",
            (2, 43),
            "256 is out of range for u8",
        ),
        (
            "graph @g() {\n  %0: u8[1] = constant value=dense<u8[1]>[0x100]\n}",
            (2, 43),
            "0x100 does not fit in u8",
        ),
        (
            "graph @g() {\n  %0: f32[1] = constant value=dense<f32[1]>hex\"0000\"\n}",
            (2, 31),
            "f32 tensor of shape [1] needs 4 bytes, got 2",
        ),
        (
            "graph @g() {\n  %0: f32[1] = constant value=dense<f32[1]>hex\"000\"\n}",
            (2, 47),
            "even number of hex digits",
        ),
        ("graph @\"g() {\n}", (1, 8), "unterminated string"),
        (
            "graph @g() {\n  %0: i64[] = constant value=dense<i64[]>[99999999999999999999]\n}",
            (2, 43),
            "out of range for i64",
        ),
        (
            "graph @g() {\n  %0: f32[] = shape %x start=99999999999999999999 end=none\n}",
            (2, 21),
            "use of undefined value %x",
        ),
    ];
    let mut wrong = Vec::new();
    for (text, (line, col), want) in cases {
        let (l, c, msg) = parse_err(text);
        if !msg.contains(want) || (l, c) != (*line, *col) {
            wrong.push(format!(
                "{text:?}: got {l}:{c}: {msg}; want {line}:{col}: {want}"
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn a_cyclic_graph_prints_and_does_not_parse() {
    let mut g = Graph::new("cycle");
    let x = g.add_input("x", f32t(&[])).unwrap();
    let a = g
        .add_node_typed("a", Op::Add, &[x, x], vec![f32t(&[])])
        .unwrap()[0];
    let b = g
        .add_node_typed("b", Op::Neg, &[a], vec![f32t(&[])])
        .unwrap()[0];
    g.set_input(a.node, 1, b).unwrap();
    let text = print(&g);
    let (_, _, msg) = parse_err(&text);
    assert!(msg.contains("use of undefined value %1"), "{msg}\n{text}");
}

// ---------------------------------------------------------------- weights sidecar

fn with_weights() -> Graph {
    let mut g = Graph::new("w");
    let x = g.add_input("x", f32t(&[2, 3])).unwrap();
    let w = g
        .add_param(
            "fc.w",
            f32t(&[3, 2]),
            Some(Tensor::from_f32(
                vec![3, 2],
                &[1.0, -0.0, f32::NAN, 4.0, 5.5, -6.0],
            )),
        )
        .unwrap();
    let b = g
        .add_param(
            "fc.b",
            TensorType::fixed(DType::F16, &[2]),
            Some(Tensor::from_f64_as(DType::F16, vec![2], &[0.5, -1.0]).unwrap()),
        )
        .unwrap();
    let q = g
        .add_param(
            "q",
            TensorType::fixed(DType::F8E4M3, &[]),
            Some(Tensor::from_bytes(DType::F8E4M3, vec![], vec![0x7e]).unwrap()),
        )
        .unwrap();
    let _empty = g
        .add_param("empty", f32t(&[0]), Some(Tensor::from_f32(vec![0], &[])))
        .unwrap();
    let _nodata = g.add_param("no data", f32t(&[1]), None).unwrap();
    let y = g
        .add_node_typed("fc", Op::MatMul, &[x, w], vec![f32t(&[2, 2])])
        .unwrap()[0];
    let y = g
        .add_node_typed("bias", Op::Add, &[y, b], vec![f32t(&[2, 2])])
        .unwrap()[0];
    g.add_node_typed(
        "q.use",
        Op::Identity,
        &[q],
        vec![TensorType::fixed(DType::F8E4M3, &[])],
    )
    .unwrap();
    g.set_output("y", y).unwrap();
    g
}

#[test]
fn weights_sidecar_round_trips() {
    let g = with_weights();
    let mut file = Vec::new();
    write_weights(&g, &mut file).unwrap();
    assert_eq!(&file[..8], b"FP8CW001");
    let mut back = parse(&print(&g)).unwrap();
    assert!(back.weights().is_empty());
    assert!(back != g);
    read_weights(&mut back, &mut file.as_slice()).unwrap();
    assert!(back == g);
    assert_eq!(back.weights().len(), 4);
}

#[test]
fn weights_sidecar_rejects_bad_files_without_panicking() {
    let g = with_weights();
    let mut file = Vec::new();
    write_weights(&g, &mut file).unwrap();
    let text = print(&g);
    let fresh = || parse(&text).unwrap();
    let try_read = |bytes: &[u8]| {
        let mut h = fresh();
        let r = read_weights(&mut h, &mut &bytes[..]);
        if r.is_err() {
            assert!(
                h.weights().is_empty(),
                "a failed read must leave the graph unchanged"
            );
        }
        r.map_err(|e| e.to_string())
    };
    // Every truncation fails.
    for len in 0..file.len() {
        let err = try_read(&file[..len]).unwrap_err();
        assert!(
            err.contains("truncated") || err.contains("magic"),
            "{len}: {err}"
        );
    }
    // Trailing data.
    let mut long = file.clone();
    long.push(0);
    assert!(
        try_read(&long)
            .unwrap_err()
            .contains("unexpected data after the 4 weight(s)")
    );
    // Bad magic.
    let mut bad = file.clone();
    bad[7] = b'2';
    assert!(
        try_read(&bad)
            .unwrap_err()
            .contains("not an fp8c weights file")
    );
    // A huge count or lengths: clean errors, no huge allocation.
    let mut bad = file.clone();
    bad[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
    assert!(try_read(&bad).unwrap_err().contains("truncated"));
    let mut bad = file.clone();
    bad[16..20].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(
        try_read(&bad)
            .unwrap_err()
            .contains("name length 4294967295 is too large")
    );
    // Every single-byte corruption is an error or a valid read, never a panic.
    for i in 0..file.len() {
        for flip in [0x01u8, 0x80, 0xff] {
            let mut bad = file.clone();
            bad[i] ^= flip;
            let _ = try_read(&bad);
        }
    }
    // Names and types are checked against the graph.
    let mut other = Graph::new("other");
    other.add_param("fc.w", f32t(&[2, 3]), None).unwrap();
    let err = read_weights(&mut other, &mut file.as_slice())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("weight \"empty\", which is not a param of graph @other"),
        "{err}"
    );
    let mut other = Graph::new("other");
    for name in ["empty", "fc.b", "q"] {
        let ty = g.node(g.find_interface(name).unwrap()).outputs[0].clone();
        other.add_param(name, ty, None).unwrap();
    }
    other.add_param("fc.w", f32t(&[2, 3]), None).unwrap();
    let err = read_weights(&mut other, &mut file.as_slice())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("weight \"fc.w\": the file has f32[3,2], the graph declares f32[2,3]"),
        "{err}"
    );
}

// ---------------------------------------------------------------- JSON

#[test]
fn json_round_trips_and_omits_weights_unless_asked() {
    for g in [
        kitchen_sink_without_non_finite(),
        with_weights(),
        parse(MLP).unwrap(),
    ] {
        let json = to_json(&g);
        assert!(!json.contains("\"weights\""));
        let back = from_json(&json).unwrap_or_else(|e| panic!("{e}\n{json}"));
        let mut expected = parse(&print(&g)).unwrap();
        assert!(back == expected, "{json}");
        let full = to_json_with_weights(&g);
        assert_eq!(full.contains("\"weights\""), !g.weights().is_empty());
        let back = from_json(&full).unwrap();
        assert!(back == g);
        let mut file = Vec::new();
        write_weights(&g, &mut file).unwrap();
        read_weights(&mut expected, &mut file.as_slice()).unwrap();
        assert!(expected == g);
    }
}

/// JSON has no infinities or NaNs: the kitchen sink without its non-finite attributes.
fn kitchen_sink_without_non_finite() -> Graph {
    let text = print(&kitchen_sink()).replace("alpha=inf", "alpha=2.0");
    parse(&text).unwrap()
}

#[test]
fn json_errors_are_clean() {
    let json = to_json(&parse(MLP).unwrap());
    for bad in [
        "",
        "{}",
        "[1,2",
        &json[..json.len() / 2],
        &json.replace("\"node\":3", "\"node\":99"),
        &json.replace("\"slot\":1", "\"slot\":7"),
        &json.replace("\"data\":[0,0,0,63]", "\"data\":[0,0,63]"),
        &json.replace("\"inputs\":[0]", "\"inputs\":[1000]"),
    ] {
        assert!(from_json(bad).is_err(), "accepted {bad}");
    }
    let err = from_json(&json.replace("\"data\":[0,0,0,63]", "\"data\":[0,0,63]"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("cannot hold 3 bytes"), "{err}");
}

// ---------------------------------------------------------------- random graphs

/// splitmix64: a tiny deterministic generator driven by proptest's seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
    fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.below(xs.len())]
    }
}

const NAMES: &[&str] = &[
    "x",
    "w",
    "fc1.x.amax",
    "onnx::MatMul_12",
    "/encoder/layer.0/Add",
    "0abc",
    "",
    "a b",
    "q\"uote",
    "tab\there",
    "ünïcode",
    "#hash",
    "%pct",
    "@at",
    "new\nline",
    "back\\slash",
    "input",
    "state",
    "graph",
    "none",
    "x.1",
    "_",
    "..",
    "-",
    "//c",
    "a#1",
    "dense",
    "nan",
    "inf",
    "return",
];

fn name(rng: &mut Rng) -> String {
    if rng.chance(80) {
        rng.pick(NAMES).to_string()
    } else {
        (0..rng.below(6))
            .map(|_| char::from_u32(rng.below(0x3000) as u32).unwrap_or('?'))
            .collect()
    }
}

fn tensor_type(rng: &mut Rng) -> TensorType {
    let dtype = *rng.pick(&DType::ALL);
    let shape = (0..rng.below(4))
        .map(|_| match rng.below(5) {
            0 => Dim::Sym(name(rng)),
            1 => Dim::Unknown,
            2 => Dim::Known(rng.next()),
            _ => Dim::Known(rng.below(20) as u64),
        })
        .collect();
    TensorType::new(dtype, shape)
}

fn tensor(rng: &mut Rng) -> Tensor {
    let dtype = *rng.pick(&DType::ALL);
    let shape: Vec<u64> = match rng.below(4) {
        0 => vec![],
        1 => vec![rng.below(8) as u64],
        2 => vec![rng.below(5) as u64, rng.below(5) as u64],
        _ => vec![rng.below(100) as u64 + 1],
    };
    let n = shape.iter().product::<u64>() as usize * dtype.size();
    let bytes = (0..n).map(|_| rng.next() as u8).collect();
    Tensor::from_bytes(dtype, shape, bytes).unwrap()
}

/// Which floats the generator makes.
#[derive(Clone, Copy)]
enum Floats {
    /// Any non-NaN value (NaN never compares equal, so no graph holding one can).
    Any,
    /// What JSON keeps exactly: attributes finite even as f32, short decimals for state.
    JsonSafe,
}

fn float(rng: &mut Rng, floats: Floats) -> f64 {
    let v = match rng.below(6) {
        0 => *rng.pick(&[
            0.0,
            -0.0,
            1.0,
            f64::INFINITY,
            f64::NEG_INFINITY,
            1e-300,
            f64::MAX,
        ]),
        1 => (rng.below(2001) as f64 - 1000.0) / 8.0,
        _ => f64::from_bits(rng.next()),
    };
    match floats {
        Floats::Any if !v.is_nan() => v,
        Floats::JsonSafe if (v as f32).is_finite() => v,
        _ => 0.25,
    }
}

/// Words an enum or dtype attribute may take (a new enum needs its words here).
const WORDS: &[&str] = &[
    "none",
    "tanh",
    "notset",
    "same_upper",
    "same_lower",
    "valid",
    "constant",
    "reflect",
    "edge",
    "wrap",
    "history_max",
    "history_most_recent",
    "current",
    "f64",
    "f32",
    "f16",
    "bf16",
    "f8e4m3",
    "f8e5m2",
    "i64",
    "i32",
    "i16",
    "i8",
    "u8",
    "bool",
];

/// For every op, the attribute kinds each of its keys accepts, found by trying samples
/// against `Op::from_parts` (so the generator follows the op table without a copy of it).
/// An op name and, per attribute, the sample values it accepts.
type Schema = (&'static str, Vec<(&'static str, Vec<Attr>)>);

fn op_schemas() -> Vec<Schema> {
    let mut samples = vec![
        Attr::Int(1),
        Attr::Float(0.5),
        Attr::Bool(true),
        Attr::Ints(vec![1]),
        Attr::Floats(vec![0.5]),
        Attr::Str("s".into()),
        // An elementwise program (the fused ops' `expr`).
        Attr::Str("relu[a0]".into()),
        Attr::Tensor(Tensor::scalar_f32(1.0)),
        Attr::None,
    ];
    samples.extend(WORDS.iter().map(|w| Attr::Word(w.to_string())));
    Op::NAMES
        .iter()
        .map(|&name| {
            let mut map: BTreeMap<String, Attr> = BTreeMap::new();
            let op = loop {
                match Op::from_parts(name, AttrMap(map.clone())) {
                    Ok(op) => break op,
                    Err(msg) => {
                        let key = msg
                            .split('`')
                            .nth(1)
                            .unwrap_or_else(|| panic!("{name}: {msg}"))
                            .to_string();
                        let ok = samples.iter().find(|s| {
                            let mut m = map.clone();
                            m.insert(key.clone(), (*s).clone());
                            match Op::from_parts(name, AttrMap(m)) {
                                Ok(_) => true,
                                Err(e) => !e.contains(&format!("`{key}`")),
                            }
                        });
                        let ok = ok.unwrap_or_else(|| {
                            panic!("no sample value fits attribute `{key}` of `{name}`: {msg}")
                        });
                        map.insert(key, ok.clone());
                    }
                }
            };
            let attrs: Vec<(&'static str, Attr)> = op.attrs();
            let schema = attrs
                .iter()
                .map(|(key, _)| {
                    let accepted = samples
                        .iter()
                        .filter(|s| {
                            let mut m: BTreeMap<String, Attr> = attrs
                                .iter()
                                .map(|(k, a)| (k.to_string(), a.clone()))
                                .collect();
                            m.insert(key.to_string(), (*s).clone());
                            Op::from_parts(name, AttrMap(m)).is_ok()
                        })
                        .cloned()
                        .collect();
                    (*key, accepted)
                })
                .collect();
            (name, schema)
        })
        .collect()
}

fn random_attr(rng: &mut Rng, kinds: &[Attr], floats: Floats) -> Attr {
    match rng.pick(kinds) {
        Attr::Int(_) => Attr::Int(if rng.chance(50) {
            rng.next() as i64
        } else {
            rng.below(7) as i64 - 3
        }),
        Attr::Float(_) => Attr::Float(float(rng, floats)),
        Attr::Bool(_) => Attr::Bool(rng.chance(50)),
        Attr::Ints(_) => Attr::Ints(
            (0..rng.below(5))
                .map(|_| rng.next() as i64 >> rng.below(64))
                .collect(),
        ),
        Attr::Floats(_) => Attr::Floats((0..rng.below(5)).map(|_| float(rng, floats)).collect()),
        Attr::Str(_) => Attr::Str(name(rng)),
        Attr::Tensor(_) => Attr::Tensor(tensor(rng)),
        other => other.clone(),
    }
}

/// A random graph built through the public API: interface entries added at random points
/// (between nodes, as passes do), renamed nodes, removed nodes, multi-output nodes.
fn random_graph(rng: &mut Rng, schemas: &[Schema], steps: usize, floats: Floats) -> Graph {
    let mut g = Graph::new(name(rng));
    let mut values: Vec<Value> = Vec::new();
    let mut states: Vec<String> = Vec::new();
    for _ in 0..steps {
        match rng.below(12) {
            0 => {
                if let Ok(v) = g.add_input(&name(rng), tensor_type(rng)) {
                    values.push(v);
                }
            }
            1 => {
                if let Ok(v) = g.add_param(&name(rng), tensor_type(rng), None) {
                    values.push(v);
                }
            }
            2 => {
                let init = match floats {
                    Floats::Any => float(rng, floats),
                    Floats::JsonSafe => (rng.below(2001) as f64 - 1000.0) / 16.0,
                };
                let n = name(rng);
                if let Ok(v) = g.add_state(&n, tensor_type(rng), init) {
                    values.push(v);
                    states.push(n);
                }
            }
            3 if !values.is_empty() => {
                let v = *rng.pick(&values);
                let _ = g.set_output(&name(rng), v);
            }
            4 if !values.is_empty() && !states.is_empty() => {
                let v = *rng.pick(&values);
                let s = rng.pick(&states).clone();
                let _ = g.set_state_update(&s, v);
            }
            5 => {
                let ids = g.node_ids();
                if !ids.is_empty() {
                    let id = *rng.pick(&ids);
                    if rng.chance(50) {
                        g.rename_node(id, &name(rng));
                    } else if g.remove_node(id).is_ok() {
                        values.retain(|v| v.node != id);
                        states.retain(|s| g.find_interface(s).is_some());
                    }
                }
            }
            _ => {
                let (op_name, schema) = rng.pick(schemas);
                let attrs: BTreeMap<String, Attr> = schema
                    .iter()
                    .map(|(k, kinds)| (k.to_string(), random_attr(rng, kinds, floats)))
                    .collect();
                let Ok(op) = Op::from_parts(op_name, AttrMap(attrs)) else {
                    continue;
                };
                let inputs: Vec<Value> = if values.is_empty() {
                    vec![]
                } else {
                    (0..rng.below(4)).map(|_| *rng.pick(&values)).collect()
                };
                let outputs = (0..[1, 1, 1, 2, 3, 0][rng.below(6)])
                    .map(|_| tensor_type(rng))
                    .collect();
                if let Ok(vs) = g.add_node_typed(&name(rng), op, &inputs, outputs) {
                    values.extend(vs);
                }
            }
        }
    }
    g
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn random_graphs_round_trip(seed in any::<u64>(), steps in 0usize..60) {
        let schemas = op_schemas();
        let g = random_graph(&mut Rng(seed), &schemas, steps, Floats::Any);
        assert_round_trip(&g);
    }

    #[test]
    fn random_graphs_round_trip_through_json(seed in any::<u64>(), steps in 0usize..40) {
        let schemas = op_schemas();
        let g = random_graph(&mut Rng(seed), &schemas, steps, Floats::JsonSafe);
        let json = to_json(&g);
        let back = from_json(&json).unwrap_or_else(|e| panic!("{e}\n{json}"));
        prop_assert!(back == g);
    }

    #[test]
    fn garbage_never_panics(text in "\\PC{0,200}") {
        let _ = parse(&text);
        let _ = from_json(&text);
        let mut g = Graph::new("g");
        let _ = read_weights(&mut g, &mut text.as_bytes());
    }

    #[test]
    fn mutated_text_never_panics(seed in any::<u64>(), edits in 1usize..6) {
        let schemas = op_schemas();
        let mut rng = Rng(seed);
        let base = if rng.chance(30) { MLP.to_string() } else { print(&random_graph(&mut rng, &schemas, 30, Floats::Any)) };
        let mut chars: Vec<char> = base.chars().collect();
        const PIECES: &[&str] = &["%", "#", "@", "\"", "\\", "[", "]", "(", ")", ",", "=", ":", "\n", " ", "}", "{", "-", "0x", "1e", "9", "%0", "#1", "none", "dense<f32[2]>", "hex\"", "//", "state %x.h", "update %x.h = %0", "return %0 as \"q\""];
        for _ in 0..edits {
            let at = rng.below(chars.len() + 1);
            match rng.below(4) {
                0 if at < chars.len() => { chars.remove(at); }
                1 => { for c in rng.pick(PIECES).chars().rev() { chars.insert(at, c); } }
                2 => chars.truncate(at),
                _ if at < chars.len() => chars[at] = char::from_u32(rng.below(0x80) as u32).unwrap_or(' '),
                _ => {}
            }
        }
        let text: String = chars.into_iter().collect();
        if let Ok(g) = parse(&text) {
            // Whatever parses is printable and stable.
            let again = parse(&print(&g)).unwrap_or_else(|e| panic!("{e}\n{}", print(&g)));
            prop_assert!(again == g);
        }
    }
}
