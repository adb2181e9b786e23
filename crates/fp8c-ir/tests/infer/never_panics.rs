//! Property tests: inference never panics on any op with garbage attributes and inputs, and
//! broadcasting is symmetric.

use super::*;
use fp8c_ir::infer::{InferInput, infer};
use proptest::prelude::*;

/// A small elementwise program for the fused ops: `gelu(a0 + a1)` or `relu(a0)`.
fn fused_expr(two_inputs: bool) -> fp8c_ir::EwExpr {
    let text = if two_inputs {
        "add[a0,a1];gelu{approximate=none}[t0]"
    } else {
        "relu[a0]"
    };
    fp8c_ir::EwExpr::parse(text).expect("a valid elementwise program")
}

/// A scatter reduction picked by an int.
fn reduction(k: i64) -> fp8c_ir::ScatterReduction {
    use fp8c_ir::ScatterReduction::*;
    [None, Add, Mul, Max, Min][k.rem_euclid(5) as usize]
}

/// Every op, its attributes drawn from `ints`, `flag` and `dtype` (often garbage).
fn make_op(kind: usize, ints: &[i64], flag: bool, dtype: DType) -> Op {
    let i = |k: usize| ints.get(k).copied().unwrap_or(0);
    let list = ints.to_vec();
    let axes = if flag { Some(list.clone()) } else { None };
    match kind {
        0 => Op::Identity,
        1 => Op::Neg,
        2 => Op::Abs,
        3 => Op::Sqrt,
        4 => Op::Reciprocal,
        5 => Op::Exp,
        6 => Op::Log,
        7 => Op::Erf,
        8 => Op::Tanh,
        9 => Op::Sigmoid,
        10 => Op::Relu,
        11 => Op::Floor,
        12 => Op::Ceil,
        13 => Op::Sin,
        14 => Op::Cos,
        15 => Op::Gelu {
            approximate: GeluApprox::None,
        },
        16 => Op::LeakyRelu { alpha: 0.1 },
        17 => Op::Not,
        18 => Op::IsNaN,
        19 => Op::IsInf {
            detect_negative: flag,
            detect_positive: true,
        },
        20 => Op::Add,
        21 => Op::Sub,
        22 => Op::Mul,
        23 => Op::Div,
        24 => Op::Pow,
        25 => Op::Max,
        26 => Op::Min,
        27 => Op::Mod { fmod: flag },
        28 => Op::Equal,
        29 => Op::Less,
        30 => Op::LessOrEqual,
        31 => Op::Greater,
        32 => Op::GreaterOrEqual,
        33 => Op::And,
        34 => Op::Or,
        35 => Op::Xor,
        36 => Op::Where,
        37 => Op::Clip,
        38 => Op::Cast {
            to: dtype,
            saturate: flag,
        },
        39 => Op::MatMul,
        40 => Op::Gemm {
            alpha: 1.0,
            beta: 1.0,
            trans_a: flag,
            trans_b: i(0) > 0,
        },
        41 => Op::Conv {
            kernel_shape: list.iter().take(2).copied().collect(),
            strides: list.iter().skip(1).take(2).copied().collect(),
            pads: list.iter().skip(2).copied().collect(),
            dilations: if flag {
                vec![]
            } else {
                list.iter().take(2).copied().collect()
            },
            group: i(3),
            auto_pad: [
                AutoPad::NotSet,
                AutoPad::SameUpper,
                AutoPad::SameLower,
                AutoPad::Valid,
            ][i(4).rem_euclid(4) as usize],
        },
        42 => Op::MaxPool {
            kernel_shape: list.iter().take(2).copied().collect(),
            strides: list.iter().skip(1).take(2).copied().collect(),
            pads: list.iter().skip(2).copied().collect(),
            dilations: vec![],
            ceil_mode: flag,
            auto_pad: [AutoPad::NotSet, AutoPad::SameUpper, AutoPad::Valid]
                [i(3).rem_euclid(3) as usize],
        },
        43 => Op::AveragePool {
            kernel_shape: list.iter().take(1).copied().collect(),
            strides: list.iter().skip(1).take(1).copied().collect(),
            pads: list.iter().skip(2).take(2).copied().collect(),
            dilations: list.iter().skip(4).copied().collect(),
            ceil_mode: flag,
            count_include_pad: flag,
            auto_pad: AutoPad::NotSet,
        },
        44 => Op::GlobalAveragePool,
        45 => Op::GlobalMaxPool,
        46 => Op::BatchNormalization { epsilon: 1e-5 },
        47 => Op::LayerNormalization {
            axis: i(0),
            epsilon: 1e-5,
        },
        48 => Op::Softmax { axis: i(0) },
        49 => Op::LogSoftmax { axis: i(0) },
        50 => Op::ReduceMean {
            axes,
            keepdims: flag,
        },
        51 => Op::ReduceSum {
            axes,
            keepdims: !flag,
        },
        52 => Op::ReduceMax {
            axes,
            keepdims: flag,
        },
        53 => Op::ReduceMin {
            axes,
            keepdims: flag,
        },
        54 => Op::ReduceProd {
            axes,
            keepdims: flag,
        },
        55 => Op::Shape {
            start: i(0),
            end: flag.then(|| i(1)),
        },
        56 => Op::Reshape { allowzero: flag },
        57 => Op::Transpose { perm: list },
        58 => Op::Unsqueeze { axes: list },
        59 => Op::Squeeze { axes },
        60 => Op::Flatten { axis: i(0) },
        61 => Op::Concat { axis: i(0) },
        62 => Op::Split {
            axis: i(0),
            split: list.into_iter().skip(1).collect(),
        },
        63 => Op::Slice,
        64 => Op::Gather { axis: i(0) },
        65 => Op::Expand,
        66 => Op::ConstantOfShape {
            value: if flag {
                Tensor::scalar_f32(1.0)
            } else {
                Tensor::zeros(dtype, vec![i(0).clamp(0, 3) as u64]).unwrap()
            },
        },
        67 => Op::Range,
        68 => Op::Pad {
            mode: PadMode::Reflect,
        },
        69 => Op::Tile,
        70 => Op::QuantizeLinear {
            axis: i(0),
            saturate: flag,
            to: dtype,
            block_size: 0,
        },
        71 => Op::DequantizeLinear {
            axis: i(0),
            block_size: 0,
        },
        72 => Op::Amax,
        73 => Op::ComputeScale {
            fmt: dtype,
            margin: i(0) as f32,
            source: [
                AmaxSource::HistoryMax,
                AmaxSource::HistoryMostRecent,
                AmaxSource::Current,
            ][i(1).rem_euclid(3) as usize],
            epsilon: i(2) as f32,
            power_2: flag,
        },
        74 => Op::AmaxHistoryUpdate,
        75 => Op::Quantize {
            to: dtype,
            saturate: flag,
        },
        76 => Op::Dequantize { to: dtype },
        77 => Op::ScaledMatMul {
            out: dtype,
            fast_accum: false,
        },
        // ---- training ops ----
        78 => Op::GatherGrad {
            axis: i(0),
            size: i(1),
        },
        79 => Op::LayerNormGrad {
            axis: i(0),
            epsilon: 1e-5,
        },
        80 => Op::SoftmaxGrad {
            axis: i(0),
            log: flag,
        },
        81 => Op::GeluGrad {
            approximate: if flag {
                GeluApprox::Tanh
            } else {
                GeluApprox::None
            },
        },
        82 => Op::ConvGradInput {
            kernel_shape: list.iter().take(2).copied().collect(),
            strides: vec![],
            pads: list.iter().skip(2).copied().collect(),
            dilations: vec![],
            group: i(1),
            auto_pad: AutoPad::NotSet,
            input_shape: list.clone(),
        },
        83 => Op::ConvGradWeight {
            kernel_shape: list.iter().take(2).copied().collect(),
            strides: list.iter().skip(1).take(2).copied().collect(),
            pads: vec![],
            dilations: vec![],
            group: i(0),
            auto_pad: AutoPad::SameUpper,
        },
        84 => Op::MaxPoolGrad {
            kernel_shape: list.iter().take(2).copied().collect(),
            strides: vec![],
            pads: vec![],
            dilations: vec![],
            ceil_mode: flag,
            auto_pad: AutoPad::NotSet,
        },
        85 => Op::AveragePoolGrad {
            kernel_shape: list.iter().take(2).copied().collect(),
            strides: list.iter().skip(2).take(2).copied().collect(),
            pads: vec![],
            dilations: vec![],
            ceil_mode: flag,
            count_include_pad: !flag,
            auto_pad: AutoPad::Valid,
        },
        86 => Op::SoftmaxCrossEntropy,
        87 => Op::SoftmaxCrossEntropyGrad,
        88 => Op::AllFinite,
        89 => Op::SgdUpdate {
            momentum: 0.9,
            weight_decay: i(0) as f32,
            nesterov: flag,
        },
        90 => Op::AdamwUpdate {
            beta1: 0.9,
            beta2: 0.999,
            epsilon: 1e-8,
            weight_decay: i(0) as f32,
        },
        // ---- fused ops ----
        91 => Op::QuantizeAmax {
            to: dtype,
            saturate: flag,
        },
        92 => Op::CastTranspose {
            perm: list,
            to: dtype,
            saturate: flag,
        },
        93 => Op::LayerNormQuantize {
            axis: i(0),
            epsilon: 1e-5,
            to: dtype,
            saturate: flag,
        },
        94 => Op::ElementwiseQuantize {
            expr: fused_expr(flag),
            to: dtype,
            saturate: flag,
        },
        95 => Op::ScaledMatMulEpilogue {
            out: dtype,
            fast_accum: false,
            expr: fused_expr(!flag),
            to: flag.then_some(DType::F8E4M3),
            saturate: flag,
        },
        96 => Op::BatchedScaleUpdate {
            fmt: dtype,
            margin: i(0) as f32,
            source: AmaxSource::HistoryMax,
            epsilon: 0.0,
            power_2: flag,
        },
        97 => Op::Input { name: "x".into() },
        98 => Op::CumSum {
            exclusive: flag,
            reverse: !flag,
        },
        99 => Op::GatherNd { batch_dims: i(0) },
        100 => Op::ArgMax {
            axis: i(0),
            keepdims: flag,
            select_last_index: !flag,
        },
        102 => Op::Trilu { upper: flag },
        103 => Op::GatherElements { axis: i(0) },
        105 => Op::Sign,
        104 => Op::RmsNormalization {
            axis: i(0),
            epsilon: 1e-5,
        },
        101 => Op::ArgMin {
            axis: i(1),
            keepdims: !flag,
            select_last_index: flag,
        },
        106 => Op::ScatterElements {
            axis: i(0),
            reduction: reduction(i(1)),
        },
        107 => Op::ScatterNd {
            reduction: reduction(i(0)),
        },
        109 => Op::TopK {
            axis: i(0),
            largest: flag,
            sorted: !flag,
        },
        110 => Op::CastE8m0 {
            round: if flag {
                fp8c_ir::E8m0Round::Down
            } else {
                fp8c_ir::E8m0Round::Nearest
            },
            saturate: !flag,
        },
        111 => Op::BlockQuantize {
            to: dtype,
            saturate: flag,
            rows: i(0),
            cols: i(1),
            scaling: scaling_of(i(2)),
            epsilon: i(2) as f32,
        },
        112 => Op::BlockDequantize {
            to: dtype,
            rows: i(0),
            cols: i(1),
        },
        113 => Op::BlockScaledMatMul {
            out: dtype,
            k_block: i(0),
            a_rows: i(1),
            b_cols: i(2),
        },
        114 => Op::ElementwiseBlockQuantize {
            expr: fused_expr(flag),
            to: dtype,
            saturate: flag,
            cols: i(1),
            scaling: scaling_of(i(2)),
            epsilon: i(2) as f32,
        },
        115 => Op::LayerNormBlockQuantize {
            axis: i(0),
            epsilon: 1e-5,
            to: dtype,
            saturate: flag,
            cols: i(1),
            scaling: scaling_of(i(0)),
            amax_epsilon: i(2) as f32,
        },
        116 => Op::Round,
        117 => Op::After,
        118 => Op::Attention {
            scale: i(0) as f64 / 8.0,
            causal: flag,
        },
        119 => Op::AttentionGrad {
            scale: i(1) as f64 / 8.0,
            causal: !flag,
        },
        _ => Op::Constant {
            value: Tensor::scalar_f32(1.0),
        },
    }
}

const OP_KINDS: usize = 120;

/// One of the per-tile scale rules, picked by `k`.
fn scaling_of(k: i64) -> fp8c_ir::BlockScaling {
    [
        fp8c_ir::BlockScaling::Fp32,
        fp8c_ir::BlockScaling::Pow2,
        fp8c_ir::BlockScaling::E8m0,
    ][k.rem_euclid(3) as usize]
}

#[test]
fn the_fuzzer_covers_every_op() {
    let mut names: Vec<&str> = (0..OP_KINDS)
        .map(|k| make_op(k, &[0, 1, 2], true, DType::F32).name())
        .collect();
    names.sort();
    names.dedup();
    let mut all = Op::NAMES.to_vec();
    all.retain(|n| !["param", "state"].contains(n));
    all.sort();
    assert_eq!(names, all);
}

fn arb_int() -> impl Strategy<Value = i64> {
    prop_oneof![
        12 => -4i64..8,
        1 => Just(i64::MIN),
        1 => Just(i64::MAX),
        1 => Just(i64::from(i32::MAX)),
        1 => Just(1 << 40),
    ]
}

fn arb_dim() -> impl Strategy<Value = Dim> {
    prop_oneof![
        8 => (0u64..6).prop_map(Dim::Known),
        2 => Just(Dim::Sym("a".into())),
        1 => Just(Dim::Sym("b".into())),
        2 => Just(Dim::Unknown),
        1 => Just(Dim::Known(u64::MAX)),
        1 => Just(Dim::Known(1 << 40)),
    ]
}

fn arb_dtype() -> impl Strategy<Value = DType> {
    prop_oneof![
        4 => Just(DType::F32),
        3 => Just(DType::I64),
        1 => proptest::sample::select(DType::ALL.to_vec()),
    ]
}

/// A typed input or a small constant (int lists, scalars): (type, value).
fn arb_input() -> impl Strategy<Value = (TensorType, Option<Tensor>)> {
    let typed = (arb_dtype(), prop::collection::vec(arb_dim(), 0..5))
        .prop_map(|(d, s)| (TensorType::new(d, s), None));
    let int_const = (
        prop::collection::vec(arb_int(), 0..5),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(v, scalar, i32s)| {
            let t = match (scalar, i32s) {
                (true, _) => Tensor::scalar_i64(v.first().copied().unwrap_or(0)),
                (false, false) => Tensor::from_i64(vec![v.len() as u64], &v),
                (false, true) => {
                    let w: Vec<i32> = v
                        .iter()
                        .map(|&x| x.clamp(i32::MIN.into(), i32::MAX.into()) as i32)
                        .collect();
                    Tensor::from_i32(vec![w.len() as u64], &w)
                }
            };
            (t.ty(), Some(t))
        });
    let float_const = prop_oneof![
        -4.0f32..8.0,
        Just(f32::NAN),
        Just(f32::INFINITY),
        Just(1e30f32),
        Just(0.0f32)
    ]
    .prop_map(|v| (TensorType::scalar(DType::F32), Some(Tensor::scalar_f32(v))));
    prop_oneof![6 => typed, 3 => int_const, 1 => float_const]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn infer_never_panics(
        kind in 0..OP_KINDS,
        ints in prop::collection::vec(arb_int(), 0..6),
        flag in any::<bool>(),
        dtype in arb_dtype(),
        inputs in prop::collection::vec(arb_input(), 0..6),
    ) {
        let op = make_op(kind, &ints, flag, dtype);
        let ins: Vec<InferInput<'_>> = inputs.iter().map(|(ty, value)| InferInput { ty, value: value.as_ref() }).collect();
        let first = infer(&op, &ins);
        // Deterministic, and errors always say something.
        prop_assert_eq!(&first, &infer(&op, &ins));
        if let Err(e) = &first {
            prop_assert!(!e.is_empty());
        }
    }

    #[test]
    fn binary_broadcast_is_symmetric_in_shape(
        a in prop::collection::vec(arb_dim(), 0..4),
        b in prop::collection::vec(arb_dim(), 0..4),
    ) {
        let (ta, tb) = (TensorType::new(DType::F32, a), TensorType::new(DType::F32, b));
        let ab = infer(&Op::Add, &[InferInput::new(&ta), InferInput::new(&tb)]);
        let ba = infer(&Op::Add, &[InferInput::new(&tb), InferInput::new(&ta)]);
        prop_assert_eq!(ab.is_ok(), ba.is_ok());
        if let (Ok(x), Ok(y)) = (ab, ba) {
            prop_assert_eq!(x, y);
        }
    }
}
