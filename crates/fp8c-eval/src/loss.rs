//! The loss family: `softmax_cross_entropy` (the mean over every label but
//! `IGNORE_INDEX`, and the log-probabilities) and its gradient `softmax_cross_entropy_grad`. Both compute in f64 and
//! round once to the logits' type (f32 tensors are read and written in place); rows are
//! independent, and the mean sums them in index order.

use crate::args;
use crate::cast::store_f64 as store;
use crate::data::{
    PAR_MIN, dims_of, float_scalar_f64 as scalar, float_values_f64 as values_f64, int_values,
    rows_mut,
};
use crate::error::{ErrorKind, Fail, KResult, shape_err, value_err};
use fp8c_ir::{DType, IGNORE_INDEX, LossOp, Support, Tensor};
use rayon::prelude::*;

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
    if logits.dtype() == DType::F32
        && let Ok(xs) = logits.as_slice::<f32>()
    {
        return cross_entropy_f32(xs, logits.shape(), c, &lab, counted);
    }
    let xv = values_f64(logits, "logits")?;
    let mut lp = vec![0f64; xv.len()];
    rows_mut(&mut lp, c, |r, o| {
        let xr = &xv[r * c..][..c];
        let (max, ls) = row_shift(xr.iter().copied());
        for (y, &v) in o.iter_mut().zip(xr) {
            *y = v - max - ls;
        }
    });
    let loss = mean_loss(
        lab.iter()
            .enumerate()
            .filter_map(|(r, l)| l.map(|l| lp[r * c + l])),
        counted,
    );
    Ok(vec![
        store(vec![loss], logits.dtype(), &[])?,
        store(lp, logits.dtype(), logits.shape())?,
    ])
}

/// A row's max (NaN winning) and `ln Σ exp(x − max)`, the sum in index order.
fn row_shift(xr: impl Iterator<Item = f64> + Clone) -> (f64, f64) {
    let max = crate::data::max_keep_nan(xr.clone());
    let ls = xr.map(|v| (v - max).exp()).sum::<f64>().ln();
    (max, ls)
}

/// The mean over the rows that count of minus their label's log-probability (PyTorch's
/// reduction='mean' with ignore_index: NaN when every row is ignored), summed in row order.
fn mean_loss(picked: impl Iterator<Item = f64>, counted: usize) -> f64 {
    -picked.sum::<f64>() / counted as f64
}

/// [`cross_entropy`] on f32 logits read in place: the same f64 formula, each log-probability
/// rounded once straight to f32 (no f64 copies of the tensor), so the same bits. A language
/// model's loss over its vocabulary took a tenth of a llama-tiny training step through the
/// f64 copies.
fn cross_entropy_f32(
    xs: &[f32],
    shape: &[u64],
    c: usize,
    lab: &[Option<usize>],
    counted: usize,
) -> KResult<Vec<Tensor>> {
    let mut lp = vec![0f32; xs.len()];
    // Each row's (max, ln Σ), kept for the loss, which reads the f64 log-probability.
    let mut shift = vec![(0f64, 0f64); lab.len()];
    let row = |(r, (o, s)): (usize, (&mut [f32], &mut (f64, f64)))| {
        let xr = &xs[r * c..][..c];
        let (max, ls) = row_shift(xr.iter().map(|&v| f64::from(v)));
        for (y, &v) in o.iter_mut().zip(xr) {
            *y = (f64::from(v) - max - ls) as f32;
        }
        *s = (max, ls);
    };
    if c > 0 {
        if xs.len() >= PAR_MIN {
            lp.par_chunks_mut(c)
                .zip(shift.par_iter_mut())
                .enumerate()
                .for_each(row);
        } else {
            lp.chunks_mut(c)
                .zip(shift.iter_mut())
                .enumerate()
                .for_each(row);
        }
    }
    let picked = lab.iter().enumerate().filter_map(|(r, l)| {
        let (max, ls) = shift[r];
        l.map(|l| f64::from(xs[r * c + l]) - max - ls)
    });
    let loss = mean_loss(picked, counted);
    let to = |shape: &[u64], v: Vec<f32>| {
        Tensor::from_vec(DType::F32, shape.to_vec(), v)
            .map_err(|m| Fail::new(ErrorKind::TooLarge, m))
    };
    Ok(vec![to(&[], vec![loss as f32])?, to(shape, lp)?])
}

/// `(softmax − onehot) · dloss / N`.
fn cross_entropy_grad(lp: &Tensor, labels: &Tensor, dloss: &Tensor) -> KResult<Tensor> {
    let (_, c, lab, counted) = ce_labels(lp, labels)?;
    let scale = scalar(dloss, "dloss")? / counted as f64;
    if lp.dtype() == DType::F32
        && let Ok(ls) = lp.as_slice::<f32>()
    {
        // f32 log-probabilities read in place, each gradient rounded once straight to f32:
        // the f64 formula below, the same bits.
        let mut out = vec![0f32; ls.len()];
        rows_mut(&mut out, c, |r, o| {
            let Some(l) = lab[r] else { return };
            for (j, y) in o.iter_mut().enumerate() {
                *y = ce_grad(f64::from(ls[r * c + j]), j == l, scale) as f32;
            }
        });
        return Tensor::from_vec(DType::F32, lp.shape().to_vec(), out)
            .map_err(|m| Fail::new(ErrorKind::TooLarge, m));
    }
    let lv = values_f64(lp, "log_probs")?;
    let mut out = vec![0f64; lv.len()];
    rows_mut(&mut out, c, |r, o| {
        // An ignored row gets no gradient.
        let Some(l) = lab[r] else { return };
        for (j, y) in o.iter_mut().enumerate() {
            *y = ce_grad(lv[r * c + j], j == l, scale);
        }
    });
    store(out, lp.dtype(), lp.shape())
}

/// One element of the gradient: `(e^lp − onehot) · scale`.
#[inline(always)]
fn ce_grad(lp: f64, label: bool, scale: f64) -> f64 {
    let onehot = if label { 1.0 } else { 0.0 };
    (lp.exp() - onehot) * scale
}
