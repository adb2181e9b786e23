//! Turning a program's steps into device actions, once, in `prepare`.
//!
//! Each [`Step`] becomes a short list of [`Action`]s (kernel launches with their arguments
//! baked in, memsets, copies, planned cuBLASLt GEMMs) over fixed device addresses: the arena
//! offsets of the memory plan and the resident buffers. Running a program is then replaying
//! the list, which is also what a CUDA graph captures.
//!
//! Everything that can be decided from static shapes is decided here: kernel choice, access
//! modes, GEMM layouts, slice bounds (from constant inputs), pooling geometry. A step this
//! backend cannot run is an error here, naming the node, and the executable reports every such
//! node at once. Steps whose inputs are all constants are evaluated here by the CPU reference
//! and become copies of the result.

use crate::backend::RuntimeError;
use crate::cuda::codegen::{self, Access, EwParams, EwSpec};
use crate::cuda::device::{Device, KernelArgs, Launch};
use crate::cuda::gemm::{Epilogue, GemmCall, GemmSpec, Lt};
use crate::cuda::kernels::{self, KernelFile, dtype_word, is_kernel_float};
use crate::program::{BufId, Buffer, BufferKind, Program, Step};
use fp8c_ir::{AmaxSource, AutoPad, DType, EwArg, EwExpr, EwInst, GeluApprox, Op, Tensor};

/// One thing the device does for a step.
pub(crate) enum Action {
    /// A kernel launch.
    Launch(Launch),
    /// `bytes` bytes := `value`.
    Memset8 { ptr: u64, value: u8, bytes: u64 },
    /// A device-to-device copy.
    Copy { dst: u64, src: u64, bytes: u64 },
    /// A planned cuBLASLt GEMM.
    Gemm(Box<GemmCall>),
}

/// A step's actions and, for steps that can detect bad input values on the device (gather
/// indices, labels), the offset of its error flag.
pub(crate) struct Lowered {
    pub actions: Vec<Action>,
    pub err_flag: Option<usize>,
}

/// What lowering needs: the device, cuBLASLt, the program and every buffer's address.
pub(crate) struct Lowerer<'a> {
    pub dev: &'a Device,
    pub lt: Option<&'a Lt>,
    pub program: &'a Program,
    pub addr: &'a [u64],
    /// Number of steps reading each buffer, plus one for graph outputs and state updates.
    pub uses: Vec<usize>,
    /// Device address of the error-flag array (one i32 per flagged step).
    pub err_base: u64,
    /// Flags handed out so far.
    pub err_count: usize,
}

type R<T> = Result<T, String>;

const BLOCK: u32 = 256;

fn numel(b: &Buffer) -> u64 {
    b.dims.iter().product()
}

fn contiguous_strides(dims: &[u64]) -> Vec<i64> {
    let mut s = vec![1i64; dims.len()];
    for k in (0..dims.len().saturating_sub(1)).rev() {
        s[k] = s[k + 1] * dims[k + 1] as i64;
    }
    s
}

fn norm_axis(axis: i64, rank: usize) -> R<usize> {
    let r = rank as i64;
    if axis < -r || axis >= r {
        return Err(format!("axis {axis} is out of range for rank {rank}"));
    }
    Ok(if axis < 0 {
        (axis + r) as usize
    } else {
        axis as usize
    })
}

fn word(d: DType) -> R<&'static str> {
    dtype_word(d).ok_or_else(|| format!("{d} tensors are not supported on CUDA yet"))
}

fn float_word(d: DType) -> R<&'static str> {
    if !is_kernel_float(d) {
        return Err(format!(
            "{d} is not supported here on CUDA (f32, bf16 and f16 are)"
        ));
    }
    word(d)
}

fn fp8_word(d: DType) -> R<&'static str> {
    match d {
        DType::F8E4M3 => Ok("e4m3"),
        DType::F8E5M2 => Ok("e5m2"),
        other => Err(format!("{other} is not an FP8 type")),
    }
}

fn sat_word(saturate: bool) -> &'static str {
    if saturate { "sat" } else { "nosat" }
}

/// `movement.cu`'s StridedView, field for field.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct StridedView {
    rank: u32,
    pad: u32,
    dims: [u64; 8],
    in_strides: [i64; 8],
    out_strides: [i64; 8],
    in_offset: i64,
    out_offset: i64,
}

/// `scale_update.cu`'s ScaleParams.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct ScaleParams {
    fmt_max: f32,
    pow2_margin: f32,
    epsilon: f32,
    source: i32,
    power_2: i32,
}

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

fn scale_params(
    fmt: DType,
    margin: f32,
    source: AmaxSource,
    epsilon: f32,
    power_2: bool,
) -> R<ScaleParams> {
    let fmt_max = match fmt {
        DType::F8E4M3 => fp8c_core::Fp8Format::E4M3.max(),
        DType::F8E5M2 => fp8c_core::Fp8Format::E5M2.max(),
        other => return Err(format!("fmt={other} is not an FP8 type")),
    };
    if !(margin.is_finite() && epsilon.is_finite() && epsilon >= 0.0) {
        return Err("margin must be finite and epsilon finite and >= 0".into());
    }
    Ok(ScaleParams {
        fmt_max,
        // Exactly fp8c-core's `compute_scale`: 2^margin in f64, rounded to f32.
        pow2_margin: 2f64.powf(f64::from(margin)) as f32,
        epsilon,
        source: match source {
            AmaxSource::HistoryMax => 0,
            AmaxSource::HistoryMostRecent => 1,
            AmaxSource::Current => 2,
        },
        power_2: i32::from(power_2),
    })
}

/// Begin and end pads of one spatial axis of a window op (ONNX auto_pad rules).
#[allow(clippy::too_many_arguments)]
fn window_pads(
    auto_pad: AutoPad,
    pads: &[i64],
    axis: usize,
    spatial: usize,
    input: u64,
    output: u64,
    kernel: i64,
    stride: i64,
    dilation: i64,
) -> (i64, i64) {
    match auto_pad {
        AutoPad::NotSet => (
            pads.get(axis).copied().unwrap_or(0),
            pads.get(axis + spatial).copied().unwrap_or(0),
        ),
        AutoPad::Valid => (0, 0),
        AutoPad::SameUpper | AutoPad::SameLower => {
            let total =
                ((output as i64 - 1) * stride + (kernel - 1) * dilation + 1 - input as i64).max(0);
            let small = total / 2;
            if auto_pad == AutoPad::SameUpper {
                (small, total - small)
            } else {
                (total - small, small)
            }
        }
    }
}

impl Lowerer<'_> {
    fn buf(&self, b: BufId) -> &Buffer {
        self.program.buffer(b)
    }

    fn ptr(&self, b: BufId) -> u64 {
        self.addr[b.index()]
    }

    /// Whether anything reads `b` (a later step, the graph's outputs, a state update).
    fn used(&self, b: BufId) -> bool {
        self.uses[b.index()] > 0
    }

    /// The constant tensor behind `b`, if `b` is a constant.
    fn constant(&self, b: BufId) -> Option<&Tensor> {
        match &self.buf(b).kind {
            BufferKind::Constant(t) => Some(t),
            _ => None,
        }
    }

    fn int_list(&self, b: BufId, what: &str) -> R<Vec<i64>> {
        self.constant(b)
            .ok_or_else(|| {
                format!("{what} must be a constant on CUDA (it is computed at run time)")
            })?
            .to_i64_vec()
            .map_err(|e| format!("{what}: {e}"))
    }

    fn launch(
        &self,
        file: KernelFile,
        name: &str,
        grid: u32,
        block: (u32, u32, u32),
        args: KernelArgs,
    ) -> R<Action> {
        let func = self.dev.kernel(file, name).map_err(|e| e.to_string())?;
        Ok(Action::Launch(Launch {
            func,
            grid: (grid.max(1), 1, 1),
            block,
            shared: 0,
            args,
        }))
    }

    /// A grid-stride launch over `work` items, `per_thread` items per thread.
    fn launch_1d(
        &self,
        file: KernelFile,
        name: &str,
        work: u64,
        per_thread: u64,
        args: KernelArgs,
    ) -> R<Action> {
        let grid = self.dev.grid_for(work, per_thread, BLOCK);
        self.launch(file, name, grid, (BLOCK, 1, 1), args)
    }

    /// One block per row (grid-stride over rows).
    fn launch_rows(&self, file: KernelFile, name: &str, rows: u64, args: KernelArgs) -> R<Action> {
        let grid = rows.clamp(1, u64::from(self.dev.info.sm_count) * 8) as u32;
        self.launch(file, name, grid, (BLOCK, 1, 1), args)
    }

    fn next_flag(&mut self) -> (usize, u64) {
        let i = self.err_count;
        self.err_count += 1;
        (i, self.err_base + 4 * i as u64)
    }

    fn alloc(&self, bytes: u64) -> R<u64> {
        self.dev.alloc(bytes).map_err(|e| e.to_string())
    }

    fn lt(&self) -> R<&Lt> {
        self.lt
            .ok_or_else(|| "internal: cuBLASLt was not opened".to_string())
    }

    /// Lowers one step.
    pub fn lower(&mut self, step: &Step) -> R<Lowered> {
        let mut flag = None;
        if !step.inputs.is_empty()
            && step.inputs.iter().all(|&b| self.constant(b).is_some())
            && !matches!(step.op, Op::Identity)
        {
            return Ok(Lowered {
                actions: self.fold_constant(step)?,
                err_flag: None,
            });
        }
        let actions = self.lower_op(step, &mut flag)?;
        Ok(Lowered {
            actions,
            err_flag: flag,
        })
    }

    /// Evaluates a step of constants with the CPU reference; the step copies the result.
    fn fold_constant(&self, step: &Step) -> R<Vec<Action>> {
        let ins: Vec<&Tensor> = step
            .inputs
            .iter()
            .filter_map(|&b| self.constant(b))
            .collect();
        let outs = fp8c_eval::eval_op(&step.op, &ins).map_err(|e| e.message)?;
        let mut actions = Vec::new();
        for (t, &b) in outs.iter().zip(&step.outputs) {
            let src = self.alloc(t.bytes().len() as u64)?;
            self.dev.upload(src, t.bytes()).map_err(|e| e.to_string())?;
            actions.push(Action::Copy {
                dst: self.ptr(b),
                src,
                bytes: t.bytes().len() as u64,
            });
        }
        Ok(actions)
    }

    fn lower_op(&mut self, step: &Step, flag: &mut Option<usize>) -> R<Vec<Action>> {
        let ins = &step.inputs;
        let outs = &step.outputs;
        let out0 = outs.first().copied();
        let op = &step.op;
        match op {
            Op::Identity
            | Op::Reshape { .. }
            | Op::Squeeze { .. }
            | Op::Unsqueeze { .. }
            | Op::Flatten { .. } => {
                let (x, y) = (ins[0], outs[0]);
                Ok(vec![Action::Copy {
                    dst: self.ptr(y),
                    src: self.ptr(x),
                    bytes: self.buf(y).bytes,
                }])
            }
            _ if op.is_elementwise_unary()
                || op.is_elementwise_binary()
                || matches!(op, Op::Where | Op::Clip | Op::GeluGrad { .. }) =>
            {
                let y = outs[0];
                let program = codegen::single_op(op, ins.len());
                self.elementwise(program, ins, Some(y), None)
            }
            Op::ElementwiseQuantize { expr, to, saturate } => {
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
                )
            }
            Op::Cast { to, saturate } => self.cast(ins[0], outs[0], *to, *saturate),
            Op::Quantize { to, saturate } => {
                self.quantize(ins[0], Some(ins[1]), outs[0], None, *to, *saturate)
            }
            Op::QuantizeAmax { to, saturate } => {
                self.quantize(ins[0], Some(ins[1]), outs[0], Some(outs[1]), *to, *saturate)
            }
            Op::Dequantize { .. } => self.dequantize(ins[0], Some(ins[1]), outs[0]),
            Op::Amax => self.amax(ins[0], outs[0]),
            Op::ComputeScale {
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
            Op::AmaxHistoryUpdate => {
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
            Op::BatchedScaleUpdate {
                fmt,
                margin,
                source,
                epsilon,
                power_2,
            } => {
                let p = scale_params(*fmt, *margin, *source, *epsilon, *power_2)?;
                if ins.len() % 3 != 0 || outs.len() != ins.len() {
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
            Op::CastTranspose { perm, to, saturate } => {
                self.cast_transpose(ins, outs, perm, *to, *saturate)
            }
            Op::Transpose { perm } => self.transpose(ins[0], outs[0], perm),
            Op::Expand => {
                let (x, y) = (ins[0], outs[0]);
                let (xd, yd) = (self.buf(x).dims.clone(), self.buf(y).dims.clone());
                let strides = match Access::for_shapes(&xd, &yd) {
                    Access::Full => contiguous_strides(&yd),
                    Access::Scalar => vec![0; yd.len()],
                    Access::Row(_) | Access::Strided(_) => broadcast_strides(&xd, &yd),
                };
                self.strided_copy(x, y, &yd, &strides, 0, &contiguous_strides(&yd), 0)
            }
            Op::Slice => self.slice(ins, outs[0]),
            Op::Concat { axis } => {
                let y = outs[0];
                let yd = self.buf(y).dims.clone();
                let ax = norm_axis(*axis, yd.len())?;
                let ys = contiguous_strides(&yd);
                let mut at = 0i64;
                let mut actions = Vec::new();
                for &x in ins {
                    let xd = self.buf(x).dims.clone();
                    if numel(self.buf(x)) > 0 {
                        actions.extend(self.strided_copy(
                            x,
                            y,
                            &xd,
                            &contiguous_strides(&xd),
                            0,
                            &ys,
                            at * ys[ax],
                        )?);
                    }
                    at += xd[ax] as i64;
                }
                Ok(actions)
            }
            Op::Split { axis, .. } => {
                let x = ins[0];
                let xd = self.buf(x).dims.clone();
                let ax = norm_axis(*axis, xd.len())?;
                let xs = contiguous_strides(&xd);
                let mut at = 0i64;
                let mut actions = Vec::new();
                for &y in outs {
                    let yd = self.buf(y).dims.clone();
                    if numel(self.buf(y)) > 0 {
                        actions.extend(self.strided_copy(
                            x,
                            y,
                            &yd,
                            &xs,
                            at * xs[ax],
                            &contiguous_strides(&yd),
                            0,
                        )?);
                    }
                    at += yd[ax] as i64;
                }
                Ok(actions)
            }
            Op::Gather { axis } => {
                let (i, f) = self.next_flag();
                *flag = Some(i);
                self.gather(ins[0], ins[1], outs[0], *axis, f)
            }
            Op::GatherGrad { axis, .. } => {
                let (i, f) = self.next_flag();
                *flag = Some(i);
                self.gather_grad(ins[0], ins[1], outs[0], *axis, f)
            }
            Op::Pad { mode } => self.pad(ins, outs[0], *mode),
            Op::ConstantOfShape { value } => {
                let y = outs[0];
                self.fill(y, value.bytes())
            }
            Op::Shape { start, end } => {
                let x = self.buf(ins[0]);
                let r = x.dims.len() as i64;
                let clampi = |v: i64| (if v < 0 { v + r } else { v }).clamp(0, r) as usize;
                let (s, e) = (clampi(*start), clampi(end.unwrap_or(r)));
                let dims: Vec<i64> = x.dims[s..e.max(s)].iter().map(|&d| d as i64).collect();
                let t = Tensor::from_i64(vec![dims.len() as u64], &dims);
                let src = self.alloc(t.bytes().len() as u64)?;
                self.dev.upload(src, t.bytes()).map_err(|e| e.to_string())?;
                Ok(vec![Action::Copy {
                    dst: self.ptr(outs[0]),
                    src,
                    bytes: t.bytes().len() as u64,
                }])
            }
            Op::MatMul => self.matmul(ins[0], ins[1], out0.ok_or("no output")?),
            Op::Gemm {
                alpha,
                beta,
                trans_a,
                trans_b,
            } => self.gemm_op(ins, outs[0], *alpha, *beta, *trans_a, *trans_b),
            Op::ScaledMatMul { out } => {
                self.scaled_matmul(ins, outs, *out, &EwExpr::default(), None, false)
            }
            Op::ScaledMatMulEpilogue {
                out,
                expr,
                to,
                saturate,
            } => self.scaled_matmul(ins, outs, *out, expr, *to, *saturate),
            Op::LayerNormalization { axis, epsilon } => {
                let beta = ins.get(2).copied();
                self.layer_norm(ins[0], ins[1], beta, outs[0], None, *axis, *epsilon)
            }
            Op::LayerNormQuantize {
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
            Op::LayerNormGrad { axis, epsilon } => self.layer_norm_grad(ins, outs, *axis, *epsilon),
            Op::Softmax { axis } => self.softmax(ins[0], outs[0], *axis, false),
            Op::LogSoftmax { axis } => self.softmax(ins[0], outs[0], *axis, true),
            Op::SoftmaxGrad { axis, log } => {
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
            Op::ReduceSum { axes, .. } => self.reduce(ins[0], outs[0], axes.as_deref(), 0),
            Op::ReduceMean { axes, .. } => self.reduce(ins[0], outs[0], axes.as_deref(), 1),
            Op::ReduceMax { axes, .. } => self.reduce(ins[0], outs[0], axes.as_deref(), 2),
            Op::ReduceMin { axes, .. } => self.reduce(ins[0], outs[0], axes.as_deref(), 3),
            Op::ReduceProd { axes, .. } => self.reduce(ins[0], outs[0], axes.as_deref(), 4),
            Op::GlobalAveragePool | Op::GlobalMaxPool => {
                let rank = self.buf(ins[0]).dims.len();
                if rank < 3 {
                    return Err("expects [N, C, spatial...]".into());
                }
                let axes: Vec<i64> = (2..rank as i64).collect();
                let kind = if matches!(op, Op::GlobalAveragePool) {
                    1
                } else {
                    2
                };
                self.reduce(ins[0], outs[0], Some(&axes), kind)
            }
            Op::BatchNormalization { epsilon } => {
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
            Op::MaxPool {
                kernel_shape,
                strides,
                pads,
                dilations,
                auto_pad,
                ..
            } => self.pool(
                ins[0],
                outs[0],
                kernel_shape,
                strides,
                pads,
                dilations,
                *auto_pad,
                true,
                false,
            ),
            Op::AveragePool {
                kernel_shape,
                strides,
                pads,
                dilations,
                count_include_pad,
                auto_pad,
                ..
            } => self.pool(
                ins[0],
                outs[0],
                kernel_shape,
                strides,
                pads,
                dilations,
                *auto_pad,
                false,
                *count_include_pad,
            ),
            Op::Conv {
                kernel_shape,
                strides,
                pads,
                dilations,
                group,
                auto_pad,
            } => self.conv(
                ins,
                outs[0],
                kernel_shape,
                strides,
                pads,
                dilations,
                *group,
                *auto_pad,
            ),
            Op::SoftmaxCrossEntropy => {
                let (i, f) = self.next_flag();
                *flag = Some(i);
                self.xent(ins, outs, f)
            }
            Op::SoftmaxCrossEntropyGrad => {
                let (i, f) = self.next_flag();
                *flag = Some(i);
                self.xent_grad(ins, outs[0], f)
            }
            Op::AllFinite => {
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
            Op::SgdUpdate {
                momentum,
                weight_decay,
                nesterov,
            } => {
                self.require_f32(&ins[..3])?;
                let n = numel(self.buf(ins[0]));
                let mut a = KernelArgs::new();
                for &b in &ins[..4] {
                    a.ptr(self.ptr(b));
                }
                a.ptr(self.ptr(outs[0]))
                    .ptr(self.ptr(outs[1]))
                    .u64(n)
                    .f32(*momentum)
                    .f32(*weight_decay)
                    .i32(i32::from(*nesterov));
                Ok(vec![self.launch_1d(
                    kernels::OPTIMIZER,
                    "fp8c_sgd_update_f32",
                    n,
                    4,
                    a,
                )?])
            }
            Op::AdamwUpdate {
                beta1,
                beta2,
                epsilon,
                weight_decay,
            } => {
                self.require_f32(&ins[..4])?;
                let n = numel(self.buf(ins[0]));
                let mut a = KernelArgs::new();
                for &b in &ins[..6] {
                    a.ptr(self.ptr(b));
                }
                for &b in &outs[..3] {
                    a.ptr(self.ptr(b));
                }
                a.u64(n)
                    .f32(*beta1)
                    .f32(*beta2)
                    .f32(*epsilon)
                    .f32(*weight_decay);
                Ok(vec![self.launch_1d(
                    kernels::OPTIMIZER,
                    "fp8c_adamw_update_f32",
                    n,
                    4,
                    a,
                )?])
            }
            other => Err(format!("`{}` is not supported on CUDA yet", other.name())),
        }
    }

    fn require_f32(&self, bufs: &[BufId]) -> R<()> {
        for &b in bufs {
            if self.buf(b).ty.dtype != DType::F32 {
                return Err(format!(
                    "optimizer tensors must be f32 master weights on CUDA, got {}",
                    self.buf(b).ty.dtype
                ));
            }
        }
        Ok(())
    }

    // ------------------------------------------------------------ elementwise

    /// An elementwise program over `ins` writing `y` (if any) and, with `quant`, q and amax.
    fn elementwise(
        &self,
        program: Vec<EwInst>,
        ins: &[BufId],
        y: Option<BufId>,
        quant: Option<Quant>,
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
        let mut headers = kernels::fixed_headers();
        headers.push((kernels::GENERATED_EW_HEADER, header.as_str()));
        let m = self
            .dev
            .module(
                kernels::ELEMENTWISE.name,
                kernels::ELEMENTWISE.source,
                &headers,
            )
            .map_err(|e| e.to_string())?;
        let func = self
            .dev
            .function(m, kernels::ELEMENTWISE.name, "fp8c_elementwise")
            .map_err(|e| e.to_string())?;
        let mut a = KernelArgs::new();
        a.push(p);
        actions.push(Action::Launch(Launch {
            func,
            grid: (self.dev.grid_for(n, 8, BLOCK), 1, 1),
            block: (BLOCK, 1, 1),
            shared: 0,
            args: a,
        }));
        Ok(actions)
    }

    // ------------------------------------------------------------ casts and FP8

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
        let supported = (plain(from) && plain(to))
            || (int(from) && (plain(to) || int(to)))
            || (int(to) && plain(from));
        if !supported {
            return Err(format!(
                "cast from {from} to {to} is not supported on CUDA yet"
            ));
        }
        let n = numel(self.buf(x));
        if n == 0 {
            return Ok(vec![]);
        }
        let mut a = KernelArgs::new();
        a.ptr(self.ptr(x)).ptr(self.ptr(y)).u64(n);
        // Float / bool casts move 8 elements per thread; integer ones one.
        let per_thread = if int(from) || int(to) { 1 } else { 8 };
        Ok(vec![self.launch_1d(
            kernels::QUANTIZE,
            &format!("fp8c_cast_{}_{}", word(from)?, word(to)?),
            n,
            per_thread,
            a,
        )?])
    }

    /// q = quantize(x, scale or 1), with amax(x) when `amax` is given.
    fn quantize(
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

    fn dequantize(&self, q: BufId, scale_inv: Option<BufId>, y: BufId) -> R<Vec<Action>> {
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

    fn amax(&self, x: BufId, m: BufId) -> R<Vec<Action>> {
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

    // ------------------------------------------------------------ movement

    #[allow(clippy::too_many_arguments)]
    fn strided_copy(
        &self,
        src: BufId,
        dst: BufId,
        dims: &[u64],
        in_strides: &[i64],
        in_offset: i64,
        out_strides: &[i64],
        out_offset: i64,
    ) -> R<Vec<Action>> {
        let es = self.buf(src).ty.dtype.size();
        if es != self.buf(dst).ty.dtype.size() {
            return Err("internal: strided copy between element sizes".into());
        }
        if dims.len() > 8 {
            return Err(format!(
                "rank {} is above the 8 dims CUDA copies handle",
                dims.len()
            ));
        }
        let n: u64 = dims.iter().product();
        if n == 0 {
            return Ok(vec![]);
        }
        let mut v = StridedView {
            rank: dims.len() as u32,
            pad: 0,
            dims: [1; 8],
            in_strides: [0; 8],
            out_strides: [0; 8],
            in_offset,
            out_offset,
        };
        v.dims[..dims.len()].copy_from_slice(dims);
        v.in_strides[..dims.len()].copy_from_slice(in_strides);
        v.out_strides[..dims.len()].copy_from_slice(out_strides);
        let mut a = KernelArgs::new();
        a.ptr(self.ptr(src)).ptr(self.ptr(dst)).push(v).u64(n);
        Ok(vec![self.launch_1d(
            kernels::MOVEMENT,
            &format!("fp8c_strided_copy_{es}"),
            n,
            1,
            a,
        )?])
    }

    fn transpose(&self, x: BufId, y: BufId, perm: &[i64]) -> R<Vec<Action>> {
        let xd = self.buf(x).dims.clone();
        let r = xd.len();
        let perm: Vec<usize> = perm.iter().map(|&p| norm_axis(p, r)).collect::<R<_>>()?;
        let es = self.buf(x).ty.dtype.size();
        let n = numel(self.buf(x));
        if n == 0 {
            return Ok(vec![]);
        }
        let identity_lead = r >= 2 && (0..r - 2).all(|i| perm[i] == i);
        if identity_lead && perm[r - 2] == r - 1 && perm[r - 1] == r - 2 {
            let (rows, cols) = (xd[r - 2], xd[r - 1]);
            let batch: u64 = xd[..r - 2].iter().product();
            let tiles = batch * rows.div_ceil(32) * cols.div_ceil(32);
            let grid = tiles.min(u64::from(self.dev.info.sm_count) * 16) as u32;
            let mut a = KernelArgs::new();
            a.ptr(self.ptr(x))
                .ptr(self.ptr(y))
                .u64(batch)
                .u64(rows)
                .u64(cols);
            return Ok(vec![self.launch(
                kernels::MOVEMENT,
                &format!("fp8c_transpose2d_{es}"),
                grid,
                (32, 8, 1),
                a,
            )?]);
        }
        let xs = contiguous_strides(&xd);
        let yd: Vec<u64> = perm.iter().map(|&p| xd[p]).collect();
        let in_strides: Vec<i64> = perm.iter().map(|&p| xs[p]).collect();
        self.strided_copy(x, y, &yd, &in_strides, 0, &contiguous_strides(&yd), 0)
    }

    fn slice(&self, ins: &[BufId], y: BufId) -> R<Vec<Action>> {
        let x = ins[0];
        let xd = self.buf(x).dims.clone();
        let r = xd.len();
        let starts = self.int_list(ins[1], "starts")?;
        let ends = self.int_list(ins[2], "ends")?;
        let axes = match ins.get(3) {
            Some(&b) => self.int_list(b, "axes")?,
            None => (0..starts.len() as i64).collect(),
        };
        let steps = match ins.get(4) {
            Some(&b) => self.int_list(b, "steps")?,
            None => vec![1; starts.len()],
        };
        let xs = contiguous_strides(&xd);
        let mut first = vec![0i64; r];
        let mut step_of = vec![1i64; r];
        for i in 0..starts
            .len()
            .min(ends.len())
            .min(axes.len())
            .min(steps.len())
        {
            let ax = norm_axis(axes[i], r)?;
            let step = steps[i];
            if step == 0 {
                return Err("a slice step is 0".into());
            }
            let d = xd[ax] as i64;
            let mut s = starts[i];
            if s < 0 {
                s = s.saturating_add(d);
            }
            s = if step > 0 {
                s.clamp(0, d)
            } else {
                s.clamp(0, (d - 1).max(0))
            };
            first[ax] = s;
            step_of[ax] = step;
        }
        let yd = self.buf(y).dims.clone();
        let offset: i64 = (0..r).map(|k| first[k] * xs[k]).sum();
        let in_strides: Vec<i64> = (0..r).map(|k| step_of[k] * xs[k]).collect();
        self.strided_copy(x, y, &yd, &in_strides, offset, &contiguous_strides(&yd), 0)
    }

    /// Fills `y` with the element whose bytes are `value` (1, 2, 4 or 8 bytes).
    fn fill(&self, y: BufId, value: &[u8]) -> R<Vec<Action>> {
        let es = self.buf(y).ty.dtype.size();
        if value.len() != es {
            return Err("the fill value's type differs from the output's".into());
        }
        let n = numel(self.buf(y));
        if n == 0 {
            return Ok(vec![]);
        }
        let mut bits = [0u8; 8];
        bits[..es].copy_from_slice(value);
        let mut a = KernelArgs::new();
        a.ptr(self.ptr(y)).u64(u64::from_le_bytes(bits)).u64(n);
        Ok(vec![self.launch_1d(
            kernels::MOVEMENT,
            &format!("fp8c_fill_{es}"),
            n,
            1,
            a,
        )?])
    }

    fn pad(&self, ins: &[BufId], y: BufId, mode: fp8c_ir::PadMode) -> R<Vec<Action>> {
        if mode != fp8c_ir::PadMode::Constant {
            return Err(format!(
                "pad mode {mode:?} is not supported on CUDA yet (constant is)"
            ));
        }
        let x = ins[0];
        let pads = self.int_list(ins[1], "pads")?;
        let xd = self.buf(x).dims.clone();
        let r = xd.len();
        if pads.len() != 2 * r || pads.iter().any(|&p| p < 0) {
            return Err("pads must be 2·rank non-negative constants on CUDA".into());
        }
        let es = self.buf(y).ty.dtype.size();
        let value = match ins.get(2) {
            Some(&b) => self
                .constant(b)
                .ok_or("the pad value must be a constant on CUDA")?
                .bytes()
                .to_vec(),
            None => vec![0u8; es],
        };
        let mut actions = self.fill(y, &value)?;
        let yd = self.buf(y).dims.clone();
        let ys = contiguous_strides(&yd);
        let offset: i64 = (0..r).map(|k| pads[k] * ys[k]).sum();
        actions.extend(self.strided_copy(x, y, &xd, &contiguous_strides(&xd), 0, &ys, offset)?);
        Ok(actions)
    }

    fn gather(&self, data: BufId, idx: BufId, y: BufId, axis: i64, err: u64) -> R<Vec<Action>> {
        let dd = self.buf(data).dims.clone();
        let ax = norm_axis(axis, dd.len())?;
        let (outer, axis_len, inner) = split3(&dd, ax, ax + 1);
        let nidx = numel(self.buf(idx));
        let it = match self.buf(idx).ty.dtype {
            DType::I64 => "i64",
            DType::I32 => "i32",
            other => {
                return Err(format!(
                    "gather indices of {other} are not supported on CUDA"
                ));
            }
        };
        let es = self.buf(data).ty.dtype.size();
        let n = outer * nidx * inner;
        if n == 0 {
            return Ok(vec![]);
        }
        let mut a = KernelArgs::new();
        a.ptr(self.ptr(data))
            .ptr(self.ptr(idx))
            .ptr(self.ptr(y))
            .u64(outer)
            .u64(axis_len)
            .u64(inner)
            .u64(nidx)
            .ptr(err);
        Ok(vec![self.launch_1d(
            kernels::GATHER,
            &format!("fp8c_gather_{es}_{it}"),
            n,
            1,
            a,
        )?])
    }

    fn gather_grad(&self, dy: BufId, idx: BufId, dx: BufId, axis: i64, err: u64) -> R<Vec<Action>> {
        if self.buf(dy).ty.dtype != DType::F32 {
            return Err("gather_grad is supported for f32 on CUDA".into());
        }
        let xd = self.buf(dx).dims.clone();
        let ax = norm_axis(axis, xd.len())?;
        let (outer, size, inner) = split3(&xd, ax, ax + 1);
        let nidx = numel(self.buf(idx));
        let it = match self.buf(idx).ty.dtype {
            DType::I64 => "i64",
            DType::I32 => "i32",
            other => return Err(format!("indices of {other} are not supported on CUDA")),
        };
        let mut actions = vec![Action::Memset8 {
            ptr: self.ptr(dx),
            value: 0,
            bytes: self.buf(dx).bytes,
        }];
        let n = outer * nidx * inner;
        if n > 0 {
            let mut a = KernelArgs::new();
            a.ptr(self.ptr(dy))
                .ptr(self.ptr(idx))
                .ptr(self.ptr(dx))
                .u64(outer)
                .u64(size)
                .u64(inner)
                .u64(nidx)
                .ptr(err);
            actions.push(self.launch_1d(
                kernels::GATHER,
                &format!("fp8c_gather_grad_f32_{it}"),
                n,
                1,
                a,
            )?);
        }
        Ok(actions)
    }

    // ------------------------------------------------------------ normalisation, reductions

    #[allow(clippy::too_many_arguments)]
    fn layer_norm(
        &self,
        x: BufId,
        gamma: BufId,
        beta: Option<BufId>,
        y: BufId,
        q: Option<LnQuant>,
        axis: i64,
        eps: f32,
    ) -> R<Vec<Action>> {
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

    /// `kind`: 0 sum, 1 mean, 2 max, 3 min, 4 prod (reduce.cu's RED_*).
    fn reduce(&self, x: BufId, y: BufId, axes: Option<&[i64]>, kind: i32) -> R<Vec<Action>> {
        let dims = self.buf(x).dims.clone();
        let r = dims.len();
        let mut ax: Vec<usize> = match axes {
            None => (0..r).collect(),
            Some([]) => (0..r).collect(),
            Some(a) => a.iter().map(|&v| norm_axis(v, r)).collect::<R<_>>()?,
        };
        ax.sort_unstable();
        ax.dedup();
        if ax.windows(2).any(|w| w[1] != w[0] + 1) {
            return Err(format!(
                "reducing over non-adjacent axes {ax:?} is not supported on CUDA yet"
            ));
        }
        let t = float_word(self.buf(x).ty.dtype)?;
        let (lo, hi) = (
            ax.first().copied().unwrap_or(0),
            ax.last().map_or(0, |&a| a + 1),
        );
        let (outer, red, inner) = split3(&dims, lo, hi);
        if outer * inner == 0 {
            return Ok(vec![]);
        }
        let mut a = KernelArgs::new();
        a.ptr(self.ptr(x))
            .ptr(self.ptr(y))
            .u64(outer)
            .u64(red)
            .u64(inner)
            .i32(kind);
        let name = format!("fp8c_reduce_{t}");
        Ok(vec![if inner == 1 {
            self.launch_rows(kernels::REDUCE, &name, outer, a)?
        } else {
            self.launch_1d(kernels::REDUCE, &name, outer * inner, 1, a)?
        }])
    }

    #[allow(clippy::too_many_arguments)]
    fn pool(
        &self,
        x: BufId,
        y: BufId,
        kernel: &[i64],
        strides: &[i64],
        pads: &[i64],
        dilations: &[i64],
        auto_pad: AutoPad,
        is_max: bool,
        count_include_pad: bool,
    ) -> R<Vec<Action>> {
        let xd = self.buf(x).dims.clone();
        let yd = self.buf(y).dims.clone();
        if xd.len() != 4 || kernel.len() != 2 {
            return Err("only 2-D pooling is supported on CUDA".into());
        }
        let t = float_word(self.buf(x).ty.dtype)?;
        let s = |i: usize| strides.get(i).copied().unwrap_or(1);
        let dl = |i: usize| dilations.get(i).copied().unwrap_or(1);
        let (ph, ph_end) = window_pads(auto_pad, pads, 0, 2, xd[2], yd[2], kernel[0], s(0), dl(0));
        let (pw, pw_end) = window_pads(auto_pad, pads, 1, 2, xd[3], yd[3], kernel[1], s(1), dl(1));
        let g = Pool2d {
            planes: xd[0] * xd[1],
            h: xd[2],
            w: xd[3],
            oh: yd[2],
            ow: yd[3],
            kh: kernel[0] as u64,
            kw: kernel[1] as u64,
            sh: s(0),
            sw: s(1),
            ph,
            pw,
            ph_end,
            pw_end,
            dh: dl(0),
            dw: dl(1),
            count_include_pad: i32::from(count_include_pad),
        };
        let n = numel(self.buf(y));
        if n == 0 {
            return Ok(vec![]);
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

    // ------------------------------------------------------------ losses

    fn xent(&self, ins: &[BufId], outs: &[BufId], err: u64) -> R<Vec<Action>> {
        let (logits, labels) = (ins[0], ins[1]);
        let (loss, logp) = (outs[0], outs[1]);
        let dims = self.buf(logits).dims.clone();
        let classes = *dims.last().ok_or("logits must have a class axis")?;
        let rows: u64 = dims[..dims.len() - 1].iter().product();
        let t = match self.buf(logits).ty.dtype {
            DType::F32 => "f32",
            DType::BF16 => "bf16",
            other => {
                return Err(format!(
                    "cross-entropy of {other} logits is not supported on CUDA"
                ));
            }
        };
        let lt = match self.buf(labels).ty.dtype {
            DType::I64 => "i64",
            DType::I32 => "i32",
            other => return Err(format!("labels of {other} are not supported on CUDA")),
        };
        if rows == 0 {
            return Err("cross-entropy over no rows".into());
        }
        let row_loss = self.alloc(rows * 4)?;
        let mut a = KernelArgs::new();
        a.ptr(self.ptr(logits))
            .ptr(self.ptr(labels))
            .ptr(self.ptr(logp))
            .ptr(row_loss)
            .u64(rows)
            .u64(classes)
            .ptr(err);
        let fwd = self.launch_rows(
            kernels::LOSSES,
            &format!("fp8c_softmax_xent_{t}_{lt}"),
            rows,
            a,
        )?;
        let mut b = KernelArgs::new();
        b.ptr(row_loss).u64(rows).ptr(self.ptr(loss));
        let mean = self.launch(
            kernels::LOSSES,
            &format!("fp8c_mean_{t}"),
            1,
            (BLOCK, 1, 1),
            b,
        )?;
        Ok(vec![fwd, mean])
    }

    fn xent_grad(&self, ins: &[BufId], dx: BufId, err: u64) -> R<Vec<Action>> {
        let (logp, labels, dloss) = (ins[0], ins[1], ins[2]);
        let dims = self.buf(logp).dims.clone();
        let classes = *dims.last().ok_or("log_probs must have a class axis")?;
        let rows: u64 = dims[..dims.len() - 1].iter().product();
        let t = match self.buf(logp).ty.dtype {
            DType::F32 => "f32",
            DType::BF16 => "bf16",
            other => return Err(format!("cross-entropy of {other} is not supported on CUDA")),
        };
        let lt = match self.buf(labels).ty.dtype {
            DType::I64 => "i64",
            DType::I32 => "i32",
            other => return Err(format!("labels of {other} are not supported on CUDA")),
        };
        if self.buf(dloss).ty.dtype != self.buf(logp).ty.dtype {
            return Err("dloss must have the log-probabilities' dtype".into());
        }
        let n = rows * classes;
        if n == 0 {
            return Ok(vec![]);
        }
        let mut a = KernelArgs::new();
        a.ptr(self.ptr(logp))
            .ptr(self.ptr(labels))
            .ptr(self.ptr(dloss))
            .ptr(self.ptr(dx))
            .u64(rows)
            .u64(classes)
            .ptr(err);
        Ok(vec![self.launch_1d(
            kernels::LOSSES,
            &format!("fp8c_softmax_xent_grad_{t}_{lt}"),
            n,
            1,
            a,
        )?])
    }

    // ------------------------------------------------------------ GEMMs

    fn gemm(&self, s: &GemmSpec) -> R<Action> {
        Ok(Action::Gemm(Box::new(self.lt()?.plan(s)?)))
    }

    #[allow(clippy::too_many_arguments)]
    fn plain_spec(
        m: u64,
        n: u64,
        k: u64,
        a: u64,
        b: u64,
        d: u64,
        t: DType,
        out: DType,
    ) -> GemmSpec {
        GemmSpec {
            m,
            n,
            k,
            batch: 1,
            a,
            b,
            d,
            a_type: t,
            b_type: t,
            d_type: out,
            trans_a: false,
            trans_b: false,
            stride_a: 0,
            stride_b: 0,
            stride_d: 0,
            alpha: 1.0,
            beta: 0.0,
            alpha_ptr: None,
            a_scale: None,
            b_scale: None,
            d_scale: None,
            amax_d: None,
            bias: None,
            epilogue: Epilogue::None,
            fast_accum: false,
        }
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
        let mut s = Self::plain_spec(
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
                return Err(format!(
                    "matmul broadcasting batch dims {la:?} against {lb:?} is not supported on CUDA yet"
                ));
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
        let mut s = Self::plain_spec(
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
    fn scaled_matmul(
        &self,
        ins: &[BufId],
        outs: &[BufId],
        out: DType,
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
        let fp8_ok = self.dev.info.has_fp8()
            && k % 16 == 0
            && n % 16 == 0
            && m % 16 == 0
            && !(ta == DType::F8E5M2 && tb == DType::F8E5M2);
        // Where the raw product goes when a generic epilogue follows.
        let product = if fused.is_some() {
            None
        } else {
            Some(self.alloc(m * n * out.size() as u64)?)
        };
        let mut spec = Self::plain_spec(m, n, k, self.ptr(qa), self.ptr(qb), 0, ta, out);
        spec.b_type = tb;
        if let Some((epi, bias)) = fused {
            spec.epilogue = epi;
            spec.bias = bias.map(|b| (self.ptr(b), out));
        }
        // An FP8 result nobody needs in high precision comes straight out of the GEMM.
        let direct_fp8 = fused.is_some() && !d_needed && fp8_ok;
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
            spec.fast_accum = ta == DType::F8E4M3 && tb == DType::F8E4M3;
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
        actions.push(self.gemm(&spec)?);
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

    /// `alpha = a · b` for two f32[] scalars (one tiny generated kernel).
    fn scalar_product(&self, a: BufId, b: BufId, alpha: u64) -> R<Vec<Action>> {
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

    fn ew_launch(&self, header: &str, p: EwParams, n: u64) -> R<Vec<Action>> {
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
        let func = self
            .dev
            .function(m, kernels::ELEMENTWISE.name, "fp8c_elementwise")
            .map_err(|e| e.to_string())?;
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

    /// 2-D convolution: per image, im2col (skipped for 1×1 stride-1 unpadded kernels) and one
    /// GEMM batched over the groups; then the bias, broadcast over channels, in place.
    #[allow(clippy::too_many_arguments)]
    fn conv(
        &self,
        ins: &[BufId],
        y: BufId,
        kernel: &[i64],
        strides: &[i64],
        pads: &[i64],
        dilations: &[i64],
        group: i64,
        auto_pad: AutoPad,
    ) -> R<Vec<Action>> {
        let (x, w) = (ins[0], ins[1]);
        let xd = self.buf(x).dims.clone();
        let wd = self.buf(w).dims.clone();
        let yd = self.buf(y).dims.clone();
        if xd.len() != 4 || wd.len() != 4 {
            return Err("only 2-D convolutions are supported on CUDA yet".into());
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
        if c % g != 0 || mo % g != 0 {
            return Err("channels are not divisible by group".into());
        }
        let s = |i: usize| strides.get(i).copied().unwrap_or(1);
        let dl = |i: usize| dilations.get(i).copied().unwrap_or(1);
        let (ph, _) = window_pads(auto_pad, pads, 0, 2, h, oh, kernel[0], s(0), dl(0));
        let (pw, _) = window_pads(auto_pad, pads, 1, 2, wid, ow, kernel[1], s(1), dl(1));
        let spatial = oh * ow;
        let cg = c / g;
        let kg = cg * kh * kw;
        let mg = mo / g;
        let es = t.size() as u64;
        let pointwise = kh == 1
            && kw == 1
            && s(0) == 1
            && s(1) == 1
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
                    sh: s(0),
                    sw: s(1),
                    ph,
                    pw,
                    dh: dl(0),
                    dw: dl(1),
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
            let mut spec = Self::plain_spec(
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

/// The placeholder for "the GEMM's product" in an epilogue's input list.
const PRODUCT: BufId = BufId(u32::MAX);

/// FP8 outputs of an elementwise program.
struct Quant {
    to: DType,
    saturate: bool,
    scale: BufId,
    q: BufId,
    amax: BufId,
    /// The buffer whose shape the outputs have (y's, even when y is not written).
    ref_out: BufId,
}

/// FP8 outputs of layer_norm_quantize.
struct LnQuant {
    scale: BufId,
    q: BufId,
    amax: BufId,
    to: DType,
    saturate: bool,
}

/// `dims` as (product of dims before `lo`, product of `lo..hi`, product after `hi`).
fn split3(dims: &[u64], lo: usize, hi: usize) -> (u64, u64, u64) {
    (
        dims[..lo].iter().product(),
        dims[lo..hi].iter().product(),
        dims[hi..].iter().product(),
    )
}

/// Element strides that read `input` broadcast to `out` (numpy rules, 0 on broadcast dims).
fn broadcast_strides(input: &[u64], out: &[u64]) -> Vec<i64> {
    let mut strides = vec![0i64; out.len()];
    let mut stride = 1i64;
    for (k, &d) in input.iter().enumerate().rev() {
        let o = out.len() - (input.len() - k);
        strides[o] = if d == 1 { 0 } else { stride };
        stride *= d as i64;
    }
    strides
}

/// Converts a lowering failure of `step` into the runtime's error.
pub(crate) fn step_error(step: &Step, message: String) -> RuntimeError {
    RuntimeError::node(&step.node, step.op.name(), message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_pads_follow_onnx_auto_pad() {
        // NOTSET reads [begin_h, begin_w, end_h, end_w].
        assert_eq!(
            window_pads(AutoPad::NotSet, &[1, 2, 3, 4], 0, 2, 8, 8, 3, 1, 1),
            (1, 3)
        );
        assert_eq!(
            window_pads(AutoPad::NotSet, &[1, 2, 3, 4], 1, 2, 8, 8, 3, 1, 1),
            (2, 4)
        );
        assert_eq!(
            window_pads(AutoPad::Valid, &[], 0, 2, 8, 6, 3, 1, 1),
            (0, 0)
        );
        // SAME: total = (out-1)·stride + (k-1)·dilation + 1 − in = 7 + 2 + 1 − 8 = 2 (k=3, s=1);
        // with in 7, s 2, out 4: 6 + 3 + 1 − 7 = 3, upper puts the odd one at the end.
        assert_eq!(
            window_pads(AutoPad::SameUpper, &[], 0, 2, 8, 8, 3, 1, 1),
            (1, 1)
        );
        assert_eq!(
            window_pads(AutoPad::SameUpper, &[], 0, 2, 7, 4, 4, 2, 1),
            (1, 2)
        );
        assert_eq!(
            window_pads(AutoPad::SameLower, &[], 0, 2, 7, 4, 4, 2, 1),
            (2, 1)
        );
    }

    #[test]
    fn broadcast_strides_and_splits() {
        assert_eq!(broadcast_strides(&[3, 1], &[2, 3, 4]), vec![0, 1, 0]);
        assert_eq!(broadcast_strides(&[2, 3, 4], &[2, 3, 4]), vec![12, 4, 1]);
        assert_eq!(broadcast_strides(&[1], &[5]), vec![0]);
        assert_eq!(split3(&[2, 3, 4, 5], 1, 3), (2, 12, 5));
        assert_eq!(split3(&[], 0, 0), (1, 1, 1));
        assert_eq!(contiguous_strides(&[2, 3, 4]), vec![12, 4, 1]);
    }

    #[test]
    fn kernel_argument_structs_match_their_c_layouts() {
        assert_eq!(std::mem::size_of::<StridedView>(), 8 + 3 * 64 + 16);
        assert_eq!(std::mem::size_of::<ScaleParams>(), 20);
        assert_eq!(std::mem::size_of::<ScaleUpdateDesc>(), 56);
        assert_eq!(std::mem::size_of::<Conv2d>(), 13 * 8);
        assert_eq!(std::mem::size_of::<Pool2d>(), 7 * 8 + 8 * 8 + 8);
    }

    #[test]
    fn scale_params_use_fp8c_cores_margin_rounding() {
        let p = scale_params(DType::F8E5M2, 0.5, AmaxSource::HistoryMostRecent, 0.0, true).unwrap();
        assert_eq!(p.fmt_max, 57344.0);
        assert_eq!(p.pow2_margin, 2f64.powf(0.5) as f32);
        assert_eq!((p.source, p.power_2), (1, 1));
        assert!(scale_params(DType::F32, 0.0, AmaxSource::HistoryMax, 0.0, false).is_err());
        assert!(scale_params(DType::F8E4M3, f32::NAN, AmaxSource::HistoryMax, 0.0, false).is_err());
    }
}
