//! What the additive mask of a recognised attention becomes: nothing (every key visible),
//! the causal flag, a smaller mask, or the model's own mask tensor as it is.
//!
//! Exports build their masks from index arithmetic: PyTorch's (transformers 5) is
//! `where(causal ∧ same_sequence ∧ padding, 0, −f32::MAX)`, the causal part `kv_idx ≤ q_idx`
//! of two broadcast `arange`s, each part a `[B, 1, T, T]` tensor. The analysis reads the
//! boolean condition as a predicate over the key−query offset `d = j − i` where it can prove
//! one: a comparison of a key-indexed and a query-indexed integer vector, each `index + c`
//! (evaluated at compile time: their cones hold no input), is `d ≤ c'` or `d ≥ c'`; an
//! `equal` of two vectors that hold one value each is true; a constant is read element by
//! element; `and` intersects. A condition that is none of these but is broadcast along the
//! query axis or the key axis (a padding mask `[B, 1, 1, T]`) is kept as a smaller mask.
//!
//! The mask value `where(cond, 0, NEG)` with NEG ≤ [`HIDDEN_BELOW`] then becomes: no mask when
//! cond is true for every offset occurring, the causal flag when cond is exactly `d ≤ Tk − Tq`
//! (the hidden keys' probabilities are `e^(s + NEG − max) = 0` in f32 for any scores below
//! 1e29 in magnitude, and each row keeps its diagonal), and `where(small, 0, NEG)` for a small
//! condition (the same additions as the model's). Anything else, a causal condition combined
//! with a data-dependent one included (a left-padded row would see all of its keys with NEG
//! added in the model, none here), keeps the model's mask value: exact, only not smaller.

use super::consts::{Consts, scalar_f64};
use fp8c_ir::{Graph, IrError, Op, Tensor, Value};

/// An additive mask value at or below this hides a key (see the module docs).
pub const HIDDEN_BELOW: f64 = -1e30;

/// Cone sizes (elements per node) evaluated at compile time to read a predicate.
const EVAL_LIMIT: u64 = 1 << 22;

/// One way the scores hide keys: `where(cond, s, NEG)` (the key visible where `cond` is
/// `visible_if`), or an additive `where(cond, 0, NEG)` (`from`: that mask value).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Hide {
    pub cond: Value,
    pub visible_if: bool,
    /// The value a hidden key's score becomes (or is added), ≤ [`HIDDEN_BELOW`].
    pub neg: f64,
    /// The additive mask value this came from, if it was one.
    pub from: Option<Value>,
}

/// What a recognised attention's mask becomes.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum MaskPlan {
    /// The model's additive mask (if any) as it is, and the causal flag.
    Direct { causal: bool, mask: Option<Value> },
    /// `where(and(conds..), 0, neg)`, each condition negated where its flag is false: a
    /// condition smaller than the scores, or the model's own conditions as an additive mask
    /// (`neg` = −∞: the same scores either way).
    Small { conds: Vec<(Value, bool)>, neg: f64 },
}

/// The predicate a boolean value is proven to be, over `d = j − i` (key minus query index).
#[derive(Clone, Debug, PartialEq)]
enum Pred {
    /// True exactly when `lo ≤ d ≤ hi` (for every batch and head).
    Band { lo: i64, hi: i64 },
    /// The `and` of these values (negated where the flag is false), each broadcast along the
    /// query or the key axis.
    Small(Vec<(Value, bool)>),
    /// Nothing proven.
    Unknown,
}

const ALL: Pred = Pred::Band {
    lo: i64::MIN,
    hi: i64::MAX,
};

/// `hide` as the additive mask value `m`, when `m` is `where(cond, 0, NEG)` or
/// `where(cond, NEG, 0)` with scalar constants.
pub(super) fn as_hide(g: &Graph, c: &Consts<'_>, m: Value) -> Option<Hide> {
    let n = g.node(m.node);
    let Op::Where = n.op else {
        return None;
    };
    let [cond, a, b] = [n.inputs()[0], n.inputs()[1], n.inputs()[2]];
    let (va, vb) = (scalar_f64(c.value(g, a)), scalar_f64(c.value(g, b)));
    let hidden = |v: Option<f64>| v.filter(|x| *x <= HIDDEN_BELOW);
    let (visible_if, neg) = match (va, hidden(vb), hidden(va), vb) {
        (Some(0.0), Some(neg), _, _) => (true, neg),
        (_, _, Some(neg), Some(0.0)) => (false, neg),
        _ => return None,
    };
    Some(Hide {
        cond,
        visible_if,
        neg,
        from: Some(m),
    })
}

/// The plan for the hiding conditions and the other additive mask of an attention with `tq`
/// queries and `tk` keys; None when no exact plan exists (nothing is fused).
pub(super) fn plan(
    g: &Graph,
    c: &Consts<'_>,
    hides: &[Hide],
    additive: Option<Value>,
    tq: u64,
    tk: u64,
) -> Result<Option<MaskPlan>, IrError> {
    // The model's mask as one additive tensor, when it is exactly one: the fallback.
    let single = match (hides, additive) {
        ([], Some(m)) => Some(m),
        ([h], None) => h.from,
        _ => None,
    };
    // Or the model's `where(cond, s, −∞)` conditions as one additive −∞ mask.
    let where_forms = additive.is_none()
        && !hides.is_empty()
        && hides
            .iter()
            .all(|h| h.from.is_none() && h.neg == f64::NEG_INFINITY);
    let fallback = Ok(match single {
        Some(m) => Some(MaskPlan::Direct {
            causal: false,
            mask: Some(m),
        }),
        None if where_forms => Some(MaskPlan::Small {
            conds: hides.iter().map(|h| (h.cond, h.visible_if)).collect(),
            neg: f64::NEG_INFINITY,
        }),
        None => None,
    });
    let mut total = ALL;
    let mut smalls = Vec::new();
    // A constant additive mask (canonicalize folded it): its visible keys are its zeros.
    let mut additive = additive;
    if let ([], Some(m)) = (hides, additive)
        && let Some(p) = constant_hiding(g, c, m, tq, tk)
    {
        total = p;
        additive = None;
    }
    for h in hides {
        let mut p = analyze(g, c, h.cond, tq, tk)?;
        if !h.visible_if {
            p = match p {
                Pred::Band { lo: i64::MIN, hi } if hi < i64::MAX => Pred::Band {
                    lo: hi + 1,
                    hi: i64::MAX,
                },
                Pred::Band { lo, hi: i64::MAX } if lo > i64::MIN => Pred::Band {
                    lo: i64::MIN,
                    hi: lo - 1,
                },
                p if p == ALL => Pred::Band { lo: 1, hi: 0 },
                Pred::Small(v) if v.len() == 1 => Pred::Small(vec![(v[0].0, !v[0].1)]),
                _ => Pred::Unknown,
            };
        }
        match p {
            p @ Pred::Band { .. } => total = and(total, p),
            Pred::Small(v) => smalls.push((v, h.neg)),
            Pred::Unknown => return fallback,
        }
    }
    let (min_d, max_d) = (-(tq as i64 - 1), tk as i64 - 1);
    let causal = match total {
        Pred::Band { lo, hi } if lo <= min_d && hi >= max_d => false,
        Pred::Band { lo, hi } if lo <= min_d && hi == tk as i64 - tq as i64 => true,
        _ => return fallback,
    };
    Ok(match smalls.as_slice() {
        [] => Some(MaskPlan::Direct {
            causal,
            mask: additive,
        }),
        [(conds, neg)] if !causal && additive.is_none() => Some(MaskPlan::Small {
            conds: conds.clone(),
            neg: *neg,
        }),
        _ => return fallback,
    })
}

/// The shape of `v` aligned to the scores' rank 4 (leading 1s), if its rank is at most 4.
fn dims4(g: &Graph, v: Value) -> Option<[u64; 4]> {
    let d = g.value_type(v).known_dims()?;
    let mut out = [1u64; 4];
    if d.len() > 4 {
        return None;
    }
    out[4 - d.len()..].copy_from_slice(&d);
    Some(out)
}

/// The predicate boolean `v` is proven to be.
fn analyze(g: &Graph, c: &Consts<'_>, v: Value, tq: u64, tk: u64) -> Result<Pred, IrError> {
    let Some(d) = dims4(g, v) else {
        return Ok(Pred::Unknown);
    };
    let small = d[2] == 1 || d[3] == 1;
    let n = g.node(v.node);
    let pred = match &n.op {
        Op::And => {
            let x = analyze(g, c, n.inputs()[0], tq, tk)?;
            let y = analyze(g, c, n.inputs()[1], tq, tk)?;
            and(x, y)
        }
        Op::LessOrEqual | Op::Less | Op::GreaterOrEqual | Op::Greater => {
            compare(g, c, &n.op, n.inputs()[0], n.inputs()[1], tq, tk)?.unwrap_or(Pred::Unknown)
        }
        Op::Equal => {
            let one = |x: Value| c.eval(g, x, EVAL_LIMIT).and_then(|t| single_value(&t));
            match (one(n.inputs()[0]), one(n.inputs()[1])) {
                (Some(a), Some(b)) if a == b => ALL,
                _ => Pred::Unknown,
            }
        }
        _ => Pred::Unknown,
    };
    if pred != Pred::Unknown {
        return Ok(pred);
    }
    // A value the analysis cannot read: a proven constant pattern, or small enough to keep.
    if let Some(t) = c.eval(g, v, EVAL_LIMIT)
        && let Some(p) = band_of_constant(&t, tq, tk)
    {
        return Ok(p);
    }
    Ok(if small {
        Pred::Small(vec![(v, true)])
    } else {
        Pred::Unknown
    })
}

/// `x ∧ y`.
fn and(x: Pred, y: Pred) -> Pred {
    match (x, y) {
        (Pred::Band { lo: a, hi: b }, Pred::Band { lo: c, hi: d }) => Pred::Band {
            lo: a.max(c),
            hi: b.min(d),
        },
        (p, q) if p == ALL => q,
        (p, q) if q == ALL => p,
        (Pred::Small(mut a), Pred::Small(b)) => {
            a.extend(b);
            Pred::Small(a)
        }
        _ => Pred::Unknown,
    }
}

/// A comparison of a key-indexed and a query-indexed vector, each `index + offset`.
fn compare(
    g: &Graph,
    c: &Consts<'_>,
    op: &Op,
    x: Value,
    y: Value,
    tq: u64,
    tk: u64,
) -> Result<Option<Pred>, IrError> {
    // ge / gt are le / lt with the operands swapped.
    let (a, b, strict) = match op {
        Op::LessOrEqual => (x, y, false),
        Op::Less => (x, y, true),
        Op::GreaterOrEqual => (y, x, false),
        _ => (y, x, true),
    };
    let (Some(ia), Some(ib)) = (index_vector(g, c, a, tq, tk), index_vector(g, c, b, tq, tk))
    else {
        return Ok(None);
    };
    // a ≤ b (or a < b, i.e. a ≤ b − 1, for integers) with a = idx_a + ca, b = idx_b + cb.
    let slack = if strict { 1 } else { 0 };
    Ok(Some(match (ia, ib) {
        // j + ca ≤ i + cb − slack  ⇔  d ≤ cb − ca − slack.
        (Index::Key(ca), Index::Query(cb)) => Pred::Band {
            lo: i64::MIN,
            hi: cb - ca - slack,
        },
        // i + ca ≤ j + cb − slack  ⇔  d ≥ ca − cb + slack.
        (Index::Query(ca), Index::Key(cb)) => Pred::Band {
            lo: ca - cb + slack,
            hi: i64::MAX,
        },
        _ => return Ok(None),
    }))
}

/// A vector along the key axis (`j + c`) or the query axis (`i + c`).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Index {
    Key(i64),
    Query(i64),
}

/// Which index vector `v` is: broadcast along every axis but the key (last) or the query
/// (second-to-last) axis of the scores, the same for every batch and head, and `index + c`
/// with integral values.
fn index_vector(g: &Graph, c: &Consts<'_>, v: Value, tq: u64, tk: u64) -> Option<Index> {
    let d = dims4(g, v)?;
    let t = c.eval(g, v, EVAL_LIMIT)?;
    let vals = t.to_f64_vec().ok()?;
    let (len, key) = match (d[2], d[3]) {
        (1, n) if n == tk && n > 1 => (n as usize, true),
        (n, 1) if n == tq && n > 1 => (n as usize, false),
        _ => return None,
    };
    // Leading dims: every [len] slice must be the same `index + c`.
    let c0 = *vals.first()?;
    if c0.fract() != 0.0 || c0.abs() > 1e15 {
        return None;
    }
    let ok = vals
        .chunks(len)
        .all(|row| row.iter().enumerate().all(|(k, &x)| x == c0 + k as f64));
    if !ok {
        return None;
    }
    let c0 = c0 as i64;
    Some(if key {
        Index::Key(c0)
    } else {
        Index::Query(c0)
    })
}

/// The band a constant additive mask is, when each of its values is 0 (visible) or at most
/// [`HIDDEN_BELOW`] (hidden), the same for every batch and head.
fn constant_hiding(g: &Graph, c: &Consts<'_>, m: Value, tq: u64, tk: u64) -> Option<Pred> {
    let t = c.eval(g, m, EVAL_LIMIT)?;
    let v = t.to_f64_vec().ok()?;
    if !v.iter().all(|&x| x == 0.0 || x <= HIDDEN_BELOW) {
        return None;
    }
    let seen: Vec<bool> = v.iter().map(|&x| x == 0.0).collect();
    let seen = Tensor::from_bool(t.shape().to_vec(), &seen);
    band_of_constant(&seen, tq, tk)
}

/// The one value every element of `t` holds (bits of its f64 widening), if it is one.
fn single_value(t: &Tensor) -> Option<u64> {
    let v = t.to_f64_vec().ok()?;
    let first = *v.first()?;
    v.iter()
        .all(|x| x.to_bits() == first.to_bits())
        .then_some(first.to_bits())
}

/// A constant boolean tensor read as a band `d ≤ hi` (or everything), the same for every
/// batch and head.
fn band_of_constant(t: &Tensor, tq: u64, tk: u64) -> Option<Pred> {
    let v = t.to_f64_vec().ok()?;
    if v.iter().all(|&x| x != 0.0) {
        return Some(ALL);
    }
    let s = t.shape();
    let (rq, rk) = match s {
        [.., q, k] => (*q, *k),
        _ => return None,
    };
    if rq != tq || rk != tk || tq == 0 || tk == 0 {
        return None;
    }
    let (tq, tk) = (tq as usize, tk as usize);
    // The last row's visible keys give the offset: keys 0..=hi + tq − 1.
    let last = &v[(tq - 1) * tk..tq * tk];
    let count = last.iter().take_while(|&&x| x != 0.0).count() as i64;
    let hi = count - 1 - (tq as i64 - 1);
    let ok = v.chunks(tq * tk).all(|m| {
        m.chunks(tk).enumerate().all(|(i, row)| {
            row.iter()
                .enumerate()
                .all(|(j, &x)| (x != 0.0) == (j as i64 - i as i64 <= hi))
        })
    });
    ok.then_some(Pred::Band { lo: i64::MIN, hi })
}
