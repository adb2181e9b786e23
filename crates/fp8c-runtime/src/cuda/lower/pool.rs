//! The pool family on CUDA: 1-D and 2-D max and average pooling and their gradients
//! (`conv.cu`); the global pools are reductions over the spatial axes.

use super::{Action, Lowerer, R, float_word, numel, window_2d};
use crate::cuda::device::KernelArgs;
use crate::cuda::kernels;
use crate::program::{BufId, Step};
use fp8c_ir::window::WindowAttrs;
use fp8c_ir::{PoolOp, Support};

/// `conv.cu`'s Pool2d.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct Pool2d {
    planes: u64,
    h: u64,
    w: u64,
    oh: u64,
    ow: u64,
    kh: u64,
    kw: u64,
    sh: i64,
    sw: i64,
    ph: i64,
    pw: i64,
    ph_end: i64,
    pw_end: i64,
    dh: i64,
    dw: i64,
    count_include_pad: i32,
}

/// Whether CUDA runs `op` (see [`super::support`]).
pub(crate) fn support(op: PoolOp<'_>) -> Support {
    match op {
        PoolOp::MaxPool { .. }
        | PoolOp::AveragePool { .. }
        | PoolOp::GlobalAveragePool
        | PoolOp::GlobalMaxPool
        | PoolOp::MaxPoolGrad { .. }
        | PoolOp::AveragePoolGrad { .. } => Support::Yes,
        PoolOp::__Lifetime(never, _) => match never {},
    }
}

impl Lowerer<'_> {
    pub(super) fn lower_pool(&self, p: PoolOp<'_>, step: &Step) -> R<Vec<Action>> {
        let (ins, outs) = (&step.inputs, &step.outputs);
        match p {
            PoolOp::GlobalAveragePool => self.global_pool(ins[0], outs[0], 1),
            PoolOp::GlobalMaxPool => self.global_pool(ins[0], outs[0], 2),
            PoolOp::MaxPool {
                kernel_shape,
                strides,
                pads,
                dilations,
                ceil_mode,
                auto_pad,
            }
            | PoolOp::MaxPoolGrad {
                kernel_shape,
                strides,
                pads,
                dilations,
                ceil_mode,
                auto_pad,
            } => {
                let window = WindowAttrs {
                    strides,
                    pads,
                    dilations,
                    auto_pad: *auto_pad,
                    ceil_mode: *ceil_mode,
                };
                // The gradient reads x and dy and writes dx.
                let dy = matches!(p, PoolOp::MaxPoolGrad { .. }).then(|| ins[1]);
                self.pool(ins[0], outs[0], kernel_shape, &window, true, false, dy)
            }
            PoolOp::AveragePool {
                kernel_shape,
                strides,
                pads,
                dilations,
                ceil_mode,
                count_include_pad,
                auto_pad,
            }
            | PoolOp::AveragePoolGrad {
                kernel_shape,
                strides,
                pads,
                dilations,
                ceil_mode,
                count_include_pad,
                auto_pad,
            } => {
                let window = WindowAttrs {
                    strides,
                    pads,
                    dilations,
                    auto_pad: *auto_pad,
                    ceil_mode: *ceil_mode,
                };
                let dy = matches!(p, PoolOp::AveragePoolGrad { .. }).then(|| ins[1]);
                self.pool(
                    ins[0],
                    outs[0],
                    kernel_shape,
                    &window,
                    false,
                    *count_include_pad,
                    dy,
                )
            }
            PoolOp::__Lifetime(never, _) => match never {},
        }
    }

    /// A global pool: the mean (`kind` 1) or max (2) over the spatial axes.
    fn global_pool(&self, x: BufId, y: BufId, kind: i32) -> R<Vec<Action>> {
        let rank = self.buf(x).dims.len();
        if rank < 3 {
            return Err("expects [N, C, spatial...]".into());
        }
        let axes: Vec<i64> = (2..rank as i64).collect();
        self.reduce(x, y, Some(&axes), kind)
    }

    /// 2-D max or average pooling (1-D as 2-D over a unit height) of x into y, or with `dy`
    /// (the pool's output gradient) its gradient into y (f32).
    #[allow(clippy::too_many_arguments)]
    fn pool(
        &self,
        x: BufId,
        y: BufId,
        kernel: &[i64],
        window: &WindowAttrs<'_>,
        is_max: bool,
        count_include_pad: bool,
        dy: Option<BufId>,
    ) -> R<Vec<Action>> {
        let one_d = self.buf(x).dims.len() == 3 && kernel.len() == 1;
        let out = dy.unwrap_or(y);
        let lifted = super::Lifted1d::new(
            one_d,
            &[&self.buf(x).dims, &self.buf(out).dims],
            kernel,
            window,
        );
        let window = &lifted.window(window);
        let kernel = lifted.kernel.as_slice();
        let (xd, yd) = (lifted.dims[0].clone(), lifted.dims[1].clone());
        if xd.len() != 4 || kernel.len() != 2 {
            return Err("only 1-D and 2-D pooling is supported on CUDA".into());
        }
        let t = float_word(self.buf(x).ty.dtype)?;
        let [ax_h, ax_w] = window_2d([xd[2], xd[3]], [kernel[0], kernel[1]], window)?;
        let g = Pool2d {
            planes: xd[0] * xd[1],
            h: xd[2],
            w: xd[3],
            oh: yd[2],
            ow: yd[3],
            kh: kernel[0] as u64,
            kw: kernel[1] as u64,
            sh: ax_h.stride,
            sw: ax_w.stride,
            ph: ax_h.pad_begin,
            pw: ax_w.pad_begin,
            ph_end: ax_h.pad_end,
            pw_end: ax_w.pad_end,
            dh: ax_h.dilation,
            dw: ax_w.dilation,
            count_include_pad: i32::from(count_include_pad),
        };
        let n = numel(self.buf(y));
        if n == 0 {
            return Ok(vec![]);
        }
        if let Some(dy) = dy {
            if t != "f32" || self.buf(dy).ty.dtype != self.buf(x).ty.dtype {
                return Err("pooling gradients run in f32 on CUDA".into());
            }
            let mut a = KernelArgs::new();
            a.ptr(self.ptr(x))
                .ptr(self.ptr(dy))
                .ptr(self.ptr(y))
                .push(g)
                .i32(i32::from(is_max));
            return Ok(vec![self.launch_1d(
                kernels::CONV,
                "fp8c_pool2d_grad_f32",
                n,
                1,
                a,
            )?]);
        }
        let mut a = KernelArgs::new();
        a.ptr(self.ptr(x))
            .ptr(self.ptr(y))
            .push(g)
            .i32(i32::from(is_max));
        Ok(vec![self.launch_1d(
            kernels::CONV,
            &format!("fp8c_pool2d_{t}"),
            n,
            1,
            a,
        )?])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool2d_matches_its_c_layout() {
        assert_eq!(std::mem::size_of::<Pool2d>(), 7 * 8 + 8 * 8 + 8);
    }
}
