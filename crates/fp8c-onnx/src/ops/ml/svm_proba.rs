//! SVMClassifier's probability estimates (scikit-learn's `SVC(probability=True)`: the
//! `prob_a`/`prob_b` attributes), as onnxruntime and the ONNX reference implementation
//! compute them: each one-vs-one decision value `s` becomes a pairwise probability
//! `1 − logistic(s·A + B)` clamped to [1e-7, 1 − 1e-7], and libsvm's pairwise coupling
//! (Wu, Lin and Weng's second method, `multiclass_probability`) turns the `k × k` matrix of
//! them into `k` class probabilities by an iteration that stops once
//! `max_t |(Q·p)_t − pᵀQp| < 0.005 / k`, after at most `max(100, k)` rounds.
//!
//! The IR has no loop, so every round is unrolled over the whole batch of rows: a row whose
//! stopping test holds at the start of a round keeps its `p` from then on (`where`), which is
//! the iteration's `break`. Each round's updates are the reference's, in its order, in f32.

use crate::OnnxError;
use crate::ops::NodeCx;
use fp8c_ir::{DType, Op, Tensor, Value};

/// `[N, k]` class probabilities from the `[N, pairs]` f32 decision values `dec` (pairs in
/// libsvm's order: (0,1), (0,2), .., (1,2), ..).
pub(super) fn coupled(
    cx: &mut NodeCx<'_>,
    dec: Value,
    k: usize,
    prob_a: &[f32],
    prob_b: &[f32],
) -> Result<Value, OnnxError> {
    let pairs = k * (k - 1) / 2;
    if prob_a.len() < pairs || prob_b.len() < pairs {
        return Err(cx.err(format!(
            "{} prob_a and {} prob_b values for {k} classes ({pairs} pairs)",
            prob_a.len(),
            prob_b.len()
        )));
    }
    let f32c = |cx: &mut NodeCx<'_>, name: &str, v: f32| cx.scalar(name, DType::F32, f64::from(v));
    let row = |v: &[f32]| Tensor::from_f32(vec![v.len() as u64], v);

    // Pairwise probabilities: 1 − logistic(s·A + B), logistic as onnxruntime's
    // ComputeLogistic (1 / (1 + e^−|v|), mirrored for v < 0).
    let a = cx.constant("prob_a", row(&prob_a[..pairs]))?;
    let b = cx.constant("prob_b", row(&prob_b[..pairs]))?;
    let sa = cx.add_helper("pair_scaled", Op::Mul, &[dec, a])?;
    let val = cx.add_helper("pair_logit", Op::Add, &[sa, b])?;
    let one = f32c(cx, "one", 1.0)?;
    let abs = cx.add_helper("pair_abs", Op::Abs, &[val])?;
    let neg = cx.add_helper("pair_neg_abs", Op::Neg, &[abs])?;
    let e = cx.add_helper("pair_exp", Op::Exp, &[neg])?;
    let den = cx.add_helper("pair_den", Op::Add, &[one, e])?;
    let v = cx.add_helper("pair_logistic_abs", Op::Div, &[one, den])?;
    let zero = f32c(cx, "zero", 0.0)?;
    let negative = cx.add_helper("pair_negative", Op::Less, &[val, zero])?;
    let mirrored = cx.add_helper("pair_mirrored", Op::Sub, &[one, v])?;
    let lg = cx.add_helper("pair_logistic", Op::Where, &[negative, mirrored, v])?;
    let p = cx.add_helper("pair_probability", Op::Sub, &[one, lg])?;
    let lo = f32c(cx, "min_probability", 1.0e-7)?;
    let hi = f32c(cx, "max_probability", 1.0 - 1.0e-7)?;
    let p = cx.add_helper("pair_probability_low", Op::Max, &[p, lo])?;
    let p = cx.add_helper("pair_probability_clamped", Op::Min, &[p, hi])?;
    let q = cx.add_helper("pair_probability_other", Op::Sub, &[one, p])?;

    // R [N, k, k]: R[i][j] = p of pair (i, j), R[j][i] = 1 − p (one 1 per column of the
    // scatter matrices, so the products are exact).
    let kk = k * k;
    let (mut up, mut low) = (vec![0f32; pairs * kk], vec![0f32; pairs * kk]);
    let mut at = 0;
    for i in 0..k {
        for j in i + 1..k {
            up[at * kk + i * k + j] = 1.0;
            low[at * kk + j * k + i] = 1.0;
            at += 1;
        }
    }
    let scatter = |v: &[f32]| Tensor::from_f32(vec![pairs as u64, kk as u64], v);
    let up = cx.constant("scatter_upper", scatter(&up))?;
    let low = cx.constant("scatter_lower", scatter(&low))?;
    let ru = cx.add_helper("r_upper", Op::MatMul, &[p, up])?;
    let rl = cx.add_helper("r_lower", Op::MatMul, &[q, low])?;
    let r = cx.add_helper("r_flat", Op::Add, &[ru, rl])?;
    let dims = cx.constant(
        "r_shape",
        Tensor::from_i64(vec![3], &[0, k as i64, k as i64]),
    )?;
    let r = cx.add_helper("r", Op::Reshape { allowzero: false }, &[r, dims])?;

    // Q[t][t] = Σ_j R[j][t]², Q[t][j] = −R[j][t]·R[t][j].
    let rt = cx.add_helper(
        "r_transposed",
        Op::Transpose {
            perm: vec![0, 2, 1],
        },
        &[r],
    )?;
    let m = cx.add_helper("r_products", Op::Mul, &[r, rt])?;
    let off = cx.add_helper("q_off_diagonal", Op::Neg, &[m])?;
    let r2 = cx.add_helper("r_squared", Op::Mul, &[r, r])?;
    let sum = Op::ReduceSum {
        axes: Some(vec![1]),
        keepdims: false,
    };
    let diag = cx.add_helper("q_diagonal", sum, &[r2])?;
    let mut eye = vec![0f32; kk];
    for t in 0..k {
        eye[t * k + t] = 1.0;
    }
    let eye = cx.constant("identity", Tensor::from_f32(vec![k as u64, k as u64], &eye))?;
    let dcol = cx.add_helper(
        "q_diagonal_column",
        Op::Unsqueeze { axes: vec![2] },
        &[diag],
    )?;
    let dm = cx.add_helper("q_diagonal_matrix", Op::Mul, &[dcol, eye])?;
    let qm = cx.add_helper("q", Op::Add, &[off, dm])?;

    // Q's diagonal entries and rows, which every round reads.
    let mut q_tt = Vec::with_capacity(k);
    let mut q_row = Vec::with_capacity(k);
    let mut onehot = Vec::with_capacity(k);
    for t in 0..k {
        let idx = cx.constant(
            &format!("q_index{t}"),
            Tensor::from_i64(vec![1], &[t as i64]),
        )?;
        let col = cx.add_helper(&format!("q_column{t}"), Op::Gather { axis: 2 }, &[qm, idx])?;
        let row_t = cx.add_helper(&format!("q_row{t}"), Op::Gather { axis: 1 }, &[qm, idx])?;
        let dims = cx.constant(
            &format!("q_row{t}_shape"),
            Tensor::from_i64(vec![2], &[0, k as i64]),
        )?;
        let row_t = cx.add_helper(
            &format!("q_row{t}_flat"),
            Op::Reshape { allowzero: false },
            &[row_t, dims],
        )?;
        // Q[:, t, t] as [N, 1].
        let tt = cx.add_helper(&format!("q_tt{t}_3d"), Op::Gather { axis: 1 }, &[col, idx])?;
        let dims = cx.constant(
            &format!("q_tt{t}_shape"),
            Tensor::from_i64(vec![2], &[0, 1]),
        )?;
        let tt = cx.add_helper(
            &format!("q_tt{t}"),
            Op::Reshape { allowzero: false },
            &[tt, dims],
        )?;
        let mut e = vec![0f32; k];
        e[t] = 1.0;
        q_tt.push(tt);
        q_row.push(row_t);
        onehot.push(cx.constant(&format!("onehot{t}"), row(&e))?);
    }

    // p starts at 1/k everywhere.
    let zero_row = cx.add_helper("zero_row", Op::Mul, &[diag, zero])?;
    let start = f32c(cx, "start", 1.0 / k as f32)?;
    let mut pv = cx.add_helper("p0", Op::Add, &[zero_row, start])?;
    let eps = f32c(cx, "eps", 0.005 / k as f32)?;
    let two = f32c(cx, "two", 2.0)?;
    let mut done: Option<Value> = None;
    let rounds = k.max(100);
    for it in 0..rounds {
        let n = |s: &str| format!("round{it}.{s}");
        let pc = cx.add_helper(&n("p_column"), Op::Unsqueeze { axes: vec![2] }, &[pv])?;
        let qp = cx.add_helper(&n("qp_column"), Op::MatMul, &[qm, pc])?;
        let mut qp = cx.add_helper(
            &n("qp"),
            Op::Squeeze {
                axes: Some(vec![2]),
            },
            &[qp],
        )?;
        let pq = cx.add_helper(&n("p_qp"), Op::Mul, &[pv, qp])?;
        let sum = Op::ReduceSum {
            axes: Some(vec![1]),
            keepdims: true,
        };
        let mut pqp = cx.add_helper(&n("pqp"), sum, &[pq])?;
        let gap = cx.add_helper(&n("gap"), Op::Sub, &[qp, pqp])?;
        let gap = cx.add_helper(&n("gap_abs"), Op::Abs, &[gap])?;
        let max = Op::ReduceMax {
            axes: Some(vec![1]),
            keepdims: true,
        };
        let err = cx.add_helper(&n("max_error"), max, &[gap])?;
        let stop = cx.add_helper(&n("converged"), Op::Less, &[err, eps])?;
        let d = match done {
            None => stop,
            Some(d) => cx.add_helper(&n("done"), Op::Or, &[d, stop])?,
        };
        done = Some(d);
        let before = pv;
        for t in 0..k {
            let m = |s: &str| format!("round{it}.t{t}.{s}");
            let idx = cx.constant(&m("index"), Tensor::from_i64(vec![1], &[t as i64]))?;
            let qpt = cx.add_helper(&m("qp_t"), Op::Gather { axis: 1 }, &[qp, idx])?;
            let num = cx.add_helper(&m("num"), Op::Sub, &[pqp, qpt])?;
            let diff = cx.add_helper(&m("diff"), Op::Div, &[num, q_tt[t]])?;
            let step = cx.add_helper(&m("step"), Op::Mul, &[diff, onehot[t]])?;
            pv = cx.add_helper(&m("p_stepped"), Op::Add, &[pv, step])?;
            let opd = cx.add_helper(&m("one_plus_diff"), Op::Add, &[one, diff])?;
            // pQp = (pQp + diff·(diff·Q[t][t] + 2·Qp[t])) / (1 + diff) / (1 + diff)
            let dq = cx.add_helper(&m("diff_qtt"), Op::Mul, &[diff, q_tt[t]])?;
            let tq = cx.add_helper(&m("two_qp_t"), Op::Mul, &[two, qpt])?;
            let inner = cx.add_helper(&m("inner"), Op::Add, &[dq, tq])?;
            let inner = cx.add_helper(&m("diff_inner"), Op::Mul, &[diff, inner])?;
            let s = cx.add_helper(&m("pqp_sum"), Op::Add, &[pqp, inner])?;
            let s = cx.add_helper(&m("pqp_div"), Op::Div, &[s, opd])?;
            pqp = cx.add_helper(&m("pqp"), Op::Div, &[s, opd])?;
            pv = cx.add_helper(&m("p"), Op::Div, &[pv, opd])?;
            let dr = cx.add_helper(&m("diff_q_row"), Op::Mul, &[diff, q_row[t]])?;
            let s = cx.add_helper(&m("qp_sum"), Op::Add, &[qp, dr])?;
            qp = cx.add_helper(&m("qp"), Op::Div, &[s, opd])?;
        }
        pv = cx.add_helper(&n("p"), Op::Where, &[d, before, pv])?;
    }
    Ok(pv)
}
