//! Pooling rules: max and average pools (`max_pool_grad`, `average_pool_grad`); the global
//! pools broadcast the gradient back over the spatial axes (global max shares it among the
//! elements equal to the maximum).

use super::{At, Grads, R, SECOND_ORDER};
use crate::autodiff::emit::Emit;
use fp8c_ir::{Op, PoolOp, Support};

/// The pools have rules; their gradient ops do not (second order).
pub(super) fn support(o: PoolOp<'_>) -> Support {
    match o {
        PoolOp::MaxPool { .. }
        | PoolOp::AveragePool { .. }
        | PoolOp::GlobalAveragePool
        | PoolOp::GlobalMaxPool => Support::Yes,
        PoolOp::MaxPoolGrad { .. } | PoolOp::AveragePoolGrad { .. } => Support::No(SECOND_ORDER),
        PoolOp::__Lifetime(never, _) => match never {},
    }
}

pub(super) fn vjp(e: &mut Emit<'_>, at: &At<'_>) -> R<Option<Grads>> {
    let x = at.ins[0];
    let xd = e.dims(x)?;
    let dy = at.dy()?;
    let spatial_axes: Vec<i64> = (2..xd.len() as i64).collect();
    Ok(Some(match at.op {
        Op::MaxPool {
            kernel_shape,
            strides,
            pads,
            dilations,
            ceil_mode,
            auto_pad,
        } => vec![Some(e.op(
            &at.n("d0"),
            Op::MaxPoolGrad {
                kernel_shape: kernel_shape.clone(),
                strides: strides.clone(),
                pads: pads.clone(),
                dilations: dilations.clone(),
                ceil_mode: *ceil_mode,
                auto_pad: *auto_pad,
            },
            &[x, dy],
        )?)],
        Op::AveragePool {
            kernel_shape,
            strides,
            pads,
            dilations,
            ceil_mode,
            count_include_pad,
            auto_pad,
        } => vec![Some(e.op(
            &at.n("d0"),
            Op::AveragePoolGrad {
                kernel_shape: kernel_shape.clone(),
                strides: strides.clone(),
                pads: pads.clone(),
                dilations: dilations.clone(),
                ceil_mode: *ceil_mode,
                count_include_pad: *count_include_pad,
                auto_pad: *auto_pad,
            },
            &[x, dy],
        )?)],
        Op::GlobalAveragePool => {
            let count: u64 = xd[2..].iter().product();
            let s = e.scale(&at.n("d0.mean"), dy, 1.0 / count.max(1) as f64)?;
            vec![Some(e.expand(&at.n("d0"), s, &xd)?)]
        }
        Op::GlobalMaxPool => {
            let hit = e.op(&at.n("hit"), Op::Equal, &[x, at.outs[0]])?;
            let hitf = e.cast(&at.n("hit.f"), hit, e.dtype(x))?;
            let count = e.reduce_sum(&at.n("count"), hitf, spatial_axes, true)?;
            let share = e.div(&at.n("share"), dy, count)?;
            vec![Some(e.mul(&at.n("d0"), hitf, share)?)]
        }
        _ => return Ok(None),
    }))
}
