//! Inference for the movement family: shape arithmetic and data movement (`shape`,
//! `reshape`, `transpose`, `(un)squeeze`, `flatten`, `concat`, `split`, `slice`, `gather`,
//! `expand`, `constant_of_shape`, `range`, `pad`, `tile`) and the gather gradient. Ops whose
//! output shape depends on an input's value read it when that input is a constant. The
//! element-indexed gathers and scatters and `trilu` are in `movement/indexed.rs`.

mod indexed;

use super::common::{
    Arg, DimProduct, MATH_FLOAT, NUMERIC, Res, args, args_opt, axes_of, axis_of, axis_range,
    broadcast_shapes, fmt_list, fmt_shape, is_index, is_math_float, is_numeric, norm_axis, unify,
    variadic,
};
use super::{InferInput, MAX_RANK};
use crate::{DType, Dim, MAX_ELEMENTS, MovementOp, Shape, Tensor, TensorType};
use std::collections::BTreeSet;

/// The output types of a movement op.
pub(super) fn infer(op: MovementOp<'_>, inputs: &[InferInput<'_>]) -> Res<Vec<TensorType>> {
    let one = |t: TensorType| vec![t];
    Ok(match op {
        MovementOp::Shape { start, end } => one(shape_op(inputs, *start, *end)?),
        MovementOp::Reshape { allowzero } => one(reshape(inputs, *allowzero)?),
        MovementOp::Transpose { perm } => one(transpose(inputs, perm)?),
        MovementOp::Unsqueeze { axes } => one(unsqueeze(inputs, axes)?),
        MovementOp::Squeeze { axes } => one(squeeze(inputs, axes.as_deref())?),
        MovementOp::Flatten { axis } => one(flatten(inputs, *axis)?),
        MovementOp::Concat { axis } => one(concat(inputs, *axis)?),
        MovementOp::Split { axis, split } => split_op(inputs, *axis, split)?,
        MovementOp::Slice => one(slice(inputs)?),
        MovementOp::Gather { axis } => one(gather(inputs, *axis)?),
        MovementOp::GatherNd { batch_dims } => one(gather_nd(inputs, *batch_dims)?),
        MovementOp::Expand => one(expand(inputs)?),
        MovementOp::ConstantOfShape { value } => one(constant_of_shape(inputs, value)?),
        MovementOp::Range => one(range(inputs)?),
        MovementOp::Pad { .. } => one(pad(inputs)?),
        MovementOp::Tile => one(tile(inputs)?),
        MovementOp::GatherElements { axis } => one(indexed::gather_elements(inputs, *axis)?),
        MovementOp::Trilu { .. } => {
            let ([x], k) = args_opt(inputs, ["input"], "k")?;
            x.expect_min_rank(2, "it works on matrices of the last two axes")?;
            if let Some(k) = k {
                k.expect(is_index(k.dtype()), "i64 or i32")?;
                k.expect_scalar_like()?;
            }
            one(x.ty.clone())
        }
        MovementOp::GatherGrad { axis, size } => {
            let [dy, indices] = args(inputs, ["dy", "indices"])?;
            dy.expect(is_math_float(dy.dtype()), MATH_FLOAT)?;
            indices.expect(is_index(indices.dtype()), "i64 or i32")?;
            let size =
                u64::try_from(*size).map_err(|_| format!("attribute size={size}, expected ≥ 0"))?;
            // data rank = dy rank − indices rank + 1
            let data_rank = (dy.rank() + 1)
                .checked_sub(indices.rank())
                .filter(|&r| r >= 1)
                .ok_or_else(|| {
                    dy.shape_err(format!(
                        "has fewer dims than {indices} {} needs",
                        indices.ty
                    ))
                })?;
            let ax = norm_axis(*axis, data_rank).ok_or_else(|| {
                format!(
                    "attribute axis={axis} is out of range {} for the data",
                    axis_range(data_rank)
                )
            })?;
            let (before, rest) = dy.shape().split_at(ax);
            let (idx_dims, after) = rest.split_at(indices.rank());
            if idx_dims
                .iter()
                .zip(indices.shape())
                .any(|(a, b)| unify(a, b).is_none())
            {
                return Err(dy.shape_err(format!(
                    "its dims {ax}.. must be {indices}'s {}",
                    indices.ty
                )));
            }
            let mut shape = before.to_vec();
            shape.push(Dim::Known(size));
            shape.extend_from_slice(after);
            vec![TensorType::new(dy.dtype(), shape)]
        }
        MovementOp::ScatterElements { axis, reduction } => {
            one(indexed::scatter_elements(inputs, *axis, *reduction)?)
        }
        MovementOp::ScatterNd { reduction } => one(indexed::scatter_nd(inputs, *reduction)?),
        MovementOp::After => {
            let [x, _dep] = args(inputs, ["x", "dep"])?;
            one(x.ty.clone())
        }
        MovementOp::__Lifetime(never, _) => match never {},
    })
}

/// The sum of two dims (concat's axis).
fn add_dims(a: &Dim, b: &Dim) -> Res<Dim> {
    Ok(match (a, b) {
        (Dim::Known(x), Dim::Known(y)) => {
            Dim::Known(x.checked_add(*y).ok_or("concatenated size overflows u64")?)
        }
        (Dim::Known(0), d) | (d, Dim::Known(0)) => d.clone(),
        _ => Dim::Unknown,
    })
}

/// A 1-D integer input holding sizes, indices or axes: its length when static and its
/// values when constant.
struct IntList {
    len: Option<usize>,
    values: Option<Vec<i64>>,
}

fn int_list(a: &Arg<'_>) -> Res<IntList> {
    a.expect(is_index(a.dtype()), "i64 or i32 (a 1-D list)")?;
    let [n] = a.shape() else {
        return Err(a.shape_err("expected a 1-D list"));
    };
    let static_len = match n {
        Dim::Known(n) => {
            Some(usize::try_from(*n).map_err(|_| a.shape_err("its length is absurd"))?)
        }
        _ => None,
    };
    let values = match a.value {
        Some(t) => Some(t.to_i64_vec().map_err(|e| format!("{a}: {e}"))?),
        None => None,
    };
    if let (Some(n), Some(v)) = (static_len, &values)
        && n != v.len()
    {
        return Err(a.shape_err(format!("but its constant value has {} entries", v.len())));
    }
    Ok(IntList {
        len: values.as_ref().map(Vec::len).or(static_len),
        values,
    })
}

/// `n` unknown dims, for a shape tensor whose length is known but not its values.
fn unknown_dims(n: usize, from: &Arg<'_>) -> Res<Shape> {
    if n > MAX_RANK {
        return Err(from.shape_err(format!("a rank of {n} exceeds the maximum ({MAX_RANK})")));
    }
    Ok(vec![Dim::Unknown; n])
}

/// Sizes from a constant shape tensor: each must be ≥ 0.
fn sizes_from(values: &[i64], from: &Arg<'_>) -> Res<Shape> {
    if values.len() > MAX_RANK {
        return Err(from.shape_err(format!(
            "a rank of {} exceeds the maximum ({MAX_RANK})",
            values.len()
        )));
    }
    values
        .iter()
        .map(|&v| {
            u64::try_from(v)
                .map(Dim::Known)
                .map_err(|_| format!("{from} is {}, sizes must be ≥ 0", fmt_list(values)))
        })
        .collect()
}

/// Errors when the known part of a computed shape holds more than `MAX_ELEMENTS` elements.
fn check_size(shape: &[Dim]) -> Res<()> {
    let known = shape
        .iter()
        .filter_map(Dim::known)
        .try_fold(1u64, |a, d| a.checked_mul(d));
    let zero = shape.contains(&Dim::Known(0));
    match known {
        _ if zero => Ok(()),
        Some(n) if n <= MAX_ELEMENTS => Ok(()),
        _ => Err(format!(
            "the output shape {} is too large (more than {MAX_ELEMENTS} elements)",
            fmt_shape(shape)
        )),
    }
}

fn shape_op(inputs: &[InferInput<'_>], start: i64, end: Option<i64>) -> Res<TensorType> {
    let [x] = args(inputs, ["data"])?;
    let r = i64::try_from(x.rank()).map_err(|_| "rank too large".to_string())?;
    // Negative positions count from the end; then both clamp to [0, rank].
    let clamp = |v: i64| if v < 0 { v.saturating_add(r) } else { v }.clamp(0, r);
    let (s, e) = (clamp(start), clamp(end.unwrap_or(r)));
    let len = u64::try_from(e.saturating_sub(s)).unwrap_or(0);
    Ok(TensorType::fixed(DType::I64, &[len]))
}

fn reshape(inputs: &[InferInput<'_>], allowzero: bool) -> Res<TensorType> {
    let [data, shape] = args(inputs, ["data", "shape"])?;
    let list = int_list(&shape)?;
    let Some(target) = list.values else {
        let n = list.len.ok_or_else(|| {
            shape.shape_err("its length is not known, so neither is the output rank")
        })?;
        return Ok(TensorType::new(data.dtype(), unknown_dims(n, &shape)?));
    };
    if target.len() > MAX_RANK {
        return Err(shape.shape_err(format!(
            "a rank of {} exceeds the maximum ({MAX_RANK})",
            target.len()
        )));
    }
    let listed = fmt_list(&target);
    if allowzero && target.contains(&0) && target.contains(&-1) {
        return Err(format!(
            "{shape} is {listed}: with allowzero=true it cannot hold both 0 and -1"
        ));
    }
    let mut out = Vec::with_capacity(target.len());
    let mut infer_at = None;
    for (i, &t) in target.iter().enumerate() {
        out.push(match t {
            -1 if infer_at.is_some() => return Err(format!("{shape} is {listed}: at most one -1 is allowed")),
            -1 => {
                infer_at = Some(i);
                Dim::Unknown
            }
            0 if !allowzero => data.shape().get(i).cloned().ok_or_else(|| {
                format!("{shape} is {listed}: its 0 at position {i} copies a dim that {data} {} does not have", data.ty)
            })?,
            t => Dim::Known(u64::try_from(t).map_err(|_| format!("{shape} is {listed}: sizes must be ≥ -1"))?),
        });
    }
    let have = DimProduct::of(data.shape()).map_err(|e| data.shape_err(e))?;
    let cannot = |why: String| format!("{data} {} cannot be reshaped to {listed}: {why}", data.ty);
    match infer_at {
        Some(i) => {
            let rest = DimProduct::of(
                out.iter()
                    .enumerate()
                    .filter(|&(j, _)| j != i)
                    .map(|(_, d)| d),
            )
            .map_err(cannot)?;
            let inferred = have.quotient(&rest).map_err(cannot)?;
            if let Some(slot) = out.get_mut(i) {
                *slot = inferred;
            }
        }
        None => {
            let want = DimProduct::of(&out).map_err(cannot)?;
            if have.is_known() && want.is_known() && have.known != want.known {
                return Err(cannot(format!("{} elements vs {}", have.known, want.known)));
            }
        }
    }
    Ok(TensorType::new(data.dtype(), out))
}

fn transpose(inputs: &[InferInput<'_>], perm: &[i64]) -> Res<TensorType> {
    let [x] = args(inputs, ["data"])?;
    let r = x.rank();
    let perm: Vec<usize> = if perm.is_empty() {
        (0..r).rev().collect()
    } else {
        let bad = || {
            x.shape_err(format!(
                "attribute perm={} is not a permutation of 0..{r}",
                fmt_list(perm)
            ))
        };
        let p: Vec<usize> = perm
            .iter()
            .map(|&a| usize::try_from(a).ok().filter(|&a| a < r).ok_or_else(bad))
            .collect::<Res<_>>()?;
        if p.len() != r || p.iter().collect::<BTreeSet<_>>().len() != r {
            return Err(bad());
        }
        p
    };
    let shape = perm
        .iter()
        .filter_map(|&a| x.shape().get(a).cloned())
        .collect();
    Ok(TensorType::new(x.dtype(), shape))
}

/// `axes` are positions in the output (rank + axes.len()).
fn unsqueeze(inputs: &[InferInput<'_>], axes: &[i64]) -> Res<TensorType> {
    let [x] = args(inputs, ["data"])?;
    if axes.is_empty() {
        return Err("attribute axes is empty, expected at least one axis".into());
    }
    let out_rank = x.rank().checked_add(axes.len()).ok_or("rank overflows")?;
    let mut inserted = BTreeSet::new();
    for &a in axes {
        let ax = norm_axis(a, out_rank).ok_or_else(|| {
            x.shape_err(format!(
                "axes entry {a} is out of range for the output rank {out_rank} {}",
                axis_range(out_rank)
            ))
        })?;
        if !inserted.insert(ax) {
            return Err(x.shape_err(format!(
                "axes {} names output axis {ax} twice",
                fmt_list(axes)
            )));
        }
    }
    let mut dims = x.shape().iter();
    let shape = (0..out_rank)
        .map(|i| {
            if inserted.contains(&i) {
                Dim::Known(1)
            } else {
                dims.next().cloned().unwrap_or(Dim::Unknown)
            }
        })
        .collect();
    Ok(TensorType::new(x.dtype(), shape))
}

/// `axes` None removes the dims known to be 1 (symbolic dims stay: they are assumed not 1).
fn squeeze(inputs: &[InferInput<'_>], axes: Option<&[i64]>) -> Res<TensorType> {
    let [x] = args(inputs, ["data"])?;
    let removed: BTreeSet<usize> = match axes {
        None => x
            .shape()
            .iter()
            .enumerate()
            .filter(|(_, d)| **d == Dim::Known(1))
            .map(|(i, _)| i)
            .collect(),
        Some(a) => {
            let axes = axes_of(&x, a, "axes")?;
            for &ax in &axes {
                if let Some(Dim::Known(n)) = x.shape().get(ax)
                    && *n != 1
                {
                    return Err(x.shape_err(format!(
                        "axis {ax} has size {n}, only size-1 axes can be squeezed"
                    )));
                }
            }
            axes.into_iter().collect()
        }
    };
    let shape = x
        .shape()
        .iter()
        .enumerate()
        .filter(|(i, _)| !removed.contains(i))
        .map(|(_, d)| d.clone())
        .collect();
    Ok(TensorType::new(x.dtype(), shape))
}

fn flatten(inputs: &[InferInput<'_>], axis: i64) -> Res<TensorType> {
    let [x] = args(inputs, ["input"])?;
    let r = x.rank();
    // Flatten's axis may also equal the rank: [-r, r].
    let ax = i64::try_from(r)
        .ok()
        .and_then(|ri| norm_axis(axis, r).or((axis == ri).then_some(r)))
        .ok_or_else(|| x.shape_err(format!("axis={axis} is out of range [-{r}, {r}]")))?;
    let (outer, inner) = x.shape().split_at_checked(ax).unwrap_or((x.shape(), &[]));
    let outer = DimProduct::of(outer).map_err(|e| x.shape_err(e))?.to_dim();
    let inner = DimProduct::of(inner).map_err(|e| x.shape_err(e))?.to_dim();
    Ok(TensorType::new(x.dtype(), vec![outer, inner]))
}

fn concat(inputs: &[InferInput<'_>], axis: i64) -> Res<TensorType> {
    let all = variadic(inputs)?;
    let Some(first) = all.first() else {
        return Err("expects at least 1 input, got 0".into());
    };
    let ax = axis_of(first, axis, "axis")?;
    let mut shape = first.ty.shape.clone();
    for x in all.iter().skip(1) {
        x.expect_same_dtype(first)?;
        if x.rank() != first.rank() {
            return Err(x.shape_err(format!("expected rank {} like {first}", first.rank())));
        }
        for (i, (acc, d)) in shape.iter_mut().zip(x.shape()).enumerate() {
            *acc = if i == ax {
                add_dims(acc, d)?
            } else {
                unify(acc, d).ok_or_else(|| {
                    x.shape_err(format!("its dim {i} ({d}) must equal the other inputs' ({acc}); only axis {ax} may differ"))
                })?
            };
        }
    }
    Ok(TensorType::new(first.dtype(), shape))
}

fn split_op(inputs: &[InferInput<'_>], axis: i64, split: &[i64]) -> Res<Vec<TensorType>> {
    let [x] = args(inputs, ["input"])?;
    let ax = axis_of(&x, axis, "axis")?;
    let dim = x.shape().get(ax).and_then(Dim::known);
    let sizes: Vec<Dim> = if split.iter().all(|&s| s == EQUAL_PARTS) && !split.is_empty() {
        match dim {
            Some(d) => split_sizes(split, d)
                .map_err(|e| x.shape_err(e))?
                .into_iter()
                .map(Dim::Known)
                .collect(),
            None => vec![Dim::Unknown; split.len()],
        }
    } else {
        if split.is_empty() {
            return Err("attribute split is empty, expected one size per output".into());
        }
        let sizes: Vec<u64> = split
            .iter()
            .map(|&s| {
                u64::try_from(s).map_err(|_| {
                    format!(
                        "attribute split={}: sizes must be ≥ 0 (or all -1: equal parts)",
                        fmt_list(split)
                    )
                })
            })
            .collect::<Res<_>>()?;
        let total = sizes
            .iter()
            .try_fold(0u64, |a, &s| a.checked_add(s))
            .ok_or("split sizes overflow")?;
        if let Some(d) = dim
            && d != total
        {
            return Err(x.shape_err(format!(
                "attribute split={} sums to {total}, but axis {ax} has size {d}",
                fmt_list(split)
            )));
        }
        sizes.into_iter().map(Dim::Known).collect()
    };
    Ok(sizes
        .into_iter()
        .map(|s| {
            let mut shape = x.ty.shape.clone();
            if let Some(d) = shape.get_mut(ax) {
                *d = s;
            }
            TensorType::new(x.dtype(), shape)
        })
        .collect())
}

/// The `split` entry meaning "equal parts": a `split` of n entries all equal to it is ONNX
/// Split's `num_outputs = n` (parts of `ceil(d / n)`, the last one smaller), resolved when the
/// axis size `d` is known (canonicalize then writes the sizes).
pub const EQUAL_PARTS: i64 = -1;

/// The part sizes of a `split { split }` of an axis of size `dim` (see [`EQUAL_PARTS`]), or
/// a message saying why they do not fit.
pub fn split_sizes(split: &[i64], dim: u64) -> Result<Vec<u64>, String> {
    if split.is_empty() {
        return Err("attribute split is empty, expected one size per output".into());
    }
    if split.iter().all(|&s| s == EQUAL_PARTS) {
        let n = split.len() as u64;
        let chunk = dim.div_ceil(n);
        let mut left = dim;
        let sizes: Vec<u64> = (0..n)
            .map(|_| {
                let s = chunk.min(left);
                left -= s;
                s
            })
            .collect();
        if sizes.last() == Some(&0) && dim >= n {
            return Err(format!(
                "axis size {dim} does not split into {n} parts of ceil({dim}/{n}) = {chunk}"
            ));
        }
        return Ok(sizes);
    }
    let sizes: Vec<u64> = split
        .iter()
        .map(|&s| u64::try_from(s))
        .collect::<Result<_, _>>()
        .map_err(|_| format!("attribute split={}: sizes must be ≥ 0", fmt_list(split)))?;
    let total = sizes
        .iter()
        .try_fold(0u64, |a, &s| a.checked_add(s))
        .ok_or("split sizes overflow")?;
    if total != dim {
        return Err(format!(
            "attribute split={} sums to {total}, but the axis has size {dim}",
            fmt_list(split)
        ));
    }
    Ok(sizes)
}

/// Length of `start..end` by `step` over a dim of size `dim`, with ONNX's clamping.
fn slice_len(dim: u64, start: i64, end: i64, step: i64) -> u64 {
    let d = i128::from(dim);
    if d == 0 || step == 0 {
        return 0;
    }
    let (mut s, mut e, st) = (i128::from(start), i128::from(end), i128::from(step));
    if s < 0 {
        s += d;
    }
    if e < 0 {
        e += d;
    }
    let len = if st > 0 {
        let (s, e) = (s.clamp(0, d), e.clamp(0, d));
        if e > s { (e - s + st - 1) / st } else { 0 }
    } else {
        let (s, e) = (s.clamp(0, d - 1), e.clamp(-1, d - 1));
        if s > e { (s - e - st - 1) / -st } else { 0 }
    };
    u64::try_from(len).unwrap_or(0)
}

/// A slice of a dim whose size is not known keeps that dim only when it takes everything.
fn slice_symbolic(dim: &Dim, start: i64, end: i64, step: i64) -> Dim {
    let huge = i64::from(i32::MAX);
    let whole_forward = step == 1 && start == 0 && end >= huge;
    let whole_backward = step == -1 && (start == -1 || start >= huge) && end <= -huge;
    if whole_forward || whole_backward {
        dim.clone()
    } else {
        Dim::Unknown
    }
}

fn slice(inputs: &[InferInput<'_>]) -> Res<TensorType> {
    let [data, starts, ends, axes, steps] =
        args(inputs, ["data", "starts", "ends", "axes", "steps"])?;
    let lists = [
        (starts, int_list(&starts)?),
        (ends, int_list(&ends)?),
        (axes, int_list(&axes)?),
        (steps, int_list(&steps)?),
    ];
    let known_len = lists.iter().find_map(|(a, l)| l.len.map(|n| (a, n)));
    if let Some((first, n)) = known_len
        && let Some((a, l)) = lists.iter().find(|(_, l)| l.len.is_some_and(|m| m != n))
    {
        return Err(a.shape_err(format!(
            "it has {} entries but {first} has {n}",
            l.len.unwrap_or(0)
        )));
    }
    let [(_, s), (_, e), (_, a), (_, st)] = lists;
    let mut shape = data.ty.shape.clone();
    let Some(axes_v) = a.values else {
        // Any axis may be sliced.
        return Ok(TensorType::new(
            data.dtype(),
            vec![Dim::Unknown; shape.len()],
        ));
    };
    let axes_v = axes_of(&data, &axes_v, "axes")?;
    let (Some(sv), Some(ev), Some(stv)) = (s.values, e.values, st.values) else {
        for ax in axes_v {
            if let Some(d) = shape.get_mut(ax) {
                *d = Dim::Unknown;
            }
        }
        return Ok(TensorType::new(data.dtype(), shape));
    };
    for (((ax, start), end), step) in axes_v.into_iter().zip(sv).zip(ev).zip(stv) {
        if step == 0 {
            return Err(format!("{steps} holds a 0 step, steps must be non-zero"));
        }
        if let Some(d) = shape.get_mut(ax) {
            *d = match &*d {
                Dim::Known(n) => Dim::Known(slice_len(*n, start, end, step)),
                other => slice_symbolic(other, start, end, step),
            };
        }
    }
    Ok(TensorType::new(data.dtype(), shape))
}

fn gather(inputs: &[InferInput<'_>], axis: i64) -> Res<TensorType> {
    let [data, indices] = args(inputs, ["data", "indices"])?;
    indices.expect(is_index(indices.dtype()), "i64 or i32")?;
    let ax = axis_of(&data, axis, "axis")?;
    let (before, after) = data
        .shape()
        .split_at_checked(ax)
        .ok_or("axis out of range")?;
    let Some((axis_dim, after)) = after.split_first() else {
        return Err(data.shape_err(format!("axis={axis} is out of range")));
    };
    if let (Some(t), Dim::Known(size)) = (indices.value, axis_dim) {
        let vals = t.to_i64_vec().map_err(|e| format!("{indices}: {e}"))?;
        let lim = i128::from(*size);
        if let Some(bad) = vals
            .iter()
            .find(|&&i| !(-lim..lim).contains(&i128::from(i)))
        {
            return Err(format!(
                "{indices} holds index {bad}, out of range for axis {ax} of size {size} in {data} {}",
                data.ty
            ));
        }
    }
    let mut shape = before.to_vec();
    shape.extend_from_slice(indices.shape());
    shape.extend_from_slice(after);
    Ok(TensorType::new(data.dtype(), shape))
}

/// ONNX GatherND: `indices.shape[..q-1] ++ data.shape[b + k..]` with `k = indices.shape[q-1]`
/// (which must be known), `b = batch_dims`; the first b dims of data and indices must agree.
fn gather_nd(inputs: &[InferInput<'_>], batch_dims: i64) -> Res<TensorType> {
    let [data, indices] = args(inputs, ["data", "indices"])?;
    indices.expect(indices.dtype() == DType::I64, "i64")?;
    indices.expect_min_rank(1, "its last dim is the index tuple's length")?;
    let (r, q) = (data.rank(), indices.rank());
    let b = usize::try_from(batch_dims)
        .ok()
        .filter(|&b| b < q.min(r.max(1)))
        .ok_or_else(|| {
            format!(
                "batch_dims={batch_dims} must be in 0..min(rank(data), rank(indices)) = 0..{}",
                q.min(r)
            )
        })?;
    let Some(Dim::Known(k)) = indices.shape().last() else {
        return Err(indices.shape_err("its last dim (the index tuple's length) must be known"));
    };
    let k = usize::try_from(*k).map_err(|_| indices.shape_err("its last dim is too large"))?;
    if k == 0 || b + k > r {
        return Err(indices.shape_err(format!(
            "its last dim ({k}) must be in 1..=rank(data) - batch_dims = {}",
            r.saturating_sub(b)
        )));
    }
    let mut shape = Vec::with_capacity(q - 1 + r - b - k);
    for (i, (d, e)) in data.shape()[..b]
        .iter()
        .zip(&indices.shape()[..b])
        .enumerate()
    {
        shape.push(unify(d, e).ok_or_else(|| {
            format!(
                "batch dim {i} differs: {data} {} vs {indices} {}",
                data.ty, indices.ty
            )
        })?);
    }
    shape.extend_from_slice(&indices.shape()[b..q - 1]);
    shape.extend_from_slice(&data.shape()[b + k..]);
    if let (Some(t), true) = (indices.value, data.ty.is_static()) {
        let vals = t.to_i64_vec().map_err(|e| format!("{indices}: {e}"))?;
        for chunk in vals.chunks(k) {
            for (j, &i) in chunk.iter().enumerate() {
                if let Dim::Known(size) = data.shape()[b + j] {
                    let lim = i128::from(size);
                    if !(-lim..lim).contains(&i128::from(i)) {
                        return Err(format!(
                            "{indices} holds index {i}, out of range for axis {} of size {size} in {data} {}",
                            b + j,
                            data.ty
                        ));
                    }
                }
            }
        }
    }
    Ok(TensorType::new(data.dtype(), shape))
}

/// Bidirectional broadcast of the input with the target shape.
fn expand(inputs: &[InferInput<'_>]) -> Res<TensorType> {
    let [x, shape] = args(inputs, ["input", "shape"])?;
    let list = int_list(&shape)?;
    let target = match (&list.values, list.len) {
        (Some(v), _) => sizes_from(v, &shape)?,
        (None, Some(n)) => unknown_dims(n, &shape)?,
        (None, None) => {
            return Err(shape.shape_err("its length is not known, so neither is the output rank"));
        }
    };
    let out = broadcast_shapes(x.shape(), &target).map_err(|(a, b)| {
        format!(
            "{shape} is {}, which does not broadcast with {x} {} ({b} vs {a})",
            fmt_shape(&target),
            x.ty
        )
    })?;
    check_size(&out)?;
    Ok(TensorType::new(x.dtype(), out))
}

fn constant_of_shape(inputs: &[InferInput<'_>], value: &Tensor) -> Res<TensorType> {
    let [shape] = args(inputs, ["input"])?;
    if value.len() != 1 {
        return Err(format!(
            "attribute value has type {}, expected one element",
            value.ty()
        ));
    }
    let list = int_list(&shape)?;
    let dims = match (&list.values, list.len) {
        (Some(v), _) => sizes_from(v, &shape)?,
        (None, Some(n)) => unknown_dims(n, &shape)?,
        (None, None) => {
            return Err(shape.shape_err("its length is not known, so neither is the output rank"));
        }
    };
    check_size(&dims)?;
    Ok(TensorType::new(value.dtype(), dims))
}

/// A scalar input's value as f64 (ints and non-FP8 floats).
fn scalar_value(a: &Arg<'_>) -> Res<Option<f64>> {
    let Some(t) = a.value else { return Ok(None) };
    let v = t.to_f64_vec().map_err(|e| format!("{a}: {e}"))?;
    Ok(v.first().copied())
}

fn scalar_int(a: &Arg<'_>) -> Res<Option<i64>> {
    let Some(t) = a.value else { return Ok(None) };
    let v = t.to_i64_vec().map_err(|e| format!("{a}: {e}"))?;
    Ok(v.first().copied())
}

/// Number of elements of `range(start, limit, delta)`: `max(ceil((limit − start) / delta), 0)`.
fn range_len(start: &Arg<'_>, limit: &Arg<'_>, delta: &Arg<'_>) -> Res<Option<u64>> {
    let n: i128 = if start.dtype().is_int() {
        let (Some(s), Some(l), Some(d)) =
            (scalar_int(start)?, scalar_int(limit)?, scalar_int(delta)?)
        else {
            return Ok(None);
        };
        if d == 0 {
            return Err(format!("{delta} is 0, expected a non-zero step"));
        }
        let (diff, d) = (i128::from(l) - i128::from(s), i128::from(d));
        if diff == 0 || (diff > 0) != (d > 0) {
            0
        } else {
            (diff.abs() + d.abs() - 1) / d.abs()
        }
    } else {
        let (Some(s), Some(l), Some(d)) = (
            scalar_value(start)?,
            scalar_value(limit)?,
            scalar_value(delta)?,
        ) else {
            return Ok(None);
        };
        for (what, v) in [("start", s), ("limit", l), ("delta", d)] {
            if v.is_nan() {
                return Err(format!("the {what} of Range is NaN"));
            }
        }
        if d == 0.0 {
            return Err(format!("{delta} is 0, expected a non-zero step"));
        }
        let n = ((l - s) / d).ceil();
        if !n.is_finite() {
            return Err(format!("range({s}, {l}, {d}) has no finite length"));
        }
        if n > MAX_ELEMENTS as f64 {
            i128::from(MAX_ELEMENTS) + 1
        } else {
            n.max(0.0) as i128
        }
    };
    match u64::try_from(n) {
        Ok(n) if n <= MAX_ELEMENTS => Ok(Some(n)),
        _ => Err(format!(
            "range has {n} elements, more than the maximum {MAX_ELEMENTS}"
        )),
    }
}

fn range(inputs: &[InferInput<'_>]) -> Res<TensorType> {
    let [start, limit, delta] = args(inputs, ["start", "limit", "delta"])?;
    start.expect(is_numeric(start.dtype()), NUMERIC)?;
    for a in [start, limit, delta] {
        a.expect_same_dtype(&start)?;
        a.expect_scalar_like()?;
    }
    let n = range_len(&start, &limit, &delta)?;
    Ok(TensorType::new(
        start.dtype(),
        vec![n.map_or(Dim::Unknown, Dim::Known)],
    ))
}

/// `pads` is `[begin_0, begin_1, ..., end_0, end_1, ...]`; negative pads crop.
fn pad(inputs: &[InferInput<'_>]) -> Res<TensorType> {
    let [x, pads, value] = args(inputs, ["data", "pads", "constant_value"])?;
    let list = int_list(&pads)?;
    let r = x.rank();
    let want = r.checked_mul(2).ok_or("rank overflows")?;
    if let Some(n) = list.len
        && n != want
    {
        return Err(pads.shape_err(format!(
            "expected {want} entries (begin and end for each of the {r} axes of {x})"
        )));
    }
    value.expect_same_dtype(&x)?;
    value.expect_scalar_like()?;
    let Some(p) = list.values else {
        return Ok(TensorType::new(x.dtype(), vec![Dim::Unknown; r]));
    };
    let (begin, end) = p.split_at_checked(r).ok_or("pads length mismatch")?;
    let mut shape = Vec::with_capacity(r);
    for (i, ((d, &b), &e)) in x.shape().iter().zip(begin).zip(end).enumerate() {
        let grow = i128::from(b) + i128::from(e);
        shape.push(match d {
            Dim::Known(n) => {
                let size = i128::from(*n) + grow;
                Dim::Known(u64::try_from(size).map_err(|_| {
                    format!(
                        "{pads} is {}: axis {i} of {x} {} would have size {size}",
                        fmt_list(&p),
                        x.ty
                    )
                })?)
            }
            other if grow == 0 => other.clone(),
            _ => Dim::Unknown,
        });
    }
    check_size(&shape)?;
    Ok(TensorType::new(x.dtype(), shape))
}

fn tile(inputs: &[InferInput<'_>]) -> Res<TensorType> {
    let [x, repeats] = args(inputs, ["input", "repeats"])?;
    let list = int_list(&repeats)?;
    if let Some(n) = list.len
        && n != x.rank()
    {
        return Err(repeats.shape_err(format!(
            "expected {} entries (one per axis of {x})",
            x.rank()
        )));
    }
    let Some(reps) = list.values else {
        let shape = x
            .shape()
            .iter()
            .map(|d| {
                if *d == Dim::Known(0) {
                    d.clone()
                } else {
                    Dim::Unknown
                }
            })
            .collect();
        return Ok(TensorType::new(x.dtype(), shape));
    };
    let mut shape = Vec::with_capacity(reps.len());
    for (d, &rep) in x.shape().iter().zip(&reps) {
        let rep = u64::try_from(rep)
            .map_err(|_| format!("{repeats} is {}: repeats must be ≥ 0", fmt_list(&reps)))?;
        shape.push(match (d, rep) {
            (Dim::Known(n), _) => Dim::Known(n.checked_mul(rep).ok_or("tiled size overflows u64")?),
            (_, 0) => Dim::Known(0),
            (other, 1) => other.clone(),
            _ => Dim::Unknown,
        });
    }
    check_size(&shape)?;
    Ok(TensorType::new(x.dtype(), shape))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slice_len_follows_onnx_clamping() {
        assert_eq!(slice_len(10, 2, 8, 3), 2); // 2, 5
        assert_eq!(slice_len(10, -1, i64::MIN, -1), 10);
        assert_eq!(slice_len(10, i64::MAX, i64::MIN, -2), 5);
        assert_eq!(slice_len(10, 0, i64::MAX, 1), 10);
        assert_eq!(slice_len(0, -1, i64::MIN, -1), 0);
        assert_eq!(slice_len(4, 3, 1, 1), 0);
    }
}
