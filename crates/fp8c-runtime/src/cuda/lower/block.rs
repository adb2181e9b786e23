//! Block-scaled FP8 on CUDA (issue #16): `block_quantize` and `block_dequantize` as the
//! per-tile kernels of `kernels/block_scaling.cu`, and `block_scaled_matmul` as cuBLASLt's
//! block-scaled FP8 GEMM where the tiling is one of its Hopper modes, else the exact kernel.
//!
//! cuBLASLt's modes (12.9+, sm_90; [`ScaleMode`]), in the IR's terms (`a_rows`, `k_block`,
//! `b_cols`):
//! - rowwise, one K block (1, 0 or ≥ K, 1): `OUTER_VEC` on both operands (torchao's rowwise);
//! - (1, 128, 1): `VEC128` on both (TE's `Float8BlockScaling` for dgrad-like GEMMs);
//! - (1, 128, 128): `VEC128` on A, `BLK128x128` on B (DeepSeek-V3's activations × weights).
//!
//! The scales are relaid from the IR's grids (`[ceil(M/a_rows), KB]`, `[KB, ceil(N/b_cols)]`)
//! into cuBLASLt's layouts with the transpose kernels, and B's codes are transposed to
//! `[N, K]` (cuBLASLt's TN). Its summation order is its own, so it agrees with the CPU within
//! a tolerance (measured on an H100 by `cuda_vs_cpu/main.rs`); every other tiling (MXFP8's 1×32,
//! 128-row tiles of A, shapes cuBLASLt refuses) runs the exact kernel, which sums in the CPU's
//! order and matches it bit for bit.

use super::{Action, Lowerer, R, float_word, fp8_word, numel, sat_word};
use crate::cuda::device::KernelArgs;
use crate::cuda::gemm::{GemmSpec, ScaleMode};
use crate::cuda::kernels;
use crate::program::BufId;
use fp8c_ir::{BlockScaling, DType};

/// `Tiling` of block_scaling.cu: a `[mats, r, c]` tensor in `tr × tc` tiles, `nr × nc` per
/// matrix.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Tiling {
    mats: u64,
    r: u64,
    c: u64,
    tr: u64,
    tc: u64,
    nr: u64,
    nc: u64,
}

impl Tiling {
    /// The tiling of `dims` (rank ≥ 2) by `rows` × `cols` (0: the whole axis): the CPU
    /// reference's own ([`fp8c_eval::BlockTiles`]).
    fn new(dims: &[u64], rows: i64, cols: i64) -> R<Tiling> {
        let t = fp8c_eval::BlockTiles::of(dims, rows, cols)?;
        let w = |v: usize| v as u64;
        Ok(Tiling {
            mats: w(t.mats),
            r: w(t.r),
            c: w(t.c),
            tr: w(t.tr),
            tc: w(t.tc),
            nr: w(t.nr),
            nc: w(t.nc),
        })
    }

    fn tiles(&self) -> u64 {
        self.mats * self.nr * self.nc
    }
}

/// `BlockGemm` of block_scaling.cu.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct BlockGemm {
    m: u64,
    n: u64,
    k: u64,
    kt: u64,
    kblocks: u64,
    a_tr: u64,
    b_tc: u64,
    b_nc: u64,
}

/// cuBLASLt's modes for (a_rows, k_block, b_cols) over K (module docs), if any.
fn native_modes(a_rows: i64, k_block: i64, b_cols: i64, k: u64) -> Option<(ScaleMode, ScaleMode)> {
    let one_block = k_block == 0 || u64::try_from(k_block).is_ok_and(|b| b >= k);
    match (a_rows, b_cols) {
        (1, 1) if one_block => Some((ScaleMode::OuterVec, ScaleMode::OuterVec)),
        (1, 1) if k_block == 128 => Some((ScaleMode::Vec128, ScaleMode::Vec128)),
        (1, 128) if k_block == 128 => Some((ScaleMode::Vec128, ScaleMode::Blk128)),
        _ => None,
    }
}

impl Lowerer<'_> {
    /// block_quantize x -> (q, scale_inv): one thread block per tile.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn block_quantize(
        &self,
        x: BufId,
        q: BufId,
        scale_inv: BufId,
        (to, saturate): (DType, bool),
        (rows, cols): (i64, i64),
        scaling: BlockScaling,
        epsilon: f32,
    ) -> R<Vec<Action>> {
        let from = float_word(self.buf(x).ty.dtype)?;
        if !(epsilon.is_finite() && epsilon >= 0.0) {
            return Err(format!("epsilon={epsilon} must be finite and ≥ 0"));
        }
        let t = Tiling::new(&self.buf(x).dims, rows, cols)?;
        if t.tiles() == 0 {
            return Ok(vec![]);
        }
        let name = format!(
            "fp8c_block_quantize_{from}_{}_{}",
            fp8_word(to)?,
            sat_word(saturate)
        );
        let mut a = KernelArgs::new();
        a.ptr(self.ptr(x))
            .ptr(self.ptr(q))
            .ptr(self.ptr(scale_inv))
            .push(t)
            .i32(match scaling {
                BlockScaling::Fp32 => 0,
                BlockScaling::Pow2 => 1,
                BlockScaling::E8m0 => 2,
            })
            .f32(epsilon);
        let grid = t.tiles().min(u64::from(self.dev.info.sm_count) * 32) as u32;
        Ok(vec![self.launch(
            kernels::BLOCK_SCALING,
            &name,
            grid,
            (super::BLOCK, 1, 1),
            a,
        )?])
    }

    /// block_dequantize (q, scale_inv) -> y.
    pub(super) fn block_dequantize(
        &self,
        q: BufId,
        scale_inv: BufId,
        y: BufId,
        (rows, cols): (i64, i64),
    ) -> R<Vec<Action>> {
        let fmt = fp8_word(self.buf(q).ty.dtype)?;
        let out = float_word(self.buf(y).ty.dtype)?;
        let t = Tiling::new(&self.buf(q).dims, rows, cols)?;
        let n = numel(self.buf(q));
        if n == 0 {
            return Ok(vec![]);
        }
        if numel(self.buf(scale_inv)) != t.tiles() {
            return Err(format!(
                "scale_inv has {} elements for {} tiles",
                numel(self.buf(scale_inv)),
                t.tiles()
            ));
        }
        let mut a = KernelArgs::new();
        a.ptr(self.ptr(q))
            .ptr(self.ptr(scale_inv))
            .ptr(self.ptr(y))
            .push(t);
        Ok(vec![self.launch_1d(
            kernels::BLOCK_SCALING,
            &format!("fp8c_block_dequantize_{fmt}_{out}"),
            n,
            4,
            a,
        )?])
    }

    /// block_scaled_matmul (qa, qb, sa, sb) -> d (module docs).
    pub(super) fn block_scaled_matmul(
        &self,
        ins: &[BufId],
        d: BufId,
        out: DType,
        (k_block, a_rows, b_cols): (i64, i64, i64),
    ) -> R<Vec<Action>> {
        let (qa, qb, sa, sb) = (ins[0], ins[1], ins[2], ins[3]);
        let (ta, tb) = (self.buf(qa).ty.dtype, self.buf(qb).ty.dtype);
        let (fa, fb) = (fp8_word(ta)?, fp8_word(tb)?);
        let out_word = float_word(out)?;
        let (ad, bd) = (self.buf(qa).dims.clone(), self.buf(qb).dims.clone());
        let ([m, k], [k2, n]) = (ad.as_slice(), bd.as_slice()) else {
            return Err(format!("qa and qb must be matrices, got {ad:?} and {bd:?}"));
        };
        let (m, k, n) = (*m, *k, *n);
        if *k2 != k {
            return Err(format!(
                "qa [M, K] and qb [K, N] disagree on K: {k} and {k2}"
            ));
        }
        if m * n == 0 {
            return Ok(vec![]);
        }
        let ta_tiles = Tiling::new(&ad, a_rows, k_block)?;
        let tb_tiles = Tiling::new(&bd, k_block, b_cols)?;
        if numel(self.buf(sa)) != ta_tiles.tiles() || numel(self.buf(sb)) != tb_tiles.tiles() {
            return Err("the scale_inv tensors do not match the tiling".into());
        }
        let native = native_modes(a_rows, k_block, b_cols, k).filter(|_| {
            self.lt
                .is_some_and(|lt| lt.has_block_scaling(self.dev.info.compute_capability))
        });
        if let Some(modes) = native
            && let Ok(actions) = self.block_gemm_cublaslt(ins, d, out, (m, n, k), modes)
        {
            return Ok(actions);
        }
        // The exact kernel, in the CPU's order.
        let g = BlockGemm {
            m,
            n,
            k,
            kt: ta_tiles.tc,
            kblocks: ta_tiles.nc,
            a_tr: ta_tiles.tr,
            b_tc: tb_tiles.tc,
            b_nc: tb_tiles.nc,
        };
        let mut a = KernelArgs::new();
        a.ptr(self.ptr(qa))
            .ptr(self.ptr(qb))
            .ptr(self.ptr(sa))
            .ptr(self.ptr(sb))
            .ptr(self.ptr(d))
            .push(g);
        Ok(vec![self.launch_1d(
            kernels::BLOCK_SCALING,
            &format!("fp8c_block_scaled_matmul_{fa}_{fb}_{out_word}"),
            m * n,
            1,
            a,
        )?])
    }

    /// The cuBLASLt route: B's codes to `[n, k]`, the scales into cuBLASLt's layouts, one
    /// planned GEMM. An `Err` (cuBLASLt's rules or its heuristic refuse) sends the caller to
    /// the exact kernel.
    fn block_gemm_cublaslt(
        &self,
        ins: &[BufId],
        d: BufId,
        out: DType,
        (m, n, k): (u64, u64, u64),
        (a_mode, b_mode): (ScaleMode, ScaleMode),
    ) -> R<Vec<Action>> {
        let (qa, qb, sa, sb) = (ins[0], ins[1], ins[2], ins[3]);
        let kb = if a_mode == ScaleMode::OuterVec {
            1
        } else {
            k / 128
        };
        let mut actions = Vec::new();
        let bt = self.alloc(n * k)?;
        actions.push(self.transpose_2d(1, self.ptr(qb), bt, k, n)?);
        // A: [m, KB] -> (row, kb) at kb·m + row; per row it is already that.
        let a_scale = if a_mode == ScaleMode::Vec128 {
            let p = self.alloc(m * kb * 4)?;
            actions.push(self.transpose_2d(4, self.ptr(sa), p, m, kb)?);
            p
        } else {
            self.ptr(sa)
        };
        // B: [KB, NB]; Vec128 and OuterVec read it as is, Blk128 as [NB, KB].
        let b_scale = if b_mode == ScaleMode::Blk128 {
            let nb = n.div_ceil(128);
            let p = self.alloc(nb * kb * 4)?;
            actions.push(self.transpose_2d(4, self.ptr(sb), p, kb, nb)?);
            p
        } else {
            self.ptr(sb)
        };
        let mut spec = GemmSpec::plain(
            m,
            n,
            k,
            self.ptr(qa),
            bt,
            self.ptr(d),
            self.buf(qa).ty.dtype,
            out,
        );
        spec.b_type = self.buf(qb).ty.dtype;
        spec.trans_b = true;
        spec.a_scale = Some(a_scale);
        spec.b_scale = Some(b_scale);
        spec.a_scale_mode = a_mode;
        spec.b_scale_mode = b_mode;
        let gemm = self.gemm(&spec).inspect_err(|why| {
            tracing::info!(
                "block-scaled FP8 GEMM {m}x{n}x{k}: cuBLASLt refuses it ({why}); running the exact kernel"
            );
        })?;
        actions.push(gemm);
        Ok(actions)
    }

    /// `dst [cols, rows] = src [rows, cols]ᵀ` for elements of `bytes` bytes (1, 2, 4 or 8).
    fn transpose_2d(&self, bytes: u32, src: u64, dst: u64, rows: u64, cols: u64) -> R<Action> {
        let mut a = KernelArgs::new();
        a.ptr(src).ptr(dst).u64(1).u64(rows).u64(cols);
        let tiles = rows.div_ceil(32) * cols.div_ceil(32);
        let grid = tiles.min(u64::from(self.dev.info.sm_count) * 16) as u32;
        self.launch(
            kernels::MOVEMENT,
            &format!("fp8c_transpose2d_{bytes}"),
            grid,
            (32, 8, 1),
            a,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiling_cuts_as_the_cpu_reference() {
        // 1×128 tiles of [2, 3, 300]: 3 rows, 3 tiles per row (the last 44 wide).
        let t = Tiling::new(&[2, 3, 300], 1, 128).unwrap();
        assert_eq!((t.mats, t.nr, t.nc, t.tr, t.tc), (2, 3, 3, 1, 128));
        // Rowwise (cols 0): one tile per row; an empty axis still has one tile.
        let t = Tiling::new(&[5, 7], 1, 0).unwrap();
        assert_eq!((t.nr, t.nc, t.tc), (5, 1, 7));
        let t = Tiling::new(&[0, 7], 0, 0).unwrap();
        assert_eq!((t.nr, t.nc, t.tr), (1, 1, 1));
        assert!(Tiling::new(&[4], 1, 1).is_err());
        assert_eq!(std::mem::size_of::<Tiling>(), 56);
    }

    #[test]
    fn cublaslt_modes_follow_the_tiling() {
        use ScaleMode::*;
        assert_eq!(native_modes(1, 0, 1, 512), Some((OuterVec, OuterVec)));
        assert_eq!(native_modes(1, 512, 1, 512), Some((OuterVec, OuterVec)));
        assert_eq!(native_modes(1, 128, 1, 512), Some((Vec128, Vec128)));
        assert_eq!(native_modes(1, 128, 128, 512), Some((Vec128, Blk128)));
        // MXFP8 (1×32) and 128-row tiles of A have no Hopper mode.
        assert_eq!(native_modes(1, 32, 1, 512), None);
        assert_eq!(native_modes(128, 128, 128, 512), None);
    }
}
