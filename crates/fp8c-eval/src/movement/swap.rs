//! `transpose` perms that swap the last two groups of axes (a weight's `[k, n] → [n, k]`, an
//! attention key's `[b, h, s, d] → [b, h, d, s]`, FP8 `cast_transpose`): a batch of 2-D
//! transposes, copied in square tiles so both the rows read and the rows written stay in
//! cache, instead of the general per-element gather.

use rayon::prelude::*;

/// Side of a tile, in elements: 32 rows of 32 u32 are 4 KiB, read and written whole.
const TILE: usize = 32;
/// Elements from which the batch's tile rows are spread over threads.
const PAR_MIN: usize = 1 << 16;

/// A transpose that is a batch of 2-D transposes: `batch` matrices of `rows × cols` become
/// `cols × rows`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Swap {
    pub batch: usize,
    pub rows: usize,
    pub cols: usize,
}

/// The [`Swap`] that `perm` over `dims` is, if it is one: size-1 axes dropped, input axes that
/// stay adjacent and in order in the output merged, and what is left must be leading axes in
/// place, then the last two swapped. `None` for anything else (the identity included).
pub(crate) fn swap_of(dims: &[usize], perm: &[usize]) -> Option<Swap> {
    // Output order of the input axes that are not size 1.
    let order: Vec<usize> = perm.iter().copied().filter(|&a| dims[a] != 1).collect();
    // Runs of consecutive input axes in the output order: each run is one merged axis.
    let mut runs: Vec<(usize, usize)> = Vec::new(); // (first input axis, size)
    let mut prev: Option<usize> = None;
    for &a in &order {
        match (prev, runs.last_mut()) {
            (Some(p), Some(run)) if a == next_kept(dims, p) => run.1 *= dims[a],
            _ => runs.push((a, dims[a])),
        }
        prev = Some(a);
    }
    let r = runs.len();
    if r < 2 {
        return None;
    }
    // In input order the runs must be: the leading ones as in the output, then the output's
    // last run, then its second-to-last.
    let (lead, tail) = runs.split_at(r - 2);
    let in_place = lead.windows(2).all(|w| w[0].0 < w[1].0)
        && lead.last().is_none_or(|l| l.0 < tail[1].0)
        && tail[1].0 < tail[0].0;
    in_place.then(|| Swap {
        batch: lead.iter().map(|l| l.1).product(),
        rows: tail[1].1,
        cols: tail[0].1,
    })
}

/// The next input axis after `a` that is not size 1 (`dims.len()` if none).
fn next_kept(dims: &[usize], a: usize) -> usize {
    (a + 1..dims.len())
        .find(|&b| dims[b] != 1)
        .unwrap_or(dims.len())
}

/// `src` (`batch × rows × cols`, row-major) transposed per matrix.
pub(crate) fn swap<T: Copy + Send + Sync>(src: &[T], s: Swap) -> Vec<T> {
    let Swap { batch, rows, cols } = s;
    let n = batch * rows * cols;
    assert_eq!(src.len(), n, "swap: source size");
    let mut out: Vec<T> = Vec::with_capacity(n);
    if n == 0 {
        return out;
    }
    // One task per band of TILE output rows (TILE source columns) of one matrix.
    let bands = cols.div_ceil(TILE);
    let spare = &mut out.spare_capacity_mut()[..n];
    let band = |(t, dst): (usize, &mut [std::mem::MaybeUninit<T>])| {
        let (b, c0) = (t / bands, (t % bands) * TILE);
        let m = &src[b * rows * cols..][..rows * cols];
        let h = TILE.min(cols - c0);
        for r0 in (0..rows).step_by(TILE) {
            let w = TILE.min(rows - r0);
            if w == TILE && h == TILE {
                // SAFETY: source rows r0..r0+TILE, columns c0..c0+TILE are in `m` (a whole
                // tile), and destination rows 0..TILE of this band, columns r0..r0+TILE, are
                // in `dst`, which this task holds alone.
                let done = unsafe {
                    whole_tile(
                        m.as_ptr().add(r0 * cols + c0),
                        cols,
                        dst.as_mut_ptr().add(r0).cast::<T>(),
                        rows,
                    )
                };
                if done {
                    continue;
                }
            }
            for c in 0..h {
                let row = &mut dst[c * rows + r0..][..w];
                for (r, o) in row.iter_mut().enumerate() {
                    o.write(m[(r0 + r) * cols + c0 + c]);
                }
            }
        }
    };
    // Band t of matrix b is output rows c0..c0+h of matrix b: TILE·rows elements (fewer for
    // the last band), so chunks of TILE·rows line up with the bands except at each matrix's
    // end; split per matrix first.
    let per_matrix = spare
        .chunks_mut(rows * cols)
        .enumerate()
        .flat_map(|(b, m)| {
            m.chunks_mut(TILE * rows)
                .enumerate()
                .map(move |(i, d)| (b * bands + i, d))
        });
    if n >= PAR_MIN {
        per_matrix
            .collect::<Vec<_>>()
            .into_par_iter()
            .for_each(band);
    } else {
        per_matrix.for_each(band);
    }
    // SAFETY: the bands tile the output (each matrix's `cols` rows of `rows` elements), and
    // each band wrote all of its rows.
    unsafe { out.set_len(n) };
    out
}

/// Transposes one whole [`TILE`]×[`TILE`] tile (source at `src`, rows `sstride` apart; its
/// transpose to `dst`, rows `dstride` apart) as 8×8 blocks where there is a kernel for `T`'s
/// size: AVX2 shuffles for 4-byte elements, eight-byte word swaps for 1-byte ones (FP8
/// codes). Returns false, having written nothing, for other sizes.
///
/// # Safety
/// The tile's `TILE` rows of `TILE` elements must be readable at `src` and writable at `dst`.
unsafe fn whole_tile<T: Copy>(src: *const T, sstride: usize, dst: *mut T, dstride: usize) -> bool {
    match size_of::<T>() {
        #[cfg(target_arch = "x86_64")]
        4 if std::arch::is_x86_feature_detected!("avx2") => {
            // SAFETY: the caller's contract; AVX2 is present (checked just above).
            unsafe { by_blocks(src.cast(), sstride, dst.cast(), dstride, t8x8_avx2) };
            true
        }
        1 => {
            // SAFETY: the caller's contract.
            unsafe { by_blocks(src.cast(), sstride, dst.cast(), dstride, t8x8_bytes) };
            true
        }
        _ => false,
    }
}

/// Every 8×8 block of a whole tile through `kernel` (arguments as [`whole_tile`]'s; the block
/// at source rows `bi..`, columns `bj..` goes to destination rows `bj..`, columns `bi..`).
///
/// # Safety
/// As [`whole_tile`], and `kernel`'s own requirements (the CPU features it is built for).
unsafe fn by_blocks<E>(
    src: *const E,
    sstride: usize,
    dst: *mut E,
    dstride: usize,
    kernel: unsafe fn(*const E, usize, *mut E, usize),
) {
    for bi in (0..TILE).step_by(8) {
        for bj in (0..TILE).step_by(8) {
            // SAFETY: the block lies within the tile (the caller's contract).
            unsafe {
                kernel(
                    src.add(bi * sstride + bj),
                    sstride,
                    dst.add(bj * dstride + bi),
                    dstride,
                )
            };
        }
    }
}

/// An 8×8 block of 4-byte elements transposed with AVX2 shuffles (bit patterns moved as they
/// are; no arithmetic).
///
/// # Safety
/// Eight rows of eight elements readable at `s` (stride `ss`) and writable at `d` (stride
/// `ds`); AVX2 present.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn t8x8_avx2(s: *const f32, ss: usize, d: *mut f32, ds: usize) {
    use std::arch::x86_64::*;
    // SAFETY: the function's contract.
    unsafe {
        let r: [__m256; 8] = std::array::from_fn(|i| _mm256_loadu_ps(s.add(i * ss)));
        let t = [
            _mm256_unpacklo_ps(r[0], r[1]),
            _mm256_unpackhi_ps(r[0], r[1]),
            _mm256_unpacklo_ps(r[2], r[3]),
            _mm256_unpackhi_ps(r[2], r[3]),
            _mm256_unpacklo_ps(r[4], r[5]),
            _mm256_unpackhi_ps(r[4], r[5]),
            _mm256_unpacklo_ps(r[6], r[7]),
            _mm256_unpackhi_ps(r[6], r[7]),
        ];
        let u = [
            _mm256_shuffle_ps::<0x44>(t[0], t[2]),
            _mm256_shuffle_ps::<0xEE>(t[0], t[2]),
            _mm256_shuffle_ps::<0x44>(t[1], t[3]),
            _mm256_shuffle_ps::<0xEE>(t[1], t[3]),
            _mm256_shuffle_ps::<0x44>(t[4], t[6]),
            _mm256_shuffle_ps::<0xEE>(t[4], t[6]),
            _mm256_shuffle_ps::<0x44>(t[5], t[7]),
            _mm256_shuffle_ps::<0xEE>(t[5], t[7]),
        ];
        for i in 0..4 {
            _mm256_storeu_ps(
                d.add(i * ds),
                _mm256_permute2f128_ps::<0x20>(u[i], u[i + 4]),
            );
            _mm256_storeu_ps(
                d.add((i + 4) * ds),
                _mm256_permute2f128_ps::<0x31>(u[i], u[i + 4]),
            );
        }
    }
}

/// An 8×8 block of bytes transposed as eight 64-bit words (one per row): three rounds that
/// swap 1-, 2- and 4-byte units between rows 1, 2 and 4 apart.
///
/// # Safety
/// Eight rows of eight bytes readable at `s` (stride `ss`) and writable at `d` (stride `ds`).
unsafe fn t8x8_bytes(s: *const u8, ss: usize, d: *mut u8, ds: usize) {
    // SAFETY: the function's contract (unaligned 8-byte reads and writes).
    let mut r: [u64; 8] = std::array::from_fn(|i| {
        u64::from_le(unsafe { s.add(i * ss).cast::<u64>().read_unaligned() })
    });
    for (dist, shift, mask) in [
        (1, 8, 0x00FF_00FF_00FF_00FFu64),
        (2, 16, 0x0000_FFFF_0000_FFFF),
        (4, 32, 0x0000_0000_FFFF_FFFF),
    ] {
        for i in (0..8).filter(|i| i & dist == 0) {
            let (a, b) = (r[i], r[i + dist]);
            let t = ((a >> shift) ^ b) & mask;
            r[i + dist] = b ^ t;
            r[i] = a ^ (t << shift);
        }
    }
    for (i, w) in r.iter().enumerate() {
        // SAFETY: as above.
        unsafe { d.add(i * ds).cast::<u64>().write_unaligned(w.to_le()) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The transpose by definition: out[perm-ordered index] = src[index].
    fn naive(src: &[u32], dims: &[usize], perm: &[usize]) -> Vec<u32> {
        let out_dims: Vec<usize> = perm.iter().map(|&a| dims[a]).collect();
        let n: usize = dims.iter().product();
        let mut st = vec![1usize; dims.len()];
        for d in (0..dims.len().saturating_sub(1)).rev() {
            st[d] = st[d + 1] * dims[d + 1];
        }
        (0..n)
            .map(|mut o| {
                let mut off = 0;
                for (k, &od) in out_dims.iter().enumerate().rev() {
                    off += (o % od) * st[perm[k]];
                    o /= od;
                }
                src[off]
            })
            .collect()
    }

    #[test]
    fn finds_the_swaps_and_only_them() {
        let s = |batch, rows, cols| Some(Swap { batch, rows, cols });
        assert_eq!(swap_of(&[3, 5], &[1, 0]), s(1, 3, 5));
        assert_eq!(swap_of(&[2, 4, 3, 5], &[0, 1, 3, 2]), s(8, 3, 5));
        assert_eq!(swap_of(&[2, 3, 4, 5], &[2, 3, 0, 1]), s(1, 6, 20));
        assert_eq!(swap_of(&[2, 1, 3, 5], &[0, 3, 1, 2]), s(2, 3, 5));
        assert_eq!(swap_of(&[2, 3, 4], &[0, 1, 2]), None);
        assert_eq!(swap_of(&[2, 3, 4], &[2, 1, 0]), None);
        assert_eq!(swap_of(&[2, 3, 4, 5], &[0, 2, 1, 3]), None);
        assert_eq!(swap_of(&[2, 3, 4], &[1, 0, 2]), None);
    }

    #[test]
    fn whole_tiles_of_bytes_and_words_match_the_definition() {
        // Whole 32×32 tiles and ragged edges, for the byte and the word kernels.
        for (rows, cols) in [(64, 96), (70, 33), (32, 32), (100, 64)] {
            let n = rows * cols;
            let s = Swap {
                batch: 1,
                rows,
                cols,
            };
            let words: Vec<u32> = (0..n as u32)
                .map(|i| i.wrapping_mul(2_654_435_761))
                .collect();
            let bytes: Vec<u8> = words.iter().map(|&w| (w >> 13) as u8).collect();
            let want = naive(&words, &[rows, cols], &[1, 0]);
            assert_eq!(swap(&words, s), want, "{rows}x{cols} words");
            let want_bytes: Vec<u8> = want.iter().map(|&w| (w >> 13) as u8).collect();
            assert_eq!(swap(&bytes, s), want_bytes, "{rows}x{cols} bytes");
        }
    }

    #[test]
    fn swaps_match_the_definition() {
        for (dims, perm) in [
            (vec![3, 5], vec![1, 0]),
            (vec![70, 33], vec![1, 0]),
            (vec![2, 3, 37, 65], vec![0, 1, 3, 2]),
            (vec![2, 1, 40, 3], vec![0, 3, 1, 2]),
            (vec![300, 300], vec![1, 0]),
        ] {
            let n: usize = dims.iter().product();
            let src: Vec<u32> = (0..n as u32).collect();
            let s = swap_of(&dims, &perm).expect("a swap");
            assert_eq!(
                swap(&src, s),
                naive(&src, &dims, &perm),
                "{dims:?} {perm:?}"
            );
        }
    }
}
