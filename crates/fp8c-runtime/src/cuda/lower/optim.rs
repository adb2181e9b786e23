//! The optim family on CUDA: SGD and AdamW steps on f32 master weights (`optimizer.cu`).

use super::{Action, Lowerer, R, numel};
use crate::cuda::device::KernelArgs;
use crate::cuda::kernels;
use crate::program::{BufId, Step};
use fp8c_ir::{DType, OptimOp, Support};

/// Whether CUDA runs `op` (see [`super::support`]).
pub(crate) fn support(op: OptimOp<'_>) -> Support {
    match op {
        OptimOp::SgdUpdate { .. } | OptimOp::AdamwUpdate { .. } => Support::Yes,
        OptimOp::__Lifetime(never, _) => match never {},
    }
}

impl Lowerer<'_> {
    pub(super) fn lower_optim(&self, o: OptimOp<'_>, step: &Step) -> R<Vec<Action>> {
        let (ins, outs) = (&step.inputs, &step.outputs);
        match o {
            OptimOp::SgdUpdate {
                momentum,
                weight_decay,
                nesterov,
            } => {
                self.require_f32(&ins[..3])?;
                let n = numel(self.buf(ins[0]));
                let mut a = KernelArgs::new();
                for &b in &ins[..4] {
                    a.ptr(self.ptr(b));
                }
                a.ptr(self.ptr(outs[0]))
                    .ptr(self.ptr(outs[1]))
                    .u64(n)
                    .f32(*momentum)
                    .f32(*weight_decay)
                    .i32(i32::from(*nesterov));
                Ok(vec![self.launch_1d(
                    kernels::OPTIMIZER,
                    "fp8c_sgd_update_f32",
                    n,
                    4,
                    a,
                )?])
            }
            OptimOp::AdamwUpdate {
                beta1,
                beta2,
                epsilon,
                weight_decay,
            } => {
                self.require_f32(&ins[..4])?;
                let n = numel(self.buf(ins[0]));
                let mut a = KernelArgs::new();
                for &b in &ins[..6] {
                    a.ptr(self.ptr(b));
                }
                for &b in &outs[..3] {
                    a.ptr(self.ptr(b));
                }
                a.u64(n)
                    .f32(*beta1)
                    .f32(*beta2)
                    .f32(*epsilon)
                    .f32(*weight_decay);
                Ok(vec![self.launch_1d(
                    kernels::OPTIMIZER,
                    "fp8c_adamw_update_f32",
                    n,
                    4,
                    a,
                )?])
            }
            OptimOp::__Lifetime(never, _) => match never {},
        }
    }

    /// Optimizer tensors are f32 master weights.
    fn require_f32(&self, bufs: &[BufId]) -> R<()> {
        for &b in bufs {
            if self.buf(b).ty.dtype != DType::F32 {
                return Err(format!(
                    "optimizer tensors must be f32 master weights on CUDA, got {}",
                    self.buf(b).ty.dtype
                ));
            }
        }
        Ok(())
    }
}
