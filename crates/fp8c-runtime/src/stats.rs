//! Numbers for judging FP8 results: [`compare`] (one tensor against a reference) and
//! [`fp8_stats`] (what one quantization did to its tensor: the figures TransformerEngine's
//! debug tools report, for any model).
//!
//! Everything accumulates in f64. FP8 tensors are decoded exactly through fp8c-core.

use crate::RuntimeError;
use crate::program::Step;
use fp8c_core::Fp8Format;
use fp8c_ir::{DType, Op, Tensor};
use serde::Serialize;

/// How close a tensor is to a reference.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Comparison {
    /// `‖a − b‖₂ / ‖b‖₂` (b is the reference; 0 when both are zero, ∞ when only b is).
    pub rel_l2: f64,
    /// `max |a − b|`.
    pub max_abs: f64,
    /// `a·b / (‖a‖ ‖b‖)` (1 when both are zero, 0 when one is).
    pub cosine: f64,
    /// Elements compared.
    pub numel: usize,
}

/// The values of any tensor as f64 (FP8 decoded exactly).
pub fn values_f64(t: &Tensor) -> Result<Vec<f64>, String> {
    match fp8_format(t.dtype()) {
        Some(fmt) => Ok(t
            .bytes()
            .iter()
            .map(|&c| f64::from(fp8c_core::decode(fmt, c)))
            .collect()),
        None => t.to_f64_vec(),
    }
}

fn fp8_format(d: DType) -> Option<Fp8Format> {
    match d {
        DType::F8E4M3 => Some(Fp8Format::E4M3),
        DType::F8E5M2 => Some(Fp8Format::E5M2),
        _ => None,
    }
}

/// Compares `a` with the reference `b` (same shape; any numeric dtypes). Positions where both
/// hold the same non-finite value (NaN and NaN, ∞ and ∞) agree and are left out of the sums;
/// any other non-finite value makes the figures non-finite.
pub fn compare(a: &Tensor, b: &Tensor) -> Result<Comparison, RuntimeError> {
    if a.shape() != b.shape() {
        return Err(RuntimeError::Other(format!(
            "cannot compare shapes {:?} and {:?}",
            a.shape(),
            b.shape()
        )));
    }
    let x = values_f64(a).map_err(RuntimeError::Other)?;
    let y = values_f64(b).map_err(RuntimeError::Other)?;
    let (mut diff2, mut ref2, mut a2, mut dot, mut max_abs) = (0f64, 0f64, 0f64, 0f64, 0f64);
    let mut numel = 0;
    for (&p, &q) in x.iter().zip(&y) {
        let same_special = (p.is_nan() && q.is_nan()) || (p.is_infinite() && p == q);
        if same_special {
            continue;
        }
        let d = p - q;
        diff2 += d * d;
        ref2 += q * q;
        a2 += p * p;
        dot += p * q;
        max_abs = if d.is_nan() {
            f64::NAN
        } else {
            max_abs.max(d.abs())
        };
        numel += 1;
    }
    let rel_l2 = if diff2 == 0.0 {
        0.0
    } else {
        diff2.sqrt() / ref2.sqrt()
    };
    let cosine = match (a2 == 0.0, ref2 == 0.0) {
        (true, true) => 1.0,
        (true, false) | (false, true) => 0.0,
        _ => dot / (a2.sqrt() * ref2.sqrt()),
    };
    Ok(Comparison {
        rel_l2,
        max_abs,
        cosine,
        numel,
    })
}

/// What one FP8 quantization did to its tensor.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Fp8TensorStats {
    /// The tensor's name (the quantize node's name without its `.q` / `.block_quantize`
    /// suffix: `fc1.x`).
    pub tensor: String,
    /// The node that quantized it.
    pub node: String,
    /// `e4m3` or `e5m2`.
    pub format: &'static str,
    /// Elements.
    pub numel: usize,
    /// `max |x|` of the high-precision tensor (NaN if it holds a NaN).
    pub amax: f32,
    /// The scale it was quantized with (`q = cast(x · scale)`); per-tile quantization: the
    /// smallest tile scale.
    pub scale: f32,
    /// `1 / scale`, what dequantization multiplies by (per tile: the largest).
    pub scale_inv: f32,
    /// Scales used: 1 per tensor, or the number of tiles.
    pub scales: usize,
    /// Fraction of the non-zero finite values that quantized to zero.
    pub underflow: f64,
    /// Fraction of the values with `|x · scale| > fmt_max` (saturated, or ±∞/NaN without
    /// saturation).
    pub overflow: f64,
    /// Signal-to-quantization-noise ratio of the dequantized tensor against `x`, in dB, over
    /// the finite values (∞ when exact: `null` in JSON).
    pub sqnr_db: f64,
    /// Non-finite values of `x` (left out of the other figures but counted here).
    pub nonfinite: usize,
    /// The same figures had the tensor been quantized by each of the other current-scaling
    /// recipes (TransformerEngine's "what-if" statistics): tensorwise, rowwise, block and
    /// mxfp8, each with its library's default scales ([`what_if`]).
    pub what_if: Vec<WhatIf>,
}

/// One recipe's figures for a tensor (see [`Fp8TensorStats::what_if`]).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct WhatIf {
    /// `tensorwise`, `rowwise`, `block` or `mxfp8`.
    pub recipe: &'static str,
    /// Tiles (rows × cols of the tensor as a matrix; 0: the whole axis).
    pub tile: [i64; 2],
    /// As in [`Fp8TensorStats`].
    pub underflow: f64,
    /// As in [`Fp8TensorStats`].
    pub overflow: f64,
    /// As in [`Fp8TensorStats`].
    pub sqnr_db: f64,
}

/// Underflow, overflow and SQNR of codes `q` (format `fmt`) for `xs`, element `i` quantized
/// with scale `scale_at(i)` (`q = cast(x · scale)`), dequantized with `inv_at(i)`.
struct Figures {
    underflow: f64,
    overflow: f64,
    sqnr_db: f64,
    nonfinite: usize,
}

fn figures(
    xs: &[f32],
    q: &[u8],
    fmt: Fp8Format,
    scaled: &dyn Fn(usize, f32) -> f32,
    inv_at: &dyn Fn(usize) -> f32,
) -> Figures {
    let table = fp8c_core::decode_table(fmt);
    let (mut nonzero, mut under, mut over, mut nonfinite) = (0usize, 0usize, 0usize, 0usize);
    let (mut sig, mut noise) = (0f64, 0f64);
    for (i, (&v, &code)) in xs.iter().zip(q).enumerate() {
        let sv = scaled(i, v);
        if sv.is_nan() || sv.abs() > fmt.max() {
            over += 1;
        }
        if !v.is_finite() {
            nonfinite += 1;
            continue;
        }
        let d = table[code as usize];
        if v != 0.0 {
            nonzero += 1;
            if d == 0.0 {
                under += 1;
            }
        }
        let dq = f64::from(d) * f64::from(inv_at(i));
        let e = f64::from(v) - dq;
        sig += f64::from(v) * f64::from(v);
        noise += e * e;
    }
    let frac = |n: usize, of: usize| if of == 0 { 0.0 } else { n as f64 / of as f64 };
    Figures {
        underflow: frac(under, nonzero),
        overflow: frac(over, xs.len()),
        sqnr_db: if noise == 0.0 {
            f64::INFINITY
        } else {
            10.0 * (sig / noise).log10()
        },
        nonfinite,
    }
}

/// The per-tile scale of each element, from the `scale_inv` grid block_quantize writes.
struct TileScales {
    tiles: fp8c_eval::BlockTiles,
    inv: Vec<f32>,
}

impl TileScales {
    fn new(shape: &[u64], (rows, cols): (i64, i64), inv: Vec<f32>) -> Option<TileScales> {
        let tiles = fp8c_eval::BlockTiles::of(shape, rows, cols).ok()?;
        (tiles.count() == inv.len()).then_some(TileScales { tiles, inv })
    }

    fn inv_at(&self, e: usize) -> f32 {
        self.inv[self.tiles.tile_of(e)]
    }
}

/// The tilings the what-if statistics try, for an activation or gradient (tiles along its
/// last axis, K of the GEMM reading it) or a weight `[K, N]` (tiles along its first): the
/// libraries' defaults (fp8c_core::CurrentScaling::tiled): tensorwise with FP32 scales,
/// rowwise and block with power-of-two scales, mxfp8 with E8M0.
pub fn what_if_tilings(weight: bool) -> [(&'static str, (i64, i64), fp8c_ir::BlockScaling); 4] {
    use fp8c_ir::BlockScaling::*;
    if weight {
        [
            ("tensorwise", (0, 0), Fp32),
            ("rowwise", (0, 1), Pow2),
            ("block", (128, 128), Pow2),
            ("mxfp8", (32, 1), E8m0),
        ]
    } else {
        [
            ("tensorwise", (0, 0), Fp32),
            ("rowwise", (1, 0), Pow2),
            ("block", (1, 128), Pow2),
            ("mxfp8", (1, 32), E8m0),
        ]
    }
}

/// The what-if figures of `x` (f32 values, shape `shape`) in format `to` (see
/// [`Fp8TensorStats::what_if`]). A weight is a tensor named `*.w` (the scaling pass's name for
/// a GEMM's second operand).
pub fn what_if(xs: &[f32], shape: &[u64], to: DType, weight: bool) -> Vec<WhatIf> {
    let Some(fmt) = fp8_format(to) else {
        return vec![];
    };
    let n = xs.len() as u64;
    let mat: Vec<u64> = match shape {
        [.., c] if shape.len() >= 2 && !weight => vec![n / (*c).max(1), *c],
        [r, c] => vec![*r, *c],
        _ => vec![1, n],
    };
    let x = Tensor::from_f32(mat.clone(), xs);
    let mut out = Vec::new();
    for (recipe, tile, scaling) in what_if_tilings(weight) {
        let op = Op::BlockQuantize {
            to,
            saturate: true,
            rows: tile.0,
            cols: tile.1,
            scaling,
            epsilon: 0.0,
        };
        let Ok(r) = fp8c_eval::eval_op(&op, &[&x]) else {
            continue;
        };
        let Ok(inv) = r[1].to_f32_vec() else { continue };
        let Some(ts) = TileScales::new(&mat, tile, inv) else {
            continue;
        };
        let f = figures(
            xs,
            r[0].bytes(),
            fmt,
            &|i, v| v * (1.0 / ts.inv_at(i)),
            &|i| ts.inv_at(i),
        );
        out.push(WhatIf {
            recipe,
            tile: [tile.0, tile.1],
            underflow: f.underflow,
            overflow: f.overflow,
            sqnr_db: f.sqnr_db,
        });
    }
    out
}

/// The statistics of a step that quantizes to FP8, from its inputs and outputs as an
/// observer of `run_observed` sees them; `None` for every other step. Recognised: `quantize`,
/// a `cast` to FP8 (scale 1), a `quantize_linear` to FP8 with one scale (`scale = 1/y_scale`),
/// `block_quantize` (per-tile scales), and the fusion pass's ops that quantize
/// (`quantize_amax`, `cast_transpose`, `layer_norm_quantize`, `elementwise_quantize`, an
/// epilogue with an FP8 output).
pub fn fp8_stats(step: &Step, inputs: &[&Tensor], outputs: &[Tensor]) -> Option<Fp8TensorStats> {
    // How the op scales x before the cast.
    enum Scaling {
        Mul(f32),
        Div(f32),
        Tiles(TileScales),
    }
    let scalar = |t: &Tensor| -> Option<f32> {
        let v = t.to_f32_vec().ok()?;
        (v.len() == 1).then(|| v[0])
    };
    // (the high-precision tensor, how it was scaled, the FP8 result)
    let (x, scaling, q): (&Tensor, Scaling, &Tensor) = match &step.op {
        Op::Quantize { .. } | Op::QuantizeAmax { .. } | Op::CastTranspose { .. } => (
            inputs.first()?,
            Scaling::Mul(scalar(inputs.get(1)?)?),
            outputs.first()?,
        ),
        Op::Cast { .. } => (inputs.first()?, Scaling::Mul(1.0), outputs.first()?),
        Op::QuantizeLinear { .. } => (
            inputs.first()?,
            Scaling::Div(scalar(inputs.get(1)?)?),
            outputs.first()?,
        ),
        Op::BlockQuantize { rows, cols, .. } => {
            let x = inputs.first()?;
            let inv = outputs.get(1)?.to_f32_vec().ok()?;
            (
                x,
                Scaling::Tiles(TileScales::new(x.shape(), (*rows, *cols), inv)?),
                outputs.first()?,
            )
        }
        Op::ElementwiseBlockQuantize { cols, .. } | Op::LayerNormBlockQuantize { cols, .. } => {
            let y = outputs.first()?;
            let inv = outputs.get(2)?.to_f32_vec().ok()?;
            (
                y,
                Scaling::Tiles(TileScales::new(y.shape(), (1, *cols), inv)?),
                outputs.get(1)?,
            )
        }
        Op::LayerNormQuantize { .. } => (
            outputs.first()?,
            Scaling::Mul(scalar(inputs.get(1)?)?),
            outputs.get(1)?,
        ),
        Op::ElementwiseQuantize { .. } | Op::ScaledMatMulEpilogue { to: Some(_), .. } => (
            outputs.first()?,
            Scaling::Mul(scalar(inputs.last()?)?),
            outputs.get(1)?,
        ),
        _ => return None,
    };
    let fmt = fp8_format(q.dtype())?;
    if x.dtype().is_fp8() || !x.dtype().is_float() {
        return None;
    }
    let xs = x.to_f32_vec().ok()?;
    if xs.len() != q.len() {
        return None;
    }
    let (scale, scale_inv, scales) = match &scaling {
        Scaling::Mul(s) => (*s, 1.0 / s, 1),
        Scaling::Div(s) => (1.0 / s, *s, 1),
        Scaling::Tiles(t) => {
            let max_inv = t.inv.iter().copied().fold(0f32, f32::max);
            (1.0 / max_inv, max_inv, t.inv.len())
        }
    };
    let f = figures(
        &xs,
        q.bytes(),
        fmt,
        &|i, v| match &scaling {
            Scaling::Mul(s) => v * s,
            Scaling::Div(s) => v / s,
            Scaling::Tiles(t) => v * (1.0 / t.inv_at(i)),
        },
        &|i| match &scaling {
            Scaling::Tiles(t) => t.inv_at(i),
            _ => scale_inv,
        },
    );
    let tensor = step
        .node
        .strip_suffix(".q")
        .or_else(|| step.node.strip_suffix(".block_quantize"))
        .unwrap_or(&step.node)
        .to_string();
    let weight = tensor.ends_with(".w");
    Some(Fp8TensorStats {
        what_if: what_if(&xs, x.shape(), q.dtype(), weight),
        tensor,
        node: step.node.clone(),
        format: fmt.name(),
        numel: xs.len(),
        amax: fp8c_core::amax_f32(&xs),
        scale,
        scale_inv,
        scales,
        underflow: f.underflow,
        overflow: f.overflow,
        sqnr_db: f.sqnr_db,
        nonfinite: f.nonfinite,
    })
}
