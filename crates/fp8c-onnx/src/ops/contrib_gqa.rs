//! onnxruntime's com.microsoft `GroupQueryAttention`, the attention of onnxruntime-genai's
//! LLM exports (`onnxruntime_genai.models.builder`, fp32 and int4 alike), decomposed at import
//! into IR ops (slices, rotary embedding, matmul, where, softmax) as the opset-23 `Attention`
//! is in [`super::attention`].
//!
//! Semantics are onnxruntime's CPU kernel's (`contrib_ops/cpu/bert/gqa_attention_base.h`,
//! `group_query_attention_helper.h`):
//! - query `[B, S, N·H]` with key and value `[B, S, kvN·H]`, or all three packed in query
//!   `[B, S, (N + 2·kvN)·H]`; past_key/past_value `[B, kvN, P, H]`; seqlens_k `[B]` (int32,
//!   each row's total length − 1); total_sequence_length (int32 scalar).
//! - A run is a first prompt when `S == total_sequence_length`: nothing of the past is used.
//!   Otherwise row b's past length is `seqlens_k[b] + 1 − S`.
//! - present_key/present_value `[B, kvN, max(P, total_sequence_length), H]`: row b's first
//!   past-length entries of the past, then the S new ones, then zeros.
//! - With `do_rotary`, query and key turn by the cos/sin caches (`[max_position, R/2]`) at
//!   position ids `past length + s` (or the position_ids input).
//! - Query s of row b sees the keys up to `past length + s` (causal); with
//!   `local_window_size` w > 0, only the last w of them (itself included).
//! - Scores are `scale · q·kᵀ` (scale 0: 1/√H), then `softcap · tanh(x / softcap)` when
//!   softcap > 0, then softmax over the keys seen.
//!
//! Refused with an error that names the node: attention_bias, head_sink, `smooth_softmax`,
//! the output_qk output, the quantized-cache inputs.
//!
//! Also onnxruntime's standalone com.microsoft RotaryEmbedding ([`rotary_embedding`]), the
//! same rotation with its own input order and a position offset.

use super::NodeCx;
use super::attention::{dim, float_input, ints, reshape, rotate, slice, transpose};
use crate::OnnxError;
use fp8c_ir::{DType, Op, Tensor, Value};

/// GroupQueryAttention: see the module docs.
pub(super) fn group_query_attention(cx: &mut NodeCx<'_>) -> Result<Vec<Value>, OnnxError> {
    let pos_heads = |cx: &NodeCx<'_>, name: &str| -> Result<i64, OnnxError> {
        match cx.attr_int_opt(name)? {
            Some(h) if h > 0 => Ok(h),
            Some(h) => Err(cx.err(format!("attribute `{name}` = {h} must be positive"))),
            None => Err(cx.err(format!("attribute `{name}` is required"))),
        }
    };
    let n = pos_heads(cx, "num_heads")?;
    let kv_n = pos_heads(cx, "kv_num_heads")?;
    if n % kv_n != 0 {
        return Err(cx.err(format!(
            "num_heads {n} must be a multiple of kv_num_heads {kv_n}"
        )));
    }
    for (i, what) in [(10, "attention_bias"), (11, "head_sink")] {
        if cx.opt_input(i).is_some() {
            return Err(cx.err(format!("the {what} input is not supported")));
        }
    }
    if (12..cx.num_inputs()).any(|i| cx.opt_input(i).is_some()) {
        return Err(cx.err("the quantized KV-cache inputs (12 on) are not supported"));
    }
    if cx.attr_bool("smooth_softmax", false)? {
        return Err(cx.err("smooth_softmax = 1 is not supported"));
    }
    cx.reject_used_outputs(3, "fp8c does not give output_qk")?;
    let softcap = cx.attr_float("softcap", 0.0)?;
    let window = cx.attr_int("local_window_size", -1)?;
    let rotary = cx.attr_bool("do_rotary", false)?;
    let interleaved = cx.attr_bool("rotary_interleaved", false)?;

    let query = float_input(cx, 0, "query", &[3])?;
    let dtype = cx.ty(query).dtype;
    let (q, k, v, h) = match (cx.opt_input(1), cx.opt_input(2)) {
        (None, None) => {
            let width = dim(cx, query, 2).ok_or_else(|| {
                cx.err(format!(
                    "a packed query needs a known last dim, got {}",
                    cx.ty(query)
                ))
            })? as i64;
            let parts = n + 2 * kv_n;
            if width % parts != 0 {
                return Err(cx.err(format!(
                    "packed query width {width} is not (num_heads + 2·kv_num_heads = {parts}) · head_size"
                )));
            }
            let h = width / parts;
            let q = slice(cx, "packed_q", query, 2, (0, n * h, 1))?;
            let k = slice(cx, "packed_k", query, 2, (n * h, (n + kv_n) * h, 1))?;
            let v = slice(cx, "packed_v", query, 2, ((n + kv_n) * h, width, 1))?;
            (q, k, v, h)
        }
        (Some(_), Some(_)) => {
            let k = float_input(cx, 1, "key", &[3])?;
            let v = float_input(cx, 2, "value", &[3])?;
            let width = dim(cx, query, 2).ok_or_else(|| {
                cx.err(format!(
                    "query needs a known last dim, got {}",
                    cx.ty(query)
                ))
            })? as i64;
            if width % n != 0 {
                return Err(cx.err(format!(
                    "query width {width} is not a multiple of num_heads {n}"
                )));
            }
            (query, k, v, width / n)
        }
        _ => return Err(cx.err("key and value must be given together (or both packed in query)")),
    };
    let q = reshape(cx, "q_heads", q, &[0, 0, n, h])?;
    let k = reshape(cx, "k_heads", k, &[0, 0, kv_n, h])?;
    let v = reshape(cx, "v_heads", v, &[0, 0, kv_n, h])?;

    // Each row's past length: 0 on a first prompt, else seqlens_k + 1 − S.
    let i64_of = |cx: &mut NodeCx<'_>, name: &str, x: Value| {
        let c = Op::Cast {
            to: DType::I64,
            saturate: false,
        };
        cx.add_helper(name, c, &[x])
    };
    let seq = cx.add_helper(
        "seq_len",
        Op::Shape {
            start: 1,
            end: Some(2),
        },
        &[q],
    )?;
    let total = cx.input(6)?;
    let total = i64_of(cx, "total_len", total)?;
    let total = reshape(cx, "total_len_1d", total, &[1])?;
    let first = cx.add_helper("first_prompt", Op::Equal, &[seq, total])?;
    let lens = cx.input(5)?;
    let lens = i64_of(cx, "seqlens", lens)?;
    let one = ints(cx, "one", &[1])?;
    let totals = cx.add_helper("row_totals", Op::Add, &[lens, one])?;
    let pasts = cx.add_helper("row_pasts_after", Op::Sub, &[totals, seq])?;
    let zero = ints(cx, "zero", &[0])?;
    let past_len = cx.add_helper("row_pasts", Op::Where, &[first, zero, pasts])?;
    let past_col = reshape(cx, "row_pasts_column", past_len, &[-1, 1])?;
    let zero_s = cx.constant("zero_scalar", Tensor::scalar_i64(0))?;
    let one_s = cx.constant("one_scalar", Tensor::scalar_i64(1))?;
    let seq_s = reshape(cx, "seq_len_scalar", seq, &[])?;
    let steps = cx.add_helper("query_steps", Op::Range, &[zero_s, seq_s, one_s])?;
    // [B, S]: the position of each query token.
    let positions = cx.add_helper("positions", Op::Add, &[past_col, steps])?;

    let (q, k) = if rotary {
        let (Some(cos), Some(sin)) = (cx.opt_input(7), cx.opt_input(8)) else {
            return Err(cx.err("do_rotary = 1 needs the cos_cache and sin_cache inputs"));
        };
        let half = dim(cx, cos, 1).map(|d| d as i64);
        let rot = half.map(|r| 2 * r);
        if let Some(r) = rot
            && (r == 0 || r > h)
        {
            return Err(cx.err(format!(
                "cos_cache gives a rotary dim of {r}; it must be positive and at most the head size {h}"
            )));
        }
        let pos = match cx.opt_input(9) {
            Some(p) => i64_of(cx, "position_ids", p)?,
            None => positions,
        };
        let cos = cx.add_helper("cos_at", Op::Gather { axis: 0 }, &[cos, pos])?;
        let sin = cx.add_helper("sin_at", Op::Gather { axis: 0 }, &[sin, pos])?;
        let rot_attr = rot.filter(|&r| r < h).unwrap_or(0);
        let mut turn = |name: &str, x: Value| -> Result<Value, OnnxError> {
            let dims = (rot_attr, rot, Some(h));
            let (r, pass) = rotate(cx, x, (cos, sin), 2, interleaved, dims)?;
            match pass {
                Some(p) => {
                    cx.add_helper(&format!("{name}_rotary"), Op::Concat { axis: 3 }, &[r, p])
                }
                None => Ok(r),
            }
        };
        (turn("q", q)?, turn("k", k)?)
    } else {
        (q, k)
    };
    let q = transpose(cx, "q_bnsh", q, &[0, 2, 1, 3])?;
    let k = transpose(cx, "k_bnsh", k, &[0, 2, 1, 3])?;
    let v = transpose(cx, "v_bnsh", v, &[0, 2, 1, 3])?;

    // present = past[:past length] ++ new ++ zeros, row by row, over max(P, total) positions.
    let (present_k, present_v) = match (cx.opt_input(3), cx.opt_input(4)) {
        (Some(_), Some(_)) => {
            let pk = float_input(cx, 3, "past_key", &[4])?;
            let pv = float_input(cx, 4, "past_value", &[4])?;
            let p = cx.add_helper(
                "past_capacity",
                Op::Shape {
                    start: 2,
                    end: Some(3),
                },
                &[pk],
            )?;
            let t = cx.add_helper("present_len", Op::Max, &[p, total])?;
            let t_s = reshape(cx, "present_len_scalar", t, &[])?;
            let slots = cx.add_helper("present_slots", Op::Range, &[zero_s, t_s, one_s])?;
            let in_past = cx.add_helper("slot_in_past", Op::Less, &[slots, past_col])?;
            let new_end = cx.add_helper("new_end", Op::Add, &[past_col, seq])?;
            let filled = cx.add_helper("slot_filled", Op::Less, &[slots, new_end])?;
            let from_new = cx.add_helper("slot_from_new", Op::Sub, &[slots, past_col])?;
            let from_new = cx.add_helper("slot_in_joined", Op::Add, &[from_new, p])?;
            let src = cx.add_helper("slot_source", Op::Where, &[in_past, slots, from_new])?;
            let src = cx.add_helper("slot_source_clamped", Op::Where, &[filled, src, zero])?;
            // [B, 1, T, 1], broadcast over heads and features.
            let src = cx.add_helper("slot_index", Op::Unsqueeze { axes: vec![1, 3] }, &[src])?;
            let keep = cx.add_helper("slot_kept", Op::Unsqueeze { axes: vec![1, 3] }, &[filled])?;
            let zero_f = cx.scalar("zero_value", dtype, 0.0)?;
            let mut present = |name: &str, past: Value, new: Value| -> Result<Value, OnnxError> {
                let joined = cx.add_helper(
                    &format!("{name}_joined"),
                    Op::Concat { axis: 2 },
                    &[past, new],
                )?;
                let lead = cx.add_helper(
                    &format!("{name}_batch_heads"),
                    Op::Shape {
                        start: 0,
                        end: Some(2),
                    },
                    &[joined],
                )?;
                let feat = cx.add_helper(
                    &format!("{name}_head_size"),
                    Op::Shape {
                        start: 3,
                        end: Some(4),
                    },
                    &[joined],
                )?;
                let shape = cx.add_helper(
                    &format!("{name}_present_shape"),
                    Op::Concat { axis: 0 },
                    &[lead, t, feat],
                )?;
                let idx = cx.add_helper(&format!("{name}_index"), Op::Expand, &[src, shape])?;
                let g = Op::GatherElements { axis: 2 };
                let got = cx.add_helper(&format!("{name}_gathered"), g, &[joined, idx])?;
                cx.add_helper(&format!("{name}_present"), Op::Where, &[keep, got, zero_f])
            };
            (present("key", pk, k)?, present("value", pv, v)?)
        }
        (None, None) => (k, v),
        _ => return Err(cx.err("past_key and past_value must be given together")),
    };

    // Grouped heads: each key/value head serves num_heads / kv_num_heads query heads in turn.
    let group = n / kv_n;
    let repeat = |cx: &mut NodeCx<'_>, name: &str, x: Value| -> Result<Value, OnnxError> {
        if group == 1 {
            return Ok(x);
        }
        let u = cx.add_helper(
            &format!("{name}_groups"),
            Op::Unsqueeze { axes: vec![2] },
            &[x],
        )?;
        let reps = ints(cx, &format!("{name}_group_repeats"), &[1, 1, group, 1, 1])?;
        let e = cx.add_helper(&format!("{name}_repeated"), Op::Expand, &[u, reps])?;
        reshape(cx, &format!("{name}_grouped"), e, &[0, n, -1, h])
    };
    let k_all = repeat(cx, "key", present_k)?;
    let v_all = repeat(cx, "value", present_v)?;
    let kt = transpose(cx, "key_t", k_all, &[0, 1, 3, 2])?;
    let scores = cx.add_helper("scores", Op::MatMul, &[q, kt])?;
    let scale = match cx.attr_float("scale", 0.0)? {
        s if s != 0.0 => f64::from(s),
        _ => 1.0 / (h as f64).sqrt(),
    };
    let scale = cx.scalar("scale", dtype, f64::from(scale as f32))?;
    let mut scores = cx.add_helper("scaled", Op::Mul, &[scores, scale])?;
    if softcap > 0.0 {
        let c = cx.scalar("softcap", dtype, f64::from(softcap))?;
        let d = cx.add_helper("softcap_div", Op::Div, &[scores, c])?;
        let t = cx.add_helper("softcap_tanh", Op::Tanh, &[d])?;
        scores = cx.add_helper("softcapped", Op::Mul, &[t, c])?;
    }
    // Key j is seen by query s of row b when j <= past length + s (and, with a window w,
    // j > past length + s − w).
    let keys = cx.add_helper(
        "key_len",
        Op::Shape {
            start: 2,
            end: Some(3),
        },
        &[k_all],
    )?;
    let keys = reshape(cx, "key_len_scalar", keys, &[])?;
    let cols = cx.add_helper("key_positions", Op::Range, &[zero_s, keys, one_s])?;
    let last = cx.add_helper("last_seen", Op::Unsqueeze { axes: vec![2] }, &[positions])?;
    let mut seen = cx.add_helper("causal", Op::LessOrEqual, &[cols, last])?;
    if window > 0 {
        let w = ints(cx, "window", &[window - 1])?;
        let first_seen = cx.add_helper("first_seen", Op::Sub, &[last, w])?;
        let inside = cx.add_helper("in_window", Op::GreaterOrEqual, &[cols, first_seen])?;
        seen = cx.add_helper("seen", Op::And, &[seen, inside])?;
    }
    let seen = cx.add_helper("seen_heads", Op::Unsqueeze { axes: vec![1] }, &[seen])?;
    let neg_inf = cx.scalar("neg_inf", dtype, f64::NEG_INFINITY)?;
    let masked = cx.add_helper("masked", Op::Where, &[seen, scores, neg_inf])?;
    let probs = cx.add_helper("probs", Op::Softmax { axis: -1 }, &[masked])?;
    let y = cx.add_helper("context", Op::MatMul, &[probs, v_all])?;
    let y = transpose(cx, "context_bshd", y, &[0, 2, 1, 3])?;
    let shape = ints(cx, "merged.shape", &[0, 0, -1])?;
    let y = cx.add(Op::Reshape { allowzero: false }, &[y, shape])?;
    Ok(vec![y, present_k, present_v])
}

/// com.microsoft RotaryEmbedding (onnxruntime's own, older than opset 23's): inputs input
/// (`[B, S, N·H]`, or `[B, N, S, H]`), position_ids (`[B, S]`, or one offset: positions
/// `offset + s`), cos_cache and sin_cache (`[max_position, R/2]`); attributes `interleaved`,
/// `num_heads` (0: the head size is R), `rotary_embedding_dim` R (0: the head size).
pub(super) fn rotary_embedding(cx: &mut NodeCx<'_>) -> Result<Vec<Value>, OnnxError> {
    if cx.attr_bool("is_packed_batching", false)? {
        return Err(cx.err("is_packed_batching = 1 is not supported"));
    }
    let x = float_input(cx, 0, "input", &[3, 4])?;
    let (pos, cos, sin) = (cx.input(1)?, cx.input(2)?, cx.input(3)?);
    let interleaved = cx.attr_bool("interleaved", false)?;
    let rot_attr = cx.attr_int("rotary_embedding_dim", 0)?;
    let half = dim(cx, cos, 1).map(|d| d as i64);
    let three_d = cx.ty(x).rank() == 3;
    let (xw, head_axis) = if three_d {
        let heads = match cx.attr_int("num_heads", 0)? {
            n if n > 0 => n,
            _ => {
                // onnxruntime's rule without num_heads: each head is the cached rotary width.
                let (Some(width), Some(h)) = (dim(cx, x, 2), half) else {
                    return Err(
                        cx.err("a 3-D input needs `num_heads` or static hidden and cache sizes")
                    );
                };
                width as i64 / (2 * h).max(1)
            }
        };
        (reshape(cx, "heads", x, &[0, 0, heads, -1])?, 2)
    } else {
        (x, 1)
    };
    let d = dim(cx, xw, 3).map(|d| d as i64);
    let rot = match rot_attr {
        0 => half.map(|h| 2 * h).or(d),
        r => Some(r),
    };
    // One position id is the first position: the run's positions count on from it.
    let pos = i64_positions(cx, pos, xw, head_axis)?;
    let cos = cx.add_helper("cos_at", Op::Gather { axis: 0 }, &[cos, pos])?;
    let sin = cx.add_helper("sin_at", Op::Gather { axis: 0 }, &[sin, pos])?;
    let partial = rot.zip(d).is_some_and(|(r, d)| r < d);
    let attr = if partial { rot.unwrap_or(0) } else { 0 };
    let (r, pass) = rotate(cx, xw, (cos, sin), head_axis, interleaved, (attr, rot, d))?;
    let last = !three_d;
    let out = match pass {
        Some(p) => cx.add_step(last, "joined", Op::Concat { axis: 3 }, &[r, p])?,
        None if last => cx.add(Op::Identity, &[r])?,
        None => r,
    };
    if three_d {
        let shape = ints(cx, "merged.shape", &[0, 0, -1])?;
        return Ok(vec![
            cx.add(Op::Reshape { allowzero: false }, &[out, shape])?,
        ]);
    }
    Ok(vec![out])
}

/// RotaryEmbedding's position_ids as i64 `[B or 1, S]`: as given, or from a one-element
/// offset `p`, `p + 0 .. S` (S the sequence axis of `xw`, the axis after the heads' or
/// before them).
fn i64_positions(
    cx: &mut NodeCx<'_>,
    pos: Value,
    xw: Value,
    head_axis: i64,
) -> Result<Value, OnnxError> {
    let pos = if cx.ty(pos).dtype == DType::I64 {
        pos
    } else {
        let c = Op::Cast {
            to: DType::I64,
            saturate: false,
        };
        cx.add_helper("position_ids.i64", c, &[pos])?
    };
    if cx.ty(pos).rank() == 2 {
        return Ok(pos);
    }
    let seq_axis = if head_axis == 2 { 1 } else { 2 };
    let seq = cx.add_helper(
        "seq_len",
        Op::Shape {
            start: seq_axis,
            end: Some(seq_axis + 1),
        },
        &[xw],
    )?;
    let seq = reshape(cx, "seq_len_scalar", seq, &[])?;
    let zero = cx.constant("zero_scalar", Tensor::scalar_i64(0))?;
    let one = cx.constant("one_scalar", Tensor::scalar_i64(1))?;
    let steps = cx.add_helper("steps", Op::Range, &[zero, seq, one])?;
    let start = reshape(cx, "start", pos, &[1, 1])?;
    cx.add_helper("positions", Op::Add, &[start, steps])
}
