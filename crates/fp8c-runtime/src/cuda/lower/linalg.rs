//! The linalg family on CUDA: every product is a cuBLASLt GEMM ([`crate::cuda::gemm`]).
//! `matmul` and `gemm` on f32 / bf16 / f16; `scaled_matmul` (and the fused
//! `scaled_matmul_epilogue`) as an FP8 GEMM in TN layout with the epilogues cuBLASLt applies
//! itself (bias, tanh-GELU), or a generated elementwise epilogue over the raw product;
//! `block_scaled_matmul` in `block.rs`.

use super::{Action, Lowerer, R, contiguous_strides, float_word, fp8_word, numel};
use crate::cuda::codegen::{self, Access, EwParams, EwSpec, broadcast_strides};
use crate::cuda::device::KernelArgs;
use crate::cuda::gemm::{Epilogue, GemmSpec};
use crate::cuda::kernels;
use crate::program::{BufId, Step};
use fp8c_ir::{DType, EwArg, EwExpr, EwInst, GeluApprox, LinalgOp, Op, Support};

/// The placeholder for "the GEMM's product" in an epilogue's input list.
const PRODUCT: BufId = BufId(u32::MAX);

/// Whether CUDA runs `op` (see [`super::support`]).
pub(crate) fn support(op: LinalgOp<'_>) -> Support {
    match op {
        LinalgOp::MatMul
        | LinalgOp::Gemm { .. }
        | LinalgOp::ScaledMatMul { .. }
        | LinalgOp::BlockScaledMatMul { .. } => Support::Yes,
        LinalgOp::__Lifetime(never, _) => match never {},
    }
}

impl Lowerer<'_> {
    pub(super) fn lower_linalg(&self, l: LinalgOp<'_>, step: &Step) -> R<Vec<Action>> {
        let (ins, outs) = (&step.inputs, &step.outputs);
        match l {
            LinalgOp::MatMul => {
                self.matmul(ins[0], ins[1], outs.first().copied().ok_or("no output")?)
            }
            LinalgOp::Gemm {
                alpha,
                beta,
                trans_a,
                trans_b,
            } => self.gemm_op(ins, outs[0], *alpha, *beta, *trans_a, *trans_b),
            LinalgOp::ScaledMatMul { out, fast_accum } => self.scaled_matmul(
                ins,
                outs,
                (*out, *fast_accum),
                &EwExpr::default(),
                None,
                false,
            ),
            LinalgOp::BlockScaledMatMul {
                out,
                k_block,
                a_rows,
                b_cols,
            } => self.block_scaled_matmul(ins, outs[0], *out, (*k_block, *a_rows, *b_cols)),
            LinalgOp::__Lifetime(never, _) => match never {},
        }
    }

    pub(super) fn gemm(&self, s: &GemmSpec) -> R<Action> {
        Ok(Action::Gemm(Box::new(self.lt()?.plan(s)?)))
    }

    /// numpy matmul of f32 / bf16 / f16 operands: batch dims folded into M when B is one
    /// matrix, strided batches when both carry the same batch, A broadcast with stride 0.
    fn matmul(&self, a: BufId, b: BufId, y: BufId) -> R<Vec<Action>> {
        let t = self.buf(a).ty.dtype;
        float_word(t)?;
        if self.buf(b).ty.dtype != t {
            return Err("matmul operands must share a dtype".into());
        }
        let mut ad = self.buf(a).dims.clone();
        let mut bd = self.buf(b).dims.clone();
        if ad.len() == 1 {
            ad.insert(0, 1);
        }
        if bd.len() == 1 {
            bd.push(1);
        }
        let (m, k) = (ad[ad.len() - 2], ad[ad.len() - 1]);
        let n = bd[bd.len() - 1];
        if bd[bd.len() - 2] != k {
            return Err("matmul inner dims differ".into());
        }
        let a_batch: u64 = ad[..ad.len() - 2].iter().product();
        let b_batch: u64 = bd[..bd.len() - 2].iter().product();
        let out_n = numel(self.buf(y));
        if out_n == 0 {
            return Ok(vec![]);
        }
        if k == 0 {
            return Ok(vec![Action::Memset8 {
                ptr: self.ptr(y),
                value: 0,
                bytes: self.buf(y).bytes,
            }]);
        }
        let mut s = GemmSpec::plain(
            m,
            n,
            k,
            self.ptr(a),
            self.ptr(b),
            self.ptr(y),
            t,
            self.buf(y).ty.dtype,
        );
        if b_batch == 1 {
            s.m = m * a_batch;
        } else {
            let lead = |d: &[u64]| d[..d.len() - 2].to_vec();
            let (la, lb) = (lead(&ad), lead(&bd));
            let pad = |v: &[u64], r: usize| -> Vec<u64> {
                std::iter::repeat_n(1, r.saturating_sub(v.len()))
                    .chain(v.iter().copied())
                    .collect()
            };
            let r = la.len().max(lb.len());
            let same = pad(&la, r) == pad(&lb, r);
            if !(same || a_batch == 1) {
                // Batch dims that broadcast against each other: both operands expanded to the
                // output's batch dims in scratch, then one strided batched GEMM.
                let out_batch: Vec<u64> =
                    (0..r).map(|i| pad(&la, r)[i].max(pad(&lb, r)[i])).collect();
                let batch: u64 = out_batch.iter().product();
                let es = t.size();
                let mut actions = Vec::new();
                let mut expanded = |x: BufId, xd: &[u64], rows: u64, cols: u64| -> R<u64> {
                    let mut to = out_batch.clone();
                    to.extend([rows, cols]);
                    let src = broadcast_strides(xd, &to);
                    let dst = self.alloc(batch * rows * cols * es as u64)?;
                    actions.extend(self.strided_copy_ptr(
                        (self.ptr(x), dst),
                        es,
                        &to,
                        (&src, 0),
                        (&contiguous_strides(&to), 0),
                    )?);
                    Ok(dst)
                };
                s.a = expanded(a, &ad, m, k)?;
                s.b = expanded(b, &bd, k, n)?;
                s.batch = batch;
                s.stride_a = m * k;
                s.stride_b = k * n;
                s.stride_d = m * n;
                actions.push(self.gemm(&s)?);
                return Ok(actions);
            }
            s.batch = b_batch;
            s.stride_a = if a_batch == 1 { 0 } else { m * k };
            s.stride_b = k * n;
            s.stride_d = m * n;
        }
        Ok(vec![self.gemm(&s)?])
    }

    fn gemm_op(
        &self,
        ins: &[BufId],
        y: BufId,
        alpha: f32,
        beta: f32,
        trans_a: bool,
        trans_b: bool,
    ) -> R<Vec<Action>> {
        let (a, b) = (ins[0], ins[1]);
        let t = self.buf(a).ty.dtype;
        float_word(t)?;
        let yd = self.buf(y).dims.clone();
        let ad = self.buf(a).dims.clone();
        if ad.len() != 2 || yd.len() != 2 {
            return Err("gemm operands must be 2-D".into());
        }
        let (m, n) = (yd[0], yd[1]);
        let k = if trans_a { ad[0] } else { ad[1] };
        let mut actions = Vec::new();
        let mut s = GemmSpec::plain(
            m,
            n,
            k,
            self.ptr(a),
            self.ptr(b),
            self.ptr(y),
            t,
            self.buf(y).ty.dtype,
        );
        s.trans_a = trans_a;
        s.trans_b = trans_b;
        s.alpha = alpha;
        if let Some(&c) = ins.get(2)
            && beta != 0.0
        {
            if self.buf(c).ty.dtype != self.buf(y).ty.dtype {
                return Err("gemm's C must have the output's dtype on CUDA".into());
            }
            // D := broadcast(C), then D = α·A·B + β·D in place.
            let cd = self.buf(c).dims.clone();
            let strides = broadcast_strides(&cd, &yd);
            actions.extend(self.strided_copy(
                c,
                y,
                &yd,
                &strides,
                0,
                &contiguous_strides(&yd),
                0,
            )?);
            s.beta = beta;
        }
        if m * n == 0 {
            return Ok(actions);
        }
        if k == 0 {
            if s.beta == 0.0 {
                actions.push(Action::Memset8 {
                    ptr: self.ptr(y),
                    value: 0,
                    bytes: self.buf(y).bytes,
                });
            }
            return Ok(actions);
        }
        actions.push(self.gemm(&s)?);
        Ok(actions)
    }

    /// scaled_matmul and scaled_matmul_epilogue (module docs of gemm.rs): the FP8 GEMM on
    /// cuBLASLt in TN layout (B transposed into a scratch copy), or, where cuBLASLt's FP8
    /// kernels cannot run (no FP8 tensor cores, dims not multiples of 16), the exact fallback
    /// of decoding both operands to bf16 and a bf16 GEMM with α = sa·sb.
    pub(super) fn scaled_matmul(
        &self,
        ins: &[BufId],
        outs: &[BufId],
        (out, fast_accum): (DType, bool),
        expr: &EwExpr,
        to: Option<DType>,
        saturate: bool,
    ) -> R<Vec<Action>> {
        let (qa, qb, sa, sb) = (ins[0], ins[1], ins[2], ins[3]);
        let extras = expr.num_inputs().saturating_sub(1);
        let d = outs[0];
        let (ta, tb) = (self.buf(qa).ty.dtype, self.buf(qb).ty.dtype);
        if !(ta.is_fp8() && tb.is_fp8()) {
            return Err("qa and qb must be FP8".into());
        }
        float_word(out)?;
        let ad = self.buf(qa).dims.clone();
        let bd = self.buf(qb).dims.clone();
        if ad.len() < 2 || bd.len() != 2 {
            return Err("scaled_matmul on CUDA takes qa [.., m, k] and a 2-D qb [k, n]".into());
        }
        let k = ad[ad.len() - 1];
        let m: u64 = ad[..ad.len() - 1].iter().product();
        let n = bd[1];
        if bd[0] != k {
            return Err("inner dims differ".into());
        }
        let mut actions = Vec::new();
        if m * n == 0 {
            return Ok(actions);
        }
        let quant = to.map(|to| (to, ins[4 + extras], outs[1], outs[2]));
        let d_needed = self.used(d) || quant.is_none();
        // Epilogues cuBLASLt applies itself: bias [n] (of the output's type, bf16 / f16 only),
        // tanh-GELU, both.
        let bias_of = |inst: &EwInst| -> Option<BufId> {
            if !matches!(inst.op, Op::Add) {
                return None;
            }
            let other = match inst.args.as_slice() {
                [EwArg::Input(0), EwArg::Input(1)] | [EwArg::Input(1), EwArg::Input(0)] => ins[4],
                _ => return None,
            };
            let ok = numel(self.buf(other)) == n
                && self.buf(other).ty.dtype == out
                && matches!(out, DType::BF16 | DType::F16);
            ok.then_some(other)
        };
        let is_gelu = |inst: &EwInst, arg: EwArg| {
            matches!(
                inst.op,
                Op::Gelu {
                    approximate: GeluApprox::Tanh
                }
            ) && inst.args == [arg]
        };
        let insts = expr.insts();
        let fused = match insts {
            [] => Some((Epilogue::None, None)),
            [i0] if bias_of(i0).is_some() => Some((Epilogue::Bias, bias_of(i0))),
            [i0] if is_gelu(i0, EwArg::Input(0)) => Some((Epilogue::Gelu, None)),
            [i0, i1] if bias_of(i0).is_some() && is_gelu(i1, EwArg::Temp(0)) => {
                Some((Epilogue::GeluBias, bias_of(i0)))
            }
            _ => None,
        };
        // cuBLASLt FP8 runs TN: both FP8 operands K-major (leading dim k) and D row-major
        // (leading dim n), so k and n keep rows 16-byte aligned; m is never a leading dim
        // (the policy's rule, `fp8c_passes::precision::misaligned`, cites the sources).
        let fp8_ok = self.dev.info.has_fp8()
            && k.is_multiple_of(16)
            && n.is_multiple_of(16)
            && !(ta == DType::F8E5M2 && tb == DType::F8E5M2);
        // Where the raw product goes when a generic epilogue follows.
        let product = if fused.is_some() {
            None
        } else {
            Some(self.alloc(m * n * out.size() as u64)?)
        };
        let mut spec = GemmSpec::plain(m, n, k, self.ptr(qa), self.ptr(qb), 0, ta, out);
        spec.b_type = tb;
        if let Some((epi, bias)) = fused {
            spec.epilogue = epi;
            spec.bias = bias.map(|b| (self.ptr(b), out));
        }
        // An FP8 result nobody needs in high precision comes straight out of the GEMM.
        let mut direct_fp8 = fused.is_some() && !d_needed && fp8_ok;
        spec.d = match (product, direct_fp8, &quant) {
            (Some(p), _, _) => p,
            (None, true, Some((_, _, q, _))) => self.ptr(*q),
            _ => self.ptr(d),
        };
        if fp8_ok {
            // TN: B as [n, k].
            let bt = self.alloc(n * k)?;
            let mut a = KernelArgs::new();
            a.ptr(self.ptr(qb)).ptr(bt).u64(1).u64(k).u64(n);
            let tiles = k.div_ceil(32) * n.div_ceil(32);
            let grid = tiles.min(u64::from(self.dev.info.sm_count) * 16) as u32;
            actions.push(self.launch(
                kernels::MOVEMENT,
                "fp8c_transpose2d_1",
                grid,
                (32, 8, 1),
                a,
            )?);
            spec.b = bt;
            spec.trans_b = true;
            spec.a_scale = Some(self.ptr(sa));
            spec.b_scale = Some(self.ptr(sb));
            // The IR's choice (the recipe's: TE's forward GEMM fast, dgrad and wgrad with the
            // split accumulator).
            spec.fast_accum = fast_accum;
            if direct_fp8 && let Some((to, dscale, _, amax)) = &quant {
                spec.d_type = *to;
                spec.d_scale = Some(self.ptr(*dscale));
                spec.amax_d = Some(self.ptr(*amax));
            }
        } else {
            // Exact fallback: FP8 codes decode exactly to bf16; α = sa·sb rounded to f32 (as
            // the CPU reference) comes from device memory.
            let a16 = self.alloc(m * k * 2)?;
            let b16 = self.alloc(k * n * 2)?;
            for (src, dst, count, t) in [(qa, a16, m * k, ta), (qb, b16, k * n, tb)] {
                let mut a = KernelArgs::new();
                a.ptr(self.ptr(src)).ptr(0).ptr(dst).u64(count);
                actions.push(self.launch_1d(
                    kernels::QUANTIZE,
                    &format!("fp8c_dequantize_{}_bf16", fp8_word(t)?),
                    count,
                    16,
                    a,
                )?);
            }
            let alpha = self.alloc(4)?;
            actions.extend(self.scalar_product(sa, sb, alpha)?);
            spec.a = a16;
            spec.b = b16;
            spec.a_type = DType::BF16;
            spec.b_type = DType::BF16;
            spec.alpha_ptr = Some(alpha);
        }
        let gemm = match self.gemm(&spec) {
            Ok(g) => g,
            // A fused FP8 output cuBLASLt refuses (its type table, alignment): the unfused
            // route, a high-precision D then the quantize kernel, computes the same bytes.
            Err(why) if direct_fp8 => {
                tracing::info!(
                    "FP8 GEMM {m}x{n}x{k}: cuBLASLt refuses the fused FP8 output ({why}); running it unfused"
                );
                direct_fp8 = false;
                spec.d = self.ptr(d);
                spec.d_type = out;
                spec.d_scale = None;
                spec.amax_d = None;
                self.gemm(&spec)?
            }
            Err(e) => return Err(e),
        };
        actions.push(gemm);
        match (product, &quant) {
            (Some(p), q) => {
                // Generic epilogue: d = expr(product, extras..) (+ q, amax) in one kernel. The
                // product buffer is read as input 0.
                let mut inputs = vec![PRODUCT];
                inputs.extend_from_slice(&ins[4..4 + extras]);
                actions.extend(self.elementwise_with_product(
                    expr,
                    &inputs,
                    p,
                    d,
                    d_needed,
                    q.map(|(to, s, qq, am)| (to, s, qq, am)),
                    saturate,
                )?);
            }
            (None, Some((to, dscale, q, amax))) if !direct_fp8 => {
                actions.extend(self.quantize(d, Some(*dscale), *q, Some(*amax), *to, saturate)?);
            }
            _ => {}
        }
        Ok(actions)
    }

    /// The epilogue program over the GEMM's raw product (at device address `product`, of d's
    /// type and shape) and the extra inputs.
    #[allow(clippy::too_many_arguments)]
    fn elementwise_with_product(
        &self,
        expr: &EwExpr,
        inputs: &[BufId],
        product: u64,
        d: BufId,
        d_needed: bool,
        quant: Option<(DType, BufId, BufId, BufId)>,
        saturate: bool,
    ) -> R<Vec<Action>> {
        let out = self.buf(d);
        let out_dims = out.dims.clone();
        let n = numel(out);
        let mut dtypes = vec![out.ty.dtype];
        let mut access = vec![Access::Full];
        for &b in &inputs[1..] {
            dtypes.push(self.buf(b).ty.dtype);
            access.push(Access::for_shapes(&self.buf(b).dims, &out_dims));
        }
        let spec = EwSpec {
            program: codegen::program_of(expr),
            inputs: dtypes,
            access: access.clone(),
            out: out.ty.dtype,
            quant: quant.map(|(to, ..)| (to, saturate)),
        };
        let header = codegen::header(&spec)?;
        let mut p = EwParams::new(&access, &out_dims)?;
        p.inputs[0] = product;
        for (k, &b) in inputs.iter().enumerate().skip(1) {
            p.inputs[k] = self.ptr(b);
        }
        p.y = if d_needed { self.ptr(d) } else { 0 };
        let mut actions = Vec::new();
        if let Some((_, scale, q, amax)) = quant {
            p.scale = self.ptr(scale);
            p.q = self.ptr(q);
            p.amax = self.ptr(amax);
            actions.push(Action::Memset8 {
                ptr: p.amax,
                value: 0,
                bytes: 4,
            });
        }
        actions.extend(self.ew_launch(&header, p, n)?);
        Ok(actions)
    }
}
