//! Property test: `eval_op` never panics, whatever the op, attributes, arity, dtypes, shapes
//! and values. Integer values are kept small so that valid shape inputs (expand, tile, range,
//! constant_of_shape) stay small; everything else is arbitrary. (About one evaluation in six
//! succeeds, so kernels are reached as well as the checks in front of them.)

use fp8c_eval::eval_op;
use fp8c_ir::{AmaxSource, AutoPad, DType, EwExpr, GeluApprox, Op, PadMode, Tensor};
use proptest::prelude::*;

fn dtype() -> impl Strategy<Value = DType> {
    prop::sample::select(DType::ALL.to_vec())
}

/// A tensor of any dtype.
fn tensor() -> impl Strategy<Value = Tensor> {
    dtype().prop_flat_map(tensor_of)
}

/// A small 1-D i64 tensor, like the shape-ish inputs of slice, reshape, pad or tile.
fn shape_input() -> impl Strategy<Value = Tensor> {
    ints(0..5).prop_map(|v| Tensor::from_i64(vec![v.len() as u64], &v))
}

/// A tensor of `dt` of rank 0..=4 with dims 0..=3 and values fitting its dtype.
fn tensor_of(dt: DType) -> impl Strategy<Value = Tensor> {
    prop::collection::vec(0u64..4, 0..=4).prop_flat_map(move |shape| {
        let n = shape.iter().product::<u64>() as usize;
        prop::collection::vec(any::<u64>(), n).prop_map(move |raw| {
            let bytes: Vec<u8> = raw
                .iter()
                .flat_map(|&r| {
                    let small = (r % 13) as i64 - 6;
                    match dt {
                        DType::F64 => f64::from_bits(r).to_le_bytes().to_vec(),
                        DType::F32 => {
                            let specials = [
                                0.0,
                                -0.0,
                                1.0,
                                -2.5,
                                f32::NAN,
                                f32::INFINITY,
                                f32::NEG_INFINITY,
                                1e30,
                            ];
                            let v = if r % 3 == 0 {
                                specials[(r >> 8) as usize % specials.len()]
                            } else {
                                f32::from_bits(r as u32)
                            };
                            v.to_le_bytes().to_vec()
                        }
                        DType::F16 | DType::BF16 => (r as u16).to_le_bytes().to_vec(),
                        DType::F8E4M3 | DType::F8E5M2 => vec![r as u8],
                        DType::I64 => small.to_le_bytes().to_vec(),
                        DType::I32 => (small as i32).to_le_bytes().to_vec(),
                        DType::I16 => (small as i16).to_le_bytes().to_vec(),
                        DType::I8 => vec![small as i8 as u8],
                        DType::U8 => vec![(r % 7) as u8],
                        DType::U16 => ((r % 7) as u16).to_le_bytes().to_vec(),
                        DType::U32 => ((r % 7) as u32).to_le_bytes().to_vec(),
                        DType::U64 => (r % 7).to_le_bytes().to_vec(),
                        DType::F8E4M3Fnuz | DType::F8E5M2Fnuz | DType::F8E8M0 => vec![r as u8],
                        DType::F4E2M1 => vec![(r % 16) as u8],
                        DType::Bool => vec![(r % 2) as u8],
                    }
                })
                .collect();
            Tensor::from_bytes(dt, shape.clone(), bytes).expect("consistent by construction")
        })
    })
}

/// Small integers, now and then an extreme one that no valid output could fit (extremes that
/// give valid but huge outputs, say 2^32, would only test the machine's memory).
fn int() -> impl Strategy<Value = i64> {
    prop_oneof![12 => -4i64..5, 1 => prop::sample::select(vec![i64::MAX, i64::MIN, 1 << 40, -(1 << 40)])]
}

fn ints(len: std::ops::Range<usize>) -> impl Strategy<Value = Vec<i64>> {
    prop::collection::vec(int(), len)
}

/// A few elementwise programs of the fused ops.
fn expr() -> impl Strategy<Value = EwExpr> {
    prop::sample::select(vec![
        "",
        "relu[a0]",
        "add[a0,a1];gelu{approximate=none}[t0]",
        "where[a0,a1,a2];mul[t0,a3]",
    ])
    .prop_map(|text| EwExpr::parse(text).expect("a valid program"))
}

fn auto_pad() -> impl Strategy<Value = AutoPad> {
    prop::sample::select(vec![
        AutoPad::NotSet,
        AutoPad::SameUpper,
        AutoPad::SameLower,
        AutoPad::Valid,
    ])
}

/// Every op of the table, with arbitrary small attributes.
fn op() -> impl Strategy<Value = Op> {
    let simple = prop::sample::select(vec![
        Op::Identity,
        Op::Neg,
        Op::Abs,
        Op::Sqrt,
        Op::Reciprocal,
        Op::Exp,
        Op::Log,
        Op::Erf,
        Op::Tanh,
        Op::Sigmoid,
        Op::Relu,
        Op::Floor,
        Op::Ceil,
        Op::Round,
        Op::Sin,
        Op::Cos,
        Op::Not,
        Op::IsNaN,
        Op::Gelu {
            approximate: GeluApprox::None,
        },
        Op::Gelu {
            approximate: GeluApprox::Tanh,
        },
        Op::LeakyRelu { alpha: 0.1 },
        Op::IsInf {
            detect_negative: true,
            detect_positive: false,
        },
        Op::Add,
        Op::Sub,
        Op::Mul,
        Op::Div,
        Op::Pow,
        Op::Max,
        Op::Min,
        Op::Mod { fmod: false },
        Op::Mod { fmod: true },
        Op::Equal,
        Op::Less,
        Op::LessOrEqual,
        Op::Greater,
        Op::GreaterOrEqual,
        Op::And,
        Op::Or,
        Op::Xor,
        Op::Where,
        Op::Clip,
        Op::MatMul,
        Op::GlobalAveragePool,
        Op::GlobalMaxPool,
        Op::Slice,
        Op::Expand,
        Op::Range,
        Op::Tile,
        Op::Amax,
        Op::AmaxHistoryUpdate,
        Op::Input { name: "x".into() },
        Op::Pad {
            mode: PadMode::Constant,
        },
        Op::Pad {
            mode: PadMode::Reflect,
        },
        Op::Pad {
            mode: PadMode::Edge,
        },
        Op::Pad {
            mode: PadMode::Wrap,
        },
    ]);
    let with_attrs = prop_oneof![
        (dtype(), any::<bool>()).prop_map(|(to, saturate)| Op::Cast { to, saturate }),
        (any::<bool>(), any::<bool>(), -2.0f32..2.0).prop_map(|(trans_a, trans_b, alpha)| {
            Op::Gemm {
                alpha,
                beta: 1.0,
                trans_a,
                trans_b,
            }
        }),
        (
            ints(0..3),
            ints(0..3),
            ints(0..5),
            ints(0..3),
            -1i64..3,
            auto_pad()
        )
            .prop_map(
                |(kernel_shape, strides, pads, dilations, group, auto_pad)| {
                    Op::Conv {
                        kernel_shape,
                        strides,
                        pads,
                        dilations,
                        group,
                        auto_pad,
                    }
                }
            ),
        (
            ints(0..3),
            ints(0..3),
            ints(0..5),
            ints(0..3),
            any::<bool>(),
            auto_pad()
        )
            .prop_map(
                |(kernel_shape, strides, pads, dilations, ceil_mode, auto_pad)| {
                    Op::MaxPool {
                        kernel_shape,
                        strides,
                        pads,
                        dilations,
                        ceil_mode,
                        auto_pad,
                    }
                }
            ),
        (
            ints(0..3),
            ints(0..3),
            ints(0..5),
            any::<bool>(),
            any::<bool>(),
            auto_pad()
        )
            .prop_map(
                |(kernel_shape, strides, pads, ceil_mode, count_include_pad, auto_pad)| {
                    Op::AveragePool {
                        kernel_shape,
                        strides,
                        pads,
                        dilations: vec![],
                        ceil_mode,
                        count_include_pad,
                        auto_pad,
                    }
                }
            ),
        (-4i64..4).prop_map(|axis| Op::Softmax { axis }),
        (-4i64..4).prop_map(|axis| Op::LogSoftmax { axis }),
        (-4i64..4).prop_map(|axis| Op::LayerNormalization {
            axis,
            epsilon: 1e-5
        }),
        Just(Op::BatchNormalization { epsilon: 1e-5 }),
        (prop::option::of(ints(0..3)), any::<bool>())
            .prop_map(|(axes, keepdims)| Op::ReduceSum { axes, keepdims }),
        (prop::option::of(ints(0..3)), any::<bool>())
            .prop_map(|(axes, keepdims)| Op::ReduceMean { axes, keepdims }),
        (prop::option::of(ints(0..3)), any::<bool>())
            .prop_map(|(axes, keepdims)| Op::ReduceMax { axes, keepdims }),
        (prop::option::of(ints(0..3)), any::<bool>())
            .prop_map(|(axes, keepdims)| Op::ReduceProd { axes, keepdims }),
        (-5i64..5, prop::option::of(-5i64..5)).prop_map(|(start, end)| Op::Shape { start, end }),
        any::<bool>().prop_map(|allowzero| Op::Reshape { allowzero }),
        ints(0..5).prop_map(|perm| Op::Transpose { perm }),
        ints(0..3).prop_map(|axes| Op::Unsqueeze { axes }),
        prop::option::of(ints(0..3)).prop_map(|axes| Op::Squeeze { axes }),
        (-5i64..5).prop_map(|axis| Op::Flatten { axis }),
        (-4i64..4).prop_map(|axis| Op::Concat { axis }),
        (-4i64..4, ints(0..4)).prop_map(|(axis, split)| Op::Split { axis, split }),
        (-4i64..4).prop_map(|axis| Op::Gather { axis }),
        tensor().prop_map(|value| Op::ConstantOfShape { value }),
        (-3i64..3, any::<bool>(), dtype()).prop_map(|(axis, saturate, to)| Op::QuantizeLinear {
            axis,
            saturate,
            to,
            block_size: 0
        }),
        (-3i64..3).prop_map(|axis| Op::DequantizeLinear {
            axis,
            block_size: 0
        }),
        (
            dtype(),
            -2.0f32..2.0,
            prop::sample::select(vec![
                AmaxSource::HistoryMax,
                AmaxSource::HistoryMostRecent,
                AmaxSource::Current
            ]),
            any::<bool>()
        )
            .prop_map(|(fmt, margin, source, power_2)| Op::ComputeScale {
                fmt,
                margin,
                source,
                epsilon: 0.0,
                power_2
            }),
        (dtype(), any::<bool>()).prop_map(|(to, saturate)| Op::Quantize { to, saturate }),
        dtype().prop_map(|to| Op::Dequantize { to }),
        (dtype(), any::<bool>()).prop_map(|(out, fast_accum)| Op::ScaledMatMul { out, fast_accum }),
        tensor().prop_map(|value| Op::Constant { value }),
        (dtype(), any::<bool>()).prop_map(|(to, saturate)| Op::QuantizeAmax { to, saturate }),
        (ints(0..4), any::<bool>()).prop_map(|(perm, saturate)| Op::CastTranspose {
            perm,
            to: DType::F8E4M3,
            saturate
        }),
        (-3i64..3, dtype()).prop_map(|(axis, to)| Op::LayerNormQuantize {
            axis,
            epsilon: 1e-5,
            to,
            saturate: true
        }),
        (expr(), dtype()).prop_map(|(expr, to)| Op::ElementwiseQuantize {
            expr,
            to,
            saturate: false
        }),
        (expr(), prop::option::of(dtype()), any::<bool>()).prop_map(|(expr, to, fast_accum)| {
            Op::ScaledMatMulEpilogue {
                out: DType::F32,
                fast_accum,
                expr,
                to,
                saturate: true,
            }
        }),
        prop::sample::select(vec![AmaxSource::HistoryMax, AmaxSource::Current]).prop_map(
            |source| Op::BatchedScaleUpdate {
                fmt: DType::F8E5M2,
                margin: 0.0,
                source,
                epsilon: 0.0,
                power_2: true
            }
        ),
    ];
    prop_oneof![simple, with_attrs]
}

/// Inputs three ways: anything; all of one dtype (what most ops want); a data tensor followed
/// by small i64 vectors (what the shape ops want).
fn inputs() -> impl Strategy<Value = Vec<Tensor>> {
    prop_oneof![
        prop::collection::vec(tensor(), 0..6),
        dtype().prop_flat_map(|d| prop::collection::vec(tensor_of(d), 1..6)),
        (tensor(), prop::collection::vec(shape_input(), 0..5)).prop_map(|(x, mut rest)| {
            rest.insert(0, x);
            rest
        }),
    ]
}

fn check(op: &Op, inputs: &[Tensor]) -> Result<(), TestCaseError> {
    let refs: Vec<&Tensor> = inputs.iter().collect();
    // Ok or Err are both fine; an Err must name the op.
    if let Err(e) = eval_op(op, &refs) {
        prop_assert_eq!(e.op, op.name());
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 20_000, ..ProptestConfig::default() })]

    #[test]
    fn eval_op_never_panics(op in op(), inputs in inputs()) {
        check(&op, &inputs)?;
    }

    /// Window ops get well-formed NCHW-like float inputs, so that they reach their kernels.
    #[test]
    fn window_ops_never_panic(
        op in op(),
        x in (1u64..3, 1u64..4, prop::collection::vec(1u64..6, 1..=3)).prop_flat_map(|(n, c, sp)| {
            let mut shape = vec![n, c];
            shape.extend(sp);
            let len = shape.iter().product::<u64>() as usize;
            prop::collection::vec(-4.0f32..4.0, len).prop_map(move |v| Tensor::from_f32(shape.clone(), &v))
        }),
        w in prop::collection::vec(1u64..4, 3..=5).prop_flat_map(|shape| {
            let len = shape.iter().product::<u64>() as usize;
            prop::collection::vec(-1.0f32..1.0, len).prop_map(move |v| Tensor::from_f32(shape.clone(), &v))
        }),
    ) {
        check(&op, std::slice::from_ref(&x))?;
        check(&op, &[x, w])?;
    }
}
