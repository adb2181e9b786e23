//! The fused family on CUDA: the ops the fusion pass makes, each one kernel (or one GEMM with
//! its epilogue) doing what the unfused ops it replaces do.

use super::elementwise::Quant;
use super::normalize::LnQuant;
use super::{Action, BLOCK, Lowerer, R, float_word, fp8_word, numel, sat_word, scale_params};
use crate::cuda::codegen;
use crate::cuda::device::KernelArgs;
use crate::cuda::kernels;
use crate::program::{BufId, Step};
use fp8c_ir::{DType, FusedOp, Support};

/// `scale_update.cu`'s ScaleUpdateDesc.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct ScaleUpdateDesc {
    history: u64,
    amax: u64,
    prev_scale: u64,
    next_history: u64,
    scale: u64,
    scale_inv: u64,
    len: u64,
}

/// Whether CUDA runs `op` (see [`super::support`]).
pub(crate) fn support(op: FusedOp<'_>) -> Support {
    match op {
        FusedOp::QuantizeAmax { .. }
        | FusedOp::CastTranspose { .. }
        | FusedOp::LayerNormQuantize { .. }
        | FusedOp::ElementwiseQuantize { .. }
        | FusedOp::ElementwiseBlockQuantize { .. }
        | FusedOp::LayerNormBlockQuantize { .. }
        | FusedOp::ScaledMatMulEpilogue { .. }
        | FusedOp::BatchedScaleUpdate { .. } => Support::Yes,
        FusedOp::__Lifetime(never, _) => match never {},
    }
}

impl Lowerer<'_> {
    pub(super) fn lower_fused(&self, f: FusedOp<'_>, step: &Step) -> R<Vec<Action>> {
        let (ins, outs) = (&step.inputs, &step.outputs);
        match f {
            FusedOp::ElementwiseQuantize { expr, to, saturate } => {
                let n = expr.num_inputs().max(1);
                if ins.len() != n + 1 || outs.len() != 3 {
                    return Err(format!("expects {} inputs and 3 outputs", n + 1));
                }
                let y = self.used(outs[0]).then_some(outs[0]);
                self.elementwise(
                    codegen::program_of(expr),
                    &ins[..n],
                    y,
                    Some(Quant {
                        to: *to,
                        saturate: *saturate,
                        scale: ins[n],
                        q: outs[1],
                        amax: outs[2],
                        ref_out: outs[0],
                    }),
                    0,
                )
            }
            FusedOp::ElementwiseBlockQuantize {
                expr,
                to,
                saturate,
                cols,
                scaling,
                epsilon,
            } => {
                let n = expr.num_inputs().max(1);
                if ins.len() != n || outs.len() != 3 {
                    return Err(format!("expects {n} inputs and 3 outputs"));
                }
                self.elementwise_block_quantize(
                    codegen::program_of(expr),
                    ins,
                    (outs[0], outs[1], outs[2]),
                    (*to, *saturate),
                    (*cols, *scaling, *epsilon),
                )
            }
            FusedOp::QuantizeAmax { to, saturate } => {
                self.quantize(ins[0], Some(ins[1]), outs[0], Some(outs[1]), *to, *saturate)
            }
            FusedOp::BatchedScaleUpdate {
                fmt,
                margin,
                source,
                epsilon,
                power_2,
            } => {
                let p = scale_params(*fmt, *margin, *source, *epsilon, *power_2)?;
                if !ins.len().is_multiple_of(3) || outs.len() != ins.len() {
                    return Err(
                        "expects (history, amax, scale) per tensor and as many outputs".into(),
                    );
                }
                let descs: Vec<ScaleUpdateDesc> = ins
                    .chunks(3)
                    .zip(outs.chunks(3))
                    .map(|(i, o)| ScaleUpdateDesc {
                        history: self.ptr(i[0]),
                        amax: self.ptr(i[1]),
                        prev_scale: self.ptr(i[2]),
                        next_history: self.ptr(o[0]),
                        scale: self.ptr(o[1]),
                        scale_inv: self.ptr(o[2]),
                        len: numel(self.buf(i[0])),
                    })
                    .collect();
                let bytes = std::mem::size_of_val(descs.as_slice());
                let table = self.alloc(bytes as u64)?;
                // SAFETY: ScaleUpdateDesc is plain old data; viewing it as bytes is sound.
                let raw = unsafe { std::slice::from_raw_parts(descs.as_ptr().cast::<u8>(), bytes) };
                self.dev.upload(table, raw).map_err(|e| e.to_string())?;
                let count = descs.len() as u32;
                let mut a = KernelArgs::new();
                a.ptr(table).u32(count).push(p);
                Ok(vec![self.launch(
                    kernels::SCALE_UPDATE,
                    "fp8c_batched_scale_update",
                    count.div_ceil(4),
                    (128, 1, 1),
                    a,
                )?])
            }
            FusedOp::CastTranspose { perm, to, saturate } => {
                self.cast_transpose(ins, outs, perm, *to, *saturate)
            }
            FusedOp::ScaledMatMulEpilogue {
                out,
                fast_accum,
                expr,
                to,
                saturate,
            } => self.scaled_matmul(ins, outs, (*out, *fast_accum), expr, *to, *saturate),
            FusedOp::LayerNormBlockQuantize {
                axis,
                epsilon,
                to,
                saturate,
                cols,
                scaling,
                amax_epsilon,
            } => {
                if outs.len() != 3 || !(2..=3).contains(&ins.len()) {
                    return Err("expects x, gamma, an optional beta and 3 outputs".into());
                }
                self.layer_norm_tiles(
                    (ins[0], ins[1], ins.get(2).copied()),
                    (outs[0], outs[1], outs[2]),
                    (*axis, *epsilon),
                    (*to, *saturate, *cols, *scaling, *amax_epsilon),
                )
            }
            FusedOp::LayerNormQuantize {
                axis,
                epsilon,
                to,
                saturate,
            } => {
                if outs.len() != 3 {
                    return Err("expects 3 outputs".into());
                }
                let beta = ins.get(3).copied();
                let q = LnQuant {
                    scale: ins[1],
                    q: outs[1],
                    amax: outs[2],
                    to: *to,
                    saturate: *saturate,
                };
                self.layer_norm(ins[0], ins[2], beta, outs[0], Some(q), *axis, *epsilon)
            }
            FusedOp::__Lifetime(never, _) => match never {},
        }
    }

    fn cast_transpose(
        &self,
        ins: &[BufId],
        outs: &[BufId],
        perm: &[i64],
        to: DType,
        saturate: bool,
    ) -> R<Vec<Action>> {
        let (x, scale) = (ins[0], ins[1]);
        let (q, qt, amax) = (outs[0], outs[1], outs[2]);
        let dims = self.buf(x).dims.clone();
        let r = dims.len();
        let swap_last: Vec<i64> = (0..r as i64)
            .map(|i| {
                if r >= 2 && i == r as i64 - 2 {
                    r as i64 - 1
                } else if r >= 2 && i == r as i64 - 1 {
                    r as i64 - 2
                } else {
                    i
                }
            })
            .collect();
        if r < 2 || perm != swap_last.as_slice() {
            return Err(format!(
                "cast_transpose with perm {perm:?} is not supported on CUDA (only swapping the last two dims)"
            ));
        }
        let from = float_word(self.buf(x).ty.dtype)?;
        let (rows, cols) = (dims[r - 2], dims[r - 1]);
        let batch: u64 = dims[..r - 2].iter().product();
        let mut actions = vec![Action::Memset8 {
            ptr: self.ptr(amax),
            value: 0,
            bytes: 4,
        }];
        if batch * rows * cols == 0 {
            return Ok(actions);
        }
        let tiles = batch * rows.div_ceil(64) * cols.div_ceil(64);
        let grid = tiles.min(u64::from(self.dev.info.sm_count) * 8) as u32;
        let mut a = KernelArgs::new();
        a.ptr(self.ptr(x))
            .ptr(self.ptr(scale))
            .ptr(self.ptr(q))
            .ptr(self.ptr(qt))
            .ptr(self.ptr(amax))
            .u64(batch)
            .u64(rows)
            .u64(cols);
        let name = format!(
            "fp8c_cast_transpose_{from}_{}_{}",
            fp8_word(to)?,
            sat_word(saturate)
        );
        actions.push(self.launch(kernels::CAST_TRANSPOSE, &name, grid, (BLOCK, 1, 1), a)?);
        Ok(actions)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scale_update_desc_matches_its_c_layout() {
        assert_eq!(std::mem::size_of::<ScaleUpdateDesc>(), 56);
    }
}
