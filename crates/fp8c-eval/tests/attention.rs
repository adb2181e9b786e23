//! The attention kernels (`attention`, `attention_grad`: FlashAttention-2's tiled forward and
//! backward) against a plain dense implementation written here from the definition
//! (`fp8c_ir::attention`): the full score matrix, softmax, and the textbook gradients
//! `dV = Pᵀ·dO`, `dS = P ∘ (dP − rowsum(dP ∘ P))`, `dQ = scale·dS·K`, `dK = scale·dSᵀ·Q`.
//! Shapes cross the kernels' 64-query and 128-key tiles; cases cover the causal flag with
//! fewer queries than keys (offset diagonal) and more (rows with no key at all), grouped KV
//! heads, broadcast and full masks with −∞ entries, and a value head size unlike q's. f64
//! inputs agree to 1e-12, f32 to 1e-5; results do not depend on the thread count; bad shapes
//! are errors. (onnxruntime's opset-23 Attention checks the forward too: the golden cases.)

use fp8c_eval::eval_op;
use fp8c_ir::{DType, Op, Tensor};

/// A small deterministic generator (xorshift), values in [lo, hi).
struct Rng(u64);

impl Rng {
    fn vals(&mut self, n: usize, lo: f64, hi: f64) -> Vec<f64> {
        (0..n)
            .map(|_| {
                self.0 ^= self.0 << 13;
                self.0 ^= self.0 >> 7;
                self.0 ^= self.0 << 17;
                lo + (hi - lo) * ((self.0 >> 11) as f64 / (1u64 << 53) as f64)
            })
            .collect()
    }
}

struct Case {
    b: usize,
    h: usize,
    hkv: usize,
    tq: usize,
    tk: usize,
    d: usize,
    dv: usize,
    causal: bool,
    /// Mask shape (rank 4), if any.
    mask: Option<[usize; 4]>,
}

struct Data {
    q: Vec<f64>,
    k: Vec<f64>,
    v: Vec<f64>,
    mask: Option<Vec<f64>>,
    d_o: Vec<f64>,
}

fn data(c: &Case, seed: u64) -> Data {
    let mut r = Rng(seed | 1);
    let mask = c.mask.map(|m| {
        let n = m.iter().product();
        // Some keys hidden by −∞, the rest a bias in [−3, 1].
        r.vals(n, -3.5, 1.0)
            .into_iter()
            .map(|x| if x < -3.0 { f64::NEG_INFINITY } else { x })
            .collect()
    });
    Data {
        q: r.vals(c.b * c.h * c.tq * c.d, -2.0, 2.0),
        k: r.vals(c.b * c.hkv * c.tk * c.d, -2.0, 2.0),
        v: r.vals(c.b * c.hkv * c.tk * c.dv, -1.0, 1.0),
        mask,
        d_o: r.vals(c.b * c.h * c.tq * c.dv, -1.0, 1.0),
    }
}

/// The dense reference: (o, lse, dq, dk, dv), in f64.
#[allow(clippy::type_complexity)]
fn reference(c: &Case, x: &Data, scale: f64) -> (Vec<f64>, Vec<f64>, Vec<f64>, Vec<f64>, Vec<f64>) {
    let g = c.h / c.hkv;
    let mut o = vec![0.0; c.b * c.h * c.tq * c.dv];
    let mut lse = vec![f64::NEG_INFINITY; c.b * c.h * c.tq];
    let mut dq = vec![0.0; x.q.len()];
    let mut dk = vec![0.0; x.k.len()];
    let mut dv = vec![0.0; x.v.len()];
    for b in 0..c.b {
        for h in 0..c.h {
            let kh = h / g;
            let qi = |i: usize, e: usize| x.q[((b * c.h + h) * c.tq + i) * c.d + e];
            let kj = |j: usize, e: usize| x.k[((b * c.hkv + kh) * c.tk + j) * c.d + e];
            let vj = |j: usize, e: usize| x.v[((b * c.hkv + kh) * c.tk + j) * c.dv + e];
            for i in 0..c.tq {
                let mut s = vec![f64::NEG_INFINITY; c.tk];
                for (j, sj) in s.iter_mut().enumerate() {
                    if c.causal && j + c.tq > i + c.tk {
                        continue;
                    }
                    let dot: f64 = (0..c.d).map(|e| qi(i, e) * kj(j, e)).sum();
                    let m = match (&x.mask, c.mask) {
                        (Some(mv), Some(ms)) => {
                            let at = |n: usize, d: usize| if d == 1 { 0 } else { n };
                            let idx = ((at(b, ms[0]) * ms[1] + at(h, ms[1])) * ms[2]
                                + at(i, ms[2]))
                                * ms[3]
                                + at(j, ms[3]);
                            mv[idx]
                        }
                        _ => 0.0,
                    };
                    *sj = scale * dot + m;
                }
                let mx = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let row = (b * c.h + h) * c.tq + i;
                if mx == f64::NEG_INFINITY {
                    continue;
                }
                let sum: f64 = s.iter().map(|&z| (z - mx).exp()).sum();
                lse[row] = mx + sum.ln();
                let p: Vec<f64> = s.iter().map(|&z| (z - lse[row]).exp()).collect();
                for e in 0..c.dv {
                    o[row * c.dv + e] = (0..c.tk).map(|j| p[j] * vj(j, e)).sum();
                }
                // Backward of this row.
                let dor = &x.d_o[row * c.dv..(row + 1) * c.dv];
                let dp: Vec<f64> = (0..c.tk)
                    .map(|j| (0..c.dv).map(|e| dor[e] * vj(j, e)).sum())
                    .collect();
                let dot: f64 = (0..c.tk).map(|j| dp[j] * p[j]).sum();
                for j in 0..c.tk {
                    let ds = p[j] * (dp[j] - dot) * scale;
                    for e in 0..c.d {
                        dq[row * c.d + e] += ds * kj(j, e);
                        dk[((b * c.hkv + kh) * c.tk + j) * c.d + e] += ds * qi(i, e);
                    }
                    for e in 0..c.dv {
                        dv[((b * c.hkv + kh) * c.tk + j) * c.dv + e] += p[j] * dor[e];
                    }
                }
            }
        }
    }
    (o, lse, dq, dk, dv)
}

fn tensor(dt: DType, shape: &[usize], v: &[f64]) -> Tensor {
    let s: Vec<u64> = shape.iter().map(|&d| d as u64).collect();
    Tensor::from_f64_as(dt, s, v).unwrap()
}

/// The kernels' (o, lse, dq, dk, dv) for `c` in `dt`.
fn kernels(c: &Case, x: &Data, scale: f64, dt: DType) -> Vec<Vec<f64>> {
    let q = tensor(dt, &[c.b, c.h, c.tq, c.d], &x.q);
    let k = tensor(dt, &[c.b, c.hkv, c.tk, c.d], &x.k);
    let v = tensor(dt, &[c.b, c.hkv, c.tk, c.dv], &x.v);
    let d_o = tensor(dt, &[c.b, c.h, c.tq, c.dv], &x.d_o);
    let mask = x.mask.as_ref().map(|m| tensor(dt, &c.mask.unwrap(), m));
    let mut ins = vec![&q, &k, &v];
    ins.extend(mask.as_ref());
    let fwd = eval_op(
        &Op::Attention {
            scale,
            causal: c.causal,
        },
        &ins,
    )
    .unwrap();
    let mut gins = vec![&q, &k, &v, &fwd[0], &fwd[1], &d_o];
    gins.extend(mask.as_ref());
    let bwd = eval_op(
        &Op::AttentionGrad {
            scale,
            causal: c.causal,
        },
        &gins,
    )
    .unwrap();
    fwd.iter()
        .chain(&bwd)
        .map(|t| t.to_f64_vec().unwrap())
        .collect()
}

/// Largest |a − b| / (atol + max |b|) over each output, comparing −∞ with −∞.
fn worst(got: &[Vec<f64>], want: &[&Vec<f64>]) -> f64 {
    let mut w = 0f64;
    for (g, r) in got.iter().zip(want) {
        let scale = r
            .iter()
            .filter(|x| x.is_finite())
            .fold(1e-30f64, |a, x| a.max(x.abs()));
        for (a, b) in g.iter().zip(r.iter()) {
            if a == b {
                continue;
            }
            w = w.max((a - b).abs() / scale);
        }
    }
    w
}

fn cases() -> Vec<Case> {
    let c = |b, h, hkv, tq, tk, d, dv, causal, mask| Case {
        b,
        h,
        hkv,
        tq,
        tk,
        d,
        dv,
        causal,
        mask,
    };
    vec![
        // Several query and key tiles, causal, grouped heads.
        c(1, 4, 2, 150, 150, 8, 8, true, None),
        // Not causal, a key tail shorter than a tile, Dv ≠ D, a padding-style mask.
        c(2, 2, 2, 70, 200, 6, 5, false, Some([2, 1, 1, 200])),
        // Fewer queries than keys: the diagonal is offset by Tk − Tq.
        c(1, 2, 1, 40, 300, 4, 4, true, Some([1, 2, 40, 300])),
        // More queries than keys: the first Tq − Tk rows see no key (o = 0, lse = −∞).
        c(1, 1, 1, 200, 130, 4, 3, true, None),
        // Tiny: one row, one key.
        c(1, 1, 1, 1, 1, 2, 2, false, None),
    ]
}

#[test]
fn f64_kernels_match_the_dense_definition() {
    for (n, c) in cases().iter().enumerate() {
        let x = data(c, 100 + n as u64);
        let (o, lse, dq, dk, dv) = reference(c, &x, 0.37);
        let got = kernels(c, &x, 0.37, DType::F64);
        let w = worst(&got, &[&o, &lse, &dq, &dk, &dv]);
        assert!(w <= 1e-12, "case {n}: worst relative error {w:.3e}");
        if c.tq > c.tk && c.causal {
            assert!(
                got[1][..c.tq - c.tk]
                    .iter()
                    .all(|&l| l == f64::NEG_INFINITY)
            );
            assert!(got[0][..(c.tq - c.tk) * c.dv].iter().all(|&v| v == 0.0));
        }
    }
}

#[test]
fn f32_and_bf16_kernels_round_like_f32_arithmetic() {
    for (n, c) in cases().iter().enumerate() {
        let x = data(c, 200 + n as u64);
        let (o, lse, dq, dk, dv) = reference(c, &x, 0.125);
        // The reference of the f32 inputs (rounded to f32 first).
        let got = kernels(c, &x, 0.125, DType::F32);
        let w = worst(&got, &[&o, &lse, &dq, &dk, &dv]);
        assert!(w <= 1e-5, "case {n}: f32 worst relative error {w:.3e}");
        let half = kernels(c, &x, 0.125, DType::BF16);
        let w = worst(&half[..1], &[&o]);
        assert!(w <= 2e-2, "case {n}: bf16 o worst relative error {w:.3e}");
    }
}

#[test]
fn results_do_not_depend_on_the_thread_count() {
    let c = &cases()[0];
    let x = data(c, 7);
    let run = |threads| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap()
            .install(|| kernels(c, &x, 0.2, DType::F32))
    };
    assert_eq!(run(1), run(3));
}

#[test]
fn bad_shapes_are_errors() {
    let t = |s: &[u64]| Tensor::zeros(DType::F32, s.to_vec()).unwrap();
    let op = Op::Attention {
        scale: 1.0,
        causal: false,
    };
    let (q, k, v) = (t(&[1, 3, 4, 8]), t(&[1, 2, 4, 8]), t(&[1, 2, 4, 8]));
    let e = eval_op(&op, &[&q, &k, &v]).unwrap_err();
    assert!(e.message.contains("multiple"), "{e}");
    let (q, k) = (t(&[1, 2, 4, 8]), t(&[1, 2, 4, 6]));
    assert!(eval_op(&op, &[&q, &k, &v]).is_err());
    let mask = t(&[3, 4]);
    let q = t(&[1, 2, 4, 8]);
    let e = eval_op(&op, &[&q, &v, &v, &mask]).unwrap_err();
    assert!(e.message.contains("broadcast"), "{e}");
    let lse = Tensor::zeros(DType::F32, vec![1, 2, 5]).unwrap();
    let grad = Op::AttentionGrad {
        scale: 1.0,
        causal: false,
    };
    let o = t(&[1, 2, 4, 8]);
    assert!(eval_op(&grad, &[&q, &v, &v, &o, &lse, &o]).is_err());
}
