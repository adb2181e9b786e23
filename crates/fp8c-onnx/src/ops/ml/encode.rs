//! The ai.onnx.ml encoders of skl2onnx's preprocessing: Imputer (SimpleImputer,
//! PowerTransformer's guards), OneHotEncoder and LabelEncoder (OrdinalEncoder) on numeric
//! data, with onnxruntime's kernels as the reference. String categories have no IR tensor
//! type and are refused.

use crate::OnnxError;
use crate::ops::NodeCx;
use fp8c_ir::{DType, Op, Tensor, Value};

/// Imputer: elements equal to `replaced_value_float` (NaN: the NaN elements) become
/// `imputed_value_floats` (one value, or one per feature of the last axis); the int64 form
/// (`replaced_value_int64`, `imputed_value_int64s`) for integer inputs.
pub(in crate::ops) fn imputer(cx: &mut NodeCx<'_>) -> Result<Vec<Value>, OnnxError> {
    let x = cx.input(0)?;
    let ty = cx.ty(x).clone();
    let features = ty.shape.last().and_then(|d| d.known());
    let (imputed, replaced_nan, replaced) = if ty.dtype.is_float() {
        let v = cx.attr_floats("imputed_value_floats").unwrap_or_default();
        let r = cx.attr_float("replaced_value_float", 0.0)?;
        let t = match v.len() {
            1 => Tensor::from_f64_as(ty.dtype, vec![], &[f64::from(v[0])]),
            n => {
                let vals: Vec<f64> = v.iter().map(|&f| f64::from(f)).collect();
                Tensor::from_f64_as(ty.dtype, vec![n as u64], &vals)
            }
        };
        let t = t.map_err(|e| cx.err(e))?;
        let rt = Tensor::from_f64_as(ty.dtype, vec![], &[f64::from(r)]).map_err(|e| cx.err(e))?;
        (t, r.is_nan(), rt)
    } else if ty.dtype == DType::I64 {
        let v = cx.attr_ints("imputed_value_int64s").unwrap_or_default();
        let r = cx.attr_int("replaced_value_int64", 0)?;
        let t = match v.len() {
            1 => Tensor::scalar_i64(v[0]),
            n => Tensor::from_i64(vec![n as u64], &v),
        };
        (t, false, Tensor::scalar_i64(r))
    } else {
        return Err(cx.err(format!("input X must be float or int64, got {ty}")));
    };
    let n = imputed.shape().iter().product::<u64>();
    if n == 0 || (imputed.shape().len() == 1 && features.is_some_and(|f| f != n)) {
        return Err(cx.err(format!(
            "{n} imputed values for X {ty}: give one, or one per feature"
        )));
    }
    let missing = if replaced_nan {
        cx.add_helper("missing", Op::IsNaN, &[x])?
    } else {
        let r = cx.constant("replaced_value", replaced)?;
        cx.add_helper("missing", Op::Equal, &[x, r])?
    };
    let imputed = cx.constant("imputed_values", imputed)?;
    Ok(vec![cx.add(Op::Where, &[missing, imputed, x])?])
}

/// `[.., K]` booleans: element `x` equals the k-th of `keys`.
fn matches(cx: &mut NodeCx<'_>, x: Value, keys: Tensor) -> Result<Value, OnnxError> {
    let keys = cx.constant("keys", keys)?;
    let last = cx.add_helper("x_last", Op::Unsqueeze { axes: vec![-1] }, &[x])?;
    cx.add_helper("matches", Op::Equal, &[last, keys])
}

/// The position of each of `strings` in `vocab` (which holds them all: it was gathered from
/// the model's string attributes).
fn positions(cx: &NodeCx<'_>, strings: &[String], vocab: &[String]) -> Result<Vec<i64>, OnnxError> {
    strings
        .iter()
        .map(|s| {
            vocab
                .iter()
                .position(|v| v == s)
                .map(|p| p as i64)
                .ok_or_else(|| cx.err(format!("string \"{s}\" is not in its input's vocabulary")))
        })
        .collect()
}

/// OneHotEncoder: X (int64, or float/double truncated to int64 as onnxruntime does) to f32
/// `X.shape + [categories]`, 1 in the column of the element's category. A value outside
/// `cats_int64s` gives a row of zeros (onnxruntime fails on it when `zeros` = 0).
pub(in crate::ops) fn one_hot_encoder(cx: &mut NodeCx<'_>) -> Result<Vec<Value>, OnnxError> {
    let cats = match (
        cx.attr_ints("cats_int64s").filter(|c| !c.is_empty()),
        cx.input_strings(0),
    ) {
        (Some(c), _) => c,
        // A string input is indices into its vocabulary: so are the categories.
        (None, Some(vocab)) => {
            let cats = cx.attr_strings("cats_strings")?.unwrap_or_default();
            if cats.is_empty() {
                return Err(cx.err("`cats_strings` is required for a string input"));
            }
            positions(cx, &cats, vocab)?
        }
        (None, None) => {
            return Err(
                cx.err("`cats_int64s` is required (`cats_strings` needs a string graph input)")
            );
        }
    };
    let x = cx.input(0)?;
    let dtype = cx.ty(x).dtype;
    let x = match dtype {
        DType::I64 => x,
        d if d.is_float() || d.is_int() => {
            let to = Op::Cast {
                to: DType::I64,
                saturate: false,
            };
            cx.add_helper("x_i64", to, &[x])?
        }
        _ => return Err(cx.err(format!("input X must be numeric, got {}", cx.ty(x)))),
    };
    let keys = Tensor::from_i64(vec![cats.len() as u64], &cats);
    let m = matches(cx, x, keys)?;
    let to = Op::Cast {
        to: DType::F32,
        saturate: false,
    };
    Ok(vec![cx.add(to, &[m])?])
}

/// LabelEncoder on numbers: each element of X found in `keys_int64s`/`keys_floats` (or
/// `keys_tensor`) becomes the value at the same position of `values_int64s`/`values_floats`
/// (`values_tensor`), others `default_int64` (−1) / `default_float` (−0.0) / `default_tensor`.
pub(in crate::ops) fn label_encoder(cx: &mut NodeCx<'_>) -> Result<Vec<Value>, OnnxError> {
    let list = |cx: &NodeCx<'_>,
                ints: &str,
                floats: &str,
                tensor: &str|
     -> Result<Option<Tensor>, OnnxError> {
        if let Some(v) = cx.attr_ints(ints).filter(|v| !v.is_empty()) {
            return Ok(Some(Tensor::from_i64(vec![v.len() as u64], &v)));
        }
        if let Some(v) = cx.attr_floats(floats).filter(|v| !v.is_empty()) {
            return Ok(Some(Tensor::from_f32(vec![v.len() as u64], &v)));
        }
        cx.attr_tensor(tensor)
    };
    let strings = ["keys_strings", "values_strings"]
        .iter()
        .any(|a| cx.attr(a).is_some_and(|a| !a.strings.is_empty()));
    let keys = match (cx.input_strings(0), cx.attr_strings("keys_strings")?) {
        // A string input and string keys: both indices into the input's vocabulary.
        (Some(vocab), Some(k)) if !k.is_empty() => {
            let p = positions(cx, &k, vocab)?;
            Some(Tensor::from_i64(vec![p.len() as u64], &p))
        }
        _ => list(cx, "keys_int64s", "keys_floats", "keys_tensor")?,
    };
    let values = list(cx, "values_int64s", "values_floats", "values_tensor")?;
    let (Some(keys), Some(values)) = (keys, values) else {
        return Err(cx.err(if strings {
            "string keys or values are not supported (fp8c tensors are numeric)"
        } else {
            "the keys and values are required"
        }));
    };
    let n = keys.shape().iter().product::<u64>();
    if n != values.shape().iter().product::<u64>() || keys.shape().len() != 1 {
        return Err(cx.err("keys and values must be 1-D lists of one length"));
    }
    let x = cx.input(0)?;
    if cx.ty(x).dtype != keys.dtype() {
        return Err(cx.err(format!(
            "input X is {}, the keys are {}",
            cx.ty(x),
            keys.dtype()
        )));
    }
    let out = values.dtype();
    let default = match cx.attr_tensor("default_tensor")? {
        Some(t) => t,
        None if out == DType::I64 => Tensor::scalar_i64(cx.attr_int("default_int64", -1)?),
        None => Tensor::scalar_f32(cx.attr_float("default_float", -0.0)?),
    };
    let first = default.to_f64_vec().map_err(|e| cx.err(e))?;
    let first = first
        .first()
        .ok_or_else(|| cx.err("attribute `default_tensor` is empty"))?;
    let default = Tensor::from_f64_as(out, vec![], &[*first]).map_err(|e| cx.err(e))?;
    let m = matches(cx, x, keys)?;
    let as_i32 = Op::Cast {
        to: DType::I32,
        saturate: false,
    };
    let hits = cx.add_helper("hits", as_i32, &[m])?;
    let arg = Op::ArgMax {
        axis: -1,
        keepdims: false,
        select_last_index: false,
    };
    let idx = cx.add_helper("key_index", arg, &[hits])?;
    let any = Op::ReduceMax {
        axes: Some(vec![-1]),
        keepdims: false,
    };
    let found = cx.add_helper("found_count", any, &[hits])?;
    let zero = cx.constant("zero", Tensor::from_i32(vec![], &[0]))?;
    let found = cx.add_helper("found", Op::Greater, &[found, zero])?;
    let values = cx.constant("values", values)?;
    let mapped = cx.add_helper("mapped", Op::Gather { axis: 0 }, &[values, idx])?;
    let default = cx.constant("default", default)?;
    Ok(vec![cx.add(Op::Where, &[found, mapped, default])?])
}
