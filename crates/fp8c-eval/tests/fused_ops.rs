//! The fusion pass's ops give bit for bit what the unfused ops they replace give.

mod common;

use common::*;
use fp8c_eval::{ErrorKind, eval_op};
use fp8c_ir::{AmaxSource, DType, EwExpr, Op, Tensor};

fn run(op: &Op, inputs: &[&Tensor]) -> Vec<Tensor> {
    eval_op(op, inputs).unwrap_or_else(|e| panic!("{e}"))
}

/// What the unfused graph gives for a quantizing fused op's outputs: `[y, quantize(y, s),
/// amax(y)]`.
fn unfused_quantized(y: Tensor, s: &Tensor, to: DType, saturate: bool) -> Vec<Tensor> {
    let q = eval1(Op::Quantize { to, saturate }, &[&y, s]);
    let a = eval1(Op::Amax, &[&y]);
    vec![y, q, a]
}

fn seq(n: usize, scale: f32) -> Vec<f32> {
    (0..n)
        .map(|i| ((i * 37 % 23) as f32 - 11.0) * scale)
        .collect()
}

#[test]
fn quantize_amax_and_cast_transpose() {
    let x = f32s(&[3, 4], &seq(12, 7.5));
    let s = scalar_f32(2.0);
    let q = eval1(
        Op::Quantize {
            to: DType::F8E4M3,
            saturate: true,
        },
        &[&x, &s],
    );
    let a = eval1(Op::Amax, &[&x]);
    let fused = run(
        &Op::QuantizeAmax {
            to: DType::F8E4M3,
            saturate: true,
        },
        &[&x, &s],
    );
    assert_eq!(fused, vec![q.clone(), a.clone()]);
    let t = eval1(Op::Transpose { perm: vec![1, 0] }, &[&q]);
    let fused = run(
        &Op::CastTranspose {
            perm: vec![1, 0],
            to: DType::F8E4M3,
            saturate: true,
        },
        &[&x, &s],
    );
    assert_eq!(fused, vec![q, t, a]);
}

#[test]
fn layer_norm_quantize() {
    let x = typed(
        DType::BF16,
        &[2, 4],
        &seq(8, 0.3)
            .iter()
            .map(|&v| f64::from(v))
            .collect::<Vec<_>>(),
    );
    let g = typed(DType::BF16, &[4], &[1.0, 0.5, 2.0, -1.0]);
    let b = typed(DType::BF16, &[4], &[0.0, 0.25, -0.5, 1.0]);
    let s = scalar_f32(16.0);
    let y = eval1(
        Op::LayerNormalization {
            axis: -1,
            epsilon: 1e-5,
        },
        &[&x, &g, &b],
    );
    let q = eval1(
        Op::Quantize {
            to: DType::F8E4M3,
            saturate: true,
        },
        &[&y, &s],
    );
    let a = eval1(Op::Amax, &[&y]);
    let op = Op::LayerNormQuantize {
        axis: -1,
        epsilon: 1e-5,
        to: DType::F8E4M3,
        saturate: true,
    };
    assert_eq!(run(&op, &[&x, &s, &g, &b]), vec![y, q, a]);
    assert_eq!(fails(op, &[&x, &s]), ErrorKind::Arity);
}

#[test]
fn elementwise_quantize_rounds_each_step_like_the_unfused_graph() {
    // (a0 + a1) · a2, then tanh-gelu, in f16: each step rounds to f16 as the unfused nodes do.
    let expr = EwExpr::parse("add[a0,a1];mul[t0,a2];gelu{approximate=tanh}[t1]").unwrap();
    let f16 = |v: &[f32]| {
        typed(
            DType::F16,
            &[v.len() as u64],
            &v.iter().map(|&x| f64::from(x)).collect::<Vec<_>>(),
        )
    };
    let (a0, a1, a2) = (f16(&seq(6, 0.37)), f16(&seq(6, -0.11)), f16(&[1.5; 6]));
    let t0 = eval1(Op::Add, &[&a0, &a1]);
    let t1 = eval1(Op::Mul, &[&t0, &a2]);
    let y = eval1(
        Op::Gelu {
            approximate: fp8c_ir::GeluApprox::Tanh,
        },
        &[&t1],
    );
    let s = scalar_f32(8.0);
    let want = unfused_quantized(y, &s, DType::F8E5M2, false);
    let op = Op::ElementwiseQuantize {
        expr,
        to: DType::F8E5M2,
        saturate: false,
    };
    assert_eq!(run(&op, &[&a0, &a1, &a2, &s]), want);
    assert_eq!(fails(op, &[&a0, &s]), ErrorKind::Arity);
}

#[test]
fn scaled_matmul_epilogue_with_and_without_output_quantization() {
    let e4 = |v: f32| fp8c_core::encode_f32(fp8c_core::Fp8Format::E4M3, v, true);
    let qa = fp8(
        DType::F8E4M3,
        &[2, 3],
        &seq(6, 0.5).iter().map(|&v| e4(v)).collect::<Vec<_>>(),
    );
    let qb = fp8(
        DType::F8E4M3,
        &[3, 2],
        &seq(6, 0.25).iter().map(|&v| e4(v)).collect::<Vec<_>>(),
    );
    let (sa, sb) = (scalar_f32(0.5), scalar_f32(3.0));
    let bias = f32s(&[2], &[0.25, -1.0]);
    // Bias add then relu.
    let expr = EwExpr::parse("add[a0,a1];relu[t0]").unwrap();
    let acc = eval1(
        Op::ScaledMatMul {
            out: DType::F32,
            fast_accum: false,
        },
        &[&qa, &qb, &sa, &sb],
    );
    let d = eval1(Op::Relu, &[&eval1(Op::Add, &[&acc, &bias])]);
    let plain = Op::ScaledMatMulEpilogue {
        out: DType::F32,
        fast_accum: false,
        expr: expr.clone(),
        to: None,
        saturate: true,
    };
    assert_eq!(run(&plain, &[&qa, &qb, &sa, &sb, &bias]), vec![d.clone()]);
    let ds = scalar_f32(4.0);
    let q = eval1(
        Op::Quantize {
            to: DType::F8E4M3,
            saturate: true,
        },
        &[&d, &ds],
    );
    let a = eval1(Op::Amax, &[&d]);
    let with_d = Op::ScaledMatMulEpilogue {
        out: DType::F32,
        fast_accum: false,
        expr,
        to: Some(DType::F8E4M3),
        saturate: true,
    };
    assert_eq!(
        run(&with_d, &[&qa, &qb, &sa, &sb, &bias, &ds]),
        vec![d, q, a]
    );
    assert_eq!(
        fails(with_d, &[&qa, &qb, &sa, &sb, &bias]),
        ErrorKind::Arity
    );
}

#[test]
fn batched_scale_update_is_history_update_then_compute_scale_per_tensor() {
    let (fmt, margin, source, epsilon, power_2) =
        (DType::F8E4M3, 0.0, AmaxSource::HistoryMax, 0.0, false);
    let h1 = f32s(&[3], &[0.0, 2.0, 8.0]);
    let h2 = f32s(&[2], &[0.0, 0.5]);
    let (a1, a2) = (scalar_f32(4.0), scalar_f32(1.0));
    let (s1, s2) = (scalar_f32(1.0), scalar_f32(2.0));
    let op = Op::BatchedScaleUpdate {
        fmt,
        margin,
        source,
        epsilon,
        power_2,
    };
    let got = run(&op, &[&h1, &a1, &s1, &h2, &a2, &s2]);
    let cs = Op::ComputeScale {
        fmt,
        margin,
        source,
        epsilon,
        power_2,
    };
    let mut want = Vec::new();
    for (h, a, s) in [(&h1, &a1, &s1), (&h2, &a2, &s2)] {
        let hist = run(&Op::AmaxHistoryUpdate, &[h, a]);
        want.push(hist[1].clone());
        want.extend(run(&cs, &[&hist[0], s]));
    }
    assert_eq!(got, want);
    // Tensor 0: recorded [4, 2, 8] → max 8 → 448/8 = 56; next [0, 8, 4].
    assert_eq!(
        (vf32(&got[0]), vf32(&got[1])),
        (vec![0.0, 8.0, 4.0], vec![56.0])
    );
    let current = Op::BatchedScaleUpdate {
        fmt,
        margin,
        source: AmaxSource::Current,
        epsilon,
        power_2,
    };
    assert_eq!(fails(current, &[&h1, &a1, &s1]), ErrorKind::Attribute);
    assert_eq!(fails(op, &[&h1, &a1]), ErrorKind::Arity);
}

#[test]
fn large_elementwise_programs_broadcast_like_the_unfused_graph() {
    // 300 × 130 outputs (every parallel path of the ops), inputs that broadcast along rows and
    // columns, a scalar, and a leading size-1 axis.
    let (r, c) = (300u64, 130u64);
    let n = (r * c) as usize;
    let x = f32s(&[1, r, c], &seq(n, 0.031));
    let col = f32s(&[r, 1], &seq(r as usize, -0.07));
    let row = f32s(&[c], &seq(c as usize, 0.013));
    let k = scalar_f32(1.5);
    let expr = EwExpr::parse("mul[a0,a1];sigmoid[t0];sub[t1,a2];mul[t2,a3];erf[t3]").unwrap();
    let t0 = eval1(Op::Mul, &[&x, &col]);
    let t1 = eval1(Op::Sigmoid, &[&t0]);
    let t2 = eval1(Op::Sub, &[&t1, &row]);
    let t3 = eval1(Op::Mul, &[&t2, &k]);
    let y = eval1(Op::Erf, &[&t3]);
    assert_eq!(y.shape(), &[1, r, c]);
    let s = scalar_f32(64.0);
    let want = unfused_quantized(y, &s, DType::F8E4M3, true);
    let op = Op::ElementwiseQuantize {
        expr,
        to: DType::F8E4M3,
        saturate: true,
    };
    assert_eq!(run(&op, &[&x, &col, &row, &k, &s]), want);
}
