//! The ai.onnx.ml domain (the classic-ML ops skl2onnx and onnxmltools write), decomposed at
//! import into IR ops, with onnxruntime's CPU kernels as the reference for every detail the
//! ONNX-ML specification leaves open (binary classifiers' second column, label ties,
//! normalisation of a zero row).
//!
//! Classifiers give labels as i64 (`classlabels_ints`); string labels (`classlabels_strings`)
//! have no IR tensor type, so a classifier with string labels imports only when its label
//! output is not used (`--output` the probabilities). `ZipMap`'s sequence of maps is given as
//! its input, the dense `[N, classes]` probabilities, column j holding class j's.
//!
//! Family files: [`linear`] (LinearClassifier, LinearRegressor), [`svm`] (SVMClassifier,
//! SVMRegressor), [`transform`] (Scaler, Normalizer, Binarizer, ArrayFeatureExtractor, ZipMap),
//! [`tree`] (TreeEnsembleClassifier, TreeEnsembleRegressor).

mod encode;
mod linear;
mod svm;
mod svm_proba;
mod transform;
mod tree;

use super::{Build, NodeCx, registry};
use crate::OnnxError;
use fp8c_ir::{DType, Op, Tensor, Value};
use std::ops::RangeInclusive;

/// The domain's name in `NodeProto.domain`.
pub(crate) const DOMAIN: &str = "ai.onnx.ml";

registry! {
    /// Every ai.onnx.ml op type the importer maps, sorted.
    ML_SUPPORTED_OPS, lookup;
    "ArrayFeatureExtractor" 2..=2 => transform::array_feature_extractor,
    "Binarizer" 1..=1 => transform::binarizer,
    "Imputer" 1..=1 => encode::imputer,
    "LabelEncoder" 1..=1 => encode::label_encoder,
    "LinearClassifier" 1..=1 => linear::linear_classifier,
    "LinearRegressor" 1..=1 => linear::linear_regressor,
    "Normalizer" 1..=1 => transform::normalizer,
    "OneHotEncoder" 1..=1 => encode::one_hot_encoder,
    "SVMClassifier" 1..=1 => svm::svm_classifier,
    "SVMRegressor" 1..=1 => svm::svm_regressor,
    "Scaler" 1..=1 => transform::scaler,
    "TreeEnsembleClassifier" 1..=1 => tree::tree_ensemble_classifier,
    "TreeEnsembleRegressor" 1..=1 => tree::tree_ensemble_regressor,
    "ZipMap" 1..=1 => transform::zip_map,
}

/// Input 0 as the f32 `[N, F]` matrix the ML kernels compute on: float, double and integer
/// inputs are converted to f32 (onnxruntime's kernels do the same), a 1-D input is one row.
/// Returns the matrix and F, which must be known.
pub(super) fn features(cx: &mut NodeCx<'_>) -> Result<(Value, u64), OnnxError> {
    let x = cx.input(0)?;
    let ty = cx.ty(x).clone();
    if !(ty.dtype.is_float() || ty.dtype.is_int()) {
        return Err(cx.err(format!("input X must be numeric, got {ty}")));
    }
    let f = match ty.shape.len() {
        1 | 2 => ty.shape[ty.shape.len() - 1].known(),
        _ => return Err(cx.err(format!("input X must be [N, F] or [F], got {ty}"))),
    };
    let f = f.ok_or_else(|| {
        cx.err(format!(
            "input X {ty} needs a known feature count (its last dim)"
        ))
    })?;
    let x = to_f32(cx, "x_f32", x)?;
    let x = if ty.shape.len() == 1 {
        cx.add_helper("x_row", Op::Unsqueeze { axes: vec![0] }, &[x])?
    } else {
        x
    };
    Ok((x, f))
}

/// `v` converted to f32 (unchanged if it is f32).
pub(super) fn to_f32(cx: &mut NodeCx<'_>, suffix: &str, v: Value) -> Result<Value, OnnxError> {
    if cx.ty(v).dtype == DType::F32 {
        return Ok(v);
    }
    let cast = Op::Cast {
        to: DType::F32,
        saturate: true,
    };
    cx.add_helper(suffix, cast, &[v])
}

/// A classifier's class labels.
pub(super) enum Labels {
    /// `classlabels_ints`.
    Ints(Vec<i64>),
    /// `classlabels_strings` (the IR has no string tensors: a label output gives indices).
    Strings(Vec<String>),
}

impl Labels {
    /// The node's labels (`ints` and `strings` name its two attributes); one of them is
    /// required.
    pub(super) fn read(cx: &NodeCx<'_>, ints: &str, strings: &str) -> Result<Self, OnnxError> {
        match (cx.attr_ints(ints), cx.attr_strings(strings)?) {
            (Some(i), None) if !i.is_empty() => Ok(Labels::Ints(i)),
            (None, Some(s)) if !s.is_empty() => Ok(Labels::Strings(s)),
            (Some(i), Some(s)) if !i.is_empty() && !s.is_empty() => Err(cx.err(format!(
                "both `{ints}` and `{strings}` are given; the node must have one"
            ))),
            _ => Err(cx.err(format!(
                "the class labels (`{ints}` or `{strings}`) are missing"
            ))),
        }
    }

    /// How many labels there are.
    pub(super) fn len(&self) -> usize {
        match self {
            Labels::Ints(v) => v.len(),
            Labels::Strings(s) => s.len(),
        }
    }

    /// The i64 labels as a constant. String labels: the indices 0..n, with output `slot` (the
    /// labels) recorded as holding strings (`crate::strings`: it may reach a graph output
    /// through Identity, Reshape, ...; any other reader is an error).
    pub(super) fn constant(
        &self,
        cx: &mut NodeCx<'_>,
        slot: usize,
    ) -> Result<Option<Value>, OnnxError> {
        if !cx.output_used(slot) {
            return Ok(None);
        }
        match self {
            Labels::Ints(v) => {
                let t = Tensor::from_i64(vec![v.len() as u64], v);
                cx.constant("classlabels", t).map(Some)
            }
            Labels::Strings(s) => {
                let index: Vec<i64> = (0..s.len() as i64).collect();
                cx.string_labels(slot, s.clone());
                let t = Tensor::from_i64(vec![index.len() as u64], &index);
                cx.constant("classlabel_indices", t).map(Some)
            }
        }
    }
}

/// An ML op's `post_transform` over the scores `[N, E]` (E ≥ 2 for the normalising ones), as
/// onnxruntime's `batched_update_scores_inplace` applies it to E > 1 columns.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum PostTransform {
    None,
    Logistic,
    Softmax,
    SoftmaxZero,
    Probit,
}

impl PostTransform {
    /// The node's `post_transform` attribute (default NONE).
    pub(super) fn read(cx: &NodeCx<'_>) -> Result<Self, OnnxError> {
        Ok(match cx.attr_string("post_transform", "NONE")?.as_str() {
            "NONE" => PostTransform::None,
            "LOGISTIC" => PostTransform::Logistic,
            "SOFTMAX" => PostTransform::Softmax,
            "SOFTMAX_ZERO" => PostTransform::SoftmaxZero,
            "PROBIT" => PostTransform::Probit,
            other => {
                return Err(cx.err(format!(
                    "post_transform \"{other}\" is not one of NONE, LOGISTIC, SOFTMAX, \
                     SOFTMAX_ZERO, PROBIT"
                )));
            }
        })
    }

    /// The transform applied to `s` (f32 `[N, E]`), each row on its own.
    pub(super) fn apply(self, cx: &mut NodeCx<'_>, s: Value) -> Result<Value, OnnxError> {
        let row = || Some(vec![1i64]);
        match self {
            PostTransform::None => Ok(s),
            PostTransform::Logistic => cx.add_helper("logistic", Op::Sigmoid, &[s]),
            PostTransform::Softmax => cx.add_helper("softmax", Op::Softmax { axis: 1 }, &[s]),
            PostTransform::SoftmaxZero => {
                // exp(s − max) over the entries with |s| > 1e-7; the others are s·exp(−max)
                // and add nothing to the sum.
                let max = Op::ReduceMax {
                    axes: row(),
                    keepdims: true,
                };
                let m = cx.add_helper("szero_max", max, &[s])?;
                let d = cx.add_helper("szero_shift", Op::Sub, &[s, m])?;
                let e = cx.add_helper("szero_exp", Op::Exp, &[d])?;
                let nm = cx.add_helper("szero_neg_max", Op::Neg, &[m])?;
                let enm = cx.add_helper("szero_exp_neg_max", Op::Exp, &[nm])?;
                let small = cx.add_helper("szero_small", Op::Mul, &[s, enm])?;
                let abs = cx.add_helper("szero_abs", Op::Abs, &[s])?;
                let eps = cx.scalar("szero_eps", DType::F32, 1e-7)?;
                let big = cx.add_helper("szero_nonzero", Op::Greater, &[abs, eps])?;
                let zero = cx.scalar("szero_zero", DType::F32, 0.0)?;
                let counted = cx.add_helper("szero_counted", Op::Where, &[big, e, zero])?;
                let sum = Op::ReduceSum {
                    axes: row(),
                    keepdims: true,
                };
                let sum = cx.add_helper("szero_sum", sum, &[counted])?;
                let t = cx.add_helper("szero_terms", Op::Where, &[big, e, small])?;
                cx.add_helper("szero", Op::Div, &[t, sum])
            }
            PostTransform::Probit => probit(cx, s),
        }
    }
}

/// onnxruntime's PROBIT: `√2 · erfinv(2s − 1)` with its closed-form `ErfInv` approximation
/// (Winitzki's, a = 0.147), so the values agree with it.
fn probit(cx: &mut NodeCx<'_>, s: Value) -> Result<Value, OnnxError> {
    let k = |cx: &mut NodeCx<'_>, name: &str, v: f64| cx.scalar(name, DType::F32, v);
    let two = k(cx, "probit_two", 2.0)?;
    let one = k(cx, "probit_one", 1.0)?;
    let x2 = cx.add_helper("probit_2s", Op::Mul, &[two, s])?;
    let x = cx.add_helper("probit_x", Op::Sub, &[x2, one])?;
    let zero = k(cx, "probit_zero", 0.0)?;
    let neg = cx.add_helper("probit_negative", Op::Less, &[x, zero])?;
    let minus = k(cx, "probit_minus_one", -1.0)?;
    let sgn = cx.add_helper("probit_sign", Op::Where, &[neg, minus, one])?;
    let a = cx.add_helper("probit_1mx", Op::Sub, &[one, x])?;
    let b = cx.add_helper("probit_1px", Op::Add, &[one, x])?;
    let w = cx.add_helper("probit_w", Op::Mul, &[a, b])?;
    let l = cx.add_helper("probit_log", Op::Log, &[w])?;
    // onnxruntime's ErfInv writes π as 3.14159f; the value is kept to agree with it.
    #[allow(clippy::approx_constant)]
    let pi = 3.14159f32;
    let c = k(cx, "probit_c", f64::from(2.0f32 / (pi * 0.147f32)))?;
    let half = k(cx, "probit_half", 0.5)?;
    let hl = cx.add_helper("probit_half_log", Op::Mul, &[half, l])?;
    let v = cx.add_helper("probit_v", Op::Add, &[c, hl])?;
    let inv_a = k(cx, "probit_inv_a", f64::from(1.0f32 / 0.147f32))?;
    let v2 = cx.add_helper("probit_v2", Op::Mul, &[inv_a, l])?;
    let vv = cx.add_helper("probit_vv", Op::Mul, &[v, v])?;
    let d = cx.add_helper("probit_d", Op::Sub, &[vv, v2])?;
    let r = cx.add_helper("probit_root", Op::Sqrt, &[d])?;
    let v3 = cx.add_helper("probit_v3", Op::Sub, &[r, v])?;
    let r3 = cx.add_helper("probit_root3", Op::Sqrt, &[v3])?;
    let e = cx.add_helper("probit_erfinv", Op::Mul, &[sgn, r3])?;
    let sqrt2 = k(cx, "probit_sqrt2", f64::from(std::f32::consts::SQRT_2))?;
    cx.add_helper("probit", Op::Mul, &[sqrt2, e])
}
