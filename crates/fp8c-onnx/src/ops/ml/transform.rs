//! The ai.onnx.ml feature transforms and output adapters: Scaler, Normalizer, Binarizer,
//! ArrayFeatureExtractor and ZipMap, with onnxruntime's kernels as the reference.

use super::{Labels, to_f32};
use crate::OnnxError;
use crate::ops::NodeCx;
use fp8c_ir::{DType, Op, Tensor, Value};

/// Scaler: `(X − offset) · scale` in f32, each attribute one value or one per feature (the
/// last axis).
pub(in crate::ops) fn scaler(cx: &mut NodeCx<'_>) -> Result<Vec<Value>, OnnxError> {
    let x = cx.input(0)?;
    let features = cx.ty(x).shape.last().and_then(|d| d.known());
    let per = |name: &str, default: f32| -> Result<Tensor, OnnxError> {
        let v = cx.attr_floats(name).unwrap_or_default();
        match v.len() {
            0 => Ok(Tensor::scalar_f32(default)),
            1 => Ok(Tensor::scalar_f32(v[0])),
            n if features.is_none_or(|f| f == n as u64) => Ok(Tensor::from_f32(vec![n as u64], &v)),
            n => Err(cx.err(format!(
                "attribute `{name}` has {n} values; X {} has {} features",
                cx.ty(x),
                features.unwrap_or(0)
            ))),
        }
    };
    let (offset, scale) = (per("offset", 0.0)?, per("scale", 1.0)?);
    let x = to_f32(cx, "x_f32", x)?;
    let offset = cx.constant("offset", offset)?;
    let scale = cx.constant("scale", scale)?;
    let centred = cx.add_helper("centred", Op::Sub, &[x, offset])?;
    Ok(vec![cx.add(Op::Mul, &[centred, scale])?])
}

/// Normalizer: each row of X (`[N, F]` or `[F]`) divided by its MAX (largest value), L1
/// (sum of magnitudes) or L2 norm, in f32; a row whose norm is 0 is left as it is. L2 is
/// onnxruntime's `±√(x² / Σx²)`.
pub(in crate::ops) fn normalizer(cx: &mut NodeCx<'_>) -> Result<Vec<Value>, OnnxError> {
    let norm = cx.attr_string("norm", "MAX")?;
    let x = cx.input(0)?;
    let rank = cx.ty(x).shape.len();
    if !(1..=2).contains(&rank) {
        return Err(cx.err(format!("input X must be [N, F] or [F], got {}", cx.ty(x))));
    }
    let x = to_f32(cx, "x_f32", x)?;
    let row = Some(vec![-1i64]);
    let sum = Op::ReduceSum {
        axes: row.clone(),
        keepdims: true,
    };
    let zero = cx.scalar("zero", DType::F32, 0.0)?;
    let (scaled, by) = match norm.as_str() {
        "MAX" => {
            let max = Op::ReduceMax {
                axes: row,
                keepdims: true,
            };
            let m = cx.add_helper("max", max, &[x])?;
            (cx.add_helper("scaled", Op::Div, &[x, m])?, m)
        }
        "L1" => {
            let a = cx.add_helper("abs", Op::Abs, &[x])?;
            let s = cx.add_helper("l1", sum, &[a])?;
            (cx.add_helper("scaled", Op::Div, &[x, s])?, s)
        }
        "L2" => {
            let sq = cx.add_helper("square", Op::Mul, &[x, x])?;
            let s = cx.add_helper("sum_squares", sum, &[sq])?;
            let q = cx.add_helper("share", Op::Div, &[sq, s])?;
            let r = cx.add_helper("root", Op::Sqrt, &[q])?;
            let nr = cx.add_helper("neg_root", Op::Neg, &[r])?;
            let neg = cx.add_helper("negative", Op::Less, &[x, zero])?;
            (cx.add_helper("scaled", Op::Where, &[neg, nr, r])?, s)
        }
        other => {
            return Err(cx.err(format!("norm \"{other}\" is not one of MAX, L1, L2")));
        }
    };
    let is_zero = cx.add_helper("zero_norm", Op::Equal, &[by, zero])?;
    Ok(vec![cx.add(Op::Where, &[is_zero, x, scaled])?])
}

/// Binarizer: 1 where X > `threshold` (default 0), else 0, in X's type.
pub(in crate::ops) fn binarizer(cx: &mut NodeCx<'_>) -> Result<Vec<Value>, OnnxError> {
    let threshold = cx.attr_float("threshold", 0.0)?;
    let x = cx.input(0)?;
    let dtype = cx.ty(x).dtype;
    if !dtype.is_float() {
        return Err(cx.err(format!("input X must be float, got {}", cx.ty(x))));
    }
    let t = cx.scalar("threshold", dtype, f64::from(threshold))?;
    let above = cx.add_helper("above", Op::Greater, &[x, t])?;
    let one = cx.scalar("one", dtype, 1.0)?;
    let zero = cx.scalar("zero", dtype, 0.0)?;
    Ok(vec![cx.add(Op::Where, &[above, one, zero])?])
}

/// ArrayFeatureExtractor: `X[..., Y]`, the i64 indices Y (any shape, read flat) picked from
/// X's last axis; a 1-D X gives `[1, len(Y)]`, as onnxruntime.
pub(in crate::ops) fn array_feature_extractor(
    cx: &mut NodeCx<'_>,
) -> Result<Vec<Value>, OnnxError> {
    let (x, y) = (cx.input(0)?, cx.input(1)?);
    let rank = cx.ty(x).shape.len();
    if rank == 0 {
        return Err(cx.err("input X must have at least one dimension"));
    }
    if cx.ty(y).dtype != DType::I64 {
        return Err(cx.err(format!("input Y must be int64 indices, got {}", cx.ty(y))));
    }
    let flat_shape = cx.constant("flat_shape", Tensor::from_i64(vec![1], &[-1]))?;
    let reshape = Op::Reshape { allowzero: false };
    let idx = cx.add_helper("indices", reshape, &[y, flat_shape])?;
    let axis = rank as i64 - 1;
    if rank > 1 {
        return Ok(vec![cx.add(Op::Gather { axis }, &[x, idx])?]);
    }
    let picked = cx.add_helper("picked", Op::Gather { axis }, &[x, idx])?;
    Ok(vec![cx.add(Op::Unsqueeze { axes: vec![0] }, &[picked])?])
}

/// ZipMap: onnxruntime gives a sequence of `{label: probability}` maps, one per row of X
/// `[N, C]`; fp8c gives X itself (column j is the j-th label's), since the IR has tensors
/// only. The labels must match C.
pub(in crate::ops) fn zip_map(cx: &mut NodeCx<'_>) -> Result<Vec<Value>, OnnxError> {
    let labels = Labels::read(cx, "classlabels_int64s", "classlabels_strings")?;
    let x = cx.input(0)?;
    let ty = cx.ty(x).clone();
    if ty.shape.len() != 2 || !ty.dtype.is_float() {
        return Err(cx.err(format!("input X must be float [N, C], got {ty}")));
    }
    if ty.shape[1]
        .known()
        .is_some_and(|c| c != labels.len() as u64)
    {
        return Err(cx.err(format!(
            "{} class labels for the {} columns of X {ty}",
            labels.len(),
            ty.shape[1]
        )));
    }
    let x = to_f32(cx, "x_f32", x)?;
    Ok(vec![cx.add(Op::Identity, &[x])?])
}
