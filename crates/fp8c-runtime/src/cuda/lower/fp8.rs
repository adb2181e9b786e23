//! The FP8 family on CUDA: quantize, dequantize, amax and the delayed-scaling updates
//! (`quantize.cu`, `scale_update.cu`), ONNX's QuantizeLinear / DequantizeLinear (f32 data
//! and scales; per tensor, per axis or blocked; integer and FP8 quantized types), and the
//! per-tile block_quantize / block_dequantize (`block.rs`).

use super::{
    Action, BLOCK, Lowerer, R, float_word, fp8_word, not_supported, numel, sat_word, scale_params,
    word,
};
use crate::cuda::device::KernelArgs;
use crate::cuda::kernels::{self, is_kernel_float};
use crate::program::{BufId, Step};
use fp8c_ir::{DType, Fp8Op, Support};

/// Why `cast_e8m0` does not run on CUDA.
const CAST_E8M0: &str = "cast_e8m0 (Cast to FLOAT8E8M0 with round_mode down/nearest) has no CUDA \
     kernel yet: MX scale codes are made on the CPU reference";

/// Whether CUDA runs `op` (see [`super::support`]).
pub(crate) fn support(op: Fp8Op<'_>) -> Support {
    match op {
        Fp8Op::QuantizeLinear { .. } | Fp8Op::DequantizeLinear { .. } => Support::Yes,
        Fp8Op::CastE8m0 { .. } => Support::No(CAST_E8M0),
        Fp8Op::BlockQuantize { .. } | Fp8Op::BlockDequantize { .. } => Support::Yes,
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
            Fp8Op::QuantizeLinear {
                axis,
                saturate,
                to,
                block_size,
            } => self.qdq_linear(ins, outs[0], *axis, *block_size, Some((*to, *saturate))),
            Fp8Op::DequantizeLinear { axis, block_size } => {
                self.qdq_linear(ins, outs[0], *axis, *block_size, None)
            }
            Fp8Op::CastE8m0 { .. } => Err(not_supported(&step.op, CAST_E8M0)),
            Fp8Op::BlockQuantize {
                to,
                saturate,
                rows,
                cols,
                scaling,
                epsilon,
            } => self.block_quantize(
                ins[0],
                outs[0],
                outs[1],
                (*to, *saturate),
                (*rows, *cols),
                *scaling,
                *epsilon,
            ),
            Fp8Op::BlockDequantize { rows, cols, .. } => {
                self.block_dequantize(ins[0], ins[1], outs[0], (*rows, *cols))
            }
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

    /// ONNX QuantizeLinear (`quantize`: the quantized type and saturation) or
    /// DequantizeLinear (`None`) of `ins` = x, scale[, zero point] into `y`.
    fn qdq_linear(
        &self,
        ins: &[BufId],
        y: BufId,
        axis: i64,
        block_size: i64,
        quantize: Option<(DType, bool)>,
    ) -> R<Vec<Action>> {
        let (x, scale) = (ins[0], ins[1]);
        let zp = ins.get(2).copied();
        let qword = |d: DType| -> R<&'static str> {
            Ok(match d {
                DType::I8 => "i8",
                DType::U8 => "u8",
                DType::I16 => "i16",
                DType::U16 => "u16",
                DType::F8E4M3 => "e4m3",
                DType::F8E5M2 => "e5m2",
                DType::I32 if quantize.is_none() => "i32",
                other => return Err(format!("{other} Q/DQ is not supported on CUDA yet")),
            })
        };
        if self.buf(scale).ty.dtype != DType::F32 {
            return Err(format!(
                "Q/DQ with {} scales is not supported on CUDA yet (f32 is)",
                self.buf(scale).ty.dtype
            ));
        }
        let name = match quantize {
            Some((to, _)) => {
                if self.buf(x).ty.dtype != DType::F32 {
                    return Err(format!(
                        "QuantizeLinear of {} is not supported on CUDA yet (f32 is)",
                        self.buf(x).ty.dtype
                    ));
                }
                format!("fp8c_quantize_linear_{}", qword(to)?)
            }
            None => format!("fp8c_dequantize_linear_{}", qword(self.buf(x).ty.dtype)?),
        };
        let dims = self.buf(x).dims.clone();
        let (axis_len, inner, block) = if numel(self.buf(scale)) == 1 && block_size == 0 {
            (1, 1, 0)
        } else {
            let ax = super::norm_axis(axis, dims.len())?;
            let inner: u64 = dims[ax + 1..].iter().product();
            (dims[ax], inner, u64::try_from(block_size).unwrap_or(0))
        };
        let n = numel(self.buf(x));
        if n == 0 || axis_len == 0 || inner == 0 {
            return Ok(vec![]);
        }
        let mut a = KernelArgs::new();
        a.ptr(self.ptr(x))
            .ptr(self.ptr(scale))
            .ptr(zp.map_or(0, |z| self.ptr(z)))
            .ptr(self.ptr(y))
            .u64(n)
            .u64(axis_len)
            .u64(inner)
            .u64(block);
        if let Some((_, saturate)) = quantize {
            a.i32(i32::from(saturate));
        }
        Ok(vec![self.launch_1d(kernels::QUANTIZE, &name, n, 1, a)?])
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
