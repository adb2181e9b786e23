//! Fine-grained FP8 scaling (issue #16): `block_quantize`, `block_dequantize` and
//! `block_scaled_matmul`, the CPU reference of tile-wise current scaling (rowwise, DeepSeek's
//! 1×128 / 128×128 blocks, MXFP8's 1×32 with E8M0 scales, any `rows` × `cols` tile).
//!
//! - Tiles: x [..., R, C] (leading dims are separate matrices) cut into `rows` × `cols` tiles,
//!   0 meaning the whole axis; the last tile of an axis may be short.
//! - A tile's scale from its amax (max |x|, NaN propagating): `fp32` is fp8c-core's
//!   `compute_scale(max(amax, epsilon), fmt_max, 0, 1)` (amax 0 or non-finite keeps scale 1,
//!   an infinite quotient becomes f32::MAX); `pow2` clears that scale's mantissa; `e8m0` is
//!   `2^-(floor(log2 amax) − emax_elem)` with the exponent clamped to E8M0's [−127, 127]
//!   (OCP MX v1.0; amax 0 or non-finite: 1).
//! - Codes: fp8c-core's scaled quantize of each element with its tile's scale (`quantize`'s
//!   rules); `scale_inv = 1 / scale` in f32.
//! - `block_scaled_matmul`: per K block, the exact FP8 products summed in f32 in order, the
//!   partial sum times A's then B's `scale_inv`, the blocks summed in order, each step rounded
//!   to f32 (DeepSeek-V3's promotion to FP32 every N_C elements); where the partial sum times
//!   A's `scale_inv` overflows f32, the product with both is taken in f64 and rounded once
//!   ([`promote`]: a tile of huge values times a small scale of B is finite, as it is under
//!   per-tensor scaling).
//!
//! The golden cases (`tests/gen/gen_block_cases.py`, numpy + ml_dtypes) check all of it bit
//! for bit.

use crate::data::dims_of;
use crate::error::{Fail, KResult, attr_err, dtype_err, shape_err};
use crate::fp8_codes::{codes_tensor, f32_values, format_of, store_f32};
use fp8c_core::Fp8Format;
use fp8c_ir::{BlockScaling, DType, Tensor};
use rayon::prelude::*;

/// The tiling of a [..., R, C] tensor by `block_quantize`'s `rows` × `cols` (the one
/// definition backends and statistics share: `fp8c_eval::BlockTiles`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tiles {
    /// Leading matrices.
    pub mats: usize,
    /// Rows and columns of each matrix.
    pub r: usize,
    /// Columns.
    pub c: usize,
    /// Tile height and width (the whole axis for 0).
    pub tr: usize,
    /// Tile width.
    pub tc: usize,
    /// Tiles along each axis (at least one, even along an empty axis tiled whole).
    pub nr: usize,
    /// Tiles along the columns.
    pub nc: usize,
}

impl Tiles {
    /// The tiling of `shape` (rank ≥ 2) by `rows` × `cols` (0: the whole axis).
    pub fn of(shape: &[u64], rows: i64, cols: i64) -> Result<Tiles, String> {
        Tiles::new(shape, rows, cols).map_err(|f| f.message)
    }

    /// The number of tiles (and of scales).
    pub fn count(&self) -> usize {
        self.mats * self.nr * self.nc
    }

    fn new(shape: &[u64], rows: i64, cols: i64) -> KResult<Tiles> {
        let dims: Vec<usize> = shape.iter().map(|&d| d as usize).collect();
        let [lead @ .., r, c] = dims.as_slice() else {
            return shape_err!("expected rank ≥ 2 ([..., rows, cols]), got {shape:?}");
        };
        let size = |v: i64, whole: usize, what: &str| -> KResult<usize> {
            match usize::try_from(v) {
                Ok(0) => Ok(whole.max(1)),
                Ok(v) => Ok(v),
                Err(_) => attr_err!("{what}={v} must be ≥ 0 (0: the whole axis)"),
            }
        };
        let (tr, tc) = (size(rows, *r, "rows")?, size(cols, *c, "cols")?);
        Ok(Tiles {
            mats: lead.iter().product(),
            r: *r,
            c: *c,
            tr,
            tc,
            nr: r.div_ceil(tr).max(usize::from(rows == 0)),
            nc: c.div_ceil(tc).max(usize::from(cols == 0)),
        })
    }

    /// The scale tensor's shape: the leading dims, then tiles per axis.
    fn grid_shape(&self, shape: &[u64]) -> Vec<u64> {
        let mut s = shape[..shape.len() - 2].to_vec();
        s.extend([self.nr as u64, self.nc as u64]);
        s
    }

    /// The scale index of element `e` (flat, row-major).
    pub fn tile_of(&self, e: usize) -> usize {
        let (m, rest) = (e / (self.r * self.c), e % (self.r * self.c));
        let (i, j) = (rest / self.c, rest % self.c);
        (m * self.nr + i / self.tr) * self.nc + j / self.tc
    }
}

/// The scale of a tile whose amax is `amax` (module docs).
fn tile_scale(amax: f32, fmt: Fp8Format, scaling: BlockScaling, epsilon: f32) -> f32 {
    match scaling {
        BlockScaling::Fp32 | BlockScaling::Pow2 => {
            let a = if amax < epsilon { epsilon } else { amax };
            let s = fp8c_core::compute_scale(a, fmt.max(), 0.0, 1.0);
            if scaling == BlockScaling::Pow2 {
                f32::from_bits(s.to_bits() & 0xFF80_0000)
            } else {
                s
            }
        }
        BlockScaling::E8m0 => {
            if !(amax.is_finite() && amax > 0.0) {
                return 1.0;
            }
            let bits = amax.to_bits();
            let exp = (bits >> 23) as i32;
            // floor(log2 amax): the exponent, or for a subnormal its top mantissa bit's place.
            let floor_log2 = if exp == 0 {
                (31 - (bits & 0x7F_FFFF).leading_zeros() as i32) - 149
            } else {
                exp - 127
            };
            let emax = match fmt {
                Fp8Format::E4M3 => 8,
                Fp8Format::E5M2 => 15,
            };
            let shared = (floor_log2 - emax).clamp(-127, 127);
            2f64.powi(-shared) as f32
        }
    }
}

/// `block_quantize`: outputs the codes and the per-tile `scale_inv`.
pub(crate) fn block_quantize(
    inputs: &[&Tensor],
    to: DType,
    saturate: bool,
    (rows, cols): (i64, i64),
    scaling: BlockScaling,
    epsilon: f32,
) -> KResult<Vec<Tensor>> {
    let [x] = inputs else {
        return Fail::arity("1", inputs.len());
    };
    let Some(fmt) = format_of(to) else {
        return attr_err!("to={to} is not an FP8 type (f8e4m3 or f8e5m2)");
    };
    if !x.dtype().is_float() || x.dtype().is_fp8() {
        return dtype_err!("x must be a float tensor other than FP8, got {}", x.dtype());
    }
    if !(epsilon.is_finite() && epsilon >= 0.0) {
        return attr_err!("epsilon={epsilon} must be finite and ≥ 0");
    }
    let shape = x.shape().to_vec();
    let t = Tiles::new(&shape, rows, cols)?;
    let v = f32_values(x, "x")?;
    // One tile row (a tile's slice of one matrix row) at a time: contiguous segments.
    let per_mat = t.nr * t.nc;
    let mut amax = vec![0f32; t.mats * per_mat];
    amax.par_chunks_mut(per_mat.max(1))
        .enumerate()
        .for_each(|(m, a)| {
            for i in 0..t.r {
                let row = &v[(m * t.r + i) * t.c..][..t.c];
                for j in 0..t.nc {
                    let seg = &row[j * t.tc..((j + 1) * t.tc).min(t.c)];
                    let slot = &mut a[(i / t.tr) * t.nc + j];
                    *slot = fp8c_core::amax_f32(&[*slot, fp8c_core::amax_f32(seg)]);
                }
            }
        });
    let scale: Vec<f32> = amax
        .iter()
        .map(|&a| tile_scale(a, fmt, scaling, epsilon))
        .collect();
    let mut codes = vec![0u8; v.len()];
    codes
        .par_chunks_mut(t.c.max(1))
        .zip(v.par_chunks(t.c.max(1)))
        .enumerate()
        .for_each(|(row, (out, src))| {
            let (m, i) = (row / t.r.max(1), row % t.r.max(1));
            for j in 0..t.nc {
                let span = j * t.tc..((j + 1) * t.tc).min(t.c);
                let s = scale[(m * t.nr + i / t.tr) * t.nc + j];
                fp8c_core::quantize_slice(fmt, &src[span.clone()], s, &mut out[span], saturate);
            }
        });
    let scale_inv: Vec<f32> = scale.iter().map(|&s| 1.0 / s).collect();
    Ok(vec![
        codes_tensor(to, shape.clone(), codes)?,
        Tensor::from_f32(t.grid_shape(&shape), &scale_inv),
    ])
}

/// `block_dequantize`: each code times its tile's `scale_inv`, rounded once to `to`.
pub(crate) fn block_dequantize(
    inputs: &[&Tensor],
    to: DType,
    (rows, cols): (i64, i64),
) -> KResult<Tensor> {
    let [q, scale_inv] = inputs else {
        return Fail::arity("2", inputs.len());
    };
    let Some(fmt) = format_of(q.dtype()) else {
        return dtype_err!("q must be an FP8 tensor, got {}", q.dtype());
    };
    let shape = q.shape().to_vec();
    let t = Tiles::new(&shape, rows, cols)?;
    let s = scale_values(scale_inv, &t.grid_shape(&shape), "scale_inv")?;
    let table = fp8c_core::decode_table(fmt);
    let v: Vec<f32> = q
        .bytes()
        .par_iter()
        .enumerate()
        .map(|(e, &c)| table[c as usize] * s[t.tile_of(e)])
        .collect();
    store_f32(v, to, shape)
}

/// A K block's partial sum `p` times A's then B's `scale_inv`, each product rounded to f32;
/// where `p · sa` overflows, `p · sa · sb` in f64 rounded once (the CUDA kernel and the MLIR
/// emitter compute the same). Both agree wherever the first product is finite.
#[inline]
pub(crate) fn promote(p: f32, sa: f32, sb: f32) -> f32 {
    let t = p * sa;
    if t.is_infinite() {
        (f64::from(p) * f64::from(sa) * f64::from(sb)) as f32
    } else {
        t * sb
    }
}

/// An f32 scale tensor of exactly `want`'s shape.
fn scale_values(t: &Tensor, want: &[u64], what: &str) -> KResult<Vec<f32>> {
    if t.dtype() != DType::F32 || t.shape() != want {
        return shape_err!(
            "{what} must be f32{want:?} (one scale per tile), got {} {:?}",
            t.dtype(),
            t.shape()
        );
    }
    t.to_f32_vec()
        .map_err(|m| Fail::new(crate::error::ErrorKind::DType, m))
}

/// `block_scaled_matmul { out, k_block, a_rows, b_cols }(qa, qb, sa, sb)`.
pub(crate) fn block_scaled_matmul(
    inputs: &[&Tensor],
    out: DType,
    k_block: i64,
    a_rows: i64,
    b_cols: i64,
) -> KResult<Tensor> {
    let [qa, qb, sa, sb] = inputs else {
        return Fail::arity("4", inputs.len());
    };
    let (Some(fa), Some(fb)) = (format_of(qa.dtype()), format_of(qb.dtype())) else {
        return dtype_err!(
            "qa and qb must be FP8, got {} and {}",
            qa.dtype(),
            qb.dtype()
        );
    };
    let (ad, bd) = (dims_of(qa), dims_of(qb));
    let ([m, k], [kb_, n]) = (ad.as_slice(), bd.as_slice()) else {
        return shape_err!(
            "qa and qb must be matrices, got {:?} and {:?}",
            qa.shape(),
            qb.shape()
        );
    };
    let (m, k, n) = (*m, *k, *n);
    if *kb_ != k {
        return shape_err!("qa [M, K] and qb [K, N] disagree on K: {k} and {kb_}");
    }
    let ta = Tiles::new(qa.shape(), a_rows, k_block)?;
    let tb = Tiles::new(qb.shape(), k_block, b_cols)?;
    let s_a = scale_values(sa, &ta.grid_shape(qa.shape()), "scale_inv_a")?;
    let s_b = scale_values(sb, &tb.grid_shape(qb.shape()), "scale_inv_b")?;
    let (da, db) = (fp8c_core::decode_table(fa), fp8c_core::decode_table(fb));
    let (a, b) = (qa.bytes(), qb.bytes());
    let kt = ta.tc;
    let nblocks = ta.nc;
    // B decoded once; then per row and K block the partial sums of every column together
    // (an axpy per k: each output still sums its products in k order, so the result is the
    // same as the scalar loop's, bit for bit, but the inner loop runs along contiguous rows
    // of B and vectorizes).
    let bf: Vec<f32> = b.iter().map(|&c| db[c as usize]).collect();
    let mut d = vec![0f32; m * n];
    d.par_chunks_mut(n.max(1))
        .enumerate()
        .for_each(|(row, dst)| {
            let mut p = vec![0f32; n];
            for blk in 0..nblocks {
                p.iter_mut().for_each(|x| *x = 0.0);
                for kk in blk * kt..((blk + 1) * kt).min(k) {
                    let av = da[a[row * k + kk] as usize];
                    for (x, &bv) in p.iter_mut().zip(&bf[kk * n..(kk + 1) * n]) {
                        *x += av * bv;
                    }
                }
                let sa = s_a[(row / ta.tr) * ta.nc + blk];
                let sb_row = &s_b[blk * tb.nc..(blk + 1) * tb.nc];
                for (col, (slot, &x)) in dst.iter_mut().zip(&p).enumerate() {
                    *slot += promote(x, sa, sb_row[col / tb.tc]);
                }
            }
        });
    store_f32(d, out, vec![m as u64, n as u64])
}
