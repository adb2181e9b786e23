//! Elementwise rules: unary math, broadcasting binary ops (each gradient summed back over the
//! axes its operand was broadcast along), `where`, `clip` and `cast`.
//!
//! Subgradients at kinks follow PyTorch: relu'(0) = 0, |x|'(0) = 0, clip passes the gradient
//! where `min ≤ x ≤ max`, max/min send it to the first operand on ties.

use super::{At, Grads, R};
use crate::autodiff::emit::Emit;
use fp8c_ir::{Op, Value};

/// 2/√π, the derivative of erf at 0.
const TWO_OVER_SQRT_PI: f64 = std::f64::consts::FRAC_2_SQRT_PI;

pub(super) fn vjp(e: &mut Emit<'_>, at: &At<'_>) -> R<Option<Grads>> {
    let op = at.op;
    if op.is_elementwise_unary() {
        return unary(e, at);
    }
    Ok(Some(match op {
        Op::Add | Op::Sub | Op::Mul | Op::Div | Op::Pow | Op::Max | Op::Min => binary(e, at)?,
        Op::Where => {
            let dy = at.dy()?;
            let [c, a, b] = [at.ins[0], at.ins[1], at.ins[2]];
            let mut out = vec![None; 3];
            if at.want(1) {
                let d = e.mask(&at.n("d1.where"), c, dy, true)?;
                out[1] = Some(e.sum_to(&at.n("d1"), d, &e.dims(a)?)?);
            }
            if at.want(2) {
                let d = e.mask(&at.n("d2.where"), c, dy, false)?;
                out[2] = Some(e.sum_to(&at.n("d2"), d, &e.dims(b)?)?);
            }
            out
        }
        Op::Clip => {
            let dy = at.dy()?;
            let [x, lo, hi] = [at.ins[0], at.ins[1], at.ins[2]];
            let ge = e.op(&at.n("ge_min"), Op::GreaterOrEqual, &[x, lo])?;
            let le = e.op(&at.n("le_max"), Op::LessOrEqual, &[x, hi])?;
            let inside = e.op(&at.n("inside"), Op::And, &[ge, le])?;
            let d = e.mask(&at.n("d0.where"), inside, dy, true)?;
            vec![Some(e.sum_to(&at.n("d0"), d, &e.dims(x)?)?), None, None]
        }
        Op::Cast { .. } => {
            let x = at.ins[0];
            let to = crate::autodiff::driver::adjoint_dtype(e.dtype(x));
            vec![Some(e.cast(&at.n("d0"), at.dy()?, to)?)]
        }
        // Comparisons, logic and mod carry no gradient.
        _ => vec![None; at.ins.len()],
    }))
}

fn unary(e: &mut Emit<'_>, at: &At<'_>) -> R<Option<Grads>> {
    let (x, y) = (at.ins[0], at.outs[0]);
    let dy = at.dy()?;
    let n = |s: &str| at.n(s);
    let dt = e.dtype(dy);
    let d = match at.op {
        Op::Identity => dy,
        Op::Neg => e.neg(&n("d0"), dy)?,
        Op::Abs => {
            let z = e_zero(e, &n("zero"), x)?;
            let pos = e.op(&n("pos"), Op::Greater, &[x, z])?;
            let negx = e.op(&n("negative"), Op::Less, &[x, z])?;
            let ndy = e.neg(&n("ndy"), dy)?;
            let inner = e.mask(&n("neg_part"), negx, ndy, true)?;
            e.op(&n("d0"), Op::Where, &[pos, dy, inner])?
        }
        // d√x = dy / (2√x)
        Op::Sqrt => {
            let q = e.div(&n("q"), dy, y)?;
            e.scale(&n("d0"), q, 0.5)?
        }
        // d(1/x) = −dy · y²
        Op::Reciprocal => {
            let y2 = e.mul(&n("y2"), y, y)?;
            let t = e.mul(&n("t"), dy, y2)?;
            e.neg(&n("d0"), t)?
        }
        Op::Exp => e.mul(&n("d0"), dy, y)?,
        Op::Log => e.div(&n("d0"), dy, x)?,
        // d erf(x) = 2/√π · exp(−x²)
        Op::Erf => {
            let x2 = e.mul(&n("x2"), x, x)?;
            let nx2 = e.neg(&n("nx2"), x2)?;
            let ex = e.op(&n("exp"), Op::Exp, &[nx2])?;
            let t = e.mul(&n("t"), dy, ex)?;
            e.scale(&n("d0"), t, TWO_OVER_SQRT_PI)?
        }
        // d tanh = 1 − y²
        Op::Tanh => {
            let y2 = e.mul(&n("y2"), y, y)?;
            let one = e.scalar(&n("one"), dt, 1.0)?;
            let s = e.sub(&n("1my2"), one, y2)?;
            e.mul(&n("d0"), dy, s)?
        }
        // d sigmoid = y (1 − y)
        Op::Sigmoid => {
            let one = e.scalar(&n("one"), dt, 1.0)?;
            let s = e.sub(&n("1my"), one, y)?;
            let t = e.mul(&n("t"), y, s)?;
            e.mul(&n("d0"), dy, t)?
        }
        Op::Relu => {
            let z = e_zero(e, &n("zero"), x)?;
            let pos = e.op(&n("pos"), Op::Greater, &[x, z])?;
            e.mask(&n("d0"), pos, dy, true)?
        }
        Op::LeakyRelu { alpha } => {
            let z = e_zero(e, &n("zero"), x)?;
            let pos = e.op(&n("pos"), Op::Greater, &[x, z])?;
            let small = e.scale(&n("neg_part"), dy, f64::from(*alpha))?;
            e.op(&n("d0"), Op::Where, &[pos, dy, small])?
        }
        Op::Gelu { approximate } => e.op(
            &n("d0"),
            Op::GeluGrad {
                approximate: *approximate,
            },
            &[x, dy],
        )?,
        Op::Sin => {
            let c = e.op(&n("cos"), Op::Cos, &[x])?;
            e.mul(&n("d0"), dy, c)?
        }
        Op::Cos => {
            let s = e.op(&n("sin"), Op::Sin, &[x])?;
            let t = e.mul(&n("t"), dy, s)?;
            e.neg(&n("d0"), t)?
        }
        // Piecewise constant: the gradient is zero almost everywhere.
        Op::Floor | Op::Ceil => return Ok(Some(vec![None])),
        _ => return Ok(None),
    };
    Ok(Some(vec![Some(d)]))
}

/// A scalar zero of `like`'s dtype.
fn e_zero(e: &mut Emit<'_>, name: &str, like: Value) -> R<Value> {
    e.scalar(name, e.dtype(like), 0.0)
}

fn binary(e: &mut Emit<'_>, at: &At<'_>) -> R<Grads> {
    let dy = at.dy()?;
    let (a, b, y) = (at.ins[0], at.ins[1], at.outs[0]);
    let n = |s: &str| at.n(s);
    let (want_a, want_b) = (at.want(0), at.want(1));
    let (mut da, mut db) = (None, None);
    match at.op {
        Op::Add => {
            da = want_a.then_some(dy);
            db = want_b.then_some(dy);
        }
        Op::Sub => {
            da = want_a.then_some(dy);
            if want_b {
                db = Some(e.neg(&n("d1.neg"), dy)?);
            }
        }
        Op::Mul => {
            if want_a {
                da = Some(e.mul(&n("d0.mul"), dy, b)?);
            }
            if want_b {
                db = Some(e.mul(&n("d1.mul"), dy, a)?);
            }
        }
        Op::Div => {
            if want_a {
                da = Some(e.div(&n("d0.div"), dy, b)?);
            }
            if want_b {
                // d(a/b)/db = −y / b
                let t = e.mul(&n("d1.t"), dy, y)?;
                let q = e.div(&n("d1.q"), t, b)?;
                db = Some(e.neg(&n("d1.neg"), q)?);
            }
        }
        Op::Pow => {
            let dt = e.dtype(a);
            if want_a {
                // d(a^p)/da = p · a^(p−1)
                let p = e.cast(&n("p"), b, dt)?;
                let one = e.scalar(&n("one"), dt, 1.0)?;
                let pm1 = e.sub(&n("pm1"), p, one)?;
                let pw = e.op(&n("pow"), Op::Pow, &[a, pm1])?;
                let t = e.mul(&n("d0.t"), pw, p)?;
                da = Some(e.mul(&n("d0.mul"), dy, t)?);
            }
            if want_b {
                // d(a^p)/dp = y · ln a
                let ln = e.op(&n("ln"), Op::Log, &[a])?;
                let t = e.mul(&n("d1.t"), y, ln)?;
                let d = e.mul(&n("d1.mul"), dy, t)?;
                let bt = e.dtype(b);
                db = Some(e.cast(&n("d1.cast"), d, bt)?);
            }
        }
        Op::Max | Op::Min => {
            let cmp = if matches!(at.op, Op::Max) {
                Op::GreaterOrEqual
            } else {
                Op::LessOrEqual
            };
            let first = e.op(&n("first"), cmp, &[a, b])?;
            if want_a {
                da = Some(e.mask(&n("d0.where"), first, dy, true)?);
            }
            if want_b {
                db = Some(e.mask(&n("d1.where"), first, dy, false)?);
            }
        }
        _ => {}
    }
    let da = match da {
        Some(d) => Some(e.sum_to(&n("d0"), d, &e.dims(a)?)?),
        None => None,
    };
    let db = match db {
        Some(d) => Some(e.sum_to(&n("d1"), d, &e.dims(b)?)?),
        None => None,
    };
    Ok(vec![da, db])
}
