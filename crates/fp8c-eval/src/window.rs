//! The window geometry of `fp8c_ir::window`, with its errors as kernel failures, and
//! [`Padded`], the padded-plane plan of the direct window kernels (depthwise conv, max pool).

use crate::error::{ErrorKind, Fail, KResult};
use fp8c_ir::window::WindowError;
pub(crate) use fp8c_ir::window::{Axis, Tap, WindowAttrs, increment};

fn fail(e: WindowError) -> Fail {
    let kind = match e {
        WindowError::Attribute(_) => ErrorKind::Attribute,
        WindowError::Shape(_) => ErrorKind::Shape,
        WindowError::TooLarge(_) => ErrorKind::TooLarge,
    };
    Fail::new(kind, e.to_string())
}

/// [`fp8c_ir::window::axes`].
pub(crate) fn axes(spatial: &[usize], kernel: &[usize], w: &WindowAttrs<'_>) -> KResult<Vec<Axis>> {
    fp8c_ir::window::axes(spatial, kernel, w).map_err(fail)
}

/// [`fp8c_ir::window::taps`].
pub(crate) fn taps(axes: &[Axis]) -> KResult<Vec<Tap>> {
    fp8c_ir::window::taps(axes).map_err(fail)
}

/// Where a direct window kernel reads: the input plane padded on every side (with the pads,
/// and past the end pad as far as ceil-mode windows overhang), and for each output row (all
/// positions along the last spatial axis) and kernel tap, the offset in the padded plane of
/// that row's first read; the row's later reads follow at `stride`.
pub(crate) struct Padded {
    axes: Vec<Axis>,
    /// The padded plane's size per spatial axis.
    padded: Vec<usize>,
    /// `starts[row * ksize + t]`.
    starts: Vec<usize>,
    /// Kernel taps.
    ksize: usize,
    /// Output positions per row, and the stride between their reads.
    pub(crate) row: usize,
    pub(crate) stride: usize,
}

impl Padded {
    /// `None` for no spatial axis, or where the padded plane would pass `MAX_ELEMENTS` (pads
    /// far larger than the input): the caller's general route then takes the op.
    pub(crate) fn new(axes: &[Axis]) -> Option<Self> {
        let (last, outer) = axes.split_last()?;
        let padded: Vec<usize> = axes
            .iter()
            .map(|a| {
                let declared = a.input.checked_add(a.pad_begin)?.checked_add(a.pad_end)?;
                let reach = match a.out {
                    0 => 0,
                    o => (o - 1)
                        .checked_mul(a.stride)?
                        .checked_add(a.kernel.checked_sub(1)?.checked_mul(a.dilation)?)?
                        .checked_add(1)?,
                };
                Some(declared.max(reach))
            })
            .collect::<Option<_>>()?;
        let total = padded.iter().try_fold(1usize, |p, &d| p.checked_mul(d))?;
        if total as u64 > fp8c_ir::MAX_ELEMENTS {
            return None;
        }
        // Row-major strides of the padded plane.
        let mut strides = vec![1usize; axes.len()];
        for d in (0..axes.len() - 1).rev() {
            strides[d] = strides[d + 1] * padded[d + 1];
        }
        let rows: usize = outer.iter().map(|a| a.out).product();
        let ksize: usize = axes.iter().map(|a| a.kernel).product();
        let mut starts = Vec::with_capacity(rows.saturating_mul(ksize));
        let (mut o, mut k) = (vec![0usize; outer.len()], vec![0usize; axes.len()]);
        for _ in 0..rows {
            for _ in 0..ksize {
                let mut at = k[axes.len() - 1] * last.dilation;
                for (d, a) in outer.iter().enumerate() {
                    at += (o[d] * a.stride + k[d] * a.dilation) * strides[d];
                }
                starts.push(at);
                increment(&mut k, axes.iter().map(|a| a.kernel));
            }
            increment(&mut o, outer.iter().map(|a| a.out));
        }
        Some(Padded {
            axes: axes.to_vec(),
            padded,
            starts,
            ksize,
            row: last.out,
            stride: last.stride,
        })
    }

    /// [`Padded::starts`] for a plane copied by [`Padded::deinterleave_into`] (stride 2
    /// along the last axis): a tap's reads, every other column from `c`, are the run of `c`'s
    /// parity there, so they become contiguous (stride 1).
    pub(crate) fn deinterleaved_starts(&self) -> Vec<usize> {
        let w = self.padded.last().copied().unwrap_or(1).max(1);
        let even = w.div_ceil(2);
        self.starts
            .iter()
            .map(|&o| {
                let (r, c) = (o / w, o % w);
                r * w + if c % 2 == 0 { c / 2 } else { even + c / 2 }
            })
            .collect()
    }

    /// Copies padded plane `src` into `dst` (both [`Padded::size`] elements) with each row's
    /// even columns first, then its odd ones.
    #[inline(always)]
    pub(crate) fn deinterleave_into<T: Copy>(&self, src: &[T], dst: &mut [T]) {
        let w = self.padded.last().copied().unwrap_or(1).max(1);
        let even = w.div_ceil(2);
        for (s, d) in src.chunks_exact(w).zip(dst.chunks_exact_mut(w)) {
            let (de, dodd) = d.split_at_mut(even);
            // 16 columns at a time as fixed-size arrays (no bounds checks, so the compiler
            // turns each group into shuffles), then the rest.
            for ((e, o), p) in de
                .chunks_exact_mut(8)
                .zip(dodd.chunks_exact_mut(8))
                .zip(s.chunks_exact(16))
            {
                let p: &[T; 16] = p.try_into().expect("16 columns");
                let e: &mut [T; 8] = e.try_into().expect("8 even columns");
                let o: &mut [T; 8] = o.try_into().expect("8 odd columns");
                for l in 0..8 {
                    e[l] = p[2 * l];
                    o[l] = p[2 * l + 1];
                }
            }
            for c in w / 16 * 16..w {
                if c % 2 == 0 {
                    de[c / 2] = s[c];
                } else {
                    dodd[c / 2] = s[c];
                }
            }
        }
    }

    /// `starts[row * ksize + t]`: where tap `t` of output row `row` first reads.
    pub(crate) fn starts(&self) -> &[usize] {
        &self.starts
    }

    /// Elements of the padded plane.
    pub(crate) fn size(&self) -> usize {
        self.padded.iter().product()
    }

    /// Copies input plane `src` into `dst`, the padded plane, with `fill` everywhere else.
    pub(crate) fn pad<T: Copy>(&self, src: &[T], fill: T, dst: &mut Vec<T>) {
        dst.clear();
        dst.resize(self.size(), fill);
        self.pad_into(src, fill, dst);
    }

    /// [`Padded::pad`] into a slice of [`Padded::size`] elements.
    pub(crate) fn pad_into<T: Copy>(&self, src: &[T], fill: T, dst: &mut [T]) {
        dst.fill(fill);
        let (axes, rank) = (&self.axes, self.axes.len());
        let width = axes[rank - 1].input;
        if width == 0 {
            return;
        }
        let mut idx = vec![0usize; rank - 1];
        for line in src.chunks_exact(width) {
            let mut at = axes[rank - 1].pad_begin;
            let mut stride = self.padded[rank - 1];
            for d in (0..rank - 1).rev() {
                at += (idx[d] + axes[d].pad_begin) * stride;
                stride *= self.padded[d];
            }
            dst[at..at + width].copy_from_slice(line);
            increment(&mut idx, axes[..rank - 1].iter().map(|a| a.input));
        }
    }

    /// One im2col row: for each output position (row-major), what kernel tap `t` reads from
    /// `padded` (one padded plane), written to `dst` (one entry per output position).
    pub(crate) fn gather_tap<T: Copy>(&self, padded: &[T], t: usize, dst: &mut [T]) {
        self.gather_tap_lines(padded, t, 0, dst);
    }

    /// [`Self::gather_tap`] for the output lines from `first` on (`dst.len() / row` of
    /// them): a slice of an im2col row, the positions of those lines.
    pub(crate) fn gather_tap_lines<T: Copy>(
        &self,
        padded: &[T],
        t: usize,
        first: usize,
        dst: &mut [T],
    ) {
        if self.row == 0 || self.ksize == 0 {
            return;
        }
        for (line, starts) in dst
            .chunks_exact_mut(self.row)
            .zip(self.starts.chunks_exact(self.ksize).skip(first))
        {
            let start = starts[t];
            // The row's reads span (row − 1)·stride + 1 elements; slicing exactly that much
            // lets the loops below run without bounds checks (and stride 2 vectorise).
            let span = &padded[start..start + (self.row - 1) * self.stride + 1];
            match self.stride {
                1 => line.copy_from_slice(span),
                2 => {
                    // Eight outputs from one fixed-size run of 15 (a deinterleaving shuffle).
                    let mut chunks = line.chunks_exact_mut(8);
                    let mut at = 0;
                    for out in &mut chunks {
                        let src: &[T; 15] = span[at..at + 15].try_into().expect("15 elements");
                        for (l, v) in out.iter_mut().enumerate() {
                            *v = src[2 * l];
                        }
                        at += 16;
                    }
                    // (With no remainder, `at` may lie one past the span.)
                    let rest = span.get(at..).unwrap_or(&[]);
                    for (v, &x) in chunks
                        .into_remainder()
                        .iter_mut()
                        .zip(rest.iter().step_by(2))
                    {
                        *v = x;
                    }
                }
                s => {
                    for (v, &x) in line.iter_mut().zip(span.iter().step_by(s)) {
                        *v = x;
                    }
                }
            }
        }
    }
}

/// Work (output elements times taps) below which [`for_each_plane`] stays on the calling
/// thread.
const PAR_PLANE_WORK: usize = 1 << 16;

/// Runs `f(scratch, index, plane)` over `out`'s planes of `len` elements, in order on the
/// calling thread or, from `work` of [`PAR_PLANE_WORK`] on, on rayon's pool; each task
/// reuses one scratch buffer (the direct kernels' padded input plane).
pub(crate) fn for_each_plane<T: Send, S: Send>(
    out: &mut [T],
    len: usize,
    work: usize,
    f: impl Fn(&mut Vec<S>, usize, &mut [T]) + Sync + Send,
) {
    use rayon::prelude::*;
    if len == 0 {
        return;
    }
    if work >= PAR_PLANE_WORK {
        out.par_chunks_mut(len)
            .enumerate()
            .for_each_init(Vec::new, |scratch, (i, plane)| f(scratch, i, plane));
    } else {
        let mut scratch = Vec::new();
        for (i, plane) in out.chunks_mut(len).enumerate() {
            f(&mut scratch, i, plane);
        }
    }
}
