//! Float elementwise ops: precision rules (f16/bf16 round once), NaN handling and the math
//! functions' accuracy. Expected values are worked out in the comments or computed in f64.

mod common;

use common::*;
use fp8c_eval::ErrorKind;
use fp8c_ir::{DType, GeluApprox, Op};

/// Distance in f32 ulps between two finite floats of the same sign.
fn ulps(a: f32, b: f32) -> u32 {
    a.to_bits().abs_diff(b.to_bits())
}

#[test]
fn erf_is_within_one_ulp_of_the_f64_value() {
    // 20 001 points over [-5, 5]: erff (musl) against erf in f64 rounded to f32.
    let xs: Vec<f32> = (0..=20_000).map(|i| -5.0 + i as f32 * 5e-4).collect();
    let y = vf32(&eval1(Op::Erf, &[&f32s(&[xs.len() as u64], &xs)]));
    for (x, got) in xs.iter().zip(&y) {
        let want = libm::erf(f64::from(*x)) as f32;
        assert!(ulps(*got, want) <= 1, "erf({x}) = {got}, f64 says {want}");
    }
}

#[test]
fn gelu_matches_its_definition() {
    let xs = [-3.0f32, -1.0, -0.5, 0.0, 0.5, 1.0, 3.0];
    let x = f32s(&[7], &xs);
    // none: 0.5·x·(1 + erf(x/√2)) in f64: e.g. gelu(1) = 0.5·(1 + erf(0.70710678)) = 0.8413447.
    let y = vf32(&eval1(
        Op::Gelu {
            approximate: GeluApprox::None,
        },
        &[&x],
    ));
    let want: Vec<f32> = xs
        .iter()
        .map(|&v| {
            let v = f64::from(v);
            (0.5 * v * (1.0 + libm::erf(v / 2f64.sqrt()))) as f32
        })
        .collect();
    assert_close(&y, &want, 2e-7);
    assert!((y[5] - 0.841_344_7).abs() < 1e-6);
    // tanh: 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))); gelu_tanh(1) = 0.8411920.
    let y = vf32(&eval1(
        Op::Gelu {
            approximate: GeluApprox::Tanh,
        },
        &[&x],
    ));
    let want: Vec<f32> = xs
        .iter()
        .map(|&v| {
            let v = f64::from(v);
            (0.5 * v
                * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (v + 0.044715 * v * v * v)).tanh()))
                as f32
        })
        .collect();
    assert_close(&y, &want, 2e-7);
    assert!((y[5] - 0.841_192).abs() < 1e-6);
}

/// The f32 tanh GELU (mapped through the vector loop) is the elementwise table's scalar
/// formula, element for element, on a tensor large enough to be split over threads, with
/// saturating, tiny, signed-zero and non-finite inputs.
#[test]
fn tanh_gelu_on_f32_is_the_scalar_formula_bit_for_bit() {
    let mut xs: Vec<f32> = (0..70_000)
        .map(|i| ((i * 7919 % 70_000) as f32 / 70_000.0 - 0.5) * 24.0)
        .collect();
    xs.extend([0.0, -0.0, 1e-40, -1e-30, 1e30, -1e30, f32::INFINITY]);
    xs.extend([f32::NEG_INFINITY, f32::NAN, f32::MAX, f32::MIN]);
    let x = f32s(&[xs.len() as u64], &xs);
    let y = vf32(&eval1(
        Op::Gelu {
            approximate: GeluApprox::Tanh,
        },
        &[&x],
    ));
    for (&v, &got) in xs.iter().zip(&y) {
        let want = fp8c_ir::elementwise::gelu_tanh(v);
        assert!(
            got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
            "gelu_tanh({v:e}) = {got:e}, the formula gives {want:e}"
        );
    }
}

#[test]
fn sigmoid_does_not_overflow_and_keeps_tiny_values() {
    let y = vf32(&eval1(
        Op::Sigmoid,
        &[&f32s(&[4], &[-100.0, 0.0, 100.0, -1000.0])],
    ));
    // sigmoid(−100) = e^−100 / (1 + e^−100) ≈ 3.72e−44 (a subnormal f32), not 0.
    assert!((y[0] - 3.72e-44).abs() < 1e-45, "{}", y[0]);
    assert_eq!(&y[1..], &[0.5, 1.0, 0.0]);
}

#[test]
fn unary_math_on_specials() {
    let x = f32s(&[5], &[-1.0, 0.0, -0.0, f32::INFINITY, f32::NAN]);
    let sqrt = vf32(&eval1(Op::Sqrt, &[&x]));
    assert!(sqrt[0].is_nan() && sqrt[4].is_nan());
    assert_eq!(sqrt[3], f32::INFINITY);
    assert_eq!(
        vf32(&eval1(Op::Reciprocal, &[&x]))[1..4],
        [f32::INFINITY, f32::NEG_INFINITY, 0.0]
    );
    assert_eq!(vf32(&eval1(Op::Log, &[&x]))[1], f32::NEG_INFINITY);
    // Relu keeps NaN; floor/ceil of halves.
    assert!(vf32(&eval1(Op::Relu, &[&x]))[4].is_nan());
    let h = f32s(&[4], &[-1.5, -0.5, 0.5, 1.5]);
    assert_eq!(vf32(&eval1(Op::Floor, &[&h])), [-2.0, -1.0, 0.0, 1.0]);
    assert_eq!(vf32(&eval1(Op::Ceil, &[&h])), [-1.0, -0.0, 1.0, 2.0]);
    assert_eq!(
        vf32(&eval1(Op::LeakyRelu { alpha: 0.5 }, &[&h])),
        [-0.75, -0.25, 0.5, 1.5]
    );
    assert_eq!(fails(Op::Sqrt, &[&list(&[4])]), ErrorKind::DType);
    assert_eq!(
        fails(Op::Neg, &[&typed(DType::U8, &[1], &[1.0])]),
        ErrorKind::DType
    );
}

#[test]
fn is_nan_and_is_inf_flags() {
    let x = f32s(&[4], &[f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 1.0]);
    assert_eq!(vbool(&eval1(Op::IsNaN, &[&x])), [true, false, false, false]);
    let inf = |n, p| {
        vbool(&eval1(
            Op::IsInf {
                detect_negative: n,
                detect_positive: p,
            },
            &[&x],
        ))
    };
    assert_eq!(inf(true, true), [false, true, true, false]);
    assert_eq!(inf(false, true), [false, true, false, false]);
    assert_eq!(inf(true, false), [false, false, true, false]);
    // FP8 decodes: E5M2 0x7C is +inf, 0x7E NaN.
    let q = fp8(DType::F8E5M2, &[2], &[0x7C, 0x7E]);
    assert_eq!(vbool(&eval1(Op::IsNaN, &[&q])), [false, true]);
}

#[test]
fn max_min_and_clip_propagate_nan() {
    let a = f32s(&[3], &[1.0, f32::NAN, 3.0]);
    let b = f32s(&[3], &[f32::NAN, 2.0, -1.0]);
    let mx = vf32(&eval1(Op::Max, &[&a, &b]));
    assert!(mx[0].is_nan() && mx[1].is_nan());
    assert_eq!(mx[2], 3.0);
    let mn = vf32(&eval1(Op::Min, &[&a, &b]));
    assert!(mn[0].is_nan() && mn[1].is_nan());
    assert_eq!(mn[2], -1.0);
    // Variadic max of three: elementwise over broadcast inputs.
    let c = f32s(&[1], &[2.5]);
    assert_eq!(
        vf32(&eval1(
            Op::Max,
            &[&f32s(&[2], &[1.0, 4.0]), &f32s(&[2], &[0.0, 5.0]), &c]
        )),
        [2.5, 5.0]
    );
    let x = f32s(&[4], &[-2.0, 0.5, 2.0, f32::NAN]);
    let y = vf32(&eval1(Op::Clip, &[&x, &scalar_f32(-1.0), &scalar_f32(1.0)]));
    assert_eq!(y[..3], [-1.0, 0.5, 1.0]);
    assert!(y[3].is_nan());
    // min > max: everything becomes max (ONNX).
    assert_eq!(
        vf32(&eval1(Op::Clip, &[&x, &scalar_f32(2.0), &scalar_f32(1.0)]))[..3],
        [1.0, 1.0, 1.0]
    );
    let i = list(&[-5, 0, 5]);
    let lo = fp8c_ir::Tensor::scalar_i64(-1);
    let hi = fp8c_ir::Tensor::scalar_i64(3);
    assert_eq!(vi64(&eval1(Op::Clip, &[&i, &lo, &hi])), [-1, 0, 3]);
    assert_eq!(fails(Op::Clip, &[&x, &lo, &hi]), ErrorKind::DType);
}

#[test]
fn pow_follows_the_base_type() {
    // i64: 2^10 = 1024, (−3)^3 = −27, 5^0 = 1, 0^2 = 0, 2^−1 truncates to 0, (−1)^−3 = −1.
    let b = list(&[2, -3, 5, 0, 2, -1]);
    let e = list(&[10, 3, 0, 2, -1, -3]);
    assert_eq!(vi64(&eval1(Op::Pow, &[&b, &e])), [1024, -27, 1, 0, 0, -1]);
    // i32 base, f32 exponent: computed in f64 and truncated: 2^0.5 = 1.41 → 1; 3^2 = 9.
    let y = eval1(Op::Pow, &[&i32s(&[2], &[2, 3]), &f32s(&[2], &[0.5, 2.0])]);
    assert_eq!((y.dtype(), vi64(&y)), (DType::I32, vec![1, 9]));
    // f32 base, i64 exponent.
    assert_eq!(
        vf32(&eval1(
            Op::Pow,
            &[&f32s(&[2], &[1.5, -2.0]), &list(&[2, 3])]
        )),
        [2.25, -8.0]
    );
    // Negative base with a fractional exponent is NaN.
    assert!(
        vf32(&eval1(
            Op::Pow,
            &[&f32s(&[1], &[-2.0]), &f32s(&[1], &[0.5])]
        ))[0]
            .is_nan()
    );
}

#[test]
fn a_square_is_correctly_rounded() {
    // pow(x, 2) against the exact square (an f64 product of two f32 is exact) rounded once;
    // x = 1 + 2^-12 squares to 1 + 2^-11 + 2^-24, a tie between two f32s that goes to even.
    let mut xs: Vec<f32> = (0..4000).map(|i| 0.37 + i as f32 * 1.37e-3).collect();
    xs.extend([
        1.0 + 2f32.powi(-12),
        -(1.0 + 3.0 * 2f32.powi(-12)),
        0.0,
        -0.0,
        3e-23,
    ]);
    let n = xs.len() as u64;
    let y = vf32(&eval1(Op::Pow, &[&f32s(&[n], &xs), &f32s(&[], &[2.0])]));
    for (x, got) in xs.iter().zip(&y) {
        let want = (f64::from(*x) * f64::from(*x)) as f32;
        assert_eq!(got.to_bits(), want.to_bits(), "pow({x}, 2)");
    }
}

#[test]
fn float_mod_is_c_fmod_and_needs_fmod_1() {
    // fmod(5.5, 2) = 1.5; fmod(−5.5, 2) = −1.5 (sign of the dividend); fmod(7, −3) = 1.
    let a = f32s(&[3], &[5.5, -5.5, 7.0]);
    let b = f32s(&[3], &[2.0, 2.0, -3.0]);
    assert_eq!(
        vf32(&eval1(Op::Mod { fmod: true }, &[&a, &b])),
        [1.5, -1.5, 1.0]
    );
    assert_eq!(fails(Op::Mod { fmod: false }, &[&a, &b]), ErrorKind::DType);
}

#[test]
fn half_types_compute_in_f32_and_round_once() {
    // bf16 has 8 significant bits. 1 + 2^-7 (the next bf16 above 1) times itself is
    // 1 + 2^-6 + 2^-14: in f32 that is exact and rounds once to 1 + 2^-6 (2^-14 is far below
    // half an ulp, 2^-8).
    let a = typed(DType::BF16, &[1], &[1.0 + 2f64.powi(-7)]);
    let y = eval1(Op::Mul, &[&a, &a]);
    assert_eq!(
        (y.dtype(), vf64(&y)),
        (DType::BF16, vec![1.0 + 2f64.powi(-6)])
    );
    // f16: 2049 is not representable (ulp 2 above 2048); 2048 + 1 is a tie → 2048 (even);
    // 2048 + 3 = 2051 is a tie between 2050 and 2052 → 2052 (even mantissa).
    let h = typed(DType::F16, &[2], &[2048.0, 2048.0]);
    let d = typed(DType::F16, &[2], &[1.0, 3.0]);
    assert_eq!(vf64(&eval1(Op::Add, &[&h, &d])), [2048.0, 2052.0]);
    // exp of an f16: e^1 = 2.71828… → nearest f16 is 2.71875.
    let e = eval1(Op::Exp, &[&typed(DType::F16, &[1], &[1.0])]);
    assert_eq!((e.dtype(), vf64(&e)), (DType::F16, vec![2.71875]));
    // f64 computes in f64: 0.1 + 0.2 = 0.30000000000000004.
    let s = eval1(
        Op::Add,
        &[
            &typed(DType::F64, &[1], &[0.1]),
            &typed(DType::F64, &[1], &[0.2]),
        ],
    );
    assert_eq!(vf64(&s), [0.1 + 0.2]);
}

#[test]
fn dtype_mismatches_are_errors() {
    let f = f32s(&[1], &[1.0]);
    let i = list(&[1]);
    assert_eq!(fails(Op::Add, &[&f, &i]), ErrorKind::DType);
    assert_eq!(
        fails(Op::Where, &[&bools(&[1], &[true]), &f, &i]),
        ErrorKind::DType
    );
    assert_eq!(fails(Op::Where, &[&f, &f, &f]), ErrorKind::DType);
    assert_eq!(
        fails(
            Op::Add,
            &[&f32s(&[2], &[1.0, 2.0]), &f32s(&[3], &[1.0, 2.0, 3.0])]
        ),
        ErrorKind::Shape
    );
}
