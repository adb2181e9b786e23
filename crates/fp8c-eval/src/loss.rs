//! The loss family: `softmax_cross_entropy` (the mean over every label but
//! `IGNORE_INDEX`, and the log-probabilities) and its gradient `softmax_cross_entropy_grad`. Both compute in f64 and
//! round once to the logits' type; rows are independent, and the mean sums them in index order.

use crate::args;
use crate::data::{
    dims_of, float_scalar_f64 as scalar, float_values_f64 as values_f64, int_values, rows_mut,
    store_f64 as store,
};
use crate::error::{KResult, shape_err, value_err};
use fp8c_ir::{IGNORE_INDEX, LossOp, Support, Tensor};

/// Evaluates an op of the loss family.
pub(crate) fn eval(op: LossOp<'_>, inputs: &[&Tensor]) -> KResult<Vec<Tensor>> {
    match op {
        LossOp::SoftmaxCrossEntropy => {
            let [logits, labels] = args(inputs)?;
            cross_entropy(logits, labels)
        }
        LossOp::SoftmaxCrossEntropyGrad => {
            let [lp, labels, dloss] = args(inputs)?;
            Ok(vec![cross_entropy_grad(lp, labels, dloss)?])
        }
        LossOp::__Lifetime(never, _) => match never {},
    }
}

/// Every op of the family is evaluated.
pub(crate) fn support(op: LossOp<'_>) -> Support {
    match op {
        LossOp::SoftmaxCrossEntropy | LossOp::SoftmaxCrossEntropyGrad => Support::Yes,
        LossOp::__Lifetime(never, _) => match never {},
    }
}

/// Checks labels against `[.., C]` logits; returns (rows, classes, each row's class or None
/// for [`IGNORE_INDEX`], the number of rows that count).
fn ce_labels(
    logits: &Tensor,
    labels: &Tensor,
) -> KResult<(usize, usize, Vec<Option<usize>>, usize)> {
    let dims = dims_of(logits);
    let Some((&c, lead)) = dims.split_last() else {
        return shape_err!("logits must have a class axis, got a scalar");
    };
    if labels.shape() != &logits.shape()[..lead.len()] {
        return shape_err!(
            "labels {:?} must have the logits' leading dims {:?}",
            labels.shape(),
            &logits.shape()[..lead.len()]
        );
    }
    let rows: usize = lead.iter().product();
    if rows == 0 {
        return value_err!("there are no labels (an empty batch has no mean loss)");
    }
    let vals = int_values(labels, "labels")?;
    let mut out = Vec::with_capacity(vals.len());
    for (i, &l) in vals.iter().enumerate() {
        if l == IGNORE_INDEX {
            out.push(None);
            continue;
        }
        if l < 0 || l >= c as i64 {
            return value_err!(
                "label {l} (entry {i}) is out of range: the logits have {c} classes (0..{}; {IGNORE_INDEX} marks a position to ignore)",
                c.saturating_sub(1)
            );
        }
        out.push(Some(l as usize));
    }
    let counted = out.iter().flatten().count();
    Ok((rows, c, out, counted))
}

/// Mean softmax cross-entropy and the log-probabilities.
fn cross_entropy(logits: &Tensor, labels: &Tensor) -> KResult<Vec<Tensor>> {
    let (_, c, lab, counted) = ce_labels(logits, labels)?;
    let xv = values_f64(logits, "logits")?;
    let mut lp = vec![0f64; xv.len()];
    rows_mut(&mut lp, c, |r, o| {
        let xr = &xv[r * c..][..c];
        let max = crate::data::max_keep_nan(xr.iter().copied());
        let ls = xr.iter().map(|&v| (v - max).exp()).sum::<f64>().ln();
        for (y, &v) in o.iter_mut().zip(xr) {
            *y = v - max - ls;
        }
    });
    // The mean over the rows that count (PyTorch's reduction='mean' with ignore_index: NaN
    // when every row is ignored).
    let loss = -lab
        .iter()
        .enumerate()
        .filter_map(|(r, l)| l.map(|l| lp[r * c + l]))
        .sum::<f64>()
        / counted as f64;
    Ok(vec![
        store(vec![loss], logits.dtype(), &[])?,
        store(lp, logits.dtype(), logits.shape())?,
    ])
}

/// `(softmax − onehot) · dloss / N`.
fn cross_entropy_grad(lp: &Tensor, labels: &Tensor, dloss: &Tensor) -> KResult<Tensor> {
    let (_, c, lab, counted) = ce_labels(lp, labels)?;
    let scale = scalar(dloss, "dloss")? / counted as f64;
    let lv = values_f64(lp, "log_probs")?;
    let mut out = vec![0f64; lv.len()];
    rows_mut(&mut out, c, |r, o| {
        // An ignored row gets no gradient.
        let Some(l) = lab[r] else { return };
        for (j, y) in o.iter_mut().enumerate() {
            let onehot = if j == l { 1.0 } else { 0.0 };
            *y = (lv[r * c + j].exp() - onehot) * scale;
        }
    });
    store(out, lp.dtype(), lp.shape())
}
