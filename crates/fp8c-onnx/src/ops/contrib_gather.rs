//! com.microsoft GatherBlockQuantized: rows of a block-quantized table, dequantized. It is
//! what onnxruntime's weight-only quantizer (`MatMulNBitsQuantizer` with `Gather` among the op
//! types) and onnxruntime-genai's model builder write for a quantized embedding.
//!
//! The table, its scales and zero points are initializers, so the table is dequantized once at
//! import, `(q − zp) · scale` per block of `block_size` along `quantize_axis` (in f32, rounded
//! once to the scales' type), into a parameter, and the node becomes a `Gather` along
//! `gather_axis` (like MatMulNBits, `contrib.rs`: the codes are not kept, and the table takes
//! its float size in memory).
//!
//! The codes are INT4 or UINT4 (zero point 0 by default; onnxruntime's quantizer), or UINT8
//! holding two 4-bit codes per byte along the last axis, low nibble first, with `bits = 4`
//! (default zero point 8), or one 8-bit code per byte with `bits = 8` (default 128); UINT8 zero
//! points are packed as the codes are.

use super::NodeCx;
use crate::OnnxError;
use fp8c_ir::{DType, Op, Tensor, Value};

/// The codes of a GatherBlockQuantized table, one per element, in logical shape.
struct Codes {
    dims: Vec<u64>,
    values: Vec<i32>,
    /// The zero point when the node gives none.
    default_zp: i32,
    /// Whether UINT8 zero points pack two per byte as the codes do.
    packed: bool,
}

/// `com.microsoft.GatherBlockQuantized(data, indices, scales, [zero_points])`.
pub(crate) fn gather_block_quantized(cx: &mut NodeCx<'_>) -> Result<Vec<Value>, OnnxError> {
    let block = cx.attr_int("block_size", 128)?;
    if block < 16 || !(block as u64).is_power_of_two() {
        return Err(cx.err(format!("block_size = {block} must be a power of two ≥ 16")));
    }
    let block = block as u64;
    let bits = cx.attr_int("bits", 4)?;
    if !matches!(bits, 4 | 8) {
        return Err(cx.err(format!("bits = {bits} is not supported (4 or 8)")));
    }
    let known = |cx: &NodeCx<'_>, i: usize, what: &str| -> Result<Tensor, OnnxError> {
        let v = cx.input(i)?;
        cx.known_value(v).cloned().ok_or_else(|| {
            cx.err(format!(
                "input {i} ({what}, \"{}\") must be an initializer: fp8c dequantizes the table \
                 at import",
                cx.input_name(i)
            ))
        })
    };
    let four_bit = |i: usize| cx.four_bit_inputs.get(i).copied().unwrap_or(false);
    let data = known(cx, 0, "data")?;
    let codes = codes(cx, &data, four_bit(0), bits, "data")?;
    let rank = codes.dims.len();
    let axis = |name: &str, default: i64| -> Result<usize, OnnxError> {
        let a = cx.attr_int(name, default)?;
        super::normalize_axis(a, rank).ok_or_else(|| {
            cx.err(format!(
                "{name} = {a} is out of range for data of rank {rank}"
            ))
        })
    };
    let (gather_axis, quantize_axis) = (axis("gather_axis", 0)?, axis("quantize_axis", 1)?);
    let mut scale_dims = codes.dims.clone();
    scale_dims[quantize_axis] = codes.dims[quantize_axis].div_ceil(block);
    let scales = known(cx, 2, "scales")?;
    let out_dtype = scales.dtype();
    if !matches!(out_dtype, DType::F32 | DType::F16 | DType::BF16) {
        return Err(cx.err(format!(
            "scales must be float32, float16 or bfloat16, got {out_dtype}"
        )));
    }
    if scales.shape() != scale_dims.as_slice() {
        return Err(cx.err(format!(
            "scales {:?} must be the data's shape {:?} with axis {quantize_axis} in blocks of \
             {block}: {scale_dims:?}",
            scales.shape(),
            codes.dims
        )));
    }
    let scales = scales
        .to_f32_vec()
        .map_err(|e| cx.err(format!("scales: {e}")))?;
    let zps = match cx.opt_input(3) {
        None => vec![codes.default_zp; scales.len()],
        Some(_) => {
            let z = known(cx, 3, "zero_points")?;
            if z.dtype() != data.dtype() || four_bit(3) != four_bit(0) {
                return Err(cx.err("zero_points must have the data's element type"));
            }
            let z = self::codes(cx, &z, four_bit(3), bits, "zero_points")?;
            let want = |d: &[u64]| d == scale_dims.as_slice();
            // Packed UINT8 zero points may carry one pad nibble per row.
            let fits = want(&z.dims)
                || (codes.packed
                    && z.dims.len() == rank
                    && z.dims[..rank - 1] == scale_dims[..rank - 1]
                    && z.dims[rank - 1] == scale_dims[rank - 1].next_multiple_of(2));
            if !fits {
                return Err(cx.err(format!(
                    "zero_points {:?} must have the scales' shape {scale_dims:?}",
                    z.dims
                )));
            }
            let (zl, sl) = (z.dims[rank - 1] as usize, scale_dims[rank - 1] as usize);
            (0..scales.len())
                .map(|i| z.values[(i / sl.max(1)) * zl + i % sl.max(1)])
                .collect()
        }
    };
    // Element i of the table: its block's index in the scales.
    let strides = |d: &[u64]| -> Vec<u64> {
        let mut s = vec![1u64; d.len()];
        for k in (0..d.len().saturating_sub(1)).rev() {
            s[k] = s[k + 1] * d[k + 1];
        }
        s
    };
    let (ds, ss) = (strides(&codes.dims), strides(&scale_dims));
    let table: Vec<f64> = codes
        .values
        .iter()
        .enumerate()
        .map(|(i, &q)| {
            let mut at = 0u64;
            for k in 0..rank {
                let c = (i as u64 / ds[k]) % codes.dims[k];
                at += if k == quantize_axis { c / block } else { c } * ss[k];
            }
            let at = at as usize;
            f64::from((q - zps[at]) as f32 * scales[at])
        })
        .collect();
    let table = Tensor::from_f64_as(out_dtype, codes.dims.clone(), &table)
        .map_err(|e| cx.err(format!("the dequantized table: {e}")))?;
    let table = cx.param("table", table)?;
    let indices = cx.input(1)?;
    let gather = Op::Gather {
        axis: gather_axis as i64,
    };
    Ok(vec![cx.add(gather, &[table, indices])?])
}

/// The codes of `t` (the table or its zero points), one per element, with their logical shape.
fn codes(
    cx: &NodeCx<'_>,
    t: &Tensor,
    four_bit: bool,
    bits: i64,
    what: &str,
) -> Result<Codes, OnnxError> {
    let bytes = t.bytes();
    let dims = t.shape().to_vec();
    match (t.dtype(), four_bit, bits) {
        (DType::I8, true, 4) => Ok(Codes {
            dims,
            values: bytes.iter().map(|&b| i32::from(b as i8)).collect(),
            default_zp: 0,
            packed: false,
        }),
        (DType::U8, true, 4) => Ok(Codes {
            dims,
            values: bytes.iter().map(|&b| i32::from(b)).collect(),
            default_zp: 0,
            packed: false,
        }),
        (DType::U8, false, 8) => Ok(Codes {
            dims,
            values: bytes.iter().map(|&b| i32::from(b)).collect(),
            default_zp: 128,
            packed: false,
        }),
        (DType::U8, false, 4) if !dims.is_empty() => {
            let mut dims = dims;
            if let Some(last) = dims.last_mut() {
                *last *= 2;
            }
            Ok(Codes {
                dims,
                values: bytes
                    .iter()
                    .flat_map(|&b| [i32::from(b & 0x0F), i32::from(b >> 4)])
                    .collect(),
                default_zp: 8,
                packed: true,
            })
        }
        (d, _, _) => Err(cx.err(format!(
            "{what} must be int4 or uint4 (bits = 4), or uint8 with bits = 4 or 8; got {}{} \
             with bits = {bits}",
            if four_bit { "4-bit " } else { "" },
            d
        ))),
    }
}
