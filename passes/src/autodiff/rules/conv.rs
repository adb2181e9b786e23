//! Convolution and pooling rules: conv's dgrad (`conv_grad_input`, a transposed convolution),
//! wgrad (`conv_grad_weight`) and bias gradient (a sum over batch and space); max and average
//! pools (`max_pool_grad`, `average_pool_grad`); the global pools broadcast the gradient back
//! over the spatial axes (global max shares it among the elements equal to the maximum).

use super::{At, Grads, R};
use crate::autodiff::emit::Emit;
use fp8c_ir::Op;

pub(super) fn vjp(e: &mut Emit<'_>, at: &At<'_>) -> R<Option<Grads>> {
    let x = at.ins[0];
    let xd = e.dims(x)?;
    let dy = at.dy()?;
    let spatial_axes: Vec<i64> = (2..xd.len() as i64).collect();
    Ok(Some(match at.op {
        Op::Conv {
            strides,
            pads,
            dilations,
            group,
            auto_pad,
            ..
        } => {
            let w = at.ins[1];
            let wd = e.dims(w)?;
            let kernel_shape: Vec<i64> = wd[2..].iter().map(|&k| k as i64).collect();
            let mut out = vec![None; at.ins.len()];
            if at.want(0) {
                out[0] = Some(e.op(
                    &at.n("dgrad"),
                    Op::ConvGradInput {
                        kernel_shape: kernel_shape.clone(),
                        strides: strides.clone(),
                        pads: pads.clone(),
                        dilations: dilations.clone(),
                        group: *group,
                        auto_pad: *auto_pad,
                        input_shape: xd.iter().map(|&d| d as i64).collect(),
                    },
                    &[dy, w],
                )?);
            }
            if at.want(1) {
                out[1] = Some(e.op(
                    &at.n("wgrad"),
                    Op::ConvGradWeight {
                        kernel_shape,
                        strides: strides.clone(),
                        pads: pads.clone(),
                        dilations: dilations.clone(),
                        group: *group,
                        auto_pad: *auto_pad,
                    },
                    &[x, dy],
                )?);
            }
            if at.want(2) {
                let mut axes = vec![0i64];
                axes.extend(&spatial_axes);
                out[2] = Some(e.reduce_sum(&at.n("dbias"), dy, axes, false)?);
            }
            out
        }
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
