//! The CUDA attention kernels (`kernels/attention.cu`) against the CPU reference kernels
//! (`fp8c-eval/src/attention/`, FlashAttention-2 too but with 128×128 tiles): forward o and
//! lse, backward dq, dk and dv, over causal and grouped heads, masks of several broadcast
//! shapes (−∞ entries and whole hidden rows included), Tq ≠ Tk (rows that see no key),
//! lengths that are no multiple of any tile, head sizes 16 to 160 (every kernel bucket),
//! Dv ≠ D, and f32, bf16 and f16. A part of `cuda_vs_cpu` (the same device selection:
//! the emulated device without a GPU).

use super::{cuda, data};
use fp8c_ir::{DType, Graph, Op, Support, Tensor, TensorType};
use fp8c_runtime::{Backend, CpuBackend, CudaBackend, lower};
use std::collections::BTreeMap;

/// One attention to check.
struct Case {
    name: &'static str,
    dt: DType,
    /// B, H, Hkv, Tq, Tk, D, Dv.
    dims: [u64; 7],
    causal: bool,
    /// The mask's shape (broadcasting to [B, H, Tq, Tk]), if any.
    mask: Option<Vec<u64>>,
}

/// max |got − want| / max |want| over the finite entries; infinities must match exactly.
fn rel_err(got: &Tensor, want: &Tensor) -> f64 {
    let (g, w) = (got.to_f64_vec().unwrap(), want.to_f64_vec().unwrap());
    assert_eq!(g.len(), w.len());
    let scale = w
        .iter()
        .filter(|x| x.is_finite())
        .fold(1e-30f64, |m, x| m.max(x.abs()));
    g.iter().zip(&w).fold(0f64, |m, (a, b)| {
        if b.is_finite() {
            m.max((a - b).abs() / scale)
        } else {
            assert_eq!(a.to_bits(), b.to_bits(), "a non-finite value differs");
            m
        }
    })
}

fn tensor(dt: DType, shape: &[u64], v: &[f32]) -> Tensor {
    let v: Vec<f64> = v.iter().map(|&x| f64::from(x)).collect();
    Tensor::from_f64_as(dt, shape.to_vec(), &v).unwrap()
}

/// A mask of `shape`: values in [−2, 2), every 7th −∞, and row 1 of each [.., Tq, Tk] slice
/// wholly hidden when the mask has a query axis.
fn mask(shape: &[u64], seed: u64) -> Vec<f32> {
    let n = shape.iter().product::<u64>() as usize;
    let mut v = data(n, 2.0, seed, false);
    for (i, x) in v.iter_mut().enumerate() {
        if i % 7 == 3 {
            *x = f32::NEG_INFINITY;
        }
    }
    if let [.., tq, tk] = shape
        && *tq > 1
    {
        let (tq, tk) = (*tq as usize, *tk as usize);
        for s in 0..n / (tq * tk) {
            v[s * tq * tk + tk..s * tq * tk + 2 * tk].fill(f32::NEG_INFINITY);
        }
    }
    v
}

/// Runs one graph (inputs named as in `ins`) on the CPU and the CUDA backend; the outputs.
fn both(
    cuda: &CudaBackend,
    g: &Graph,
    ins: &BTreeMap<String, Tensor>,
) -> (BTreeMap<String, Tensor>, BTreeMap<String, Tensor>) {
    let p = lower(g).unwrap();
    let want = CpuBackend
        .prepare(&p, g.weights())
        .unwrap()
        .run(ins)
        .unwrap();
    let got = cuda
        .prepare(&p, g.weights())
        .unwrap_or_else(|e| panic!("{}: prepare: {e}", g.name()))
        .run(ins)
        .unwrap_or_else(|e| panic!("{}: run: {e}", g.name()));
    (want, got)
}

fn check(cuda: &CudaBackend, c: &Case) {
    let [b, h, hkv, tq, tk, d, dv] = c.dims;
    let scale = 1.2 / (d as f64).sqrt();
    let shapes = [vec![b, h, tq, d], vec![b, hkv, tk, d], vec![b, hkv, tk, dv]];
    let mut ins: BTreeMap<String, Tensor> = BTreeMap::new();
    for (i, (name, s)) in ["q", "k", "v"].iter().zip(&shapes).enumerate() {
        let n = s.iter().product::<u64>() as usize;
        ins.insert(
            name.to_string(),
            tensor(c.dt, s, &data(n, 1.5, 11 + i as u64, false)),
        );
    }
    if let Some(ms) = &c.mask {
        ins.insert("mask".into(), tensor(c.dt, ms, &mask(ms, 5)));
    }
    let op = Op::Attention {
        scale,
        causal: c.causal,
    };
    let order: Vec<&str> = ["q", "k", "v", "mask"]
        .into_iter()
        .filter(|n| ins.contains_key(*n))
        .collect();
    // The forward.
    let mut g = Graph::new(format!("{}_fwd", c.name));
    let vals: Vec<_> = order
        .iter()
        .map(|n| g.add_input(n, ins[*n].ty()).unwrap())
        .collect();
    let outs = g.add_node("attn", op.clone(), &vals).unwrap();
    g.set_output("o", outs[0]).unwrap();
    g.set_output("lse", outs[1]).unwrap();
    let (want, got) = both(cuda, &g, &ins);
    // bf16 / f16 outputs: one ulp of the largest bf16 value (each side rounds once).
    let fwd_tol = if c.dt == DType::F32 { 1e-5 } else { 4e-3 };
    for k in ["o", "lse"] {
        assert_eq!(got[k].ty(), want[k].ty(), "{}: {k}", c.name);
        let e = rel_err(&got[k], &want[k]);
        let tol = if k == "lse" { 1e-5 } else { fwd_tol };
        assert!(
            e <= tol,
            "{}: {k} off by {e:.3e} (allowed {tol:.0e})",
            c.name
        );
        eprintln!("attention {} {k}: {e:.2e}", c.name);
    }
    // The backward, from the CPU's o and lse and a random do.
    let mut bins = ins.clone();
    bins.insert("o".into(), want["o"].clone());
    bins.insert("lse".into(), want["lse"].clone());
    let n_o = (b * h * tq * dv) as usize;
    bins.insert(
        "do".into(),
        tensor(c.dt, &[b, h, tq, dv], &data(n_o, 1.0, 29, false)),
    );
    let border: Vec<&str> = ["q", "k", "v", "o", "lse", "do", "mask"]
        .into_iter()
        .filter(|n| bins.contains_key(*n))
        .collect();
    let mut g = Graph::new(format!("{}_bwd", c.name));
    let vals: Vec<_> = border
        .iter()
        .map(|n| g.add_input(n, bins[*n].ty()).unwrap())
        .collect();
    let grad = Op::AttentionGrad {
        scale,
        causal: c.causal,
    };
    let outs = g.add_node("attn_grad", grad, &vals).unwrap();
    for (i, k) in ["dq", "dk", "dv"].iter().enumerate() {
        g.set_output(k, outs[i]).unwrap();
    }
    let (want, got) = both(cuda, &g, &bins);
    let bwd_tol = fwd_tol;
    for k in ["dq", "dk", "dv"] {
        assert_eq!(got[k].ty(), want[k].ty(), "{}: {k}", c.name);
        let e = rel_err(&got[k], &want[k]);
        assert!(
            e <= bwd_tol,
            "{}: {k} off by {e:.3e} (allowed {bwd_tol:.0e})",
            c.name
        );
        eprintln!("attention {} {k}: {e:.2e}", c.name);
    }
}

fn case(name: &'static str, dt: DType, dims: [u64; 7], causal: bool, mask: Option<&[u64]>) -> Case {
    Case {
        name,
        dt,
        dims,
        causal,
        mask: mask.map(<[u64]>::to_vec),
    }
}

#[test]
fn attention_kernels_match_the_cpu_reference_in_f32() {
    let cases = [
        // Head 64 (32-row tiles): lengths past one tile, plain.
        case(
            "d64_plain",
            DType::F32,
            [1, 2, 2, 45, 45, 64, 64],
            false,
            None,
        ),
        // Causal grouped-query attention (4 query heads on 2 KV heads), three tiles.
        case(
            "d64_causal_gqa",
            DType::F32,
            [1, 4, 2, 70, 70, 64, 64],
            true,
            None,
        ),
        // Head 128 (16-row tiles), Tq ≠ Tk, causal, BERT's padding mask [B, 1, 1, Tk].
        case(
            "d128_pad_mask",
            DType::F32,
            [2, 2, 1, 20, 37, 128, 128],
            true,
            Some(&[2, 1, 1, 37]),
        ),
        // Tq > Tk causal: the first queries see no key (o = 0, lse = −∞); a full mask with
        // hidden rows; D ≠ Dv.
        case(
            "d32_dv48_full_mask",
            DType::F32,
            [1, 2, 2, 12, 5, 32, 48],
            true,
            Some(&[1, 2, 12, 5]),
        ),
        // A [Tq, Tk] mask shared by every head (Mistral's sliding window is of this kind).
        case(
            "d16_tq_tk_mask",
            DType::F32,
            [2, 2, 2, 9, 9, 16, 16],
            false,
            Some(&[9, 9]),
        ),
        // Head 160 (the 256 bucket, 8-row tiles).
        case("d160", DType::F32, [1, 2, 1, 11, 19, 160, 160], true, None),
    ];
    let cuda = cuda(false).unwrap();
    for c in &cases {
        check(&cuda, c);
    }
}

#[test]
fn attention_kernels_match_the_cpu_reference_in_bf16_and_f16() {
    let cases = [
        case(
            "bf16_d64_causal_gqa",
            DType::BF16,
            [1, 4, 2, 33, 33, 64, 64],
            true,
            None,
        ),
        case(
            "f16_d128_mask",
            DType::F16,
            [1, 2, 2, 17, 21, 128, 128],
            false,
            Some(&[1, 1, 17, 21]),
        ),
    ];
    let cuda = cuda(false).unwrap();
    for c in &cases {
        check(&cuda, c);
    }
}

/// What the kernels do not take is refused with the reason `attention_fits` gives (the
/// session decomposes those nodes first): a head above 256, f64.
#[test]
fn attention_kernels_refuse_large_heads_and_f64_with_the_reason() {
    let t = |dt, d| TensorType::fixed(dt, &[1, 2, 8, d]);
    let fits = fp8c_runtime::cuda::attention_fits;
    let (q, big, f64q) = (t(DType::F32, 64), t(DType::F32, 300), t(DType::F64, 64));
    assert_eq!(fits(&[&q, &q, &q]), Support::Yes);
    let b = t(DType::BF16, 256);
    assert_eq!(fits(&[&b, &b, &b]), Support::Yes);
    for refused in [[&big, &big, &big], [&q, &q, &big], [&f64q, &f64q, &f64q]] {
        assert!(
            matches!(fits(&refused), Support::No(why) if why.contains("CUDA attention kernels"))
        );
    }
    let mut g = Graph::new("big_head");
    let vals: Vec<_> = ["q", "k", "v"]
        .iter()
        .map(|n| g.add_input(n, big.clone()).unwrap())
        .collect();
    let op = Op::Attention {
        scale: 0.1,
        causal: false,
    };
    let outs = g.add_node("attn", op, &vals).unwrap();
    g.set_output("o", outs[0]).unwrap();
    let err = cuda(false)
        .unwrap()
        .prepare(&lower(&g).unwrap(), g.weights())
        .err()
        .expect("a 300-wide head is refused")
        .to_string();
    assert!(
        err.contains("attn") && err.contains("head sizes up to 256"),
        "{err}"
    );
}
