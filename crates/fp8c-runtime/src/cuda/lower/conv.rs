//! The conv family on CUDA: 1-D and 2-D convolution as im2col (`conv.cu`) and one cuBLASLt
//! GEMM per image, batched over the groups; its gradients as the same GEMMs transposed, with
//! col2im for the input gradient (f32, as the CPU reference computes them).

use super::{Action, Lowerer, R, float_word, numel, window_2d};
use crate::cuda::codegen::{self, Access, EwParams, EwSpec};
use crate::cuda::device::KernelArgs;
use crate::cuda::gemm::GemmSpec;
use crate::cuda::kernels;
use crate::program::{BufId, Step};
use fp8c_ir::window::WindowAttrs;
use fp8c_ir::{ConvOp, Op, Support};

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
        ConvOp::Conv { .. } | ConvOp::ConvGradInput { .. } | ConvOp::ConvGradWeight { .. } => {
            Support::Yes
        }
        ConvOp::__Lifetime(never, _) => match never {},
    }
}

/// A convolution's geometry, 1-D lifted to 2-D: images, channels, groups and the kernels'
/// `Conv2d` of one image.
struct ConvPlan {
    nimg: u64,
    /// Output channels.
    mo: u64,
    g: u64,
    geo: Conv2d,
    pointwise: bool,
}

impl ConvPlan {
    fn spatial(&self) -> u64 {
        self.geo.oh * self.geo.ow
    }
    fn plane(&self) -> u64 {
        self.geo.h * self.geo.w
    }
    /// Rows of one group's im2col matrix: C/g · kh · kw.
    fn rows(&self) -> u64 {
        self.geo.c / self.g * self.geo.kh * self.geo.kw
    }
}

impl Lowerer<'_> {
    /// The geometry of the convolution of x (`bufs[0]`) by w (`bufs[1]`) into y (`bufs[2]`),
    /// f32, bf16 or f16, all of one dtype.
    fn conv_plan(
        &self,
        [x, w, y]: [BufId; 3],
        kernel: &[i64],
        window: &WindowAttrs<'_>,
        group: i64,
    ) -> R<ConvPlan> {
        let one_d = self.buf(x).dims.len() == 3 && self.buf(w).dims.len() == 3;
        let lifted = super::Lifted1d::new(
            one_d,
            &[&self.buf(x).dims, &self.buf(w).dims, &self.buf(y).dims],
            kernel,
            window,
        );
        let window = &lifted.window(window);
        let [xd, wd, yd] = [&lifted.dims[0], &lifted.dims[1], &lifted.dims[2]];
        if xd.len() != 4 || wd.len() != 4 || yd.len() != 4 {
            return Err("only 1-D and 2-D convolutions are supported on CUDA yet".into());
        }
        let t = self.buf(x).ty.dtype;
        float_word(t)?;
        if self.buf(w).ty.dtype != t || self.buf(y).ty.dtype != t {
            return Err("conv's x, w and y must share a dtype".into());
        }
        let g = group.max(1) as u64;
        let (c, h, wid) = (xd[1], xd[2], xd[3]);
        let (mo, oh, ow) = (yd[1], yd[2], yd[3]);
        let (kh, kw) = (wd[2], wd[3]);
        let kernel = match lifted.kernel.as_slice() {
            [a, b] => [*a, *b],
            _ => [kh as i64, kw as i64],
        };
        if !c.is_multiple_of(g) || !mo.is_multiple_of(g) {
            return Err("channels are not divisible by group".into());
        }
        let [ax_h, ax_w] = window_2d([h, wid], kernel, window)?;
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
            ph: ax_h.pad_begin,
            pw: ax_w.pad_begin,
            dh: ax_h.dilation,
            dw: ax_w.dilation,
        };
        let pointwise = kh == 1
            && kw == 1
            && geo.sh == 1
            && geo.sw == 1
            && geo.ph == 0
            && geo.pw == 0
            && oh == h
            && ow == wid;
        Ok(ConvPlan {
            nimg: xd[0],
            mo,
            g,
            geo,
            pointwise,
        })
    }

    /// dx = col2im(W_gᵀ · dY_g) per image (f32).
    fn conv_grad_input(&self, p: &ConvPlan, dy: BufId, w: BufId, dx: BufId) -> R<Vec<Action>> {
        if self.buf(dx).ty.dtype != fp8c_ir::DType::F32 {
            return Err("convolution gradients run in f32 on CUDA".into());
        }
        if numel(self.buf(dx)) == 0 {
            return Ok(vec![]);
        }
        let (rows, spatial, mg) = (p.rows(), p.spatial(), p.mo / p.g);
        let col = self.alloc(p.g * rows * spatial * 4)?;
        let mut actions = Vec::new();
        for img in 0..p.nimg {
            // col_g [rows, spatial] = W_gᵀ [rows, mg] · dY_g [mg, spatial]; W_g is stored
            // [mg, rows].
            let mut spec = GemmSpec::plain(
                rows,
                spatial,
                mg,
                self.ptr(w),
                self.ptr(dy) + img * p.mo * spatial * 4,
                col,
                fp8c_ir::DType::F32,
                fp8c_ir::DType::F32,
            );
            spec.trans_a = true;
            spec.batch = p.g;
            spec.stride_a = mg * rows;
            spec.stride_b = mg * spatial;
            spec.stride_d = rows * spatial;
            actions.push(self.gemm(&spec)?);
            let mut a = KernelArgs::new();
            a.ptr(col)
                .ptr(self.ptr(dx) + img * p.geo.c * p.plane() * 4)
                .push(p.geo);
            actions.push(self.launch_1d(
                kernels::CONV,
                "fp8c_col2im_f32",
                p.geo.c * p.plane(),
                1,
                a,
            )?);
        }
        Ok(actions)
    }

    /// dW_g = Σ over images of dY_g · im2col(x)_gᵀ (f32; β = 1 after the first image).
    fn conv_grad_weight(&self, p: &ConvPlan, x: BufId, dy: BufId, dw: BufId) -> R<Vec<Action>> {
        if self.buf(dw).ty.dtype != fp8c_ir::DType::F32 {
            return Err("convolution gradients run in f32 on CUDA".into());
        }
        let (rows, spatial, mg) = (p.rows(), p.spatial(), p.mo / p.g);
        if numel(self.buf(dw)) == 0 {
            return Ok(vec![]);
        }
        if p.nimg == 0 || spatial == 0 {
            return Ok(vec![Action::Memset8 {
                ptr: self.ptr(dw),
                value: 0,
                bytes: self.buf(dw).bytes,
            }]);
        }
        let col = if p.pointwise {
            0
        } else {
            self.alloc(p.geo.c * p.geo.kh * p.geo.kw * spatial * 4)?
        };
        let mut actions = Vec::new();
        for img in 0..p.nimg {
            let x_img = self.ptr(x) + img * p.geo.c * p.plane() * 4;
            let b_ptr = if p.pointwise {
                x_img
            } else {
                let mut a = KernelArgs::new();
                a.ptr(x_img).ptr(col).push(p.geo);
                actions.push(self.launch_1d(
                    kernels::CONV,
                    "fp8c_im2col_f32",
                    p.geo.c * p.geo.kh * p.geo.kw * spatial,
                    1,
                    a,
                )?);
                col
            };
            // dW_g [mg, rows] (+)= dY_g [mg, spatial] · col_gᵀ; col_g is stored [rows, spatial].
            let mut spec = GemmSpec::plain(
                mg,
                rows,
                spatial,
                self.ptr(dy) + img * p.mo * spatial * 4,
                b_ptr,
                self.ptr(dw),
                fp8c_ir::DType::F32,
                fp8c_ir::DType::F32,
            );
            spec.trans_b = true;
            spec.batch = p.g;
            spec.stride_a = mg * spatial;
            spec.stride_b = rows * spatial;
            spec.stride_d = mg * rows;
            spec.beta = if img == 0 { 0.0 } else { 1.0 };
            actions.push(self.gemm(&spec)?);
        }
        Ok(actions)
    }

    pub(super) fn lower_conv(&self, c: ConvOp<'_>, step: &Step) -> R<Vec<Action>> {
        let (ins, outs) = (&step.inputs, &step.outputs);
        let w = c.conv_window();
        let (kernel_shape, window, group) = (w.kernel_shape, &w.window, w.group);
        match c {
            ConvOp::Conv { .. } => self.conv(ins, outs[0], kernel_shape, window, group),
            ConvOp::ConvGradInput { .. } => {
                // dy = ins[0], w = ins[1]; dx has the forward's input shape.
                let plan =
                    self.conv_plan([outs[0], ins[1], ins[0]], kernel_shape, window, group)?;
                self.conv_grad_input(&plan, ins[0], ins[1], outs[0])
            }
            ConvOp::ConvGradWeight { .. } => {
                // x = ins[0], dy = ins[1]; dw has the forward's weight shape.
                let plan =
                    self.conv_plan([ins[0], outs[0], ins[1]], kernel_shape, window, group)?;
                self.conv_grad_weight(&plan, ins[0], ins[1], outs[0])
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
        let p = self.conv_plan([x, w, y], kernel, window, group)?;
        let t = self.buf(x).ty.dtype;
        let tw = float_word(t)?;
        let (nimg, c, g, mo) = (p.nimg, p.geo.c, p.g, p.mo);
        let (spatial, kg, mg) = (p.spatial(), p.rows(), mo / g);
        let es = t.size() as u64;
        let mut actions = Vec::new();
        if numel(self.buf(y)) == 0 {
            return Ok(actions);
        }
        let col = if p.pointwise {
            0
        } else {
            self.alloc(c * p.geo.kh * p.geo.kw * spatial * es)?
        };
        for img in 0..nimg {
            let x_img = self.ptr(x) + img * c * p.plane() * es;
            let y_img = self.ptr(y) + img * mo * spatial * es;
            let b_ptr = if p.pointwise {
                x_img
            } else {
                let mut a = KernelArgs::new();
                a.ptr(x_img).ptr(col).push(p.geo);
                actions.push(self.launch_1d(
                    kernels::CONV,
                    &format!("fp8c_im2col_{tw}"),
                    c * p.geo.kh * p.geo.kw * spatial,
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
            let yd = [nimg, mo, p.geo.oh, p.geo.ow];
            let spec = EwSpec {
                program: codegen::single_op(&Op::Add, 2),
                inputs: vec![t, self.buf(b).ty.dtype],
                access: vec![Access::Full, Access::for_shapes(&bd, &yd)],
                out: t,
                quant: None,
            };
            let header = codegen::header(&spec)?;
            let mut ew = EwParams::new(&spec.access, &yd)?;
            ew.inputs[0] = self.ptr(y);
            ew.inputs[1] = self.ptr(b);
            ew.y = self.ptr(y);
            actions.extend(self.ew_launch(&header, ew, numel(self.buf(y)))?);
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
