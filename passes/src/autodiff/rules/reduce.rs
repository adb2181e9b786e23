//! Reduction rules: sum and mean broadcast the gradient back over the reduced axes (mean
//! divides by the count); max and min share it evenly among the elements equal to the result
//! (PyTorch's `amax`/`amin` convention for ties); `cum_sum` runs the sum back the other way;
//! `top_k` scatter-adds dy to where its values came from.

use super::{At, Grads, NOT_FLOAT, R};
use crate::autodiff::emit::Emit;
use fp8c_ir::{DType, Op, ReduceOp, Support};

/// Sum, mean, max and min have rules.
pub(super) fn support(o: ReduceOp<'_>) -> Support {
    match o {
        ReduceOp::ReduceMean { .. }
        | ReduceOp::ReduceSum { .. }
        | ReduceOp::ReduceMax { .. }
        | ReduceOp::ReduceMin { .. }
        | ReduceOp::CumSum { .. }
        | ReduceOp::TopK { .. } => Support::Yes,
        ReduceOp::ReduceProd { .. } => Support::No("reduce_prod has no gradient rule yet"),
        ReduceOp::AllFinite | ReduceOp::ArgMax { .. } | ReduceOp::ArgMin { .. } => {
            Support::No(NOT_FLOAT)
        }
        ReduceOp::__Lifetime(never, _) => match never {},
    }
}

pub(super) fn vjp(e: &mut Emit<'_>, at: &At<'_>) -> R<Option<Grads>> {
    // The values are `gather_elements(x, indices, axis)`: dy scatter-adds back where each
    // came from (the indices output is an integer and has no adjoint).
    if let Op::TopK { axis, .. } = at.op {
        let x = at.ins[0];
        let z = e.zeros(&at.n("d0.zero"), e.dtype(x), &e.dims(x)?)?;
        let scatter = Op::ScatterElements {
            axis: *axis,
            reduction: fp8c_ir::ScatterReduction::Add,
        };
        let d = e.op(&at.n("d0"), scatter, &[z, at.outs[1], at.dy()?])?;
        return Ok(Some(vec![Some(d), None]));
    }
    // A running sum's adjoint is the running sum of dy in the other direction.
    if let Op::CumSum { exclusive, reverse } = at.op {
        let op = Op::CumSum {
            exclusive: *exclusive,
            reverse: !*reverse,
        };
        let d = e.op(&at.n("d0"), op, &[at.dy()?, at.ins[1]])?;
        return Ok(Some(vec![Some(d), None]));
    }
    let (axes, keepdims) = match at.op {
        Op::ReduceMean { axes, keepdims }
        | Op::ReduceSum { axes, keepdims }
        | Op::ReduceMax { axes, keepdims }
        | Op::ReduceMin { axes, keepdims } => (axes.clone(), *keepdims),
        _ => return Ok(None),
    };
    let x = at.ins[0];
    let xd = e.dims(x)?;
    let rank = xd.len();
    let reduced: Vec<usize> = match axes.as_deref() {
        None | Some([]) => (0..rank).collect(),
        Some(list) => list
            .iter()
            .map(|&a| if a < 0 { a + rank as i64 } else { a } as usize)
            .collect(),
    };
    // The result's shape with the reduced axes kept as 1.
    let kept: Vec<u64> = (0..rank)
        .map(|i| if reduced.contains(&i) { 1 } else { xd[i] })
        .collect();
    let _ = keepdims;
    let dy = e.reshape(&at.n("d0.keep"), at.dy()?, &kept)?;
    let dt = e.dtype(x);
    let d = match at.op {
        Op::ReduceSum { .. } => e.expand(&at.n("d0"), dy, &xd)?,
        Op::ReduceMean { .. } => {
            let count: u64 = reduced.iter().map(|&i| xd[i]).product();
            let s = e.scale(&at.n("d0.mean"), dy, 1.0 / count.max(1) as f64)?;
            e.expand(&at.n("d0"), s, &xd)?
        }
        _ => {
            let y = e.reshape(&at.n("y.keep"), at.outs[0], &kept)?;
            let hit = e.op(&at.n("hit"), Op::Equal, &[x, y])?;
            let hitf = e.op(
                &at.n("hit.f"),
                Op::Cast {
                    to: dt,
                    saturate: false,
                },
                &[hit],
            )?;
            let axes: Vec<i64> = reduced.iter().map(|&i| i as i64).collect();
            let count = e.reduce_sum(&at.n("count"), hitf, axes, true)?;
            let share = e.div(&at.n("share"), dy, count)?;
            e.mul(&at.n("d0"), hitf, share)?
        }
    };
    debug_assert!(dt != DType::Bool);
    Ok(Some(vec![Some(d)]))
}
