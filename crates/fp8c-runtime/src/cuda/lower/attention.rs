//! The attention family on CUDA: `attention` and `attention_grad` on `kernels/attention.cu`
//! (FlashAttention-2; the file's header states the tiling). The forward is one launch; the
//! backward three: the `D = Σ dO∘O` pre-pass into a scratch buffer, dq over key tiles, and
//! dk / dv over the query tiles (and grouped query heads) that see each key tile.
//!
//! The kernels take f32, bf16 and f16 (f32 accumulation), any mask that broadcasts to
//! `[B, H, Tq, Tk]` (read through its strides, never expanded), causal, grouped KV heads and
//! head sizes up to [`MAX_HEAD_DIM`]. [`fits`] says which nodes they take from the types
//! alone; the session runs the unfused decomposition (`fp8c_passes::attention::decompose`)
//! of the others on a CUDA device, so a CUDA run still computes every attention.

use super::{Action, Lowerer, R, float_word};
use crate::cuda::device::KernelArgs;
use crate::cuda::kernels;
use crate::program::Step;
use fp8c_ir::attention::AttnDims;
use fp8c_ir::{AttentionOp, DType, Dim, Support, TensorType};

/// The largest head size (of q and k, or of v) the kernels take.
pub const MAX_HEAD_DIM: u64 = 256;

/// Why a node with f64 (or other non-kernel) inputs is not run by the kernels.
const NOT_A_KERNEL_FLOAT: &str = "the CUDA attention kernels take f32, bf16 and f16 (the session runs the unfused decomposition)";
/// Why a node with a large head is not run by the kernels.
const HEAD_TOO_LARGE: &str = "the CUDA attention kernels take head sizes up to 256 (the session runs the unfused decomposition)";

/// Threads per block of the tile kernels (`ATT_THREADS`).
const ATT_THREADS: u32 = 128;

/// Whether CUDA runs `op` (see [`super::support`]): every op of the family has a kernel;
/// [`fits`] says which inputs it takes.
pub(crate) fn support(op: AttentionOp<'_>) -> Support {
    match op {
        AttentionOp::Attention { .. } | AttentionOp::AttentionGrad { .. } => Support::Yes,
        AttentionOp::__Lifetime(never, _) => match never {},
    }
}

/// Whether the kernels take an `attention` or `attention_grad` node whose inputs have these
/// types (q, k, v first), or the reason they do not: a dtype other than f32, bf16 and f16, or
/// a head size above [`MAX_HEAD_DIM`]. Every mask that type-checks is taken. Sizes not known
/// yet count as fitting (`prepare` checks the concrete ones with the same rule).
pub fn fits(inputs: &[&TensorType]) -> Support {
    let [q, _, v, ..] = inputs else {
        return Support::Yes;
    };
    if !kernels::is_kernel_float(q.dtype) {
        return Support::No(NOT_A_KERNEL_FLOAT);
    }
    let big = |t: &TensorType| matches!(t.shape.last(), Some(Dim::Known(d)) if *d > MAX_HEAD_DIM);
    if big(q) || big(v) {
        return Support::No(HEAD_TOO_LARGE);
    }
    Support::Yes
}

/// The head-size bucket of the kernel names (`_d64`, `_d128`, `_d256`).
fn bucket(d: &AttnDims) -> R<u32> {
    match d.head_dim.max(d.v_dim) {
        0..=64 => Ok(64),
        65..=128 => Ok(128),
        129..=256 => Ok(256),
        _ => Err(HEAD_TOO_LARGE.to_string()),
    }
}

/// The tile size of a bucket (`AttCfg<DM>::B`).
fn tile(dm: u32) -> u64 {
    match dm {
        64 => 32,
        128 => 16,
        _ => 8,
    }
}

fn dim32(v: usize, what: &str) -> R<u32> {
    u32::try_from(v).map_err(|_| format!("{what} {v} does not fit the kernels' 32-bit sizes"))
}

impl Lowerer<'_> {
    pub(super) fn lower_attention(&mut self, a: AttentionOp<'_>, step: &Step) -> R<Vec<Action>> {
        let types: Vec<&TensorType> = step.inputs.iter().map(|&b| &self.buf(b).ty).collect();
        if let Support::No(why) = fits(&types) {
            return Err(why.to_string());
        }
        match a {
            AttentionOp::Attention { scale, causal } => self.attention_fwd(step, *scale, *causal),
            AttentionOp::AttentionGrad { scale, causal } => {
                self.attention_bwd(step, *scale, *causal)
            }
            AttentionOp::__Lifetime(never, _) => match never {},
        }
    }

    /// The geometry of q, k, v and the mask (the input at `mask_at`, if there is one; the
    /// lse at `lse_at`), the dtype word, and the common kernel arguments (ATT_PARAMS of the kernel file).
    fn attention_geometry(
        &self,
        step: &Step,
        mask_at: usize,
        lse_at: Option<usize>,
        scale: f64,
        causal: bool,
    ) -> R<(AttnDims, &'static str, KernelArgs)> {
        let ins = &step.inputs;
        let dims_of = |i: usize| &self.buf(ins[i]).dims;
        let d = AttnDims::of(dims_of(0), dims_of(1), dims_of(2))?;
        let dt = self.buf(ins[0]).ty.dtype;
        let t = float_word(dt)?;
        // Every input has q's dtype but the backward's lse (input 4), which is f32.
        for (i, &b) in ins.iter().enumerate().skip(1) {
            let want = if lse_at == Some(i) { DType::F32 } else { dt };
            let got = self.buf(b).ty.dtype;
            if got != want {
                return Err(format!("input {i} is {got}, expected {want}"));
            }
        }
        let (mask, strides) = match ins.get(mask_at) {
            Some(&m) => (self.ptr(m), d.mask_strides(&self.buf(m).dims)?),
            None => (0, [0; 4]),
        };
        let mut a = KernelArgs::new();
        a.u32(dim32(d.batch, "batch")?)
            .u32(dim32(d.heads, "heads")?)
            .u32(dim32(d.kv_heads, "KV heads")?)
            .u32(dim32(d.q_len, "query length")?)
            .u32(dim32(d.kv_len, "key length")?)
            .u32(dim32(d.head_dim, "head size")?)
            .u32(dim32(d.v_dim, "value head size")?)
            .ptr(mask);
        for s in strides {
            a.u64(s as u64);
        }
        a.f32(scale as f32).i32(i32::from(causal));
        Ok((d, t, a))
    }

    /// A tile kernel over `tiles` blocks of 128 threads.
    fn attention_launch(&self, name: &str, tiles: u64, args: KernelArgs) -> R<Action> {
        let grid = u32::try_from(tiles)
            .map_err(|_| format!("{tiles} tiles exceed one launch's grid (2^32 blocks)"))?;
        self.launch(kernels::ATTENTION, name, grid, (ATT_THREADS, 1, 1), args)
    }

    /// `attention`: o and lse in one launch.
    fn attention_fwd(&self, step: &Step, scale: f64, causal: bool) -> R<Vec<Action>> {
        let (ins, outs) = (&step.inputs, &step.outputs);
        let (d, t, geo) = self.attention_geometry(step, 3, None, scale, causal)?;
        if d.batch * d.heads * d.q_len == 0 {
            return Ok(vec![]);
        }
        let dm = bucket(&d)?;
        let mut a = KernelArgs::new();
        a.ptr(self.ptr(ins[0]))
            .ptr(self.ptr(ins[1]))
            .ptr(self.ptr(ins[2]))
            .ptr(self.ptr(outs[0]))
            .ptr(self.ptr(outs[1]));
        a.extend(&geo);
        let tiles = (d.batch * d.heads) as u64 * (d.q_len as u64).div_ceil(tile(dm));
        Ok(vec![self.attention_launch(
            &format!("fp8c_attention_fwd_{t}_d{dm}"),
            tiles,
            a,
        )?])
    }

    /// `attention_grad`: the D pre-pass, dq, then dk and dv.
    fn attention_bwd(&self, step: &Step, scale: f64, causal: bool) -> R<Vec<Action>> {
        let (ins, outs) = (&step.inputs, &step.outputs);
        let (d, t, geo) = self.attention_geometry(step, 6, Some(4), scale, causal)?;
        let (q, k, v, o, lse, d_o) = (ins[0], ins[1], ins[2], ins[3], ins[4], ins[5]);
        let (dq, dk, dv) = (outs[0], outs[1], outs[2]);
        let mut actions = Vec::new();
        let rows = (d.batch * d.heads * d.q_len) as u64;
        if rows == 0 || d.kv_len == 0 {
            // No query or no key: every gradient is zero.
            for b in [dq, dk, dv] {
                let bytes = self.buf(b).bytes;
                if bytes > 0 {
                    actions.push(Action::Memset8 {
                        ptr: self.ptr(b),
                        value: 0,
                        bytes,
                    });
                }
            }
            return Ok(actions);
        }
        let dm = bucket(&d)?;
        let delta = self.alloc(rows * 4)?;
        let mut a = KernelArgs::new();
        a.ptr(self.ptr(o))
            .ptr(self.ptr(d_o))
            .ptr(delta)
            .u64(rows)
            .u32(dim32(d.v_dim, "value head size")?);
        let warps_per_block = 256 / 32;
        let grid = rows
            .div_ceil(warps_per_block)
            .min(u64::from(self.dev.info.sm_count) * 16) as u32;
        actions.push(self.launch(
            kernels::ATTENTION,
            &format!("fp8c_attention_bwd_dot_{t}"),
            grid,
            (256, 1, 1),
            a,
        )?);
        let common = |a: &mut KernelArgs| {
            a.ptr(self.ptr(q))
                .ptr(self.ptr(k))
                .ptr(self.ptr(v))
                .ptr(self.ptr(d_o))
                .ptr(self.ptr(lse))
                .ptr(delta);
        };
        let mut a = KernelArgs::new();
        common(&mut a);
        a.ptr(self.ptr(dq));
        a.extend(&geo);
        let b = tile(dm);
        let q_tiles = (d.batch * d.heads) as u64 * (d.q_len as u64).div_ceil(b);
        actions.push(self.attention_launch(
            &format!("fp8c_attention_bwd_dq_{t}_d{dm}"),
            q_tiles,
            a,
        )?);
        let mut a = KernelArgs::new();
        common(&mut a);
        a.ptr(self.ptr(dk)).ptr(self.ptr(dv));
        a.extend(&geo);
        let k_tiles = (d.batch * d.kv_heads) as u64 * (d.kv_len as u64).div_ceil(b);
        actions.push(self.attention_launch(
            &format!("fp8c_attention_bwd_dkdv_{t}_d{dm}"),
            k_tiles,
            a,
        )?);
        Ok(actions)
    }
}
