//! MatMul, Gemm, Conv, pools, normalisations, softmax and reductions on small hand-computed
//! cases, plus determinism across thread counts.

mod common;

use common::*;
use fp8c_eval::{ErrorKind, eval_op};
use fp8c_ir::{AutoPad, DType, Op, Tensor};

fn conv(
    kernel_shape: Vec<i64>,
    strides: Vec<i64>,
    pads: Vec<i64>,
    dilations: Vec<i64>,
    group: i64,
    auto_pad: AutoPad,
) -> Op {
    Op::Conv {
        kernel_shape,
        strides,
        pads,
        dilations,
        group,
        auto_pad,
    }
}

#[test]
fn matmul_follows_numpy_rank_rules() {
    let a = f32s(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let b = f32s(&[3, 2], &[1.0, 0.0, 0.0, 1.0, 1.0, 1.0]);
    // [[1,2,3],[4,5,6]] · [[1,0],[0,1],[1,1]] = [[1+3, 2+3], [4+6, 5+6]] = [[4,5],[10,11]].
    let y = eval1(Op::MatMul, &[&a, &b]);
    assert_eq!(
        (y.shape(), vf32(&y)),
        (&[2u64, 2][..], vec![4.0, 5.0, 10.0, 11.0])
    );
    // 1-D · 2-D: [1,1,1] · b = column sums [2, 2], shape [2].
    let v = f32s(&[3], &[1.0, 1.0, 1.0]);
    let y = eval1(Op::MatMul, &[&v, &b]);
    assert_eq!((y.shape(), vf32(&y)), (&[2u64][..], vec![2.0, 2.0]));
    // 2-D · 1-D: a · [1,1,1] = row sums [6, 15].
    assert_eq!(vf32(&eval1(Op::MatMul, &[&a, &v])), [6.0, 15.0]);
    // 1-D · 1-D is a scalar: 1+1+1 = 3.
    let y = eval1(Op::MatMul, &[&v, &v]);
    assert_eq!((y.shape(), vf32(&y)), (&[] as &[u64], vec![3.0]));
    // Batch broadcast: [2,1,2,3] · [3,3,2] → [2,3,2,2]; batch (i, j) uses a[i] and b[j].
    let a4 = f32s(
        &[2, 1, 2, 3],
        &(0..12).map(|i| i as f32).collect::<Vec<_>>(),
    );
    let b3 = f32s(
        &[3, 3, 2],
        &(0..18).map(|i| (i % 5) as f32).collect::<Vec<_>>(),
    );
    let y = eval1(Op::MatMul, &[&a4, &b3]);
    assert_eq!(y.shape(), [2, 3, 2, 2]);
    let (av, bv, yv) = (vf32(&a4), vf32(&b3), vf32(&y));
    for i in 0..2 {
        for j in 0..3 {
            for r in 0..2 {
                for c in 0..2 {
                    let want: f32 = (0..3)
                        .map(|k| av[i * 6 + r * 3 + k] * bv[j * 6 + k * 2 + c])
                        .sum();
                    assert_eq!(yv[((i * 3 + j) * 2 + r) * 2 + c], want);
                }
            }
        }
    }
    assert_eq!(fails(Op::MatMul, &[&a, &a]), ErrorKind::Shape);
    assert_eq!(fails(Op::MatMul, &[&scalar_f32(1.0), &a]), ErrorKind::Shape);
}

#[test]
fn matmul_integers_and_half_types() {
    // [[1,2],[3,4]] · [[5,6],[7,8]] = [[19,22],[43,50]].
    let a = i32s(&[2, 2], &[1, 2, 3, 4]);
    let b = i32s(&[2, 2], &[5, 6, 7, 8]);
    let y = eval1(Op::MatMul, &[&a, &b]);
    assert_eq!((y.dtype(), vi64(&y)), (DType::I32, vec![19, 22, 43, 50]));
    // bf16 inputs accumulate in f32 and round once: 1 + 2^-8 + 2^-8 exceeds bf16's precision
    // term by term (1 + 2^-8 alone would be a tie that rounds back to 1), but the f32 sum
    // 1 + 2^-7 is exact in bf16.
    let a = typed(DType::BF16, &[1, 3], &[1.0, 1.0, 1.0]);
    let b = typed(DType::BF16, &[3, 1], &[1.0, 2f64.powi(-8), 2f64.powi(-8)]);
    let y = eval1(Op::MatMul, &[&a, &b]);
    assert_eq!(
        (y.dtype(), vf64(&y)),
        (DType::BF16, vec![1.0 + 2f64.powi(-7)])
    );
}

#[test]
fn gemm_transposes_scales_and_broadcasts_c() {
    // A stored [K=2, M=2] with trans_a; B [2,2]; C a row [10, 20].
    // op(A) = [[1,3],[2,4]]; op(A)·B with B = [[1,1],[0,1]] = [[1,4],[2,6]];
    // 2·that + 0.5·C = [[2+5, 8+10], [4+5, 12+10]] = [[7,18],[9,22]].
    let a = f32s(&[2, 2], &[1.0, 2.0, 3.0, 4.0]);
    let b = f32s(&[2, 2], &[1.0, 1.0, 0.0, 1.0]);
    let c = f32s(&[2], &[10.0, 20.0]);
    let op = Op::Gemm {
        alpha: 2.0,
        beta: 0.5,
        trans_a: true,
        trans_b: false,
    };
    assert_eq!(
        vf32(&eval1(op.clone(), &[&a, &b, &c])),
        [7.0, 18.0, 9.0, 22.0]
    );
    // trans_b: op(B) = [[1,0],[1,1]]; A·op(B) = [[1+2, 2],[3+4, 4]] = [[3,2],[7,4]].
    let op = Op::Gemm {
        alpha: 1.0,
        beta: 1.0,
        trans_a: false,
        trans_b: true,
    };
    assert_eq!(vf32(&eval1(op.clone(), &[&a, &b])), [3.0, 2.0, 7.0, 4.0]);
    // beta = 0 ignores C, even an infinite one (onnxruntime does not read it).
    let op0 = Op::Gemm {
        alpha: 1.0,
        beta: 0.0,
        trans_a: false,
        trans_b: true,
    };
    let inf = f32s(&[1], &[f32::INFINITY]);
    assert_eq!(vf32(&eval1(op0, &[&a, &b, &inf])), [3.0, 2.0, 7.0, 4.0]);
    assert_eq!(
        fails(op.clone(), &[&a, &b, &f32s(&[3], &[0.0; 3])]),
        ErrorKind::Shape
    );
    assert_eq!(fails(op, &[&f32s(&[4], &[0.0; 4]), &b]), ErrorKind::Shape);
    // Integers: [[1,2],[3,4]] · [[1,1],[0,1]] + [1] = [[2,4],[4,8]].
    let op = Op::Gemm {
        alpha: 1.0,
        beta: 1.0,
        trans_a: false,
        trans_b: false,
    };
    let y = eval1(
        op,
        &[
            &list(&[1, 2, 3, 4]).reshaped(vec![2, 2]).unwrap(),
            &list(&[1, 1, 0, 1]).reshaped(vec![2, 2]).unwrap(),
            &list(&[1]),
        ],
    );
    assert_eq!(vi64(&y), [2, 4, 4, 8]);
}

#[test]
fn conv_hand_computed() {
    // x 1×1×3×3 = 1..9, w 1×1×2×2 of ones: each output sums a 2×2 window:
    // [[1+2+4+5, 2+3+5+6], [4+5+7+8, 5+6+8+9]] = [[12,16],[24,28]], plus bias 1.
    let x = f32s(
        &[1, 1, 3, 3],
        &(1..=9).map(|i| i as f32).collect::<Vec<_>>(),
    );
    let w = f32s(&[1, 1, 2, 2], &[1.0; 4]);
    let bias = f32s(&[1], &[1.0]);
    let y = eval1(
        conv(vec![], vec![], vec![], vec![], 1, AutoPad::NotSet),
        &[&x, &w, &bias],
    );
    assert_eq!(
        (y.shape(), vf32(&y)),
        (&[1u64, 1, 2, 2][..], vec![13.0, 17.0, 25.0, 29.0])
    );
    // Pads 1 all round and stride 2: windows start at −1 and 1 on both axes:
    // (−1,−1): only x[0,0] = 1; (−1,1): x[0,1]+x[0,2] = 5; (1,−1): x[1,0]+x[2,0] = 11;
    // (1,1): 5+6+8+9 = 28.
    let y = eval1(
        conv(
            vec![2, 2],
            vec![2, 2],
            vec![1, 1, 1, 1],
            vec![],
            1,
            AutoPad::NotSet,
        ),
        &[&x, &w],
    );
    assert_eq!(vf32(&y), [1.0, 5.0, 11.0, 28.0]);
    // Dilation 2 with a 2×2 kernel reads the corners: 1+3+7+9 = 20.
    let y = eval1(
        conv(vec![], vec![], vec![], vec![2, 2], 1, AutoPad::NotSet),
        &[&x, &w],
    );
    assert_eq!((y.shape(), vf32(&y)), (&[1u64, 1, 1, 1][..], vec![20.0]));
    // SAME_UPPER, stride 1: out 3×3, total pad 1 per axis, at the end: out[2,2] = x[2,2] = 9,
    // out[0,0] = 12 as before.
    let y = eval1(
        conv(vec![], vec![], vec![], vec![], 1, AutoPad::SameUpper),
        &[&x, &w],
    );
    assert_eq!(y.shape(), [1, 1, 3, 3]);
    assert_eq!(
        vf32(&y),
        [12.0, 16.0, 9.0, 24.0, 28.0, 15.0, 15.0, 17.0, 9.0]
    );
    // SAME_LOWER puts the pad first: out[0,0] = x[0,0] = 1.
    let y = eval1(
        conv(vec![], vec![], vec![], vec![], 1, AutoPad::SameLower),
        &[&x, &w],
    );
    assert_eq!(vf32(&y)[..3], [1.0, 3.0, 5.0]);
}

#[test]
fn conv_groups_keep_channels_apart() {
    // Two channels, group 2, a 1×1 kernel per group scaling by 2 and 3; bias [0, 100].
    let x = f32s(&[1, 2, 1, 2], &[1.0, 2.0, 10.0, 20.0]);
    let w = f32s(&[2, 1, 1, 1], &[2.0, 3.0]);
    let b = f32s(&[2], &[0.0, 100.0]);
    let y = eval1(
        conv(vec![1, 1], vec![], vec![], vec![], 2, AutoPad::NotSet),
        &[&x, &w, &b],
    );
    assert_eq!(vf32(&y), [2.0, 4.0, 130.0, 160.0]);
    // 1-D conv: x [1,1,5] = 1..5, kernel [1,-1] → differences x[i] − x[i+1] = −1 ×4.
    let x1 = f32s(&[1, 1, 5], &[1.0, 2.0, 3.0, 4.0, 5.0]);
    let w1 = f32s(&[1, 1, 2], &[1.0, -1.0]);
    assert_eq!(
        vf32(&eval1(
            conv(vec![], vec![], vec![], vec![], 1, AutoPad::NotSet),
            &[&x1, &w1]
        )),
        [-1.0; 4]
    );
    assert_eq!(
        fails(
            conv(vec![], vec![], vec![], vec![], 3, AutoPad::NotSet),
            &[&x, &w]
        ),
        ErrorKind::Shape
    );
    assert_eq!(
        fails(
            conv(vec![3, 3], vec![], vec![], vec![], 2, AutoPad::NotSet),
            &[&x, &w]
        ),
        ErrorKind::Attribute
    );
    assert_eq!(
        fails(
            conv(vec![], vec![0, 1], vec![], vec![], 2, AutoPad::NotSet),
            &[&x, &w]
        ),
        ErrorKind::Attribute
    );
    // A kernel larger than the padded input.
    assert_eq!(
        fails(
            conv(vec![], vec![], vec![], vec![], 1, AutoPad::NotSet),
            &[&x1, &f32s(&[1, 1, 6], &[0.0; 6])]
        ),
        ErrorKind::Shape
    );
}

fn max_pool(k: Vec<i64>, s: Vec<i64>, p: Vec<i64>, ceil_mode: bool) -> Op {
    Op::MaxPool {
        kernel_shape: k,
        strides: s,
        pads: p,
        dilations: vec![],
        ceil_mode,
        auto_pad: AutoPad::NotSet,
    }
}

/// Max pools whose output rows span several 8-output blocks and a partial last one, at
/// strides 1, 2 and 3, with pads, NaNs and infinities at many lanes, against a max computed
/// here element by element (the CPU kernel sums 8 outputs at a time and, at stride 2,
/// reads a copy of each plane with its even and odd columns apart).
#[test]
fn max_pool_rows_of_many_blocks_match_a_naive_max() {
    let (h, w) = (5usize, 41usize);
    let mut v: Vec<f32> = (0..2 * h * w)
        .map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0)
        .collect();
    for (i, x) in v.iter_mut().enumerate() {
        if i % 23 == 5 {
            *x = f32::NAN;
        } else if i % 31 == 7 {
            *x = f32::INFINITY;
        } else if i % 29 == 3 {
            *x = f32::NEG_INFINITY;
        }
    }
    let x = f32s(&[1, 2, h as u64, w as u64], &v);
    for (stride, pad) in [(1usize, 0usize), (2, 0), (2, 1), (3, 1)] {
        let k = 3usize;
        let pads = vec![pad as i64; 4];
        let y = vf32(&eval1(
            max_pool(
                vec![k as i64, k as i64],
                vec![stride as i64, stride as i64],
                pads,
                false,
            ),
            &[&x],
        ));
        let (oh, ow) = (
            (h + 2 * pad - k) / stride + 1,
            (w + 2 * pad - k) / stride + 1,
        );
        assert_eq!(y.len(), 2 * oh * ow, "stride {stride} pad {pad}");
        for c in 0..2 {
            for r in 0..oh {
                for q in 0..ow {
                    let mut want = f32::NEG_INFINITY;
                    let mut nan = false;
                    for dr in 0..k {
                        for dq in 0..k {
                            let (ir, iq) = (r * stride + dr, q * stride + dq);
                            if ir < pad || iq < pad || ir - pad >= h || iq - pad >= w {
                                continue;
                            }
                            let val = v[(c * h + ir - pad) * w + iq - pad];
                            nan |= val.is_nan();
                            want = want.max(val);
                        }
                    }
                    let got = y[(c * oh + r) * ow + q];
                    if nan {
                        assert!(got.is_nan(), "stride {stride} pad {pad} at {c},{r},{q}");
                    } else {
                        assert_eq!(got, want, "stride {stride} pad {pad} at {c},{r},{q}");
                    }
                }
            }
        }
    }
}

fn avg_pool(k: Vec<i64>, s: Vec<i64>, p: Vec<i64>, ceil_mode: bool, count_include_pad: bool) -> Op {
    Op::AveragePool {
        kernel_shape: k,
        strides: s,
        pads: p,
        dilations: vec![],
        ceil_mode,
        count_include_pad,
        auto_pad: AutoPad::NotSet,
    }
}

#[test]
fn pools_hand_computed() {
    // x 1×1×1×5 = [1, 5, 2, 4, 3].
    let x = f32s(&[1, 1, 1, 5], &[1.0, 5.0, 2.0, 4.0, 3.0]);
    // k 2, s 2: windows [1,5], [2,4] → max 5, 4 (the last element is dropped).
    assert_eq!(
        vf32(&eval1(
            max_pool(vec![1, 2], vec![1, 2], vec![], false),
            &[&x]
        )),
        [5.0, 4.0]
    );
    // ceil_mode adds a window starting at 4 that holds [3] alone.
    assert_eq!(
        vf32(&eval1(
            max_pool(vec![1, 2], vec![1, 2], vec![], true),
            &[&x]
        )),
        [5.0, 4.0, 3.0]
    );
    // Average with ceil_mode: the last window covers one input element; it divides by 1
    // whether or not pads count (the overhang past the input is not padding).
    assert_eq!(
        vf32(&eval1(
            avg_pool(vec![1, 2], vec![1, 2], vec![], true, true),
            &[&x]
        )),
        [3.0, 3.0, 3.0]
    );
    // Pads (0,1) on the width, k 3, s 2: windows at −1, 1, 3 over [pad,1,5], [5,2,4], [4,3,pad].
    let p = vec![0, 1, 0, 1];
    // Excluding pads: (1+5)/2 = 3, 11/3, (4+3)/2 = 3.5; including: 6/3 = 2, 11/3, 7/3.
    let y = vf32(&eval1(
        avg_pool(vec![1, 3], vec![1, 2], p.clone(), false, false),
        &[&x],
    ));
    assert_close(&y, &[3.0, 11.0 / 3.0, 3.5], 1e-6);
    let y = vf32(&eval1(
        avg_pool(vec![1, 3], vec![1, 2], p.clone(), false, true),
        &[&x],
    ));
    assert_close(&y, &[2.0, 11.0 / 3.0, 7.0 / 3.0], 1e-6);
    // Max ignores padding: 5, 5, 4.
    assert_eq!(
        vf32(&eval1(max_pool(vec![1, 3], vec![1, 2], p, false), &[&x])),
        [5.0, 5.0, 4.0]
    );
    // NaN in a window propagates through max.
    let xn = f32s(&[1, 1, 1, 4], &[1.0, f32::NAN, 2.0, 3.0]);
    let y = vf32(&eval1(
        max_pool(vec![1, 2], vec![1, 2], vec![], false),
        &[&xn],
    ));
    assert!(y[0].is_nan());
    assert_eq!(y[1], 3.0);
    // u8 max pool stays u8.
    let xu = typed(DType::U8, &[1, 1, 4], &[3.0, 200.0, 7.0, 9.0]);
    let y = eval1(max_pool(vec![2], vec![2], vec![], false), &[&xu]);
    assert_eq!((y.dtype(), vi64(&y)), (DType::U8, vec![200, 9]));
    assert_eq!(
        fails(avg_pool(vec![2], vec![2], vec![], false, false), &[&xu]),
        ErrorKind::DType
    );
}

#[test]
fn global_pools() {
    // Channel 0 = 1..4 (mean 2.5, max 4), channel 1 = −1..−4 (mean −2.5, max −1).
    let x = f32s(&[1, 2, 2, 2], &[1.0, 2.0, 3.0, 4.0, -1.0, -2.0, -3.0, -4.0]);
    let m = eval1(Op::GlobalAveragePool, &[&x]);
    assert_eq!(
        (m.shape(), vf32(&m)),
        (&[1u64, 2, 1, 1][..], vec![2.5, -2.5])
    );
    assert_eq!(vf32(&eval1(Op::GlobalMaxPool, &[&x])), [4.0, -1.0]);
}

#[test]
fn batch_and_layer_norm() {
    // batch_norm, channel c: (x − mean)/sqrt(var + eps)·scale + bias with mean [1, 0],
    // var [4, 1] − eps (so var + eps is exactly 4 and 1), scale [2, 1], bias [0, 10]:
    // ch0: (x − 1)/2·2 = x − 1; ch1: x + 10.
    let eps = 0.25f32;
    let x = f32s(&[1, 2, 2], &[1.0, 3.0, 0.5, -0.5]);
    let y = eval1(
        Op::BatchNormalization { epsilon: eps },
        &[
            &x,
            &f32s(&[2], &[2.0, 1.0]),
            &f32s(&[2], &[0.0, 10.0]),
            &f32s(&[2], &[1.0, 0.0]),
            &f32s(&[2], &[3.75, 0.75]),
        ],
    );
    assert_eq!(vf32(&y), [0.0, 2.0, 10.5, 9.5]);
    // layer_norm over the last axis of [1, 2, 3]: mean 2, var (1 + 0 + 1)/3 = 2/3;
    // (x − 2)/sqrt(2/3) = ∓1.2247449, 0; with scale 2 and bias 1: −1.4494897, 1, 3.4494897.
    let x = f32s(&[1, 3], &[1.0, 2.0, 3.0]);
    let op = Op::LayerNormalization {
        axis: -1,
        epsilon: 0.0,
    };
    let y = vf32(&eval1(
        op.clone(),
        &[&x, &f32s(&[3], &[2.0; 3]), &f32s(&[3], &[1.0; 3])],
    ));
    assert_close(&y, &[-1.449_489_7, 1.0, 3.449_489_7], 1e-6);
    // Without bias, axis 0 over a [2, 2] (all four values): mean 2.5, var 1.25.
    let x = f32s(&[2, 2], &[1.0, 2.0, 3.0, 4.0]);
    let y = vf32(&eval1(
        Op::LayerNormalization {
            axis: 0,
            epsilon: 0.0,
        },
        &[&x, &f32s(&[2, 2], &[1.0; 4])],
    ));
    let s = 1.25f64.sqrt();
    let want: Vec<f32> = [1.0, 2.0, 3.0, 4.0]
        .iter()
        .map(|v: &f64| ((v - 2.5) / s) as f32)
        .collect();
    assert_close(&y, &want, 1e-6);
    assert_eq!(fails(op, &[&x, &f32s(&[3], &[1.0; 3])]), ErrorKind::Shape);
}

/// f32 normalisations are read in place and rounded straight to f32; the result must be the
/// f64 computation rounded once: the same op on the same values in f64, cast to f32, bit for
/// bit. Rows of 1..=37 values (every remainder of the four partial sums) over wide
/// magnitudes, with and without bias, layer and RMS norm, softmax and log-softmax.
#[test]
fn f32_normalisations_are_the_f64_result_rounded_once() {
    let mut seed = 7u64;
    let mut next = || {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let u = (seed >> 40) as f32 / (1u64 << 24) as f32;
        (u - 0.5) * 2f32.powi((seed >> 33) as i32 % 12 - 4)
    };
    let as_f64 = |t: &Tensor| typed(DType::F64, t.shape(), &vf64(t));
    let bits = |v: Vec<f32>| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    for cols in 1..=37u64 {
        let x = f32s(
            &[3, cols],
            &(0..3 * cols).map(|_| next()).collect::<Vec<_>>(),
        );
        let scale = f32s(&[cols], &(0..cols).map(|_| next()).collect::<Vec<_>>());
        let bias = f32s(&[cols], &(0..cols).map(|_| next()).collect::<Vec<_>>());
        let ops = [
            (
                Op::LayerNormalization {
                    axis: -1,
                    epsilon: 1e-5,
                },
                vec![&x, &scale, &bias],
            ),
            (
                Op::LayerNormalization {
                    axis: -1,
                    epsilon: 1e-5,
                },
                vec![&x, &scale],
            ),
            (
                Op::RmsNormalization {
                    axis: -1,
                    epsilon: 1e-6,
                },
                vec![&x, &scale],
            ),
            (Op::Softmax { axis: -1 }, vec![&x]),
            (Op::LogSoftmax { axis: -1 }, vec![&x]),
        ];
        for (op, ins) in ops {
            let got = vf32(&eval1(op.clone(), &ins));
            let wide: Vec<Tensor> = ins.iter().map(|t| as_f64(t)).collect();
            let wide = eval1(op.clone(), &wide.iter().collect::<Vec<_>>());
            let want: Vec<f32> = vf64(&wide).iter().map(|&v| v as f32).collect();
            assert_eq!(bits(got), bits(want), "{op:?}, {cols} columns");
        }
    }
}

#[test]
fn softmax_is_stable_for_large_inputs() {
    // softmax([1000, 1000, 1001]) = [1, 1, e] / (2 + e) (the max is subtracted first, so
    // nothing overflows): [0.2119416, 0.2119416, 0.5761169].
    let x = f32s(&[1, 3], &[1000.0, 1000.0, 1001.0]);
    let e = std::f64::consts::E;
    let want = [1.0 / (2.0 + e), 1.0 / (2.0 + e), e / (2.0 + e)].map(|v| v as f32);
    assert_close(&vf32(&eval1(Op::Softmax { axis: -1 }, &[&x])), &want, 1e-7);
    // log_softmax([0, 0]) = [−ln 2, −ln 2]; along axis 0 of a [2, 1].
    let y = vf32(&eval1(
        Op::LogSoftmax { axis: 0 },
        &[&f32s(&[2, 1], &[0.0, 0.0])],
    ));
    assert_close(&y, &[-std::f32::consts::LN_2; 2], 1e-7);
    // A −inf entry gets probability 0.
    let y = vf32(&eval1(
        Op::Softmax { axis: 1 },
        &[&f32s(&[1, 2], &[f32::NEG_INFINITY, 0.0])],
    ));
    assert_eq!(y, [0.0, 1.0]);
    assert_eq!(fails(Op::Softmax { axis: 2 }, &[&x]), ErrorKind::Attribute);
}

#[test]
fn reductions_hand_computed() {
    let x = f32s(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let r = |op: Op| {
        let y = eval1(op, &[&x]);
        (y.shape().to_vec(), vf32(&y))
    };
    assert_eq!(
        r(Op::ReduceSum {
            axes: Some(vec![1]),
            keepdims: true
        }),
        (vec![2, 1], vec![6.0, 15.0])
    );
    assert_eq!(
        r(Op::ReduceMean {
            axes: Some(vec![-2]),
            keepdims: false
        }),
        (vec![3], vec![2.5, 3.5, 4.5])
    );
    assert_eq!(
        r(Op::ReduceMax {
            axes: None,
            keepdims: false
        }),
        (vec![], vec![6.0])
    );
    // Empty axes reduce everything too (ONNX's absent axes input).
    assert_eq!(
        r(Op::ReduceProd {
            axes: Some(vec![]),
            keepdims: true
        }),
        (vec![1, 1], vec![720.0])
    );
    assert_eq!(
        r(Op::ReduceMin {
            axes: Some(vec![0]),
            keepdims: false
        }),
        (vec![3], vec![1.0, 2.0, 3.0])
    );
    // NaN propagates through max and min.
    let n = f32s(&[2], &[f32::NAN, 1.0]);
    assert!(
        vf32(&eval1(
            Op::ReduceMax {
                axes: None,
                keepdims: false
            },
            &[&n]
        ))[0]
            .is_nan()
    );
    // Empty reductions: sum 0, prod 1, max −inf, mean NaN.
    let e = f32s(&[0, 2], &[]);
    let er = |op: Op| vf32(&eval1(op, &[&e]));
    assert_eq!(
        er(Op::ReduceSum {
            axes: Some(vec![0]),
            keepdims: false
        }),
        [0.0, 0.0]
    );
    assert_eq!(
        er(Op::ReduceProd {
            axes: Some(vec![0]),
            keepdims: false
        }),
        [1.0, 1.0]
    );
    assert_eq!(
        er(Op::ReduceMax {
            axes: Some(vec![0]),
            keepdims: false
        }),
        [f32::NEG_INFINITY; 2]
    );
    assert!(
        er(Op::ReduceMean {
            axes: Some(vec![0]),
            keepdims: false
        })[0]
            .is_nan()
    );
    // Integer mean truncates: (−7 + 0 + 2)/3 = −5/3 → −1.
    let i = list(&[-7, 0, 2]);
    assert_eq!(
        vi64(&eval1(
            Op::ReduceMean {
                axes: None,
                keepdims: false
            },
            &[&i]
        )),
        [-1]
    );
    assert_eq!(
        vi64(&eval1(
            Op::ReduceSum {
                axes: None,
                keepdims: true
            },
            &[&i]
        )),
        [-5]
    );
    assert_eq!(
        fails(
            Op::ReduceSum {
                axes: Some(vec![0, -2]),
                keepdims: false
            },
            &[&x]
        ),
        ErrorKind::Attribute
    );
    // f32 sums accumulate in f64: 1 + 2^-24 + 2^-24 in f32 would stay 1; in f64 it is
    // 1 + 2^-23, an f32.
    let s = f32s(&[3], &[1.0, 2f32.powi(-24), 2f32.powi(-24)]);
    assert_eq!(
        vf32(&eval1(
            Op::ReduceSum {
                axes: None,
                keepdims: false
            },
            &[&s]
        )),
        [1.0 + 2f32.powi(-23)]
    );
}

/// Convs with many output positions (ResNet-50's stem: 7×7 at stride 2 over 3 channels; a
/// padded 3×3) go chunk by chunk, im2col slice and GEMM together. Each output is still the
/// bits of one GEMM over the whole im2col matrix, built here by hand, plus the bias, on one
/// thread and on three.
#[test]
fn chunked_convs_give_the_bits_of_one_gemm_over_the_whole_im2col() {
    let vals = |len: usize, seed: usize| -> Vec<f32> {
        (0..len)
            .map(|i| ((i * 7919 + seed * 104_729) % 2003) as f32 / 1001.0 - 1.0)
            .collect()
    };
    // (channels, input side, kernel, stride, pad, output channels)
    for [c, side, k, s, pad, m] in [[3usize, 64, 7, 2, 3, 8], [6, 30, 3, 1, 1, 5]] {
        let x = f32s(
            &[1, c as u64, side as u64, side as u64],
            &vals(c * side * side, 1),
        );
        let w = f32s(
            &[m as u64, c as u64, k as u64, k as u64],
            &vals(m * c * k * k, 2),
        );
        let b = f32s(&[m as u64], &vals(m, 3));
        let ki = k as i64;
        let op = conv(
            vec![ki, ki],
            vec![s as i64; 2],
            vec![pad as i64; 4],
            vec![],
            1,
            AutoPad::NotSet,
        );
        let out = (side + 2 * pad - k) / s + 1;
        let p = out * out;
        assert!(p >= 512, "{p} positions: not a chunked conv");
        // im2col by hand: row (ci, ky, kx), column (oy, ox).
        let xv = vf32(&x);
        let mut col = vec![0f32; c * k * k * p];
        for ci in 0..c {
            for ky in 0..k {
                for kx in 0..k {
                    let r = (ci * k + ky) * k + kx;
                    for oy in 0..out {
                        for ox in 0..out {
                            let (iy, ix) = (
                                (oy * s + ky) as isize - pad as isize,
                                (ox * s + kx) as isize - pad as isize,
                            );
                            let inside = (0..side as isize).contains(&iy)
                                && (0..side as isize).contains(&ix);
                            if inside {
                                col[r * p + oy * out + ox] =
                                    xv[(ci * side + iy as usize) * side + ix as usize];
                            }
                        }
                    }
                }
            }
        }
        let rows = (c * k * k) as u64;
        let w2 = f32s(&[m as u64, rows], &vf32(&w));
        let col = f32s(&[rows, p as u64], &col);
        let prod = eval1(Op::MatMul, &[&w2, &col]);
        let want = eval1(Op::Add, &[&prod, &f32s(&[m as u64, 1], &vf32(&b))]);
        for threads in [1, 3] {
            let got = on_pool(threads, || eval1(op.clone(), &[&x, &w, &b]));
            assert_eq!(got.shape(), [1, m as u64, out as u64, out as u64]);
            assert_eq!(got.bytes(), want.bytes(), "{k}×{k} conv, {threads} threads");
        }
    }
}

/// Runs `f` on a rayon pool of `threads` threads.
fn on_pool<T: Send>(threads: usize, f: impl FnOnce() -> T + Send) -> T {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap()
        .install(f)
}

#[test]
fn results_do_not_depend_on_the_thread_count() {
    // Sizes large enough for every parallel path: 96×200×136 and 96×200×40 GEMMs (column and
    // row blocks), a conv, a softmax, a big broadcast and both FP8 GEMMs (130×64×50: two row
    // blocks and four panels for the f32-accumulating one).
    let n = |len: usize, seed: u32| -> Vec<f32> {
        (0..len)
            .map(|i| {
                ((i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed) >> 8) as f32
                    / (1 << 24) as f32
                    - 0.5
            })
            .collect()
    };
    let a = Tensor::from_f32(vec![96, 200], &n(96 * 200, 1));
    // Narrow: 40 columns go to the threads as row blocks.
    let narrow = Tensor::from_f32(vec![200, 40], &n(200 * 40, 8));
    let b = Tensor::from_f32(vec![200, 136], &n(200 * 136, 2));
    let x = Tensor::from_f32(vec![2, 8, 40, 40], &n(2 * 8 * 1600, 3));
    let w = Tensor::from_f32(vec![16, 8, 3, 3], &n(16 * 72, 4));
    let row = Tensor::from_f32(vec![8, 1, 40], &n(8 * 40, 5));
    // FP8 operands (E4M3 codes, NaN codes avoided) for both scaled_matmul kernels.
    let codes = |len: usize, seed: u32| -> Vec<u8> {
        n(len, seed)
            .iter()
            .map(|&v| ((v + 0.5) * 254.0) as u8 & 0xFE)
            .collect()
    };
    let qa = fp8(DType::F8E4M3, &[130, 64], &codes(130 * 64, 6));
    let qb = fp8(DType::F8E4M3, &[64, 50], &codes(64 * 50, 7));
    let one = scalar_f32(1.0);
    let cases: Vec<(Op, Vec<&Tensor>)> = vec![
        (Op::MatMul, vec![&a, &b]),
        (Op::MatMul, vec![&a, &narrow]),
        (
            Op::Gemm {
                alpha: 0.5,
                beta: 1.0,
                trans_a: false,
                trans_b: false,
            },
            vec![&a, &b],
        ),
        (
            conv(vec![], vec![], vec![1, 1, 1, 1], vec![], 1, AutoPad::NotSet),
            vec![&x, &w],
        ),
        (Op::Softmax { axis: -1 }, vec![&x]),
        (Op::Mul, vec![&x, &row]),
        (
            Op::ReduceMean {
                axes: Some(vec![1, 3]),
                keepdims: false,
            },
            vec![&x],
        ),
        (
            Op::ScaledMatMul {
                out: DType::F32,
                fast_accum: false,
            },
            vec![&qa, &qb, &one, &one],
        ),
        (
            Op::ScaledMatMul {
                out: DType::F32,
                fast_accum: true,
            },
            vec![&qa, &qb, &one, &one],
        ),
    ];
    for (op, inputs) in cases {
        let run = |t| {
            on_pool(t, || {
                eval_op(&op, &inputs).unwrap_or_else(|e| panic!("{e}"))
            })
        };
        assert_eq!(
            run(1),
            run(4),
            "`{}` differs between 1 and 4 threads",
            op.name()
        );
    }
    // And the GEMM agrees with a plain f64 dot product to f32 accuracy.
    let y = vf32(&eval1(Op::MatMul, &[&a, &b]));
    let (av, bv) = (vf32(&a), vf32(&b));
    for &(i, j) in &[(0usize, 0usize), (95, 135), (40, 77)] {
        let want: f64 = (0..200)
            .map(|k| f64::from(av[i * 200 + k]) * f64::from(bv[k * 136 + j]))
            .sum();
        assert!(
            (f64::from(y[i * 136 + j]) - want).abs() < 1e-4,
            "({i},{j}): {} vs {want}",
            y[i * 136 + j]
        );
    }
}

/// Cross-entropy skips labels equal to IGNORE_INDEX (−100, PyTorch's default): the mean is
/// over the other rows, an ignored row gets no gradient, all-ignored gives NaN, and any other
/// negative label is still an error.
#[test]
fn cross_entropy_skips_the_ignore_index() {
    let logits = f32s(&[3, 2], &[0.0, 0.0, 1.0, 0.0, 0.0, 3.0]);
    let labels = Tensor::from_i64(vec![3], &[0, fp8c_ir::IGNORE_INDEX, 1]);
    let out = eval_op(&Op::SoftmaxCrossEntropy, &[&logits, &labels]).unwrap();
    let l0 = 2f64.ln();
    let l2 = (1.0 + (-3f64).exp()).ln();
    let want = (l0 + l2) / 2.0;
    let got = out[0].to_f64_vec().unwrap()[0];
    assert!((got - want).abs() < 1e-6, "{got} vs {want}");
    let dloss = Tensor::scalar_f32(1.0);
    let dx = eval_op(&Op::SoftmaxCrossEntropyGrad, &[&out[1], &labels, &dloss]).unwrap()[0]
        .to_f64_vec()
        .unwrap();
    let p2 = 1.0 / (1.0 + 3f64.exp());
    let want = [
        (0.5 - 1.0) / 2.0,
        0.5 / 2.0,
        0.0,
        0.0,
        p2 / 2.0,
        (1.0 - p2 - 1.0) / 2.0,
    ];
    for (g, w) in dx.iter().zip(want) {
        assert!((g - w).abs() < 1e-6, "{dx:?} vs {want:?}");
    }
    let all = Tensor::from_i64(vec![3], &[fp8c_ir::IGNORE_INDEX; 3]);
    let out = eval_op(&Op::SoftmaxCrossEntropy, &[&logits, &all]).unwrap();
    assert!(out[0].to_f64_vec().unwrap()[0].is_nan());
    let bad = Tensor::from_i64(vec![3], &[0, -1, 1]);
    let err = eval_op(&Op::SoftmaxCrossEntropy, &[&logits, &bad]).unwrap_err();
    assert!(err.to_string().contains("label -1"), "{err}");
}

/// f32 logits go through cross-entropy read in place (`loss.rs`, `cross_entropy_f32`): the
/// loss, the log-probabilities and the gradient are the f64 computation on the same values
/// rounded once to f32, bit for bit; 300 rows of 256 classes take the threaded path, and an
/// ignored row and a NaN row are among them.
#[test]
fn f32_cross_entropy_is_the_f64_one_rounded_once() {
    let (rows, c) = (300usize, 256usize);
    let mut x: Vec<f32> = (0..rows * c)
        .map(|i| ((i as u64 * 2_654_435_761) % 20_011) as f32 / 997.0 - 10.0)
        .collect();
    x[7 * c + 3] = f32::NAN;
    let mut lab: Vec<i64> = (0..rows as i64).map(|r| (r * 37) % c as i64).collect();
    lab[11] = fp8c_ir::IGNORE_INDEX;
    let labels = Tensor::from_i64(vec![rows as u64], &lab);
    let shape = vec![rows as u64, c as u64];
    let x64: Vec<f64> = x.iter().map(|&v| f64::from(v)).collect();
    let (l32, l64) = (f32s(&shape, &x), Tensor::from_f64(shape.clone(), &x64));
    let o32 = eval_op(&Op::SoftmaxCrossEntropy, &[&l32, &labels]).unwrap();
    let o64 = eval_op(&Op::SoftmaxCrossEntropy, &[&l64, &labels]).unwrap();
    assert_eq!(o32[1].dtype(), DType::F32);
    let bits = |t: &Tensor| -> Vec<u32> { vf32(t).iter().map(|v| v.to_bits()).collect() };
    let rounded = |t: &Tensor| -> Vec<u32> {
        t.to_f64_vec()
            .unwrap()
            .iter()
            .map(|&v| (v as f32).to_bits())
            .collect()
    };
    assert_eq!(bits(&o32[0]), rounded(&o64[0]), "loss");
    assert_eq!(bits(&o32[1]), rounded(&o64[1]), "log-probabilities");
    let dloss = Tensor::scalar_f32(0.75);
    let g32 = eval_op(&Op::SoftmaxCrossEntropyGrad, &[&o32[1], &labels, &dloss]).unwrap();
    // The f64 gradient from the same (f32) log-probabilities.
    let lp64 = Tensor::from_f64(shape.clone(), &o32[1].to_f64_vec().unwrap());
    let dl64 = Tensor::from_f64(vec![], &[0.75]);
    let g64 = eval_op(&Op::SoftmaxCrossEntropyGrad, &[&lp64, &labels, &dl64]).unwrap();
    assert_eq!(bits(&g32[0]), rounded(&g64[0]), "gradient");
    assert!(vf32(&g32[0])[11 * c..12 * c].iter().all(|&g| g == 0.0));
}

/// `all_finite` reads f32 tensors in place block by block: a NaN or an infinity in the last,
/// partial block of the last input is still found.
#[test]
fn all_finite_finds_a_non_finite_value_anywhere() {
    let ok = f32s(&[1000], &vec![1.5; 1000]);
    let finite = |t: &[&Tensor]| eval_op(&Op::AllFinite, t).unwrap()[0].to_f64_vec().unwrap()[0];
    assert_eq!(finite(&[&ok, &ok]), 1.0);
    for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
        let mut v = vec![1.5f32; 1000];
        v[999] = bad;
        assert_eq!(finite(&[&ok, &f32s(&[1000], &v)]), 0.0, "{bad}");
    }
    let f64_bad = Tensor::from_f64(vec![2], &[1.0, f64::NAN]);
    assert_eq!(finite(&[&ok, &f64_bad]), 0.0);
}
