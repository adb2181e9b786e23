//! LinearClassifier and LinearRegressor: `scores = X · coefficientsᵀ + intercepts` as a
//! MatMul with the coefficients as a trainable parameter (so the precision policy treats it
//! as any other GEMM and `train` can fine-tune it), then onnxruntime's label and
//! post-transform rules.

use super::{Labels, PostTransform, features};
use crate::OnnxError;
use crate::ops::NodeCx;
use fp8c_ir::{DType, Op, Tensor, Value};

/// The `[N, E]` scores `X · Wᵀ + b` of a linear model whose `coefficients` hold E rows of F
/// (E = `targets` when given, else from F); returns them and E.
fn scores(cx: &mut NodeCx<'_>, targets: Option<u64>) -> Result<(Value, u64), OnnxError> {
    let coef = cx
        .attr_floats("coefficients")
        .filter(|c| !c.is_empty())
        .ok_or_else(|| cx.err("attribute `coefficients` is required"))?;
    let intercepts = cx.attr_floats("intercepts").unwrap_or_default();
    let (x, f) = features(cx)?;
    let n = coef.len() as u64;
    let e = match targets {
        Some(t) if t * f == n => t,
        None if f > 0 && n.is_multiple_of(f) => n / f,
        _ => {
            return Err(cx.err(format!(
                "{n} coefficients do not make {} rows of the {f} features of X",
                targets.map_or("whole".to_string(), |t| t.to_string())
            )));
        }
    };
    if !intercepts.is_empty() && intercepts.len() as u64 != e {
        return Err(cx.err(format!(
            "{} intercepts for {e} rows of coefficients",
            intercepts.len()
        )));
    }
    let (fu, eu) = (f as usize, e as usize);
    let mut wt = vec![0f32; coef.len()];
    for c in 0..eu {
        for j in 0..fu {
            wt[j * eu + c] = coef[c * fu + j];
        }
    }
    let w = cx.param("coefficients", Tensor::from_f32(vec![f, e], &wt))?;
    let s = cx.add_helper("matmul", Op::MatMul, &[x, w])?;
    if intercepts.is_empty() {
        return Ok((s, e));
    }
    let b = cx.param("intercepts", Tensor::from_f32(vec![e], &intercepts))?;
    Ok((cx.add_helper("scores", Op::Add, &[s, b])?, e))
}

/// LinearClassifier: outputs Y (i64 labels `[N]`) and Z (scores `[N, E]`, or `[N, 2]` for a
/// binary model of one row and two labels).
///
/// As onnxruntime: with several rows the label is that of the first largest raw score and
/// `post_transform` applies to the scores; with one row the label is the second label (1
/// without two labels) where the raw score is > 0, and the scores are `[1 − s, s]` (two
/// labels: no transform) or `s` (PROBIT applies, the others do not).
pub(in crate::ops) fn linear_classifier(cx: &mut NodeCx<'_>) -> Result<Vec<Value>, OnnxError> {
    let labels = Labels::read(cx, "classlabels_ints", "classlabels_strings")?;
    let post = PostTransform::read(cx)?;
    let (s, e) = scores(cx, None)?;
    let two_labels = labels.len() == 2;
    let y = match labels.constant(cx, 0)? {
        None => s,
        Some(lab) if e == 1 => {
            let flat = cx.add_helper(
                "score",
                Op::Squeeze {
                    axes: Some(vec![1]),
                },
                &[s],
            )?;
            let zero = cx.scalar("zero", DType::F32, 0.0)?;
            let positive = cx.add_helper("positive", Op::Greater, &[flat, zero])?;
            let (pos, neg) = if two_labels {
                let at = |cx: &mut NodeCx<'_>, name: &str, i: i64| {
                    let idx = cx.constant(&format!("{name}_index"), Tensor::scalar_i64(i))?;
                    cx.add_helper(name, Op::Gather { axis: 0 }, &[lab, idx])
                };
                (at(cx, "positive_label", 1)?, at(cx, "negative_label", 0)?)
            } else {
                let k = |cx: &mut NodeCx<'_>, name: &str, v: i64| {
                    cx.constant(name, Tensor::scalar_i64(v))
                };
                (k(cx, "positive_label", 1)?, k(cx, "negative_label", 0)?)
            };
            cx.add(Op::Where, &[positive, pos, neg])?
        }
        Some(lab) => {
            if (labels.len() as u64) < e {
                return Err(cx.err(format!(
                    "{} class labels for {e} rows of coefficients",
                    labels.len()
                )));
            }
            let arg = Op::ArgMax {
                axis: 1,
                keepdims: false,
                select_last_index: false,
            };
            let best = cx.add_helper("argmax", arg, &[s])?;
            cx.add(Op::Gather { axis: 0 }, &[lab, best])?
        }
    };
    let z = if e > 1 {
        post.apply(cx, s)?
    } else if two_labels {
        if post == PostTransform::Probit {
            return Err(cx.err(
                "PROBIT on a one-row binary classifier has no defined second column \
                 (onnxruntime leaves it unset)",
            ));
        }
        let one = cx.scalar("one", DType::F32, 1.0)?;
        let other = cx.add_helper("complement", Op::Sub, &[one, s])?;
        cx.add_helper("binary_scores", Op::Concat { axis: 1 }, &[other, s])?
    } else if post == PostTransform::Probit {
        post.apply(cx, s)?
    } else {
        s
    };
    Ok(vec![y, z])
}

/// LinearRegressor: Y `[N, targets]` = `X · coefficientsᵀ + intercepts`, then
/// `post_transform` (with one target only PROBIT applies, as in onnxruntime).
pub(in crate::ops) fn linear_regressor(cx: &mut NodeCx<'_>) -> Result<Vec<Value>, OnnxError> {
    let targets = cx.attr_int("targets", 1)?;
    if targets < 1 {
        return Err(cx.err(format!(
            "attribute `targets` = {targets} must be at least 1"
        )));
    }
    let post = PostTransform::read(cx)?;
    let (s, e) = scores(cx, Some(targets as u64))?;
    let y = if e > 1 || post == PostTransform::Probit {
        post.apply(cx, s)?
    } else {
        s
    };
    Ok(vec![y])
}
