//! The FP8 family on CUDA: quantize, dequantize, amax and the delayed-scaling updates
//! (`quantize.cu`, `scale_update.cu`). ONNX's QuantizeLinear / DequantizeLinear have no kernel.

use super::{
    Action, BLOCK, Lowerer, R, float_word, fp8_word, not_supported, numel, sat_word, scale_params,
    word,
};
use crate::cuda::device::KernelArgs;
use crate::cuda::kernels::{self, is_kernel_float};
use crate::program::{BufId, Step};
use fp8c_ir::{DType, Fp8Op, Support};

/// Why ONNX's Q/DQ ops do not run on CUDA.
const ONNX_QDQ: &str = "ONNX QuantizeLinear / DequantizeLinear have no CUDA kernel (fp8c's quantize and dequantize do; a Q/DQ of constants is folded by the CPU reference)";

/// Why `cast_e8m0` does not run on CUDA.
const CAST_E8M0: &str = "cast_e8m0 (Cast to FLOAT8E8M0 with round_mode down/nearest) has no CUDA \
     kernel yet: MX scale codes are made on the CPU reference";

/// Whether CUDA runs `op` (see [`super::support`]).
pub(crate) fn support(op: Fp8Op<'_>) -> Support {
    match op {
        Fp8Op::QuantizeLinear { .. } | Fp8Op::DequantizeLinear { .. } => Support::No(ONNX_QDQ),
        Fp8Op::CastE8m0 { .. } => Support::No(CAST_E8M0),
        Fp8Op::Amax
        | Fp8Op::ComputeScale { .. }
        | Fp8Op::AmaxHistoryUpdate
        | Fp8Op::Quantize { .. }
        | Fp8Op::Dequantize { .. } => Support::Yes,
        Fp8Op::__Lifetime(never, _) => match never {},
    }
}

impl Lowerer<'_> {
    pub(super) fn lower_fp8(&self, f: Fp8Op<'_>, step: &Step) -> R<Vec<Action>> {
        let (ins, outs) = (&step.inputs, &step.outputs);
        match f {
            Fp8Op::QuantizeLinear { .. } | Fp8Op::DequantizeLinear { .. } => {
                Err(not_supported(&step.op, ONNX_QDQ))
            }
            Fp8Op::CastE8m0 { .. } => Err(not_supported(&step.op, CAST_E8M0)),
            Fp8Op::Quantize { to, saturate } => {
                self.quantize(ins[0], Some(ins[1]), outs[0], None, *to, *saturate)
            }
            Fp8Op::Dequantize { .. } => self.dequantize(ins[0], Some(ins[1]), outs[0]),
            Fp8Op::Amax => self.amax(ins[0], outs[0]),
            Fp8Op::ComputeScale {
                fmt,
                margin,
                source,
                epsilon,
                power_2,
            } => {
                let p = scale_params(*fmt, *margin, *source, *epsilon, *power_2)?;
                let mut a = KernelArgs::new();
                a.ptr(self.ptr(ins[0]))
                    .ptr(self.ptr(ins[1]))
                    .ptr(self.ptr(outs[0]))
                    .ptr(self.ptr(outs[1]))
                    .u64(numel(self.buf(ins[0])))
                    .push(p);
                Ok(vec![self.launch(
                    kernels::SCALE_UPDATE,
                    "fp8c_compute_scale",
                    1,
                    (32, 1, 1),
                    a,
                )?])
            }
            Fp8Op::AmaxHistoryUpdate => {
                let mut a = KernelArgs::new();
                a.ptr(self.ptr(ins[0]))
                    .ptr(self.ptr(ins[1]))
                    .ptr(self.ptr(outs[0]))
                    .ptr(self.ptr(outs[1]))
                    .u64(numel(self.buf(ins[0])));
                Ok(vec![self.launch(
                    kernels::SCALE_UPDATE,
                    "fp8c_amax_history_update",
                    1,
                    (BLOCK, 1, 1),
                    a,
                )?])
            }
            Fp8Op::__Lifetime(never, _) => match never {},
        }
    }

    /// q = quantize(x, scale or 1), with amax(x) when `amax` is given.
    pub(super) fn quantize(
        &self,
        x: BufId,
        scale: Option<BufId>,
        q: BufId,
        amax: Option<BufId>,
        to: DType,
        saturate: bool,
    ) -> R<Vec<Action>> {
        let from = float_word(self.buf(x).ty.dtype)?;
        let name = format!(
            "fp8c_quantize_{from}_{}_{}",
            fp8_word(to)?,
            sat_word(saturate)
        );
        let n = numel(self.buf(x));
        let mut actions = Vec::new();
        if let Some(m) = amax {
            actions.push(Action::Memset8 {
                ptr: self.ptr(m),
                value: 0,
                bytes: 4,
            });
        }
        if n == 0 {
            return Ok(actions);
        }
        let mut a = KernelArgs::new();
        a.ptr(self.ptr(x))
            .ptr(scale.map_or(0, |s| self.ptr(s)))
            .ptr(self.ptr(q))
            .ptr(amax.map_or(0, |m| self.ptr(m)))
            .u64(n);
        actions.push(self.launch_1d(kernels::QUANTIZE, &name, n, 16, a)?);
        Ok(actions)
    }

    pub(super) fn dequantize(
        &self,
        q: BufId,
        scale_inv: Option<BufId>,
        y: BufId,
    ) -> R<Vec<Action>> {
        let fmt = fp8_word(self.buf(q).ty.dtype)?;
        let to = float_word(self.buf(y).ty.dtype)?;
        let n = numel(self.buf(q));
        if n == 0 {
            return Ok(vec![]);
        }
        let mut a = KernelArgs::new();
        a.ptr(self.ptr(q))
            .ptr(scale_inv.map_or(0, |s| self.ptr(s)))
            .ptr(self.ptr(y))
            .u64(n);
        Ok(vec![self.launch_1d(
            kernels::QUANTIZE,
            &format!("fp8c_dequantize_{fmt}_{to}"),
            n,
            16,
            a,
        )?])
    }

    pub(super) fn amax(&self, x: BufId, m: BufId) -> R<Vec<Action>> {
        let d = self.buf(x).ty.dtype;
        if !(is_kernel_float(d) || d.is_fp8()) {
            return Err(format!("amax of {d} is not supported on CUDA"));
        }
        let n = numel(self.buf(x));
        let mut actions = vec![Action::Memset8 {
            ptr: self.ptr(m),
            value: 0,
            bytes: 4,
        }];
        if n > 0 {
            let mut a = KernelArgs::new();
            a.ptr(self.ptr(x)).ptr(self.ptr(m)).u64(n);
            actions.push(self.launch_1d(
                kernels::QUANTIZE,
                &format!("fp8c_amax_{}", word(d)?),
                n,
                16,
                a,
            )?);
        }
        Ok(actions)
    }
}
