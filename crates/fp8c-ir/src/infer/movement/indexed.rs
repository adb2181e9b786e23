//! Inference for the movement ops that address single elements through an index tensor
//! (`gather_elements`, `scatter_elements`, `scatter_nd`) and for `trilu`, which keeps a
//! triangle of each matrix. All but `gather_elements` return their data input's type.

use super::super::InferInput;
use super::super::common::{Arg, NUMERIC, Res, args, axis_of, is_index, is_numeric, unify};
use crate::{DType, Dim, ScatterReduction, TensorType};

/// The shared checks of the element-wise gather and scatter: indices (i64/i32) of data's rank
/// (≥ 1), each dim at most data's except along `axis`; known index values within range.
/// Returns the normalised axis.
fn check_element_indices(data: &Arg<'_>, indices: &Arg<'_>, axis: i64) -> Res<usize> {
    indices.expect(is_index(indices.dtype()), "i64 or i32")?;
    data.expect_min_rank(1, "it needs an axis to index")?;
    let ax = axis_of(data, axis, "axis")?;
    if indices.rank() != data.rank() {
        return Err(indices.shape_err(format!(
            "expected the rank of {data} {} ({})",
            data.ty,
            data.rank()
        )));
    }
    for (i, (d, e)) in data.shape().iter().zip(indices.shape()).enumerate() {
        if let (false, Dim::Known(d), Dim::Known(e)) = (i == ax, d, e)
            && e > d
        {
            return Err(indices.shape_err(format!(
                "its dim {i} ({e}) exceeds that of {data} {} ({d}); only axis {ax} may be larger",
                data.ty
            )));
        }
    }
    if let (Some(t), Dim::Known(size)) = (indices.value, &data.shape()[ax]) {
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
    Ok(ax)
}

/// Reductions other than `none` combine values arithmetically: numeric data only.
fn check_reduction(data: &Arg<'_>, reduction: ScatterReduction) -> Res<()> {
    if reduction == ScatterReduction::None {
        return Ok(());
    }
    data.expect(
        is_numeric(data.dtype()),
        &format!("{NUMERIC} (reduction={})", reduction.word()),
    )
}

/// ONNX GatherElements: data's dtype, indices' shape.
pub(super) fn gather_elements(inputs: &[InferInput<'_>], axis: i64) -> Res<TensorType> {
    let [data, indices] = args(inputs, ["data", "indices"])?;
    check_element_indices(&data, &indices, axis)?;
    Ok(TensorType::new(data.dtype(), indices.ty.shape.clone()))
}

/// ONNX ScatterElements: data's type; updates has indices' shape and data's dtype.
pub(super) fn scatter_elements(
    inputs: &[InferInput<'_>],
    axis: i64,
    reduction: ScatterReduction,
) -> Res<TensorType> {
    let [data, indices, updates] = args(inputs, ["data", "indices", "updates"])?;
    check_element_indices(&data, &indices, axis)?;
    updates.expect_same_dtype(&data)?;
    check_reduction(&data, reduction)?;
    let same = updates.rank() == indices.rank()
        && updates
            .shape()
            .iter()
            .zip(indices.shape())
            .all(|(a, b)| unify(a, b).is_some());
    if !same {
        return Err(updates.shape_err(format!("expected the shape of {indices} {}", indices.ty)));
    }
    Ok(data.ty.clone())
}

/// ONNX ScatterND: data's type; updates must be `indices.shape[..q-1] ++ data.shape[k..]`.
pub(super) fn scatter_nd(
    inputs: &[InferInput<'_>],
    reduction: ScatterReduction,
) -> Res<TensorType> {
    let [data, indices, updates] = args(inputs, ["data", "indices", "updates"])?;
    indices.expect(indices.dtype() == DType::I64, "i64")?;
    indices.expect_min_rank(1, "its last dim is the index tuple's length")?;
    updates.expect_same_dtype(&data)?;
    check_reduction(&data, reduction)?;
    let (r, q) = (data.rank(), indices.rank());
    let Some(Dim::Known(k)) = indices.shape().last() else {
        return Err(indices.shape_err("its last dim (the index tuple's length) must be known"));
    };
    let k = usize::try_from(*k)
        .ok()
        .filter(|&k| k <= r)
        .ok_or_else(|| {
            indices.shape_err(format!(
                "its last dim ({k}) must be at most the rank of {data} {} ({r})",
                data.ty
            ))
        })?;
    let mut want = indices.shape()[..q - 1].to_vec();
    want.extend_from_slice(&data.shape()[k..]);
    let fits = updates.rank() == want.len()
        && updates
            .shape()
            .iter()
            .zip(&want)
            .all(|(a, b)| unify(a, b).is_some());
    if !fits {
        return Err(updates.shape_err(format!(
            "expected indices.shape[..-1] ++ data.shape[{k}..] = {}",
            TensorType::new(data.dtype(), want)
        )));
    }
    if let (Some(t), true) = (indices.value, k > 0) {
        let vals = t.to_i64_vec().map_err(|e| format!("{indices}: {e}"))?;
        for chunk in vals.chunks(k) {
            for (j, &i) in chunk.iter().enumerate() {
                if let Dim::Known(size) = data.shape()[j] {
                    let lim = i128::from(size);
                    if !(-lim..lim).contains(&i128::from(i)) {
                        return Err(format!(
                            "{indices} holds index {i}, out of range for axis {j} of size {size} in {data} {}",
                            data.ty
                        ));
                    }
                }
            }
        }
    }
    Ok(data.ty.clone())
}
