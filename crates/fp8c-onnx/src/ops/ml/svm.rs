//! SVMClassifier and SVMRegressor (scikit-learn's SVC, NuSVC, SVR, NuSVR, OneClassSVM as
//! skl2onnx writes them), with onnxruntime's kernels as the reference.
//!
//! The kernel matrix `K [N, V]` of the inputs against the support vectors: LINEAR `x·sv`,
//! POLY `(γ·x·sv + c)^d`, SIGMOID `tanh(γ·x·sv + c)`, RBF `exp(−γ·Σ(x − sv)²)` (the
//! squared distance summed from the differences, as onnxruntime, not expanded). The
//! classifier's one-vs-one decision values are one f64 MatMul of K with a `[V, pairs]` matrix
//! holding each pair's two coefficient blocks (onnxruntime sums them in double), plus rho;
//! each pair votes for its first class where its value is > 0, and the label is the first
//! class with the most votes. With probability estimates (`prob_a`/`prob_b`) the scores are
//! the class probabilities of libsvm's pairwise coupling (`svm_proba.rs`); the label is still
//! the vote's, as onnxruntime's.

use super::{Labels, PostTransform, features};
use crate::OnnxError;
use crate::ops::NodeCx;
use fp8c_ir::{DType, Op, Tensor, Value};

/// The kernel and its parameters.
struct Kernel {
    kind: String,
    gamma: f32,
    coef0: f32,
    degree: f32,
}

impl Kernel {
    fn read(cx: &NodeCx<'_>) -> Result<Self, OnnxError> {
        let kind = cx.attr_string("kernel_type", "LINEAR")?;
        if !matches!(kind.as_str(), "LINEAR" | "POLY" | "RBF" | "SIGMOID") {
            return Err(cx.err(format!(
                "kernel_type \"{kind}\" is not one of LINEAR, POLY, RBF, SIGMOID"
            )));
        }
        let p = cx.attr_floats("kernel_params").unwrap_or_default();
        let at = |i: usize| p.get(i).copied().unwrap_or(0.0);
        Ok(Kernel {
            kind,
            gamma: at(0),
            coef0: at(1),
            degree: at(2),
        })
    }

    /// `K [N, V]` of `x [N, F]` against `sv` (f32 `[V · F]`).
    fn matrix(
        &self,
        cx: &mut NodeCx<'_>,
        x: Value,
        sv: &[f32],
        v: u64,
        f: u64,
    ) -> Result<Value, OnnxError> {
        let s =
            |cx: &mut NodeCx<'_>, name: &str, val: f32| cx.scalar(name, DType::F32, f64::from(val));
        if self.kind == "RBF" {
            let svs = cx.constant("support_vectors", Tensor::from_f32(vec![1, v, f], sv))?;
            let rows = cx.add_helper("x_rows", Op::Unsqueeze { axes: vec![1] }, &[x])?;
            let d = cx.add_helper("diff", Op::Sub, &[rows, svs])?;
            let sq = cx.add_helper("diff_sq", Op::Mul, &[d, d])?;
            let sum = Op::ReduceSum {
                axes: Some(vec![2]),
                keepdims: false,
            };
            let dist = cx.add_helper("dist", sum, &[sq])?;
            let ng = s(cx, "neg_gamma", -self.gamma)?;
            let e = cx.add_helper("rbf_arg", Op::Mul, &[ng, dist])?;
            return cx.add_helper("kernel", Op::Exp, &[e]);
        }
        let mut t = vec![0f32; sv.len()];
        let (vu, fu) = (v as usize, f as usize);
        for i in 0..vu {
            for j in 0..fu {
                t[j * vu + i] = sv[i * fu + j];
            }
        }
        let svt = cx.constant("support_vectors_t", Tensor::from_f32(vec![f, v], &t))?;
        let dot = cx.add_helper("dot", Op::MatMul, &[x, svt])?;
        if self.kind == "LINEAR" {
            return Ok(dot);
        }
        let g = s(cx, "gamma", self.gamma)?;
        let scaled = cx.add_helper("scaled_dot", Op::Mul, &[g, dot])?;
        let c = s(cx, "coef0", self.coef0)?;
        let z = cx.add_helper("shifted_dot", Op::Add, &[scaled, c])?;
        if self.kind == "SIGMOID" {
            return cx.add_helper("kernel", Op::Tanh, &[z]);
        }
        match self.degree {
            2.0 => cx.add_helper("kernel", Op::Mul, &[z, z]),
            3.0 => {
                let z2 = cx.add_helper("square", Op::Mul, &[z, z])?;
                cx.add_helper("kernel", Op::Mul, &[z2, z])
            }
            d => {
                let d = s(cx, "degree", d)?;
                cx.add_helper("kernel", Op::Pow, &[z, d])
            }
        }
    }
}

/// The support vectors (`[V · F]`) of a node with V of them, checked against X's F.
fn support_vectors(cx: &NodeCx<'_>, v: usize, f: u64) -> Result<Vec<f32>, OnnxError> {
    let sv = cx.attr_floats("support_vectors").unwrap_or_default();
    if sv.len() as u64 != v as u64 * f {
        return Err(cx.err(format!(
            "{} support vector values for {v} vectors of the {f} features of X",
            sv.len()
        )));
    }
    Ok(sv)
}

/// SVMClassifier: outputs Y (i64 labels `[N]`) and Z (scores).
pub(in crate::ops) fn svm_classifier(cx: &mut NodeCx<'_>) -> Result<Vec<Value>, OnnxError> {
    let prob_a = cx.attr_floats("prob_a").unwrap_or_default();
    let prob_b = cx.attr_floats("prob_b").unwrap_or_default();
    let labels = Labels::read(cx, "classlabels_ints", "classlabels_strings")?;
    let post = PostTransform::read(cx)?;
    let kernel = Kernel::read(cx)?;
    let coef = cx.attr_floats("coefficients").unwrap_or_default();
    let rho = cx.attr_floats("rho").unwrap_or_default();
    let per_class = cx.attr_ints("vectors_per_class").unwrap_or_default();
    let c = labels.len();
    if per_class.iter().any(|&n| n < 0) {
        return Err(cx.err(format!(
            "vectors_per_class {per_class:?} has a negative count"
        )));
    }
    let (x, f) = features(cx)?;
    let v: usize = per_class.iter().map(|&n| n.max(0) as usize).sum();
    if v == 0 {
        return linear_mode(cx, &labels, post, x, f, &coef, &rho);
    }
    if per_class.len() != c || c < 2 {
        return Err(cx.err(format!(
            "{} entries of vectors_per_class for {c} class labels",
            per_class.len()
        )));
    }
    let pairs = c * (c - 1) / 2;
    if coef.len() < (c - 1) * v || rho.len() < pairs {
        return Err(cx.err(format!(
            "{} coefficients and {} rho for {c} classes of {v} support vectors",
            coef.len(),
            rho.len()
        )));
    }
    let sv = support_vectors(cx, v, f)?;
    let k = kernel.matrix(cx, x, &sv, v as u64, f)?;
    // The pairs' coefficient matrix [V, pairs] and vote matrices [pairs, C].
    let start: Vec<usize> = per_class
        .iter()
        .scan(0usize, |s, &n| {
            let here = *s;
            *s += n as usize;
            Some(here)
        })
        .collect();
    let mut d = vec![0f64; v * pairs];
    let (mut win, mut lose) = (vec![0f32; pairs * c], vec![0f32; pairs * c]);
    let mut p = 0;
    for i in 0..c - 1 {
        for j in i + 1..c {
            for m in start[i]..start[i] + per_class[i] as usize {
                d[m * pairs + p] = f64::from(coef[(j - 1) * v + m]);
            }
            for m in start[j]..start[j] + per_class[j] as usize {
                d[m * pairs + p] = f64::from(coef[i * v + m]);
            }
            win[p * c + i] = 1.0;
            lose[p * c + j] = 1.0;
            p += 1;
        }
    }
    let to = |to| Op::Cast {
        to,
        saturate: false,
    };
    let k64 = cx.add_helper("kernel.f64", to(DType::F64), &[k])?;
    let dm = cx.constant(
        "pair_coefficients",
        Tensor::from_f64(vec![v as u64, pairs as u64], &d),
    )?;
    let sums = cx.add_helper("pair_sums", Op::MatMul, &[k64, dm])?;
    let rho64: Vec<f64> = rho[..pairs].iter().map(|&r| f64::from(r)).collect();
    let rho = cx.constant("rho", Tensor::from_f64(vec![pairs as u64], &rho64))?;
    let dec64 = cx.add_helper("decisions.f64", Op::Add, &[sums, rho])?;
    let dec = cx.add_helper("decisions", to(DType::F32), &[dec64])?;
    let y = match labels.constant(cx, 0)? {
        None => dec,
        Some(lab) => {
            let zero = cx.scalar("zero", DType::F64, 0.0)?;
            let first = cx.add_helper("first_wins", Op::Greater, &[dec64, zero])?;
            let first = cx.add_helper("first_wins.f32", to(DType::F32), &[first])?;
            let one = cx.scalar("one", DType::F32, 1.0)?;
            let second = cx.add_helper("second_wins", Op::Sub, &[one, first])?;
            let w = cx.constant(
                "votes_first",
                Tensor::from_f32(vec![pairs as u64, c as u64], &win),
            )?;
            let l = cx.constant(
                "votes_second",
                Tensor::from_f32(vec![pairs as u64, c as u64], &lose),
            )?;
            let a = cx.add_helper("votes_a", Op::MatMul, &[first, w])?;
            let b = cx.add_helper("votes_b", Op::MatMul, &[second, l])?;
            let votes = cx.add_helper("votes", Op::Add, &[a, b])?;
            let arg = Op::ArgMax {
                axis: 1,
                keepdims: false,
                select_last_index: false,
            };
            let best = cx.add_helper("most_votes", arg, &[votes])?;
            cx.add(Op::Gather { axis: 0 }, &[lab, best])?
        }
    };
    let z = if !prob_a.is_empty() {
        // SVC(probability=True): the coupled class probabilities are the scores.
        let probs = super::svm_proba::coupled(cx, dec, c, &prob_a, &prob_b)?;
        post.apply(cx, probs)?
    } else if c > 2 {
        post.apply(cx, dec)?
    } else if post == PostTransform::Probit {
        return Err(cx.err("PROBIT on a binary SVMClassifier is not supported"));
    } else {
        // onnxruntime's binary scores: [−s, s] without a transform, else [1 − s, s].
        let other = if post == PostTransform::None {
            cx.add_helper("negated", Op::Neg, &[dec])?
        } else {
            let one = cx.scalar("one_f32", DType::F32, 1.0)?;
            cx.add_helper("complement", Op::Sub, &[one, dec])?
        };
        cx.add_helper("binary_scores", Op::Concat { axis: 1 }, &[other, dec])?
    };
    Ok(vec![y, z])
}

/// SVMClassifier without support vectors (liblinear): scores `X · coefficientsᵀ + rho[0]`,
/// label the first largest score (two classes: onnxruntime's `ChooseClass`).
fn linear_mode(
    cx: &mut NodeCx<'_>,
    labels: &Labels,
    post: PostTransform,
    x: Value,
    f: u64,
    coef: &[f32],
    rho: &[f32],
) -> Result<Vec<Value>, OnnxError> {
    let c = labels.len();
    if coef.len() as u64 != c as u64 * f || rho.is_empty() {
        return Err(cx.err(format!(
            "{} coefficients for {c} classes of {f} features (and rho must be given)",
            coef.len()
        )));
    }
    let (fu, cu) = (f as usize, c);
    let mut t = vec![0f32; coef.len()];
    for i in 0..cu {
        for j in 0..fu {
            t[j * cu + i] = coef[i * fu + j];
        }
    }
    let w = cx.param("coefficients", Tensor::from_f32(vec![f, c as u64], &t))?;
    let dot = cx.add_helper("dot", Op::MatMul, &[x, w])?;
    let r = cx.scalar("rho", DType::F32, f64::from(rho[0]))?;
    let s = cx.add_helper("scores", Op::Add, &[dot, r])?;
    let arg = Op::ArgMax {
        axis: 1,
        keepdims: false,
        select_last_index: false,
    };
    let y = match labels.constant(cx, 0)? {
        None => s,
        Some(lab) => {
            let best = cx.add_helper("best", arg, &[s])?;
            let picked = cx.add_helper("best_label", Op::Gather { axis: 0 }, &[lab, best])?;
            if c == 2 {
                // max ≥ 0.5 with all weights ≥ 0, or max > 0 otherwise: the second label.
                let all_positive = coef.iter().all(|&w| w >= 0.0);
                let max = Op::ReduceMax {
                    axes: Some(vec![1]),
                    keepdims: false,
                };
                let m = cx.add_helper("max_score", max, &[s])?;
                let t = cx.scalar(
                    "threshold",
                    DType::F32,
                    if all_positive { 0.5 } else { 0.0 },
                )?;
                let cmp = if all_positive {
                    Op::GreaterOrEqual
                } else {
                    Op::Greater
                };
                let second = cx.add_helper("second", cmp, &[m, t])?;
                let idx = cx.constant("second_index", Tensor::scalar_i64(1))?;
                let l1 = cx.add_helper("second_label", Op::Gather { axis: 0 }, &[lab, idx])?;
                cx.add(Op::Where, &[second, l1, picked])?
            } else {
                picked
            }
        }
    };
    Ok(vec![y, post.apply(cx, s)?])
}

/// SVMRegressor: Y `[N, 1]` = `K · coefficients + rho[0]` (no support vectors: X ·
/// coefficients + rho[0]); `one_class` maps it to ±1 (> 0: 1). onnxruntime applies no
/// post_transform here.
pub(in crate::ops) fn svm_regressor(cx: &mut NodeCx<'_>) -> Result<Vec<Value>, OnnxError> {
    let kernel = Kernel::read(cx)?;
    let coef = cx.attr_floats("coefficients").unwrap_or_default();
    let rho = cx.attr_floats("rho").unwrap_or_default();
    let n = cx.attr_int("n_supports", 0)?.max(0) as usize;
    let one_class = cx.attr_bool("one_class", false)?;
    let (x, f) = features(cx)?;
    if rho.is_empty() || coef.is_empty() {
        return Err(cx.err("attributes `coefficients` and `rho` are required"));
    }
    let k = if n > 0 {
        if coef.len() != n {
            return Err(cx.err(format!(
                "{} coefficients for {n} support vectors",
                coef.len()
            )));
        }
        let sv = support_vectors(cx, n, f)?;
        kernel.matrix(cx, x, &sv, n as u64, f)?
    } else {
        if coef.len() as u64 != f {
            return Err(cx.err(format!("{} coefficients for {f} features", coef.len())));
        }
        x
    };
    let len = coef.len() as u64;
    let w = cx.param("coefficients", Tensor::from_f32(vec![len, 1], &coef))?;
    let dot = cx.add_helper("dot", Op::MatMul, &[k, w])?;
    let r = cx.scalar("rho", DType::F32, f64::from(rho[0]))?;
    let y = cx.add_step(!one_class, "value", Op::Add, &[dot, r])?;
    if !one_class {
        return Ok(vec![y]);
    }
    let zero = cx.scalar("zero", DType::F32, 0.0)?;
    let pos = cx.add_helper("inlier", Op::Greater, &[y, zero])?;
    let one = cx.scalar("one", DType::F32, 1.0)?;
    let minus = cx.scalar("minus_one", DType::F32, -1.0)?;
    Ok(vec![cx.add(Op::Where, &[pos, one, minus])?])
}
