//! A model of Hopper's FP8 fast accumulation (cuBLASLt `CUBLASLT_MATMUL_DESC_FAST_ACCUM`, the
//! accumulation TransformerEngine uses in the forward GEMM), for `scaled_matmul { fast_accum }`.
//!
//! With fast accumulation, the FP8 tensor cores keep a GEMM's partial sums in their own
//! accumulator for the whole K loop instead of promoting them to f32 registers; that
//! accumulator keeps about 14 significant bits (DeepSeek-V3 measured "around 14 bits" on
//! H800; Khattak and Mikaitis, "Accurate models of NVIDIA tensor cores", model the H100's FP8
//! inner products as a fused sum aligned to the largest exponent with truncated addends).
//!
//! The model, per output element, K walked in blocks of [`BLOCK`] products (one FP8 `wgmma`
//! k-step):
//! 1. every product `a·b` of the block is exact in f32 (FP8 significands have ≤ 4 bits);
//! 2. the products and the running sum are aligned to the largest exponent `e` among them and
//!    each is truncated toward zero to a multiple of `2^(e - (BITS - 1))`;
//! 3. the truncated terms add exactly (they share one quantum and need ≤ 20 bits), and that
//!    sum is the new running sum.
//!
//! So a product more than `BITS` binary orders below the largest term of its block is lost,
//! the swamping DeepSeek-V3 and issue #15 describe, while the result stays deterministic and
//! independent of the thread count. It is a model, not the hardware's bits: the block size
//! and truncation point are stated here and checked against a GPU by `scripts/gpu-check.sh`
//! when one is lent. A block with a non-finite product adds in plain f32 (so NaN and ±inf
//! propagate as IEEE arithmetic does).

use crate::error::KResult;
use crate::linalg::batched_shape;
use rayon::prelude::*;

/// Products per aligned block (the K of one FP8 `wgmma` instruction).
pub const BLOCK: usize = 32;

/// Significant bits the accumulator keeps (the leading bit included).
pub const BITS: i32 = 14;

/// Batched numpy matmul of decoded FP8 operands with the fast-accumulation model.
///
/// Work is split over rayon's threads by groups of [`LANES`]-column strips of B; a task packs
/// each of its strips once ([`pack_strip`], reading B directly, no decoded copy of it) and runs
/// every row of A over it, [`TILE`] rows at a time. With AVX2 available the same code is
/// compiled for it ([`strip_avx2`]); no step is reassociated or fused (Rust never contracts
/// `a * b + c`), so every path gives the same bits.
#[cfg(test)]
pub(crate) fn matmul(
    a: &[f32],
    a_shape: &[u64],
    b: &[f32],
    b_shape: &[u64],
) -> KResult<(Vec<f32>, Vec<u64>)> {
    matmul_with(a, a_shape, b, b_shape, |x| x)
}

/// [`matmul`] with B given as elements that `value` turns into f32 as B is packed (FP8 codes
/// and their decode table: no decoded copy of B is made).
pub(crate) fn matmul_with<T: Copy + Sync>(
    a: &[f32],
    a_shape: &[u64],
    b: &[T],
    b_shape: &[u64],
    value: impl Fn(T) -> f32 + Sync,
) -> KResult<(Vec<f32>, Vec<u64>)> {
    let (s, a_idx, b_idx) = batched_shape(a_shape, b_shape)?;
    let (m, k, n) = (s.m, s.k, s.n);
    let mut out = vec![0f32; a_idx.len() * m * n];
    if m * n == 0 {
        return Ok((out, s.out));
    }
    // One B (a weight) under A's batch dims, A's matrices in order: one product over all the
    // rows (each output element is still one row of A times one column of B).
    let shared = a_idx.len() > 1
        && b_idx.iter().all(|&j| j == b_idx[0])
        && a_idx.iter().enumerate().all(|(i, &j)| i == j);
    let rows = if shared { a_idx.len() * m } else { m };
    for (bi, ob) in out.chunks_mut(rows * n).enumerate() {
        let am = &a[a_idx[bi] * m * k..][..rows * k];
        let bm = &b[b_idx[bi] * k * n..][..k * n];
        product(am, bm, rows, k, n, &value, ob);
    }
    Ok((out, s.out))
}

/// Products (m·n·k) from which one matrix product is split over threads.
const PAR_WORK: usize = 1 << 16;

/// `out[m×n] = am[m×k] · bm[k×n]` under the model.
fn product<T: Copy + Sync>(
    am: &[f32],
    bm: &[T],
    m: usize,
    k: usize,
    n: usize,
    value: &(impl Fn(T) -> f32 + Sync),
    out: &mut [f32],
) {
    let kp = k.div_ceil(BLOCK) * BLOCK;
    let mut apad = vec![-0.0f32; m * kp];
    let mut a_finite = vec![true; m];
    for (i, dst) in apad.chunks_mut(kp).enumerate() {
        dst[..k].copy_from_slice(&am[i * k..][..k]);
        a_finite[i] = dst.iter().all(|x| x.is_finite());
    }
    let a = Rows {
        pad: &apad,
        finite: &a_finite,
        k,
        kp,
    };
    // Results strip by strip ([strip][row] of LANES columns), scattered into `out` after.
    let strips = n.div_ceil(LANES);
    let mut res = vec![[0f32; LANES]; strips * m];
    let per = if m.saturating_mul(n).saturating_mul(k) >= PAR_WORK {
        strips.div_ceil(rayon::current_num_threads() * 4)
    } else {
        strips
    };
    res.par_chunks_mut(per * m)
        .enumerate()
        .for_each(|(t, dst)| {
            let mut strip = vec![[0f32; LANES]; kp];
            for (g, r) in dst.chunks_mut(m).enumerate() {
                let finite = pack_strip(bm, k, n, (t * per + g) * LANES, value, &mut strip);
                strip_rows(&a, &strip, finite, r);
            }
        });
    for (s, r) in res.chunks(m).enumerate() {
        let (j0, w) = (s * LANES, LANES.min(n - s * LANES));
        for (i, v) in r.iter().enumerate() {
            let dst = &mut out[i * n + j0..][..w];
            // Whole strips as one fixed-size move (a copy of run-time length calls memmove).
            match <&mut [f32; LANES]>::try_from(&mut *dst) {
                Ok(full) => *full = *v,
                Err(_) => dst.copy_from_slice(&v[..w]),
            }
        }
    }
}

/// A's rows padded to whole blocks with −0.0, and whether each row is finite.
struct Rows<'a> {
    pad: &'a [f32],
    finite: &'a [bool],
    /// The true K and the padded one.
    k: usize,
    kp: usize,
}

/// Packs columns `j0 .. j0 + LANES` of the row-major `[k, n]` B into `strip` (zero past n and
/// past k), each as `value` gives it; returns whether every value is finite.
fn pack_strip<T: Copy>(
    bm: &[T],
    k: usize,
    n: usize,
    j0: usize,
    value: &impl Fn(T) -> f32,
    strip: &mut [[f32; LANES]],
) -> bool {
    let w = LANES.min(n - j0);
    for (kk, row) in strip.iter_mut().enumerate().take(k) {
        let cols = &bm[kk * n + j0..][..w];
        // A whole row as one fixed-size array (a copy of run-time length calls memmove).
        *row = match <[T; LANES]>::try_from(cols) {
            Ok(full) => full.map(value),
            Err(_) => std::array::from_fn(|l| cols.get(l).map_or(0.0, |&x| value(x))),
        };
    }
    strip[..k].iter().flatten().all(|x| x.is_finite())
}

/// Every row of A against one packed strip: `out[i]` is row i's [`LANES`] results.
fn strip_rows(a: &Rows<'_>, strip: &[[f32; LANES]], finite: bool, out: &mut [[f32; LANES]]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2 (checked just above).
        return unsafe { strip_avx2(a, strip, finite, out) };
    }
    strip_generic::<false>(a, strip, finite, out);
}

/// [`strip_generic`] compiled for AVX2 (eight f32 lanes in one register), truncating with
/// `roundps` (`f32::trunc`, which AVX2's SSE4.1 lowers to one instruction).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn strip_avx2(a: &Rows<'_>, strip: &[[f32; LANES]], finite: bool, out: &mut [[f32; LANES]]) {
    strip_generic::<true>(a, strip, finite, out);
}

/// `ROUND`: truncate with `f32::trunc` (one instruction with SSE4.1) instead of
/// [`trunc_small`]; both are exact on the scaled terms (|x| < 2^22), so the bits agree.
///
/// K is padded to whole blocks: the B strip with zeros, the A rows with −0.0, so a padded
/// product is −0.0, which leaves every sum, maximum and truncation as it was (x + (−0) = x,
/// signed zeros included). Groups of [`TILE`] rows with finite operands share each B load
/// ([`tile`]); other rows go one by one ([`lanes`]).
#[inline(always)]
fn strip_generic<const ROUND: bool>(
    a: &Rows<'_>,
    strip: &[[f32; LANES]],
    b_finite: bool,
    out: &mut [[f32; LANES]],
) {
    let (k, kp, nrows) = (a.k, a.kp, out.len());
    let row = |i: usize| &a.pad[i * kp..][..kp];
    let mut i = 0;
    while i < nrows {
        if i + TILE <= nrows && b_finite && a.finite[i..i + TILE].iter().all(|&f| f) {
            let acc = tile::<ROUND>(std::array::from_fn(|r| row(i + r)), k, strip);
            out[i..i + TILE].copy_from_slice(&acc);
            i += TILE;
            continue;
        }
        // Finite operands make no NaN product (an overflow to ∞ still takes the exact path
        // through the maximum): the NaN watch can go.
        out[i] = if a.finite[i] && b_finite {
            lanes::<ROUND, true>(row(i), k, strip)
        } else {
            lanes::<ROUND, false>(row(i), k, strip)
        };
        i += 1;
    }
}

/// Rows computed together by [`tile`].
const TILE: usize = 4;

/// [`lanes`] with finite operands for [`TILE`] rows at once, each B row loaded once for all
/// of them, and the products computed twice (for the maximum, then for the truncated sum)
/// rather than stored: every step stays in registers, and the rows are independent chains.
/// The same bits as [`lanes`] row by row: the maxima and the exact integer sums do not depend
/// on their order, and a row whose block leaves the f32 range takes [`block`] as there.
#[inline(always)]
fn tile<const ROUND: bool>(
    ars: [&[f32]; TILE],
    k: usize,
    strip: &[[f32; LANES]],
) -> [[f32; LANES]; TILE] {
    let trunc = |x: f32| if ROUND { x.trunc() } else { trunc_small(x) };
    let mut acc = [[0f32; LANES]; TILE];
    // Plain indexed loops over the fixed-size arrays below: `array::map` and `from_fn` were
    // left as calls (compiled without AVX2) once per block.
    for kb in 0..ars[0].len() / BLOCK {
        let rows = &strip[kb * BLOCK..][..BLOCK];
        let mut chunks: [&[f32]; TILE] = [&[]; TILE];
        for (c, a) in chunks.iter_mut().zip(&ars) {
            *c = &a[kb * BLOCK..][..BLOCK];
        }
        let mut big = [[0f32; LANES]; TILE];
        for r in 0..TILE {
            for l in 0..LANES {
                big[r][l] = acc[r][l].abs();
            }
        }
        for (kk, row) in rows.iter().enumerate() {
            for r in 0..TILE {
                let x = chunks[r][kk];
                for l in 0..LANES {
                    let m = (x * row[l]).abs();
                    big[r][l] = if m > big[r][l] { m } else { big[r][l] };
                }
            }
        }
        let mut fast = [true; TILE];
        let mut inv = [[0f32; LANES]; TILE];
        let mut units = [[0f32; LANES]; TILE];
        for r in 0..TILE {
            for l in 0..LANES {
                let e = field(big[r][l]);
                fast[r] &= e == 0 || (13..=254).contains(&e);
                inv[r][l] =
                    f32::from_bits((127 + 127 + (BITS as u32 - 1) - e.clamp(13, 254)) << 23);
                units[r][l] = trunc(acc[r][l] * inv[r][l]);
            }
        }
        for (kk, row) in rows.iter().enumerate() {
            for r in 0..TILE {
                let x = chunks[r][kk];
                for l in 0..LANES {
                    units[r][l] += trunc((x * row[l]) * inv[r][l]);
                }
            }
        }
        let len = BLOCK.min(k - kb * BLOCK);
        for r in 0..TILE {
            if fast[r] {
                for l in 0..LANES {
                    acc[r][l] = units[r][l] / inv[r][l];
                }
            } else {
                for l in 0..LANES {
                    let mut col = [0f32; BLOCK];
                    for (kk, c) in col.iter_mut().enumerate() {
                        *c = chunks[r][kk] * rows[kk][l];
                    }
                    acc[r][l] = block(acc[r][l], &col[..len]);
                }
            }
        }
    }
    acc
}

/// Output columns computed side by side (SIMD lanes): every step below is lane-wise.
const LANES: usize = 8;

/// `x` truncated toward zero, for finite |x| < 2^22, in plain f32 arithmetic that vectorizes
/// (Rust's saturating `as i32` and libm's `truncf` do not on baseline x86-64): adding and
/// subtracting 2^23 rounds |x| to the nearest integer, one less when that rounded up.
#[inline(always)]
fn trunc_small(x: f32) -> f32 {
    const TWO_23: f32 = 8_388_608.0;
    let a = x.abs();
    let r = (a + TWO_23) - TWO_23;
    let r = if r > a { r - 1.0 } else { r };
    r.copysign(x)
}

/// The biased exponent field of an f32 (0: zero or subnormal, 255: inf or NaN).
fn field(x: f32) -> u32 {
    (x.to_bits() >> 23) & 0xff
}

/// Independent partial sums per block: the maxima and the exact integer sums below do not
/// depend on their order, and four chains keep the vector units busy.
const PARTS: usize = 4;

/// `out[l] = dot(a_row, column l of the packed strip)` for the lanes of `out`, with the same
/// result as [`dot`] lane by lane. `ar` and `strip` are padded to whole blocks (see
/// [`strip_generic`]); `k` is the true length.
#[inline(always)]
///
/// `FINITE`: every operand is finite, so no product is NaN and the sums that watch for one
/// are skipped.
fn lanes<const ROUND: bool, const FINITE: bool>(
    ar: &[f32],
    k: usize,
    strip: &[[f32; LANES]],
) -> [f32; LANES] {
    let trunc = |x: f32| if ROUND { x.trunc() } else { trunc_small(x) };
    let mut acc = [0f32; LANES];
    let mut prods = [[0f32; LANES]; BLOCK];
    for (kb, chunk) in ar.chunks_exact(BLOCK).enumerate() {
        let rows = &strip[kb * BLOCK..][..BLOCK];
        // The largest magnitude per lane gives the largest exponent (f32 max vectorizes on
        // plain SSE2; an integer max of exponent fields would not). A NaN product makes the
        // lane's plain sum NaN (f32::max would skip it); an infinite one makes the maximum
        // infinite. Both send the lane to the exact path below.
        let mut big = [[0f32; LANES]; PARTS];
        let mut sum = [[0f32; LANES]; PARTS];
        big[0] = acc.map(f32::abs);
        for c in 0..BLOCK / PARTS {
            for q in 0..PARTS {
                let kk = c * PARTS + q;
                let (x, row) = (chunk[kk], rows[kk]);
                for l in 0..LANES {
                    let v = x * row[l];
                    prods[kk][l] = v;
                    // A plain compare (one maxps); NaN is watched by the sum.
                    let m = v.abs();
                    big[q][l] = if m > big[q][l] { m } else { big[q][l] };
                    if !FINITE {
                        sum[q][l] += v;
                    }
                }
            }
        }
        let emax: [u32; LANES] = std::array::from_fn(|l| {
            let s = (sum[0][l] + sum[1][l]) + (sum[2][l] + sum[3][l]);
            let b = big[0][l].max(big[1][l]).max(big[2][l].max(big[3][l]));
            if !FINITE && s.is_nan() { 255 } else { field(b) }
        });
        // The f32 path of `block` for every lane at once when every lane's alignment allows
        // it (fields 13..=254; an all-zero lane, field 0, adds zeros at any quantum). The
        // truncated terms are integers below 2^14 in magnitude, at most BLOCK + 1 of them:
        // every partial sum is exact, so their order does not matter.
        if emax.iter().all(|&e| e == 0 || (13..=254).contains(&e)) {
            let inv =
                emax.map(|e| f32::from_bits((127 + 127 + (BITS as u32 - 1) - e.max(13)) << 23));
            let mut units = [[-0.0f32; LANES]; PARTS];
            for l in 0..LANES {
                units[0][l] = trunc(acc[l] * inv[l]);
            }
            for c in 0..BLOCK / PARTS {
                for q in 0..PARTS {
                    let p = &prods[c * PARTS + q];
                    for l in 0..LANES {
                        units[q][l] += trunc(p[l] * inv[l]);
                    }
                }
            }
            for l in 0..LANES {
                let u = (units[0][l] + units[1][l]) + (units[2][l] + units[3][l]);
                acc[l] = u / inv[l];
            }
        } else {
            let len = BLOCK.min(k - kb * BLOCK);
            for l in 0..LANES {
                let mut col = [0f32; BLOCK];
                for (c, p) in col.iter_mut().zip(&prods[..len]) {
                    *c = p[l];
                }
                acc[l] = block(acc[l], &col[..len]);
            }
        }
    }
    acc
}

/// One output element: `Σ a[i]·b[i]` accumulated as the module describes, one lane at a
/// time (the reference [`lanes`] is checked against).
#[cfg(test)]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = 0f32;
    let mut prods = [0f32; BLOCK];
    for (ca, cb) in a.chunks(BLOCK).zip(b.chunks(BLOCK)) {
        let p = &mut prods[..ca.len()];
        for ((pi, &x), &y) in p.iter_mut().zip(ca).zip(cb) {
            *pi = x * y;
        }
        acc = block(acc, p);
    }
    acc
}

/// The running sum `acc` plus one block of products `p`, aligned and truncated.
///
/// Every term is a product of decoded FP8 values or a running sum of such terms truncated to
/// a quantum of at least 2^-45, so nonzero terms are normal f32 and the largest biased
/// exponent field gives the block's alignment; scaling by the inverse quantum (a power of two)
/// and converting to an integer truncates toward zero exactly.
fn block(acc: f32, p: &[f32]) -> f32 {
    let emax = p.iter().fold(field(acc), |e, &v| e.max(field(v)));
    match emax {
        0 if acc == 0.0 && p.iter().all(|&v| v == 0.0) => return acc,
        // A non-finite term: IEEE arithmetic decides the result.
        255 => return p.iter().fold(acc, |s, &v| s + v),
        _ => {}
    }
    // Quantum 2^(e - (BITS - 1)) with e = emax - 127 (a zero field: the subnormal range).
    let q_exp = emax.max(1) as i32 - 127 - (BITS - 1);
    if (-127..=126).contains(&q_exp) {
        // In f32: each term scaled by 1/quantum is below 2^BITS and its truncation exact;
        // the sum of at most BLOCK + 1 of them stays below 2^21, exact in f32.
        let inv = f32::from_bits(((127 - q_exp) as u32) << 23);
        let units = p
            .iter()
            .fold(trunc_small(acc * inv), |s, &v| s + trunc_small(v * inv));
        units / inv
    } else {
        let inv = 2f64.powi(-q_exp);
        let units = p.iter().fold((f64::from(acc) * inv).trunc(), |s, &v| {
            s + (f64::from(v) * inv).trunc()
        });
        (units / inv) as f32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values with 4 significant bits over a wide exponent range (like decoded FP8), signs
    /// mixed, some zeros, from a fixed LCG.
    fn fp8_like(len: usize, seed: u64) -> Vec<f32> {
        let mut x = seed;
        (0..len)
            .map(|_| {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let r = (x >> 33) as u32;
                if r.is_multiple_of(11) {
                    return 0.0;
                }
                let mant = 8 + (r % 8) as i32; // 1.000 .. 1.111 in binary
                let exp = ((r >> 3) % 24) as i32 - 12;
                let sign = if (r >> 8) & 1 == 1 { -1.0 } else { 1.0 };
                sign * mant as f32 * 2f32.powi(exp - 3)
            })
            .collect()
    }

    #[test]
    fn side_by_side_lanes_equal_the_one_lane_model() {
        // Five rows: a tile of four and one row alone.
        let (m, k, n) = (5, 100, 13);
        let a = fp8_like(m * k, 1);
        let mut b = fp8_like(k * n, 2);
        b[5 * n + 3] = f32::INFINITY; // one column takes the non-finite path
        b[7 * n + 4] = 2f32.powi(-60); // one column far below FP8's range: the f64 path
        let kp = k.div_ceil(BLOCK) * BLOCK;
        let mut pad = vec![-0.0f32; m * kp];
        for i in 0..m {
            pad[i * kp..][..k].copy_from_slice(&a[i * k..][..k]);
        }
        let rows = Rows {
            pad: &pad,
            finite: &[true; 5],
            k,
            kp,
        };
        for j0 in (0..n).step_by(LANES) {
            let mut strip = vec![[0f32; LANES]; kp];
            let finite = pack_strip(&b, k, n, j0, &|x| x, &mut strip);
            let mut generic = vec![[0f32; LANES]; m];
            strip_generic::<false>(&rows, &strip, finite, &mut generic);
            let mut dispatched = vec![[0f32; LANES]; m];
            strip_rows(&rows, &strip, finite, &mut dispatched);
            let bits = |v: &[[f32; LANES]]| -> Vec<u32> {
                v.iter().flatten().map(|x| x.to_bits()).collect()
            };
            assert_eq!(bits(&generic), bits(&dispatched), "strip at {j0}");
            for (i, got) in generic.iter().enumerate() {
                for (l, got) in got.iter().enumerate().take(LANES.min(n - j0)) {
                    let col: Vec<f32> = (0..k).map(|kk| b[kk * n + j0 + l]).collect();
                    let want = dot(&a[i * k..][..k], &col);
                    assert!(
                        got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
                        "row {i} column {}: {got} vs {want}",
                        j0 + l
                    );
                }
            }
        }
    }

    /// The whole matmul (row blocks, packing, padding, partial sums, the AVX2 path where the
    /// CPU has it) against the one-lane model, bit for bit, over shapes around the block and
    /// lane sizes, batches, and rows that sum to signed zeros.
    #[test]
    fn the_blocked_matmul_equals_the_one_lane_model_bit_for_bit() {
        for (batch, m, k, n) in [(1, 1, 1, 1), (2, 3, 31, 9), (1, 17, 64, 8), (3, 5, 97, 17)] {
            let mut a = fp8_like(batch * m * k, 3 + k as u64);
            let b = fp8_like(batch * k * n, 5 + n as u64);
            // Row 0 of batch 0: −0.0 everywhere (its outputs must stay −0.0 or +0.0 as the
            // model says).
            a[..k].fill(-0.0);
            // Row 5 (inside a tile of rows) far below FP8's range: its blocks take the exact
            // path, next to rows that take the f32 one.
            if m > 5 {
                for x in &mut a[5 * k..6 * k] {
                    *x *= 2f32.powi(-110);
                }
            }
            let shape = |x: usize, y: usize| vec![batch as u64, x as u64, y as u64];
            let (out, _) = matmul(&a, &shape(m, k), &b, &shape(k, n)).unwrap();
            for bi in 0..batch {
                for i in 0..m {
                    for j in 0..n {
                        let row = &a[(bi * m + i) * k..][..k];
                        let col: Vec<f32> = (0..k).map(|kk| b[(bi * k + kk) * n + j]).collect();
                        let want = dot(row, &col);
                        let got = out[(bi * m + i) * n + j];
                        assert_eq!(
                            got.to_bits(),
                            want.to_bits(),
                            "{batch}x{m}x{k}x{n} [{bi},{i},{j}]"
                        );
                    }
                }
            }
        }
    }

    /// A weight shared by A's batch (`[batch, m, k] · [k, n]`, one product over all rows)
    /// gives each matrix's own product.
    #[test]
    fn a_shared_b_gives_each_matrix_its_own_product() {
        let (batch, m, k, n) = (3, 5, 70, 11);
        let a = fp8_like(batch * m * k, 11);
        let b = fp8_like(k * n, 12);
        let (all, shape) = matmul(&a, &[3, 5, 70], &b, &[70, 11]).unwrap();
        assert_eq!(shape, vec![3, 5, 11]);
        for bi in 0..batch {
            let (one, _) = matmul(&a[bi * m * k..][..m * k], &[5, 70], &b, &[70, 11]).unwrap();
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&all[bi * m * n..][..m * n]), bits(&one), "matrix {bi}");
        }
    }

    #[test]
    fn small_truncation_rounds_toward_zero() {
        for (x, t) in [
            (2.5, 2.0),
            (-2.5, -2.0),
            (2.999, 2.0),
            (-0.75, -0.0),
            (7.0, 7.0),
        ] {
            assert_eq!(trunc_small(x), t);
        }
        assert_eq!(trunc_small(4_194_303.5), 4_194_303.0);
    }

    #[test]
    fn non_finite_terms_propagate_and_zeros_stay_zero() {
        assert_eq!(dot(&[0.0; 40], &[1.0; 40]), 0.0);
        assert_eq!(dot(&[1.0, f32::INFINITY], &[1.0, 1.0]), f32::INFINITY);
        assert!(dot(&[f32::INFINITY, 1.0], &[0.0, 1.0]).is_nan());
        assert!(dot(&[f32::NAN; 3], &[1.0; 3]).is_nan());
        // 2^-30 · 2^-2: a product far below 1 keeps its 14 bits when it is the largest.
        let tiny = 2f32.powi(-30) * (1.0 + 2f32.powi(-3));
        assert_eq!(dot(&[tiny, tiny], &[0.25, 0.25]), tiny * 0.5);
    }
}
