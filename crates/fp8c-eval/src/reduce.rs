//! The reduce family: reductions (`reduce_sum`, `reduce_mean`, `reduce_max`, `reduce_min`,
//! `reduce_prod`), the finiteness check `all_finite` and the running sum `cum_sum` (which sums
//! in order in the compute type, f32 for f16/bf16/f32, as onnxruntime's CumSum does); the global pools are reductions over
//! the spatial axes and come here from `pool.rs`.
//!
//! - `axes` None or empty reduces every axis (ONNX's absent axes input); axes may be
//!   negative; naming an axis twice is an error.
//! - Floats accumulate in f64 in index order and round once to the input's type, so results
//!   do not depend on threads (outputs are computed in parallel, each by one thread).
//! - Integers accumulate with wrapping i64 arithmetic and wrap to their type; an integer mean
//!   truncates toward zero (as onnxruntime). Bools reduce as 0/1 (max = any, min = all).
//! - `top_k` sorts each line with a total order (NaN above every number, equal elements in
//!   index order) and copies the selected elements' bytes, so values are exact in every type.
//! - Max/min propagate NaN. An empty reduction gives 0 (sum), 1 (prod), NaN (float mean),
//!   the lowest value (max: -inf for floats) or the highest (min).

use crate::args;
use crate::cast::cast;
use crate::data::{Data, dims_of, norm_axis, numel, par_map, strides_of};
use crate::error::{ErrorKind, Fail, KResult, attr_err, dtype_err, value_err};
use fp8c_ir::{DType, ReduceOp, Support, Tensor};
use std::borrow::Cow;

/// Evaluates an op of the reduce family.
pub(crate) fn eval(op: ReduceOp<'_>, inputs: &[&Tensor]) -> KResult<Vec<Tensor>> {
    let (kind, axes, keepdims) = match op {
        ReduceOp::ReduceMean { axes, keepdims } => (Reduction::Mean, axes, keepdims),
        ReduceOp::ReduceSum { axes, keepdims } => (Reduction::Sum, axes, keepdims),
        ReduceOp::ReduceMax { axes, keepdims } => (Reduction::Max, axes, keepdims),
        ReduceOp::ReduceMin { axes, keepdims } => (Reduction::Min, axes, keepdims),
        ReduceOp::ReduceProd { axes, keepdims } => (Reduction::Prod, axes, keepdims),
        ReduceOp::AllFinite => return Ok(vec![all_finite(inputs)?]),
        ReduceOp::CumSum { exclusive, reverse } => {
            let [x, axis] = args(inputs)?;
            return Ok(vec![cum_sum(x, axis, *exclusive, *reverse)?]);
        }
        ReduceOp::ArgMax {
            axis,
            keepdims,
            select_last_index,
        } => {
            let [x] = args(inputs)?;
            return Ok(vec![arg_extreme(
                x,
                *axis,
                *keepdims,
                *select_last_index,
                true,
            )?]);
        }
        ReduceOp::ArgMin {
            axis,
            keepdims,
            select_last_index,
        } => {
            let [x] = args(inputs)?;
            return Ok(vec![arg_extreme(
                x,
                *axis,
                *keepdims,
                *select_last_index,
                false,
            )?]);
        }
        ReduceOp::TopK {
            axis,
            largest,
            sorted: _,
        } => {
            let [x, k] = args(inputs)?;
            return top_k(x, k, *axis, *largest);
        }
        ReduceOp::__Lifetime(never, _) => match never {},
    };
    let [x] = args(inputs)?;
    Ok(vec![reduce(x, kind, axes.as_deref(), *keepdims)?])
}

/// Every op of the family is evaluated.
pub(crate) fn support(op: ReduceOp<'_>) -> Support {
    match op {
        ReduceOp::ReduceMean { .. }
        | ReduceOp::ReduceSum { .. }
        | ReduceOp::ReduceMax { .. }
        | ReduceOp::ReduceMin { .. }
        | ReduceOp::ReduceProd { .. }
        | ReduceOp::AllFinite
        | ReduceOp::CumSum { .. }
        | ReduceOp::ArgMax { .. }
        | ReduceOp::ArgMin { .. }
        | ReduceOp::TopK { .. } => Support::Yes,
        ReduceOp::__Lifetime(never, _) => match never {},
    }
}

/// Which reduction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reduction {
    Sum,
    Mean,
    Max,
    Min,
    Prod,
}

/// The reduced axes as a mask; None or empty = all.
fn axis_mask(axes: Option<&[i64]>, rank: usize) -> KResult<Vec<bool>> {
    match axes {
        None | Some([]) => Ok(vec![true; rank]),
        Some(list) => {
            let mut mask = vec![false; rank];
            for &a in list {
                let ax = norm_axis(a, rank)?;
                if mask[ax] {
                    return attr_err!("axes {list:?} name axis {ax} twice");
                }
                mask[ax] = true;
            }
            Ok(mask)
        }
    }
}

/// Evaluates a reduction.
fn reduce(x: &Tensor, kind: Reduction, axes: Option<&[i64]>, keepdims: bool) -> KResult<Tensor> {
    let dims = dims_of(x);
    let mask = axis_mask(axes, dims.len())?;
    let st = strides_of(&dims);
    let mut out_shape = Vec::new();
    let (mut kept_dims, mut kept_st, mut red_dims, mut red_st) = (vec![], vec![], vec![], vec![]);
    for (i, &d) in dims.iter().enumerate() {
        if mask[i] {
            red_dims.push(d);
            red_st.push(st[i]);
            if keepdims {
                out_shape.push(1u64);
            }
        } else {
            kept_dims.push(d);
            kept_st.push(st[i]);
            out_shape.push(d as u64);
        }
    }
    let n_out = numel(&out_shape)?;
    let red_offsets = offsets(&red_dims, &red_st);
    let bases: Vec<usize> = if n_out == 0 {
        vec![]
    } else {
        offsets(&kept_dims, &kept_st)
    };
    let dtype = x.dtype();
    if dtype.is_fp8() {
        return dtype_err!("expects a numeric input other than FP8, got {dtype}");
    }
    // Reduced axes that form a trailing block (global pools, a last-axis mean): each output
    // folds one contiguous run of x, read in place, with the same sequential f64 fold as
    // below (no f64 copy of the tensor, no offset tables; the same bits). Other reductions of
    // f32 read x in place through the offset tables, the same fold in the same order.
    let trailing = mask.iter().skip_while(|m| !**m).all(|m| *m);
    let count = red_offsets.len();
    // f32: read in place and each output rounded once straight to f32 (what the cast of the
    // f64 result below does), with no f64 copy of the tensor or of the result.
    if dtype == DType::F32
        && let Ok(v) = x.as_slice::<f32>()
    {
        let out: Vec<f32> = if trailing {
            par_map(&bases, |&b| {
                fold(kind, v[b..b + count].iter().map(|&e| f64::from(e)), count) as f32
            })
        } else {
            par_map(&bases, |&b| {
                fold(
                    kind,
                    red_offsets.iter().map(|&o| f64::from(v[b + o])),
                    count,
                ) as f32
            })
        };
        return Tensor::from_vec(DType::F32, out_shape, out)
            .map_err(|m| Fail::new(ErrorKind::TooLarge, m));
    }
    if trailing {
        let t = match x.dtype() {
            DType::F64 => {
                let v = x
                    .as_slice::<f64>()
                    .map_err(|m| Fail::new(ErrorKind::DType, m))?;
                let out = par_map(&bases, |&b| {
                    fold(kind, v[b..b + count].iter().copied(), count)
                });
                Some(Tensor::from_f64(out_shape.clone(), &out))
            }
            _ => None,
        };
        if let Some(t) = t {
            return cast(&t, dtype, false);
        }
    }
    let t = match Data::load(x)? {
        Data::F32(v) => float_reduce(
            &v.iter().map(|&x| f64::from(x)).collect::<Vec<_>>(),
            &bases,
            &red_offsets,
            kind,
            out_shape,
        )?,
        Data::F64(v) => float_reduce(&v, &bases, &red_offsets, kind, out_shape)?,
        _ => {
            let v = x.to_i64_vec().map_err(|m| Fail::new(ErrorKind::DType, m))?;
            let count = red_offsets.len() as i64;
            let (lo, hi) = int_range(dtype);
            let out = par_map(&bases, |&b| {
                let vals = red_offsets.iter().map(|&o| v[b + o]);
                match kind {
                    Reduction::Sum => vals.fold(0i64, i64::wrapping_add),
                    Reduction::Prod => vals.fold(1i64, i64::wrapping_mul),
                    Reduction::Max => vals.fold(lo, i64::max),
                    Reduction::Min => vals.fold(hi, i64::min),
                    Reduction::Mean if count == 0 => 0,
                    Reduction::Mean => vals.fold(0i64, i64::wrapping_add).wrapping_div(count),
                }
            });
            Tensor::from_i64(out_shape, &out)
        }
    };
    cast(&t, dtype, false)
}

fn float_reduce(
    v: &[f64],
    bases: &[usize],
    red: &[usize],
    kind: Reduction,
    shape: Vec<u64>,
) -> KResult<Tensor> {
    let out = par_map(bases, |&b| {
        fold(kind, red.iter().map(|&o| v[b + o]), red.len())
    });
    Ok(Tensor::from_f64(shape, &out))
}

/// One output of a float reduction: `vals` (`count` of them) folded in order in f64.
#[inline(always)]
fn fold(kind: Reduction, vals: impl Iterator<Item = f64>, count: usize) -> f64 {
    match kind {
        Reduction::Sum => vals.sum::<f64>(),
        Reduction::Mean => vals.sum::<f64>() / count as f64,
        Reduction::Prod => vals.product::<f64>(),
        Reduction::Max => vals.fold(f64::NEG_INFINITY, |a, x| {
            if a.is_nan() || x.is_nan() {
                f64::NAN
            } else {
                a.max(x)
            }
        }),
        Reduction::Min => vals.fold(f64::INFINITY, |a, x| {
            if a.is_nan() || x.is_nan() {
                f64::NAN
            } else {
                a.min(x)
            }
        }),
    }
}

/// The value range of an integer (or bool) dtype, as i64.
fn int_range(d: DType) -> (i64, i64) {
    match d {
        DType::I32 => (i32::MIN.into(), i32::MAX.into()),
        DType::I16 => (i16::MIN.into(), i16::MAX.into()),
        DType::I8 => (i8::MIN.into(), i8::MAX.into()),
        DType::U8 => (0, u8::MAX.into()),
        DType::Bool => (0, 1),
        _ => (i64::MIN, i64::MAX),
    }
}

/// Every element offset of a sub-grid (row-major over `dims` with the given strides).
fn offsets(dims: &[usize], strides: &[usize]) -> Vec<usize> {
    let mut out = vec![0usize];
    for (&d, &s) in dims.iter().zip(strides) {
        out = out
            .iter()
            .flat_map(|&b| (0..d).map(move |i| b + i * s))
            .collect();
    }
    out
}

/// `global_average_pool` / `global_max_pool`: reduce the spatial axes (2..), keeping them.
pub(crate) fn global_pool(x: &Tensor, kind: Reduction) -> KResult<Tensor> {
    let r = x.shape().len();
    if r < 3 {
        return crate::error::shape_err!("x must be [N, C, spatial...], got {:?}", x.shape());
    }
    if !x.dtype().is_float() || x.dtype().is_fp8() {
        return dtype_err!("expects a float input other than FP8, got {}", x.dtype());
    }
    let axes: Vec<i64> = (2..r as i64).collect();
    reduce(x, kind, Some(&axes), true)
}

/// True when every element of every input is finite.
fn all_finite(inputs: &[&Tensor]) -> KResult<Tensor> {
    if inputs.is_empty() {
        return Fail::arity("at least 1", 0);
    }
    let mut ok = true;
    for (i, t) in inputs.iter().enumerate() {
        ok &= if let (DType::F32, Ok(v)) = (t.dtype(), t.as_slice::<f32>()) {
            finite(v, f32::is_finite)
        } else {
            match Data::load(t)? {
                Data::F32(v) => finite(&v, f32::is_finite),
                Data::F64(v) => finite(&v, f64::is_finite),
                _ => return dtype_err!("input {i} must be a float tensor, got {}", t.dtype()),
            }
        };
    }
    Ok(Tensor::from_bool(vec![], &[ok]))
}

/// Whether `is_finite` holds for every element, read in place: blocks of 256 checked without
/// an early exit (so the check vectorises), stopping at the first block that fails. The
/// training step's guard over every gradient had copied each one first.
fn finite<T: Copy>(v: &[T], is_finite: impl Fn(T) -> bool) -> bool {
    v.chunks(256)
        .all(|b| b.iter().fold(true, |ok, &x| ok & is_finite(x)))
}

/// ONNX CumSum along the axis given by the scalar-like `axis` tensor.
fn cum_sum(x: &Tensor, axis: &Tensor, exclusive: bool, reverse: bool) -> KResult<Tensor> {
    if !matches!(axis.dtype(), DType::I64 | DType::I32) || axis.len() != 1 {
        return dtype_err!(
            "axis must be an i64 or i32 scalar, got {}{:?}",
            axis.dtype(),
            axis.shape()
        );
    }
    let a = crate::data::int_values(axis, "axis")?[0];
    let dims = dims_of(x);
    let ax = norm_axis(a, dims.len())?;
    let (outer, d, inner) = (
        dims[..ax].iter().product::<usize>(),
        dims[ax],
        dims[ax + 1..].iter().product::<usize>(),
    );
    fn scan<T: Copy + Default>(
        v: &[T],
        (outer, d, inner): (usize, usize, usize),
        exclusive: bool,
        reverse: bool,
        add: impl Fn(T, T) -> T,
    ) -> Vec<T> {
        let mut out = vec![T::default(); v.len()];
        for o in 0..outer {
            for i in 0..inner {
                let mut acc = T::default();
                for step in 0..d {
                    let j = if reverse { d - 1 - step } else { step };
                    let at = (o * d + j) * inner + i;
                    let next = add(acc, v[at]);
                    out[at] = if exclusive { acc } else { next };
                    acc = next;
                }
            }
        }
        out
    }
    let g = (outer, d, inner);
    let out = match Data::load(x)? {
        Data::F64(v) => Data::F64(Cow::from(scan(&v, g, exclusive, reverse, |a, b| a + b))),
        Data::F32(v) => Data::F32(Cow::from(scan(&v, g, exclusive, reverse, |a, b| a + b))),
        Data::I64(v) => Data::I64(Cow::from(scan(
            &v,
            g,
            exclusive,
            reverse,
            i64::wrapping_add,
        ))),
        Data::I32(v) => Data::I32(Cow::from(scan(
            &v,
            g,
            exclusive,
            reverse,
            i32::wrapping_add,
        ))),
        Data::I16(v) => Data::I16(Cow::from(scan(
            &v,
            g,
            exclusive,
            reverse,
            i16::wrapping_add,
        ))),
        Data::I8(v) => Data::I8(Cow::from(scan(&v, g, exclusive, reverse, i8::wrapping_add))),
        Data::U8(v) => Data::U8(Cow::from(scan(&v, g, exclusive, reverse, u8::wrapping_add))),
        Data::U16(v) => Data::U16(Cow::from(scan(
            &v,
            g,
            exclusive,
            reverse,
            u16::wrapping_add,
        ))),
        Data::U32(v) => Data::U32(Cow::from(scan(
            &v,
            g,
            exclusive,
            reverse,
            u32::wrapping_add,
        ))),
        Data::U64(v) => Data::U64(Cow::from(scan(
            &v,
            g,
            exclusive,
            reverse,
            u64::wrapping_add,
        ))),
        Data::Bool(_) => return dtype_err!("cum_sum takes numbers, got bool"),
    };
    out.store(x.dtype(), x.shape().to_vec())
}

/// ONNX ArgMax (`max`) / ArgMin: the i64 index of the extreme along the axis; ties give the
/// first index, or the last with `select_last_index`. A NaN is never selected over a number
/// (comparisons with NaN are false), as onnxruntime's loop does.
fn arg_extreme(x: &Tensor, axis: i64, keepdims: bool, last: bool, max: bool) -> KResult<Tensor> {
    let dims = dims_of(x);
    if dims.is_empty() {
        return Err(Fail::new(
            ErrorKind::Shape,
            "arg_max/arg_min need an input of rank ≥ 1",
        ));
    }
    let ax = norm_axis(axis, dims.len())?;
    let (outer, d, inner) = (
        dims[..ax].iter().product::<usize>(),
        dims[ax],
        dims[ax + 1..].iter().product::<usize>(),
    );
    if d == 0 {
        return Err(Fail::new(
            ErrorKind::Shape,
            format!("axis {ax} is empty: there is no extreme to index"),
        ));
    }
    let vals = match Data::load(x)? {
        Data::F64(v) => v,
        Data::F32(v) => v.iter().copied().map(f64::from).collect(),
        Data::I64(v) => v.iter().copied().map(|a| a as f64).collect(),
        Data::I32(v) => v.iter().copied().map(f64::from).collect(),
        Data::I16(v) => v.iter().copied().map(f64::from).collect(),
        Data::I8(v) => v.iter().copied().map(f64::from).collect(),
        Data::U8(v) => v.iter().copied().map(f64::from).collect(),
        Data::U16(v) => v.iter().copied().map(f64::from).collect(),
        Data::U32(v) => v.iter().copied().map(f64::from).collect(),
        Data::U64(v) => v.iter().copied().map(|a| a as f64).collect(),
        Data::Bool(_) => return dtype_err!("arg_max/arg_min take numbers, got bool"),
    };
    // i64 values beyond 2^53 compare exactly in i64, not f64.
    let ints = match x.dtype() {
        DType::I64 => Some(crate::data::int_values(x, "data")?),
        _ => None,
    };
    let better = |a: usize, b: usize| -> (bool, bool) {
        // (a strictly beats b, a equals b)
        match &ints {
            Some(v) => (if max { v[a] > v[b] } else { v[a] < v[b] }, v[a] == v[b]),
            None => (
                if max {
                    vals[a] > vals[b]
                } else {
                    vals[a] < vals[b]
                },
                vals[a] == vals[b],
            ),
        }
    };
    let mut out = Vec::with_capacity(outer * inner);
    for o in 0..outer {
        for i in 0..inner {
            let at = |j: usize| (o * d + j) * inner + i;
            let mut best = 0usize;
            for j in 1..d {
                let (beats, ties) = better(at(j), at(best));
                if beats || (last && ties) {
                    best = j;
                }
            }
            out.push(best as i64);
        }
    }
    let mut shape: Vec<u64> = Vec::with_capacity(dims.len());
    for (k, &n) in x.shape().iter().enumerate() {
        if k != ax {
            shape.push(n);
        } else if keepdims {
            shape.push(1);
        }
    }
    Tensor::from_pod(DType::I64, shape, &out).map_err(|m| Fail::new(ErrorKind::TooLarge, m))
}

/// Sort keys of one tensor: floats as f64 (exact for every float type), integers as i128
/// (exact for i64 and u64).
enum Keys {
    Float(Vec<f64>),
    Int(Vec<i128>),
}

impl Keys {
    fn of(x: &Tensor) -> KResult<Keys> {
        Ok(match Data::load(x)? {
            Data::F64(v) => Keys::Float(v.into_owned()),
            Data::F32(v) => Keys::Float(v.iter().copied().map(f64::from).collect()),
            Data::I64(v) => Keys::Int(v.iter().copied().map(i128::from).collect()),
            Data::I32(v) => Keys::Int(v.iter().copied().map(i128::from).collect()),
            Data::I16(v) => Keys::Int(v.iter().copied().map(i128::from).collect()),
            Data::I8(v) => Keys::Int(v.iter().copied().map(i128::from).collect()),
            Data::U8(v) => Keys::Int(v.iter().copied().map(i128::from).collect()),
            Data::U16(v) => Keys::Int(v.iter().copied().map(i128::from).collect()),
            Data::U32(v) => Keys::Int(v.iter().copied().map(i128::from).collect()),
            Data::U64(v) => Keys::Int(v.iter().copied().map(i128::from).collect()),
            Data::Bool(_) => return dtype_err!("top_k takes numbers, got bool"),
        })
    }

    /// Ascending total order of elements `a` and `b`: NaN above every number.
    fn cmp(&self, a: usize, b: usize) -> std::cmp::Ordering {
        match self {
            Keys::Int(v) => v[a].cmp(&v[b]),
            Keys::Float(v) => v[a]
                .partial_cmp(&v[b])
                .unwrap_or_else(|| v[a].is_nan().cmp(&v[b].is_nan())),
        }
    }
}

/// ONNX TopK: the `k` largest (or smallest) elements along the axis, sorted, equal ones in
/// index order, and their i64 indices.
fn top_k(x: &Tensor, k: &Tensor, axis: i64, largest: bool) -> KResult<Vec<Tensor>> {
    let dims = dims_of(x);
    if dims.is_empty() {
        return Err(Fail::new(
            ErrorKind::Shape,
            "top_k needs an input of rank ≥ 1",
        ));
    }
    let ax = norm_axis(axis, dims.len())?;
    if k.len() != 1 {
        return Err(Fail::new(
            ErrorKind::Shape,
            format!("k must hold one value, got shape {:?}", k.shape()),
        ));
    }
    let kv = crate::data::int_values(k, "k")?[0];
    let kn = match usize::try_from(kv) {
        Ok(n) if n <= dims[ax] => n,
        _ => return value_err!("k = {kv} is outside 0..={} (axis {ax})", dims[ax]),
    };
    let (outer, d, inner) = (
        dims[..ax].iter().product::<usize>(),
        dims[ax],
        dims[ax + 1..].iter().product::<usize>(),
    );
    let keys = Keys::of(x)?;
    let size = x.dtype().size();
    let src = x.bytes();
    let mut values = Vec::with_capacity(outer * kn * inner * size);
    let mut indices = vec![0i64; outer * kn * inner];
    let mut line: Vec<usize> = Vec::with_capacity(d);
    for o in 0..outer {
        for i in 0..inner {
            let at = |j: usize| (o * d + j) * inner + i;
            // Best first; equal keys in index order (a total order, so selection is exact).
            let order = |&a: &usize, &b: &usize| {
                let by_key = keys.cmp(at(a), at(b));
                (if largest { by_key.reverse() } else { by_key }).then(a.cmp(&b))
            };
            line.clear();
            line.extend(0..d);
            if kn > 0 && kn < d {
                line.select_nth_unstable_by(kn - 1, order);
            }
            line.truncate(kn);
            line.sort_unstable_by(order);
            for (r, &j) in line.iter().enumerate() {
                indices[(o * kn + r) * inner + i] = j as i64;
            }
        }
    }
    // Values in output order: gather the selected elements' bytes.
    for o in 0..outer {
        for r in 0..kn {
            for i in 0..inner {
                let j = indices[(o * kn + r) * inner + i] as usize;
                let e = (o * d + j) * inner + i;
                values.extend_from_slice(&src[e * size..(e + 1) * size]);
            }
        }
    }
    let mut shape = x.shape().to_vec();
    shape[ax] = kn as u64;
    let too_large = |m| Fail::new(ErrorKind::TooLarge, m);
    Ok(vec![
        Tensor::from_bytes(x.dtype(), shape.clone(), values).map_err(too_large)?,
        Tensor::from_pod(DType::I64, shape, &indices).map_err(too_large)?,
    ])
}
