//! Gradient checks: every gradient rule of the autodiff pass against central finite
//! differences, in f64, on small random inputs.
//!
//! Each test builds a tiny forward graph whose inputs are parameters (f64, random), reduces
//! its result(s) to `out = Σ y·r` with a fixed random `r`, differentiates `out` with the
//! autodiff pass, and compares every gradient element with `(out(θ+h) − out(θ−h)) / 2h`,
//! h = 1e-6, `|ad − fd| ≤ 1e-8 + 1e-6·|fd|` (f64 differences have ~1e-10 truncation and
//! rounding error at this h). Graphs are evaluated with the CPU reference evaluator, which
//! computes f64 in f64 for every op used here. Inputs avoid kinks (relu at 0, max ties, abs at
//! 0) so the finite differences are meaningful.

mod autodiff_common;

use autodiff_common::{Fwd, check, gradcheck};
use fp8c_ir::{AutoPad, GeluApprox, Op, PadMode, Tensor};
use std::collections::BTreeMap;

// ---------------------------------------------------------------- elementwise unary

fn unary_case(op: Op, lo: f64, hi: f64, seed: u64) {
    let mut f = Fwd::new(seed);
    let x = f.param("x", &[3, 4], lo, hi);
    let y = f.op(op.clone(), &[x]);
    let g = f.finish(&[y]);
    let worst = check(&g);
    assert!(worst <= 1.0, "{}: {worst}", op.name());
}

#[test]
fn unary_math() {
    unary_case(Op::Identity, -2.0, 2.0, 1);
    unary_case(Op::Neg, -2.0, 2.0, 2);
    unary_case(Op::Sqrt, 0.5, 3.0, 3);
    unary_case(Op::Reciprocal, 0.5, 3.0, 4);
    unary_case(Op::Exp, -2.0, 2.0, 5);
    unary_case(Op::Log, 0.5, 3.0, 6);
    unary_case(Op::Erf, -2.0, 2.0, 7);
    unary_case(Op::Tanh, -2.0, 2.0, 8);
    unary_case(Op::Sigmoid, -3.0, 3.0, 9);
    unary_case(Op::Sin, -2.0, 2.0, 10);
    unary_case(Op::Cos, -2.0, 2.0, 11);
}

#[test]
fn unary_kinked() {
    // Random values are never exactly at the kink (0).
    unary_case(Op::Abs, -2.0, 2.0, 12);
    unary_case(Op::Relu, -2.0, 2.0, 13);
    unary_case(Op::LeakyRelu { alpha: 0.1 }, -2.0, 2.0, 14);
}

#[test]
fn gelu_both_forms() {
    unary_case(
        Op::Gelu {
            approximate: GeluApprox::None,
        },
        -3.0,
        3.0,
        15,
    );
    unary_case(
        Op::Gelu {
            approximate: GeluApprox::Tanh,
        },
        -3.0,
        3.0,
        16,
    );
}

// ---------------------------------------------------------------- broadcasting binary

fn binary_case(op: Op, a_dims: &[u64], b_dims: &[u64], lo: f64, hi: f64, seed: u64) {
    let mut f = Fwd::new(seed);
    let a = f.param("a", a_dims, lo, hi);
    let b = f.param("b", b_dims, lo, hi);
    let y = f.op(op.clone(), &[a, b]);
    let g = f.finish(&[y]);
    let worst = check(&g);
    assert!(worst <= 1.0, "{}: {worst}", op.name());
}

#[test]
fn binary_with_broadcasting() {
    for (i, op) in [Op::Add, Op::Sub, Op::Mul, Op::Div].into_iter().enumerate() {
        let s = 20 + 4 * i as u64;
        binary_case(op.clone(), &[2, 3, 4], &[2, 3, 4], 0.5, 2.0, s);
        // b broadcasts over the leading axis and a size-1 axis; a over b's leading 1.
        binary_case(op.clone(), &[2, 3, 4], &[3, 1], 0.5, 2.0, s + 1);
        binary_case(op.clone(), &[1, 4], &[2, 3, 1], 0.5, 2.0, s + 2);
        binary_case(op, &[], &[3, 4], 0.5, 2.0, s + 3);
    }
}

#[test]
fn max_min_route_to_the_winner() {
    binary_case(Op::Max, &[3, 4], &[3, 4], -2.0, 2.0, 40);
    binary_case(Op::Min, &[3, 4], &[3, 4], -2.0, 2.0, 41);
    binary_case(Op::Max, &[2, 3, 4], &[4], -2.0, 2.0, 42);
    binary_case(Op::Min, &[3, 1], &[2, 3, 4], -2.0, 2.0, 43);
}

#[test]
fn pow_with_constant_and_trained_exponent() {
    for (seed, p) in [(50, 2.0), (51, 3.0), (52, 0.5), (53, -1.5)] {
        let mut f = Fwd::new(seed);
        let x = f.param("x", &[3, 4], 0.5, 2.0);
        let e = f.scalar(p);
        let y = f.op(Op::Pow, &[x, e]);
        let g = f.finish(&[y]);
        assert!(check(&g) <= 1.0, "pow {p}");
    }
    // An f32... no: an integer exponent of another dtype, and a trained exponent.
    let mut f = Fwd::new(54);
    let x = f.param("x", &[3, 4], 0.5, 2.0);
    let e = f.constant(Tensor::from_i64(vec![], &[2]));
    let y = f.op(Op::Pow, &[x, e]);
    let g = f.finish(&[y]);
    assert!(check(&g) <= 1.0, "pow with an i64 exponent");
    binary_case(Op::Pow, &[3, 4], &[4], 0.5, 2.0, 55);
}

#[test]
fn where_and_clip() {
    let mut f = Fwd::new(60);
    let a = f.param("a", &[3, 4], -1.0, 1.0);
    let b = f.param("b", &[4], -1.0, 1.0);
    let mask: Vec<bool> = (0..12).map(|i| i % 3 != 0).collect();
    let c = f.constant(Tensor::from_bool(vec![3, 4], &mask));
    let y = f.op(Op::Where, &[c, a, b]);
    let g = f.finish(&[y]);
    assert!(check(&g) <= 1.0);

    let mut f = Fwd::new(61);
    let x = f.param("x", &[3, 4], -2.0, 2.0);
    let lo = f.scalar(-0.7);
    let hi = f.scalar(0.9);
    let y = f.op(Op::Clip, &[x, lo, hi]);
    let g = f.finish(&[y]);
    assert!(check(&g) <= 1.0);
}

/// Casts round through f32, so this check runs at f32 resolution: h = 1e-3 makes the
/// difference quotient's rounding error (~1e-7/1e-3) small against rtol 1e-3.
#[test]
fn cast_through_f32() {
    let mut f = Fwd::new(62);
    let x = f.param("x", &[3, 4], -2.0, 2.0);
    let c = f.op(
        Op::Cast {
            to: fp8c_ir::DType::F32,
            saturate: false,
        },
        &[x],
    );
    let t = f.op(Op::Tanh, &[c]);
    let y = f.op(
        Op::Cast {
            to: fp8c_ir::DType::F64,
            saturate: false,
        },
        &[t],
    );
    let g = f.finish(&[y]);
    let worst = gradcheck(&g, "out", &BTreeMap::new(), 1e-3, 1e-3, 1e-4);
    assert!(worst <= 1.0);
}

// ---------------------------------------------------------------- GEMMs

fn matmul_case(a: &[u64], b: &[u64], seed: u64) {
    let mut f = Fwd::new(seed);
    let av = f.param("a", a, -1.0, 1.0);
    let bv = f.param("b", b, -1.0, 1.0);
    let y = f.op(Op::MatMul, &[av, bv]);
    let g = f.finish(&[y]);
    assert!(check(&g) <= 1.0, "matmul {a:?} x {b:?}");
}

#[test]
fn matmul_shapes() {
    matmul_case(&[3, 4], &[4, 5], 70);
    matmul_case(&[2, 3, 4], &[4, 5], 71); // activations × weight: folded wgrad
    matmul_case(&[2, 3, 4], &[2, 4, 5], 72); // batched
    matmul_case(&[3, 4], &[2, 4, 5], 73); // a broadcasts over the batch
    matmul_case(&[2, 1, 3, 4], &[3, 4, 5], 74); // both broadcast
    matmul_case(&[4], &[4, 5], 75); // 1-D left
    matmul_case(&[2, 3, 4], &[4], 76); // 1-D right
    matmul_case(&[4], &[4], 77); // dot
}

#[test]
fn gemm_every_transpose_and_bias() {
    let mut seed = 80;
    for ta in [false, true] {
        for tb in [false, true] {
            for c_dims in [None, Some(vec![5u64]), Some(vec![3, 5]), Some(vec![1, 1])] {
                seed += 1;
                let mut f = Fwd::new(seed);
                let a = f.param("a", if ta { &[4, 3] } else { &[3, 4] }, -1.0, 1.0);
                let b = f.param("b", if tb { &[5, 4] } else { &[4, 5] }, -1.0, 1.0);
                let mut ins = vec![a, b];
                if let Some(c) = &c_dims {
                    ins.push(f.param("c", c, -1.0, 1.0));
                }
                let op = Op::Gemm {
                    alpha: 0.7,
                    beta: 1.3,
                    trans_a: ta,
                    trans_b: tb,
                };
                let y = f.op(op, &ins);
                let g = f.finish(&[y]);
                assert!(check(&g) <= 1.0, "gemm ta={ta} tb={tb} c={c_dims:?}");
            }
        }
    }
}

// ---------------------------------------------------------------- normalisation

#[test]
fn layer_norm_with_and_without_bias() {
    for (seed, axis, bias) in [(100, -1i64, true), (101, -1, false), (102, 1, true)] {
        let mut f = Fwd::new(seed);
        let x = f.param("x", &[2, 3, 4], -2.0, 2.0);
        let norm: &[u64] = if axis == 1 { &[3, 4] } else { &[4] };
        let s = f.param("scale", norm, 0.5, 1.5);
        let mut ins = vec![x, s];
        if bias {
            ins.push(f.param("bias", norm, -0.5, 0.5));
        }
        let y = f.op(
            Op::LayerNormalization {
                axis,
                epsilon: 1e-5,
            },
            &ins,
        );
        let g = f.finish(&[y]);
        assert!(check(&g) <= 1.0, "layer_norm axis={axis} bias={bias}");
    }
}

#[test]
fn softmax_and_log_softmax() {
    for (seed, axis) in [(110, -1i64), (111, 1), (112, 0)] {
        for log in [false, true] {
            let mut f = Fwd::new(seed + if log { 10 } else { 0 });
            let x = f.param("x", &[2, 3, 4], -2.0, 2.0);
            let op = if log {
                Op::LogSoftmax { axis }
            } else {
                Op::Softmax { axis }
            };
            let y = f.op(op, &[x]);
            let g = f.finish(&[y]);
            assert!(check(&g) <= 1.0, "softmax axis={axis} log={log}");
        }
    }
}

/// `attention`'s rule (one `attention_grad`: the FlashAttention-2 backward, probabilities
/// recomputed from q, k and the log-sum-exp): plain, causal with as many queries as keys and
/// with fewer (the keys' offset), grouped KV heads, an additive mask broadcast over heads and
/// queries, and a value head size unlike q's.
#[test]
fn attention_dq_dk_dv() {
    struct Case {
        q: [u64; 4],
        kv_heads: u64,
        kv_len: u64,
        v_dim: u64,
        causal: bool,
        mask: Option<Vec<u64>>,
    }
    let cases = [
        Case {
            q: [1, 2, 4, 3],
            kv_heads: 2,
            kv_len: 4,
            v_dim: 3,
            causal: false,
            mask: None,
        },
        Case {
            q: [2, 2, 5, 3],
            kv_heads: 2,
            kv_len: 5,
            v_dim: 2,
            causal: true,
            mask: None,
        },
        Case {
            q: [1, 1, 3, 2],
            kv_heads: 1,
            kv_len: 5,
            v_dim: 2,
            causal: true,
            mask: None,
        },
        Case {
            q: [1, 4, 3, 2],
            kv_heads: 2,
            kv_len: 4,
            v_dim: 3,
            causal: true,
            mask: None,
        },
        Case {
            q: [2, 2, 3, 2],
            kv_heads: 1,
            kv_len: 4,
            v_dim: 2,
            causal: false,
            mask: Some(vec![2, 1, 1, 4]),
        },
    ];
    for (i, c) in cases.iter().enumerate() {
        let mut f = Fwd::new(150 + i as u64);
        let [b, _, _, d] = c.q;
        let q = f.param("q", &c.q, -1.5, 1.5);
        let k = f.param("k", &[b, c.kv_heads, c.kv_len, d], -1.5, 1.5);
        let v = f.param("v", &[b, c.kv_heads, c.kv_len, c.v_dim], -1.5, 1.5);
        let mut ins = vec![q, k, v];
        if let Some(m) = &c.mask {
            let t = f.rng.tensor(m, -2.0, 0.5);
            ins.push(f.constant(t));
        }
        let op = Op::Attention {
            scale: 0.7,
            causal: c.causal,
        };
        let o = f.ops(op, &ins)[0];
        let g = f.finish(&[o]);
        assert!(check(&g) <= 1.0, "attention case {i}");
    }
}

#[test]
fn batch_norm_inference_mode() {
    let mut f = Fwd::new(130);
    let x = f.param("x", &[2, 3, 2, 2], -2.0, 2.0);
    let s = f.param("scale", &[3], 0.5, 1.5);
    let b = f.param("bias", &[3], -0.5, 0.5);
    let m = f.param("mean", &[3], -0.5, 0.5);
    let v = f.param("var", &[3], 0.5, 1.5);
    let y = f.op(Op::BatchNormalization { epsilon: 1e-5 }, &[x, s, b, m, v]);
    let g = f.finish(&[y]);
    assert!(check(&g) <= 1.0);
}

// ---------------------------------------------------------------- reductions

#[test]
fn reductions() {
    let mut seed = 140;
    for axes in [None, Some(vec![1i64]), Some(vec![0, -1])] {
        for keepdims in [false, true] {
            for kind in 0..4 {
                seed += 1;
                let op = match kind {
                    0 => Op::ReduceSum {
                        axes: axes.clone(),
                        keepdims,
                    },
                    1 => Op::ReduceMean {
                        axes: axes.clone(),
                        keepdims,
                    },
                    2 => Op::ReduceMax {
                        axes: axes.clone(),
                        keepdims,
                    },
                    _ => Op::ReduceMin {
                        axes: axes.clone(),
                        keepdims,
                    },
                };
                let mut f = Fwd::new(seed);
                let x = f.param("x", &[2, 3, 4], -2.0, 2.0);
                let y = f.op(op.clone(), &[x]);
                let g = f.finish(&[y]);
                assert!(
                    check(&g) <= 1.0,
                    "{} axes={axes:?} keepdims={keepdims}",
                    op.name()
                );
            }
        }
    }
}

// ---------------------------------------------------------------- data movement

fn movement_case(
    build: impl Fn(&mut Fwd, fp8c_ir::Value) -> Vec<fp8c_ir::Value>,
    dims: &[u64],
    seed: u64,
    what: &str,
) {
    let mut f = Fwd::new(seed);
    let x = f.param("x", dims, -2.0, 2.0);
    let ys = build(&mut f, x);
    let g = f.finish(&ys);
    assert!(check(&g) <= 1.0, "{what}");
}

#[test]
fn layout_ops() {
    movement_case(
        |f, x| {
            let s = f.i64s(&[4, 6]);
            vec![f.op(Op::Reshape { allowzero: false }, &[x, s])]
        },
        &[2, 3, 4],
        150,
        "reshape",
    );
    movement_case(
        |f, x| {
            vec![f.op(
                Op::Transpose {
                    perm: vec![2, 0, 1],
                },
                &[x],
            )]
        },
        &[2, 3, 4],
        151,
        "transpose",
    );
    movement_case(
        |f, x| vec![f.op(Op::Unsqueeze { axes: vec![0, 3] }, &[x])],
        &[2, 3],
        152,
        "unsqueeze",
    );
    movement_case(
        |f, x| {
            vec![f.op(
                Op::Squeeze {
                    axes: Some(vec![1]),
                },
                &[x],
            )]
        },
        &[2, 1, 3],
        153,
        "squeeze",
    );
    movement_case(
        |f, x| vec![f.op(Op::Flatten { axis: 2 }, &[x])],
        &[2, 3, 4],
        154,
        "flatten",
    );
    movement_case(
        |f, x| {
            let s = f.i64s(&[2, 2, 3, 4]);
            vec![f.op(Op::Expand, &[x, s])]
        },
        &[1, 3, 1],
        155,
        "expand",
    );
    movement_case(
        |f, x| {
            let r = f.i64s(&[2, 1, 3]);
            vec![f.op(Op::Tile, &[x, r])]
        },
        &[2, 3, 2],
        156,
        "tile",
    );
    movement_case(
        |f, x| vec![f.op(Op::Identity, &[x])],
        &[2, 3],
        157,
        "identity",
    );
    for (upper, k) in [(true, 0), (false, 1), (true, -1)] {
        movement_case(
            |f, x| {
                let k = f.i64s(&[k]);
                let shape = f.i64s(&[]);
                let k = f.op(Op::Reshape { allowzero: false }, &[k, shape]);
                vec![f.op(Op::Trilu { upper }, &[x, k])]
            },
            &[2, 3, 4],
            158,
            "trilu",
        );
    }
}

#[test]
fn concat_split_slice_pad() {
    // concat of a param with itself and a second param
    let mut f = Fwd::new(160);
    let a = f.param("a", &[2, 3], -1.0, 1.0);
    let b = f.param("b", &[2, 2], -1.0, 1.0);
    let y = f.op(Op::Concat { axis: 1 }, &[a, b, a]);
    let g = f.finish(&[y]);
    assert!(check(&g) <= 1.0, "concat");

    // split, with one output unused
    let mut f = Fwd::new(161);
    let x = f.param("x", &[2, 6], -1.0, 1.0);
    let parts = f.ops(
        Op::Split {
            axis: 1,
            split: vec![1, 2, 3],
        },
        &[x],
    );
    let g = f.finish(&[parts[0], parts[2]]);
    assert!(check(&g) <= 1.0, "split");

    // slice with negative start, clamped end, two axes
    movement_case(
        |f, x| {
            let st = f.i64s(&[1, -3]);
            let en = f.i64s(&[100, 3]);
            let ax = f.i64s(&[0, 2]);
            let sp = f.i64s(&[1, 1]);
            vec![f.op(Op::Slice, &[x, st, en, ax, sp])]
        },
        &[3, 2, 5],
        162,
        "slice",
    );
    movement_case(
        |f, x| {
            let p = f.i64s(&[1, 0, 2, 3]);
            let z = f.scalar(0.0);
            vec![f.op(
                Op::Pad {
                    mode: PadMode::Constant,
                },
                &[x, p, z],
            )]
        },
        &[2, 3],
        163,
        "pad",
    );
}

#[test]
fn gather_scatter_adds_repeated_indices() {
    // An embedding lookup [V, D] with indices [B, T] holding repeats and a negative index.
    let mut f = Fwd::new(170);
    let table = f.param("table", &[5, 3], -1.0, 1.0);
    let idx = f.constant(Tensor::from_i64(vec![2, 3], &[0, 2, 2, 4, -1, 0]));
    let y = f.op(Op::Gather { axis: 0 }, &[table, idx]);
    let g = f.finish(&[y]);
    assert!(check(&g) <= 1.0, "gather axis 0");
    // A middle axis and a scalar index.
    let mut f = Fwd::new(171);
    let x = f.param("x", &[2, 4, 3], -1.0, 1.0);
    let idx = f.constant(Tensor::from_i64(vec![], &[2]));
    let y = f.op(Op::Gather { axis: 1 }, &[x, idx]);
    let g = f.finish(&[y]);
    assert!(check(&g) <= 1.0, "gather axis 1 scalar index");
}

#[test]
fn element_gathers_scatters_and_trilu() {
    use fp8c_ir::ScatterReduction;
    let idx = |shape: &[u64], v: &[i64]| Tensor::from_i64(shape.to_vec(), v);
    // gather_elements along axis 1, indices longer than the axis, repeated and negative.
    let mut f = Fwd::new(172);
    let x = f.param("x", &[3, 4], -1.0, 1.0);
    let i = f.constant(idx(
        &[3, 5],
        &[0, 3, 3, -1, 2, 1, 1, 1, 0, 0, 2, 3, -4, 1, 2],
    ));
    let y = f.op(Op::GatherElements { axis: 1 }, &[x, i]);
    let g = f.finish(&[y]);
    assert!(check(&g) <= 1.0, "gather_elements");
    // scatter_elements: none (distinct targets) and add (repeated targets), both inputs trained.
    let cases = [
        (ScatterReduction::None, [1, 0, 2, 0, 2, 1, 0, 1]),
        (ScatterReduction::Add, [1, 1, 2, 0, 1, 1, 0, 0]),
    ];
    for (k, (reduction, targets)) in cases.into_iter().enumerate() {
        let mut f = Fwd::new(173 + k as u64);
        let data = f.param("data", &[3, 4], -1.0, 1.0);
        let upd = f.param("updates", &[2, 4], -1.0, 1.0);
        let i = f.constant(idx(&[2, 4], &targets));
        let y = f.op(Op::ScatterElements { axis: 0, reduction }, &[data, i, upd]);
        let g = f.finish(&[y]);
        assert!(check(&g) <= 1.0, "scatter_elements {reduction:?}");
    }
    // scatter_nd on rows: none (distinct rows) and add (row 1 twice).
    let cases = [
        (ScatterReduction::None, [2, -4, 3]),
        (ScatterReduction::Add, [1, 1, 3]),
    ];
    for (k, (reduction, rows)) in cases.into_iter().enumerate() {
        let mut f = Fwd::new(175 + k as u64);
        let data = f.param("data", &[4, 3], -1.0, 1.0);
        let upd = f.param("updates", &[3, 3], -1.0, 1.0);
        let i = f.constant(idx(&[3, 1], &rows));
        let y = f.op(Op::ScatterNd { reduction }, &[data, i, upd]);
        let g = f.finish(&[y]);
        assert!(check(&g) <= 1.0, "scatter_nd {reduction:?}");
    }
    // top_k: the selected values' gradient goes back to where they came from.
    for (k, (axis, largest)) in [(1, true), (0, false)].into_iter().enumerate() {
        let mut f = Fwd::new(179 + k as u64);
        let x = f.param("x", &[4, 6], -1.0, 1.0);
        let kk = f.constant(Tensor::from_i64(vec![1], &[3]));
        let op = Op::TopK {
            axis,
            largest,
            sorted: true,
        };
        let y = f.op(op, &[x, kk]);
        let g = f.finish(&[y]);
        assert!(check(&g) <= 1.0, "top_k axis {axis} largest {largest}");
    }
    // trilu: upper with k = 1, lower without k.
    movement_case(
        |f, x| {
            let k = f.constant(Tensor::scalar_i64(1));
            vec![f.op(Op::Trilu { upper: true }, &[x, k])]
        },
        &[2, 3, 4],
        177,
        "trilu upper",
    );
    movement_case(
        |f, x| vec![f.op(Op::Trilu { upper: false }, &[x])],
        &[4, 3],
        178,
        "trilu lower",
    );
}

// ---------------------------------------------------------------- convolution and pooling

#[test]
fn conv_dgrad_wgrad_bias() {
    // (group, strides, pads, dilations)
    type Case = (i64, Vec<i64>, Vec<i64>, Vec<i64>);
    let cases: [Case; 4] = [
        (1, vec![1, 1], vec![1, 1, 1, 1], vec![]),
        (1, vec![2, 2], vec![0, 1, 1, 0], vec![]),
        (2, vec![1, 2], vec![1, 0, 0, 1], vec![]),
        (1, vec![1, 1], vec![0, 0, 0, 0], vec![2, 1]),
    ];
    for (i, (group, strides, pads, dilations)) in cases.into_iter().enumerate() {
        let mut f = Fwd::new(180 + i as u64);
        let x = f.param("x", &[2, 4, 5, 5], -1.0, 1.0);
        let w = f.param("w", &[6, 4 / group as u64, 3, 2], -1.0, 1.0);
        let b = f.param("b", &[6], -1.0, 1.0);
        let op = Op::Conv {
            kernel_shape: vec![3, 2],
            strides,
            pads,
            dilations,
            group,
            auto_pad: AutoPad::NotSet,
        };
        let y = f.op(op.clone(), &[x, w, b]);
        let g = f.finish(&[y]);
        assert!(check(&g) <= 1.0, "conv case {i}: {op:?}");
    }
}

/// The transposed convolution (ONNX ConvTranspose imports as `conv_grad_input`): strided,
/// padded and grouped, both inputs trained.
#[test]
fn transposed_conv() {
    // (group, strides, pads, the transposed conv's output shape, its input shape)
    type Case = (i64, Vec<i64>, Vec<i64>, Vec<i64>, [u64; 4]);
    let cases: [Case; 2] = [
        (
            1,
            vec![2, 2],
            vec![1, 1, 1, 1],
            vec![2, 4, 9, 8],
            [2, 6, 5, 5],
        ),
        (
            2,
            vec![1, 2],
            vec![0, 1, 1, 0],
            vec![2, 4, 6, 8],
            [2, 6, 5, 4],
        ),
    ];
    for (i, (group, strides, pads, input_shape, x_shape)) in cases.into_iter().enumerate() {
        let mut f = Fwd::new(195 + i as u64);
        let x = f.param("x", &x_shape, -1.0, 1.0);
        let w = f.param("w", &[6, 4 / group as u64, 3, 2], -1.0, 1.0);
        let op = Op::ConvGradInput {
            kernel_shape: vec![3, 2],
            strides,
            pads,
            dilations: vec![1, 1],
            group,
            auto_pad: AutoPad::NotSet,
            input_shape,
        };
        let y = f.op(op.clone(), &[x, w]);
        let g = f.finish(&[y]);
        assert!(check(&g) <= 1.0, "transposed conv case {i}: {op:?}");
    }
}

#[test]
fn conv_1d_same_padding() {
    let mut f = Fwd::new(190);
    let x = f.param("x", &[2, 3, 7], -1.0, 1.0);
    let w = f.param("w", &[4, 3, 3], -1.0, 1.0);
    let y = f.op(
        Op::Conv {
            kernel_shape: vec![],
            strides: vec![2],
            pads: vec![],
            dilations: vec![],
            group: 1,
            auto_pad: AutoPad::SameUpper,
        },
        &[x, w],
    );
    let g = f.finish(&[y]);
    assert!(check(&g) <= 1.0);
}

#[test]
fn pools() {
    let mk_max = |ceil_mode| Op::MaxPool {
        kernel_shape: vec![2, 3],
        strides: vec![2, 1],
        pads: vec![1, 0, 0, 1],
        dilations: vec![],
        ceil_mode,
        auto_pad: AutoPad::NotSet,
    };
    let mk_avg = |count_include_pad| Op::AveragePool {
        kernel_shape: vec![3, 3],
        strides: vec![2, 2],
        pads: vec![1, 1, 1, 1],
        dilations: vec![],
        ceil_mode: false,
        count_include_pad,
        auto_pad: AutoPad::NotSet,
    };
    let ops = [
        mk_max(false),
        mk_max(true),
        mk_avg(false),
        mk_avg(true),
        Op::GlobalAveragePool,
        Op::GlobalMaxPool,
    ];
    for (i, op) in ops.into_iter().enumerate() {
        let mut f = Fwd::new(200 + i as u64);
        let x = f.param("x", &[2, 3, 5, 6], -2.0, 2.0);
        let y = f.op(op.clone(), &[x]);
        let g = f.finish(&[y]);
        assert!(check(&g) <= 1.0, "{op:?}");
    }
}

// ---------------------------------------------------------------- losses and composites

#[test]
fn cross_entropy_loss() {
    use fp8c_passes::autodiff::{Loss, TrainSpec, build_training_graph};
    let mut f = Fwd::new(210);
    let x = f.param("x", &[2, 3, 4], -1.0, 1.0);
    let w = f.param("w", &[4, 5], -1.0, 1.0);
    let logits = f.op(Op::MatMul, &[x, w]);
    f.g.set_output("logits", logits).unwrap();
    let fwd = f.g;
    let labels = Tensor::from_i64(vec![2, 3], &[0, 4, 2, 1, 1, 3]);
    // Wrap: the training graph's `loss` output with expose_grads.
    let mut spec = TrainSpec::new("logits", Loss::CrossEntropy);
    spec.optimizer = None;
    spec.expose_grads = true;
    spec.train_only = Some(vec!["*".into()]);
    let train = build_training_graph(&fwd, &spec).unwrap();
    let inputs = BTreeMap::from([("labels".to_string(), labels)]);
    // Finite differences on the training graph's own loss output.
    let worst = gradcheck_on_output(&train, "loss", &inputs);
    assert!(worst <= 1.0);
}

#[test]
fn mse_loss() {
    use fp8c_passes::autodiff::{Loss, TrainSpec, build_training_graph};
    let mut f = Fwd::new(211);
    let x = f.param("x", &[3, 4], -1.0, 1.0);
    let w = f.param("w", &[4, 2], -1.0, 1.0);
    let y = f.op(Op::MatMul, &[x, w]);
    f.g.set_output("y", y).unwrap();
    let fwd = f.g;
    let target = autodiff_common::Rng::new(5).tensor(&[3, 2], -1.0, 1.0);
    let mut spec = TrainSpec::new("y", Loss::Mse);
    spec.optimizer = None;
    spec.expose_grads = true;
    spec.train_only = Some(vec!["*".into()]);
    let train = build_training_graph(&fwd, &spec).unwrap();
    let inputs = BTreeMap::from([("target".to_string(), target)]);
    assert!(gradcheck_on_output(&train, "loss", &inputs) <= 1.0);
}

/// Finite differences of a training graph's scalar output against its own `grad.*` outputs.
fn gradcheck_on_output(
    train: &fp8c_ir::Graph,
    output: &str,
    inputs: &BTreeMap<String, Tensor>,
) -> f64 {
    let run = autodiff_common::eval(train, inputs, &BTreeMap::new(), &BTreeMap::new());
    let base = train.weights().clone();
    let h = 1e-6;
    let mut worst = 0f64;
    for (name, t) in &base {
        let ad = run.outputs[&format!("grad.{name}")].to_f64_vec().unwrap();
        let vals = t.to_f64_vec().unwrap();
        for i in 0..vals.len() {
            let at = |d: f64| {
                let mut v = vals.clone();
                v[i] += d;
                let mut w = base.clone();
                w.insert(name.clone(), Tensor::from_f64(t.shape().to_vec(), &v));
                autodiff_common::loss_at(train, output, inputs, &w)
            };
            let fd = (at(h) - at(-h)) / (2.0 * h);
            let tol = 1e-8 + 1e-6 * fd.abs();
            worst = worst.max((ad[i] - fd).abs() / tol);
            assert!(
                (ad[i] - fd).abs() <= tol,
                "d{output}/d{name}[{i}]: {} vs {fd}",
                ad[i]
            );
        }
    }
    worst
}

/// A pre-LN transformer block in miniature (layer_norm, attention with a causal mask through
/// `where`, softmax, gelu MLP, residuals), so rules are checked composed, with shared values.
#[test]
fn transformer_block_composite() {
    let (t, d) = (4u64, 8u64);
    let mut f = Fwd::new(220);
    let x = f.param("x", &[2, t, d], -1.0, 1.0);
    let g1 = f.param("ln.g", &[d], 0.5, 1.5);
    let b1 = f.param("ln.b", &[d], -0.2, 0.2);
    let wq = f.param("wq", &[d, d], -0.5, 0.5);
    let wk = f.param("wk", &[d, d], -0.5, 0.5);
    let wv = f.param("wv", &[d, d], -0.5, 0.5);
    let w1 = f.param("w1", &[d, 2 * d], -0.5, 0.5);
    let bias1 = f.param("b1", &[2 * d], -0.2, 0.2);
    let w2 = f.param("w2", &[2 * d, d], -0.5, 0.5);
    let h = f.op(
        Op::LayerNormalization {
            axis: -1,
            epsilon: 1e-5,
        },
        &[x, g1, b1],
    );
    let q = f.op(Op::MatMul, &[h, wq]);
    let k = f.op(Op::MatMul, &[h, wk]);
    let v = f.op(Op::MatMul, &[h, wv]);
    let kt = f.op(
        Op::Transpose {
            perm: vec![0, 2, 1],
        },
        &[k],
    );
    let s = f.op(Op::MatMul, &[q, kt]);
    let sc = f.scalar(1.0 / (d as f64).sqrt());
    let s = f.op(Op::Mul, &[s, sc]);
    let causal: Vec<bool> = (0..t * t).map(|i| i % t <= i / t).collect();
    let mask = f.constant(Tensor::from_bool(vec![t, t], &causal));
    let neg = f.scalar(-1e9);
    let s = f.op(Op::Where, &[mask, s, neg]);
    let p = f.op(Op::Softmax { axis: -1 }, &[s]);
    let a = f.op(Op::MatMul, &[p, v]);
    let r = f.op(Op::Add, &[x, a]);
    let m = f.op(Op::MatMul, &[r, w1]);
    let m = f.op(Op::Add, &[m, bias1]);
    let m = f.op(
        Op::Gelu {
            approximate: GeluApprox::Tanh,
        },
        &[m],
    );
    let m = f.op(Op::MatMul, &[m, w2]);
    let y = f.op(Op::Add, &[r, m]);
    let g = f.finish(&[y]);
    assert!(check(&g) <= 1.0);
}
