//! numpy broadcasting: the output shape of broadcast inputs and an iteration plan that maps
//! every output element to the element it reads in each input.
//!
//! A [`Plan`] collapses the output to as few dims as possible (size-1 dims dropped, adjacent
//! dims merged where every input walks them contiguously or not at all), then iterates rows of
//! the last collapsed dim. Rows are independent, so large maps run on rayon's pool without any
//! effect on the result.

use crate::data::{PAR_MIN, numel};
use crate::error::{KResult, shape_err};
use rayon::prelude::*;
use std::mem::MaybeUninit;

/// The numpy broadcast of several shapes (right-aligned; a dim of 1 stretches).
pub(crate) fn broadcast_shapes(shapes: &[&[u64]]) -> KResult<Vec<u64>> {
    let rank = shapes.iter().map(|s| s.len()).max().unwrap_or(0);
    let mut out = vec![1u64; rank];
    for s in shapes {
        let off = rank - s.len();
        for (i, &d) in s.iter().enumerate() {
            let o = &mut out[off + i];
            if *o == 1 {
                *o = d;
            } else if d != 1 && d != *o {
                return shape_err!("shapes {} do not broadcast", fmt_shapes(shapes));
            }
        }
    }
    Ok(out)
}

fn fmt_shapes(shapes: &[&[u64]]) -> String {
    shapes
        .iter()
        .map(|s| format!("{s:?}"))
        .collect::<Vec<_>>()
        .join(" and ")
}

/// How each input of a broadcast is read while walking the output in row-major order.
#[derive(Clone, Debug)]
pub(crate) struct Plan {
    /// Collapsed output dims (at least one).
    dims: Vec<usize>,
    /// Per input, its element stride along each collapsed dim (0 where broadcast).
    strides: Vec<Vec<usize>>,
    numel: usize,
}

impl Plan {
    /// A plan reading `inputs` broadcast into `out` (each must broadcast to exactly `out`).
    pub(crate) fn new(out: &[u64], inputs: &[&[u64]]) -> KResult<Plan> {
        let n = numel(out)?;
        let rank = out.len();
        let mut dims: Vec<usize> = Vec::with_capacity(rank);
        let mut strides: Vec<Vec<usize>> = vec![Vec::with_capacity(rank); inputs.len()];
        // Per input, contiguous strides of its own shape, aligned to the output's dims.
        let mut aligned: Vec<Vec<usize>> = Vec::with_capacity(inputs.len());
        for s in inputs {
            if s.len() > rank {
                return shape_err!("shape {s:?} does not broadcast to {out:?}");
            }
            let off = rank - s.len();
            let mut st = vec![0usize; rank];
            let mut acc = 1usize;
            for i in (0..s.len()).rev() {
                let d = s[i];
                if d != 1 && d != out[off + i] {
                    return shape_err!("shape {s:?} does not broadcast to {out:?}");
                }
                st[off + i] = if d == 1 { 0 } else { acc };
                acc *= d as usize;
            }
            aligned.push(st);
        }
        for (d, &size) in out.iter().enumerate() {
            if size == 1 {
                continue;
            }
            let size = size as usize;
            let mergeable = !dims.is_empty()
                && aligned.iter().enumerate().all(|(i, st)| {
                    let prev = *strides[i].last().unwrap_or(&0);
                    prev == st[d] * size
                });
            if mergeable {
                let last = dims.len() - 1;
                dims[last] *= size;
                for (i, st) in aligned.iter().enumerate() {
                    let l = strides[i].len() - 1;
                    strides[i][l] = st[d];
                }
            } else {
                dims.push(size);
                for (i, st) in aligned.iter().enumerate() {
                    strides[i].push(st[d]);
                }
            }
        }
        if dims.is_empty() {
            dims.push(1);
            for s in &mut strides {
                s.push(0);
            }
        }
        Ok(Plan {
            dims,
            strides,
            numel: n,
        })
    }

    fn row_len(&self) -> usize {
        *self.dims.last().unwrap_or(&1)
    }

    /// Fills `out` row by row: `fill_row(offsets, chunk)` writes one row, `offsets[i]` being
    /// where input i's elements for it start (each input steps along the row by its last
    /// stride). Rows go in groups, each task walking its rows with an odometer: one division
    /// per group, not one per row and dim (rows can be a handful of elements long).
    fn fill<O: Send>(&self, out: &mut [O], fill_row: impl Fn(&[usize], &mut [O]) + Sync + Send) {
        let row_len = self.row_len();
        if self.numel == 0 || row_len == 0 {
            return;
        }
        let run = |first_row: usize, chunk: &mut [O]| {
            let mut walk = Walk::new(self, first_row);
            for c in chunk.chunks_mut(row_len) {
                fill_row(&walk.offs[..self.strides.len()], c);
                walk.step(self);
            }
        };
        if self.numel >= PAR_MIN {
            let group = (PAR_MIN / 4 / row_len).max(1);
            out.par_chunks_mut(group * row_len)
                .enumerate()
                .for_each(|(g, c)| run(g * group, c));
        } else {
            run(0, out);
        }
    }

    /// `out[i] = f(a[..], b[..])` over a plan with two inputs.
    pub(crate) fn map2<A: Copy + Sync, B: Copy + Sync, O: Copy + Default + Send>(
        &self,
        a: &[A],
        b: &[B],
        f: impl Fn(A, B) -> O + Sync + Send,
    ) -> Vec<O> {
        // Written once per element into the uninitialised capacity (no zeroing first).
        let mut out = Vec::with_capacity(self.numel);
        let last = self.dims.len() - 1;
        let (sa, sb) = (self.strides[0][last], self.strides[1][last]);
        self.fill(
            &mut out.spare_capacity_mut()[..self.numel],
            |offs, chunk| row2(chunk, a, b, (offs[0], offs[1]), (sa, sb), &f),
        );
        // SAFETY: `fill` hands every row of 0..numel to the closure, which writes each
        // element of its chunk.
        unsafe { out.set_len(self.numel) };
        out
    }

    /// `out[i] = f(a[..], b[..], c[..])` over a plan with three inputs.
    pub(crate) fn map3<A: Copy + Sync, B: Copy + Sync, C: Copy + Sync, O: Copy + Default + Send>(
        &self,
        a: &[A],
        b: &[B],
        c: &[C],
        f: impl Fn(A, B, C) -> O + Sync + Send,
    ) -> Vec<O> {
        let mut out = Vec::with_capacity(self.numel);
        let last = self.dims.len() - 1;
        let (sa, sb, sc) = (
            self.strides[0][last],
            self.strides[1][last],
            self.strides[2][last],
        );
        self.fill(
            &mut out.spare_capacity_mut()[..self.numel],
            |offs, chunk| {
                let (oa, ob, oc) = (offs[0], offs[1], offs[2]);
                let n = chunk.len();
                if (sa, sb, sc) == (1, 1, 1) {
                    let (a, b, c) = (&a[oa..oa + n], &b[ob..ob + n], &c[oc..oc + n]);
                    for (((o, &x), &y), &z) in chunk.iter_mut().zip(a).zip(b).zip(c) {
                        *o = MaybeUninit::new(f(x, y, z));
                    }
                    return;
                }
                for (j, o) in chunk.iter_mut().enumerate() {
                    *o = MaybeUninit::new(f(a[oa + j * sa], b[ob + j * sb], c[oc + j * sc]));
                }
            },
        );
        // SAFETY: `fill` hands every row of 0..numel to the closure, which writes each
        // element of its chunk.
        unsafe { out.set_len(self.numel) };
        out
    }
}

/// One row of [`Plan::map2`]: `chunk[j] = f(a[oa + j·sa], b[ob + j·sb])`. Compiled for AVX2
/// where the CPU has it (the same IEEE operations either way); called from the row walk, the
/// loops had been built for baseline x86-64 only (4-lane SSE2).
fn row2<A: Copy, B: Copy, O>(
    chunk: &mut [MaybeUninit<O>],
    a: &[A],
    b: &[B],
    offs: (usize, usize),
    strides: (usize, usize),
    f: &impl Fn(A, B) -> O,
) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2 (checked just above).
        return unsafe { row2_avx2(chunk, a, b, offs, strides, f) };
    }
    row2_any(chunk, a, b, offs, strides, f);
}

/// [`row2`] compiled for AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn row2_avx2<A: Copy, B: Copy, O>(
    chunk: &mut [MaybeUninit<O>],
    a: &[A],
    b: &[B],
    offs: (usize, usize),
    strides: (usize, usize),
    f: &impl Fn(A, B) -> O,
) {
    row2_any(chunk, a, b, offs, strides, f);
}

/// [`row2`]'s loops: contiguous and scalar operands get loops the compiler vectorises.
#[inline(always)]
fn row2_any<A: Copy, B: Copy, O>(
    chunk: &mut [MaybeUninit<O>],
    a: &[A],
    b: &[B],
    (oa, ob): (usize, usize),
    (sa, sb): (usize, usize),
    f: &impl Fn(A, B) -> O,
) {
    let n = chunk.len();
    match (sa, sb) {
        (1, 1) => {
            let (a, b) = (&a[oa..oa + n], &b[ob..ob + n]);
            for ((o, &x), &y) in chunk.iter_mut().zip(a).zip(b) {
                *o = MaybeUninit::new(f(x, y));
            }
        }
        (1, 0) => {
            let y = b[ob];
            for (o, &x) in chunk.iter_mut().zip(&a[oa..oa + n]) {
                *o = MaybeUninit::new(f(x, y));
            }
        }
        (0, 1) => {
            let x = a[oa];
            for (o, &y) in chunk.iter_mut().zip(&b[ob..ob + n]) {
                *o = MaybeUninit::new(f(x, y));
            }
        }
        _ => {
            for (j, o) in chunk.iter_mut().enumerate() {
                *o = MaybeUninit::new(f(a[oa + j * sa], b[ob + j * sb]));
            }
        }
    }
}

/// Most inputs a [`Plan`] is walked with (`map3`).
const MAX_INPUTS: usize = 3;

/// An odometer over a plan's rows: the index along each collapsed dim but the last, and each
/// input's offset for the current row.
struct Walk {
    idx: Vec<usize>,
    offs: [usize; MAX_INPUTS],
}

impl Walk {
    /// At row `row` (one division per outer dim).
    fn new(p: &Plan, row: usize) -> Walk {
        assert!(
            p.strides.len() <= MAX_INPUTS,
            "a plan walks at most 3 inputs"
        );
        let last = p.dims.len() - 1;
        let mut idx = vec![0; last];
        let mut offs = [0; MAX_INPUTS];
        let mut r = row;
        for d in (0..last).rev() {
            idx[d] = r % p.dims[d];
            r /= p.dims[d];
            for (o, st) in offs.iter_mut().zip(&p.strides) {
                *o += idx[d] * st[d];
            }
        }
        Walk { idx, offs }
    }

    /// On to the next row.
    fn step(&mut self, p: &Plan) {
        for d in (0..self.idx.len()).rev() {
            self.idx[d] += 1;
            for (o, st) in self.offs.iter_mut().zip(&p.strides) {
                *o += st[d];
            }
            if self.idx[d] < p.dims[d] {
                return;
            }
            self.idx[d] = 0;
            for (o, st) in self.offs.iter_mut().zip(&p.strides) {
                *o -= p.dims[d] * st[d];
            }
        }
    }
}

/// Applies `f` to two typed slices broadcast together; returns the values and output shape.
pub(crate) fn zip2<A: Copy + Sync, B: Copy + Sync, O: Copy + Default + Send>(
    a: (&[A], &[u64]),
    b: (&[B], &[u64]),
    f: impl Fn(A, B) -> O + Sync + Send,
) -> KResult<(Vec<O>, Vec<u64>)> {
    let out = broadcast_shapes(&[a.1, b.1])?;
    let plan = Plan::new(&out, &[a.1, b.1])?;
    Ok((plan.map2(a.0, b.0, f), out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_broadcast_like_numpy() {
        assert_eq!(
            broadcast_shapes(&[&[2, 1, 4], &[3, 1]]).unwrap(),
            vec![2, 3, 4]
        );
        assert_eq!(broadcast_shapes(&[&[], &[5]]).unwrap(), vec![5]);
        assert_eq!(broadcast_shapes(&[&[0, 1], &[1, 3]]).unwrap(), vec![0, 3]);
        assert!(broadcast_shapes(&[&[2, 3], &[3, 2]]).is_err());
    }

    #[test]
    fn plan_reads_the_right_elements() {
        // a: [2,1,3] = 0..6, b: [4,1] = 10,20,30,40 → out [2,4,3]: out[i,j,k] = a[i,0,k] + b[j,0]
        let a: Vec<i64> = (0..6).collect();
        let b = vec![10i64, 20, 30, 40];
        let (v, s) = zip2((&a, &[2, 1, 3]), (&b, &[4, 1]), |x, y| x + y).unwrap();
        assert_eq!(s, vec![2, 4, 3]);
        let mut want = vec![];
        for i in 0..2 {
            for bj in &b {
                for k in 0..3 {
                    want.push(a[i * 3 + k] + bj);
                }
            }
        }
        assert_eq!(v, want);
    }

    #[test]
    fn large_plans_match_small_ones() {
        // Parallel and sequential paths agree: [256,300] + [300] both ways.
        let a: Vec<f32> = (0..256 * 300).map(|i| i as f32 * 0.5).collect();
        let b: Vec<f32> = (0..300).map(|i| i as f32).collect();
        let (v, _) = zip2((&a, &[256, 300]), (&b, &[300]), |x, y| x * y + 1.0).unwrap();
        for (i, x) in v.iter().enumerate() {
            assert_eq!(*x, a[i] * b[i % 300] + 1.0);
        }
    }
}
