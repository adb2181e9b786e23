//! The scaled dot-product attention chain as exports spell it, read back to q, k, v, the
//! mask and the scale.
//!
//! ```text
//! s = matmul(q·c1, kᵀ·c2)·c3 [+ mask]      c1, c2, c3: scalar constants (each optional, or a division)
//! p = softmax(s, axis = -1)
//! p = where(is_nan(p), 0, p)                 PyTorch's _safe_softmax (optional)
//! o = matmul(p, v)
//! ```
//!
//! `kᵀ` is k `[B, Hk, Tk, D]` with its last two axes swapped: a `transpose` `[0, 1, 3, 2]`, or
//! dynamo's `reshape(transpose(reshape(k, [B·Hk, Tk, D]), [0, 2, 1]), [B, Hk, D, Tk])`. k and
//! v may each be `repeat_kv` of fewer heads (`reshape(expand(unsqueeze(x, 2), [B, Hkv, G,
//! T, D]), [B, Hkv·G, T, D])`): the fused op then reads x, the heads grouped. Every link's
//! other readers are left alone; the chain's intermediate values must have no reader outside
//! it (the probabilities, say, are not a graph output), else nothing is fused.

use super::consts::{Consts, scalar_f64};
use super::mask::{HIDDEN_BELOW, Hide, as_hide};
use fp8c_ir::{Graph, NodeId, Op, Value};

/// A recognised chain.
#[derive(Debug)]
pub(super) struct Sdpa {
    /// q `[B, H, Tq, D]`, k `[B, Hkv, Tk, D]`, v `[B, Hkv, Tk, Dv]`.
    pub q: Value,
    pub k: Value,
    pub v: Value,
    /// How the scores hide keys (`where` with a large negative value, or an additive
    /// `where(cond, 0, NEG)`).
    pub hides: Vec<Hide>,
    /// Another additive mask (a data tensor), if the scores have one.
    pub additive: Option<Value>,
    /// `c1·c2·c3` (divisions inverted), in f64.
    pub scale: f64,
    /// The final matmul (its output becomes the attention's).
    pub out: NodeId,
}

/// The chain whose softmax is `softmax`, if it is one.
pub(super) fn match_at(g: &Graph, c: &Consts<'_>, softmax: NodeId) -> Option<Sdpa> {
    let sm = g.node(softmax);
    let Op::Softmax { axis } = sm.op else {
        return None;
    };
    let x = *sm.inputs().first()?;
    let xt = g.value_type(x);
    if xt.rank() != 4 || !(axis == -1 || axis == 3) || !xt.dtype.is_float() {
        return None;
    }
    let p = Value::new(softmax, 0);
    let pv_in = safe_softmax(g, c, p)?;
    let (out, v) = only_user(g, pv_in).and_then(|(id, slot)| {
        let n = g.node(id);
        (matches!(n.op, Op::MatMul) && slot == 0).then(|| (id, n.inputs()[1]))
    })?;
    let ((q, kt, scale), hides, additive) = masked_scores(g, c, x, 0)?;
    if let Some(m) = additive {
        let mt = g.value_type(m);
        if mt.dtype != xt.dtype || mt.rank() > 4 {
            return None;
        }
    }
    // The scale may sit on k before the transpose (ONNX Attention's decomposition).
    let (k, c2) = peel_scale(g, c, unswap_last2(g, kt)?);
    let scale = scale * c2;
    let (k, v) = ungroup(g, through_views(g, k), through_views(g, v));
    // Shapes: q [B, H, Tq, D], k [B, Hkv, Tk, D], v [B, Hkv, Tk, Dv], the same batch.
    let (qd, kd, vd) = (
        g.value_type(q).known_dims()?,
        g.value_type(k).known_dims()?,
        g.value_type(v).known_dims()?,
    );
    fp8c_ir::attention::AttnDims::of(&qd, &kd, &vd).ok()?;
    let dt = g.value_type(q).dtype;
    if g.value_type(k).dtype != dt || g.value_type(v).dtype != dt || xt.dtype != dt {
        return None;
    }
    Some(Sdpa {
        q,
        k,
        v,
        hides,
        additive,
        scale,
        out,
    })
}

/// The one reader of `v` and the input slot it reads it at, when `v` has exactly one and is
/// not a graph result.
fn only_user(g: &Graph, v: Value) -> Option<(NodeId, usize)> {
    match g.users(v).as_slice() {
        [one] if !g.is_graph_result(v) => Some(*one),
        _ => None,
    }
}

/// The value the probabilities reach the PV matmul as: `p`, or `where(is_nan(p), 0, p)`.
fn safe_softmax(g: &Graph, c: &Consts<'_>, p: Value) -> Option<Value> {
    if g.is_graph_result(p) {
        return None;
    }
    let users = g.users(p);
    match users.as_slice() {
        [(w, 2)] if max_guard(g, c, *w, p) => Some(Value::new(*w, 0)),
        [_] => Some(p),
        [a, b] => {
            let (isnan, wh) = if matches!(g.node(a.0).op, Op::IsNaN) {
                (a.0, b)
            } else {
                (b.0, a)
            };
            let w = g.node(wh.0);
            let nan = Value::new(isnan, 0);
            let ok = matches!(g.node(isnan).op, Op::IsNaN)
                && matches!(w.op, Op::Where)
                && w.inputs()[0] == nan
                && w.inputs()[2] == p
                && wh.1 == 2
                && scalar_f64(c.value(g, w.inputs()[1])) == Some(0.0)
                && only_user(g, nan).is_some();
            ok.then_some(Value::new(wh.0, 0))
        }
        _ => None,
    }
}

/// The scores under softmax input `x`, with the ways it hides keys: `where(cond, x', NEG)`
/// or `where(cond, NEG, x')` layers (NEG a scalar constant ≤ [`HIDDEN_BELOW`]), and additive
/// masks (one of them other than `where(cond, 0, NEG)` at most).
#[allow(clippy::type_complexity)]
fn masked_scores(
    g: &Graph,
    c: &Consts<'_>,
    x: Value,
    depth: usize,
) -> Option<((Value, Value, f64), Vec<Hide>, Option<Value>)> {
    if let Some(s) = scores(g, c, x) {
        return Some((s, Vec::new(), None));
    }
    if depth > 6 {
        return None;
    }
    let n = g.node(x.node);
    let neg = |v: Value| scalar_f64(c.value(g, v)).filter(|x| *x <= HIDDEN_BELOW);
    match n.op {
        Op::Where => {
            let [cond, a, b] = [n.inputs()[0], n.inputs()[1], n.inputs()[2]];
            let (inner, visible_if, neg) = match (neg(b), neg(a)) {
                (Some(v), _) => (a, true, v),
                (None, Some(v)) => (b, false, v),
                _ => return None,
            };
            let (s, mut hides, add) = masked_scores(g, c, inner, depth + 1)?;
            hides.push(Hide {
                cond,
                visible_if,
                neg,
                from: None,
            });
            Some((s, hides, add))
        }
        Op::Add => {
            let [a, b] = [n.inputs()[0], n.inputs()[1]];
            let (chain, m) = match masked_scores(g, c, a, depth + 1) {
                Some(r) => (r, b),
                None => (masked_scores(g, c, b, depth + 1)?, a),
            };
            let (s, mut hides, add) = chain;
            match (as_hide(g, c, m), add) {
                (Some(h), _) => hides.push(h),
                (None, None) => return Some((s, hides, Some(m))),
                (None, Some(_)) => return None,
            }
            Some((s, hides, add))
        }
        _ => None,
    }
}

/// True when node `w` is `where(max_j x = −∞, 0, p)` for `p = softmax(x)`: a row with every
/// key hidden gives zeros (ONNX `Attention`'s decomposition), as `attention` does.
fn max_guard(g: &Graph, c: &Consts<'_>, w: NodeId, p: Value) -> bool {
    let wn = g.node(w);
    if !matches!(wn.op, Op::Where) || scalar_f64(c.value(g, wn.inputs()[1])) != Some(0.0) {
        return false;
    }
    let x = g.node(p.node).inputs()[0];
    let eq = g.node(wn.inputs()[0].node);
    if !matches!(eq.op, Op::Equal) {
        return false;
    }
    let is_max = |v: Value| {
        let n = g.node(v.node);
        matches!(&n.op, Op::ReduceMax { axes: Some(a), keepdims: true } if a.as_slice() == [-1] || a.as_slice() == [3])
            && n.inputs()[0] == x
    };
    let is_ninf = |v: Value| scalar_f64(c.value(g, v)) == Some(f64::NEG_INFINITY);
    let [a, b] = [eq.inputs()[0], eq.inputs()[1]];
    (is_max(a) && is_ninf(b)) || (is_max(b) && is_ninf(a))
}

/// The first value up a chain of views (reshape, squeeze, unsqueeze, flatten, identity) of
/// `v` that has `v`'s shape: the same elements in the same order.
fn through_views(g: &Graph, v: Value) -> Value {
    let target = &g.value_type(v).shape;
    let (mut cur, mut best) = (v, v);
    for _ in 0..8 {
        let n = g.node(cur.node);
        if !n.op.props().view || n.inputs().is_empty() {
            break;
        }
        cur = n.inputs()[0];
        if &g.value_type(cur).shape == target && g.value_type(cur).dtype == g.value_type(v).dtype {
            best = cur;
        }
    }
    best
}

/// `(q, kᵀ, scale)` of scores `matmul(q·c1, kᵀ·c2)·c3`.
fn scores(g: &Graph, c: &Consts<'_>, s: Value) -> Option<(Value, Value, f64)> {
    let (mm, c3) = peel_scale(g, c, s);
    let n = g.node(mm.node);
    if !matches!(n.op, Op::MatMul) || mm.slot != 0 {
        return None;
    }
    let (q, c1) = peel_scale(g, c, n.inputs()[0]);
    let (kt, c2) = peel_scale(g, c, n.inputs()[1]);
    if g.value_type(q).rank() != 4 || g.value_type(kt).rank() != 4 {
        return None;
    }
    Some((q, kt, c1 * c2 * c3))
}

/// `v` without its scalar-constant factors (`mul` by, or `div` by, a one-element constant)
/// and their product.
fn peel_scale(g: &Graph, c: &Consts<'_>, mut v: Value) -> (Value, f64) {
    let mut scale = 1.0;
    for _ in 0..4 {
        let n = g.node(v.node);
        let [a, b] = match n.inputs() {
            [a, b] => [*a, *b],
            _ => break,
        };
        let (ca, cb) = (scalar_f64(c.value(g, a)), scalar_f64(c.value(g, b)));
        // A factor must not change the value's shape (a [1]-shaped constant on a scalar).
        let keeps = |x: Value| g.value_type(x).shape == n.outputs[0].shape;
        match (&n.op, ca, cb) {
            (Op::Mul, _, Some(k)) if keeps(a) && k.is_finite() && k != 0.0 => {
                scale *= k;
                v = a;
            }
            (Op::Mul, Some(k), _) if keeps(b) && k.is_finite() && k != 0.0 => {
                scale *= k;
                v = b;
            }
            (Op::Div, _, Some(k)) if keeps(a) && k.is_finite() && k != 0.0 => {
                scale /= k;
                v = a;
            }
            _ => break,
        }
    }
    (v, scale)
}

/// k `[B, H, T, D]` when `kt` is k with its last two axes swapped.
fn unswap_last2(g: &Graph, kt: Value) -> Option<Value> {
    let n = g.node(kt.node);
    match &n.op {
        Op::Transpose { perm } if perm.as_slice() == [0, 1, 3, 2] => Some(n.inputs()[0]),
        // dynamo: reshape(transpose(reshape(k, [B·H, T, D]), [0, 2, 1]), [B, H, D, T]).
        Op::Reshape { .. } => {
            let t = g.node(n.inputs()[0].node);
            let Op::Transpose { perm } = &t.op else {
                return None;
            };
            if perm.as_slice() != [0, 2, 1] {
                return None;
            }
            let r = g.node(t.inputs()[0].node);
            let Op::Reshape { .. } = r.op else {
                return None;
            };
            let k = r.inputs()[0];
            let kd = g.value_type(k).known_dims()?;
            let merged = g.value_type(t.inputs()[0]).known_dims()?;
            let out = g.value_type(kt).known_dims()?;
            let [b, h, tl, d] = <[u64; 4]>::try_from(kd).ok()?;
            (merged == [b * h, tl, d] && out == [b, h, d, tl]).then_some(k)
        }
        _ => None,
    }
}

/// k and v without `repeat_kv`, when both repeat the same number of heads as many times;
/// otherwise as they are.
fn ungroup(g: &Graph, k: Value, v: Value) -> (Value, Value) {
    match (repeated(g, k), repeated(g, v)) {
        (Some((k0, gk)), Some((v0, gv))) if gk == gv => {
            let same_heads = g.value_type(k0).shape[1] == g.value_type(v0).shape[1];
            if same_heads { (k0, v0) } else { (k, v) }
        }
        _ => (k, v),
    }
}

/// `(x, G)` when `v` is `reshape(expand(unsqueeze(x, 2), [B, Hkv, G, T, D]), [B, Hkv·G, T, D])`.
fn repeated(g: &Graph, v: Value) -> Option<(Value, u64)> {
    let r = g.node(v.node);
    let Op::Reshape { .. } = r.op else {
        return None;
    };
    let e = g.node(r.inputs()[0].node);
    let Op::Expand = e.op else {
        return None;
    };
    let u = g.node(e.inputs()[0].node);
    let Op::Unsqueeze { axes } = &u.op else {
        return None;
    };
    if axes.as_slice() != [2] {
        return None;
    }
    let x = u.inputs()[0];
    let [b, hkv, t, d] = <[u64; 4]>::try_from(g.value_type(x).known_dims()?).ok()?;
    let [eb, eh, grp, et, ed] = <[u64; 5]>::try_from(e.outputs[0].known_dims()?).ok()?;
    let out = g.value_type(v).known_dims()?;
    let ok = [eb, eh, et, ed] == [b, hkv, t, d] && out == [b, hkv * grp, t, d];
    ok.then_some((x, grp))
}
