//! onnxruntime's `com.microsoft` contrib domain: the ops its quantization tools write that
//! carry a model's weights, decomposed at import.
//!
//! - MatMulNBits (`onnxruntime.quantization.matmul_nbits_quantizer`, the 4-bit weight-only
//!   format of onnxruntime-genai's LLM exports): B's 2/4/8-bit codes, per-block scales and
//!   zero points are known at import, so B is dequantized once, `(q − zp) · scale` per block
//!   of K in f32 (rounded to A's type), into a `[K, N]` parameter, and the node becomes a
//!   MatMul with it (plus the bias): the precision policy then treats it as any other GEMM,
//!   so fp8c re-quantizes it to FP8 where the policy says.
//! - GatherBlockQuantized (the same quantizer's, and onnxruntime-genai's, quantized embedding
//!   table): [`super::contrib_gather`].
//! - The fused ops of onnxruntime's transformer optimizer (SkipLayerNormalization, FastGelu,
//!   ...): [`super::contrib_fused`].
//! - The QOperator ops of onnxruntime's static quantizer (QGemm, QLinearAdd, ...):
//!   [`super::contrib_qlinear`].
//! - The attention fusions of the transformer optimizer (Attention, MultiHeadAttention,
//!   EmbedLayerNormalization) and the dynamic quantizer's QAttention and
//!   QEmbedLayerNormalization: [`super::contrib_attention`].
//! - GroupQueryAttention, the attention of onnxruntime-genai's LLM exports, and onnxruntime's
//!   RotaryEmbedding: [`super::contrib_gqa`].
//! - What onnxruntime's own graph optimizer saves (FusedMatMul, FusedGemm, FusedConv,
//!   DynamicQuantizeMatMul, MatMulIntegerToFloat): [`super::contrib_graph`].

use super::contrib_attention as attention;
use super::contrib_fused as fused;
use super::contrib_gather as gather;
use super::contrib_gqa as gqa;
use super::contrib_graph as graph;
use super::contrib_qlinear as qlinear;
use super::{Build, MANY, NodeCx, registry};
use crate::OnnxError;
use fp8c_ir::{DType, Op, Tensor, Value};
use std::ops::RangeInclusive;

/// The domain's name in `NodeProto.domain`.
pub(crate) const DOMAIN: &str = "com.microsoft";

registry! {
    /// Every com.microsoft op type the importer maps, sorted.
    CONTRIB_SUPPORTED_OPS, lookup;
    "Attention" 2..=7 => attention::attention,
    "BiasGelu" 2..=2 => fused::gelu,
    "DynamicQuantizeMatMul" 3..=5 => graph::dynamic_quantize_matmul,
    "EmbedLayerNormalization" 7..=9 => attention::embed_layer_norm,
    "FastGelu" 1..=2 => fused::fast_gelu,
    "FusedConv" 2..=4 => graph::fused_conv,
    "FusedGemm" 2..=3 => graph::fused_gemm,
    "FusedMatMul" 2..=2 => graph::fused_matmul,
    "GatherBlockQuantized" 3..=4 => gather::gather_block_quantized,
    "Gelu" 1..=1 => fused::gelu,
    "GroupQueryAttention" 7..=16 => gqa::group_query_attention,
    "MatMulIntegerToFloat" 4..=7 => graph::matmul_integer_to_float,
    "MatMulNBits" 2..=6 => matmul_nbits,
    "MultiHeadAttention" 1..=10 => attention::multi_head_attention,
    "QAttention" 5..=9 => attention::q_attention,
    "QEmbedLayerNormalization" 18..=18 => attention::q_embed_layer_norm,
    "QGemm" 6..=9 => qlinear::qgemm,
    "QLinearAdd" 7..=8 => |cx| qlinear::binary(cx, Op::Add),
    "QLinearAveragePool" 4..=5 => qlinear::average_pool,
    "QLinearConcat" 5..=MANY => qlinear::concat,
    "QLinearGlobalAveragePool" 4..=5 => qlinear::global_average_pool,
    "QLinearLeakyRelu" 4..=5 => qlinear::leaky_relu,
    "QLinearMul" 7..=8 => |cx| qlinear::binary(cx, Op::Mul),
    "QLinearSigmoid" 4..=5 => |cx| qlinear::unary(cx, Op::Sigmoid),
    "QLinearSoftmax" 4..=5 => qlinear::softmax,
    "QuickGelu" 1..=1 => fused::quick_gelu,
    "RotaryEmbedding" 4..=4 => gqa::rotary_embedding,
    "SkipLayerNormalization" 3..=5 => fused::skip_layer_norm,
    "SkipSimplifiedLayerNormalization" 3..=4 => fused::skip_simplified_layer_norm,
}

/// MatMulNBits: inputs A `[.., K]`, B (uint8 `[N, blocks, block_size · bits / 8]`), scales
/// (`[N · blocks]` or `[N, blocks]`), optional zero points (packed uint8, `bits` per block,
/// each row of N padded to whole bytes; or of the scales' type), g_idx (optional, `[K]`: the
/// block whose scale and zero point each row of B takes, GPTQ's act-order) and bias `[N]`; attributes K, N, bits (default 4), block_size. Codes are packed low bits first.
/// Without zero points the zero point is `2^(bits − 1)`.
///
/// `accuracy_level` 4 asks for A in int8: onnxruntime's CPU kernel (MLAS `CompInt8`) then
/// quantizes A per block of `block_size` along K, symmetrically (`scale = max|a| / 127`,
/// `round_half_even(a · 127 / max|a|)`), and multiplies the codes; fp8c gives the same
/// products by rounding f32 A to those codes times their scale ([`int8_blocks`]). Other
/// levels, f16/bf16 A and a K that is not whole blocks keep A as it is.
fn matmul_nbits(cx: &mut NodeCx<'_>) -> Result<Vec<Value>, OnnxError> {
    let req = |cx: &NodeCx<'_>, name: &str| {
        cx.attr_int_opt(name)?.filter(|&v| v > 0).ok_or_else(|| {
            cx.err(format!(
                "attribute `{name}` is required and must be positive"
            ))
        })
    };
    let (k, n, block) = (
        req(cx, "K")? as usize,
        req(cx, "N")? as usize,
        req(cx, "block_size")? as usize,
    );
    let bits = cx.attr_int("bits", 4)?;
    if !matches!(bits, 2 | 4 | 8) {
        return Err(cx.err(format!("bits = {bits} is not supported (2, 4 or 8)")));
    }
    let bits = bits as usize;
    if block < 16 || !block.is_power_of_two() {
        return Err(cx.err(format!("block_size = {block} must be a power of two ≥ 16")));
    }
    let a = cx.input(0)?;
    let dtype = cx.ty(a).dtype;
    if !matches!(dtype, DType::F32 | DType::F16 | DType::BF16) {
        return Err(cx.err(format!("input A must be float, got {}", cx.ty(a))));
    }
    let blocks = k.div_ceil(block);
    let blob = block * bits / 8;
    let known = |cx: &NodeCx<'_>, i: usize, what: &str| -> Result<Tensor, OnnxError> {
        let v = cx.input(i)?;
        cx.known_value(v).cloned().ok_or_else(|| {
            cx.err(format!(
                "input {i} ({what}, \"{}\") must be an initializer: fp8c dequantizes B at import",
                cx.input_name(i)
            ))
        })
    };
    let b = known(cx, 1, "B")?;
    if b.dtype() != DType::U8 || b.bytes().len() != n * blocks * blob {
        return Err(cx.err(format!(
            "B must be uint8 [{n}, {blocks}, {blob}] for K = {k}, N = {n}, bits = {bits}, \
             block_size = {block}; got {}{:?}",
            b.dtype(),
            b.shape()
        )));
    }
    let scales = known(cx, 2, "scales")?;
    let scales = scales
        .to_f32_vec()
        .map_err(|e| cx.err(format!("scales: {e}")))?;
    if scales.len() != n * blocks {
        return Err(cx.err(format!(
            "{} scales for N · blocks = {}",
            scales.len(),
            n * blocks
        )));
    }
    let zero = |_: usize, _: usize| (1u32 << (bits - 1)) as f32;
    let zp: Box<dyn Fn(usize, usize) -> f32> = match cx.opt_input(3) {
        None => Box::new(zero),
        Some(_) => {
            let z = known(cx, 3, "zero_points")?;
            if z.dtype() == DType::U8 {
                let per_row = (blocks * bits).div_ceil(8);
                let bytes = z.bytes().to_vec();
                if bytes.len() != n * per_row {
                    return Err(cx.err(format!(
                        "{} packed zero points for N = {n} rows of {per_row} bytes",
                        bytes.len()
                    )));
                }
                let mask = (1u32 << bits) - 1;
                Box::new(move |row, blk| {
                    let bit = blk * bits;
                    let byte = bytes[row * per_row + bit / 8] as u32;
                    ((byte >> (bit % 8)) & mask) as f32
                })
            } else {
                let z = z
                    .to_f32_vec()
                    .map_err(|e| cx.err(format!("zero_points: {e}")))?;
                if z.len() != n * blocks {
                    return Err(cx.err(format!(
                        "{} zero points for N · blocks = {}",
                        z.len(),
                        n * blocks
                    )));
                }
                Box::new(move |row, blk| z[row * blocks + blk])
            }
        }
    };
    // g_idx (GPTQ's act-order): row kk of B takes the scale and zero point of block
    // g_idx[kk]; its codes stay where they are, in block kk / block_size.
    let group: Vec<usize> = match cx.opt_input(4) {
        None => (0..k).map(|kk| kk / block).collect(),
        Some(_) => {
            let g = known(cx, 4, "g_idx")?
                .to_i64_vec()
                .map_err(|e| cx.err(format!("g_idx: {e}")))?;
            if g.len() != k {
                return Err(cx.err(format!("g_idx has {} entries for K = {k}", g.len())));
            }
            let bad = g.iter().position(|&b| b < 0 || b as usize >= blocks);
            if let Some(i) = bad {
                return Err(cx.err(format!(
                    "g_idx[{i}] = {} is not a block index (0..{blocks})",
                    g[i]
                )));
            }
            g.iter().map(|&b| b as usize).collect()
        }
    };
    let codes = b.bytes();
    let mask = (1u32 << bits) - 1;
    let mut w = vec![0f64; k * n];
    for row in 0..n {
        for (kk, &grp) in group.iter().enumerate() {
            let (blk, i) = (kk / block, kk % block);
            let bit = i * bits;
            let byte = codes[(row * blocks + blk) * blob + bit / 8] as u32;
            let q = ((byte >> (bit % 8)) & mask) as f32;
            let v = (q - zp(row, grp)) * scales[row * blocks + grp];
            w[kk * n + row] = f64::from(v);
        }
    }
    let wt = Tensor::from_f64_as(dtype, vec![k as u64, n as u64], &w)
        .map_err(|e| cx.err(format!("the dequantized B: {e}")))?;
    let w = cx.param("weight", wt)?;
    let a = if cx.attr_int("accuracy_level", 0)? == 4 && dtype == DType::F32 && k % block == 0 {
        int8_blocks(cx, a, block)?
    } else {
        a
    };
    let bias = cx.opt_input(5);
    let y = cx.add_step(bias.is_none(), "matmul", Op::MatMul, &[a, w])?;
    match bias {
        None => Ok(vec![y]),
        Some(bias) => Ok(vec![cx.add(Op::Add, &[y, bias])?]),
    }
}

/// `a` (f32 `[.., K]`, K a multiple of `block`) rounded as MLAS quantizes A to int8 for
/// MatMulNBits' `accuracy_level` 4: per block of K, codes `round_half_even(a · (127 /
/// max|a|))` (0 for an all-zero block) times `max|a| / 127`.
fn int8_blocks(cx: &mut NodeCx<'_>, a: Value, block: usize) -> Result<Value, OnnxError> {
    let rank = cx.ty(a).rank();
    let mut dims = vec![0i64; rank - 1];
    dims.extend([-1, block as i64]);
    let shape = cx.constant(
        "a_blocks.shape",
        Tensor::from_i64(vec![rank as u64 + 1], &dims),
    )?;
    let reshape = Op::Reshape { allowzero: false };
    let blocks = cx.add_helper("a_blocks", reshape.clone(), &[a, shape])?;
    let abs = cx.add_helper("a_abs", Op::Abs, &[blocks])?;
    let max = Op::ReduceMax {
        axes: Some(vec![-1]),
        keepdims: true,
    };
    let amax = cx.add_helper("a_amax", max, &[abs])?;
    let levels = cx.scalar("int8_levels", DType::F32, 127.0)?;
    let scale = cx.add_helper("a_scale", Op::Div, &[amax, levels])?;
    let inv = cx.add_helper("a_inv_scale", Op::Div, &[levels, amax])?;
    let zero = cx.scalar("zero", DType::F32, 0.0)?;
    let empty = cx.add_helper("a_block_zero", Op::Equal, &[amax, zero])?;
    let inv = cx.add_helper("a_inv_scale_safe", Op::Where, &[empty, zero, inv])?;
    let scaled = cx.add_helper("a_scaled", Op::Mul, &[blocks, inv])?;
    // Rounded half to even (and within ±127) by an int8 QuantizeLinear of unit scale.
    let one = cx.scalar("unit_scale", DType::F32, 1.0)?;
    let zp = cx.scalar("int8_zero", DType::I8, 0.0)?;
    let q = Op::QuantizeLinear {
        axis: 1,
        saturate: true,
        to: DType::I8,
        block_size: 0,
    };
    let codes = cx.add_helper("a_codes", q, &[scaled, one, zp])?;
    let f = Op::Cast {
        to: DType::F32,
        saturate: false,
    };
    let codes = cx.add_helper("a_codes.f32", f, &[codes])?;
    let deq = cx.add_helper("a_int8", Op::Mul, &[codes, scale])?;
    let back = cx.add_helper(
        "a_shape",
        Op::Shape {
            start: 0,
            end: None,
        },
        &[a],
    )?;
    cx.add_helper("a_int8_rows", reshape, &[deq, back])
}
