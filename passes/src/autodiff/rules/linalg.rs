//! GEMM rules: `matmul` (numpy semantics: 1-D operands, batching, broadcasting) and `gemm`.
//!
//! dgrad = dY·Bᵀ and wgrad = Aᵀ·dY. When B is a matrix (a weight) and A carries batch dims,
//! A and dY are folded to 2-D first, so wgrad is one GEMM over every row instead of a batched
//! GEMM followed by a reduction. 2-D products use `gemm` with its transpose flags, so no
//! operand is copied just to transpose it. Backward nodes are named `{node}.dgrad` and
//! `{node}.wgrad`.

use super::{At, Grads, R};
use crate::autodiff::emit::Emit;
use fp8c_ir::{IrError, LinalgOp, Op, Support, Value};

/// matmul and gemm have rules; the FP8 GEMMs' are in `fp8` (they read the gradient
/// quantizer). A block-scaled GEMM's rule takes A in 1-row tiles (what the scaling pass emits).
pub(super) fn support(o: LinalgOp<'_>) -> Support {
    match o {
        LinalgOp::MatMul | LinalgOp::Gemm { .. } | LinalgOp::ScaledMatMul { .. } => Support::Yes,
        LinalgOp::BlockScaledMatMul { a_rows: 1, .. } => Support::Yes,
        LinalgOp::BlockScaledMatMul { .. } => Support::No(
            "a block-scaled GEMM with A in tiles of several rows has no gradient rule (fp8c's \
             recipes tile activations 1 × k_block)",
        ),
        LinalgOp::__Lifetime(never, _) => match never {},
    }
}

pub(super) fn vjp(e: &mut Emit<'_>, at: &At<'_>) -> R<Option<Grads>> {
    Ok(Some(match at.op {
        Op::MatMul => matmul(e, at)?,
        Op::Gemm {
            alpha,
            beta,
            trans_a,
            trans_b,
        } => gemm(e, at, *alpha, *beta, *trans_a, *trans_b)?,
        _ => return Ok(None),
    }))
}

/// `gemm { alpha, trans_a, trans_b }` of two 2-D operands (beta 0, no C).
pub(crate) fn gemm2(
    e: &mut Emit<'_>,
    name: &str,
    a: Value,
    b: Value,
    alpha: f32,
    ta: bool,
    tb: bool,
) -> R<Value> {
    e.op(
        name,
        Op::Gemm {
            alpha,
            beta: 0.0,
            trans_a: ta,
            trans_b: tb,
        },
        &[a, b],
    )
}

/// numpy broadcasting of two static batch shapes.
pub(crate) fn broadcast_dims(a: &[u64], b: &[u64]) -> R<Vec<u64>> {
    let r = a.len().max(b.len());
    (0..r)
        .map(|i| {
            let da = if i + a.len() >= r {
                a[i + a.len() - r]
            } else {
                1
            };
            let db = if i + b.len() >= r {
                b[i + b.len() - r]
            } else {
                1
            };
            match (da, db) {
                (x, y) if x == y => Ok(x),
                (1, y) => Ok(y),
                (x, 1) => Ok(x),
                _ => Err(IrError::Other(format!(
                    "autodiff: batch dims {a:?} and {b:?} do not broadcast"
                ))),
            }
        })
        .collect()
}

fn matmul(e: &mut Emit<'_>, at: &At<'_>) -> R<Grads> {
    let (a, b, dy) = (at.ins[0], at.ins[1], at.dy()?);
    let (ad, bd) = (e.dims(a)?, e.dims(b)?);
    // Promote 1-D operands as numpy does: a [K] → [1, K], b [K] → [K, 1].
    let a2d: Vec<u64> = if ad.len() == 1 {
        vec![1, ad[0]]
    } else {
        ad.clone()
    };
    let b2d: Vec<u64> = if bd.len() == 1 {
        vec![bd[0], 1]
    } else {
        bd.clone()
    };
    if a2d.len() < 2 || b2d.len() < 2 {
        return Err(at.err("matmul of a scalar has no gradient rule"));
    }
    let (m, k, n) = (a2d[a2d.len() - 2], a2d[a2d.len() - 1], b2d[b2d.len() - 1]);
    let batch = broadcast_dims(&a2d[..a2d.len() - 2], &b2d[..b2d.len() - 2])?;
    let mut y2d = batch.clone();
    y2d.extend([m, n]);
    let a2 = e.reshape(&at.n("a2"), a, &a2d)?;
    let b2 = e.reshape(&at.n("b2"), b, &b2d)?;
    let dy2 = e.reshape(&at.n("dy2"), dy, &y2d)?;
    let rows: u64 = batch.iter().product::<u64>() * m;
    let mut out = vec![None, None];
    if at.want(0) {
        let da2 = if b2d.len() == 2 {
            // [rows, N] · Bᵀ → [rows, K]
            let dyf = e.reshape(&at.n("dgrad.dy"), dy2, &[rows, n])?;
            let d = gemm2(e, &at.n("dgrad"), dyf, b2, 1.0, false, true)?;
            let mut dd = batch.clone();
            dd.extend([m, k]);
            e.reshape(&at.n("dgrad.reshape"), d, &dd)?
        } else {
            let bt = e.swap_last2(&at.n("dgrad.bt"), b2)?;
            e.op(&at.n("dgrad"), Op::MatMul, &[dy2, bt])?
        };
        let da2 = e.sum_to(&at.n("dgrad.sum"), da2, &a2d)?;
        out[0] = Some(e.reshape(&at.n("d0"), da2, &ad)?);
    }
    if at.want(1) {
        let db2 = if b2d.len() == 2 {
            // Aᵀ [K, rows] · dY [rows, N] → [K, N], every batch row in one GEMM.
            let mut full_a = batch.clone();
            full_a.extend([m, k]);
            let ab = e.expand(&at.n("wgrad.a"), a2, &full_a)?;
            let af = e.reshape(&at.n("wgrad.af"), ab, &[rows, k])?;
            let dyf = e.reshape(&at.n("wgrad.dy"), dy2, &[rows, n])?;
            gemm2(e, &at.n("wgrad"), af, dyf, 1.0, true, false)?
        } else {
            let atr = e.swap_last2(&at.n("wgrad.at"), a2)?;
            let d = e.op(&at.n("wgrad"), Op::MatMul, &[atr, dy2])?;
            e.sum_to(&at.n("wgrad.sum"), d, &b2d)?
        };
        out[1] = Some(e.reshape(&at.n("d1"), db2, &bd)?);
    }
    Ok(out)
}

/// `Y = alpha·op(A)·op(B) + beta·C`.
fn gemm(e: &mut Emit<'_>, at: &At<'_>, alpha: f32, beta: f32, ta: bool, tb: bool) -> R<Grads> {
    let (a, b, dy) = (at.ins[0], at.ins[1], at.dy()?);
    let mut out = vec![None; at.ins.len()];
    if at.want(0) {
        out[0] = Some(if ta {
            // dA = alpha·op(B)·dYᵀ
            gemm2(e, &at.n("dgrad"), b, dy, alpha, tb, true)?
        } else {
            // dA = alpha·dY·op(B)ᵀ
            gemm2(e, &at.n("dgrad"), dy, b, alpha, false, !tb)?
        });
    }
    if at.want(1) {
        out[1] = Some(if tb {
            // dB = alpha·dYᵀ·op(A)
            gemm2(e, &at.n("wgrad"), dy, a, alpha, true, ta)?
        } else {
            // dB = alpha·op(A)ᵀ·dY
            gemm2(e, &at.n("wgrad"), a, dy, alpha, !ta, false)?
        });
    }
    if at.want(2) {
        let c = at.ins[2];
        let d = e.scale(&at.n("dbias.beta"), dy, f64::from(beta))?;
        out[2] = Some(e.sum_to(&at.n("dbias"), d, &e.dims(c)?)?);
    }
    Ok(out)
}
