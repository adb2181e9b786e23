//! The movement family: shape and data-movement ops. They never look at values, only move
//! elements, so they work on raw bytes for every dtype (FP8 included); the one exception is
//! `gather_grad`, the scatter-add gradient of `gather`, which sums in f64. The index-driven
//! kernels (gathers, `gather_grad`, `trilu`) are in `gather.rs`.
//!
//! Most of them are one primitive, [`gather_tensor`]: per output axis a table gives the element
//! offset to read along that axis (or `None`: a padding element). Transpose, slice, expand,
//! tile, pad and gather are each just a way of building those tables. The element-indexed
//! gathers and scatters and `trilu` are in `movement/indexed.rs`.

mod indexed;
mod swap;

use crate::args;
use crate::broadcast::broadcast_shapes;
use crate::data::{
    PAR_MIN, dims_of, int_list, int_scalar, norm_axis, numel, shape_u64, strides_of, tensor,
};
use crate::error::{ErrorKind, Fail, KResult, attr_err, dtype_err, shape_err, value_err};
use crate::gather;
use fp8c_ir::{DType, MovementOp, PadMode, Support, Tensor};
use rayon::prelude::*;

/// Evaluates an op of the movement family.
pub(crate) fn eval(op: MovementOp<'_>, inputs: &[&Tensor]) -> KResult<Vec<Tensor>> {
    let out = match op {
        MovementOp::Shape { start, end } => {
            let [x] = args(inputs)?;
            shape(x, *start, *end)?
        }
        MovementOp::Reshape { allowzero } => {
            let [x, shape] = args(inputs)?;
            reshape(x, shape, *allowzero)?
        }
        MovementOp::Transpose { perm } => {
            let [x] = args(inputs)?;
            transpose(x, perm)?
        }
        MovementOp::Unsqueeze { axes } => {
            let [x] = args(inputs)?;
            unsqueeze(x, axes)?
        }
        MovementOp::Squeeze { axes } => {
            let [x] = args(inputs)?;
            squeeze(x, axes.as_deref())?
        }
        MovementOp::Flatten { axis } => {
            let [x] = args(inputs)?;
            flatten(x, *axis)?
        }
        MovementOp::Concat { axis } => concat(inputs, *axis)?,
        MovementOp::Split { axis, split: sizes } => {
            let [x] = args(inputs)?;
            return split(x, *axis, sizes);
        }
        MovementOp::Slice => slice(inputs)?,
        MovementOp::Gather { axis } => {
            let [x, indices] = args(inputs)?;
            gather::gather(x, indices, *axis)?
        }
        MovementOp::GatherNd { batch_dims } => {
            let [x, indices] = args(inputs)?;
            gather::gather_nd(x, indices, *batch_dims)?
        }
        MovementOp::Expand => {
            let [x, shape] = args(inputs)?;
            expand(x, shape)?
        }
        MovementOp::ConstantOfShape { value } => {
            let [shape] = args(inputs)?;
            constant_of_shape(shape, value)?
        }
        MovementOp::Range => range(inputs)?,
        MovementOp::Pad { mode } => pad(inputs, *mode)?,
        MovementOp::GatherElements { axis } => {
            let [x, indices] = args(inputs)?;
            gather::gather_elements(x, indices, *axis)?
        }
        MovementOp::Trilu { upper } => match inputs {
            [x] => gather::trilu(x, None, *upper)?,
            [x, k] => gather::trilu(x, Some(k), *upper)?,
            _ => return Fail::arity("1 or 2", inputs.len()),
        },
        MovementOp::Tile => {
            let [x, repeats] = args(inputs)?;
            tile(x, repeats)?
        }
        MovementOp::GatherGrad { axis, size } => {
            let [dy, indices] = args(inputs)?;
            gather::gather_grad(dy, indices, *axis, *size)?
        }
        MovementOp::ScatterElements { axis, reduction } => {
            let [x, indices, updates] = args(inputs)?;
            indexed::scatter_elements(x, indices, updates, *axis, *reduction)?
        }
        MovementOp::ScatterNd { reduction } => {
            let [x, indices, updates] = args(inputs)?;
            indexed::scatter_nd(x, indices, updates, *reduction)?
        }
        // The same storage: an ordering edge costs nothing here.
        MovementOp::After => {
            let [x, _dep] = args(inputs)?;
            x.clone()
        }
        MovementOp::__Lifetime(never, _) => match never {},
    };
    Ok(vec![out])
}

/// Every op of the family is evaluated.
pub(crate) fn support(op: MovementOp<'_>) -> Support {
    match op {
        MovementOp::Shape { .. }
        | MovementOp::Reshape { .. }
        | MovementOp::Transpose { .. }
        | MovementOp::Unsqueeze { .. }
        | MovementOp::Squeeze { .. }
        | MovementOp::Flatten { .. }
        | MovementOp::Concat { .. }
        | MovementOp::Split { .. }
        | MovementOp::Slice
        | MovementOp::Gather { .. }
        | MovementOp::GatherNd { .. }
        | MovementOp::Expand
        | MovementOp::ConstantOfShape { .. }
        | MovementOp::Range
        | MovementOp::Pad { .. }
        | MovementOp::Tile
        | MovementOp::Trilu { .. }
        | MovementOp::GatherElements { .. }
        | MovementOp::GatherGrad { .. }
        | MovementOp::ScatterElements { .. }
        | MovementOp::ScatterNd { .. }
        | MovementOp::After => Support::Yes,
        MovementOp::__Lifetime(never, _) => match never {},
    }
}

/// One output axis of a [`gather_tensor`]: the input element offset for each output index.
pub(crate) type Table = Vec<Option<usize>>;

/// `out[o] = x[Σ_d table_d[o_d]]`, or `fill` (one element's bytes) where any table entry is
/// `None`, as a tensor of `x`'s dtype and shape `shape` (the table lengths). Elements move as
/// whole 1-, 2-, 4- or 8-byte words, and the result vector becomes the tensor's storage.
pub(crate) fn gather_tensor(
    x: &Tensor,
    tables: &[Table],
    fill: &[u8],
    shape: Vec<u64>,
) -> KResult<Tensor> {
    struct Gather<'a> {
        x: &'a Tensor,
        tables: &'a [Table],
        fill: &'a [u8],
        shape: Vec<u64>,
    }
    impl OnWords for Gather<'_> {
        const WHAT: &'static str = "gathered";
        fn run<T: bytemuck::Pod + Send + Sync>(self) -> KResult<Tensor> {
            let src = self
                .x
                .as_slice::<T>()
                .map_err(|m| Fail::new(ErrorKind::DType, m))?;
            let fill: T = bytemuck::try_pod_read_unaligned(self.fill)
                .map_err(|e| Fail::new(ErrorKind::DType, format!("fill value: {e:?}")))?;
            let out = gather_typed(src, self.tables, fill);
            words_tensor(self.x.dtype(), self.shape, out)
        }
    }
    let op = Gather {
        x,
        tables,
        fill,
        shape,
    };
    on_words(x.dtype().size(), op)
}

/// An operation on a tensor's elements moved as plain words of their size.
trait OnWords {
    /// What it does to elements, for the error on a size with no word type ("gathered").
    const WHAT: &'static str;
    /// The operation with `T` the word type of the elements' size.
    fn run<T: bytemuck::Pod + Send + Sync>(self) -> KResult<Tensor>;
}

/// Runs `op` with the word type of `size`-byte elements (u8, u16, u32 or u64).
fn on_words<O: OnWords>(size: usize, op: O) -> KResult<Tensor> {
    match size {
        1 => op.run::<u8>(),
        2 => op.run::<u16>(),
        4 => op.run::<u32>(),
        8 => op.run::<u64>(),
        n => Err(Fail::new(
            ErrorKind::Unsupported,
            format!("internal: {n}-byte elements cannot be {}", O::WHAT),
        )),
    }
}

/// A tensor of `dtype` and `shape` whose storage is `words` (no copy).
fn words_tensor<T: bytemuck::Pod>(dtype: DType, shape: Vec<u64>, words: Vec<T>) -> KResult<Tensor> {
    Tensor::from_vec(dtype, shape, words).map_err(|m| Fail::new(ErrorKind::TooLarge, m))
}

/// [`gather_tensor`] on typed elements.
fn gather_typed<T: Copy + Send + Sync>(src: &[T], tables: &[Table], fill: T) -> Vec<T> {
    let dims: Vec<usize> = tables.iter().map(Vec::len).collect();
    let n: usize = dims.iter().product();
    if n == 0 {
        return Vec::new();
    }
    let Some((last, outer)) = tables.split_last() else {
        return vec![src[0]];
    };
    let mut out = vec![fill; n];
    let row_len = last.len();
    // A last axis read contiguously copies whole rows at once.
    let contiguous = last
        .windows(2)
        .all(|w| matches!(w, [Some(a), Some(b)] if *b == *a + 1))
        && last.first().is_some_and(Option::is_some);
    let copy_row = |r: usize, chunk: &mut [T]| {
        let mut rem = r;
        let mut base = Some(0usize);
        for t in outer.iter().rev() {
            let i = rem % t.len();
            rem /= t.len();
            base = match (base, t[i]) {
                (Some(b), Some(o)) => Some(b + o),
                _ => None,
            };
        }
        let Some(base) = base else {
            return; // already `fill`
        };
        if contiguous {
            let start = base + last[0].unwrap_or(0);
            chunk.copy_from_slice(&src[start..start + row_len]);
            return;
        }
        for (e, off) in chunk.iter_mut().zip(last) {
            if let Some(o) = off {
                *e = src[base + o];
            }
        }
    };
    if n >= PAR_MIN {
        let min_rows = (PAR_MIN / 4 / row_len).max(1);
        out.par_chunks_mut(row_len)
            .enumerate()
            .with_min_len(min_rows)
            .for_each(|(r, c)| copy_row(r, c));
    } else {
        out.chunks_mut(row_len)
            .enumerate()
            .for_each(|(r, c)| copy_row(r, c));
    }
    out
}

/// Same data, new shape (element counts must agree).
fn with_shape(x: &Tensor, shape: Vec<u64>) -> KResult<Tensor> {
    if numel(&shape)? != x.len() {
        return shape_err!(
            "cannot view {} elements of shape {:?} as {shape:?}",
            x.len(),
            x.shape()
        );
    }
    // The result shares the input's bytes (no copy; a later write copies first).
    Tensor::from_storage(x.dtype(), shape, x.storage().clone())
        .map_err(|m| Fail::new(ErrorKind::TooLarge, m))
}

/// `shape { start, end }`: the input's dims as i64, sliced with clamping.
fn shape(x: &Tensor, start: i64, end: Option<i64>) -> KResult<Tensor> {
    let r = x.shape().len() as i64;
    let clamp = |v: i64| if v < 0 { v.saturating_add(r) } else { v }.clamp(0, r) as usize;
    let (s, e) = (clamp(start), clamp(end.unwrap_or(r)));
    let dims: Vec<i64> = x
        .shape()
        .get(s..e.max(s))
        .unwrap_or(&[])
        .iter()
        .map(|&d| d as i64)
        .collect();
    Ok(Tensor::from_i64(vec![dims.len() as u64], &dims))
}

/// `reshape { allowzero }(data, shape)`: 0 copies the input dim (unless allowzero), one -1
/// is inferred.
fn reshape(x: &Tensor, target: &Tensor, allowzero: bool) -> KResult<Tensor> {
    let t = int_list(target, "shape")?;
    if allowzero && t.contains(&0) && t.contains(&-1) {
        return attr_err!("shape {t:?} holds both 0 and -1, which allowzero=1 forbids");
    }
    let mut out: Vec<u64> = Vec::with_capacity(t.len());
    let mut infer_at = None;
    for (i, &d) in t.iter().enumerate() {
        out.push(match d {
            -1 if infer_at.is_some() => return value_err!("shape {t:?} holds more than one -1"),
            -1 => {
                infer_at = Some(i);
                1
            }
            0 if !allowzero => *x.shape().get(i).ok_or_else(|| {
                Fail::new(
                    ErrorKind::Value,
                    format!(
                        "shape {t:?} copies dim {i} with 0, but the input has rank {}",
                        x.shape().len()
                    ),
                )
            })?,
            d if d < 0 => return value_err!("shape {t:?} holds {d}; sizes must be >= -1"),
            d => d as u64,
        });
    }
    let n = x.len() as u64;
    if let Some(i) = infer_at {
        let rest = out
            .iter()
            .enumerate()
            .filter(|&(j, _)| j != i)
            .try_fold(1u64, |a, (_, &d)| a.checked_mul(d));
        match rest {
            Some(r) if r != 0 && n.is_multiple_of(r) => out[i] = n / r,
            _ => return shape_err!("cannot reshape {:?} ({n} elements) to {t:?}", x.shape()),
        }
    }
    if fp8c_ir::checked_numel(&out) != Some(n) {
        return shape_err!("cannot reshape {:?} ({n} elements) to {t:?}", x.shape());
    }
    Tensor::from_storage(x.dtype(), out, x.storage().clone())
        .map_err(|m| Fail::new(ErrorKind::TooLarge, m))
}

/// `transpose { perm }`; an empty perm reverses the axes.
pub(crate) fn transpose(x: &Tensor, perm: &[i64]) -> KResult<Tensor> {
    let dims = dims_of(x);
    let r = dims.len();
    let perm: Vec<usize> = if perm.is_empty() {
        (0..r).rev().collect()
    } else {
        let mut seen = vec![false; r];
        let mut p = Vec::with_capacity(r);
        for &a in perm {
            match usize::try_from(a) {
                Ok(a) if a < r && !seen[a] => {
                    seen[a] = true;
                    p.push(a);
                }
                _ => return attr_err!("perm {perm:?} is not a permutation of 0..{r}"),
            }
        }
        if p.len() != r {
            return attr_err!("perm {perm:?} is not a permutation of 0..{r}");
        }
        p
    };
    let out_dims: Vec<usize> = perm.iter().map(|&a| dims[a]).collect();
    if let Some(s) = swap::swap_of(&dims, &perm) {
        return swapped(x, s, shape_u64(&out_dims));
    }
    let st = strides_of(&dims);
    let tables: Vec<Table> = perm
        .iter()
        .map(|&a| (0..dims[a]).map(|i| Some(i * st[a])).collect())
        .collect();
    let es = x.dtype().size();
    gather_tensor(x, &tables, &vec![0; es], shape_u64(&out_dims))
}

/// The row-major `rows × cols` matrix `src` transposed (tiled, as `transpose` moves a
/// weight).
pub(crate) fn transpose_matrix<T: Copy + Send + Sync>(
    src: &[T],
    rows: usize,
    cols: usize,
) -> Vec<T> {
    swap::swap(
        src,
        swap::Swap {
            batch: 1,
            rows,
            cols,
        },
    )
}

/// `x` transposed as the batch of 2-D transposes `s` (its elements moved as raw words).
fn swapped(x: &Tensor, s: swap::Swap, shape: Vec<u64>) -> KResult<Tensor> {
    struct Swapped<'a>(&'a Tensor, swap::Swap, Vec<u64>);
    impl OnWords for Swapped<'_> {
        const WHAT: &'static str = "transposed";
        fn run<T: bytemuck::Pod + Send + Sync>(self) -> KResult<Tensor> {
            let Swapped(x, s, shape) = self;
            let src = x
                .as_slice::<T>()
                .map_err(|m| Fail::new(ErrorKind::DType, m))?;
            words_tensor(x.dtype(), shape, swap::swap(src, s))
        }
    }
    on_words(x.dtype().size(), Swapped(x, s, shape))
}

/// `unsqueeze { axes }`: axes are positions in the output.
fn unsqueeze(x: &Tensor, axes: &[i64]) -> KResult<Tensor> {
    let out_rank = x.shape().len() + axes.len();
    let mut ins = vec![false; out_rank];
    for &a in axes {
        let ax = norm_axis(a, out_rank)?;
        if ins[ax] {
            return attr_err!("axes {axes:?} name output axis {ax} twice");
        }
        ins[ax] = true;
    }
    let mut src = x.shape().iter();
    let shape = ins
        .iter()
        .map(|&i| if i { 1 } else { *src.next().unwrap_or(&1) })
        .collect();
    with_shape(x, shape)
}

/// `squeeze { axes }`: the listed size-1 axes, or every size-1 axis.
fn squeeze(x: &Tensor, axes: Option<&[i64]>) -> KResult<Tensor> {
    let r = x.shape().len();
    let mut drop = vec![false; r];
    match axes {
        None => x
            .shape()
            .iter()
            .enumerate()
            .for_each(|(i, &d)| drop[i] = d == 1),
        Some(a) => {
            for &ax in a {
                let i = norm_axis(ax, r)?;
                if x.shape()[i] != 1 {
                    return shape_err!(
                        "axis {i} has size {}, only size-1 axes can be squeezed",
                        x.shape()[i]
                    );
                }
                drop[i] = true;
            }
        }
    }
    let shape = x
        .shape()
        .iter()
        .zip(&drop)
        .filter(|(_, d)| !**d)
        .map(|(&s, _)| s)
        .collect();
    with_shape(x, shape)
}

/// `flatten { axis }`: `[prod(dims[..axis]), prod(dims[axis..])]`, axis in `[-r, r]`.
fn flatten(x: &Tensor, axis: i64) -> KResult<Tensor> {
    let r = x.shape().len();
    let ax = if axis == r as i64 {
        r
    } else {
        norm_axis(axis, r)?
    };
    let outer: u64 = x.shape()[..ax].iter().product();
    let inner: u64 = x.shape()[ax..].iter().product();
    with_shape(x, vec![outer, inner])
}

/// `concat { axis }`: same dtype and rank, equal dims except along the axis.
fn concat(inputs: &[&Tensor], axis: i64) -> KResult<Tensor> {
    let Some(first) = inputs.first() else {
        return Fail::arity("at least 1", 0);
    };
    let r = first.shape().len();
    let ax = norm_axis(axis, r)?;
    let mut out_shape = first.shape().to_vec();
    out_shape[ax] = 0;
    for t in inputs {
        if t.dtype() != first.dtype() {
            return dtype_err!("input dtypes differ: {} and {}", first.dtype(), t.dtype());
        }
        let ok = t.shape().len() == r
            && t.shape()
                .iter()
                .zip(first.shape())
                .enumerate()
                .all(|(i, (a, b))| i == ax || a == b);
        if !ok {
            return shape_err!(
                "shapes {:?} and {:?} differ outside axis {ax}",
                first.shape(),
                t.shape()
            );
        }
        out_shape[ax] += t.shape()[ax];
    }
    let n = numel(&out_shape)?;
    let outer: usize = first.shape()[..ax].iter().map(|&d| d as usize).product();
    let inner: usize = first.shape()[ax + 1..]
        .iter()
        .map(|&d| d as usize)
        .product();
    let mut runs = Vec::with_capacity(outer * inputs.len());
    for o in 0..outer {
        for t in inputs {
            let block = t.shape()[ax] as usize * inner;
            runs.push((*t, o * block, block));
        }
    }
    debug_assert_eq!(runs.iter().map(|r| r.2).sum::<usize>(), n);
    runs_tensor(first.dtype(), out_shape, &runs)
}

/// A tensor of `dtype` and `shape` made of runs of elements `(source, first, count)` copied
/// in order as whole 1-, 2-, 4- or 8-byte words into the vector that becomes its storage
/// (one copy; concat and split had built bytes and copied them again into aligned storage).
fn runs_tensor(dtype: DType, shape: Vec<u64>, runs: &[(&Tensor, usize, usize)]) -> KResult<Tensor> {
    struct Runs<'a>(DType, Vec<u64>, &'a [(&'a Tensor, usize, usize)]);
    impl OnWords for Runs<'_> {
        const WHAT: &'static str = "copied as words";
        fn run<T: bytemuck::Pod + Send + Sync>(self) -> KResult<Tensor> {
            let Runs(dtype, shape, runs) = self;
            let mut out = Vec::with_capacity(runs.iter().map(|r| r.2).sum());
            for &(t, first, count) in runs {
                let src = t
                    .as_slice::<T>()
                    .map_err(|m| Fail::new(ErrorKind::DType, m))?;
                out.extend_from_slice(&src[first..first + count]);
            }
            words_tensor(dtype, shape, out)
        }
    }
    on_words(dtype.size(), Runs(dtype, shape, runs))
}

/// `split { axis, split }`: one output per entry of `split`, which must sum to the axis.
fn split(x: &Tensor, axis: i64, split: &[i64]) -> KResult<Vec<Tensor>> {
    let r = x.shape().len();
    let ax = norm_axis(axis, r)?;
    if split.is_empty() {
        return attr_err!("split is empty; it needs one size per output");
    }
    let sizes = fp8c_ir::infer::split_sizes(split, x.shape()[ax]).map_err(|m| {
        let kind = if split.iter().any(|&s| s < 0) && !split.iter().all(|&s| s == -1) {
            ErrorKind::Attribute
        } else {
            ErrorKind::Shape
        };
        Fail::new(kind, format!("split {split:?}: {m}"))
    })?;
    let outer: usize = x.shape()[..ax].iter().map(|&d| d as usize).product();
    let inner: usize = x.shape()[ax + 1..].iter().map(|&d| d as usize).product();
    let dim = x.shape()[ax] as usize;
    let mut outs = Vec::with_capacity(sizes.len());
    let mut off = 0usize;
    for &s in &sizes {
        let s = s as usize;
        let runs: Vec<(&Tensor, usize, usize)> = (0..outer)
            .map(|o| (x, (o * dim + off) * inner, s * inner))
            .collect();
        let mut shape = x.shape().to_vec();
        shape[ax] = s as u64;
        outs.push(runs_tensor(x.dtype(), shape, &runs)?);
        off += s;
    }
    Ok(outs)
}

/// `slice(data, starts, ends, axes, steps)` with ONNX's clamping (negative steps walk
/// backwards; out-of-range starts and ends clamp).
fn slice(inputs: &[&Tensor]) -> KResult<Tensor> {
    let (x, starts, ends) = match inputs {
        [x, s, e, ..] if inputs.len() <= 5 => (*x, int_list(s, "starts")?, int_list(e, "ends")?),
        _ => return Fail::arity("3 to 5", inputs.len()),
    };
    let dims = dims_of(x);
    let r = dims.len();
    let axes: Vec<i64> = match inputs.get(3) {
        Some(a) => int_list(a, "axes")?,
        None => (0..starts.len() as i64).collect(),
    };
    let steps: Vec<i64> = match inputs.get(4) {
        Some(s) => int_list(s, "steps")?,
        None => vec![1; starts.len()],
    };
    if ends.len() != starts.len() || axes.len() != starts.len() || steps.len() != starts.len() {
        return shape_err!(
            "starts, ends, axes and steps must have equal lengths, got {}, {}, {} and {}",
            starts.len(),
            ends.len(),
            axes.len(),
            steps.len()
        );
    }
    // Per axis: (first index, step, count).
    let mut plan: Vec<(i128, i128, usize)> = dims.iter().map(|&d| (0, 1, d)).collect();
    let mut seen = vec![false; r];
    for i in 0..starts.len() {
        let ax = norm_axis(axes[i], r)?;
        if seen[ax] {
            return attr_err!("axes {axes:?} name axis {ax} twice");
        }
        seen[ax] = true;
        let step = i128::from(steps[i]);
        if step == 0 {
            return value_err!("steps {steps:?} hold a 0");
        }
        let d = dims[ax] as i128;
        let (mut s, mut e) = (i128::from(starts[i]), i128::from(ends[i]));
        if s < 0 {
            s += d;
        }
        if e < 0 {
            e += d;
        }
        let count = if step > 0 {
            let (s2, e2) = (s.clamp(0, d), e.clamp(0, d));
            s = s2;
            if e2 > s2 {
                (e2 - s2 + step - 1) / step
            } else {
                0
            }
        } else {
            let (s2, e2) = (s.clamp(0, (d - 1).max(0)), e.clamp(-1, d - 1));
            s = s2;
            if d > 0 && s2 > e2 {
                (s2 - e2 - step - 1) / -step
            } else {
                0
            }
        };
        plan[ax] = (s, step, count as usize);
    }
    let st = strides_of(&dims);
    let tables: Vec<Table> = plan
        .iter()
        .zip(&st)
        .map(|(&(s, step, n), &stride)| {
            (0..n)
                .map(|k| Some((s + k as i128 * step) as usize * stride))
                .collect()
        })
        .collect();
    let out_dims: Vec<usize> = plan.iter().map(|p| p.2).collect();
    let es = x.dtype().size();
    gather_tensor(x, &tables, &vec![0; es], shape_u64(&out_dims))
}

/// `expand(data, shape)`: numpy broadcast of the input with the target shape.
fn expand(x: &Tensor, target: &Tensor) -> KResult<Tensor> {
    let t = int_list(target, "shape")?;
    let mut want = Vec::with_capacity(t.len());
    for &d in &t {
        let Ok(d) = u64::try_from(d) else {
            return value_err!("shape {t:?} holds a negative size");
        };
        want.push(d);
    }
    let out = broadcast_shapes(&[x.shape(), &want])?;
    broadcast_to(x, &out)
}

/// Copies `x` broadcast to `out` (which `x` must broadcast to).
pub(crate) fn broadcast_to(x: &Tensor, out: &[u64]) -> KResult<Tensor> {
    numel(out)?;
    let dims = dims_of(x);
    let st = strides_of(&dims);
    let off = out.len() - dims.len();
    let tables: Vec<Table> = out
        .iter()
        .enumerate()
        .map(|(i, &n)| {
            let (d, s) = if i >= off {
                (dims[i - off], st[i - off])
            } else {
                (1, 0)
            };
            (0..n as usize)
                .map(|k| Some(if d == 1 { 0 } else { k * s }))
                .collect()
        })
        .collect();
    let es = x.dtype().size();
    gather_tensor(x, &tables, &vec![0; es], out.to_vec())
}

/// `constant_of_shape { value }(shape)`: a tensor of `value`'s dtype filled with it.
fn constant_of_shape(shape: &Tensor, value: &Tensor) -> KResult<Tensor> {
    if value.len() != 1 {
        return attr_err!("value must hold one element, got shape {:?}", value.shape());
    }
    let dims = int_list(shape, "shape")?;
    let mut out = Vec::with_capacity(dims.len());
    for &d in &dims {
        let Ok(d) = u64::try_from(d) else {
            return value_err!("shape {dims:?} holds a negative size");
        };
        out.push(d);
    }
    let n = numel(&out)?;
    tensor(value.dtype(), out, value.bytes().repeat(n))
}

/// `tile(data, repeats)`.
fn tile(x: &Tensor, repeats: &Tensor) -> KResult<Tensor> {
    let reps = int_list(repeats, "repeats")?;
    let dims = dims_of(x);
    if reps.len() != dims.len() {
        return shape_err!(
            "repeats has {} entries, the input has rank {}",
            reps.len(),
            dims.len()
        );
    }
    let mut out = Vec::with_capacity(dims.len());
    for (&d, &r) in dims.iter().zip(&reps) {
        let Ok(r) = u64::try_from(r) else {
            return value_err!("repeats {reps:?} holds a negative count");
        };
        out.push((d as u64).saturating_mul(r));
    }
    numel(&out)?;
    let st = strides_of(&dims);
    let tables: Vec<Table> = out
        .iter()
        .enumerate()
        .map(|(i, &n)| {
            (0..n as usize)
                .map(|k| Some((k % dims[i]) * st[i]))
                .collect()
        })
        .collect();
    let es = x.dtype().size();
    gather_tensor(x, &tables, &vec![0; es], out)
}

/// `pad { mode }(data, pads, constant_value)`: pads are `[begin_0.., end_0..]`; negative pads
/// crop. Reflect and wrap repeat periodically for pads larger than the axis (as numpy).
fn pad(inputs: &[&Tensor], mode: PadMode) -> KResult<Tensor> {
    let (x, pads) = match inputs {
        [x, p] | [x, p, _] => (*x, int_list(p, "pads")?),
        _ => return Fail::arity("2 or 3", inputs.len()),
    };
    let es = x.dtype().size();
    let fill: Vec<u8> = match inputs.get(2) {
        Some(v) => {
            if v.dtype() != x.dtype() {
                return dtype_err!(
                    "constant_value must have the input's dtype {}, got {}",
                    x.dtype(),
                    v.dtype()
                );
            }
            if v.len() > 1 {
                return shape_err!("constant_value must be a scalar, got shape {:?}", v.shape());
            }
            // An empty constant_value means the ONNX default, 0.
            if v.len() == 1 {
                v.bytes().to_vec()
            } else {
                vec![0; es]
            }
        }
        None => vec![0; es],
    };
    let dims = dims_of(x);
    let r = dims.len();
    if pads.len() != 2 * r {
        return shape_err!(
            "pads has {} entries, expected {} for rank {r}",
            pads.len(),
            2 * r
        );
    }
    let mut out = Vec::with_capacity(r);
    for (i, &d) in dims.iter().enumerate() {
        let n = d as i128 + i128::from(pads[i]) + i128::from(pads[r + i]);
        if n < 0 {
            return value_err!("pads {pads:?} make axis {i} (size {d}) negative");
        }
        out.push(u64::try_from(n).unwrap_or(u64::MAX));
    }
    numel(&out)?;
    let st = strides_of(&dims);
    let mut tables: Vec<Table> = Vec::with_capacity(r);
    for i in 0..r {
        let d = dims[i] as i128;
        let begin = i128::from(pads[i]);
        let n = out[i] as usize;
        let padded = (0..n as i128).any(|o| !(0..d).contains(&(o - begin)));
        if padded && d == 0 && mode != PadMode::Constant {
            return value_err!("cannot {mode:?}-pad axis {i} of size 0");
        }
        tables.push(
            (0..n as i128)
                .map(|o| {
                    let j = o - begin;
                    let src = if (0..d).contains(&j) {
                        Some(j)
                    } else {
                        match mode {
                            PadMode::Constant => None,
                            PadMode::Edge => Some(j.clamp(0, d - 1)),
                            PadMode::Wrap => Some(j.rem_euclid(d)),
                            PadMode::Reflect if d == 1 => Some(0),
                            PadMode::Reflect => {
                                let p = 2 * (d - 1);
                                let m = j.rem_euclid(p);
                                Some(if m < d { m } else { p - m })
                            }
                        }
                    };
                    src.map(|s| s as usize * st[i])
                })
                .collect(),
        );
    }
    gather_tensor(x, &tables, &fill, out)
}

/// `range(start, limit, delta)`: `start + i·delta` for `i < max(ceil((limit−start)/delta), 0)`.
fn range(inputs: &[&Tensor]) -> KResult<Tensor> {
    let [s, l, d] = inputs else {
        return Fail::arity("3", inputs.len());
    };
    let dtype = s.dtype();
    if dtype == DType::Bool || dtype.is_fp8() {
        return dtype_err!("start must be numeric (not bool or FP8), got {dtype}");
    }
    if l.dtype() != dtype || d.dtype() != dtype {
        return dtype_err!(
            "start, limit and delta must share a dtype, got {}, {} and {}",
            dtype,
            l.dtype(),
            d.dtype()
        );
    }
    if dtype.is_int() {
        let (s, l, d) = (
            int_scalar(s, "start")?,
            int_scalar(l, "limit")?,
            int_scalar(d, "delta")?,
        );
        if d == 0 {
            return value_err!("delta is 0");
        }
        let (diff, dd) = (i128::from(l) - i128::from(s), i128::from(d));
        let n = if diff == 0 || (diff > 0) != (dd > 0) {
            0
        } else {
            (diff.abs() + dd.abs() - 1) / dd.abs()
        };
        let n = u64::try_from(n).unwrap_or(u64::MAX);
        numel(&[n])?;
        let vals: Vec<i64> = (0..n as i64)
            .map(|i| s.wrapping_add(i.wrapping_mul(d)))
            .collect();
        let t = Tensor::from_i64(vec![n], &vals);
        return if dtype == DType::I64 {
            Ok(t)
        } else {
            crate::cast::cast(&t, dtype, false)
        };
    }
    let get = |t: &Tensor, what: &str| -> KResult<f64> {
        match t
            .to_f64_vec()
            .map_err(|m| Fail::new(ErrorKind::DType, m))?
            .as_slice()
        {
            [v] => Ok(*v),
            _ => shape_err!("{what} must hold one element, got shape {:?}", t.shape()),
        }
    };
    let (sv, lv, dv) = (get(s, "start")?, get(l, "limit")?, get(d, "delta")?);
    if dv == 0.0 {
        return value_err!("delta is 0");
    }
    let n = ((lv - sv) / dv).ceil();
    if !n.is_finite() {
        return value_err!("range({sv}, {lv}, {dv}) has no finite length");
    }
    let n = if n <= 0.0 {
        0
    } else if n > fp8c_ir::MAX_ELEMENTS as f64 {
        u64::MAX
    } else {
        n as u64
    };
    numel(&[n])?;
    let t = match dtype {
        // f32 computes in f32, as the ONNX reference (numpy arange) and onnxruntime do.
        DType::F32 => {
            let (s, d) = (sv as f32, dv as f32);
            Tensor::from_f32(
                vec![n],
                &(0..n).map(|i| s + i as f32 * d).collect::<Vec<_>>(),
            )
        }
        _ => {
            let v: Vec<f64> = (0..n).map(|i| sv + i as f64 * dv).collect();
            crate::cast::cast(&Tensor::from_f64(vec![n], &v), dtype, false)?
        }
    };
    Ok(t)
}
