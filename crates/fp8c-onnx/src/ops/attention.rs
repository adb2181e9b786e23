//! The opset-23 attention ops (`Attention`, `RotaryEmbedding`), which PyTorch's dynamo exporter
//! writes at `opset_version=23` for `scaled_dot_product_attention` and for the rotary
//! embeddings of Llama-style decoders, decomposed into IR ops (matmul, softmax, slices,
//! where): the graph is then the one an opset-20 export spells out itself, so the precision
//! policy, the fusion pass and every backend treat both alike.
//!
//! Semantics are the ONNX operator definitions as the ONNX reference implementation computes
//! them (`onnx.reference.ops.op_attention`, `op_rotary_embedding`): Q and K are each scaled by
//! `sqrt(scale)` before their product; a boolean mask keeps the positions that are true; a
//! causal mask hides key `j` from query `i` when `j > i + past_length`; grouped-query
//! attention repeats each key/value head for `q_num_heads / kv_num_heads` query heads in turn;
//! a query whose keys are all masked gets a zero row (PyTorch's and the operator's errata),
//! where the reference implementation gives NaN.

use super::NodeCx;
use crate::OnnxError;
use fp8c_ir::{DType, Op, Tensor, Value};

/// A 1-D i64 constant.
pub(super) fn ints(cx: &mut NodeCx<'_>, name: &str, v: &[i64]) -> Result<Value, OnnxError> {
    cx.constant(name, Tensor::from_i64(vec![v.len() as u64], v))
}

/// `x` reshaped to `dims` (ONNX Reshape: 0 copies the input's dim, −1 is inferred).
pub(super) fn reshape(
    cx: &mut NodeCx<'_>,
    name: &str,
    x: Value,
    dims: &[i64],
) -> Result<Value, OnnxError> {
    let shape = ints(cx, &format!("{name}.shape"), dims)?;
    cx.add_helper(name, Op::Reshape { allowzero: false }, &[x, shape])
}

pub(super) fn transpose(
    cx: &mut NodeCx<'_>,
    name: &str,
    x: Value,
    perm: &[i64],
) -> Result<Value, OnnxError> {
    let perm = perm.to_vec();
    cx.add_helper(name, Op::Transpose { perm }, &[x])
}

/// `x[.., start:end:step]` along `axis`.
pub(super) fn slice(
    cx: &mut NodeCx<'_>,
    name: &str,
    x: Value,
    axis: i64,
    (start, end, step): (i64, i64, i64),
) -> Result<Value, OnnxError> {
    let s = ints(cx, &format!("{name}.start"), &[start])?;
    let e = ints(cx, &format!("{name}.end"), &[end])?;
    let a = ints(cx, &format!("{name}.axis"), &[axis])?;
    let st = ints(cx, &format!("{name}.step"), &[step])?;
    cx.add_helper(name, Op::Slice, &[x, s, e, a, st])
}

/// The size of `axis` of `v` if static.
pub(super) fn dim(cx: &NodeCx<'_>, v: Value, axis: usize) -> Option<u64> {
    cx.ty(v).shape.get(axis).and_then(|d| d.known())
}

/// The float input `i`, checked to have one of `ranks`.
pub(super) fn float_input(
    cx: &NodeCx<'_>,
    i: usize,
    what: &str,
    ranks: &[usize],
) -> Result<Value, OnnxError> {
    let v = cx.input(i)?;
    let ty = cx.ty(v);
    if !ty.dtype.is_float() || !ranks.contains(&ty.rank()) {
        let ranks: Vec<String> = ranks.iter().map(|r| format!("{r}-D")).collect();
        return Err(cx.err(format!(
            "{what} (\"{}\") has type {ty}; expected a {} float tensor",
            cx.input_name(i),
            ranks.join(" or ")
        )));
    }
    Ok(v)
}

/// A positive int attribute, if present.
fn heads_attr(cx: &NodeCx<'_>, name: &str) -> Result<Option<i64>, OnnxError> {
    match cx.attr_int_opt(name)? {
        Some(h) if h <= 0 => Err(cx.err(format!("attribute `{name}` = {h} must be positive"))),
        h => Ok(h.filter(|&h| h > 0)),
    }
}

/// RotaryEmbedding: inputs X (`[B, H, S, D]`, or `[B, S, H·D]` with `num_heads`), cos_cache and
/// sin_cache (`[B, S, R/2]`, or `[max_position, R/2]` indexed by position_ids `[B, S]`);
/// attributes `interleaved` (pairs are adjacent, not the two halves) and
/// `rotary_embedding_dim` R (default D: every feature rotates; the rest pass through).
pub(super) fn rotary_embedding(cx: &mut NodeCx<'_>) -> Result<Vec<Value>, OnnxError> {
    let x = float_input(cx, 0, "X", &[3, 4])?;
    let (cos, sin) = (cx.input(1)?, cx.input(2)?);
    let interleaved = cx.attr_bool("interleaved", false)?;
    let num_heads = cx.attr_int("num_heads", 0)?;
    let rot_attr = cx.attr_int("rotary_embedding_dim", 0)?;
    let three_d = cx.ty(x).rank() == 3;
    // Work on [B, S, H, D] (3-D input) or [B, H, S, D] (4-D): the caches broadcast over the
    // heads axis either way, inserted at 2 or 1.
    let (xw, head_axis) = if three_d {
        if num_heads <= 0 {
            return Err(cx.err("a 3-D input X needs the `num_heads` attribute"));
        }
        (reshape(cx, "heads", x, &[0, 0, num_heads, -1])?, 2)
    } else {
        (x, 1)
    };
    let d = dim(cx, xw, 3).map(|d| d as i64);
    let rot = match (rot_attr, d) {
        (0, d) => d,
        (r, _) => Some(r),
    };
    if let Some(r) = rot
        && (r <= 0 || r % 2 != 0 || d.is_some_and(|d| r > d))
    {
        return Err(cx.err(format!(
            "rotary_embedding_dim {r} must be even, positive and at most the head size {}",
            d.map_or("?".to_string(), |d| d.to_string())
        )));
    }
    let (mut cos, mut sin) = (cos, sin);
    if let Some(pos) = cx.opt_input(3) {
        cos = cx.add_helper("cos_at", Op::Gather { axis: 0 }, &[cos, pos])?;
        sin = cx.add_helper("sin_at", Op::Gather { axis: 0 }, &[sin, pos])?;
    }
    for (v, what) in [(cos, "cos_cache"), (sin, "sin_cache")] {
        let ty = cx.ty(v);
        let half = rot.map(|r| r / 2);
        if ty.rank() != 3 || dim(cx, v, 2).zip(half).is_some_and(|(h, r)| h as i64 != r) {
            return Err(cx.err(format!(
                "{what} (at the positions) has type {ty}; expected [batch, sequence, {}]",
                half.map_or("rotary_embedding_dim / 2".to_string(), |h| h.to_string())
            )));
        }
    }
    let (rotated, x_pass) = rotate(
        cx,
        xw,
        (cos, sin),
        head_axis,
        interleaved,
        (rot_attr, rot, d),
    )?;
    let last = !three_d;
    let out = match x_pass {
        Some(p) => cx.add_step(last, "joined", Op::Concat { axis: 3 }, &[rotated, p])?,
        None if last => cx.add(Op::Identity, &[rotated])?,
        None => rotated,
    };
    if three_d {
        let shape = ints(cx, "merged.shape", &[0, 0, -1])?;
        return Ok(vec![
            cx.add(Op::Reshape { allowzero: false }, &[out, shape])?,
        ]);
    }
    Ok(vec![out])
}

/// The rotation of RotaryEmbedding: `xw` (`[B, S, H, D]` with `head_axis` 2, or `[B, H, S, D]`
/// with 1) turned by `cos` and `sin` (`[B, S, R/2]`, already at each token's position);
/// `dims` are the `rotary_embedding_dim` attribute (0: absent), R if known and D if known.
/// Returns the rotated features and, when only the first R of D rotate, the rest.
pub(super) fn rotate(
    cx: &mut NodeCx<'_>,
    xw: Value,
    (cos, sin): (Value, Value),
    head_axis: i64,
    interleaved: bool,
    (rot_attr, rot, d): (i64, Option<i64>, Option<i64>),
) -> Result<(Value, Option<Value>), OnnxError> {
    let axes = vec![head_axis];
    let cos = cx.add_helper("cos", Op::Unsqueeze { axes: axes.clone() }, &[cos])?;
    let sin = cx.add_helper("sin", Op::Unsqueeze { axes }, &[sin])?;
    // Only part of each head rotates when the attribute says so.
    let (xr, x_pass) = match (rot_attr, d) {
        (r, Some(d)) if r > 0 && r < d => (
            slice(cx, "rotated", xw, 3, (0, r, 1))?,
            Some(slice(cx, "passed", xw, 3, (r, d, 1))?),
        ),
        (r, None) if r > 0 => (
            slice(cx, "rotated", xw, 3, (0, r, 1))?,
            Some(slice(cx, "passed", xw, 3, (r, i64::MAX, 1))?),
        ),
        _ => (xw, None),
    };
    let (x1, x2) = if interleaved {
        (
            slice(cx, "even", xr, 3, (0, i64::MAX, 2))?,
            slice(cx, "odd", xr, 3, (1, i64::MAX, 2))?,
        )
    } else if let Some(r) = rot {
        (
            slice(cx, "first_half", xr, 3, (0, r / 2, 1))?,
            slice(cx, "second_half", xr, 3, (r / 2, r, 1))?,
        )
    } else {
        // The head size is known only at run time: its half, computed.
        let size = cx.add_helper(
            "head_size",
            Op::Shape {
                start: 3,
                end: Some(4),
            },
            &[xr],
        )?;
        let two = ints(cx, "two", &[2])?;
        let half = cx.add_helper("half", Op::Div, &[size, two])?;
        let (zero, end) = (ints(cx, "zero", &[0])?, ints(cx, "end", &[i64::MAX])?);
        let (axis, step) = (ints(cx, "axis", &[3])?, ints(cx, "step", &[1])?);
        (
            cx.add_helper("first_half", Op::Slice, &[xr, zero, half, axis, step])?,
            cx.add_helper("second_half", Op::Slice, &[xr, half, end, axis, step])?,
        )
    };
    let c1 = cx.add_helper("cos_x1", Op::Mul, &[cos, x1])?;
    let s2 = cx.add_helper("sin_x2", Op::Mul, &[sin, x2])?;
    let real = cx.add_helper("real", Op::Sub, &[c1, s2])?;
    let s1 = cx.add_helper("sin_x1", Op::Mul, &[sin, x1])?;
    let c2 = cx.add_helper("cos_x2", Op::Mul, &[cos, x2])?;
    let imag = cx.add_helper("imag", Op::Add, &[s1, c2])?;
    let rotated = if interleaved {
        let axes = vec![4];
        let r = cx.add_helper("real_pairs", Op::Unsqueeze { axes: axes.clone() }, &[real])?;
        let i = cx.add_helper("imag_pairs", Op::Unsqueeze { axes }, &[imag])?;
        let pairs = cx.add_helper("pairs", Op::Concat { axis: 4 }, &[r, i])?;
        reshape(cx, "interleaved", pairs, &[0, 0, 0, -1])?
    } else {
        cx.add_helper("halves", Op::Concat { axis: 3 }, &[real, imag])?
    };
    Ok((rotated, x_pass))
}

/// Attention (opset 23, 24): inputs Q, K, V (`[B, heads, S, D]`, or `[B, S, heads·D]` with
/// `q_num_heads`/`kv_num_heads`), attn_mask (bool: keep where true; float: added), past_key,
/// past_value (concatenated before K and V along the sequence), nonpad_kv_seqlen (opset 24:
/// per batch, the keys past it are hidden). Outputs Y, present_key, present_value and
/// qk_matmul_output (`qk_matmul_output_mode` 0–3: the product, the softcapped product, with
/// the mask, after softmax).
pub(super) fn attention(cx: &mut NodeCx<'_>) -> Result<Vec<Value>, OnnxError> {
    let q = float_input(cx, 0, "Q", &[3, 4])?;
    let rank = cx.ty(q).rank();
    let k = float_input(cx, 1, "K", &[rank])?;
    let v = float_input(cx, 2, "V", &[rank])?;
    let dtype = cx.ty(q).dtype;
    let q_heads = heads_attr(cx, "q_num_heads")?;
    let kv_heads = heads_attr(cx, "kv_num_heads")?;
    let is_causal = cx.attr_bool("is_causal", false)?;
    let softcap = cx.attr_float("softcap", 0.0)?;
    let mode = cx.attr_int("qk_matmul_output_mode", 0)?;
    if !(0..=3).contains(&mode) {
        return Err(cx.err(format!("qk_matmul_output_mode {mode} is not 0, 1, 2 or 3")));
    }
    let softmax_type = match cx.attr_int_opt("softmax_precision")? {
        None => None,
        Some(code) => Some(
            i32::try_from(code)
                .map_err(|_| format!("unknown element type code {code}"))
                .and_then(crate::tensor::dtype_from_onnx)
                .ok()
                .filter(|t| t.is_float())
                .ok_or_else(|| {
                    cx.err(format!(
                        "softmax_precision {code} is not a float element type"
                    ))
                })?,
        ),
    };

    // [B, heads, S, D] for all three.
    let (q, k, v) = if rank == 3 {
        let (Some(qh), Some(kvh)) = (q_heads, kv_heads) else {
            return Err(
                cx.err("3-D Q, K and V need the `q_num_heads` and `kv_num_heads` attributes")
            );
        };
        let mut split = |name: &str, x: Value, h: i64| -> Result<Value, OnnxError> {
            let r = reshape(cx, &format!("{name}_heads"), x, &[0, 0, h, -1])?;
            transpose(cx, &format!("{name}_bhsd"), r, &[0, 2, 1, 3])
        };
        (split("q", q, qh)?, split("k", k, kvh)?, split("v", v, kvh)?)
    } else {
        (q, k, v)
    };
    // sqrt(scale), the factor on each of Q and K: from the attribute, or 1/sqrt(head size)
    // (computed in f64 and rounded once, as the reference does, when the size is known only
    // at run time).
    let root = match (cx.attr_float_opt("scale")?, dim(cx, q, 3)) {
        (Some(s), _) => cx.scalar("sqrt_scale", dtype, f64::from(s).sqrt())?,
        (None, Some(d)) => cx.scalar("sqrt_scale", dtype, (1.0 / (d as f64).sqrt()).sqrt())?,
        (None, None) => {
            let size = cx.add_helper(
                "head_size",
                Op::Shape {
                    start: 3,
                    end: Some(4),
                },
                &[q],
            )?;
            let wide = |to| Op::Cast {
                to,
                saturate: false,
            };
            let f = cx.add_helper("head_size_f64", wide(DType::F64), &[size])?;
            let r = cx.add_helper("head_size_sqrt", Op::Sqrt, &[f])?;
            let r = cx.add_helper("default_scale", Op::Reciprocal, &[r])?;
            let r = cx.add_helper("sqrt_scale_f64", Op::Sqrt, &[r])?;
            cx.add_helper("sqrt_scale", wide(dtype), &[r])?
        }
    };

    // The caches.
    let concat_past = |cx: &mut NodeCx<'_>, at: usize, x: Value, name: &str| match cx.opt_input(at)
    {
        Some(past) => cx.add_helper(name, Op::Concat { axis: 2 }, &[past, x]),
        None => Ok(x),
    };
    let k = concat_past(cx, 4, k, "present_key")?;
    let v = concat_past(cx, 5, v, "present_value")?;

    // Grouped-query attention: each K/V head serves `rep` query heads in turn.
    let (qn, kn) = (dim(cx, q, 1), dim(cx, k, 1));
    let (k_rep, v_rep) = match (qn, kn) {
        (Some(qn), Some(kn)) if qn == kn => (k, v),
        (Some(qn), Some(kn)) if kn == 0 || qn % kn != 0 || dim(cx, v, 1) != Some(kn) => {
            return Err(cx.err(format!(
                "{qn} query heads cannot share {kn} key/value heads (V has type {})",
                cx.ty(v)
            )));
        }
        _ => {
            // [B, kv, S, D] → [B, kv, rep, S, D] → [B, q, S, D], with the head counts
            // computed when they are known only at run time (then folded once they are).
            let heads = |cx: &mut NodeCx<'_>, x: Value, name: &str| {
                cx.add_helper(
                    name,
                    Op::Shape {
                        start: 1,
                        end: Some(2),
                    },
                    &[x],
                )
            };
            let qh = heads(cx, q, "q_heads")?;
            let kh = heads(cx, k, "kv_heads")?;
            let rep = cx.add_helper("group_size", Op::Div, &[qh, kh])?;
            let ones = ints(cx, "ones", &[1, 1])?;
            let reps =
                cx.add_helper("group_repeats", Op::Concat { axis: 0 }, &[ones, rep, ones])?;
            let keep = ints(cx, "keep_batch", &[0])?;
            let rest = ints(cx, "rest", &[-1])?;
            let mut repeat = |name: &str, x: Value| -> Result<Value, OnnxError> {
                let u = cx.add_helper(
                    &format!("{name}_groups"),
                    Op::Unsqueeze { axes: vec![2] },
                    &[x],
                )?;
                let e = cx.add_helper(&format!("{name}_repeated"), Op::Expand, &[u, reps])?;
                let d = cx.add_helper(
                    &format!("{name}_head_size"),
                    Op::Shape {
                        start: 4,
                        end: Some(5),
                    },
                    &[e],
                )?;
                let shape = cx.add_helper(
                    &format!("{name}_grouped_shape"),
                    Op::Concat { axis: 0 },
                    &[keep, qh, rest, d],
                )?;
                cx.add_helper(
                    &format!("{name}_heads_repeated"),
                    Op::Reshape { allowzero: false },
                    &[e, shape],
                )
            };
            (repeat("k", k)?, repeat("v", v)?)
        }
    };

    // Q·sqrt(scale) @ (K·sqrt(scale))ᵀ.
    let qs = cx.add_helper("q_scaled", Op::Mul, &[q, root])?;
    let ks = cx.add_helper("k_scaled", Op::Mul, &[k_rep, root])?;
    let kt = transpose(cx, "k_transposed", ks, &[0, 1, 3, 2])?;
    let mut qk = cx.add_helper("qk", Op::MatMul, &[qs, kt])?;
    if softcap > 0.0 {
        let c = cx.scalar("softcap", dtype, f64::from(softcap))?;
        let d = cx.add_helper("qk_over_cap", Op::Div, &[qk, c])?;
        let t = cx.add_helper("qk_tanh", Op::Tanh, &[d])?;
        qk = cx.add_helper("qk_capped", Op::Mul, &[t, c])?;
    }
    let qk_out = qk;

    // The mask: hidden positions become −inf.
    let neg_inf = cx.scalar("neg_inf", dtype, f64::NEG_INFINITY)?;
    let mut biased = qk;
    if let Some(mask) = cx.opt_input(3) {
        let mask = pad_mask(cx, mask, k)?;
        biased = if cx.ty(mask).dtype == DType::Bool {
            cx.add_helper("masked", Op::Where, &[mask, biased, neg_inf])?
        } else {
            cx.add_helper("mask_added", Op::Add, &[biased, mask])?
        };
    }
    if is_causal {
        let past = match cx.opt_input(4) {
            Some(p) => Some(seq_len(cx, p, "past_length")?),
            None => None,
        };
        let sq = seq_len(cx, q, "q_length")?;
        let skv = seq_len(cx, k, "kv_length")?;
        let zero = cx.constant("zero", Tensor::scalar_i64(0))?;
        let one = cx.constant("one", Tensor::scalar_i64(1))?;
        let rows = cx.add_helper("query_positions", Op::Range, &[zero, sq, one])?;
        let rows = match past {
            Some(p) => cx.add_helper("query_positions_after_past", Op::Add, &[rows, p])?,
            None => rows,
        };
        let rows = cx.add_helper("query_column", Op::Unsqueeze { axes: vec![1] }, &[rows])?;
        let cols = cx.add_helper("key_positions", Op::Range, &[zero, skv, one])?;
        let seen = cx.add_helper("causal", Op::LessOrEqual, &[cols, rows])?;
        biased = cx.add_helper("causal_masked", Op::Where, &[seen, biased, neg_inf])?;
    }
    if let Some(lens) = cx.opt_input(6) {
        let skv = seq_len(cx, k, "kv_length_for_padding")?;
        let zero = cx.constant("pad_zero", Tensor::scalar_i64(0))?;
        let one = cx.constant("pad_one", Tensor::scalar_i64(1))?;
        let cols = cx.add_helper("kv_positions", Op::Range, &[zero, skv, one])?;
        let lens = reshape(cx, "nonpad_lengths", lens, &[-1, 1, 1, 1])?;
        let lens = match cx.ty(lens).dtype {
            DType::I64 => lens,
            _ => cx.add_helper(
                "nonpad_lengths_i64",
                Op::Cast {
                    to: DType::I64,
                    saturate: false,
                },
                &[lens],
            )?,
        };
        let kept = cx.add_helper("nonpad", Op::Less, &[cols, lens])?;
        biased = cx.add_helper("padding_masked", Op::Where, &[kept, biased, neg_inf])?;
    }

    let probs = match softmax_type {
        Some(t) if t != dtype => {
            let cast = |to| Op::Cast {
                to,
                saturate: false,
            };
            let w = cx.add_helper("softmax_input", cast(t), &[biased])?;
            let s = cx.add_helper("softmax_wide", Op::Softmax { axis: -1 }, &[w])?;
            cx.add_helper("softmax", cast(dtype), &[s])?
        }
        _ => cx.add_helper("softmax", Op::Softmax { axis: -1 }, &[biased])?,
    };
    // A query row whose keys are all masked gives a zero row of Y, not NaN (PyTorch's
    // `_safe_softmax`, which the exporter's Attention stands for, and the ONNX errata to the
    // operator); the softmax output (`qk_matmul_output_mode` 3) keeps its NaN.
    let masked = cx.opt_input(3).is_some() || is_causal || cx.opt_input(6).is_some();
    let weights = if masked {
        let max = Op::ReduceMax {
            axes: Some(vec![-1]),
            keepdims: true,
        };
        let top = cx.add_helper("row_max", max, &[biased])?;
        let hidden = cx.add_helper("row_fully_masked", Op::Equal, &[top, neg_inf])?;
        let zero = cx.scalar("zero_weight", dtype, 0.0)?;
        cx.add_helper("safe_softmax", Op::Where, &[hidden, zero, probs])?
    } else {
        probs
    };
    let y = if rank == 3 {
        let y = cx.add_helper("context", Op::MatMul, &[weights, v_rep])?;
        let y = transpose(cx, "context_bshd", y, &[0, 2, 1, 3])?;
        let shape = ints(cx, "merged.shape", &[0, 0, -1])?;
        cx.add(Op::Reshape { allowzero: false }, &[y, shape])?
    } else {
        cx.add(Op::MatMul, &[weights, v_rep])?
    };
    let qk_matmul_output = match mode {
        0 | 1 => qk_out,
        2 => biased,
        _ => probs,
    };
    Ok(vec![y, k, v, qk_matmul_output])
}

/// Axis 2 of a `[B, heads, S, D]` tensor as an i64 scalar (a constant when static).
pub(super) fn seq_len(cx: &mut NodeCx<'_>, x: Value, name: &str) -> Result<Value, OnnxError> {
    let s = cx.add_helper(
        name,
        Op::Shape {
            start: 2,
            end: Some(3),
        },
        &[x],
    )?;
    cx.add_helper(
        &format!("{name}_scalar"),
        Op::Squeeze {
            axes: Some(vec![0]),
        },
        &[s],
    )
}

/// A mask shorter than the keys (the past is not in it) padded at the end: with false, or
/// −inf for an additive mask, as the operator defines.
fn pad_mask(cx: &mut NodeCx<'_>, mask: Value, k: Value) -> Result<Value, OnnxError> {
    let mty = cx.ty(mask).clone();
    let (Some(have), Some(want)) = (mty.shape.last().and_then(|d| d.known()), dim(cx, k, 2)) else {
        return Ok(mask);
    };
    if have >= want {
        return Ok(mask);
    }
    let r = mty.rank();
    let mut pads = vec![0i64; 2 * r];
    pads[2 * r - 1] = (want - have) as i64;
    let pads = ints(cx, "mask_pads", &pads)?;
    let fill = if mty.dtype == DType::Bool {
        cx.constant("mask_fill", Tensor::from_bool(vec![], &[false]))?
    } else {
        cx.scalar("mask_fill", mty.dtype, f64::NEG_INFINITY)?
    };
    cx.add_helper(
        "mask_padded",
        Op::Pad {
            mode: fp8c_ir::PadMode::Constant,
        },
        &[mask, pads, fill],
    )
}
