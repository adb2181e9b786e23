//! The movement ops that address single elements through an index tensor
//! (`gather_elements`, `scatter_elements`, `scatter_nd`) and `trilu`.
//!
//! Gathers, overwriting scatters (`reduction = none`) and `trilu` move raw bytes, so they take
//! every dtype (FP8 included). Scatters with a reduction combine values in the compute type
//! of [`Data`] (f16/bf16 in f32, rounded once when stored), one update after the other in
//! row-major order of the updates, as onnxruntime applies them: integers wrap, and max/min
//! propagate NaN (as the ONNX reference's `np.maximum`). With `none`, a repeated index keeps
//! the last update (ONNX leaves that case undefined).

use crate::data::{Data, dims_of, strides_of, tensor};
use crate::error::{ErrorKind, Fail, KResult, dtype_err, shape_err, value_err};
use fp8c_ir::{DType, ScatterReduction, Tensor};
use std::borrow::Cow;

/// `index` counted from the front of an axis of size `size`, or an error naming `axis`.
fn index_in(index: i64, size: usize, axis: usize) -> KResult<usize> {
    let s = size as i64;
    let j = if index < 0 { index + s } else { index };
    if j < 0 || j >= s {
        return value_err!("index {index} is out of range for axis {axis} of size {size}");
    }
    Ok(j as usize)
}

/// Values of an i64/i32 index tensor.
fn index_values(indices: &Tensor) -> KResult<Vec<i64>> {
    if !matches!(indices.dtype(), DType::I64 | DType::I32) {
        return dtype_err!("indices must be i64 or i32, got {}", indices.dtype());
    }
    indices
        .to_i64_vec()
        .map_err(|m| Fail::new(ErrorKind::DType, m))
}

/// For each element of `indices` (data's rank, each dim at most data's except along the
/// axis), the offset of the data element it addresses: its own position with the axis
/// coordinate replaced by its value.
fn element_offsets(x: &Tensor, indices: &Tensor, axis: i64) -> KResult<Vec<usize>> {
    let (dims, idims) = (dims_of(x), dims_of(indices));
    let r = dims.len();
    if r == 0 {
        return shape_err!("data must have rank ≥ 1, got a scalar");
    }
    let ax = crate::data::norm_axis(axis, r)?;
    if idims.len() != r {
        return shape_err!(
            "indices {:?} must have the rank of data {:?}",
            indices.shape(),
            x.shape()
        );
    }
    if let Some(d) = (0..r).find(|&d| d != ax && idims[d] > dims[d]) {
        return shape_err!(
            "indices {:?} exceed data {:?} in dim {d}; only axis {ax} may be larger",
            indices.shape(),
            x.shape()
        );
    }
    let idx = index_values(indices)?;
    let strides = strides_of(&dims);
    let mut offs = Vec::with_capacity(idx.len());
    for (j, &i) in idx.iter().enumerate() {
        let mut rem = j;
        let mut off = 0;
        for d in (0..r).rev() {
            let c = rem % idims[d];
            rem /= idims[d];
            let c = if d == ax {
                index_in(i, dims[ax], ax)?
            } else {
                c
            };
            off += c * strides[d];
        }
        offs.push(off);
    }
    Ok(offs)
}

/// One scatter move: `len` elements from `src` (in updates) to `dst` (in data).
#[derive(Clone, Copy)]
struct Move {
    dst: usize,
    src: usize,
    len: usize,
}

/// `scatter_elements { axis, reduction }(data, indices, updates)`.
pub(super) fn scatter_elements(
    x: &Tensor,
    indices: &Tensor,
    updates: &Tensor,
    axis: i64,
    reduction: ScatterReduction,
) -> KResult<Tensor> {
    if updates.shape() != indices.shape() {
        return shape_err!(
            "updates {:?} must have the shape of indices {:?}",
            updates.shape(),
            indices.shape()
        );
    }
    let offs = element_offsets(x, indices, axis)?;
    let moves: Vec<Move> = offs
        .into_iter()
        .enumerate()
        .map(|(src, dst)| Move { dst, src, len: 1 })
        .collect();
    scatter(x, updates, &moves, reduction)
}

/// `scatter_nd { reduction }(data, indices, updates)`: each length-k tuple of indices
/// (negative entries count from the end) receives the matching slice of updates.
pub(super) fn scatter_nd(
    x: &Tensor,
    indices: &Tensor,
    updates: &Tensor,
    reduction: ScatterReduction,
) -> KResult<Tensor> {
    if indices.dtype() != DType::I64 {
        return dtype_err!("indices must be i64, got {}", indices.dtype());
    }
    let (dims, idims) = (dims_of(x), dims_of(indices));
    let Some((&k, tuple_dims)) = idims.split_last() else {
        return shape_err!("indices must have rank ≥ 1, got a scalar");
    };
    if k > dims.len() {
        return shape_err!(
            "the index tuples' length {k} exceeds the rank of data {:?}",
            x.shape()
        );
    }
    let mut want: Vec<u64> = indices.shape()[..tuple_dims.len()].to_vec();
    want.extend_from_slice(&x.shape()[k..]);
    if updates.shape() != want {
        return shape_err!(
            "updates {:?} must have shape indices.shape[..-1] ++ data.shape[{k}..] = {want:?}",
            updates.shape()
        );
    }
    let idx = index_values(indices)?;
    let slice: usize = dims[k..].iter().product();
    let strides = strides_of(&dims[..k]);
    let tuples: usize = tuple_dims.iter().product();
    let mut moves = Vec::with_capacity(tuples);
    for t in 0..tuples {
        let mut off = 0;
        for (j, &i) in idx[t * k..][..k].iter().enumerate() {
            off += index_in(i, dims[j], j)? * strides[j];
        }
        moves.push(Move {
            dst: off * slice,
            src: t * slice,
            len: slice,
        });
    }
    scatter(x, updates, &moves, reduction)
}

/// A copy of `x` with the moves of `updates` applied in order, combined per `reduction`.
fn scatter(
    x: &Tensor,
    updates: &Tensor,
    moves: &[Move],
    reduction: ScatterReduction,
) -> KResult<Tensor> {
    if updates.dtype() != x.dtype() {
        return dtype_err!(
            "updates ({}) must have the dtype of data ({})",
            updates.dtype(),
            x.dtype()
        );
    }
    let shape = x.shape().to_vec();
    let how = match reduction {
        ScatterReduction::None => {
            let es = x.dtype().size();
            let mut out = x.bytes().to_vec();
            let src = updates.bytes();
            for m in moves {
                out[m.dst * es..][..m.len * es].copy_from_slice(&src[m.src * es..][..m.len * es]);
            }
            return tensor(x.dtype(), shape, out);
        }
        ScatterReduction::Add => Combine::Add,
        ScatterReduction::Mul => Combine::Mul,
        ScatterReduction::Max => Combine::Max,
        ScatterReduction::Min => Combine::Min,
    };
    let data = match (Data::load(x)?, Data::load(updates)?) {
        (Data::F64(d), Data::F64(u)) => Data::F64(Cow::from(apply(d.into_owned(), &u, moves, how))),
        (Data::F32(d), Data::F32(u)) => Data::F32(Cow::from(apply(d.into_owned(), &u, moves, how))),
        (Data::I64(d), Data::I64(u)) => Data::I64(Cow::from(apply(d.into_owned(), &u, moves, how))),
        (Data::I32(d), Data::I32(u)) => Data::I32(Cow::from(apply(d.into_owned(), &u, moves, how))),
        (Data::I16(d), Data::I16(u)) => Data::I16(Cow::from(apply(d.into_owned(), &u, moves, how))),
        (Data::I8(d), Data::I8(u)) => Data::I8(Cow::from(apply(d.into_owned(), &u, moves, how))),
        (Data::U8(d), Data::U8(u)) => Data::U8(Cow::from(apply(d.into_owned(), &u, moves, how))),
        (d, _) => {
            return dtype_err!(
                "reduction={} needs numeric data, got {} ({} values)",
                reduction.word(),
                x.dtype(),
                d.type_name()
            );
        }
    };
    data.store(x.dtype(), shape)
}

/// How a reducing scatter combines an update with the value in place.
#[derive(Clone, Copy)]
enum Combine {
    Add,
    Mul,
    Max,
    Min,
}

/// Applies `moves` in order, `d = combine(d, u)`, and returns the data.
fn apply<T: Arith>(mut data: Vec<T>, updates: &[T], moves: &[Move], how: Combine) -> Vec<T> {
    let f: fn(T, T) -> T = match how {
        Combine::Add => T::add,
        Combine::Mul => T::mul,
        Combine::Max => T::max,
        Combine::Min => T::min,
    };
    for m in moves {
        let dst = &mut data[m.dst..][..m.len];
        for (d, &u) in dst.iter_mut().zip(&updates[m.src..][..m.len]) {
            *d = f(*d, u);
        }
    }
    data
}

/// The arithmetic of a reducing scatter in one compute type: floats in their own type (so
/// f32 sums round as onnxruntime's do) with NaN-propagating max/min; integers wrap.
trait Arith: Copy {
    fn add(a: Self, b: Self) -> Self;
    fn mul(a: Self, b: Self) -> Self;
    fn max(a: Self, b: Self) -> Self;
    fn min(a: Self, b: Self) -> Self;
}

macro_rules! float_arith {
    ($($t:ty),*) => {$(
        impl Arith for $t {
            fn add(a: Self, b: Self) -> Self {
                a + b
            }
            fn mul(a: Self, b: Self) -> Self {
                a * b
            }
            fn max(a: Self, b: Self) -> Self {
                if a.is_nan() || b.is_nan() { <$t>::NAN } else { a.max(b) }
            }
            fn min(a: Self, b: Self) -> Self {
                if a.is_nan() || b.is_nan() { <$t>::NAN } else { a.min(b) }
            }
        }
    )*};
}
float_arith!(f64, f32);

macro_rules! int_arith {
    ($($t:ty),*) => {$(
        impl Arith for $t {
            fn add(a: Self, b: Self) -> Self {
                a.wrapping_add(b)
            }
            fn mul(a: Self, b: Self) -> Self {
                a.wrapping_mul(b)
            }
            fn max(a: Self, b: Self) -> Self {
                Ord::max(a, b)
            }
            fn min(a: Self, b: Self) -> Self {
                Ord::min(a, b)
            }
        }
    )*};
}
int_arith!(i64, i32, i16, i8, u8);
