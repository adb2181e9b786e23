//! The loss family on CUDA: softmax cross-entropy and its gradient (`losses.cu`). Both check
//! the labels on the device and raise the step's error flag for one out of range; labels equal
//! to `fp8c_ir::IGNORE_INDEX` do not count (the kernels' `FP8C_IGNORE_INDEX`).

use super::{Action, BLOCK, Lowerer, R, index_word, word};
use crate::cuda::device::KernelArgs;
use crate::cuda::kernels;
use crate::program::{BufId, Step};
use fp8c_ir::{DType, LossOp, Support};

/// Whether CUDA runs `op` (see [`super::support`]).
pub(crate) fn support(op: LossOp<'_>) -> Support {
    match op {
        LossOp::SoftmaxCrossEntropy | LossOp::SoftmaxCrossEntropyGrad => Support::Yes,
        LossOp::__Lifetime(never, _) => match never {},
    }
}

impl Lowerer<'_> {
    pub(super) fn lower_loss(
        &mut self,
        l: LossOp<'_>,
        step: &Step,
        flag: &mut Option<usize>,
    ) -> R<Vec<Action>> {
        let (ins, outs) = (&step.inputs, &step.outputs);
        match l {
            LossOp::SoftmaxCrossEntropy => {
                let (i, f) = self.next_flag();
                *flag = Some(i);
                self.xent(ins, outs, f)
            }
            LossOp::SoftmaxCrossEntropyGrad => {
                let (i, f) = self.next_flag();
                *flag = Some(i);
                self.xent_grad(ins, outs[0], f)
            }
            LossOp::__Lifetime(never, _) => match never {},
        }
    }

    fn xent(&self, ins: &[BufId], outs: &[BufId], err: u64) -> R<Vec<Action>> {
        let (logits, labels) = (ins[0], ins[1]);
        let (loss, logp) = (outs[0], outs[1]);
        let dims = self.buf(logits).dims.clone();
        let classes = *dims.last().ok_or("logits must have a class axis")?;
        let rows: u64 = dims[..dims.len() - 1].iter().product();
        let t = match self.buf(logits).ty.dtype {
            d @ (DType::F32 | DType::BF16) => word(d)?,
            other => {
                return Err(format!(
                    "cross-entropy of {other} logits is not supported on CUDA"
                ));
            }
        };
        let lt = index_word(self.buf(labels).ty.dtype, "labels")?;
        if rows == 0 {
            return Err("cross-entropy over no rows".into());
        }
        let row_loss = self.alloc(rows * 4)?;
        let row_weight = self.alloc(rows * 4)?;
        let mut a = KernelArgs::new();
        a.ptr(self.ptr(logits))
            .ptr(self.ptr(labels))
            .ptr(self.ptr(logp))
            .ptr(row_loss)
            .ptr(row_weight)
            .u64(rows)
            .u64(classes)
            .ptr(err);
        let fwd = self.launch_rows(
            kernels::LOSSES,
            &format!("fp8c_softmax_xent_{t}_{lt}"),
            rows,
            a,
        )?;
        let mut b = KernelArgs::new();
        b.ptr(row_loss)
            .ptr(row_weight)
            .u64(rows)
            .ptr(self.ptr(loss));
        let mean = self.launch(
            kernels::LOSSES,
            &format!("fp8c_masked_mean_{t}"),
            1,
            (BLOCK, 1, 1),
            b,
        )?;
        Ok(vec![fwd, mean])
    }

    fn xent_grad(&self, ins: &[BufId], dx: BufId, err: u64) -> R<Vec<Action>> {
        let (logp, labels, dloss) = (ins[0], ins[1], ins[2]);
        let dims = self.buf(logp).dims.clone();
        let classes = *dims.last().ok_or("log_probs must have a class axis")?;
        let rows: u64 = dims[..dims.len() - 1].iter().product();
        let t = match self.buf(logp).ty.dtype {
            d @ (DType::F32 | DType::BF16) => word(d)?,
            other => return Err(format!("cross-entropy of {other} is not supported on CUDA")),
        };
        let lt = index_word(self.buf(labels).ty.dtype, "labels")?;
        if self.buf(dloss).ty.dtype != self.buf(logp).ty.dtype {
            return Err("dloss must have the log-probabilities' dtype".into());
        }
        let n = rows * classes;
        if n == 0 {
            return Ok(vec![]);
        }
        // The labels that count (not IGNORE_INDEX), then the gradient divided by them.
        let count = self.alloc(4)?;
        let mut c = KernelArgs::new();
        c.ptr(self.ptr(labels)).u64(rows).ptr(count);
        let counting = self.launch(
            kernels::LOSSES,
            &format!("fp8c_xent_count_{lt}"),
            1,
            (BLOCK, 1, 1),
            c,
        )?;
        let mut a = KernelArgs::new();
        a.ptr(self.ptr(logp))
            .ptr(self.ptr(labels))
            .ptr(self.ptr(dloss))
            .ptr(count)
            .ptr(self.ptr(dx))
            .u64(rows)
            .u64(classes)
            .ptr(err);
        let grad = self.launch_1d(
            kernels::LOSSES,
            &format!("fp8c_softmax_xent_grad_{t}_{lt}"),
            n,
            1,
            a,
        )?;
        Ok(vec![counting, grad])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kernels skip the label the IR and the CPU reference skip.
    #[test]
    fn kernels_ignore_the_irs_ignore_index() {
        let want = format!("#define FP8C_IGNORE_INDEX ({})", fp8c_ir::IGNORE_INDEX);
        assert!(kernels::LOSSES.source.contains(&want), "{want}");
    }
}
