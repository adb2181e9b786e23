//! The FP8 GEMM with f32 accumulation (`scaled_matmul` without fast accumulation): A's codes
//! are decoded once, B's are decoded per call straight into 16-column panels (each `k × 16`
//! f32, contiguous, in this thread's scratch buffer) that 6×16 tiles of fused multiply-adds
//! read, so no decoded copy of B is ever made.
//!
//! Decoding B as it is packed is what makes this path cheap: B is usually a weight, and its
//! codes are a quarter of the f32 bytes the `gemm` crate would stream (BERT-base's FFN
//! weights come from DRAM on every run), while the panel is the layout the tiles want. The
//! f32 GEMM cannot do the same without packing its weights per call, which costs as much as
//! the product at 32 rows (ARCHITECTURE, session 17).
//!
//! Every output element is one chain of fused multiply-adds over k in order, from +0.0, then
//! multiplied by `alpha` once: the bits depend neither on the thread count nor on how rows and
//! columns are split, and the AVX2 path and the portable one ([`f32::mul_add`]) agree.

use crate::error::KResult;
use crate::linalg::{SendPtr, batched_shape};
use crate::scratch::with_scratch;
use crate::weight_cache::Form;
use fp8c_core::Fp8Format;
use rayon::prelude::*;
use std::mem::MaybeUninit;

/// Columns per panel (two AVX2 registers).
const NR: usize = 16;
/// Rows per tile: 6 × 2 accumulators, two B registers and one broadcast fill the 16 AVX2
/// registers.
const MR: usize = 6;
/// Rows of A per task (a multiple of [`MR`]): 120 rows of k = 768 are 360 KiB, within L2,
/// and each task decodes its panel once for them.
const ROW_BLOCK: usize = 120;
/// Products (m·n·k) from which a product is split over threads.
const PAR_WORK: usize = 1 << 16;

/// Batched numpy matmul `alpha · (a · decode(b))`, f32 accumulation: `a` holds A's values
/// (decoded FP8), `b` B's FP8 codes in format `fmt`, `b_storage` the allocation holding them
/// when they are a whole tensor's bytes (a small 2-D one then has its decoded panels kept
/// between calls, `weight_cache.rs`).
pub(crate) fn matmul(
    a: &[f32],
    a_shape: &[u64],
    (b, b_storage): (&[u8], Option<&fp8c_ir::Storage>),
    b_shape: &[u64],
    fmt: Fp8Format,
    alpha: f32,
) -> KResult<(Vec<f32>, Vec<u64>)> {
    let (s, a_idx, b_idx) = batched_shape(a_shape, b_shape)?;
    let (m, k, n) = (s.m, s.k, s.n);
    let total = a_idx.len() * m * n;
    let mut out: Vec<f32> = Vec::with_capacity(total);
    // One B (a weight) under A's batch dims, A's matrices in order: one product over all the
    // rows (each output element is still one row of A times one column of B).
    let shared = a_idx.len() > 1
        && b_idx.iter().all(|&j| j == b_idx[0])
        && a_idx.iter().enumerate().all(|(i, &j)| i == j);
    let rows = if shared { a_idx.len() * m } else { m };
    if rows * n > 0 {
        let spare = &mut out.spare_capacity_mut()[..total];
        // A 2-D B (a weight): its panels from the cache once it has been seen before.
        let len = n.div_ceil(NR) * k * NR;
        let cached = match b_storage {
            Some(st) if b_shape.len() == 2 && b.len() == k * n => {
                crate::weight_cache::derived(st, Form::Fp8Panels(fmt), (k, n), len, |buf| {
                    for (j, panel) in buf.chunks_exact_mut(k * NR).enumerate() {
                        let c0 = j * NR;
                        decode_panel(b, n, c0, NR.min(n - c0), fmt, panel);
                    }
                })
            }
            _ => None,
        };
        for (bi, ob) in spare.chunks_mut(rows * n).enumerate() {
            let am = &a[a_idx[bi] * m * k..][..rows * k];
            let bm = match &cached {
                Some(p) => B::Panels(p),
                None => B::Codes(&b[b_idx[bi] * k * n..][..k * n], fmt),
            };
            product(am, bm, rows, k, n, alpha, ob);
        }
    }
    // SAFETY: the products above wrote every one of the `total` elements (or there are none).
    unsafe { out.set_len(total) };
    Ok((out, s.out))
}

/// B of one product: `[k, n]` codes in a format, or all its panels decoded already (panel
/// `j` at `j · k · NR`, as [`decode_panel`] writes them).
#[derive(Clone, Copy)]
enum B<'a> {
    Codes(&'a [u8], Fp8Format),
    Panels(&'a [f32]),
}

/// `out[m×n] = alpha · am[m×k] · decode(bm[k×n])`, every element of `out` written.
fn product(
    am: &[f32],
    bm: B<'_>,
    m: usize,
    k: usize,
    n: usize,
    alpha: f32,
    out: &mut [MaybeUninit<f32>],
) {
    let b_ok = match bm {
        B::Codes(c, _) => c.len() == k * n,
        B::Panels(p) => p.len() == n.div_ceil(NR) * k * NR,
    };
    assert!(am.len() == m * k && b_ok && out.len() == m * n);
    let panels = n.div_ceil(NR);
    let blocks = m.div_ceil(ROW_BLOCK);
    let dst = SendPtr(out.as_mut_ptr().cast::<f32>());
    let task = |t: usize| {
        let (rb, j) = (t / panels, t % panels);
        let (r0, c0) = (rb * ROW_BLOCK, j * NR);
        let (rows, w) = (ROW_BLOCK.min(m - r0), NR.min(n - c0));
        let run = |panel: &[f32]| {
            // SAFETY: rows r0..r0+rows, columns c0..c0+w of `out` belong to this task alone
            // (the tasks tile the output), and `out` is m×n (asserted above).
            unsafe {
                let out = Out {
                    ptr: dst.at(r0 * n + c0),
                    ldc: n,
                    w,
                };
                tiles(&am[r0 * k..][..rows * k], k, panel, alpha, out)
            }
        };
        match bm {
            B::Panels(all) => run(&all[j * k * NR..][..k * NR]),
            B::Codes(codes, fmt) => with_scratch::<f32, _>(k * NR, |panel| {
                decode_panel(codes, n, c0, w, fmt, panel);
                run(panel)
            }),
        }
    };
    let tasks = blocks * panels;
    if m.saturating_mul(n).saturating_mul(k) >= PAR_WORK && rayon::current_num_threads() > 1 {
        (0..tasks).into_par_iter().for_each(task);
    } else {
        (0..tasks).for_each(task);
    }
}

/// Decodes columns `c0 .. c0 + w` of the row-major `[k, n]` codes into `panel` (`k × NR`,
/// zero past `w`).
fn decode_panel(bm: &[u8], n: usize, c0: usize, w: usize, fmt: Fp8Format, panel: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if w == NR && std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2 (checked just above).
        return unsafe { decode_panel_avx2(bm, n, c0, fmt, panel) };
    }
    let table = fp8c_core::decode_table(fmt);
    for (kk, row) in panel.chunks_exact_mut(NR).enumerate() {
        let codes = &bm[kk * n + c0..][..w];
        for (j, v) in row.iter_mut().enumerate() {
            *v = codes.get(j).map_or(0.0, |&q| table[usize::from(q)]);
        }
    }
}

/// [`decode_panel`] for whole panels, eight codes at a time: finite codes by arithmetic
/// (`fp8c_core::decode_simd`: the magnitude's bits as an f32 times a power of two, then the sign), a group
/// with an infinity or NaN from the table (its bits, NaN payloads included).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn decode_panel_avx2(bm: &[u8], n: usize, c0: usize, fmt: Fp8Format, panel: &mut [f32]) {
    use fp8c_core::decode_simd::{DecodeLayout, decode8_avx2};
    use std::arch::x86_64::_mm256_storeu_ps;
    let (l, table) = (DecodeLayout::of(fmt), fp8c_core::decode_table(fmt));
    for (kk, row) in panel.chunks_exact_mut(NR).enumerate() {
        let codes = &bm[kk * n + c0..][..NR];
        // SAFETY: `codes` holds 16 bytes, `row` 16 floats; the CPU has AVX2.
        unsafe {
            _mm256_storeu_ps(row.as_mut_ptr(), decode8_avx2(l, table, codes.as_ptr()));
            let hi = decode8_avx2(l, table, codes.as_ptr().add(8));
            _mm256_storeu_ps(row.as_mut_ptr().add(8), hi);
        }
    }
}

/// Where a task's results go: rows `ldc` floats apart from `ptr`, `w ≤ NR` columns each.
#[derive(Clone, Copy)]
struct Out {
    ptr: *mut f32,
    ldc: usize,
    w: usize,
}

impl Out {
    /// The same columns from row `i` on.
    fn rows_from(self, i: usize) -> Out {
        Out {
            ptr: self.ptr.wrapping_add(i * self.ldc),
            ..self
        }
    }
}

/// Every row of `a` (row-major, `k` columns) against one panel: row i's `w` results, times
/// `alpha`, go to `dst + i·ldc`.
///
/// # Safety
/// `dst` must be valid for writes of `a.len() / k` rows of `w ≤ NR` elements at stride
/// `ldc`, touched by no one else during the call; `panel` holds `k × NR` values.
unsafe fn tiles(a: &[f32], k: usize, panel: &[f32], alpha: f32, out: Out) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
        // SAFETY: the CPU has AVX2 and FMA (checked just above); the rest is the caller's.
        return unsafe { tiles_avx2(a, k, panel, alpha, out) };
    }
    // SAFETY: the caller's contract.
    unsafe { tiles_portable(a, k, panel, alpha, out) }
}

/// [`tiles`] without SIMD: the same chains of [`f32::mul_add`], so the same bits.
///
/// # Safety
/// As [`tiles`].
unsafe fn tiles_portable(a: &[f32], k: usize, panel: &[f32], alpha: f32, out: Out) {
    for (i, row) in a.chunks_exact(k).enumerate() {
        for j in 0..out.w {
            let acc = row
                .iter()
                .zip(panel.chunks_exact(NR))
                .fold(0f32, |acc, (&x, p)| x.mul_add(p[j], acc));
            // SAFETY: the caller's contract (row i, column j < w).
            unsafe { out.ptr.add(i * out.ldc + j).write(acc * alpha) };
        }
    }
}

/// [`tiles`] on AVX2 + FMA: [`MR`]-row tiles, each k step two panel loads, one broadcast
/// per row and two fused multiply-adds per row.
///
/// # Safety
/// As [`tiles`], and the CPU must have AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn tiles_avx2(a: &[f32], k: usize, panel: &[f32], alpha: f32, out: Out) {
    let rows = a.len() / k;
    let mut i = 0;
    while i < rows {
        let r = MR.min(rows - i);
        let (ap, cp) = (a[i * k..].as_ptr(), out.rows_from(i));
        // SAFETY: rows i..i+r of `a` exist, and the caller's contract covers `cp`.
        unsafe {
            match r {
                6 => tile::<6>(ap, k, panel, alpha, cp),
                5 => tile::<5>(ap, k, panel, alpha, cp),
                4 => tile::<4>(ap, k, panel, alpha, cp),
                3 => tile::<3>(ap, k, panel, alpha, cp),
                2 => tile::<2>(ap, k, panel, alpha, cp),
                _ => tile::<1>(ap, k, panel, alpha, cp),
            }
        }
        i += r;
    }
}

/// `R` rows (`a + r·k`) times the panel, times `alpha`, into `dst + r·ldc` (`w` columns).
///
/// # Safety
/// `a` must hold `R` rows of `k` values, `panel` `k × NR`, and `dst` be writable as
/// [`tiles`] says; AVX2 and FMA present.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn tile<const R: usize>(a: *const f32, k: usize, panel: &[f32], alpha: f32, out: Out) {
    use std::arch::x86_64::*;
    debug_assert!(panel.len() >= k * NR);
    // SAFETY: the function's contract bounds every pointer below.
    unsafe {
        let mut acc = [[_mm256_setzero_ps(); 2]; R];
        let bp = panel.as_ptr();
        for kk in 0..k {
            let b0 = _mm256_loadu_ps(bp.add(kk * NR));
            let b1 = _mm256_loadu_ps(bp.add(kk * NR + 8));
            for (r, acc) in acc.iter_mut().enumerate() {
                let x = _mm256_broadcast_ss(&*a.add(r * k + kk));
                acc[0] = _mm256_fmadd_ps(x, b0, acc[0]);
                acc[1] = _mm256_fmadd_ps(x, b1, acc[1]);
            }
        }
        let s = _mm256_set1_ps(alpha);
        for (r, acc) in acc.iter().enumerate() {
            let cp = out.ptr.add(r * out.ldc);
            let (v0, v1) = (_mm256_mul_ps(acc[0], s), _mm256_mul_ps(acc[1], s));
            if out.w == NR {
                _mm256_storeu_ps(cp, v0);
                _mm256_storeu_ps(cp.add(8), v1);
            } else {
                let mut t = [0f32; NR];
                _mm256_storeu_ps(t.as_mut_ptr(), v0);
                _mm256_storeu_ps(t.as_mut_ptr().add(8), v1);
                std::ptr::copy_nonoverlapping(t.as_ptr(), cp, out.w);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values whose products and sums are exact in f32, with NaN, ±inf and −0.0 among them.
    fn codes(len: usize, seed: usize) -> Vec<u8> {
        (0..len)
            .map(|i| ((i.wrapping_mul(2_654_435_761).wrapping_add(seed)) >> 7) as u8)
            .collect()
    }

    /// The product as the portable chains compute it, for comparison with the AVX2 tiles.
    fn portable(a: &[f32], b: &[u8], m: usize, k: usize, n: usize, f: Fp8Format) -> Vec<f32> {
        let mut out = vec![0f32; m * n];
        for c0 in (0..n).step_by(NR) {
            let w = NR.min(n - c0);
            let mut panel = vec![0f32; k * NR];
            decode_panel(b, n, c0, w, f, &mut panel);
            // SAFETY: `out` is m×n; rows of w columns from c0 at stride n are in it.
            unsafe {
                let dst = Out {
                    ptr: out.as_mut_ptr().add(c0),
                    ldc: n,
                    w,
                };
                tiles_portable(a, k, &panel, 0.5, dst)
            };
        }
        out
    }

    #[test]
    fn tiles_match_the_portable_chains_bit_for_bit_on_every_edge() {
        let f = Fp8Format::E4M3;
        let t = fp8c_core::decode_table(f);
        for (m, k, n) in [
            (1, 1, 1),
            (7, 33, 17),
            (13, 64, 48),
            (130, 40, 35),
            (6, 300, 16),
        ] {
            let a: Vec<f32> = codes(m * k, 3).iter().map(|&q| t[usize::from(q)]).collect();
            let b = codes(k * n, 11);
            let want = portable(&a, &b, m, k, n, f);
            // Without a storage (codes decoded per call), then three calls on one storage:
            // first and second sighting (decoded per call), third from the panel cache.
            let storage = fp8c_ir::Storage::from_slice(&b);
            for (call, st) in [None, Some(&storage), Some(&storage), Some(&storage)]
                .into_iter()
                .enumerate()
            {
                let shape = [k as u64, n as u64];
                let (got, _) = matmul(&a, &[m as u64, k as u64], (&b, st), &shape, f, 0.5).unwrap();
                let same = got
                    .iter()
                    .zip(&want)
                    .all(|(x, y)| x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()));
                assert!(
                    same,
                    "{m}x{k}x{n}, call {call}: the tiles and the portable chains differ"
                );
            }
        }
    }

    #[test]
    fn panels_decode_every_code_of_both_formats_as_the_table_does() {
        // Every code in every lane position, through the whole-panel (AVX2) path.
        let (k, n) = (256, NR);
        let b: Vec<u8> = (0..k * n).map(|i| (i / n + i % n * 17) as u8).collect();
        for f in [Fp8Format::E4M3, Fp8Format::E5M2] {
            let t = fp8c_core::decode_table(f);
            let mut panel = vec![0f32; k * NR];
            decode_panel(&b, n, 0, NR, f, &mut panel);
            for (i, (&q, v)) in b.iter().zip(&panel).enumerate() {
                let want = t[usize::from(q)];
                assert_eq!(v.to_bits(), want.to_bits(), "{f:?} code {q:#04x} at {i}");
            }
        }
    }

    #[test]
    fn sums_small_integers_exactly_and_propagates_nan() {
        // E4M3 codes 0x38 = 1.0, 0x40 = 2.0, 0x7F = NaN.
        let (m, k, n) = (3, 5, 20);
        let a: Vec<f32> = (0..m * k).map(|i| (i % 4) as f32 - 1.0).collect();
        let mut b = vec![0x38u8; k * n];
        b[2 * n + 19] = 0x40;
        b[4 * n + 3] = 0x7F;
        let (got, shape) = matmul(&a, &[3, 5], (&b, None), &[5, 20], Fp8Format::E4M3, 2.0).unwrap();
        assert_eq!(shape, vec![3, 20]);
        for i in 0..m {
            let row: f32 = a[i * k..][..k].iter().sum();
            assert_eq!(got[i * n], 2.0 * row, "row {i}");
            assert_eq!(
                got[i * n + 19],
                2.0 * (row + a[i * k + 2]),
                "row {i}, column 19"
            );
            assert!(got[i * n + 3].is_nan(), "row {i}, column 3");
        }
    }
}
