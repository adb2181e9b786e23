//! The emulated device's cuBLASLt (`cuda/emu_gemm.rs`, issue #15) against naive loops written
//! here: FP8 TN GEMMs with scales, bias and tanh-GELU epilogues, an FP8 D with its D scale and
//! amax of D, a batched bf16 GEMM with strides and β, and a request cuBLASLt's rules refuse.
//! Small-integer data keep every expected value exact. No GPU.

use fp8c_core::Fp8Format;
use fp8c_ir::DType;
use fp8c_runtime::cuda::emu_gemm;
use fp8c_runtime::cuda::gemm::{Epilogue, GemmSpec};

fn e4(v: f32) -> u8 {
    fp8c_core::encode_f32(Fp8Format::E4M3, v, true)
}

/// Deterministic small integers in [-3, 3].
fn ints(len: usize, seed: u64) -> Vec<f32> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % 7) as f32 - 3.0
        })
        .collect()
}

/// 16-byte aligned storage for `bytes` bytes.
fn buf(bytes: usize) -> Vec<u128> {
    vec![0u128; bytes.div_ceil(16).max(1)]
}

fn addr<T>(v: &[T]) -> u64 {
    v.as_ptr() as u64
}

/// An E4M3 × E4M3 GEMM of the buffers, D of type `out` (layout fields set by the caller).
fn tn(m: usize, n: usize, k: usize, a: &[u128], b: &[u128], d: &[u128], out: DType) -> GemmSpec {
    GemmSpec::plain(
        m as u64,
        n as u64,
        k as u64,
        addr(a),
        addr(b),
        addr(d),
        DType::F8E4M3,
        out,
    )
}

/// `A [m,k] · B [k,n]` from A stored `[m,k]` and B stored `[n,k]` (TN), in f64.
fn naive_tn(a: &[f32], bt: &[f32], m: usize, n: usize, k: usize) -> Vec<f64> {
    let mut d = vec![0f64; m * n];
    for i in 0..m {
        for j in 0..n {
            d[i * n + j] = (0..k)
                .map(|kk| f64::from(a[i * k + kk]) * f64::from(bt[j * k + kk]))
                .sum();
        }
    }
    d
}

#[test]
fn fp8_gemm_with_scales_and_bias_equals_the_naive_product() {
    let (m, n, k) = (32usize, 16usize, 48usize);
    let (a, bt) = (ints(m * k, 1), ints(n * k, 2));
    let mut qa = buf(m * k);
    let mut qb = buf(n * k);
    let qa8 = bytemuck(&mut qa);
    for (q, v) in qa8.iter_mut().zip(&a) {
        *q = e4(*v);
    }
    let qb8 = bytemuck(&mut qb);
    for (q, v) in qb8.iter_mut().zip(&bt) {
        *q = e4(*v);
    }
    let bias: Vec<u16> = (0..n)
        .map(|j| half::bf16::from_f32(j as f32 - 8.0).to_bits())
        .collect();
    let mut bias_buf = buf(2 * n);
    bytemuck(&mut bias_buf)[..2 * n].copy_from_slice(
        &bias
            .iter()
            .flat_map(|b| b.to_le_bytes())
            .collect::<Vec<u8>>(),
    );
    let (sa, sb) = (0.5f32, 4.0f32);
    let (sa_v, sb_v) = ([sa], [sb]);
    let mut d = buf(4 * m * n);
    for fast_accum in [false, true] {
        let s = GemmSpec {
            trans_b: true,
            a_scale: Some(addr(&sa_v)),
            b_scale: Some(addr(&sb_v)),
            bias: Some((addr(&bias_buf), DType::BF16)),
            epilogue: Epilogue::Bias,
            fast_accum,
            ..tn(m, n, k, &qa, &qb, &d, DType::F32)
        };
        // SAFETY: every pointer is a live host buffer of the spec's sizes.
        unsafe { emu_gemm::run(&s) }.unwrap();
        let got: Vec<f32> = bytemuck(&mut d)[..4 * m * n]
            .chunks(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        let want = naive_tn(&a, &bt, m, n, k);
        for i in 0..m {
            for j in 0..n {
                let w = want[i * n + j] * f64::from(sa * sb) + (j as f64 - 8.0);
                assert_eq!(
                    f64::from(got[i * n + j]),
                    w,
                    "[{i},{j}] fast_accum={fast_accum}"
                );
            }
        }
    }
}

#[test]
fn an_fp8_d_reports_amax_before_its_scale_and_refused_requests_write_nothing() {
    let (m, n, k) = (16usize, 16usize, 16usize);
    let (a, bt) = (ints(m * k, 3), ints(n * k, 4));
    let mut qa = buf(m * k);
    let mut qb = buf(n * k);
    for (q, v) in bytemuck(&mut qa).iter_mut().zip(&a) {
        *q = e4(*v);
    }
    for (q, v) in bytemuck(&mut qb).iter_mut().zip(&bt) {
        *q = e4(*v);
    }
    let mut d = buf(m * n);
    let (one, dscale, mut amax) = ([1f32], [0.25f32], [0f32]);
    let s = GemmSpec {
        trans_b: true,
        a_scale: Some(addr(&one)),
        b_scale: Some(addr(&one)),
        d_scale: Some(addr(&dscale)),
        amax_d: Some(amax.as_mut_ptr() as u64),
        ..tn(m, n, k, &qa, &qb, &d, DType::F8E4M3)
    };
    // SAFETY: live host buffers of the spec's sizes.
    unsafe { emu_gemm::run(&s) }.unwrap();
    let want = naive_tn(&a, &bt, m, n, k);
    let want_amax = want.iter().fold(0f64, |x, v| x.max(v.abs()));
    assert_eq!(
        f64::from(amax[0]),
        want_amax,
        "amax of D before the D scale"
    );
    for (i, (&q, w)) in bytemuck(&mut d)[..m * n].iter().zip(&want).enumerate() {
        assert_eq!(q, e4(*w as f32 * 0.25), "code {i}");
    }
    // E5M2 out of E4M3 x E4M3 is not in cuBLASLt's table: an error, D untouched.
    let before = bytemuck(&mut d)[..m * n].to_vec();
    let refused = GemmSpec {
        d_type: DType::F8E5M2,
        ..s
    };
    // SAFETY: as above.
    let e = unsafe { emu_gemm::run(&refused) }.unwrap_err();
    assert!(e.contains("E5M2 D needs an E5M2 operand"), "{e}");
    assert_eq!(bytemuck(&mut d)[..m * n], before[..]);
}

#[test]
fn batched_bf16_gemm_walks_the_strides_and_accumulates_with_beta() {
    let (m, n, k, batch) = (4usize, 8usize, 8usize, 3usize);
    // Row-major A [m,k] and B [k,n] per batch entry (NN: no FP8 layout rule applies).
    let a = ints(batch * m * k, 5);
    let bm = ints(batch * k * n, 6);
    let to_bf16 = |v: &[f32]| -> Vec<u128> {
        let mut out = buf(2 * v.len());
        let bytes: Vec<u8> = v
            .iter()
            .flat_map(|x| half::bf16::from_f32(*x).to_bits().to_le_bytes())
            .collect();
        bytemuck(&mut out)[..bytes.len()].copy_from_slice(&bytes);
        out
    };
    let (qa, qb) = (to_bf16(&a), to_bf16(&bm));
    let mut d = to_bf16(&vec![1.0; batch * m * n]);
    let s = GemmSpec {
        batch: batch as u64,
        stride_a: (m * k) as u64,
        stride_b: (k * n) as u64,
        stride_d: (m * n) as u64,
        alpha: 2.0,
        beta: 1.0,
        ..GemmSpec::plain(
            m as u64,
            n as u64,
            k as u64,
            addr(&qa),
            addr(&qb),
            addr(&d),
            DType::BF16,
            DType::BF16,
        )
    };
    // SAFETY: live host buffers of the spec's sizes.
    unsafe { emu_gemm::run(&s) }.unwrap();
    let got: Vec<f32> = bytemuck(&mut d)[..2 * batch * m * n]
        .chunks(2)
        .map(|c| half::bf16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f32())
        .collect();
    for bi in 0..batch {
        for i in 0..m {
            for j in 0..n {
                let dot: f32 = (0..k)
                    .map(|kk| a[bi * m * k + i * k + kk] * bm[bi * k * n + kk * n + j])
                    .sum();
                assert_eq!(
                    got[bi * m * n + i * n + j],
                    2.0 * dot + 1.0,
                    "[{bi},{i},{j}]"
                );
            }
        }
    }
}

/// The bytes of a u128 buffer.
fn bytemuck(v: &mut [u128]) -> &mut [u8] {
    // SAFETY: u128 has no padding; any byte pattern is valid for u8; the length is exact.
    unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr().cast::<u8>(), v.len() * 16) }
}
