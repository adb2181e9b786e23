//! The elementwise family on CUDA, read from each op's row of `fp8c_ir::elementwise`:
//! `identity` is a copy, `cast` has kernels of its own (`quantize.cu`), every other op is one
//! instruction of a generated elementwise program ([`codegen`]) whose CUDA expression is the
//! row's template (an op whose row has none is refused with the row's reason).

use super::{Action, BLOCK, Lowerer, R, not_supported, numel, word};
use crate::cuda::codegen::{self, Access, EwParams, EwSpec};
use crate::cuda::device::{KernelArgs, KernelRef, Launch};
use crate::cuda::kernels::{self, is_kernel_float};
use crate::program::{BufId, Step};
use fp8c_ir::elementwise::{self, Kind, Own, Types};
use fp8c_ir::{DType, ElementwiseOp, EwInst, Op, Support};

/// How an elementwise op runs on CUDA.
enum Path {
    /// A device-to-device copy.
    Copy,
    /// The conversion kernels of `quantize.cu` (with quantize / dequantize for FP8).
    Cast { to: DType, saturate: bool },
    /// A generated program: the row's CUDA template, or why the op has none.
    Generated(Result<&'static str, &'static str>),
}

/// How each elementwise op runs, from its row (support and lowering share it): a unary row of
/// every type is the identity, `cast` has kernels of its own, every other row runs its CUDA
/// template (or is refused with its reason).
fn path(op: ElementwiseOp<'_>) -> Path {
    let row = elementwise::row(op);
    match row.kind {
        Kind::Unary if row.types == Types::Any => Path::Copy,
        Kind::Own(Own::Cast { to, saturate }) => Path::Cast { to, saturate },
        _ => Path::Generated(row.cuda),
    }
}

/// Whether CUDA runs `op` (see [`super::support`]).
pub(crate) fn support(op: ElementwiseOp<'_>) -> Support {
    match path(op) {
        Path::Copy | Path::Cast { .. } | Path::Generated(Ok(_)) => Support::Yes,
        Path::Generated(Err(why)) => Support::No(why),
    }
}

/// FP8 outputs of an elementwise program.
pub(super) struct Quant {
    pub to: DType,
    pub saturate: bool,
    pub scale: BufId,
    pub q: BufId,
    pub amax: BufId,
    /// The buffer whose shape the outputs have (y's, even when y is not written).
    pub ref_out: BufId,
}

impl Lowerer<'_> {
    pub(super) fn lower_elementwise(
        &mut self,
        e: ElementwiseOp<'_>,
        step: &Step,
        flag: &mut Option<usize>,
    ) -> R<Vec<Action>> {
        let (ins, outs) = (&step.inputs, &step.outputs);
        match path(e) {
            Path::Copy => {
                let (x, y) = (ins[0], outs[0]);
                Ok(vec![Action::Copy {
                    dst: self.ptr(y),
                    src: self.ptr(x),
                    bytes: self.buf(y).bytes,
                }])
            }
            Path::Cast { to, saturate } => self.cast(ins[0], outs[0], to, saturate),
            Path::Generated(Err(why)) => Err(not_supported(&step.op, why)),
            Path::Generated(Ok(_)) => {
                let program = codegen::single_op(&step.op, ins.len());
                // Integer division and remainder report a zero divisor through the step's
                // error flag (the CPU reference fails the run there).
                let int = ins
                    .iter()
                    .any(|&b| self.buf(b).ty.dtype.is_int() && self.buf(b).ty.dtype != DType::Bool);
                let err = if int && elementwise::row(e).flags.zero_divisor {
                    let (i, ptr) = self.next_flag();
                    *flag = Some(i);
                    ptr
                } else {
                    0
                };
                self.elementwise(program, ins, Some(outs[0]), None, err)
            }
        }
    }

    /// An elementwise program over `ins` writing `y` (if any) and, with `quant`, q and amax.
    pub(super) fn elementwise(
        &self,
        program: Vec<EwInst>,
        ins: &[BufId],
        y: Option<BufId>,
        quant: Option<Quant>,
        err: u64,
    ) -> R<Vec<Action>> {
        let shape_ref = y.or(quant.as_ref().map(|q| q.ref_out)).ok_or("no output")?;
        let out = self.buf(shape_ref);
        let out_dims = out.dims.clone();
        let n = numel(out);
        let access: Vec<Access> = ins
            .iter()
            .map(|&b| Access::for_shapes(&self.buf(b).dims, &out_dims))
            .collect();
        let spec = EwSpec {
            program,
            inputs: ins.iter().map(|&b| self.buf(b).ty.dtype).collect(),
            access: access.clone(),
            out: out.ty.dtype,
            quant: quant.as_ref().map(|q| (q.to, q.saturate)),
        };
        let header = codegen::header(&spec)?;
        let mut p = EwParams::new(&access, &out_dims)?;
        for (k, &b) in ins.iter().enumerate() {
            p.inputs[k] = self.ptr(b);
        }
        p.y = y.map_or(0, |b| self.ptr(b));
        p.err = err;
        let mut actions = Vec::new();
        if let Some(q) = &quant {
            p.q = self.ptr(q.q);
            p.scale = self.ptr(q.scale);
            p.amax = self.ptr(q.amax);
            actions.push(Action::Memset8 {
                ptr: p.amax,
                value: 0,
                bytes: 4,
            });
        }
        if n == 0 {
            return Ok(actions);
        }
        actions.extend(self.ew_launch(&header, p, n)?);
        Ok(actions)
    }

    fn cast(&self, x: BufId, y: BufId, to: DType, saturate: bool) -> R<Vec<Action>> {
        let from = self.buf(x).ty.dtype;
        if from == to {
            return Ok(vec![Action::Copy {
                dst: self.ptr(y),
                src: self.ptr(x),
                bytes: self.buf(y).bytes,
            }]);
        }
        if to.is_fp8() && !from.is_fp8() {
            return self.quantize(x, None, y, None, to, saturate);
        }
        if from.is_fp8() && is_kernel_float(to) {
            return self.dequantize(x, None, y);
        }
        let plain = |d: DType| is_kernel_float(d) || d == DType::Bool;
        let int = |d: DType| matches!(d, DType::I64 | DType::I32);
        // f64 and the 8/16-bit integers: `quantize.cu`'s cast_wide kernels, to and from all
        // of these and the plain and int types.
        let wide_word = |d: DType| match d {
            DType::F64 => Some("f64"),
            DType::I8 => Some("i8"),
            DType::U8 => Some("u8"),
            DType::I16 => Some("i16"),
            DType::U16 => Some("u16"),
            _ => None,
        };
        let wide = (wide_word(from).is_some() || wide_word(to).is_some())
            && [from, to]
                .iter()
                .all(|&d| wide_word(d).is_some() || plain(d) || int(d));
        let supported = (plain(from) && plain(to))
            || (int(from) && (plain(to) || int(to)))
            || (int(to) && plain(from))
            || wide;
        if !supported {
            return Err(format!(
                "cast from {from} to {to} is not supported on CUDA yet"
            ));
        }
        let name_of = |d: DType| wide_word(d).map_or_else(|| word(d), Ok);
        let n = numel(self.buf(x));
        if n == 0 {
            return Ok(vec![]);
        }
        let mut a = KernelArgs::new();
        a.ptr(self.ptr(x)).ptr(self.ptr(y)).u64(n);
        // Float / bool casts move 8 elements per thread; integer and wide ones one.
        let per_thread = if int(from) || int(to) || wide { 1 } else { 8 };
        Ok(vec![self.launch_1d(
            kernels::QUANTIZE,
            &format!("fp8c_cast_{}_{}", name_of(from)?, name_of(to)?),
            n,
            per_thread,
            a,
        )?])
    }

    /// `alpha = a · b` for two f32[] scalars (one tiny generated kernel).
    pub(super) fn scalar_product(&self, a: BufId, b: BufId, alpha: u64) -> R<Vec<Action>> {
        let spec = EwSpec {
            program: codegen::single_op(&Op::Mul, 2),
            inputs: vec![DType::F32, DType::F32],
            access: vec![Access::Scalar, Access::Scalar],
            out: DType::F32,
            quant: None,
        };
        let header = codegen::header(&spec)?;
        let mut p = EwParams::new(&spec.access, &[1])?;
        p.inputs[0] = self.ptr(a);
        p.inputs[1] = self.ptr(b);
        p.y = alpha;
        self.ew_launch(&header, p, 1)
    }

    /// elementwise_block_quantize: the program's result `y` (always written: the kernel reads
    /// it back to quantize), its codes `q` and per-tile `scale_inv` for tiles of one row and
    /// `cols` columns of the last axis (0: the whole row), in `elementwise.cu`'s fused kernel.
    pub(super) fn elementwise_block_quantize(
        &self,
        program: Vec<EwInst>,
        ins: &[BufId],
        (y, q, scale_inv): (BufId, BufId, BufId),
        (to, saturate): (DType, bool),
        (cols, scaling, epsilon): (i64, fp8c_ir::BlockScaling, f32),
    ) -> R<Vec<Action>> {
        if !(epsilon.is_finite() && epsilon >= 0.0) {
            return Err(format!("epsilon={epsilon} must be finite and ≥ 0"));
        }
        if self.buf(y).ty.dtype != DType::F32 {
            return Err("per-tile FP8 from an elementwise program needs an f32 result".into());
        }
        let out_dims = self.buf(y).dims.clone();
        let c = *out_dims.last().ok_or("y must have rank ≥ 2")?;
        let n = numel(self.buf(y));
        if n == 0 || c == 0 {
            return Ok(vec![]);
        }
        let tc = if cols == 0 { c } else { cols as u64 };
        let access: Vec<Access> = ins
            .iter()
            .map(|&b| Access::for_shapes(&self.buf(b).dims, &out_dims))
            .collect();
        let spec = EwSpec {
            program,
            inputs: ins.iter().map(|&b| self.buf(b).ty.dtype).collect(),
            access: access.clone(),
            out: DType::F32,
            quant: Some((to, saturate)),
        };
        // The fused tile kernel is compiled only for the programs that ask for it.
        let header = format!("{}#define EW_TILES 1\n", codegen::header(&spec)?);
        let mut p = EwParams::new(&access, &out_dims)?;
        for (k, &b) in ins.iter().enumerate() {
            p.inputs[k] = self.ptr(b);
        }
        p.y = self.ptr(y);
        p.q = self.ptr(q);
        let func = self.ew_function(&header, "fp8c_elementwise_block_quantize")?;
        let mut a = KernelArgs::new();
        a.push(p)
            .u64(c)
            .u64(tc)
            .ptr(self.ptr(scale_inv))
            .i32(match scaling {
                fp8c_ir::BlockScaling::Fp32 => 0,
                fp8c_ir::BlockScaling::Pow2 => 1,
                fp8c_ir::BlockScaling::E8m0 => 2,
            })
            .f32(epsilon);
        // One warp per tile.
        let tiles = n / c * c.div_ceil(tc);
        let warps = u64::from(BLOCK / 32);
        let grid = tiles
            .div_ceil(warps)
            .min(u64::from(self.dev.info.sm_count) * 32) as u32;
        Ok(vec![Action::Launch(Launch {
            func,
            grid: (grid, 1, 1),
            block: (BLOCK, 1, 1),
            shared: 0,
            args: a,
        })])
    }

    /// A function of the elementwise module built with the generated `header`.
    fn ew_function(&self, header: &str, name: &str) -> R<KernelRef> {
        let mut headers = kernels::fixed_headers();
        headers.push((kernels::GENERATED_EW_HEADER, header));
        let m = self
            .dev
            .module(
                kernels::ELEMENTWISE.name,
                kernels::ELEMENTWISE.source,
                &headers,
            )
            .map_err(|e| e.to_string())?;
        self.dev
            .function(&m, kernels::ELEMENTWISE.name, name)
            .map_err(|e| e.to_string())
    }

    pub(super) fn ew_launch(&self, header: &str, p: EwParams, n: u64) -> R<Vec<Action>> {
        let func = self.ew_function(header, "fp8c_elementwise")?;
        let mut a = KernelArgs::new();
        a.push(p);
        Ok(vec![Action::Launch(Launch {
            func,
            grid: (self.dev.grid_for(n, 8, BLOCK), 1, 1),
            block: (BLOCK, 1, 1),
            shared: 0,
            args: a,
        })])
    }
}
