//! The conv family: `conv`, N-d convolution over NCHW-style layouts (any number of spatial
//! axes) with groups, strides, dilations, explicit pads and auto_pad, and its gradients
//! `conv_grad_input` (dgrad, a transposed convolution) and `conv_grad_weight` (wgrad).
//!
//! A conv with one input channel per group (depthwise layers, as in MobileNet) is summed
//! directly, tap by tap ([`depthwise`]). Everything else is a GEMM over the same im2col
//! geometry ([`geometry`], on the IR's window
//! geometry): one GEMM per (batch, group) on the `gemm` crate, f32 accumulation (f16/bf16
//! widened, rounded once at the end), f64 for f64. The bias is added to the f32 accumulator.
//! Every sum that crosses (batch, group) blocks (dgrad's col2im, wgrad's batch sum) runs in
//! index order, so results never depend on the thread count.

use crate::args;
use crate::data::{Data, dims_of, numel, shape_u64};
use crate::error::{Fail, KResult, attr_err, dtype_err, shape_err};
use crate::linalg::{GemmElem, Mat, SendPtr, gemm_into, gemm_into_uninit, raw_gemm};
use crate::scratch::{ScratchElem, with_scratch};
use crate::window::{self, Axis, Padded, Tap, WindowAttrs, increment};

use fp8c_ir::{AutoPad, ConvOp, DType, Support, Tensor};
use rayon::prelude::*;
use std::borrow::Cow;

/// Evaluates an op of the conv family.
pub(crate) fn eval(op: ConvOp<'_>, inputs: &[&Tensor]) -> KResult<Vec<Tensor>> {
    let attrs = ConvAttrs::of(op);
    let out = match op {
        ConvOp::Conv { .. } => conv(inputs, &attrs, None)?,
        ConvOp::ConvGradInput { input_shape, .. } => {
            let [dy, w] = args(inputs)?;
            conv_grad_input(dy, w, &attrs, input_shape)?
        }
        ConvOp::ConvGradWeight { .. } => {
            let [x, dy] = args(inputs)?;
            conv_grad_weight(x, dy, &attrs)?
        }
        ConvOp::__Lifetime(never, _) => match never {},
    };
    Ok(vec![out])
}

/// `conv` with `rows` called on each finished output row of an f32 conv (see [`Rows`]),
/// where `fits` accepts the conv's output shape; None where it does not, and for the
/// family's gradient ops.
pub(crate) fn conv_with_rows(
    op: ConvOp<'_>,
    inputs: &[&Tensor],
    fits: &dyn Fn(&[u64]) -> bool,
    rows: &(dyn Fn(&mut [f32], usize) + Sync),
) -> KResult<Option<Tensor>> {
    if !matches!(op, ConvOp::Conv { .. }) {
        return Ok(None);
    }
    let attrs = ConvAttrs::of(op);
    let (x, w, bias) = operands(inputs)?;
    let geo = geometry(&dims_of(x), &dims_of(w), bias.map(|b| b.shape()), &attrs)?;
    if !fits(&geo.out_shape) {
        return Ok(None);
    }
    conv(inputs, &attrs, Some(rows)).map(Some)
}

/// Every op of the family is evaluated.
pub(crate) fn support(op: ConvOp<'_>) -> Support {
    match op {
        ConvOp::Conv { .. } | ConvOp::ConvGradInput { .. } | ConvOp::ConvGradWeight { .. } => {
            Support::Yes
        }
        ConvOp::__Lifetime(never, _) => match never {},
    }
}

/// A conv node's attributes (its gradients carry the same ones, kernel_shape filled in).
struct ConvAttrs<'a> {
    kernel_shape: &'a [i64],
    strides: &'a [i64],
    pads: &'a [i64],
    dilations: &'a [i64],
    group: i64,
    auto_pad: AutoPad,
}

impl<'a> ConvAttrs<'a> {
    /// The attributes every op of the family carries (the gradients' kernel_shape filled in).
    fn of(op: ConvOp<'a>) -> Self {
        let w = op.conv_window();
        ConvAttrs {
            kernel_shape: w.kernel_shape,
            strides: w.window.strides,
            pads: w.window.pads,
            dilations: w.window.dilations,
            group: w.group,
            auto_pad: w.window.auto_pad,
        }
    }
}

/// The resolved sizes of one convolution `conv(x, w)`.
/// An im2col entry that reads padding.
const NO_TAP: usize = usize::MAX;

struct Geometry {
    n: usize,
    c: usize,
    m: usize,
    g: usize,
    /// Input elements per (N, C) plane.
    plane: usize,
    /// Output positions per (N, M) plane.
    out_plane: usize,
    /// Kernel taps.
    ksize: usize,
    /// The conv's output shape `[N, M, out spatial...]`.
    out_shape: Vec<u64>,
    /// The resolved window along each spatial axis.
    axes: Vec<Axis>,
}

/// The geometry of `conv(x of x_dims, w of w_dims[, bias of bias_shape])`: checks ranks,
/// group, kernel_shape and the bias against each other, resolves the window and refuses an
/// output or im2col scratch buffer past `MAX_ELEMENTS`.
fn geometry(
    x_dims: &[usize],
    w_dims: &[usize],
    bias_shape: Option<&[u64]>,
    attrs: &ConvAttrs<'_>,
) -> KResult<Geometry> {
    if x_dims.len() < 3 || w_dims.len() != x_dims.len() {
        return shape_err!(
            "x must be [N, C, spatial...] and w [M, C/group, kernel...] of the same rank, got {x_dims:?} and {w_dims:?}"
        );
    }
    let (n, c, spatial) = (x_dims[0], x_dims[1], &x_dims[2..]);
    let (m, cg, kernel) = (w_dims[0], w_dims[1], &w_dims[2..]);
    let g = usize::try_from(attrs.group)
        .ok()
        .filter(|&g| g >= 1)
        .map_or_else(|| attr_err!("group {} must be >= 1", attrs.group), Ok)?;
    if cg.checked_mul(g) != Some(c) || m % g != 0 {
        return shape_err!(
            "w {w_dims:?} does not fit x {x_dims:?} with group {g}: w's dim 1 times group must equal C and M must be a multiple of group"
        );
    }
    if !attrs.kernel_shape.is_empty()
        && attrs
            .kernel_shape
            .iter()
            .map(|&k| k as usize)
            .ne(kernel.iter().copied())
    {
        return attr_err!(
            "kernel_shape {:?} disagrees with w's kernel dims {kernel:?}",
            attrs.kernel_shape
        );
    }
    if let Some(b) = bias_shape
        && b != [m as u64]
    {
        return shape_err!("bias must be [{m}], got {b:?}");
    }
    let win = WindowAttrs {
        strides: attrs.strides,
        pads: attrs.pads,
        dilations: attrs.dilations,
        auto_pad: attrs.auto_pad,
        ceil_mode: false,
    };
    let axes = window::axes(spatial, kernel, &win)?;
    let mut out_shape = vec![n as u64, m as u64];
    out_shape.extend(axes.iter().map(|a| a.out as u64));
    numel(&out_shape)?;
    let (out_plane, ksize): (usize, usize) = (
        axes.iter().map(|a| a.out).product(),
        kernel.iter().product(),
    );
    // im2col scratch: (C/group · kernel) × output positions.
    numel(&[(cg * ksize) as u64, out_plane as u64])?;
    let geo = Geometry {
        n,
        c,
        m,
        g,
        plane: spatial.iter().product(),
        out_plane,
        ksize,
        out_shape,
        axes,
    };
    Ok(geo)
}

impl Geometry {
    /// Tap-major input offsets, what im2col and col2im walk: `offsets[t * out_plane + p]` is
    /// the offset within the (N, C) plane that tap `t` (row-major over the kernel dims) of
    /// output position `p` reads, or [`NO_TAP`] for padding. Tap-major, so filling one im2col
    /// row reads one contiguous run. Built axis by axis (one tap's positions along an axis
    /// are computed once, not per output position), and only by the routes that use it.
    fn offsets(&self) -> Vec<usize> {
        tap_offsets(&self.axes, self.ksize, self.out_plane)
    }

    /// Whether every output position reads the input position of the same index and only it
    /// (a 1×1 kernel at stride 1 without padding): the input planes are the im2col matrix.
    fn pointwise(&self) -> bool {
        self.axes
            .iter()
            .all(|a| a.kernel == 1 && a.stride == 1 && a.pad_begin == 0 && a.out == a.input)
    }
}

/// [`Geometry::offsets`].
fn tap_offsets(axes: &[Axis], ksize: usize, out_plane: usize) -> Vec<usize> {
    let mut offsets = Vec::with_capacity(ksize * out_plane);
    // The input plane's row-major strides.
    let mut strides = vec![1usize; axes.len()];
    for d in (0..axes.len().saturating_sub(1)).rev() {
        strides[d] = strides[d + 1] * axes[d + 1].input;
    }
    let mut k = vec![0usize; axes.len()];
    // Per axis, for the current tap: the offset contribution of each output index.
    let mut along: Vec<Vec<usize>> = axes.iter().map(|a| Vec::with_capacity(a.out)).collect();
    for _ in 0..ksize {
        for (d, a) in axes.iter().enumerate() {
            along[d].clear();
            along[d].extend((0..a.out).map(|o| match a.tap(o, k[d]) {
                Tap::In(i) => i * strides[d],
                Tap::Pad | Tap::Out => NO_TAP,
            }));
        }
        let mut o = vec![0usize; axes.len()];
        for _ in 0..out_plane {
            let mut at = 0usize;
            for (d, list) in along.iter().enumerate() {
                match list[o[d]] {
                    NO_TAP => {
                        at = NO_TAP;
                        break;
                    }
                    v => at += v,
                }
            }
            offsets.push(at);
            increment(&mut o, axes.iter().map(|a| a.out));
        }
        increment(&mut k, axes.iter().map(|a| a.kernel));
    }
    offsets
}

/// Work done on each output row (one (batch, channel) plane of positions) as soon as it is
/// final, bias included: the row and the offset of its first element in the output. The CPU
/// runtime's conv epilogues (`epilogue.rs`) apply the elementwise steps that follow a conv
/// there, while the row is still in cache.
pub(crate) type Rows<'a, T> = Option<&'a (dyn Fn(&mut [T], usize) + Sync)>;

/// Evaluates `conv(x, w[, bias])`, calling `rows` on each finished output row of an f32 conv.
fn conv(inputs: &[&Tensor], attrs: &ConvAttrs<'_>, rows: Rows<'_, f32>) -> KResult<Tensor> {
    let (x, w, bias) = operands(inputs)?;
    let dtype = x.dtype();
    if w.dtype() != dtype || bias.is_some_and(|b| b.dtype() != dtype) {
        return dtype_err!("x, w and bias must share a dtype");
    }
    let geo = geometry(&dims_of(x), &dims_of(w), bias.map(|b| b.shape()), attrs)?;
    let out_shape = geo.out_shape.clone();
    match (
        Data::load(x)?,
        Data::load(w)?,
        bias.map(Data::load).transpose()?,
    ) {
        (Data::F32(xv), Data::F32(wv), b) => {
            let b = match b {
                Some(Data::F32(b)) => Some(b),
                _ => None,
            };
            Data::F32(Cow::from(conv_t(&xv, &wv, b.as_deref(), &geo, rows))).store(dtype, out_shape)
        }
        (Data::F64(xv), Data::F64(wv), b) => {
            let b = match b {
                Some(Data::F64(b)) => Some(b),
                _ => None,
            };
            Data::F64(Cow::from(conv_t(&xv, &wv, b.as_deref(), &geo, None))).store(dtype, out_shape)
        }
        _ => dtype_err!("expects float inputs (f64, f32, f16, bf16), got {dtype}"),
    }
}

/// A conv's `x`, `w` and optional bias.
fn operands<'t>(inputs: &[&'t Tensor]) -> KResult<(&'t Tensor, &'t Tensor, Option<&'t Tensor>)> {
    match inputs {
        [x, w] => Ok((*x, *w, None)),
        [x, w, b] => Ok((*x, *w, Some(*b))),
        _ => Fail::arity("2 or 3", inputs.len()),
    }
}

fn conv_t<T: GemmElem + ScratchElem>(
    x: &[T],
    w: &[T],
    bias: Option<&[T]>,
    geo: &Geometry,
    rows_done: Rows<'_, T>,
) -> Vec<T> {
    let Geometry {
        n,
        c,
        m,
        g,
        plane,
        out_plane: p,
        ksize,
        ..
    } = *geo;
    let (cg, mg) = (c / g, m / g);
    if cg == 1
        && let Some(plan) = Padded::new(&geo.axes)
    {
        return depthwise(x, w, bias, geo, &plan, rows_done);
    }
    let rows = cg * ksize;
    // A 1×1 kernel that reads every input position once, in order (stride 1, no padding):
    // the input planes are the im2col matrix already.
    let pointwise = geo.pointwise();
    // im2col reads a padded copy of the group's input planes, so each row of an im2col row
    // is one run of a padded plane (a plain copy at stride 1); the offset table is the
    // fallback where the padded planes would be too large.
    let plan = if pointwise {
        None
    } else {
        Padded::new(&geo.axes)
    };
    let offsets = if pointwise || plan.is_some() {
        Vec::new()
    } else {
        geo.offsets()
    };
    // The output is written once: each (batch, group) block by its GEMM straight into the
    // result's uninitialised capacity, then its bias added while the block is in cache. The
    // im2col matrix and the padded planes live in this thread's scratch buffer, every
    // element of them written before it is read.
    let total = n * m * p;
    let mut out: Vec<T> = Vec::with_capacity(total);
    // Many output positions: im2col and the GEMM go together, chunk by chunk (see
    // `Chunks`), each chunk's im2col slice in one of `slots` per-thread regions.
    let chunks = plan
        .as_ref()
        .and_then(|pl| Chunks::new(pl, rows, p, size_of::<T>()));
    let slots = rayon::current_num_threads() + 1;
    let col_len = match &chunks {
        _ if pointwise => 0,
        Some(ch) => slots * rows * ch.width,
        None => rows * p,
    };
    let pad_len = plan.as_ref().map_or(0, |pl| cg * pl.size());
    with_scratch::<T, _>(col_len + pad_len, |scratch| {
        let (col, padded) = scratch.split_at_mut(col_len);
        let spare = &mut out.spare_capacity_mut()[..total];
        for b in 0..n {
            for gi in 0..g {
                if let (Some(ch), Some(plan)) = (&chunks, &plan) {
                    let dst = &mut spare[(b * m + gi * mg) * p..][..mg * p];
                    let planes = &x[(b * c + gi * cg) * plane..][..cg * plane];
                    let size = plan.size();
                    padded
                        .par_chunks_mut(size.max(1))
                        .zip(planes.par_chunks(plane.max(1)))
                        .for_each(|(dst, src)| plan.pad_into(src, T::ZERO, dst));
                    let block = Block {
                        w,
                        w_offset: gi * mg * rows,
                        rows,
                        ksize,
                        mg,
                        p,
                        bias: bias.map(|bv| &bv[gi * mg..][..mg]),
                        first: (b * m + gi * mg) * p,
                        rows_done,
                    };
                    ch.run(plan, &block, padded, col, dst);
                    continue;
                }
                let dst = &mut spare[(b * m + gi * mg) * p..][..mg * p];
                let wm = Mat {
                    data: w,
                    offset: gi * mg * rows,
                    rs: rows,
                    cs: 1,
                };
                if pointwise {
                    let xm = Mat {
                        data: x,
                        offset: (b * c + gi * cg) * plane,
                        rs: plane,
                        cs: 1,
                    };
                    gemm_into_uninit(mg, p, rows, wm, xm, dst, true);
                } else {
                    let planes = &x[(b * c + gi * cg) * plane..][..cg * plane];
                    if let Some(plan) = &plan {
                        let size = plan.size();
                        padded
                            .par_chunks_mut(size.max(1))
                            .zip(planes.par_chunks(plane.max(1)))
                            .for_each(|(dst, src)| plan.pad_into(src, T::ZERO, dst));
                        // col[(ci·ksize + t), pos] = tap t of position pos in padded plane ci.
                        col.par_chunks_mut(p.max(1))
                            .enumerate()
                            .for_each(|(r, row)| {
                                let (ci, t) = (r / ksize, r % ksize);
                                plan.gather_tap(&padded[ci * size..][..size], t, row);
                            });
                    } else {
                        // col[(ci·ksize + t), pos] = x[b, gi·cg + ci, tap] (0 for padding).
                        col.par_chunks_mut(p.max(1))
                            .enumerate()
                            .for_each(|(r, row)| {
                                let (ci, t) = (r / ksize, r % ksize);
                                let src = &planes[ci * plane..][..plane];
                                let offs = &offsets[t * p..][..p];
                                for (v, &o) in row.iter_mut().zip(offs) {
                                    *v = if o == NO_TAP { T::default() } else { src[o] };
                                }
                            });
                    }
                    let cm = Mat {
                        data: col,
                        offset: 0,
                        rs: p,
                        cs: 1,
                    };
                    gemm_into_uninit(mg, p, rows, wm, cm, dst, true);
                }
                // SAFETY: the GEMM wrote every element of `dst` (`gemm_into_uninit`), and
                // `MaybeUninit<T>` has `T`'s layout.
                let dst = unsafe { &mut *(dst as *mut [std::mem::MaybeUninit<T>] as *mut [T]) };
                if bias.is_some() || rows_done.is_some() {
                    let first = (b * m + gi * mg) * p;
                    dst.par_chunks_mut(p.max(1))
                        .enumerate()
                        .for_each(|(r, row)| {
                            if let Some(bias) = bias {
                                let bv = bias[gi * mg + r];
                                row.iter_mut().for_each(|v| *v = *v + bv);
                            }
                            if let Some(f) = rows_done {
                                f(row, first + r * p);
                            }
                        });
                }
            }
        }
    });
    // SAFETY: the (batch, group) blocks above tile the n·m·p outputs, each written whole.
    unsafe { out.set_len(total) };
    out
}

/// im2col bytes a chunk of output positions aims at: its slice of the im2col matrix stays in
/// L2 from the gather to the GEMM's packing of it.
const CHUNK_BYTES: usize = 256 << 10;
/// Output positions a chunk has at least (a GEMM narrower than that loses more to its edge
/// tiles and to packing the weights once per chunk than the cache saves).
const CHUNK_MIN_POSITIONS: usize = 64;
/// Rows of the `gemm` crate's f32 microkernel on AVX2 (its output positions here): a chunk
/// width that is a multiple of it leaves no partial tile.
const CHUNK_TILE: usize = 16;
/// Output positions from which a conv goes chunk by chunk: ResNet-50's stem (12,544
/// positions, an im2col matrix of 7 MiB) and its 56×56 and 28×28 3×3 convs.
const CHUNKED_FROM: usize = 512;

/// The greatest common divisor of `a` and `b` (`b` > 0).
fn gcd(mut a: usize, mut b: usize) -> usize {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// Output positions split into chunks of whole output lines: for each chunk, its slice of
/// the im2col matrix is gathered into a per-thread region and multiplied right away by the
/// weights (one single-threaded GEMM per chunk, the chunks spread over the threads), then
/// the bias and the caller's row work ([`Rows`]) run over the chunk's part of each output
/// row. Gathered whole, a large im2col matrix went out to L3 or memory and came back for the
/// GEMM's packing; the chunks keep each slice in L2. Each output element is the same single
/// GEMM sum as with the whole matrix (the `gemm` crate's k blocking depends on k alone).
struct Chunks {
    /// Output lines per chunk.
    lines: usize,
    /// Output positions per chunk (the last may have fewer).
    width: usize,
    /// Output lines in all.
    total_lines: usize,
}

/// One (batch, group) block of a conv, for [`Chunks::run`].
struct Block<'a, T> {
    w: &'a [T],
    /// Where the group's weights start in `w` (`mg` rows of `rows`).
    w_offset: usize,
    rows: usize,
    ksize: usize,
    mg: usize,
    p: usize,
    bias: Option<&'a [T]>,
    /// The offset of the block's first element in the conv's output (for `rows_done`).
    first: usize,
    rows_done: Rows<'a, T>,
}

impl Chunks {
    /// The chunking of a conv with `rows` im2col rows and `p` output positions; None where it
    /// has too few positions to gain from it.
    fn new(plan: &Padded, rows: usize, p: usize, elem: usize) -> Option<Chunks> {
        let row = plan.row;
        if p < CHUNKED_FROM || row == 0 || rows == 0 || !p.is_multiple_of(row) {
            return None;
        }
        let total_lines = p / row;
        let by_bytes = CHUNK_BYTES / (rows * row * elem).max(1);
        let lines = by_bytes
            .max(CHUNK_MIN_POSITIONS.div_ceil(row))
            .clamp(1, total_lines);
        // Whole microkernel tiles: a chunk of 3 lines of 28 (84 positions) ends in a tile of
        // 4 rows that costs a full one; 4 lines (112 = 7·16) do not, at up to twice the bytes.
        let step = CHUNK_TILE / gcd(row, CHUNK_TILE);
        let aligned = lines.next_multiple_of(step);
        let lines = if aligned <= 2 * lines {
            aligned.min(total_lines)
        } else {
            lines
        };
        (lines < total_lines).then_some(Chunks {
            lines,
            width: lines * row,
            total_lines,
        })
    }

    /// Computes one block into `dst` (`mg × p`, row-major, every element written): `padded`
    /// holds the group's padded input planes, `col` [`slots`](conv_t) regions of `rows ×
    /// width` elements.
    fn run<T: GemmElem>(
        &self,
        plan: &Padded,
        blk: &Block<'_, T>,
        padded: &[T],
        col: &mut [T],
        dst: &mut [std::mem::MaybeUninit<T>],
    ) {
        let (rows, p, size) = (blk.rows, blk.p, plan.size());
        let region = rows * self.width;
        let slots = col.len() / region.max(1);
        let col = SendPtr(col.as_mut_ptr());
        let out = SendPtr(dst.as_mut_ptr().cast::<T>());
        let count = self.total_lines.div_ceil(self.lines);
        (0..count).into_par_iter().for_each(|c| {
            let l0 = c * self.lines;
            let l1 = (l0 + self.lines).min(self.total_lines);
            let (c0, cw) = (l0 * plan.row, (l1 - l0) * plan.row);
            // One region per thread of the pool (the last for a caller outside it): a task
            // runs whole on one thread and starts no parallel work of its own.
            let slot = rayon::current_thread_index().map_or(slots - 1, |i| i.min(slots - 1));
            // SAFETY: region `slot` belongs to this thread for the task (see above), and
            // `col` holds `slots` regions.
            let cm = unsafe { std::slice::from_raw_parts_mut(col.at(slot * region), rows * cw) };
            for (r, dst) in cm.chunks_exact_mut(cw).enumerate() {
                let (ci, t) = (r / blk.ksize, r % blk.ksize);
                plan.gather_tap_lines(&padded[ci * size..][..size], t, l0, dst);
            }
            let wm = Mat {
                data: blk.w,
                offset: blk.w_offset,
                rs: rows,
                cs: 1,
            };
            let cm = Mat {
                data: &*cm,
                offset: 0,
                rs: cw,
                cs: 1,
            };
            // SAFETY: columns c0..c0+cw of the `mg × p` block belong to this chunk alone
            // (the chunks tile the positions), and both operands are in bounds.
            unsafe {
                raw_gemm(
                    blk.mg,
                    cw,
                    rows,
                    out.at(c0),
                    p,
                    wm,
                    cm,
                    0,
                    gemm::Parallelism::None,
                )
            };
            for r in 0..blk.mg {
                // SAFETY: as for the GEMM, which wrote these elements.
                let seg = unsafe { std::slice::from_raw_parts_mut(out.at(r * p + c0), cw) };
                if let Some(bias) = blk.bias {
                    let bv = bias[r];
                    seg.iter_mut().for_each(|v| *v = *v + bv);
                }
                if let Some(f) = blk.rows_done {
                    f(seg, blk.first + r * p + c0);
                }
            }
        });
    }
}

/// `conv` with one input channel per group (depthwise layers, with or without a channel
/// multiplier). As GEMMs these are one row deep per group, all call and packing overhead
/// (a MobileNet's 5×5 depthwise layers ran at 0.3 GFLOP/s), so each output plane is summed
/// directly: `y = Σ_t w[t] · x[tap t]` in tap order in a `T` accumulator, then the bias (as
/// the GEMM path adds it). One task per output plane: it zero-pads its input plane into a
/// scratch buffer, then for each output row and tap adds a weighted run of that buffer
/// (contiguous at stride 1) to the row.
fn depthwise<T: GemmElem>(
    x: &[T],
    w: &[T],
    bias: Option<&[T]>,
    geo: &Geometry,
    plan: &Padded,
    rows_done: Rows<'_, T>,
) -> Vec<T> {
    let Geometry {
        n,
        m,
        g,
        plane,
        out_plane: p,
        ksize,
        ..
    } = *geo;
    let mg = m / g;
    let mut out = vec![T::ZERO; n * m * p];
    if p == 0 || ksize == 0 {
        return out;
    }
    let (row, stride) = (plan.row, plan.stride);
    let one = |padded: &mut Vec<T>, r: usize, dst: &mut [T]| {
        let (b, oc) = (r / m, r % m);
        // One input channel per group: the group index is the input channel.
        plan.pad(&x[(b * g + oc / mg) * plane..][..plane], T::ZERO, padded);
        let weights = &w[oc * ksize..][..ksize];
        for (line, starts) in dst
            .chunks_exact_mut(row)
            .zip(plan.starts().chunks_exact(ksize))
        {
            match stride {
                1 => depthwise_row::<T, 1>(line, weights, starts, padded, 1),
                2 => depthwise_row::<T, 2>(line, weights, starts, padded, 2),
                s => depthwise_row::<T, 0>(line, weights, starts, padded, s),
            }
        }
        if let Some(bias) = bias {
            let bv = bias[oc];
            dst.iter_mut().for_each(|d| *d = *d + bv);
        }
        if let Some(f) = rows_done {
            f(dst, r * p);
        }
    };
    let work = (n * m * p).saturating_mul(ksize);
    window::for_each_plane(&mut out, p, work, one);
    out
}

/// Output positions [`depthwise_row`] sums at once, in registers (8 f32 lanes of AVX2).
const DW_LANES: usize = 8;

/// One output row of [`depthwise`]: `line[i] = Σ_t weights[t] · padded[starts[t] + i·stride]`,
/// summed in tap order from zero, [`DW_LANES`] positions at a time held in registers across
/// all taps (`S`: the stride where it is a constant, 1 or 2, so each tap's run is one
/// fixed-size load; 0 where it is not). Compiled for
/// AVX2 where the CPU has it (baseline x86-64 has 4-lane SSE2); both paths do the same IEEE
/// operations in the same order (Rust never contracts `a * b + c`), so the bits agree.
#[inline(always)]
fn depthwise_row<T: GemmElem, const S: usize>(
    line: &mut [T],
    weights: &[T],
    starts: &[usize],
    padded: &[T],
    stride: usize,
) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2 (checked just above).
        return unsafe { depthwise_row_avx2::<T, S>(line, weights, starts, padded, stride) };
    }
    depthwise_row_any::<T, S>(line, weights, starts, padded, stride);
}

/// [`depthwise_row`] compiled for AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn depthwise_row_avx2<T: GemmElem, const S: usize>(
    line: &mut [T],
    weights: &[T],
    starts: &[usize],
    padded: &[T],
    stride: usize,
) {
    depthwise_row_any::<T, S>(line, weights, starts, padded, stride);
}

/// [`depthwise_row`]'s body, for whichever instruction set its caller was compiled for.
#[inline(always)]
fn depthwise_row_any<T: GemmElem, const S: usize>(
    line: &mut [T],
    weights: &[T],
    starts: &[usize],
    padded: &[T],
    stride: usize,
) {
    let full = line.len() / DW_LANES * DW_LANES;
    for (j, out) in line[..full].chunks_exact_mut(DW_LANES).enumerate() {
        let first = j * DW_LANES * stride;
        let mut acc = [T::ZERO; DW_LANES];
        for (&wt, &start) in weights.iter().zip(starts) {
            if S == 1 {
                let src: &[T; DW_LANES] = padded[start + first..][..DW_LANES]
                    .try_into()
                    .expect("a run of DW_LANES");
                for (a, &v) in acc.iter_mut().zip(src) {
                    *a = *a + wt * v;
                }
            } else if S == 2 {
                // Lane l reads element 2l: the run ends at element 2·DW_LANES − 2.
                let src: &[T; 2 * DW_LANES - 1] = padded[start + first..][..2 * DW_LANES - 1]
                    .try_into()
                    .expect("a run of 2 DW_LANES - 1");
                for (l, a) in acc.iter_mut().enumerate() {
                    *a = *a + wt * src[2 * l];
                }
            } else {
                let src = &padded[start + first..];
                for (l, a) in acc.iter_mut().enumerate() {
                    *a = *a + wt * src[l * stride];
                }
            }
        }
        out.copy_from_slice(&acc);
    }
    for (i, out) in line.iter_mut().enumerate().skip(full) {
        let mut acc = T::ZERO;
        for (&wt, &start) in weights.iter().zip(starts) {
            acc = acc + wt * padded[start + i * stride];
        }
        *out = acc;
    }
}

/// dx = col2im(Wᵀ · dY) per (batch, group).
fn conv_grad_input(
    dy: &Tensor,
    w: &Tensor,
    attrs: &ConvAttrs<'_>,
    input_shape: &[i64],
) -> KResult<Tensor> {
    let mut x_dims = Vec::with_capacity(input_shape.len());
    for &d in input_shape {
        match usize::try_from(d) {
            Ok(d) => x_dims.push(d),
            Err(_) => return attr_err!("input_shape {input_shape:?} holds a negative size"),
        }
    }
    numel(&shape_u64(&x_dims))?;
    let geo = geometry(&x_dims, &dims_of(w), None, attrs)?;
    if dy.shape() != geo.out_shape || dy.dtype() != w.dtype() {
        return shape_err!(
            "dy ({} {:?}) must be the conv's output ({} {:?})",
            dy.dtype(),
            dy.shape(),
            w.dtype(),
            geo.out_shape
        );
    }
    let shape = shape_u64(&x_dims);
    match (Data::load(dy)?, Data::load(w)?) {
        (Data::F32(d), Data::F32(wv)) => {
            Data::F32(Cow::from(dgrad_t(&d, &wv, &geo))).store(w.dtype(), shape)
        }
        (Data::F64(d), Data::F64(wv)) => {
            Data::F64(Cow::from(dgrad_t(&d, &wv, &geo))).store(DType::F64, shape)
        }
        _ => dtype_err!("expects float inputs, got {}", w.dtype()),
    }
}

fn dgrad_t<T: GemmElem + ScratchElem>(dy: &[T], w: &[T], geo: &Geometry) -> Vec<T> {
    let offsets = geo.offsets();
    let Geometry {
        n,
        c,
        m,
        g,
        plane,
        out_plane: p,
        ksize,
        ..
    } = *geo;
    let (cg, mg) = (c / g, m / g);
    let rows = cg * ksize;
    let mut dx = vec![T::default(); n * c * plane];
    // col is this thread's scratch buffer: each GEMM writes all of it.
    with_scratch::<T, _>(rows * p, |col| {
        for b in 0..n {
            for gi in 0..g {
                // col[rows × p] = W_gᵀ [rows × mg] · dY_bg [mg × p]
                let wt = Mat {
                    data: w,
                    offset: gi * mg * rows,
                    rs: 1,
                    cs: rows,
                };
                let dm = Mat {
                    data: dy,
                    offset: (b * m + gi * mg) * p,
                    rs: p,
                    cs: 1,
                };
                gemm_into(rows, p, mg, wt, dm, col, true);
                // col2im: every input channel of the group owns its own plane of dx.
                let planes = &mut dx[(b * c + gi * cg) * plane..][..cg * plane];
                planes
                    .par_chunks_mut(plane.max(1))
                    .enumerate()
                    .for_each(|(ci, dst)| {
                        for t in 0..ksize {
                            let row = &col[(ci * ksize + t) * p..][..p];
                            let offs = &offsets[t * p..][..p];
                            for (&v, &o) in row.iter().zip(offs) {
                                if o != NO_TAP {
                                    dst[o] = dst[o] + v;
                                }
                            }
                        }
                    });
            }
        }
    });
    dx
}

/// dW = Σ_batch dY · im2col(x)ᵀ per group.
fn conv_grad_weight(x: &Tensor, dy: &Tensor, attrs: &ConvAttrs<'_>) -> KResult<Tensor> {
    let xd = dims_of(x);
    let (Some(&m), true) = (dy.shape().get(1), xd.len() >= 3) else {
        return shape_err!(
            "x and dy must be [N, C, spatial...], got {:?} and {:?}",
            x.shape(),
            dy.shape()
        );
    };
    let Some(g) = usize::try_from(attrs.group).ok().filter(|&g| g >= 1) else {
        return attr_err!("group {} must be >= 1", attrs.group);
    };
    if attrs.kernel_shape.len() + 2 != xd.len() {
        return attr_err!(
            "kernel_shape {:?} must give one size per spatial axis of x {:?}",
            attrs.kernel_shape,
            x.shape()
        );
    }
    let mut w_dims = vec![m as usize, xd[1] / g];
    for &k in attrs.kernel_shape {
        match usize::try_from(k) {
            Ok(k) if k >= 1 => w_dims.push(k),
            _ => return attr_err!("kernel_shape {:?} must hold sizes ≥ 1", attrs.kernel_shape),
        }
    }
    let geo = geometry(&xd, &w_dims, None, attrs)?;
    if dy.shape() != geo.out_shape || dy.dtype() != x.dtype() {
        return shape_err!(
            "dy ({} {:?}) must be the conv's output ({} {:?})",
            dy.dtype(),
            dy.shape(),
            x.dtype(),
            geo.out_shape
        );
    }
    let shape = shape_u64(&w_dims);
    match (Data::load(x)?, Data::load(dy)?) {
        (Data::F32(xv), Data::F32(d)) => {
            Data::F32(Cow::from(wgrad_t(&xv, &d, &geo))).store(x.dtype(), shape)
        }
        (Data::F64(xv), Data::F64(d)) => {
            Data::F64(Cow::from(wgrad_t(&xv, &d, &geo))).store(DType::F64, shape)
        }
        _ => dtype_err!("expects float inputs, got {}", x.dtype()),
    }
}

fn wgrad_t<T: GemmElem + ScratchElem>(x: &[T], dy: &[T], geo: &Geometry) -> Vec<T> {
    let offsets = geo.offsets();
    let Geometry {
        n,
        c,
        m,
        g,
        plane,
        out_plane: p,
        ksize,
        ..
    } = *geo;
    let (cg, mg) = (c / g, m / g);
    let rows = cg * ksize;
    let mut dw = vec![T::default(); m * rows];
    // col (the im2col matrix) and part (one block's GEMM) share this thread's scratch
    // buffer; both are written whole before they are read.
    with_scratch::<T, _>(rows * p + mg * rows, |scratch| {
        let (col, part) = scratch.split_at_mut(rows * p);
        for b in 0..n {
            for gi in 0..g {
                col.par_chunks_mut(p.max(1))
                    .enumerate()
                    .for_each(|(r, row)| {
                        let (ci, t) = (r / ksize, r % ksize);
                        let base = (b * c + gi * cg + ci) * plane;
                        let offs = &offsets[t * p..][..p];
                        for (v, &o) in row.iter_mut().zip(offs) {
                            *v = if o == NO_TAP {
                                T::default()
                            } else {
                                x[base + o]
                            };
                        }
                    });
                // part[mg × rows] = dY_bg [mg × p] · colᵀ [p × rows]
                let dm = Mat {
                    data: dy,
                    offset: (b * m + gi * mg) * p,
                    rs: p,
                    cs: 1,
                };
                let ct = Mat {
                    data: col,
                    offset: 0,
                    rs: 1,
                    cs: p,
                };
                gemm_into(mg, rows, p, dm, ct, part, true);
                for (d, &v) in dw[gi * mg * rows..][..mg * rows].iter_mut().zip(&*part) {
                    *d = *d + v;
                }
            }
        }
    });
    dw
}
