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
