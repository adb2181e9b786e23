//! FP8 casts, ONNX Q/DQ and fp8c's FP8 ops (amax, compute_scale, amax_history_update,
//! quantize, dequantize, scaled_matmul). FP8 codes are worked out by hand: E4M3 has bias 7
//! (1.0 = 0x38, 2.0 = 0x40, 0.5 = 0x30, 448 = 0x7E, NaN = 0x7F), E5M2 bias 15 (1.0 = 0x3C,
//! 57344 = 0x7B, +inf = 0x7C).

mod common;

use common::*;
use fp8c_core::Fp8Format;
use fp8c_eval::{ErrorKind, eval_op};
use fp8c_ir::{AmaxSource, DType, Op, Tensor};

fn quantize(to: DType, saturate: bool) -> Op {
    Op::Quantize { to, saturate }
}

#[test]
fn quantize_multiplies_then_rounds_once() {
    let x = f32s(&[6], &[0.5, 1.0, 0.53125, 0.59375, 500.0, f32::NAN]);
    let q = eval1(quantize(DType::F8E4M3, true), &[&x, &scalar_f32(2.0)]);
    // 0.5·2 = 1 → 0x38; 2 → 0x40; 1.0625 is the tie between 1 (0x38) and 1.125 (0x39) → even
    // 0x38; 1.1875 ties 1.125 (0x39) and 1.25 (0x3A) → 0x3A; 1000 saturates to 448 (0x7E);
    // NaN → 0x7F.
    assert_eq!(q.bytes(), [0x38, 0x40, 0x38, 0x3A, 0x7E, 0x7F]);
    assert_eq!(q.dtype(), DType::F8E4M3);
    // Without saturation 1000 overflows to NaN in E4M3 (no infinities) and to +inf in E5M2
    // (E5M2 1000 is in range; 1e5 is not).
    let q = eval1(quantize(DType::F8E4M3, false), &[&x, &scalar_f32(2.0)]);
    assert_eq!(q.bytes()[4], 0x7F);
    let big = f32s(&[2], &[1e5, -1e5]);
    assert_eq!(
        eval1(quantize(DType::F8E5M2, false), &[&big, &scalar_f32(1.0)]).bytes(),
        [0x7C, 0xFC]
    );
    assert_eq!(
        eval1(quantize(DType::F8E5M2, true), &[&big, &scalar_f32(1.0)]).bytes(),
        [0x7B, 0xFB]
    );
    // bf16 input widens exactly first.
    let xb = typed(DType::BF16, &[1], &[1.0]);
    assert_eq!(
        eval1(quantize(DType::F8E5M2, true), &[&xb, &scalar_f32(1.0)]).bytes(),
        [0x3C]
    );
    assert_eq!(
        fails(quantize(DType::I8, true), &[&x, &scalar_f32(1.0)]),
        ErrorKind::Attribute
    );
    assert_eq!(
        fails(
            quantize(DType::F8E4M3, true),
            &[&x, &typed(DType::F64, &[], &[1.0])]
        ),
        ErrorKind::DType
    );
}

#[test]
fn dequantize_decodes_then_scales() {
    let q = fp8(DType::F8E4M3, &[4], &[0x38, 0x40, 0xB0, 0x7F]);
    // 1·0.5, 2·0.5, −0.5·0.5, NaN.
    let y = eval1(Op::Dequantize { to: DType::F32 }, &[&q, &scalar_f32(0.5)]);
    let v = vf32(&y);
    assert_eq!(v[..3], [0.5, 1.0, -0.25]);
    assert!(v[3].is_nan());
    let y = eval1(Op::Dequantize { to: DType::BF16 }, &[&q, &scalar_f32(3.0)]);
    assert_eq!(
        (y.dtype(), vf64(&y)[..3].to_vec()),
        (DType::BF16, vec![3.0, 6.0, -1.5])
    );
    assert_eq!(
        fails(
            Op::Dequantize { to: DType::F32 },
            &[&f32s(&[1], &[1.0]), &scalar_f32(1.0)]
        ),
        ErrorKind::DType
    );
    assert_eq!(
        fails(
            Op::Dequantize { to: DType::F8E4M3 },
            &[&q, &scalar_f32(1.0)]
        ),
        ErrorKind::Attribute
    );
}

#[test]
fn amax_is_max_abs_with_nan_winning() {
    assert_eq!(
        vf32(&eval1(Op::Amax, &[&f32s(&[3], &[-3.0, 2.0, 0.5])])),
        [3.0]
    );
    assert!(vf32(&eval1(Op::Amax, &[&f32s(&[3], &[-3.0, f32::NAN, 0.5])]))[0].is_nan());
    let e = eval1(Op::Amax, &[&f32s(&[0], &[])]);
    assert_eq!((e.shape(), vf32(&e)), (&[] as &[u64], vec![0.0]));
    // FP8 input: E4M3 −448 (0xFE) and 1.0.
    assert_eq!(
        vf32(&eval1(
            Op::Amax,
            &[&fp8(DType::F8E4M3, &[2], &[0xFE, 0x38])]
        )),
        [448.0]
    );
    // A large tensor takes the parallel path; the NaN at the very end still wins.
    let mut v = vec![1.0f32; 100_000];
    v[77_777] = -9.0;
    assert_eq!(vf32(&eval1(Op::Amax, &[&f32s(&[100_000], &v)])), [9.0]);
    v[99_999] = f32::NAN;
    assert!(vf32(&eval1(Op::Amax, &[&f32s(&[100_000], &v)]))[0].is_nan());
    assert_eq!(fails(Op::Amax, &[&list(&[1])]), ErrorKind::DType);
}

fn compute_scale(source: AmaxSource, margin: f32, epsilon: f32, power_2: bool) -> Op {
    Op::ComputeScale {
        fmt: DType::F8E4M3,
        margin,
        source,
        epsilon,
        power_2,
    }
}

/// (scale, scale_inv) of a compute_scale node.
fn scales(op: Op, amax: &Tensor, prev: f32) -> (f32, f32) {
    let out = eval_op(&op, &[amax, &scalar_f32(prev)]).unwrap();
    assert_eq!(out.len(), 2);
    (vf32(&out[0])[0], vf32(&out[1])[0])
}

#[test]
fn compute_scale_follows_te() {
    let h = f32s(&[3], &[1.0, 4.0, 2.0]);
    // history_max: amax 4 → 448 / 4 = 112.
    assert_eq!(
        scales(
            compute_scale(AmaxSource::HistoryMax, 0.0, 0.0, false),
            &h,
            1.0
        ),
        (112.0, 1.0 / 112.0)
    );
    // history_most_recent reads slot 0 (amax 1) → 448; margin 1 halves it → 224.
    assert_eq!(
        scales(
            compute_scale(AmaxSource::HistoryMostRecent, 0.0, 0.0, false),
            &h,
            1.0
        )
        .0,
        448.0
    );
    assert_eq!(
        scales(
            compute_scale(AmaxSource::HistoryMostRecent, 1.0, 0.0, false),
            &h,
            1.0
        )
        .0,
        224.0
    );
    // power_2 rounds 112 down to 64.
    assert_eq!(
        scales(
            compute_scale(AmaxSource::HistoryMax, 0.0, 0.0, true),
            &h,
            1.0
        ),
        (64.0, 1.0 / 64.0)
    );
    // Current scaling: amax 0 keeps the previous scale, unless epsilon lifts it: 448 / 0.5.
    let zero = scalar_f32(0.0);
    assert_eq!(
        scales(
            compute_scale(AmaxSource::Current, 0.0, 0.0, false),
            &zero,
            8.0
        )
        .0,
        8.0
    );
    assert_eq!(
        scales(
            compute_scale(AmaxSource::Current, 0.0, 0.5, false),
            &zero,
            8.0
        )
        .0,
        896.0
    );
    // NaN and inf amaxes keep the previous scale; a tiny amax gives f32::MAX, not inf.
    for bad in [f32::NAN, f32::INFINITY] {
        assert_eq!(
            scales(
                compute_scale(AmaxSource::Current, 0.0, 0.0, false),
                &scalar_f32(bad),
                8.0
            )
            .0,
            8.0
        );
    }
    assert_eq!(
        scales(
            compute_scale(AmaxSource::Current, 0.0, 0.0, false),
            &scalar_f32(1e-40),
            8.0
        )
        .0,
        f32::MAX
    );
    // A NaN in the history propagates through history_max (keeps the previous scale).
    let hn = f32s(&[2], &[1.0, f32::NAN]);
    assert_eq!(
        scales(
            compute_scale(AmaxSource::HistoryMax, 0.0, 0.0, false),
            &hn,
            3.0
        )
        .0,
        3.0
    );
    let op = compute_scale(AmaxSource::HistoryMax, 0.0, 0.0, false);
    assert_eq!(
        fails(op.clone(), &[&f32s(&[0], &[]), &scalar_f32(1.0)]),
        ErrorKind::Shape
    );
    assert_eq!(fails(op, &[&h]), ErrorKind::Arity);
    let bad_fmt = Op::ComputeScale {
        fmt: DType::F32,
        margin: 0.0,
        source: AmaxSource::Current,
        epsilon: 0.0,
        power_2: false,
    };
    assert_eq!(fails(bad_fmt, &[&zero, &zero]), ErrorKind::Attribute);
}

#[test]
fn amax_history_update_records_then_rolls() {
    let h = f32s(&[4], &[0.0, 5.0, 6.0, 7.0]);
    let out = eval_op(&Op::AmaxHistoryUpdate, &[&h, &scalar_f32(3.0)]).unwrap();
    // recorded: slot 0 = 3 → [3,5,6,7]; next: roll left [5,6,7,3], slot 0 zeroed → [0,6,7,3].
    assert_eq!(vf32(&out[0]), [3.0, 5.0, 6.0, 7.0]);
    assert_eq!(vf32(&out[1]), [0.0, 6.0, 7.0, 3.0]);
    // Length 1: recorded [2], next [0].
    let out = eval_op(
        &Op::AmaxHistoryUpdate,
        &[&f32s(&[1], &[0.0]), &scalar_f32(2.0)],
    )
    .unwrap();
    assert_eq!((vf32(&out[0]), vf32(&out[1])), (vec![2.0], vec![0.0]));
    assert_eq!(
        fails(Op::AmaxHistoryUpdate, &[&h, &f32s(&[2], &[1.0, 2.0])]),
        ErrorKind::Shape
    );
}

#[test]
fn scaled_matmul_multiplies_by_the_product_of_scale_invs() {
    let e4 = |v: f32| fp8c_core::encode_f32(Fp8Format::E4M3, v, false);
    // [[88, 7]] · [[1], [1]] = 95, exact in f32 (88 = 1.375·64 and 7 = 1.75·4 are E4M3).
    let qa = fp8(DType::F8E4M3, &[1, 2], &[e4(88.0), e4(7.0)]);
    let qb = fp8(DType::F8E4M3, &[2, 1], &[e4(1.0), e4(1.0)]);
    let (sa, sb) = (f32::from_bits(1_081_301_428), f32::from_bits(1_058_393_974)); // ≈ 3.80235, 0.585197
    let y = vf32(&eval1(
        Op::ScaledMatMul {
            out: DType::F32,
            fast_accum: false,
        },
        &[&qa, &qb, &scalar_f32(sa), &scalar_f32(sb)],
    ))[0];
    // cuBLASLt's alpha: the scale_invs multiply first, then one multiply of the accumulator.
    // For these values the other order differs in the last bit, so the test pins the choice.
    assert_eq!(y, 95.0 * (sa * sb));
    assert_ne!(y, (95.0 * sa) * sb);
    // Mixed formats, batched, bf16 output: E5M2 [2,1,2] · E4M3 [2,1] with scale_invs 1.
    let e5 = |v: f32| fp8c_core::encode_f32(Fp8Format::E5M2, v, false);
    let qa = fp8(
        DType::F8E5M2,
        &[2, 1, 2],
        &[e5(1.0), e5(2.0), e5(-4.0), e5(0.5)],
    );
    let qb = fp8(DType::F8E4M3, &[2, 1], &[e4(3.0), e4(0.25)]);
    // [1,2]·[3,0.25] = 3.5; [−4, 0.5]·[3, 0.25] = −11.875 → bf16 (8 bits) −11.875 is exact.
    let y = eval1(
        Op::ScaledMatMul {
            out: DType::BF16,
            fast_accum: false,
        },
        &[&qa, &qb, &scalar_f32(1.0), &scalar_f32(1.0)],
    );
    assert_eq!(
        (y.dtype(), y.shape(), vf64(&y)),
        (DType::BF16, &[2u64, 1, 1][..], vec![3.5, -11.875])
    );
    assert_eq!(
        fails(
            Op::ScaledMatMul {
                out: DType::F32,
                fast_accum: false,
            },
            &[
                &qa,
                &f32s(&[2, 1], &[1.0, 1.0]),
                &scalar_f32(1.0),
                &scalar_f32(1.0)
            ]
        ),
        ErrorKind::DType
    );
}

/// The fast-accumulation model (fp8c-eval `fast_accum.rs`: blocks of 32 products aligned to
/// the largest exponent, 14 significant bits, truncation toward zero) against f32
/// accumulation, on dot products worked out by hand.
#[test]
fn scaled_matmul_fast_accumulation_drops_what_a_narrow_accumulator_drops() {
    let e4 = |v: f32| fp8c_core::encode_f32(Fp8Format::E4M3, v, false);
    let dot = |a: &[f32], fast_accum: bool| {
        let k = a.len() as u64;
        let qa = fp8(
            DType::F8E4M3,
            &[1, k],
            &a.iter().map(|&v| e4(v)).collect::<Vec<_>>(),
        );
        let qb = fp8(DType::F8E4M3, &[k, 1], &vec![e4(1.0); a.len()]);
        let one = scalar_f32(1.0);
        vf32(&eval1(
            Op::ScaledMatMul {
                out: DType::F32,
                fast_accum,
            },
            &[&qa, &qb, &one, &one],
        ))[0]
    };
    let with = |head: f32, tail: f32, n: usize| {
        let mut v = vec![head];
        v.extend(std::iter::repeat_n(tail, n));
        v
    };
    // One block: 256 = 2^8 sets the quantum to 2^(8-13) = 2^-5, so each 2^-6 truncates to 0.
    let a = with(256.0, 0.015625, 31);
    assert_eq!(dot(&a, false), 256.0 + 31.0 / 64.0);
    assert_eq!(dot(&a, true), 256.0);
    // Toward zero on negatives: -3·2^-6 / 2^-5 = -1.5 → -1, so each term keeps -2^-5.
    let a = with(-256.0, -0.046875, 31);
    assert_eq!(dot(&a, false), -256.0 - 31.0 * 0.046875);
    assert_eq!(dot(&a, true), -256.0 - 31.0 * 0.03125);
    // Across blocks: the first block sums to 512 = 2^9, whose quantum 2^-4 then swallows
    // every 2^-5 of the second block.
    let mut a = vec![16.0; 32];
    a.extend([0.03125; 32]);
    assert_eq!(dot(&a, false), 513.0);
    assert_eq!(dot(&a, true), 512.0);
    // Terms of one magnitude lose nothing, and the blocks need not be full.
    let a = vec![1.5; 70];
    assert_eq!((dot(&a, false), dot(&a, true)), (105.0, 105.0));
}

#[test]
fn cast_to_and_from_fp8_is_bit_exact() {
    let x = f32s(&[5], &[1.0, 464.0, 480.0, f32::INFINITY, -0.0]);
    // 464 is the tie between 448 (0x7E) and 480 (not finite in E4M3) → 448; 480 overflows:
    // saturate → 448, otherwise NaN; inf → 448 / NaN; −0 keeps its sign (0x80).
    let sat = eval1(
        Op::Cast {
            to: DType::F8E4M3,
            saturate: true,
        },
        &[&x],
    );
    assert_eq!(sat.bytes(), [0x38, 0x7E, 0x7E, 0x7E, 0x80]);
    let raw = eval1(
        Op::Cast {
            to: DType::F8E4M3,
            saturate: false,
        },
        &[&x],
    );
    assert_eq!(raw.bytes(), [0x38, 0x7E, 0x7F, 0x7F, 0x80]);
    // E5M2 without saturation keeps inf (0x7C).
    assert_eq!(
        eval1(
            Op::Cast {
                to: DType::F8E5M2,
                saturate: false
            },
            &[&x]
        )
        .bytes()[3],
        0x7C
    );
    // FP8 → f16 is exact; FP8 → FP8 re-rounds: E5M2 1.25 (0x3D) is exact in E4M3 (0x3A).
    let q = fp8(DType::F8E5M2, &[2], &[0x3D, 0x7B]);
    assert_eq!(
        vf64(&eval1(
            Op::Cast {
                to: DType::F16,
                saturate: true
            },
            &[&q]
        )),
        [1.25, 57344.0]
    );
    assert_eq!(
        eval1(
            Op::Cast {
                to: DType::F8E4M3,
                saturate: true
            },
            &[&q]
        )
        .bytes(),
        [0x3A, 0x7E]
    );
    // Integers go through f32: 300 → E4M3 288 (0x79: 1.125·256); ties to even.
    assert_eq!(
        eval1(
            Op::Cast {
                to: DType::F8E4M3,
                saturate: true
            },
            &[&list(&[300])]
        )
        .bytes(),
        [0x79]
    );
}

#[test]
fn quantize_linear_rounds_half_to_even_and_saturates() {
    let x = f32s(&[8], &[-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 1000.0, -1000.0]);
    let op = Op::QuantizeLinear {
        axis: 1,
        saturate: true,
        to: DType::I8,
        block_size: 0,
    };
    // x / 1 rounded half to even: −2, −2, −0, 0, 2, 2; +zp 1; ±1000 saturate to 127 / −128.
    let y = eval1(
        op.clone(),
        &[&x, &scalar_f32(1.0), &typed(DType::I8, &[], &[1.0])],
    );
    assert_eq!(
        (y.dtype(), vi64(&y)),
        (DType::I8, vec![-1, -1, 1, 1, 3, 3, 127, -128])
    );
    // Per axis: x [2, 2], axis 0 scales [1, 0.5], u8 zero points [0, 10]:
    // row 0: 3/1 = 3, 250 → 250; row 1: 3/0.5 = 6 + 10 = 16, −8/0.5 = −16 + 10 = −6 → 0.
    let x2 = f32s(&[2, 2], &[3.0, 250.0, 3.0, -8.0]);
    let op2 = Op::QuantizeLinear {
        axis: 0,
        saturate: true,
        to: DType::U8,
        block_size: 0,
    };
    let y = eval1(
        op2,
        &[
            &x2,
            &f32s(&[2], &[1.0, 0.5]),
            &typed(DType::U8, &[2], &[0.0, 10.0]),
        ],
    );
    assert_eq!(vi64(&y), [3, 250, 16, 0]);
    // FP8: x / scale then the cast; the zero point must be 0.
    let op3 = Op::QuantizeLinear {
        axis: 1,
        saturate: true,
        to: DType::F8E4M3,
        block_size: 0,
    };
    let y = eval1(
        op3.clone(),
        &[
            &f32s(&[2], &[1.0, 1e6]),
            &scalar_f32(0.5),
            &fp8(DType::F8E4M3, &[], &[0]),
        ],
    );
    assert_eq!(y.bytes(), [0x40, 0x7E]);
    assert_eq!(
        fails(
            op3,
            &[&x, &scalar_f32(1.0), &fp8(DType::F8E4M3, &[], &[0x38])]
        ),
        ErrorKind::Value
    );
    // A per-axis scale must have one entry per index of the axis (8 here), and the axis must
    // exist (x is 1-D, so axis 1 does not).
    let op0 = Op::QuantizeLinear {
        axis: 0,
        saturate: true,
        to: DType::I8,
        block_size: 0,
    };
    assert_eq!(fails(op0, &[&x, &f32s(&[3], &[1.0; 3])]), ErrorKind::Shape);
    assert_eq!(
        fails(op.clone(), &[&x, &f32s(&[8], &[1.0; 8])]),
        ErrorKind::Attribute
    );
    assert_eq!(
        fails(op, &[&x, &scalar_f32(1.0), &typed(DType::U8, &[], &[0.0])]),
        ErrorKind::DType
    );
}

#[test]
fn dequantize_linear_subtracts_the_zero_point() {
    // (x − zp)·scale: (−128 − 3)·0.5 = −65.5, (127 − 3)·0.5 = 62.
    let x = typed(DType::I8, &[2], &[-128.0, 127.0]);
    let op = Op::DequantizeLinear {
        axis: 1,
        block_size: 0,
    };
    let y = eval1(
        op.clone(),
        &[&x, &scalar_f32(0.5), &typed(DType::I8, &[], &[3.0])],
    );
    assert_eq!((y.dtype(), vf32(&y)), (DType::F32, vec![-65.5, 62.0]));
    // The output takes the scale's type: f16.
    let y = eval1(op.clone(), &[&x, &typed(DType::F16, &[], &[0.25])]);
    assert_eq!((y.dtype(), vf64(&y)), (DType::F16, vec![-32.0, 31.75]));
    // Per axis on a [2, 2] u8, axis 1: columns scaled by 1 and 2, zero points 0 and 100.
    let xu = typed(DType::U8, &[2, 2], &[0.0, 100.0, 10.0, 200.0]);
    let y = eval1(
        op.clone(),
        &[
            &xu,
            &f32s(&[2], &[1.0, 2.0]),
            &typed(DType::U8, &[2], &[0.0, 100.0]),
        ],
    );
    assert_eq!(vf32(&y), [0.0, 0.0, 10.0, 200.0]);
    // FP8: E5M2 0x3C = 1.0 → 1.0·4.
    assert_eq!(
        vf32(&eval1(
            op.clone(),
            &[&fp8(DType::F8E5M2, &[1], &[0x3C]), &scalar_f32(4.0)]
        )),
        [4.0]
    );
    assert_eq!(
        fails(op, &[&f32s(&[1], &[1.0]), &scalar_f32(1.0)]),
        ErrorKind::DType
    );
}

/// ±inf and NaN through the ONNX conversions (issue #13): `quantize_linear` and `cast` give
/// the codes of ONNX's Cast table (operator docs of Cast, opset 19+, also the rule
/// of QuantizeLinear's `saturate`):
///
/// | x    | E4M3FN saturate | E5M2 saturate | E4M3FN no saturate | E5M2 no saturate |
/// |------|-----------------|---------------|--------------------|------------------|
/// | Inf  | FLT_MAX         | FLT_MAX       | NaN                | Inf              |
/// | -Inf | -FLT_MAX        | -FLT_MAX      | -NaN               | -Inf             |
/// | NaN  | NaN             | NaN           | NaN                | NaN              |
///
/// As codes: E4M3FN max 0x7E, NaN 0x7F (S.1111.111, its only NaN); E5M2 max 0x7B, inf 0x7C,
/// NaN 0x7E (S.11111.10). The NaN codes are the ones `onnx.reference` (onnx 1.23, through
/// ml_dtypes) writes for Cast and QuantizeLinear of a positive and a negative NaN; the table
/// fixes only that a NaN stays NaN, its sign kept for saturate=0.
#[test]
fn non_finite_values_follow_the_onnx_cast_table() {
    let x = f32s(
        &[4],
        &[f32::INFINITY, f32::NEG_INFINITY, f32::NAN, -f32::NAN],
    );
    let cases = [
        (DType::F8E4M3, true, [0x7E, 0xFE, 0x7F, 0xFF]),
        (DType::F8E4M3, false, [0x7F, 0xFF, 0x7F, 0xFF]),
        (DType::F8E5M2, true, [0x7B, 0xFB, 0x7E, 0xFE]),
        (DType::F8E5M2, false, [0x7C, 0xFC, 0x7E, 0xFE]),
    ];
    for (to, saturate, want) in cases {
        let what = format!("{to} saturate={saturate}");
        let ql = Op::QuantizeLinear {
            axis: 1,
            saturate,
            to,
            block_size: 0,
        };
        let zero = fp8(to, &[], &[0x00]);
        let q = eval1(ql, &[&x, &scalar_f32(1.0), &zero]);
        assert_eq!(q.bytes(), want, "quantize_linear {what}");
        let q = eval1(Op::Cast { to, saturate }, &[&x]);
        assert_eq!(q.bytes(), want, "cast {what}");
        // bf16 and f16 sources widen exactly, so they map the same way.
        for from in [DType::BF16, DType::F16] {
            let xh = eval1(
                Op::Cast {
                    to: from,
                    saturate: false,
                },
                &[&x],
            );
            let q = eval1(Op::Cast { to, saturate }, &[&xh]);
            assert_eq!(q.bytes(), want, "cast from {from}, {what}");
        }
    }
}

/// fp8c's own scaled `quantize` keeps non-finite data non-finite whatever `saturate` says
/// (issue #13: one +inf pixel must not give finite, plausible FP8 logits): ±inf becomes NaN in
/// E4M3 (no infinities) and ±inf in E5M2, NaN stays NaN; finite values still saturate.
#[test]
fn scaled_quantize_keeps_non_finite_values_non_finite() {
    let x = f32s(
        &[5],
        &[f32::INFINITY, f32::NEG_INFINITY, f32::NAN, -f32::NAN, 1e30],
    );
    let cases = [
        (DType::F8E4M3, true, [0x7F, 0xFF, 0x7F, 0xFF, 0x7E]),
        (DType::F8E4M3, false, [0x7F, 0xFF, 0x7F, 0xFF, 0x7F]),
        (DType::F8E5M2, true, [0x7C, 0xFC, 0x7E, 0xFE, 0x7B]),
        (DType::F8E5M2, false, [0x7C, 0xFC, 0x7E, 0xFE, 0x7C]),
    ];
    for (to, saturate, want) in cases {
        for scale in [1.0, 0.25] {
            let q = eval1(quantize(to, saturate), &[&x, &scalar_f32(scale)]);
            assert_eq!(
                q.bytes(),
                want,
                "quantize {to} saturate={saturate} scale={scale}"
            );
        }
    }
}
