//! The conv family on CUDA: 2-D convolution as im2col (`conv.cu`) and one cuBLASLt GEMM per
//! image, batched over the groups. The convolution gradients have no kernel.

use super::{Action, Lowerer, R, float_word, not_supported, numel, window_2d};
use crate::cuda::codegen::{self, Access, EwParams, EwSpec};
use crate::cuda::device::KernelArgs;
use crate::cuda::gemm::GemmSpec;
use crate::cuda::kernels;
use crate::program::{BufId, Step};
use fp8c_ir::window::WindowAttrs;
use fp8c_ir::{ConvOp, Op, Support};

/// Why the convolution gradients do not run on CUDA.
const CONV_GRAD: &str =
    "the convolution gradients have no CUDA kernel yet (train convolutions on the CPU backend)";

/// `conv.cu`'s Conv2d.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct Conv2d {
    c: u64,
    h: u64,
    w: u64,
    kh: u64,
    kw: u64,
    oh: u64,
    ow: u64,
    sh: i64,
    sw: i64,
    ph: i64,
    pw: i64,
    dh: i64,
    dw: i64,
}

/// Whether CUDA runs `op` (see [`super::support`]).
pub(crate) fn support(op: ConvOp<'_>) -> Support {
    match op {
        ConvOp::Conv { .. } => Support::Yes,
        ConvOp::ConvGradInput { .. } | ConvOp::ConvGradWeight { .. } => Support::No(CONV_GRAD),
        ConvOp::__Lifetime(never, _) => match never {},
    }
}

impl Lowerer<'_> {
    pub(super) fn lower_conv(&self, c: ConvOp<'_>, step: &Step) -> R<Vec<Action>> {
        let (ins, outs) = (&step.inputs, &step.outputs);
        match c {
            ConvOp::Conv {
                kernel_shape,
                strides,
                pads,
                dilations,
                group,
                auto_pad,
            } => {
                let window = WindowAttrs {
                    strides,
                    pads,
                    dilations,
                    auto_pad: *auto_pad,
                    ceil_mode: false,
                };
                self.conv(ins, outs[0], kernel_shape, &window, *group)
            }
            ConvOp::ConvGradInput { .. } | ConvOp::ConvGradWeight { .. } => {
                Err(not_supported(&step.op, CONV_GRAD))
            }
            ConvOp::__Lifetime(never, _) => match never {},
        }
    }

    /// 2-D convolution (1-D as 2-D over a unit height): per image, im2col (skipped for 1×1
    /// stride-1 unpadded kernels) and one GEMM batched over the groups; then the bias,
    /// broadcast over channels, in place.
    fn conv(
        &self,
        ins: &[BufId],
        y: BufId,
        kernel: &[i64],
        window: &WindowAttrs<'_>,
        group: i64,
    ) -> R<Vec<Action>> {
        let (x, w) = (ins[0], ins[1]);
        let one_d = self.buf(x).dims.len() == 3 && self.buf(w).dims.len() == 3;
        let lifted = super::Lifted1d::new(
            one_d,
            &[&self.buf(x).dims, &self.buf(w).dims, &self.buf(y).dims],
            kernel,
            window,
        );
        let window = &lifted.window(window);
        let kernel = lifted.kernel.as_slice();
        let [xd, wd, yd] = [&lifted.dims[0], &lifted.dims[1], &lifted.dims[2]].map(|d| d.clone());
        if xd.len() != 4 || wd.len() != 4 {
            return Err("only 1-D and 2-D convolutions are supported on CUDA yet".into());
        }
        let t = self.buf(x).ty.dtype;
        let tw = float_word(t)?;
        if self.buf(w).ty.dtype != t {
            return Err("conv's x and w must share a dtype".into());
        }
        let g = group.max(1) as u64;
        let (nimg, c, h, wid) = (xd[0], xd[1], xd[2], xd[3]);
        let (mo, oh, ow) = (yd[1], yd[2], yd[3]);
        let (kh, kw) = (wd[2], wd[3]);
        let kernel = if kernel.len() == 2 {
            kernel.to_vec()
        } else {
            vec![kh as i64, kw as i64]
        };
        if !c.is_multiple_of(g) || !mo.is_multiple_of(g) {
            return Err("channels are not divisible by group".into());
        }
        let [ax_h, ax_w] = window_2d([h, wid], [kernel[0], kernel[1]], window)?;
        let (ph, pw) = (ax_h.pad_begin, ax_w.pad_begin);
        let spatial = oh * ow;
        let cg = c / g;
        let kg = cg * kh * kw;
        let mg = mo / g;
        let es = t.size() as u64;
        let pointwise = kh == 1
            && kw == 1
            && ax_h.stride == 1
            && ax_w.stride == 1
            && ph == 0
            && pw == 0
            && oh == h
            && ow == wid;
        let mut actions = Vec::new();
        if numel(self.buf(y)) == 0 {
            return Ok(actions);
        }
        let col = if pointwise {
            0
        } else {
            self.alloc(c * kh * kw * spatial * es)?
        };
        for img in 0..nimg {
            let x_img = self.ptr(x) + img * c * h * wid * es;
            let y_img = self.ptr(y) + img * mo * spatial * es;
            let b_ptr = if pointwise {
                x_img
            } else {
                let geo = Conv2d {
                    c,
                    h,
                    w: wid,
                    kh,
                    kw,
                    oh,
                    ow,
                    sh: ax_h.stride,
                    sw: ax_w.stride,
                    ph,
                    pw,
                    dh: ax_h.dilation,
                    dw: ax_w.dilation,
                };
                let mut a = KernelArgs::new();
                a.ptr(x_img).ptr(col).push(geo);
                actions.push(self.launch_1d(
                    kernels::CONV,
                    &format!("fp8c_im2col_{tw}"),
                    c * kh * kw * spatial,
                    1,
                    a,
                )?);
                col
            };
            // Y_g [mg, spatial] = W_g [mg, kg] · col_g [kg, spatial], for each group.
            let mut spec = GemmSpec::plain(
                mg,
                spatial,
                kg,
                self.ptr(w),
                b_ptr,
                y_img,
                t,
                self.buf(y).ty.dtype,
            );
            spec.batch = g;
            spec.stride_a = mg * kg;
            spec.stride_b = kg * spatial;
            spec.stride_d = mg * spatial;
            actions.push(self.gemm(&spec)?);
        }
        if let Some(&b) = ins.get(2) {
            // y += bias[c] over [N, C, H, W], in place.
            let bd = [1, mo, 1, 1];
            let spec = EwSpec {
                program: codegen::single_op(&Op::Add, 2),
                inputs: vec![t, self.buf(b).ty.dtype],
                access: vec![Access::Full, Access::for_shapes(&bd, &yd)],
                out: t,
                quant: None,
            };
            let header = codegen::header(&spec)?;
            let mut p = EwParams::new(&spec.access, &yd)?;
            p.inputs[0] = self.ptr(y);
            p.inputs[1] = self.ptr(b);
            p.y = self.ptr(y);
            actions.extend(self.ew_launch(&header, p, numel(self.buf(y)))?);
        }
        Ok(actions)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conv2d_matches_its_c_layout() {
        assert_eq!(std::mem::size_of::<Conv2d>(), 13 * 8);
    }
}
