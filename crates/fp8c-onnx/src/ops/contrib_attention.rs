//! onnxruntime's `com.microsoft` attention ops, which its transformer optimizer
//! (`onnxruntime.transformers.optimizer`, also run by Optimum's "O2" level) writes into BERT,
//! GPT-2 and encoder-decoder graphs: Attention (packed QKV weight), MultiHeadAttention
//! (separate, packed or projected K/V), EmbedLayerNormalization, and the 8-bit forms its
//! dynamic quantizer makes of two of them, QAttention and QEmbedLayerNormalization. Each is
//! decomposed at import into the IR ops the spelled-out graph uses (matmul, softmax, where,
//! gather, layer norm), so the precision policy, fusion and every backend see an optimized
//! model as they see the export it came from.
//!
//! Semantics are onnxruntime's CPU kernels (`contrib_ops/cpu/bert/attention_cpu_base.h`,
//! `attention_helper.h`, `embed_layer_norm.cc`, `quantization/attention_quant.cc`,
//! `qembed_layer_norm.cc`), checked against onnxruntime on every mask format:
//! - scores are `scale · Q·Kᵀ + (attention_bias + mask)`, `scale` defaulting to
//!   `1 / sqrt(head_size)` in f32;
//! - a hidden key gets `mask_filter_value` (default −10000), not −∞: a query whose keys are
//!   all hidden still averages them, as onnxruntime does; `mask_index` is 1-D end positions
//!   `[B]`, end and start positions `[2·B]`, a raw 0/1 mask `[B, T]` or `[B, S, T]` (a
//!   positive entry keeps the key), or `[B|1, 1]` (no mask);
//! - `unidirectional` hides key `j` from query `i` when `j > i + past_length` (for more than
//!   one query) with the type's lowest value, replacing the padding value there;
//! - `past` (Attention, `[2, B, N, P, H]`) and `past_key`/`past_value` (MultiHeadAttention,
//!   `[B, N, P, H]`) are concatenated before K and V, which are the `present` outputs.
//!
//! Refused with an error naming the node: `do_rotary`, `past_present_share_buffer` and the
//! `past_sequence_length` / `cache_indirection` inputs (decoding buffers fp8c does not
//! keep), 4-D (Megatron) masks (which onnxruntime's CPU kernel refuses too) and
//! MultiHeadAttention's `[3·B + 2]` mask (a format of its GPU kernels).

use super::attention::{dim, float_input, ints, reshape, seq_len, slice, transpose};
use super::{NodeCx, integer};
use crate::OnnxError;
use fp8c_ir::{DType, Dim, Op, Tensor, Value};

/// The attributes every com.microsoft attention op shares.
struct Common {
    heads: i64,
    /// `scale`; `None` (absent or 0) is `1 / sqrt(head_size)`.
    scale: Option<f32>,
    /// What a hidden key's score gets (`mask_filter_value`).
    filter: f32,
    unidirectional: bool,
}

/// Reads the shared attributes and refuses the decoding-only ones.
fn common(cx: &NodeCx<'_>) -> Result<Common, OnnxError> {
    let heads = match cx.attr_int_opt("num_heads")? {
        Some(h) if h > 0 => h,
        Some(h) => return Err(cx.err(format!("attribute `num_heads` = {h} must be positive"))),
        None => return Err(cx.err("attribute `num_heads` is required")),
    };
    for name in ["do_rotary", "past_present_share_buffer"] {
        let v = cx.attr_int(name, 0)?;
        if v != 0 {
            return Err(cx.err(format!("attribute `{name}` = {v} is not supported")));
        }
    }
    let unidirectional = match cx.attr_int("unidirectional", 0)? {
        0 => false,
        1 => true,
        u => return Err(cx.err(format!("attribute `unidirectional` = {u} is not 0 or 1"))),
    };
    Ok(Common {
        heads,
        scale: cx.attr_float_opt("scale")?.filter(|&s| s != 0.0),
        filter: cx.attr_float("mask_filter_value", -10000.0)?,
        unidirectional,
    })
}

/// Errors if optional input `i` is given: fp8c has no use for it.
fn refuse_input(cx: &NodeCx<'_>, i: usize, what: &str) -> Result<(), OnnxError> {
    match cx.opt_input(i) {
        Some(_) => Err(cx.err(format!(
            "input {i} ({what}, \"{}\") is not supported",
            cx.input_name(i)
        ))),
        None => Ok(()),
    }
}

/// True if two dims are the same size for sure.
fn same(a: &Dim, b: &Dim) -> bool {
    match (a, b) {
        (Dim::Known(x), Dim::Known(y)) => x == y,
        (Dim::Sym(x), Dim::Sym(y)) => x == y,
        _ => false,
    }
}

/// The most negative finite value of a float type (what a causal mask writes).
fn lowest(dtype: DType) -> f64 {
    match dtype {
        DType::F16 => -65504.0,
        DType::BF16 => -3.389_531_389_251_535_5e38,
        DType::F64 => f64::MIN,
        _ => f64::from(f32::MIN),
    }
}

/// How a mask input hides keys.
#[derive(Clone, Copy, Debug, PartialEq)]
enum MaskKind {
    /// `[B]`: keys at and after each row's end position.
    Ends,
    /// `[2·B]` (B given): end positions, then start positions (keys before them hidden too).
    EndsStarts(u64),
    /// `[B, T]` or `[B, S, T]` of 0/1: zero hides.
    Raw,
}

/// The sizes a mask is checked against.
struct MaskDims<'a> {
    batch: &'a Dim,
    /// Total key length (past + current), if static.
    total: Option<u64>,
    /// Whether `[2·B]` end/start positions are accepted (Attention, not MultiHeadAttention).
    end_start: bool,
}

/// What mask input `i` is, or `None` for a `[B|1, 1]` mask (no mask, as onnxruntime reads it).
fn mask_kind(
    cx: &NodeCx<'_>,
    i: usize,
    mask: Value,
    dims: &MaskDims<'_>,
) -> Result<Option<MaskKind>, OnnxError> {
    let ty = cx.ty(mask).clone();
    let bad = |why: String| {
        cx.err(format!(
            "mask input {i} (\"{}\") has type {ty}: {why}",
            cx.input_name(i)
        ))
    };
    if !ty.dtype.is_int() {
        return Err(bad("expected an integer (int32) tensor".into()));
    }
    let last_fits = |d: &Dim| match (d.known(), dims.total) {
        (Some(have), Some(want)) => have == want,
        _ => true,
    };
    match ty.rank() {
        1 => {
            let len = &ty.shape[0];
            if same(len, dims.batch) {
                return Ok(Some(MaskKind::Ends));
            }
            match (len.known(), dims.batch.known()) {
                (Some(l), Some(b)) if dims.end_start && l == 2 * b => {
                    Ok(Some(MaskKind::EndsStarts(b)))
                }
                (Some(l), Some(b)) if !dims.end_start && l == 3 * b + 2 => Err(bad(
                    "the [3·batch + 2] format (lengths, starts, cumulative lengths) is not \
                     supported"
                        .into(),
                )),
                (Some(_), Some(b)) => Err(bad(format!(
                    "a 1-D mask holds batch_size ({b}){} positions",
                    if dims.end_start {
                        " or 2·batch_size"
                    } else {
                        ""
                    }
                ))),
                _ => Err(bad(format!(
                    "cannot tell its length from the batch size {}: both must be static",
                    dims.batch
                ))),
            }
        }
        2 if ty.shape[1].known() == Some(1) && dims.total != Some(1) => Ok(None),
        2 | 3 if last_fits(&ty.shape[ty.rank() - 1]) => Ok(Some(MaskKind::Raw)),
        2 | 3 => Err(bad(format!(
            "its last axis must be the total key length {}",
            dims.total.map_or("?".into(), |t| t.to_string())
        ))),
        4 => Err(bad(
            "4-D (Megatron) masks are not supported (nor by onnxruntime's CPU kernel)".into(),
        )),
        r => Err(bad(format!("a mask has rank 1, 2 or 3, not {r}"))),
    }
}

/// The additive padding mask, `[B, 1, 1|S, T]` of `dtype`: `filter` where a key is hidden,
/// else 0. `total` is the key length as an i64 scalar.
fn padding(
    cx: &mut NodeCx<'_>,
    mask: Value,
    kind: MaskKind,
    total: Value,
    dtype: DType,
    filter: f32,
) -> Result<Value, OnnxError> {
    let fill = cx.scalar("mask_filter_value", dtype, f64::from(filter))?;
    let zero = cx.scalar("mask_zero", dtype, 0.0)?;
    if kind == MaskKind::Raw {
        let rank = cx.ty(mask).rank();
        let z = Tensor::from_f64_as(cx.ty(mask).dtype, vec![], &[0.0])
            .map_err(|e| cx.err(format!("mask: {e}")))?;
        let z = cx.constant("mask_int_zero", z)?;
        let keep = cx.add_helper("mask_keep", Op::Greater, &[mask, z])?;
        let axes = if rank == 2 { vec![1, 2] } else { vec![1] };
        let keep = cx.add_helper("mask_keep_4d", Op::Unsqueeze { axes }, &[keep])?;
        return cx.add_helper("mask_bias", Op::Where, &[keep, zero, fill]);
    }
    let i64_of = |to| Op::Cast {
        to,
        saturate: false,
    };
    let m = cx.add_helper("mask_index_i64", i64_of(DType::I64), &[mask])?;
    let zero_i = cx.constant("key_zero", Tensor::scalar_i64(0))?;
    let one_i = cx.constant("key_one", Tensor::scalar_i64(1))?;
    let keys = cx.add_helper("key_positions", Op::Range, &[zero_i, total, one_i])?;
    let (ends, starts) = if let MaskKind::EndsStarts(b) = kind {
        let b = b as i64;
        let halves = cx.add_multi(
            &format!("{}.mask_index_halves", cx.name),
            Op::Split {
                axis: 0,
                split: vec![b, b],
            },
            &[m],
        )?;
        (halves[0], Some(halves[1]))
    } else {
        (m, None)
    };
    let ends = reshape(cx, "mask_ends", ends, &[-1, 1, 1, 1])?;
    let mut hidden = cx.add_helper("past_end", Op::GreaterOrEqual, &[keys, ends])?;
    if let Some(starts) = starts {
        let starts = reshape(cx, "mask_starts", starts, &[-1, 1, 1, 1])?;
        let before = cx.add_helper("before_start", Op::Less, &[keys, starts])?;
        hidden = cx.add_helper("outside", Op::Or, &[hidden, before])?;
    }
    cx.add_helper("mask_bias", Op::Where, &[hidden, fill, zero])
}

/// What attention adds to the scaled scores besides Q·Kᵀ.
struct Extras {
    /// The mask input and how it hides keys.
    mask: Option<(Value, MaskKind)>,
    /// `attention_bias`, broadcast to `[B, N, S, T]`.
    bias: Option<Value>,
    /// The past keys `[B, N, P, H]` (for the causal offset), if any.
    past_key: Option<Value>,
}

/// Multi-head attention of `q` `[B, N, S, H]` over `k` `[B, N, T, H]` and `v` `[B, N, T, Hv]`
/// (past already included): the node's output `[B, S, N·Hv]` and the pre-softmax scores.
fn attend(
    cx: &mut NodeCx<'_>,
    c: &Common,
    (q, k, v): (Value, Value, Value),
    extras: Extras,
) -> Result<(Value, Value), OnnxError> {
    let dtype = cx.ty(q).dtype;
    let scale = match (c.scale, dim(cx, q, 3)) {
        (Some(s), _) => cx.scalar("scale", dtype, f64::from(s))?,
        (None, Some(h)) => {
            let s = 1.0f32 / (h as f32).sqrt();
            cx.scalar("scale", dtype, f64::from(s))?
        }
        (None, None) => {
            let size = cx.add_helper(
                "head_size",
                Op::Shape {
                    start: 3,
                    end: Some(4),
                },
                &[q],
            )?;
            let f = Op::Cast {
                to: DType::F32,
                saturate: false,
            };
            let size = cx.add_helper("head_size_f32", f, &[size])?;
            let root = cx.add_helper("head_size_sqrt", Op::Sqrt, &[size])?;
            let s = cx.add_helper("default_scale", Op::Reciprocal, &[root])?;
            let s = cx.add_helper(
                "default_scale_shape",
                Op::Squeeze {
                    axes: Some(vec![0]),
                },
                &[s],
            )?;
            match dtype {
                DType::F32 => s,
                _ => cx.add_helper(
                    "scale",
                    Op::Cast {
                        to: dtype,
                        saturate: false,
                    },
                    &[s],
                )?,
            }
        }
    };
    let kt = transpose(cx, "k_transposed", k, &[0, 1, 3, 2])?;
    let qk = cx.add_helper("qk", Op::MatMul, &[q, kt])?;
    let mut scores = cx.add_helper("qk_scaled", Op::Mul, &[qk, scale])?;

    // mask_filter_value where padding hides a key, the lowest value where causality does,
    // plus attention_bias: one tensor added to the scaled scores, as onnxruntime adds it.
    let mut add = None;
    if let Some((mask, kind)) = extras.mask {
        let total = seq_len(cx, k, "total_length")?;
        add = Some(padding(cx, mask, kind, total, dtype, c.filter)?);
    }
    let queries = dim(cx, q, 2);
    if c.unidirectional && queries != Some(1) {
        let sq = seq_len(cx, q, "query_length")?;
        let total = seq_len(cx, k, "key_length")?;
        let zero = cx.constant("causal_zero", Tensor::scalar_i64(0))?;
        let one = cx.constant("causal_one", Tensor::scalar_i64(1))?;
        let mut rows = cx.add_helper("query_positions", Op::Range, &[zero, sq, one])?;
        if let Some(pk) = extras.past_key {
            let p = seq_len(cx, pk, "past_length")?;
            rows = cx.add_helper("query_positions_after_past", Op::Add, &[rows, p])?;
        }
        let rows = cx.add_helper("query_column", Op::Unsqueeze { axes: vec![1] }, &[rows])?;
        let cols = cx.add_helper("causal_keys", Op::Range, &[zero, total, one])?;
        let mut future = cx.add_helper("future", Op::Greater, &[cols, rows])?;
        if queries.is_none() {
            // One query (a decoding step) sees every key: onnxruntime applies no causal mask.
            let several = cx.add_helper("several_queries", Op::Greater, &[sq, one])?;
            future = cx.add_helper("causal", Op::And, &[future, several])?;
        }
        let low = cx.scalar("lowest", dtype, lowest(dtype))?;
        let base = match add {
            Some(a) => a,
            None => cx.scalar("no_mask", dtype, 0.0)?,
        };
        add = Some(cx.add_helper("causal_bias", Op::Where, &[future, low, base])?);
    }
    if let Some(b) = extras.bias {
        add = Some(match add {
            Some(a) => cx.add_helper("bias_and_mask", Op::Add, &[b, a])?,
            None => b,
        });
    }
    if let Some(a) = add {
        scores = cx.add_helper("scores", Op::Add, &[scores, a])?;
    }
    let probs = cx.add_helper("softmax", Op::Softmax { axis: -1 }, &[scores])?;
    let y = cx.add_helper("context", Op::MatMul, &[probs, v])?;
    let y = transpose(cx, "context_bshd", y, &[0, 2, 1, 3])?;
    let shape = ints(cx, "merged.shape", &[0, 0, -1])?;
    let y = cx.add(Op::Reshape { allowzero: false }, &[y, shape])?;
    Ok((y, scores))
}

/// `[B, S, N·H]` → `[B, N, S, H]`.
fn heads(cx: &mut NodeCx<'_>, name: &str, x: Value, n: i64) -> Result<Value, OnnxError> {
    let r = reshape(cx, &format!("{name}_heads"), x, &[0, 0, n, -1])?;
    transpose(cx, &format!("{name}_bnsh"), r, &[0, 2, 1, 3])
}

/// The hidden sizes of Q (= K) and V in a packed QKV projection of `total` columns.
fn qkv_sizes(cx: &NodeCx<'_>, heads: i64, total: Option<u64>) -> Result<(i64, i64), OnnxError> {
    let (d, dv) = match cx.attr_ints("qkv_hidden_sizes") {
        Some(s) if s.len() != 3 || s.iter().any(|&v| v <= 0) || s[0] != s[1] => {
            return Err(cx.err(format!(
                "qkv_hidden_sizes {s:?} must be three positive sizes, the first two equal"
            )));
        }
        Some(s) => {
            if let Some(t) = total
                && t as i64 != s[0] + s[1] + s[2]
            {
                return Err(cx.err(format!(
                    "qkv_hidden_sizes {s:?} do not add up to the {t} columns of the weights"
                )));
            }
            (s[0], s[2])
        }
        None => {
            let Some(t) = total else {
                return Err(cx.err(
                    "the hidden size is unknown: the weights' (or bias') last dim must be static",
                ));
            };
            if t % 3 != 0 {
                return Err(cx.err(format!(
                    "the weights have {t} columns, not three equal Q, K and V parts"
                )));
            }
            ((t / 3) as i64, (t / 3) as i64)
        }
    };
    if d % heads != 0 || dv % heads != 0 {
        return Err(cx.err(format!(
            "hidden sizes {d} (Q, K) and {dv} (V) must be multiples of num_heads = {heads}"
        )));
    }
    Ok((d, dv))
}

/// Self-attention on a packed projection `qkv` `[B, S, D + D + Dv]` (Attention and
/// QAttention from here on): inputs `mask_at`, `past_at` and `bias_at` of the node.
fn packed_self_attention(
    cx: &mut NodeCx<'_>,
    c: &Common,
    qkv: Value,
    (d, dv): (i64, i64),
    [mask_at, past_at, bias_at]: [usize; 3],
) -> Result<Vec<Value>, OnnxError> {
    let q = slice(cx, "q", qkv, 2, (0, d, 1))?;
    let k = slice(cx, "k", qkv, 2, (d, 2 * d, 1))?;
    let v = slice(cx, "v", qkv, 2, (2 * d, 2 * d + dv, 1))?;
    let (q, mut k, mut v) = (
        heads(cx, "q", q, c.heads)?,
        heads(cx, "k", k, c.heads)?,
        heads(cx, "v", v, c.heads)?,
    );
    let mut past_key = None;
    if let Some(past) = cx.opt_input(past_at) {
        let pty = cx.ty(past).clone();
        if pty.rank() != 5 || pty.shape[0].known().is_some_and(|n| n != 2) || d != dv {
            return Err(cx.err(format!(
                "past (\"{}\") has type {pty}; expected [2, batch, num_heads, past_length, \
                 head_size] with equal Q, K and V hidden sizes (here {d}, {d}, {dv})",
                cx.input_name(past_at)
            )));
        }
        let mut half = |i: i64, name: &str| -> Result<Value, OnnxError> {
            let at = cx.constant(&format!("{name}_index"), Tensor::scalar_i64(i))?;
            cx.add_helper(name, Op::Gather { axis: 0 }, &[past, at])
        };
        let (pk, pv) = (half(0, "past_key")?, half(1, "past_value")?);
        k = cx.add_helper("present_key", Op::Concat { axis: 2 }, &[pk, k])?;
        v = cx.add_helper("present_value", Op::Concat { axis: 2 }, &[pv, v])?;
        past_key = Some(pk);
    }
    let present = if cx.output_used(1) {
        if d != dv {
            return Err(cx.err(format!(
                "output 1 (present) is used, but K and V have different hidden sizes ({d}, {dv})"
            )));
        }
        let ku = cx.add_helper("present_k", Op::Unsqueeze { axes: vec![0] }, &[k])?;
        let vu = cx.add_helper("present_v", Op::Unsqueeze { axes: vec![0] }, &[v])?;
        Some(cx.add_helper("present", Op::Concat { axis: 0 }, &[ku, vu])?)
    } else {
        None
    };
    let input_ty = cx.ty(qkv).clone();
    let past_len = past_key.map(|p| dim(cx, p, 2));
    let total = match (input_ty.shape[1].known(), past_len) {
        (Some(s), None) => Some(s),
        (Some(s), Some(Some(p))) => Some(s + p),
        _ => None,
    };
    let mask = match cx.opt_input(mask_at) {
        None => None,
        Some(m) => {
            let dims = MaskDims {
                batch: &input_ty.shape[0],
                total,
                end_start: true,
            };
            mask_kind(cx, mask_at, m, &dims)?.map(|kind| (m, kind))
        }
    };
    let extras = Extras {
        mask,
        bias: attention_bias(cx, bias_at)?,
        past_key,
    };
    let (y, _) = attend(cx, c, (q, k, v), extras)?;
    Ok(match present {
        Some(p) => vec![y, p],
        None => vec![y],
    })
}

/// Optional input `i`, attention_bias `[B|1, N|1, S, T]`.
fn attention_bias(cx: &NodeCx<'_>, i: usize) -> Result<Option<Value>, OnnxError> {
    match cx.opt_input(i) {
        None => Ok(None),
        Some(_) => float_input(cx, i, "attention_bias", &[4]).map(Some),
    }
}

/// Attention: inputs input `[B, S, Di]`, weights `[Di, D + D + Dv]`, bias, mask_index, past
/// `[2, B, N, P, H]`, attention_bias, past_sequence_length (refused); outputs output
/// `[B, S, Dv]` and present `[2, B, N, P + S, H]`.
pub(super) fn attention(cx: &mut NodeCx<'_>) -> Result<Vec<Value>, OnnxError> {
    let c = common(cx)?;
    refuse_input(cx, 6, "past_sequence_length")?;
    let x = float_input(cx, 0, "input", &[3])?;
    let w = float_input(cx, 1, "weights", &[2])?;
    let bias = match cx.opt_input(2) {
        Some(_) => Some(float_input(cx, 2, "bias", &[1])?),
        None => None,
    };
    let total = dim(cx, w, 1).or_else(|| bias.and_then(|b| dim(cx, b, 0)));
    let sizes = qkv_sizes(cx, c.heads, total)?;
    let qkv = cx.add_helper("qkv", Op::MatMul, &[x, w])?;
    let qkv = match bias {
        Some(b) => cx.add_helper("qkv_biased", Op::Add, &[qkv, b])?,
        None => qkv,
    };
    packed_self_attention(cx, &c, qkv, sizes, [3, 4, 5])
}

/// QAttention (`quantize_dynamic` of an Attention): inputs input (uint8 or int8, the
/// DynamicQuantizeLinear of the float input), weight (uint8/int8 `[Di, 3·D]`), bias,
/// input_scale, weight_scale (per tensor or per column), mask_index, input_zero_point,
/// weight_zero_point, past. The projection is the exact integer product, as f32, times
/// `weight_scale · input_scale`, plus the bias (onnxruntime's scale-bias output step); then
/// Attention.
pub(super) fn q_attention(cx: &mut NodeCx<'_>) -> Result<Vec<Value>, OnnxError> {
    let c = common(cx)?;
    if cx.attr("qkv_hidden_sizes").is_some() {
        return Err(cx.err("attribute `qkv_hidden_sizes` is not supported by QAttention"));
    }
    let (x, w) = (cx.input(0)?, cx.input(1)?);
    if cx.ty(x).rank() != 3 || cx.ty(w).rank() != 2 {
        return Err(cx.err(format!(
            "input has type {} and weight {}; expected [batch, sequence, hidden] and \
             [hidden, 3 · hidden]",
            cx.ty(x),
            cx.ty(w)
        )));
    }
    let bias = float_input(cx, 2, "bias", &[1])?;
    let dtype = cx.ty(bias).dtype;
    let xi = integer::shifted(cx, "input", x, cx.opt_input(6), DType::I32, 0)?;
    let wi = integer::shifted(cx, "weight", w, cx.opt_input(7), DType::I32, 0)?;
    let acc = cx.add_helper("qkv_i32", Op::MatMul, &[xi, wi])?;
    let f = Op::Cast {
        to: dtype,
        saturate: false,
    };
    let acc = cx.add_helper("qkv_acc", f, &[acc])?;
    let (xs, ws) = (
        float_input(cx, 3, "input_scale", &[0, 1])?,
        float_input(cx, 4, "weight_scale", &[0, 1])?,
    );
    let scale = cx.add_helper("dequant_scale", Op::Mul, &[ws, xs])?;
    let qkv = cx.add_helper("qkv_scaled", Op::Mul, &[acc, scale])?;
    let qkv = cx.add_helper("qkv_biased", Op::Add, &[qkv, bias])?;
    let total = dim(cx, w, 1).or_else(|| dim(cx, bias, 0));
    let sizes = qkv_sizes(cx, c.heads, total)?;
    packed_self_attention(cx, &c, qkv, sizes, [5, 8, usize::MAX])
}

/// `x + bias[from..to]` (the slice of a packed Q/K/V bias that belongs to `x`).
fn plus_bias(
    cx: &mut NodeCx<'_>,
    name: &str,
    x: Value,
    bias: Value,
    (from, to): (i64, i64),
) -> Result<Value, OnnxError> {
    let b = slice(cx, &format!("{name}_bias"), bias, 0, (from, to, 1))?;
    cx.add_helper(&format!("{name}_biased"), Op::Add, &[x, b])
}

/// Part `i` of a packed `[B, S, N, parts, H]` tensor, as `[B, N, S, H]`.
fn unpack(cx: &mut NodeCx<'_>, name: &str, packed: Value, i: i64) -> Result<Value, OnnxError> {
    let at = cx.constant(&format!("{name}_part"), Tensor::scalar_i64(i))?;
    let x = cx.add_helper(
        &format!("{name}_bsnh"),
        Op::Gather { axis: 3 },
        &[packed, at],
    )?;
    transpose(cx, &format!("{name}_bnsh"), x, &[0, 2, 1, 3])
}

/// A packed `[parts · N · H]` bias as `[N, parts, H]`, to add to a packed `[B, S, N, parts, H]`
/// input (the packed layouts interleave Q, K and V per head; the bias keeps them apart).
fn packed_bias(
    cx: &mut NodeCx<'_>,
    bias: Value,
    (from, parts, n): (i64, i64, i64),
) -> Result<Value, OnnxError> {
    let b = slice(cx, "packed_bias", bias, 0, (from, i64::MAX, 1))?;
    let b = reshape(cx, "packed_bias_parts", b, &[parts, n, -1])?;
    transpose(cx, "packed_bias_per_head", b, &[1, 0, 2])
}

/// MultiHeadAttention: inputs query (`[B, S, D]`, or packed QKV `[B, S, N, 3, H]`), key
/// (`[B, L, D]`, packed KV `[B, L, N, 2, H]`, or `[B, N, L, H]` with value `[B, N, L, Hv]`
/// already projected), value (`[B, L, Dv]`), bias (`[D + D + Dv]`), key_padding_mask,
/// attention_bias, past_key and past_value (`[B, N, P, H]`); past_sequence_length and
/// cache_indirection are refused. Outputs output `[B, S, Dv]`, present_key, present_value
/// and qk (the scores before softmax, mask and bias added, as onnxruntime gives them).
pub(super) fn multi_head_attention(cx: &mut NodeCx<'_>) -> Result<Vec<Value>, OnnxError> {
    let c = common(cx)?;
    refuse_input(cx, 8, "past_sequence_length")?;
    refuse_input(cx, 9, "cache_indirection")?;
    let n = c.heads;
    let query = float_input(cx, 0, "query", &[3, 5])?;
    let bias = match cx.opt_input(3) {
        Some(_) => Some(float_input(cx, 3, "bias", &[1])?),
        None => None,
    };
    let (key, value) = (cx.opt_input(1), cx.opt_input(2));
    let parts = |cx: &NodeCx<'_>, x: Value, want: u64, what: &str| match dim(cx, x, 3) {
        Some(p) if p != want => Err(cx.err(format!(
            "{what} has type {}; its axis 3 must hold the {want} packed parts",
            cx.ty(x)
        ))),
        _ => Ok(()),
    };
    let (q, k, v) = if cx.ty(query).rank() == 5 {
        if key.is_some() || value.is_some() {
            return Err(cx.err("a packed QKV query (5-D) takes no key or value input"));
        }
        parts(cx, query, 3, "the packed query")?;
        let packed = match bias {
            Some(b) => {
                let b = packed_bias(cx, b, (0, 3, n))?;
                cx.add_helper("packed_qkv_biased", Op::Add, &[query, b])?
            }
            None => query,
        };
        (
            unpack(cx, "q", packed, 0)?,
            unpack(cx, "k", packed, 1)?,
            unpack(cx, "v", packed, 2)?,
        )
    } else {
        let Some(key) = key else {
            return Err(cx.err("input 1 (key) is required unless the query is packed QKV"));
        };
        if let Some(d) = dim(cx, query, 2)
            && d as i64 % n != 0
        {
            return Err(cx.err(format!(
                "query has type {}: its hidden size {d} is not a multiple of num_heads = {n}",
                cx.ty(query)
            )));
        }
        // The bias's Q part, and D where K and V parts follow it.
        let d = match (bias, dim(cx, query, 2)) {
            (None, _) => None,
            (Some(_), Some(d)) => Some(d as i64),
            (Some(_), None) => {
                return Err(cx.err(format!(
                    "query has type {}: its hidden size must be static to split the bias",
                    cx.ty(query)
                )));
            }
        };
        let q = match (bias, d) {
            (Some(b), Some(d)) => plus_bias(cx, "q", query, b, (0, d))?,
            _ => query,
        };
        let q = heads(cx, "q", q, n)?;
        match (cx.ty(key).rank(), value) {
            (5, None) => {
                parts(cx, key, 2, "the packed key/value")?;
                let packed = match (bias, d) {
                    (Some(b), Some(d)) => {
                        let b = packed_bias(cx, b, (d, 2, n))?;
                        cx.add_helper("packed_kv_biased", Op::Add, &[key, b])?
                    }
                    _ => key,
                };
                (q, unpack(cx, "k", packed, 0)?, unpack(cx, "v", packed, 1)?)
            }
            (4, Some(value)) if cx.ty(value).rank() == 4 => {
                if bias.is_some() || cx.opt_input(6).is_some() {
                    return Err(cx.err(
                        "key and value given as [batch, num_heads, length, head_size] take no \
                         bias or past_key/past_value",
                    ));
                }
                (q, key, value)
            }
            (3, Some(value)) if cx.ty(value).rank() == 3 => {
                let (k, v) = match (bias, d) {
                    (Some(b), Some(d)) => (
                        plus_bias(cx, "k", key, b, (d, 2 * d))?,
                        plus_bias(cx, "v", value, b, (2 * d, i64::MAX))?,
                    ),
                    _ => (key, value),
                };
                (q, heads(cx, "k", k, n)?, heads(cx, "v", v, n)?)
            }
            (_, value) => {
                return Err(cx.err(format!(
                    "key has type {} and value {}: expected 3-D key and value, 4-D key and \
                     value, or a 5-D packed key alone",
                    cx.ty(key),
                    value.map_or("absent".to_string(), |v| cx.ty(v).to_string()),
                )));
            }
        }
    };
    let (k, v, past_key) = match (cx.opt_input(6), cx.opt_input(7)) {
        (None, None) => (k, v, None),
        (Some(_), Some(_)) => {
            let pk = float_input(cx, 6, "past_key", &[4])?;
            let pv = float_input(cx, 7, "past_value", &[4])?;
            let k = cx.add_helper("present_key", Op::Concat { axis: 2 }, &[pk, k])?;
            let v = cx.add_helper("present_value", Op::Concat { axis: 2 }, &[pv, v])?;
            (k, v, Some(pk))
        }
        _ => return Err(cx.err("past_key and past_value must be given together")),
    };
    let batch = cx.ty(query).shape[0].clone();
    let mask = match cx.opt_input(4) {
        None => None,
        Some(m) => {
            let dims = MaskDims {
                batch: &batch,
                total: dim(cx, k, 2),
                end_start: false,
            };
            mask_kind(cx, 4, m, &dims)?.map(|kind| (m, kind))
        }
    };
    let extras = Extras {
        mask,
        bias: attention_bias(cx, 5)?,
        past_key,
    };
    let (y, qk) = attend(cx, &c, (q, k, v), extras)?;
    Ok(vec![y, k, v, qk])
}

/// Integer ids input `i`, checked.
fn ids_input(cx: &NodeCx<'_>, i: usize, what: &str) -> Result<Value, OnnxError> {
    let v = cx.input(i)?;
    let ty = cx.ty(v);
    if !ty.dtype.is_int() || ty.rank() != 2 {
        return Err(cx.err(format!(
            "{what} (\"{}\") has type {ty}; expected a 2-D integer (int32) tensor",
            cx.input_name(i)
        )));
    }
    Ok(v)
}

/// EmbedLayerNormalization's tables: word, position and (optional) segment embeddings,
/// gamma and beta.
struct Tables {
    word: Value,
    position: Value,
    segment: Option<Value>,
    gamma: Value,
    beta: Value,
}

/// EmbedLayerNormalization: inputs input_ids `[B, S]`, segment_ids, word_embedding,
/// position_embedding, segment_embedding, gamma, beta, mask `[B, S]`, position_ids
/// (`[B, S]` or `[1, S]`; default `0..S`); attribute epsilon (default 1e-12). Outputs the
/// LayerNorm of `word + position + segment` embeddings, mask_index (int32 `[B]`: per row the
/// count of mask entries equal to 1, as onnxruntime counts; zeros without a mask) and
/// embedding_sum (the sum before normalisation).
pub(super) fn embed_layer_norm(cx: &mut NodeCx<'_>) -> Result<Vec<Value>, OnnxError> {
    let segment = match (cx.opt_input(1), cx.opt_input(4)) {
        (None, None) => None,
        (Some(_), Some(_)) => Some(float_input(cx, 4, "segment_embedding", &[2])?),
        _ => {
            return Err(
                cx.err("segment_ids and segment_embedding must be given together (or neither)")
            );
        }
    };
    let tables = Tables {
        word: float_input(cx, 2, "word_embedding", &[2])?,
        position: float_input(cx, 3, "position_embedding", &[2])?,
        segment,
        gamma: float_input(cx, 5, "gamma", &[1])?,
        beta: float_input(cx, 6, "beta", &[1])?,
    };
    embed(cx, tables, 8)
}

/// QEmbedLayerNormalization (`quantize_dynamic` of an EmbedLayerNormalization): the five
/// tables as uint8 or int8 (inputs 2–6) with per-tensor scales (8–12) and zero points
/// (13–17), dequantized `(q − zero_point) · scale` as onnxruntime does, then
/// EmbedLayerNormalization (no position_ids; outputs output and mask_index).
pub(super) fn q_embed_layer_norm(cx: &mut NodeCx<'_>) -> Result<Vec<Value>, OnnxError> {
    let table = |cx: &mut NodeCx<'_>, i: usize, what: &str| -> Result<Value, OnnxError> {
        let (q, zp) = (cx.input(i)?, cx.input(i + 11)?);
        let scale = float_input(cx, i + 6, &format!("{what}_scale"), &[0, 1])?;
        let codes = integer::shifted(cx, what, q, Some(zp), DType::F32, 0)?;
        cx.add_helper(&format!("{what}_dequantized"), Op::Mul, &[codes, scale])
    };
    let given = [1, 4, 10, 15].map(|i| cx.opt_input(i).is_some());
    let segment = match given {
        [false, false, false, false] => None,
        [true, true, true, true] => Some(table(cx, 4, "segment_embedding")?),
        _ => {
            return Err(cx.err(
                "segment_ids, segment_embedding, its scale and zero point must be given \
                 together (or none of them)",
            ));
        }
    };
    let tables = Tables {
        word: table(cx, 2, "word_embedding")?,
        position: table(cx, 3, "position_embedding")?,
        segment,
        gamma: table(cx, 5, "gamma")?,
        beta: table(cx, 6, "beta")?,
    };
    let mut outs = embed(cx, tables, usize::MAX)?;
    outs.truncate(2);
    Ok(outs)
}

/// The embedding sum of input_ids (input 0), segment_ids (input 1, with `t.segment`) and
/// positions (input `positions_at`, or `0..S`), layer-normalised with `epsilon`; the mask
/// index of input 7; the sum.
fn embed(cx: &mut NodeCx<'_>, t: Tables, positions_at: usize) -> Result<Vec<Value>, OnnxError> {
    let epsilon = cx.attr_float("epsilon", 1e-12)?;
    let ids = ids_input(cx, 0, "input_ids")?;
    let gather = Op::Gather { axis: 0 };
    let w = cx.add_helper("word", gather.clone(), &[t.word, ids])?;
    let positions = match cx.opt_input(positions_at) {
        Some(_) => ids_input(cx, positions_at, "position_ids")?,
        None => {
            let s = seq_len_2d(cx, ids)?;
            let zero = cx.constant("position_zero", Tensor::scalar_i64(0))?;
            let one = cx.constant("position_one", Tensor::scalar_i64(1))?;
            cx.add_helper("position_ids", Op::Range, &[zero, s, one])?
        }
    };
    let p = cx.add_helper("position", gather.clone(), &[t.position, positions])?;
    let mut sum = cx.add_helper("word_position", Op::Add, &[w, p])?;
    if let Some(table) = t.segment {
        let seg_ids = ids_input(cx, 1, "segment_ids")?;
        let s = cx.add_helper("segment", gather, &[table, seg_ids])?;
        sum = cx.add_helper("embedding_sum", Op::Add, &[sum, s])?;
    }
    let y = cx.add(
        Op::LayerNormalization { axis: -1, epsilon },
        &[sum, t.gamma, t.beta],
    )?;
    let count = match cx.opt_input(7) {
        Some(_) => {
            let mask = ids_input(cx, 7, "mask")?;
            let one = Tensor::from_f64_as(cx.ty(mask).dtype, vec![], &[1.0])
                .map_err(|e| cx.err(format!("mask: {e}")))?;
            let one = cx.constant("mask_one", one)?;
            let kept = cx.add_helper("mask_kept", Op::Equal, &[mask, one])?;
            let i32 = Op::Cast {
                to: DType::I32,
                saturate: false,
            };
            let kept = cx.add_helper("mask_kept_i32", i32, &[kept])?;
            let sum = Op::ReduceSum {
                axes: Some(vec![1]),
                keepdims: false,
            };
            cx.add_helper("mask_index", sum, &[kept])?
        }
        None => {
            let batch = cx.add_helper(
                "batch",
                Op::Shape {
                    start: 0,
                    end: Some(1),
                },
                &[ids],
            )?;
            let zeros = Op::ConstantOfShape {
                value: Tensor::from_i32(vec![1], &[0]),
            };
            cx.add_helper("mask_index", zeros, &[batch])?
        }
    };
    Ok(vec![y, count, sum])
}

/// Axis 1 of a `[B, S]` tensor as an i64 scalar.
fn seq_len_2d(cx: &mut NodeCx<'_>, x: Value) -> Result<Value, OnnxError> {
    let s = cx.add_helper(
        "sequence_length",
        Op::Shape {
            start: 1,
            end: Some(2),
        },
        &[x],
    )?;
    cx.add_helper(
        "sequence_length_scalar",
        Op::Squeeze {
            axes: Some(vec![0]),
        },
        &[s],
    )
}
