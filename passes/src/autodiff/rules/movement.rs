//! Shape and data-movement rules: each moves the gradient back to where the data came from.
//! reshape/flatten/squeeze/unsqueeze reshape it back, transpose applies the inverse
//! permutation, concat splits it, split concatenates it, slice pads it with zeros, pad slices
//! it, expand and tile sum it, and gather scatter-adds it (`gather_grad`, the embedding
//! gradient). gather_elements and gather_nd (batch_dims 0, a mixture-of-experts' weight
//! gathers) scatter-add it (`scatter_elements` / `scatter_nd` with `add` into zeros);
//! the overwriting and adding scatters gather it back for their updates (and pass it, with
//! the overwritten places zeroed for `none`, to their data); trilu masks it the same way.
//!
//! Shape-like inputs (reshape's shape, slice bounds, pads, repeats) must be constants: the
//! graph is static when it is trained.

use super::{At, Grads, R, SECOND_ORDER};
use crate::autodiff::emit::Emit;
use fp8c_ir::{MovementOp, Op, PadMode, ScatterReduction, Support, Value};

/// Data movement moves gradients back; shape arithmetic has none to move.
pub(super) fn support(o: MovementOp<'_>) -> Support {
    match o {
        MovementOp::Reshape { .. }
        | MovementOp::Transpose { .. }
        | MovementOp::Unsqueeze { .. }
        | MovementOp::Squeeze { .. }
        | MovementOp::Flatten { .. }
        | MovementOp::Concat { .. }
        | MovementOp::Split { .. }
        | MovementOp::Slice
        | MovementOp::Gather { .. }
        | MovementOp::Expand
        | MovementOp::Pad { .. }
        | MovementOp::Tile
        | MovementOp::Shape { .. }
        | MovementOp::ConstantOfShape { .. }
        | MovementOp::Range
        | MovementOp::After => Support::Yes,
        MovementOp::GatherNd { batch_dims: 0 } => Support::Yes,
        MovementOp::GatherNd { .. } => {
            Support::No("gather_nd with batch_dims > 0 has no gradient rule yet")
        }
        MovementOp::GatherGrad { .. } => Support::No(SECOND_ORDER),
        MovementOp::GatherElements { .. } | MovementOp::Trilu { .. } => Support::Yes,
        MovementOp::ScatterElements { reduction, .. } | MovementOp::ScatterNd { reduction } => {
            scatter_support(*reduction)
        }
        MovementOp::__Lifetime(never, _) => match never {},
    }
}

/// Why scatters that multiply or keep an extreme have no rule.
const SCATTER_REDUCING: &str =
    "scatters with reduction mul, max or min have no gradient rule (only none and add)";

/// Scatters that overwrite or add have a gradient; the others' depends on which update won.
fn scatter_support(reduction: ScatterReduction) -> Support {
    match reduction {
        ScatterReduction::None | ScatterReduction::Add => Support::Yes,
        ScatterReduction::Mul | ScatterReduction::Max | ScatterReduction::Min => {
            Support::No(SCATTER_REDUCING)
        }
    }
}

pub(super) fn vjp(e: &mut Emit<'_>, at: &At<'_>) -> R<Option<Grads>> {
    let x = at.ins.first().copied();
    let rest = |d: Value| {
        let mut v = vec![None; at.ins.len()];
        v[0] = Some(d);
        v
    };
    Ok(Some(match at.op {
        // The value passes through; the ordering input carries no gradient.
        Op::After => rest(at.dy()?),
        Op::Reshape { .. } | Op::Flatten { .. } | Op::Squeeze { .. } | Op::Unsqueeze { .. } => {
            let x = x.expect("one input");
            let d = e.reshape(&at.n("d0"), at.dy()?, &e.dims(x)?)?;
            rest(d)
        }
        Op::Transpose { perm } => {
            let rank = perm.len();
            let mut inv = vec![0i64; rank];
            for (i, &p) in perm.iter().enumerate() {
                let p = if p < 0 { p + rank as i64 } else { p } as usize;
                inv[p] = i as i64;
            }
            rest(e.transpose(&at.n("d0"), at.dy()?, inv)?)
        }
        Op::Concat { axis } => {
            let dy = at.dy()?;
            let rank = e.dims(dy)?.len() as i64;
            let ax = if *axis < 0 { axis + rank } else { *axis } as usize;
            let sizes: Vec<i64> = at
                .ins
                .iter()
                .map(|&v| e.dims(v).map(|d| d[ax] as i64))
                .collect::<R<_>>()?;
            if at.ins.len() == 1 {
                return Ok(Some(vec![Some(dy)]));
            }
            let parts = e.ops(
                &at.n("d"),
                Op::Split {
                    axis: ax as i64,
                    split: sizes,
                },
                &[dy],
            )?;
            parts.into_iter().map(Some).collect()
        }
        Op::Split { axis, .. } => {
            let mut parts = Vec::with_capacity(at.outs.len());
            for (i, (&o, d)) in at.outs.iter().zip(at.dys).enumerate() {
                parts.push(match d {
                    Some(d) => *d,
                    None => {
                        let ty = e.ty(o);
                        let dims = e.dims(o)?;
                        e.zeros(&at.n(&format!("d.zero{i}")), ty.dtype, &dims)?
                    }
                });
            }
            let d = if parts.len() == 1 {
                parts[0]
            } else {
                e.op(&at.n("d0"), Op::Concat { axis: *axis }, &parts)?
            };
            rest(d)
        }
        Op::Slice => rest(slice(e, at)?),
        Op::Pad { mode } => {
            if *mode != PadMode::Constant {
                return Err(at.err(format!(
                    "only constant padding has a gradient rule, not mode={}",
                    mode.word()
                )));
            }
            rest(unpad(e, at)?)
        }
        Op::Gather { axis } => {
            let (data, idx) = (at.ins[0], at.ins[1]);
            let dd = e.dims(data)?;
            let ax = if *axis < 0 {
                axis + dd.len() as i64
            } else {
                *axis
            };
            let d = e.op(
                &at.n("d0"),
                Op::GatherGrad {
                    axis: ax,
                    size: dd[ax as usize] as i64,
                },
                &[at.dy()?, idx],
            )?;
            rest(d)
        }
        Op::GatherElements { axis } => {
            let (data, idx) = (at.ins[0], at.ins[1]);
            let z = e.zeros(&at.n("d0.zero"), e.dtype(data), &e.dims(data)?)?;
            let scatter = Op::ScatterElements {
                axis: *axis,
                reduction: ScatterReduction::Add,
            };
            rest(e.op(&at.n("d0"), scatter, &[z, idx, at.dy()?])?)
        }
        // Mixture-of-experts exports gather each token's expert weights from a table: the
        // gradient scatter-adds back into the table (an expert picked twice gets both).
        Op::GatherNd { batch_dims: 0 } => {
            let (data, idx) = (at.ins[0], at.ins[1]);
            let z = e.zeros(&at.n("d0.zero"), e.dtype(data), &e.dims(data)?)?;
            let scatter = Op::ScatterNd {
                reduction: ScatterReduction::Add,
            };
            rest(e.op(&at.n("d0"), scatter, &[z, idx, at.dy()?])?)
        }
        Op::ScatterElements { axis, reduction } => {
            let gather = Op::GatherElements { axis: *axis };
            let scatter = |reduction| Op::ScatterElements {
                axis: *axis,
                reduction,
            };
            scatter_vjp(e, at, *reduction, gather, scatter)?
        }
        Op::ScatterNd { reduction } => {
            let gather = Op::GatherNd { batch_dims: 0 };
            scatter_vjp(e, at, *reduction, gather, |reduction| Op::ScatterNd {
                reduction,
            })?
        }
        Op::Expand => {
            let x = x.expect("one input");
            rest(e.sum_to(&at.n("d0"), at.dy()?, &e.dims(x)?)?)
        }
        Op::Tile => {
            let x = x.expect("one input");
            let xd = e.dims(x)?;
            let dy = at.dy()?;
            let yd = e.dims(dy)?;
            // Axis i of the output is (repeat r_i, original d_i) in row-major order.
            let mut split = Vec::with_capacity(2 * xd.len());
            for (&d, &y) in xd.iter().zip(&yd) {
                split.extend([y / d.max(1), d]);
            }
            let r = e.reshape(&at.n("d0.split"), dy, &split)?;
            let axes: Vec<i64> = (0..xd.len()).map(|i| 2 * i as i64).collect();
            let s = e.reduce_sum(&at.n("d0.sum"), r, axes, false)?;
            rest(e.reshape(&at.n("d0"), s, &xd)?)
        }
        Op::Identity => rest(at.dy()?),
        // The kept triangle passes its gradient; the zeroed part gets none.
        Op::Trilu { upper } => {
            let mut ins = vec![at.dy()?];
            ins.extend(at.ins.get(1).copied());
            rest(e.op(&at.n("d0"), Op::Trilu { upper: *upper }, &ins)?)
        }
        // Shapes, ranges, constants and integer ops have no gradient.
        Op::Shape { .. } | Op::ConstantOfShape { .. } | Op::Range | Op::Constant { .. } => {
            vec![None; at.ins.len()]
        }
        _ => return Ok(None),
    }))
}

/// Gradients of `scatter(data, indices, updates)` that overwrites (`none`) or adds: updates get
/// `gather(dy, indices)`; data gets dy, for `none` with the overwritten places zeroed (a
/// scatter of zeros). Repeated indices under `none` are undefined in ONNX; the rule assumes
/// none.
fn scatter_vjp(
    e: &mut Emit<'_>,
    at: &At<'_>,
    reduction: ScatterReduction,
    gather: Op,
    scatter: impl Fn(ScatterReduction) -> Op,
) -> R<Grads> {
    let (idx, updates, dy) = (at.ins[1], at.ins[2], at.dy()?);
    let d_data = match (at.want(0), reduction) {
        (false, _) => None,
        (true, ScatterReduction::None) => {
            let z = e.zeros(&at.n("d0.zero"), e.dtype(updates), &e.dims(updates)?)?;
            Some(e.op(&at.n("d0"), scatter(ScatterReduction::None), &[dy, idx, z])?)
        }
        (true, ScatterReduction::Add) => Some(dy),
        (true, ScatterReduction::Mul | ScatterReduction::Max | ScatterReduction::Min) => {
            return Err(at.err(SCATTER_REDUCING));
        }
    };
    let d_updates = if at.want(2) {
        Some(e.op(&at.n("d2"), gather, &[dy, idx])?)
    } else {
        None
    };
    Ok(vec![d_data, None, d_updates])
}

/// The integer values of a constant input, or an error naming it.
fn const_ints(e: &Emit<'_>, at: &At<'_>, i: usize, what: &str) -> R<Vec<i64>> {
    let v = at.ins[i];
    let t = e.g.constant_value(v).ok_or_else(|| {
        at.err(format!(
            "its {what} (input {i}) must be a constant to train"
        ))
    })?;
    t.to_i64_vec().map_err(|m| at.err(format!("{what}: {m}")))
}

/// Gradient of `slice(data, starts, ends, axes, steps)` with unit steps: dy padded with zeros
/// back to data's shape.
fn slice(e: &mut Emit<'_>, at: &At<'_>) -> R<Value> {
    let (x, dy) = (at.ins[0], at.dy()?);
    let xd = e.dims(x)?;
    let yd = e.dims(dy)?;
    let rank = xd.len();
    let starts = const_ints(e, at, 1, "starts")?;
    let axes: Vec<i64> = match at.ins.get(3) {
        Some(_) => const_ints(e, at, 3, "axes")?,
        None => (0..starts.len() as i64).collect(),
    };
    let steps: Vec<i64> = match at.ins.get(4) {
        Some(_) => const_ints(e, at, 4, "steps")?,
        None => vec![1; starts.len()],
    };
    let mut begin = vec![0i64; rank];
    for ((&s, &a), &st) in starts.iter().zip(&axes).zip(&steps) {
        if st != 1 {
            return Err(at.err(format!(
                "only unit steps have a gradient rule (steps={steps:?})"
            )));
        }
        let ax = if a < 0 { a + rank as i64 } else { a } as usize;
        let dim = xd[ax] as i64;
        let s = if s < 0 { s + dim } else { s };
        begin[ax] = s.clamp(0, dim);
    }
    let mut pads = begin.clone();
    for i in 0..rank {
        pads.push(xd[i] as i64 - begin[i] - yd[i] as i64);
    }
    let p = e.i64s(&at.n("d0.pads"), &pads)?;
    let z = e.scalar(&at.n("d0.zero"), e.dtype(dy), 0.0)?;
    e.op(
        &at.n("d0"),
        Op::Pad {
            mode: PadMode::Constant,
        },
        &[dy, p, z],
    )
}

/// Gradient of constant `pad(data, pads, value)` (non-negative pads): the inner slice of dy.
fn unpad(e: &mut Emit<'_>, at: &At<'_>) -> R<Value> {
    let (x, dy) = (at.ins[0], at.dy()?);
    let xd = e.dims(x)?;
    let pads = const_ints(e, at, 1, "pads")?;
    let rank = xd.len();
    if pads.len() != 2 * rank || pads.iter().any(|&p| p < 0) {
        return Err(at.err(format!(
            "only non-negative pads have a gradient rule (pads={pads:?})"
        )));
    }
    let starts: Vec<i64> = pads[..rank].to_vec();
    let ends: Vec<i64> = (0..rank).map(|i| pads[i] + xd[i] as i64).collect();
    let axes: Vec<i64> = (0..rank as i64).collect();
    let s = e.i64s(&at.n("d0.starts"), &starts)?;
    let en = e.i64s(&at.n("d0.ends"), &ends)?;
    let ax = e.i64s(&at.n("d0.axes"), &axes)?;
    let st = e.i64s(&at.n("d0.steps"), &vec![1; rank])?;
    e.op(&at.n("d0"), Op::Slice, &[dy, s, en, ax, st])
}
