//! The reduce family on CUDA: sum, mean, max, min and product over adjacent axes
//! (`reduce.cu`), and the all-finite check of the loss-scaling step.

use super::{Action, Lowerer, R, float_word, norm_axis, not_supported, numel, split3};
use crate::cuda::device::KernelArgs;
use crate::cuda::kernels;
use crate::program::{BufId, Step};
use fp8c_ir::{DType, ReduceOp, Support};

const CUM_SUM: &str = "cum_sum has no CUDA kernel yet (exports use it on integer mask data, \
     which is folded by the CPU reference when its inputs are constant)";

const ARG: &str = "arg_max and arg_min have no CUDA kernel yet (classifier heads: run them on \
     the CPU backend)";

const TOP_K: &str = "top_k has no CUDA kernel yet (sampling and routing heads: run them on \
     the CPU backend)";

/// Whether CUDA runs `op` (see [`super::support`]).
pub(crate) fn support(op: ReduceOp<'_>) -> Support {
    match op {
        ReduceOp::ReduceMean { .. }
        | ReduceOp::ReduceSum { .. }
        | ReduceOp::ReduceMax { .. }
        | ReduceOp::ReduceMin { .. }
        | ReduceOp::ReduceProd { .. }
        | ReduceOp::AllFinite => Support::Yes,
        ReduceOp::CumSum { .. } => Support::No(CUM_SUM),
        ReduceOp::ArgMax { .. } | ReduceOp::ArgMin { .. } => Support::No(ARG),
        ReduceOp::TopK { .. } => Support::No(TOP_K),
        ReduceOp::__Lifetime(never, _) => match never {},
    }
}

impl Lowerer<'_> {
    pub(super) fn lower_reduce(&self, r: ReduceOp<'_>, step: &Step) -> R<Vec<Action>> {
        let (ins, outs) = (&step.inputs, &step.outputs);
        match r {
            ReduceOp::ReduceSum { axes, .. } => self.reduce(ins[0], outs[0], axes.as_deref(), 0),
            ReduceOp::ReduceMean { axes, .. } => self.reduce(ins[0], outs[0], axes.as_deref(), 1),
            ReduceOp::ReduceMax { axes, .. } => self.reduce(ins[0], outs[0], axes.as_deref(), 2),
            ReduceOp::ReduceMin { axes, .. } => self.reduce(ins[0], outs[0], axes.as_deref(), 3),
            ReduceOp::ReduceProd { axes, .. } => self.reduce(ins[0], outs[0], axes.as_deref(), 4),
            ReduceOp::CumSum { .. } => Err(not_supported(&step.op, CUM_SUM)),
            ReduceOp::ArgMax { .. } | ReduceOp::ArgMin { .. } => Err(not_supported(&step.op, ARG)),
            ReduceOp::TopK { .. } => Err(not_supported(&step.op, TOP_K)),
            ReduceOp::AllFinite => {
                let y = outs[0];
                let mut actions = vec![Action::Memset8 {
                    ptr: self.ptr(y),
                    value: 1,
                    bytes: 1,
                }];
                for &x in ins {
                    let t = float_word(self.buf(x).ty.dtype)?;
                    let n = numel(self.buf(x));
                    if n == 0 {
                        continue;
                    }
                    let mut a = KernelArgs::new();
                    a.ptr(self.ptr(x)).u64(n).ptr(self.ptr(y));
                    actions.push(self.launch_1d(
                        kernels::REDUCE,
                        &format!("fp8c_all_finite_{t}"),
                        n,
                        8,
                        a,
                    )?);
                }
                Ok(actions)
            }
            ReduceOp::__Lifetime(never, _) => match never {},
        }
    }

    /// `kind`: 0 sum, 1 mean, 2 max, 3 min, 4 prod (reduce.cu's RED_*).
    pub(super) fn reduce(
        &self,
        x: BufId,
        y: BufId,
        axes: Option<&[i64]>,
        kind: i32,
    ) -> R<Vec<Action>> {
        let dims = self.buf(x).dims.clone();
        let r = dims.len();
        let mut ax: Vec<usize> = match axes {
            None => (0..r).collect(),
            Some([]) => (0..r).collect(),
            Some(a) => a.iter().map(|&v| norm_axis(v, r)).collect::<R<_>>()?,
        };
        ax.sort_unstable();
        ax.dedup();
        let int = match self.buf(x).ty.dtype {
            DType::I64 => Some("i64"),
            DType::I32 => Some("i32"),
            _ => None,
        };
        let t = match int {
            Some(t) => t,
            None => float_word(self.buf(x).ty.dtype)?,
        };
        let mut actions = Vec::new();
        let mut src = self.ptr(x);
        let mut dims = dims;
        if ax.windows(2).any(|w| w[1] != w[0] + 1) {
            // Non-adjacent axes: permute a copy so the kept axes come first (in order) and the
            // reduced ones last, then reduce the trailing block. The output's element order is
            // the kept axes' order either way.
            let perm: Vec<usize> = (0..r)
                .filter(|k| !ax.contains(k))
                .chain(ax.iter().copied())
                .collect();
            let es = self.buf(x).ty.dtype.size();
            let xs = super::contiguous_strides(&dims);
            let pd: Vec<u64> = perm.iter().map(|&k| dims[k]).collect();
            let ps: Vec<i64> = perm.iter().map(|&k| xs[k]).collect();
            let scratch = self.alloc(numel(self.buf(x)) * es as u64)?;
            actions.extend(self.strided_copy_ptr(
                (src, scratch),
                es,
                &pd,
                (&ps, 0),
                (&super::contiguous_strides(&pd), 0),
            )?);
            src = scratch;
            ax = (r - ax.len()..r).collect();
            dims = pd;
        }
        let (lo, hi) = (
            ax.first().copied().unwrap_or(0),
            ax.last().map_or(0, |&a| a + 1),
        );
        let (outer, red, inner) = split3(&dims, lo, hi);
        if outer * inner == 0 {
            return Ok(vec![]);
        }
        let mut a = KernelArgs::new();
        a.ptr(src)
            .ptr(self.ptr(y))
            .u64(outer)
            .u64(red)
            .u64(inner)
            .i32(kind);
        if int.is_some() {
            let name = format!("fp8c_reduce_int_{t}");
            actions.push(self.launch_1d(kernels::REDUCE, &name, outer * inner, 1, a)?);
            return Ok(actions);
        }
        let name = format!("fp8c_reduce_{t}");
        actions.push(if inner == 1 {
            self.launch_rows(kernels::REDUCE, &name, outer, a)?
        } else {
            self.launch_1d(kernels::REDUCE, &name, outer * inner, 1, a)?
        });
        Ok(actions)
    }
}
