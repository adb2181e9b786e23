//! What several families' inference rules share: the input checks ([`Arg`], [`args`],
//! [`args_opt`], [`variadic`]) and their messages, the dtype predicates, axis helpers,
//! numpy broadcasting with symbolic dims, [`DimProduct`] (element counts over symbols), and
//! the symbolic output sizes of windows (conv and pooling), computed per dim with
//! [`crate::window::conv_out_dim`], the one home of window geometry.

use super::InferInput;
use crate::op::AutoPad;
use crate::window::{WindowAttrs, conv_out_dim};
use crate::{DType, Dim, Shape, Tensor, TensorType};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

pub(super) type Res<T> = Result<T, String>;

/// numpy broadcasting of two shapes; on failure, the two dims (aligned from the right) that
/// disagree.
pub fn broadcast_shapes(a: &[Dim], b: &[Dim]) -> Result<Shape, (Dim, Dim)> {
    let rank = a.len().max(b.len());
    let one = Dim::Known(1);
    let mut out = Vec::with_capacity(rank);
    for i in 0..rank {
        // Position i from the left of the output is position (rank - i) from the right.
        let from_right = rank - i;
        let da = a
            .len()
            .checked_sub(from_right)
            .and_then(|j| a.get(j))
            .unwrap_or(&one);
        let db = b
            .len()
            .checked_sub(from_right)
            .and_then(|j| b.get(j))
            .unwrap_or(&one);
        out.push(broadcast_dim(da, db).ok_or_else(|| (da.clone(), db.clone()))?);
    }
    Ok(out)
}

/// numpy broadcasting of two dims; None if they are known, different and neither is 1.
fn broadcast_dim(a: &Dim, b: &Dim) -> Option<Dim> {
    use Dim::{Known, Sym, Unknown};
    Some(match (a, b) {
        (Known(1), d) | (d, Known(1)) => d.clone(),
        (Known(x), Known(y)) if x != y => return None,
        (Known(n), _) | (_, Known(n)) => Known(*n),
        (Sym(x), Sym(y)) if x == y => Sym(x.clone()),
        _ => Unknown,
    })
}

/// Two dims that must be equal: the more specific one (known, then symbol, then `?`), or
/// None when they are different known sizes. Two different symbols keep the first.
pub(super) fn unify(a: &Dim, b: &Dim) -> Option<Dim> {
    use Dim::{Known, Sym, Unknown};
    match (a, b) {
        (Known(x), Known(y)) => (x == y).then_some(Known(*x)),
        (Known(x), _) | (_, Known(x)) => Some(Known(*x)),
        (Sym(x), _) | (_, Sym(x)) => Some(Sym(x.clone())),
        (Unknown, Unknown) => Some(Unknown),
    }
}

/// A product of dims: a known factor, symbols with their multiplicity, and whether a `?`
/// took part. Reshape's `-1` is the quotient of two of these.
#[derive(Debug)]
pub(super) struct DimProduct {
    pub(super) known: u64,
    pub(super) syms: BTreeMap<String, u32>,
    pub(super) unknown: bool,
}

impl DimProduct {
    pub(super) fn of<'d>(dims: impl IntoIterator<Item = &'d Dim>) -> Res<Self> {
        let mut p = DimProduct {
            known: 1,
            syms: BTreeMap::new(),
            unknown: false,
        };
        let (mut zero, mut overflow) = (false, false);
        for d in dims {
            match d {
                Dim::Known(0) => zero = true,
                Dim::Known(n) => match p.known.checked_mul(*n) {
                    Some(k) => p.known = k,
                    None => overflow = true,
                },
                Dim::Sym(s) => *p.syms.entry(s.clone()).or_insert(0) += 1,
                Dim::Unknown => p.unknown = true,
            }
        }
        if zero {
            // Anything times 0 is 0, whatever the symbols stand for.
            return Ok(DimProduct {
                known: 0,
                syms: BTreeMap::new(),
                unknown: false,
            });
        }
        if overflow {
            return Err("the element count overflows u64".into());
        }
        Ok(p)
    }

    pub(super) fn is_known(&self) -> bool {
        !self.unknown && self.syms.is_empty()
    }

    /// The product as one dim: known, a single symbol, or `?`.
    pub(super) fn to_dim(&self) -> Dim {
        if self.known == 0 {
            return Dim::Known(0);
        }
        if self.unknown {
            return Dim::Unknown;
        }
        match single_sym(&self.syms) {
            _ if self.syms.is_empty() => Dim::Known(self.known),
            Some(s) if self.known == 1 => Dim::Sym(s),
            _ => Dim::Unknown,
        }
    }

    /// `self / other` as one dim (reshape's `-1`). Errors only when both are fully known and
    /// do not divide; symbols of `other` cancel the same symbols of `self`.
    pub(super) fn quotient(&self, other: &DimProduct) -> Result<Dim, String> {
        if other.known == 0 {
            return Err("-1 cannot be inferred when the other target dims hold 0 elements".into());
        }
        if self.unknown || other.unknown {
            return Ok(Dim::Unknown);
        }
        let mut rest = self.syms.clone();
        for (s, &c) in &other.syms {
            match rest.get_mut(s) {
                Some(have) if *have >= c => *have -= c,
                _ => return Ok(Dim::Unknown),
            }
        }
        rest.retain(|_, c| *c > 0);
        if !self.known.is_multiple_of(other.known) {
            if rest.is_empty() {
                return Err(format!(
                    "{} elements cannot be split into a multiple of {}",
                    self.known, other.known
                ));
            }
            return Ok(Dim::Unknown);
        }
        let q = self.known / other.known;
        Ok(match single_sym(&rest) {
            _ if rest.is_empty() => Dim::Known(q),
            Some(s) if q == 1 => Dim::Sym(s),
            _ => Dim::Unknown,
        })
    }
}

/// The one symbol of a multiset holding exactly one symbol once.
fn single_sym(syms: &BTreeMap<String, u32>) -> Option<String> {
    match syms.iter().next() {
        Some((s, 1)) if syms.len() == 1 => Some(s.clone()),
        _ => None,
    }
}

// ------------------------------------------------------------------ inputs and checks

/// One input with its position and ONNX role, for messages (`input 1 (B)`).
#[derive(Clone, Copy)]
pub(super) struct Arg<'a> {
    pub(super) index: usize,
    pub(super) role: &'static str,
    pub(super) ty: &'a TensorType,
    pub(super) value: Option<&'a Tensor>,
}

impl fmt::Display for Arg<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.role.is_empty() {
            write!(f, "input {}", self.index)
        } else {
            write!(f, "input {} ({})", self.index, self.role)
        }
    }
}

impl<'a> Arg<'a> {
    pub(super) fn new(index: usize, role: &'static str, input: &InferInput<'a>) -> Self {
        Arg {
            index,
            role,
            ty: input.ty,
            value: input.value,
        }
    }

    pub(super) fn dtype(&self) -> DType {
        self.ty.dtype
    }

    pub(super) fn rank(&self) -> usize {
        self.ty.rank()
    }

    pub(super) fn shape(&self) -> &'a [Dim] {
        &self.ty.shape
    }

    /// `input 1 (B) has shape f32[3,4], {msg}`.
    pub(super) fn shape_err(&self, msg: impl fmt::Display) -> String {
        format!("{self} has shape {}, {msg}", self.ty)
    }

    /// Errors with `{self} has type T, expected {expected}` unless `ok`.
    pub(super) fn expect(&self, ok: bool, expected: &str) -> Res<()> {
        if ok {
            Ok(())
        } else {
            Err(format!("{self} has type {}, expected {expected}", self.ty))
        }
    }

    pub(super) fn expect_rank(&self, rank: usize) -> Res<()> {
        if self.rank() == rank {
            return Ok(());
        }
        let what = if rank == 0 {
            "a scalar (rank 0)".to_string()
        } else {
            format!("rank {rank}")
        };
        Err(self.shape_err(format!("expected {what}")))
    }

    pub(super) fn expect_min_rank(&self, rank: usize, why: &str) -> Res<()> {
        if self.rank() >= rank {
            Ok(())
        } else {
            Err(self.shape_err(format!("expected rank ≥ {rank} ({why})")))
        }
    }

    /// f32 of the given rank (the FP8 ops' scales and histories).
    pub(super) fn expect_f32_rank(&self, rank: usize) -> Res<()> {
        self.expect(self.dtype() == DType::F32, &format!("f32 of rank {rank}"))?;
        self.expect_rank(rank)
    }

    /// The same dtype as `first`.
    pub(super) fn expect_same_dtype(&self, first: &Arg<'_>) -> Res<()> {
        self.expect(
            self.dtype() == first.dtype(),
            &format!("{} like {first}", first.dtype()),
        )
    }

    /// A scalar, or a 1-D tensor of one element (ONNX "scalar" inputs are often the latter).
    pub(super) fn expect_scalar_like(&self) -> Res<()> {
        match self.shape() {
            [] | [Dim::Known(1)] => Ok(()),
            _ => Err(self.shape_err("expected a scalar")),
        }
    }
}

/// Exactly `N` inputs, with their roles.
pub(super) fn args<'a, const N: usize>(
    inputs: &[InferInput<'a>],
    roles: [&'static str; N],
) -> Res<[Arg<'a>; N]> {
    let found: &[InferInput<'a>; N] = inputs
        .try_into()
        .map_err(|_| arity_msg(&roles, N, inputs.len()))?;
    let mut i = 0;
    Ok(found.each_ref().map(|input| {
        let arg = Arg::new(i, roles.get(i).copied().unwrap_or(""), input);
        i += 1;
        arg
    }))
}

/// `N` inputs and one optional trailing input.
pub(super) fn args_opt<'a, const N: usize>(
    inputs: &[InferInput<'a>],
    roles: [&'static str; N],
    optional: &'static str,
) -> Res<([Arg<'a>; N], Option<Arg<'a>>)> {
    let (required, rest) = inputs.split_at_checked(N).unwrap_or((inputs, &[]));
    let mut all: Vec<&'static str> = roles.to_vec();
    all.push(optional);
    let msg = || arity_msg(&all, N, inputs.len());
    if required.len() != N || rest.len() > 1 {
        return Err(msg());
    }
    let req = args(required, roles).map_err(|_| msg())?;
    Ok((req, rest.first().map(|x| Arg::new(N, optional, x))))
}

/// Every input of a variadic op (at least one).
pub(super) fn variadic<'a>(inputs: &[InferInput<'a>]) -> Res<Vec<Arg<'a>>> {
    if inputs.is_empty() {
        return Err("expects at least 1 input, got 0".into());
    }
    Ok(inputs
        .iter()
        .enumerate()
        .map(|(i, x)| Arg::new(i, "", x))
        .collect())
}

pub(super) fn arity_msg(roles: &[&str], required: usize, got: usize) -> String {
    let count = if roles.len() == required {
        format!("{required} input{}", if required == 1 { "" } else { "s" })
    } else {
        format!("{required} or {} inputs", roles.len())
    };
    if roles.is_empty() {
        format!("expects no inputs, got {got}")
    } else {
        format!("expects {count} ({}), got {got}", roles.join(", "))
    }
}

pub(super) fn expect_attr(ok: bool, name: &str, got: impl fmt::Display, expected: &str) -> Res<()> {
    if ok {
        Ok(())
    } else {
        Err(format!("attribute {name}={got}, expected {expected}"))
    }
}

pub(super) const NUMERIC: &str = "a numeric type (float other than FP8, or integer)";
pub(super) const MATH_FLOAT: &str = "a float type other than FP8";

/// Floats that arithmetic accepts: FP8 is storage only.
pub(super) fn is_math_float(d: DType) -> bool {
    d.is_float() && !d.is_fp8()
}

pub(super) fn is_numeric(d: DType) -> bool {
    is_math_float(d) || d.is_int()
}

pub(super) fn is_index(d: DType) -> bool {
    matches!(d, DType::I64 | DType::I32)
}

/// `axis` normalised against `x`'s rank (`[-r, r)`).
pub(super) fn axis_of(x: &Arg<'_>, axis: i64, name: &str) -> Res<usize> {
    norm_axis(axis, x.rank()).ok_or_else(|| {
        x.shape_err(format!(
            "{name}={axis} is out of range {}",
            axis_range(x.rank())
        ))
    })
}

/// `axis` in `[-rank, rank)` as an index.
pub(super) fn norm_axis(axis: i64, rank: usize) -> Option<usize> {
    let r = i64::try_from(rank).ok()?;
    let a = if axis < 0 { axis.checked_add(r)? } else { axis };
    if (0..r).contains(&a) {
        usize::try_from(a).ok()
    } else {
        None
    }
}

pub(super) fn axis_range(rank: usize) -> String {
    if rank == 0 {
        "(a scalar has no axes)".into()
    } else {
        format!("[-{rank}, {}]", rank - 1)
    }
}

/// Normalised, duplicate-free axes.
pub(super) fn axes_of(x: &Arg<'_>, axes: &[i64], name: &str) -> Res<Vec<usize>> {
    let mut seen = BTreeSet::new();
    let mut out = Vec::with_capacity(axes.len());
    for &a in axes {
        let ax = axis_of(x, a, name)?;
        if !seen.insert(ax) {
            return Err(x.shape_err(format!("{name} {} names axis {ax} twice", fmt_list(axes))));
        }
        out.push(ax);
    }
    Ok(out)
}

pub(super) fn fmt_list(v: &[i64]) -> String {
    let items: Vec<String> = v.iter().map(i64::to_string).collect();
    format!("[{}]", items.join(","))
}

pub(super) fn fmt_shape(s: &[Dim]) -> String {
    let items: Vec<String> = s.iter().map(Dim::to_string).collect();
    format!("[{}]", items.join(","))
}

/// The broadcast shape of several inputs, with a message naming the one that does not fit.
pub(super) fn broadcast(all: &[Arg<'_>]) -> Res<Shape> {
    let mut out: Shape = Vec::new();
    for (i, x) in all.iter().enumerate() {
        out = broadcast_shapes(&out, x.shape()).map_err(|(a, b)| {
            let with = match (i, all.first()) {
                (1, Some(first)) => format!("{first} {}", first.ty),
                _ => format!(
                    "the broadcast shape {} of the inputs before it",
                    fmt_shape(&out)
                ),
            };
            x.shape_err(format!("which does not broadcast with {with} ({b} vs {a})"))
        })?;
    }
    Ok(out)
}

/// `a` has `first`'s dtype and a shape that unifies with `first`'s (a gradient and its
/// forward value, an optimizer's operands).
pub(super) fn same_as(a: &Arg<'_>, first: &Arg<'_>) -> Res<()> {
    a.expect_same_dtype(first)?;
    if a.rank() == first.rank()
        && a.shape()
            .iter()
            .zip(first.shape())
            .all(|(x, y)| unify(x, y).is_some())
    {
        Ok(())
    } else {
        Err(a.shape_err(format!("expected the shape of {first} {}", first.ty)))
    }
}

// ------------------------------------------------------------------ window sizes (conv, pooling)

/// One value per spatial axis (`[]` means `default` everywhere), each ≥ `min`.
fn per_axis(name: &str, vals: &[i64], n: usize, default: u64, min: u64) -> Res<Vec<u64>> {
    if vals.is_empty() {
        return Ok(vec![default; n]);
    }
    if vals.len() != n {
        return Err(format!(
            "attribute {name}={} has {} values, expected {n} (one per spatial axis)",
            fmt_list(vals),
            vals.len()
        ));
    }
    vals.iter()
        .map(|&v| {
            u64::try_from(v).ok().filter(|&v| v >= min).ok_or_else(|| {
                format!(
                    "attribute {name}={}: values must be ≥ {min}",
                    fmt_list(vals)
                )
            })
        })
        .collect()
}

/// Output spatial dims for input spatial dims `spatial` and kernel sizes `kernel`.
pub(super) fn window_dims(spatial: &[Dim], kernel: &[Dim], w: &WindowAttrs<'_>) -> Res<Shape> {
    let n = spatial.len();
    let strides = per_axis("strides", w.strides, n, 1, 1)?;
    let dilations = per_axis("dilations", w.dilations, n, 1, 1)?;
    let pads: Vec<(u64, u64)> = if w.pads.is_empty() {
        vec![(0, 0); n]
    } else {
        if Some(w.pads.len()) != n.checked_mul(2) {
            return Err(format!(
                "attribute pads={} has {} values, expected {} (begin values, then end values, for {n} spatial axes)",
                fmt_list(w.pads),
                w.pads.len(),
                n.saturating_mul(2)
            ));
        }
        let flat = per_axis("pads", w.pads, w.pads.len(), 0, 0)?;
        let (begin, end) = flat.split_at(n.min(flat.len()));
        begin.iter().copied().zip(end.iter().copied()).collect()
    };
    let mut out = Vec::with_capacity(n);
    for (i, input) in spatial.iter().enumerate() {
        let (Some(k), Some(&s), Some(&d), Some(&p)) =
            (kernel.get(i), strides.get(i), dilations.get(i), pads.get(i))
        else {
            return Err("window attributes do not match the spatial rank".into());
        };
        let at = |e: String| format!("spatial axis {i}: {e}");
        let p = match w.auto_pad {
            AutoPad::SameUpper | AutoPad::SameLower => {
                // ONNX: out = ceil(in / stride) whatever the kernel.
                out.push(match input {
                    Dim::Known(x) => Dim::Known(x.div_ceil(s)),
                    other if s == 1 => other.clone(),
                    _ => Dim::Unknown,
                });
                continue;
            }
            AutoPad::Valid => (0, 0),
            AutoPad::NotSet => p,
        };
        let Dim::Known(k) = *k else {
            out.push(Dim::Unknown);
            continue;
        };
        out.push(match input {
            Dim::Known(x) => Dim::Known(conv_out_dim(*x, k, s, d, p, w.ceil_mode).map_err(at)?),
            other => {
                // A symbolic size survives a window that exactly preserves it.
                if k == 0 {
                    return Err(at("kernel size 0".into()));
                }
                let shrink = d.checked_mul(k - 1);
                let grow = p.0.checked_add(p.1);
                if s == 1 && shrink.is_some() && shrink == grow {
                    other.clone()
                } else {
                    Dim::Unknown
                }
            }
        });
    }
    Ok(out)
}

/// Explicit kernel_shape values (≥ 1, one per spatial axis).
pub(super) fn kernel_attr(kernel_shape: &[i64], n: usize) -> Res<Shape> {
    if kernel_shape.len() != n {
        return Err(format!(
            "attribute kernel_shape={} has {} values, expected {n} (one per spatial axis)",
            fmt_list(kernel_shape),
            kernel_shape.len()
        ));
    }
    Ok(per_axis("kernel_shape", kernel_shape, n, 1, 1)?
        .into_iter()
        .map(Dim::Known)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    pub(super) fn broadcast_dims_follow_the_symbolic_rules() {
        let s = |n: &str| Dim::Sym(n.into());
        assert_eq!(broadcast_dim(&s("b"), &Dim::Known(1)), Some(s("b")));
        assert_eq!(broadcast_dim(&s("b"), &s("b")), Some(s("b")));
        assert_eq!(broadcast_dim(&s("b"), &Dim::Known(4)), Some(Dim::Known(4)));
        assert_eq!(broadcast_dim(&s("b"), &s("c")), Some(Dim::Unknown));
        assert_eq!(
            broadcast_dim(&Dim::Unknown, &Dim::Known(1)),
            Some(Dim::Unknown)
        );
        assert_eq!(broadcast_dim(&Dim::Known(3), &Dim::Known(4)), None);
    }
}
