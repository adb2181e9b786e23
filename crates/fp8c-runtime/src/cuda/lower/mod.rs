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
//!
//! This file holds the [`Lowerer`], the helpers every family shares and the dispatch: one
//! module per op family (the families of `fp8c_ir::Op`, same names), each matching its family
//! exhaustively and answering [`support`] for it. An op without a lowering has an explicit arm
//! returning [`not_supported`] with the reason its family's `support` states.

mod attention;
mod block;
mod conv;
mod elementwise;
mod fp8;
mod fused;
mod linalg;
mod loss;
mod movement;
mod normalize;
mod optim;
mod pool;
mod reduce;

use crate::backend::RuntimeError;
use crate::cuda::device::{Device, KernelArgs, Launch};
use crate::cuda::gemm::{GemmCall, Lt};
use crate::cuda::kernels::{KernelFile, dtype_word, is_kernel_float};
use crate::program::{BufId, Buffer, BufferKind, Program, Step};
use fp8c_ir::window::{self, WindowAttrs};
use fp8c_ir::{AmaxSource, DType, Op, OpView, Support, Tensor};

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
/// indices, labels), the index of its error flag (one at most per step).
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
    /// Device address of the error-flag array (room for one i32 per step; the flags are handed
    /// out in step order to the steps that take one).
    pub err_base: u64,
    /// Flags handed out so far.
    pub err_count: usize,
}

pub use attention::{MAX_HEAD_DIM as MAX_ATTENTION_HEAD_DIM, fits as attention_fits};

type R<T> = Result<T, String>;

const BLOCK: u32 = 256;

/// Whether the CUDA backend runs `op`, or why not (available without a GPU). `No` names an op
/// this backend has no lowering for, whatever the shapes; an op answered `Yes` may still be
/// refused in `prepare` for its shapes or dtypes (the error says which). A step refused for a
/// `No` op fails with the very reason given here.
///
/// ```
/// use fp8c_ir::{E8m0Round, Op, PadMode, Support};
/// use fp8c_runtime::cuda::support;
///
/// assert_eq!(support(&Op::MatMul), Support::Yes);
/// assert_eq!(support(&Op::Range), Support::Yes);
/// let block = Op::BlockDequantize { to: fp8c_ir::DType::F32, rows: 1, cols: 32 };
/// assert_eq!(support(&block), Support::Yes);
/// let e8m0 = Op::CastE8m0 { round: E8m0Round::Down, saturate: true };
/// assert!(matches!(support(&e8m0), Support::No(why) if !why.is_empty()));
/// assert_eq!(support(&Op::Pad { mode: PadMode::Reflect }), Support::Yes);
/// ```
pub fn support(op: &Op) -> Support {
    match op.view() {
        // Interface ops become buffers (inputs, resident params, state and constants).
        OpView::Interface(_) => Support::Yes,
        OpView::Elementwise(e) => elementwise::support(e),
        OpView::Linalg(l) => linalg::support(l),
        OpView::Conv(c) => conv::support(c),
        OpView::Pool(p) => pool::support(p),
        OpView::Normalize(n) => normalize::support(n),
        OpView::Reduce(r) => reduce::support(r),
        OpView::Movement(m) => movement::support(m),
        OpView::Fp8(f) => fp8::support(f),
        OpView::Loss(l) => loss::support(l),
        OpView::Optim(o) => optim::support(o),
        OpView::Fused(f) => fused::support(f),
        OpView::Attention(a) => attention::support(a),
    }
}

/// The error of a step whose op has no CUDA lowering; `reason` is the one [`support`] gives.
fn not_supported(op: &Op, reason: &str) -> String {
    format!("`{}` is not supported on CUDA yet: {reason}", op.name())
}

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
        DType::F8E4M3 | DType::F8E5M2 => word(d),
        other => Err(format!("{other} is not an FP8 type")),
    }
}

/// The kernel-name word of an index or label tensor (i64, i32); `what` names it in the error.
fn index_word(d: DType, what: &str) -> R<&'static str> {
    match d {
        DType::I64 | DType::I32 => word(d),
        other => Err(format!("{what} of {other} are not supported on CUDA")),
    }
}

fn sat_word(saturate: bool) -> &'static str {
    if saturate { "sat" } else { "nosat" }
}

/// `dims` as (product of dims before `lo`, product of `lo..hi`, product after `hi`).
fn split3(dims: &[u64], lo: usize, hi: usize) -> (u64, u64, u64) {
    (
        dims[..lo].iter().product(),
        dims[lo..hi].iter().product(),
        dims[hi..].iter().product(),
    )
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

/// The scale rule of `compute_scale` and `batched_scale_update` as `scale_update.cu` reads it.
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

/// One spatial axis of a 2-D window op, resolved, in the integer type the kernels take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct WindowAxis {
    stride: i64,
    dilation: i64,
    pad_begin: i64,
    pad_end: i64,
}

/// The two spatial axes of a 2-D window op (input sizes `spatial`, kernel sizes `kernel`),
/// resolved by the IR's window geometry (`fp8c_ir::window`: ONNX auto_pad, defaults), the one
/// the shapes were inferred with and the CPU reference runs.
fn window_2d(spatial: [u64; 2], kernel: [i64; 2], w: &WindowAttrs<'_>) -> R<[WindowAxis; 2]> {
    let size = |v: u64| usize::try_from(v).map_err(|_| format!("size {v} does not fit usize"));
    let k = |v: i64| usize::try_from(v).map_err(|_| format!("kernel size {v} is negative"));
    let axes = window::axes(
        &[size(spatial[0])?, size(spatial[1])?],
        &[k(kernel[0])?, k(kernel[1])?],
        w,
    )
    .map_err(|e| e.to_string())?;
    let resolved = |a: &window::Axis| WindowAxis {
        stride: a.stride as i64,
        dilation: a.dilation as i64,
        pad_begin: a.pad_begin as i64,
        pad_end: a.pad_end as i64,
    };
    Ok([resolved(&axes[0]), resolved(&axes[1])])
}

/// A 1-D window op ([N, C, L]) as the 2-D one over [N, C, 1, L] the kernels run: the dims
/// with a unit height, and the attributes with a unit kernel, stride and dilation and no
/// padding along it. Other ranks come back unchanged.
pub(super) struct Lifted1d {
    pub dims: Vec<Vec<u64>>,
    pub kernel: Vec<i64>,
    strides: Vec<i64>,
    pads: Vec<i64>,
    dilations: Vec<i64>,
}

impl Lifted1d {
    /// Lifts `dims` (x, w or y; each of rank 3 gets a unit dim at 2) and the window `w`
    /// with kernel `kernel` when `one_d`.
    pub fn new(one_d: bool, dims: &[&[u64]], kernel: &[i64], w: &WindowAttrs<'_>) -> Lifted1d {
        if !one_d {
            return Lifted1d {
                dims: dims.iter().map(|d| d.to_vec()).collect(),
                kernel: kernel.to_vec(),
                strides: w.strides.to_vec(),
                pads: w.pads.to_vec(),
                dilations: w.dilations.to_vec(),
            };
        }
        let unit = |v: &[i64]| -> Vec<i64> {
            if v.is_empty() {
                vec![]
            } else {
                std::iter::once(1).chain(v.iter().copied()).collect()
            }
        };
        Lifted1d {
            dims: dims
                .iter()
                .map(|d| {
                    let mut d = d.to_vec();
                    if d.len() == 3 {
                        d.insert(2, 1);
                    }
                    d
                })
                .collect(),
            kernel: unit(kernel),
            strides: unit(w.strides),
            pads: match w.pads {
                [b, e] => vec![0, *b, 0, *e],
                other => other.to_vec(),
            },
            dilations: unit(w.dilations),
        }
    }

    /// The (lifted) window attributes.
    pub fn window(&self, w: &WindowAttrs<'_>) -> WindowAttrs<'_> {
        WindowAttrs {
            strides: &self.strides,
            pads: &self.pads,
            dilations: &self.dilations,
            auto_pad: w.auto_pad,
            ceil_mode: w.ceil_mode,
        }
    }
}

/// Converts a lowering failure of `step` into the runtime's error.
pub(crate) fn step_error(step: &Step, message: String) -> RuntimeError {
    RuntimeError::node(&step.node, step.op.name(), message)
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

    /// The family's lowering of a step whose inputs are not all constants.
    fn lower_op(&mut self, step: &Step, flag: &mut Option<usize>) -> R<Vec<Action>> {
        match step.op.view() {
            OpView::Interface(_) => Err(format!(
                "internal: `{}` is a buffer of the program, never a step",
                step.op.name()
            )),
            OpView::Elementwise(e) => self.lower_elementwise(e, step, flag),
            OpView::Linalg(l) => self.lower_linalg(l, step),
            OpView::Conv(c) => self.lower_conv(c, step),
            OpView::Pool(p) => self.lower_pool(p, step),
            OpView::Normalize(n) => self.lower_normalize(n, step),
            OpView::Reduce(r) => self.lower_reduce(r, step),
            OpView::Movement(m) => self.lower_movement(m, step, flag),
            OpView::Fp8(f) => self.lower_fp8(f, step),
            OpView::Loss(l) => self.lower_loss(l, step, flag),
            OpView::Optim(o) => self.lower_optim(o, step),
            OpView::Fused(f) => self.lower_fused(f, step),
            OpView::Attention(a) => self.lower_attention(a, step),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_2d_follows_onnx_auto_pad() {
        use fp8c_ir::AutoPad;
        let attrs = |pads, strides, auto_pad| WindowAttrs {
            strides,
            pads,
            dilations: &[],
            auto_pad,
            ceil_mode: false,
        };
        let pads = |w: [WindowAxis; 2]| w.map(|a| (a.pad_begin, a.pad_end));
        // NOTSET reads [begin_h, begin_w, end_h, end_w].
        let w = window_2d([8, 8], [3, 3], &attrs(&[1, 2, 3, 4], &[], AutoPad::NotSet));
        assert_eq!(pads(w.unwrap()), [(1, 3), (2, 4)]);
        let w = window_2d([8, 8], [3, 3], &attrs(&[], &[], AutoPad::Valid));
        assert_eq!(pads(w.unwrap()), [(0, 0), (0, 0)]);
        // SAME: total = (out-1)·stride + (k-1)·dilation + 1 − in = 7 + 2 + 1 − 8 = 2 (k=3, s=1);
        // with in 7, s 2, out 4: 6 + 3 + 1 − 7 = 3, upper puts the odd one at the end.
        let w = window_2d([8, 8], [3, 3], &attrs(&[], &[], AutoPad::SameUpper));
        assert_eq!(pads(w.unwrap()), [(1, 1), (1, 1)]);
        let w = window_2d([7, 7], [4, 4], &attrs(&[], &[2, 2], AutoPad::SameUpper)).unwrap();
        assert_eq!(pads(w), [(1, 2), (1, 2)]);
        assert_eq!((w[0].stride, w[0].dilation), (2, 1));
        let w = window_2d([7, 7], [4, 4], &attrs(&[], &[2, 2], AutoPad::SameLower));
        assert_eq!(pads(w.unwrap()), [(2, 1), (2, 1)]);
        assert!(window_2d([8, 8], [-1, 3], &attrs(&[], &[], AutoPad::NotSet)).is_err());
    }

    #[test]
    fn strides_and_splits() {
        assert_eq!(split3(&[2, 3, 4, 5], 1, 3), (2, 12, 5));
        assert_eq!(split3(&[], 0, 0), (1, 1, 1));
        assert_eq!(contiguous_strides(&[2, 3, 4]), vec![12, 4, 1]);
    }

    #[test]
    fn scale_params_use_fp8c_cores_margin_rounding() {
        assert_eq!(std::mem::size_of::<ScaleParams>(), 20);
        let p = scale_params(DType::F8E5M2, 0.5, AmaxSource::HistoryMostRecent, 0.0, true).unwrap();
        assert_eq!(p.fmt_max, 57344.0);
        assert_eq!(p.pow2_margin, 2f64.powf(0.5) as f32);
        assert_eq!((p.source, p.power_2), (1, 1));
        assert!(scale_params(DType::F32, 0.0, AmaxSource::HistoryMax, 0.0, false).is_err());
        assert!(scale_params(DType::F8E4M3, f32::NAN, AmaxSource::HistoryMax, 0.0, false).is_err());
    }

    /// The ops CUDA has no lowering for (with the examples' attributes); a new lowering moves
    /// its op out of this list.
    const NOT_ON_CUDA: &[&str] = &["cum_sum", "arg_max", "arg_min", "top_k", "cast_e8m0"];

    #[test]
    fn every_op_gets_an_answer_and_every_no_a_reason() {
        let mut no = Vec::new();
        for op in Op::examples() {
            if let Support::No(why) = support(&op) {
                assert!(
                    !why.trim().is_empty(),
                    "`{}` has an empty reason",
                    op.name()
                );
                assert!(
                    not_supported(&op, why).ends_with(why),
                    "the lowering error carries the reason"
                );
                no.push(op.name());
            }
        }
        assert_eq!(no, NOT_ON_CUDA);
    }

    #[test]
    fn support_follows_the_attributes_the_kernels_need() {
        use fp8c_ir::PadMode;
        // Both mods: fmod=1 on floats and integers, fmod=0 (Python's) on integers.
        assert_eq!(support(&Op::Mod { fmod: true }), Support::Yes);
        assert_eq!(support(&Op::Mod { fmod: false }), Support::Yes);
        assert_eq!(
            support(&Op::Pad {
                mode: PadMode::Constant
            }),
            Support::Yes
        );
        for mode in [PadMode::Reflect, PadMode::Edge, PadMode::Wrap] {
            assert_eq!(support(&Op::Pad { mode }), Support::Yes);
        }
        // Cast has its own kernels although its row has no template.
        let cast = Op::Cast {
            to: DType::F8E4M3,
            saturate: true,
        };
        assert_eq!(support(&cast), Support::Yes);
    }
}
