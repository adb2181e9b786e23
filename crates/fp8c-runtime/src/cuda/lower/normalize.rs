//! The normalize family on CUDA: batch norm (inference, `conv.cu`), layer norm with its FP8
//! output and gradient and RMS norm (`layernorm.cu`), softmax, log-softmax and their gradient
//! (`softmax.cu`).

use super::{Action, Lowerer, R, float_word, norm_axis, numel, split3};
use crate::cuda::device::KernelArgs;
use crate::cuda::kernels;
use crate::program::{BufId, Step};
use fp8c_ir::{DType, NormalizeOp, Support};

/// FP8 outputs of layer_norm_quantize.
pub(super) struct LnQuant {
    pub scale: BufId,
    pub q: BufId,
    pub amax: BufId,
    pub to: DType,
    pub saturate: bool,
}

/// Whether CUDA runs `op` (see [`super::support`]).
pub(crate) fn support(op: NormalizeOp<'_>) -> Support {
    match op {
        NormalizeOp::BatchNormalization { .. }
        | NormalizeOp::LayerNormalization { .. }
        | NormalizeOp::Softmax { .. }
        | NormalizeOp::LogSoftmax { .. }
        | NormalizeOp::LayerNormGrad { .. }
        | NormalizeOp::SoftmaxGrad { .. }
        | NormalizeOp::RmsNormalization { .. } => Support::Yes,
        NormalizeOp::__Lifetime(never, _) => match never {},
    }
}

impl Lowerer<'_> {
    pub(super) fn lower_normalize(&self, n: NormalizeOp<'_>, step: &Step) -> R<Vec<Action>> {
        let (ins, outs) = (&step.inputs, &step.outputs);
        match n {
            NormalizeOp::LayerNormalization { axis, epsilon } => {
                let beta = ins.get(2).copied();
                self.layer_norm(ins[0], ins[1], beta, outs[0], None, *axis, *epsilon)
            }
            NormalizeOp::RmsNormalization { axis, epsilon } => {
                self.rms_norm(ins[0], ins[1], outs[0], *axis, *epsilon)
            }
            NormalizeOp::LayerNormGrad { axis, epsilon } => {
                self.layer_norm_grad(ins, outs, *axis, *epsilon)
            }
            NormalizeOp::Softmax { axis } => self.softmax(ins[0], outs[0], *axis, false),
            NormalizeOp::LogSoftmax { axis } => self.softmax(ins[0], outs[0], *axis, true),
            NormalizeOp::SoftmaxGrad { axis, log } => {
                let (y, dy, dx) = (ins[0], ins[1], outs[0]);
                let dims = self.buf(y).dims.clone();
                let ax = norm_axis(*axis, dims.len())?;
                let (outer, d, inner) = split3(&dims, ax, ax + 1);
                let t = float_word(self.buf(y).ty.dtype)?;
                let mut a = KernelArgs::new();
                a.ptr(self.ptr(y))
                    .ptr(self.ptr(dy))
                    .ptr(self.ptr(dx))
                    .u64(outer)
                    .u64(d)
                    .u64(inner)
                    .i32(i32::from(*log));
                let name = format!("fp8c_softmax_grad_{t}");
                Ok(vec![if inner == 1 {
                    self.launch_rows(kernels::SOFTMAX, &name, outer, a)?
                } else {
                    self.launch_1d(kernels::SOFTMAX, &name, outer * inner, 1, a)?
                }])
            }
            NormalizeOp::BatchNormalization { epsilon } => {
                let x = ins[0];
                let dims = self.buf(x).dims.clone();
                if dims.len() < 2 {
                    return Err("expects [N, C, ...]".into());
                }
                let t = float_word(self.buf(x).ty.dtype)?;
                for &p in &ins[1..] {
                    if self.buf(p).ty.dtype != self.buf(x).ty.dtype {
                        return Err("scale, bias, mean and var must have x's dtype on CUDA".into());
                    }
                }
                let inner: u64 = dims[2..].iter().product();
                let n = numel(self.buf(x));
                let mut a = KernelArgs::new();
                a.ptr(self.ptr(x));
                for &p in &ins[1..5] {
                    a.ptr(self.ptr(p));
                }
                a.ptr(self.ptr(outs[0]))
                    .u64(dims[1])
                    .u64(inner)
                    .u64(n)
                    .f32(*epsilon);
                Ok(vec![self.launch_1d(
                    kernels::CONV,
                    &format!("fp8c_batchnorm_{t}"),
                    n,
                    1,
                    a,
                )?])
            }
            NormalizeOp::__Lifetime(never, _) => match never {},
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn layer_norm(
        &self,
        x: BufId,
        gamma: BufId,
        beta: Option<BufId>,
        y: BufId,
        q: Option<LnQuant>,
        axis: i64,
        eps: f32,
    ) -> R<Vec<Action>> {
        let (rows, cols, t) = self.norm_rows(x, gamma, beta, axis)?;
        let mut actions = Vec::new();
        let (qp, scale, amax, fmt, sat) = match &q {
            Some(q) => {
                actions.push(Action::Memset8 {
                    ptr: self.ptr(q.amax),
                    value: 0,
                    bytes: 4,
                });
                let fmt = match q.to {
                    DType::F8E4M3 => 0,
                    DType::F8E5M2 => 1,
                    other => return Err(format!("{other} is not an FP8 type")),
                };
                (
                    self.ptr(q.q),
                    self.ptr(q.scale),
                    self.ptr(q.amax),
                    fmt,
                    i32::from(q.saturate),
                )
            }
            None => (0, 0, 0, 0, 1),
        };
        if rows * cols == 0 {
            return Ok(actions);
        }
        let mut a = KernelArgs::new();
        a.ptr(self.ptr(x))
            .ptr(self.ptr(gamma))
            .ptr(beta.map_or(0, |b| self.ptr(b)))
            .ptr(self.ptr(y))
            .ptr(qp)
            .ptr(scale)
            .ptr(amax)
            .ptr(0)
            .u64(rows)
            .u64(cols)
            .f32(eps)
            .i32(fmt)
            .i32(sat);
        actions.push(self.launch_rows(
            kernels::LAYERNORM,
            &format!("fp8c_layernorm_fwd_{t}"),
            rows,
            a,
        )?);
        Ok(actions)
    }

    /// `x` as `[rows, cols]` (cols: the dims from `axis` on) and its kernel suffix, with the
    /// scale and bias checked to be `cols` elements of x's type.
    fn norm_rows(
        &self,
        x: BufId,
        gamma: BufId,
        beta: Option<BufId>,
        axis: i64,
    ) -> R<(u64, u64, &'static str)> {
        let dims = self.buf(x).dims.clone();
        let ax = norm_axis(axis, dims.len())?;
        let cols: u64 = dims[ax..].iter().product();
        let rows: u64 = dims[..ax].iter().product();
        let d = self.buf(x).ty.dtype;
        let t = float_word(d)?;
        for p in std::iter::once(gamma).chain(beta) {
            if self.buf(p).ty.dtype != d || numel(self.buf(p)) != cols {
                return Err(format!(
                    "scale and bias must be {d} with the {cols} normalised elements on CUDA (no broadcasting)"
                ));
            }
        }
        Ok((rows, cols, t))
    }

    /// rms_norm: `fp8c_rmsnorm_fwd_<t>` (`kernels/layernorm.cu`) over the rows of `x` from
    /// `axis` on.
    fn rms_norm(&self, x: BufId, gamma: BufId, y: BufId, axis: i64, eps: f32) -> R<Vec<Action>> {
        let (rows, cols, t) = self.norm_rows(x, gamma, None, axis)?;
        if rows * cols == 0 {
            return Ok(Vec::new());
        }
        let mut a = KernelArgs::new();
        a.ptr(self.ptr(x))
            .ptr(self.ptr(gamma))
            .ptr(self.ptr(y))
            .u64(rows)
            .u64(cols)
            .f32(eps);
        Ok(vec![self.launch_rows(
            kernels::LAYERNORM,
            &format!("fp8c_rmsnorm_fwd_{t}"),
            rows,
            a,
        )?])
    }

    /// layer_norm_block_quantize (f32, over the last axis): y, its one-row tiles' codes and
    /// `scale_inv`, in one launch (`kernels/layernorm.cu`).
    pub(super) fn layer_norm_tiles(
        &self,
        (x, gamma, beta): (BufId, BufId, Option<BufId>),
        (y, q, scale_inv): (BufId, BufId, BufId),
        (axis, eps): (i64, f32),
        (to, saturate, cols, scaling, amax_eps): (DType, bool, i64, fp8c_ir::BlockScaling, f32),
    ) -> R<Vec<Action>> {
        let dims = self.buf(x).dims.clone();
        let ax = norm_axis(axis, dims.len())?;
        if ax + 1 != dims.len() || self.buf(x).ty.dtype != DType::F32 {
            return Err("per-tile FP8 from a LayerNorm needs f32 and the last axis".into());
        }
        let c = dims[ax];
        let rows: u64 = dims[..ax].iter().product();
        for p in std::iter::once(gamma).chain(beta) {
            if self.buf(p).ty.dtype != DType::F32 || numel(self.buf(p)) != c {
                return Err(format!(
                    "scale and bias must be f32 with the {c} normalised elements on CUDA (no broadcasting)"
                ));
            }
        }
        if !(amax_eps.is_finite() && amax_eps >= 0.0) {
            return Err(format!("amax_epsilon={amax_eps} must be finite and ≥ 0"));
        }
        let fmt = match to {
            DType::F8E4M3 => 0,
            DType::F8E5M2 => 1,
            other => return Err(format!("{other} is not an FP8 type")),
        };
        if rows * c == 0 {
            return Ok(vec![]);
        }
        let tc = if cols == 0 { c } else { cols as u64 };
        let mut a = KernelArgs::new();
        a.ptr(self.ptr(x))
            .ptr(self.ptr(gamma))
            .ptr(beta.map_or(0, |b| self.ptr(b)))
            .ptr(self.ptr(y))
            .ptr(self.ptr(q))
            .ptr(self.ptr(scale_inv))
            .u64(rows)
            .u64(c)
            .f32(eps)
            .u64(tc)
            .i32(match scaling {
                fp8c_ir::BlockScaling::Fp32 => 0,
                fp8c_ir::BlockScaling::Pow2 => 1,
                fp8c_ir::BlockScaling::E8m0 => 2,
            })
            .f32(amax_eps)
            .i32(fmt)
            .i32(i32::from(saturate));
        Ok(vec![self.launch_rows(
            kernels::LAYERNORM,
            "fp8c_layernorm_fwd_tiles_f32",
            rows,
            a,
        )?])
    }

    fn layer_norm_grad(
        &self,
        ins: &[BufId],
        outs: &[BufId],
        axis: i64,
        eps: f32,
    ) -> R<Vec<Action>> {
        let (x, gamma, dy) = (ins[0], ins[1], ins[2]);
        let dims = self.buf(x).dims.clone();
        let ax = norm_axis(axis, dims.len())?;
        let cols: u64 = dims[ax..].iter().product();
        let rows: u64 = dims[..ax].iter().product();
        let t = float_word(self.buf(x).ty.dtype)?;
        if numel(self.buf(gamma)) != cols {
            return Err("scale must hold the normalised elements on CUDA (no broadcasting)".into());
        }
        if rows * cols == 0 {
            return Ok(vec![]);
        }
        let stats = self.alloc(rows * 8)?;
        let mut a = KernelArgs::new();
        a.ptr(self.ptr(x))
            .ptr(self.ptr(gamma))
            .ptr(self.ptr(dy))
            .ptr(self.ptr(outs[0]))
            .ptr(stats)
            .u64(rows)
            .u64(cols)
            .f32(eps);
        let dx = self.launch_rows(
            kernels::LAYERNORM,
            &format!("fp8c_layernorm_bwd_dx_{t}"),
            rows,
            a,
        )?;
        let mut b = KernelArgs::new();
        b.ptr(self.ptr(x))
            .ptr(self.ptr(dy))
            .ptr(stats)
            .ptr(outs.get(1).map_or(0, |&o| self.ptr(o)))
            .ptr(outs.get(2).map_or(0, |&o| self.ptr(o)))
            .u64(rows)
            .u64(cols);
        let params = self.launch_1d(
            kernels::LAYERNORM,
            &format!("fp8c_layernorm_bwd_params_{t}"),
            cols,
            1,
            b,
        )?;
        Ok(vec![dx, params])
    }

    fn softmax(&self, x: BufId, y: BufId, axis: i64, log: bool) -> R<Vec<Action>> {
        let dims = self.buf(x).dims.clone();
        let ax = norm_axis(axis, dims.len())?;
        let (outer, d, inner) = split3(&dims, ax, ax + 1);
        let t = float_word(self.buf(x).ty.dtype)?;
        if outer * d * inner == 0 {
            return Ok(vec![]);
        }
        let mut a = KernelArgs::new();
        a.ptr(self.ptr(x))
            .ptr(self.ptr(y))
            .u64(outer)
            .u64(d)
            .u64(inner)
            .i32(i32::from(log));
        let name = format!("fp8c_softmax_{t}");
        Ok(vec![if inner == 1 {
            self.launch_rows(kernels::SOFTMAX, &name, outer, a)?
        } else {
            self.launch_1d(kernels::SOFTMAX, &name, outer * inner, 1, a)?
        }])
    }
}
