//! The index-driven kernels of the movement family: `gather`, `gather_nd`,
//! `gather_elements`, `gather_grad` (the embedding gradient's scatter-add) and `trilu`
//! (`movement.rs` dispatches to them; split out to keep each file under ~1,000 lines).

use crate::cast::store_f64;
use crate::data::{
    dims_of, float_values_f64, int_values, norm_axis, numel, rows_mut, shape_u64, strides_of,
    tensor,
};
use crate::error::{ErrorKind, Fail, KResult, attr_err, dtype_err, shape_err, value_err};
use crate::movement::gather_tensor;
use fp8c_ir::{DType, Tensor};

/// `gather { axis }(data, indices)`: output `data[:axis] + indices.shape + data[axis+1:]`;
/// negative indices count from the end; out-of-range ones are an error.
pub(crate) fn gather(x: &Tensor, indices: &Tensor, axis: i64) -> KResult<Tensor> {
    if !matches!(indices.dtype(), DType::I64 | DType::I32) {
        return dtype_err!("indices must be i64 or i32, got {}", indices.dtype());
    }
    let dims = dims_of(x);
    let ax = norm_axis(axis, dims.len())?;
    let idx = int_list_any(indices)?;
    let d = dims[ax];
    let mut offs = Vec::with_capacity(idx.len());
    let inner: usize = dims[ax + 1..].iter().product();
    for &i in &idx {
        let j = if i < 0 { i + d as i64 } else { i };
        if j < 0 || j >= d as i64 {
            return value_err!("index {i} is out of range for axis {ax} of size {d}");
        }
        offs.push(Some(j as usize * inner));
    }
    let outer: usize = dims[..ax].iter().product();
    let mut out_shape: Vec<u64> = x.shape()[..ax].to_vec();
    out_shape.extend_from_slice(indices.shape());
    out_shape.extend_from_slice(&x.shape()[ax + 1..]);
    numel(&out_shape)?;
    let tables = vec![
        (0..outer).map(|o| Some(o * d * inner)).collect(),
        offs,
        (0..inner).map(Some).collect(),
    ];
    let es = x.dtype().size();
    gather_tensor(x, &tables, &vec![0; es], out_shape)
}

/// ONNX GatherND: each length-k index tuple of `indices` (after `batch_dims` shared leading
/// dims) picks the slice `data[b.., i0, .., ik-1, ..]`; negative indices count from the end.
pub(crate) fn gather_nd(x: &Tensor, indices: &Tensor, batch_dims: i64) -> KResult<Tensor> {
    if indices.dtype() != DType::I64 {
        return dtype_err!("indices must be i64, got {}", indices.dtype());
    }
    let (dims, idims) = (dims_of(x), dims_of(indices));
    let (r, q) = (dims.len(), idims.len());
    let b = usize::try_from(batch_dims)
        .ok()
        .filter(|&b| q >= 1 && b < q.min(r.max(1)))
        .ok_or_else(|| {
            Fail::new(
                ErrorKind::Attribute,
                format!("batch_dims={batch_dims} must be in 0..min(rank(data), rank(indices))"),
            )
        })?;
    let k = idims[q - 1];
    if k == 0 || b + k > r {
        return shape_err!(
            "the index tuples' length {k} must be in 1..=rank(data) - batch_dims = {}",
            r.saturating_sub(b)
        );
    }
    if dims[..b] != idims[..b] {
        return shape_err!(
            "the first {b} dims of data {:?} and indices {:?} must agree",
            x.shape(),
            indices.shape()
        );
    }
    let idx = int_list_any(indices)?;
    let batch: usize = dims[..b].iter().product();
    let tuples_per_batch: usize = idims[b..q - 1].iter().product();
    let slice: usize = dims[b + k..].iter().product();
    let batch_stride: usize = dims[b..].iter().product();
    let strides = strides_of(&dims[b..b + k]);
    let es = x.dtype().size();
    let mut out_shape: Vec<u64> = indices.shape()[..q - 1].to_vec();
    out_shape.extend_from_slice(&x.shape()[b + k..]);
    let n = numel(&out_shape)?;
    let mut out = Vec::with_capacity(n * es);
    let src = x.bytes();
    for bi in 0..batch {
        for t in 0..tuples_per_batch {
            let tuple = &idx[(bi * tuples_per_batch + t) * k..][..k];
            let mut off = bi * batch_stride;
            for (j, (&i, &d)) in tuple.iter().zip(&dims[b..b + k]).enumerate() {
                let v = if i < 0 { i + d as i64 } else { i };
                if v < 0 || v >= d as i64 {
                    return value_err!("index {i} is out of range for axis {} of size {d}", b + j);
                }
                off += v as usize * strides[j] * slice;
            }
            out.extend_from_slice(&src[off * es..(off + slice) * es]);
        }
    }
    tensor(x.dtype(), out_shape, out)
}

/// ONNX GatherElements along `axis`: the output has the indices' shape; each element is
/// data at the same position except along the axis, where the index says (negative from the
/// end).
pub(crate) fn gather_elements(x: &Tensor, indices: &Tensor, axis: i64) -> KResult<Tensor> {
    if !matches!(indices.dtype(), DType::I64 | DType::I32) {
        return dtype_err!("indices must be i64 or i32, got {}", indices.dtype());
    }
    let (dims, idims) = (dims_of(x), dims_of(indices));
    if dims.len() != idims.len() || dims.is_empty() {
        return shape_err!(
            "data {:?} and indices {:?} must have the same rank ≥ 1",
            x.shape(),
            indices.shape()
        );
    }
    let ax = norm_axis(axis, dims.len())?;
    for (i, (&d, &n)) in dims.iter().zip(&idims).enumerate() {
        if i != ax && n > d {
            return shape_err!(
                "indices {:?} exceed data {:?} along dim {i}",
                indices.shape(),
                x.shape()
            );
        }
    }
    let idx = int_list_any(indices)?;
    let (xs, is) = (strides_of(&dims), strides_of(&idims));
    let es = x.dtype().size();
    let src = x.bytes();
    let d = dims[ax] as i64;
    let mut out = Vec::with_capacity(idx.len() * es);
    for (e, &i) in idx.iter().enumerate() {
        let j = if i < 0 { i + d } else { i };
        if j < 0 || j >= d {
            return value_err!("index {i} is out of range for axis {ax} of size {d}");
        }
        let mut off = 0usize;
        for k in 0..dims.len() {
            let c = (e / is[k]) % idims[k];
            off += if k == ax { j as usize } else { c } * xs[k];
        }
        out.extend_from_slice(&src[off * es..(off + 1) * es]);
    }
    tensor(x.dtype(), indices.shape().to_vec(), out)
}

/// ONNX Trilu: zeros outside the upper (column − row ≥ k) or lower (column − row ≤ k)
/// triangle of every matrix of the last two axes.
pub(crate) fn trilu(x: &Tensor, k: Option<&Tensor>, upper: bool) -> KResult<Tensor> {
    let k = match k {
        None => 0,
        Some(k) if k.len() == 1 => int_values(k, "k")?[0],
        Some(k) => return shape_err!("k must be a scalar, got shape {:?}", k.shape()),
    };
    let dims = dims_of(x);
    let r = dims.len();
    if r < 2 {
        return shape_err!("trilu needs rank ≥ 2, got {:?}", x.shape());
    }
    let (rows, cols) = (dims[r - 2], dims[r - 1]);
    let es = x.dtype().size();
    let mut out = x.bytes().to_vec();
    for (e, chunk) in out.chunks_exact_mut(es).enumerate() {
        let (i, j) = (((e / cols) % rows) as i128, (e % cols) as i128);
        let d = j - i;
        let keep = if upper {
            d >= i128::from(k)
        } else {
            d <= i128::from(k)
        };
        if !keep {
            chunk.fill(0);
        }
    }
    tensor(x.dtype(), x.shape().to_vec(), out)
}

/// Values of an index tensor of any shape (i64 or i32).
pub(crate) fn int_list_any(t: &Tensor) -> KResult<Vec<i64>> {
    t.to_i64_vec().map_err(|m| Fail::new(ErrorKind::DType, m))
}

/// Scatter-add of dy's slices back to the gathered positions of a data tensor whose `axis`
/// has `size` entries.
pub(crate) fn gather_grad(dy: &Tensor, indices: &Tensor, axis: i64, size: i64) -> KResult<Tensor> {
    let idx = int_values(indices, "indices")?;
    let Ok(size) = usize::try_from(size) else {
        return attr_err!("size {size} must be ≥ 0");
    };
    let dims = dims_of(dy);
    let ri = indices.shape().len();
    let Some(data_rank) = (dims.len() + 1).checked_sub(ri).filter(|&r| r >= 1) else {
        return shape_err!(
            "dy {:?} has too few dims for indices {:?}",
            dy.shape(),
            indices.shape()
        );
    };
    let ax = norm_axis(axis, data_rank)?;
    if dims[ax..ax + ri] != *dims_of(indices) {
        return shape_err!(
            "dy {:?} does not hold indices {:?} at axis {ax}",
            dy.shape(),
            indices.shape()
        );
    }
    let outer: usize = dims[..ax].iter().product();
    let inner: usize = dims[ax + ri..].iter().product();
    let mut out_dims = dims[..ax].to_vec();
    out_dims.push(size);
    out_dims.extend_from_slice(&dims[ax + ri..]);
    let out_shape = shape_u64(&out_dims);
    numel(&out_shape)?;
    let mut pos = Vec::with_capacity(idx.len());
    for (j, &i) in idx.iter().enumerate() {
        let k = if i < 0 { i + size as i64 } else { i };
        if k < 0 || k >= size as i64 {
            return value_err!("index {i} (entry {j}) is out of range for an axis of size {size}");
        }
        pos.push(k as usize);
    }
    let src = float_values_f64(dy, "dy")?;
    let mut out = vec![0f64; outer * size * inner];
    // One block per outer index; within it, rows accumulate in index order.
    rows_mut(&mut out, size * inner, |o, block| {
        for (j, &k) in pos.iter().enumerate() {
            let s = &src[(o * pos.len() + j) * inner..][..inner];
            for (d, v) in block[k * inner..][..inner].iter_mut().zip(s) {
                *d += v;
            }
        }
    });
    store_f64(out, dy.dtype(), &out_shape)
}
