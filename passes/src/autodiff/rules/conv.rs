//! Convolution rules: conv's dgrad (`conv_grad_input`, a transposed convolution), wgrad
//! (`conv_grad_weight`) and bias gradient (a sum over batch and space). `conv_grad_input` has
//! a rule too, for ONNX ConvTranspose (imported as one): it is the adjoint of `x ↦ conv(x, w)`,
//! so its input's gradient is the forward conv of dy, and its weight's the wgrad of (dy, input).

use super::{At, Grads, R, SECOND_ORDER};
use crate::autodiff::emit::Emit;
use fp8c_ir::{AutoPad, ConvOp, Op, Support};

/// Conv and the transposed conv (`conv_grad_input`) have rules; wgrad does not (second order).
pub(super) fn support(o: ConvOp<'_>) -> Support {
    match o {
        ConvOp::Conv { .. } | ConvOp::ConvGradInput { .. } => Support::Yes,
        ConvOp::ConvGradWeight { .. } => Support::No(SECOND_ORDER),
        ConvOp::__Lifetime(never, _) => match never {},
    }
}

/// A conv's window attributes, from which its forward, dgrad and wgrad ops are built.
struct Window<'a> {
    kernel_shape: Vec<i64>,
    strides: &'a [i64],
    pads: &'a [i64],
    dilations: &'a [i64],
    group: i64,
    auto_pad: AutoPad,
}

impl Window<'_> {
    fn conv(&self) -> Op {
        Op::Conv {
            kernel_shape: self.kernel_shape.clone(),
            strides: self.strides.to_vec(),
            pads: self.pads.to_vec(),
            dilations: self.dilations.to_vec(),
            group: self.group,
            auto_pad: self.auto_pad,
        }
    }

    fn dgrad(&self, input_shape: Vec<i64>) -> Op {
        Op::ConvGradInput {
            kernel_shape: self.kernel_shape.clone(),
            strides: self.strides.to_vec(),
            pads: self.pads.to_vec(),
            dilations: self.dilations.to_vec(),
            group: self.group,
            auto_pad: self.auto_pad,
            input_shape,
        }
    }

    fn wgrad(&self) -> Op {
        Op::ConvGradWeight {
            kernel_shape: self.kernel_shape.clone(),
            strides: self.strides.to_vec(),
            pads: self.pads.to_vec(),
            dilations: self.dilations.to_vec(),
            group: self.group,
            auto_pad: self.auto_pad,
        }
    }
}

pub(super) fn vjp(e: &mut Emit<'_>, at: &At<'_>) -> R<Option<Grads>> {
    let x = at.ins[0];
    let xd = e.dims(x)?;
    let dy = at.dy()?;
    let spatial_axes: Vec<i64> = (2..xd.len() as i64).collect();
    let mut out = vec![None; at.ins.len()];
    match at.op {
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
            let win = Window {
                kernel_shape: wd[2..].iter().map(|&k| k as i64).collect(),
                strides,
                pads,
                dilations,
                group: *group,
                auto_pad: *auto_pad,
            };
            if at.want(0) {
                let op = win.dgrad(xd.iter().map(|&d| d as i64).collect());
                out[0] = Some(e.op(&at.n("dgrad"), op, &[dy, w])?);
            }
            if at.want(1) {
                out[1] = Some(e.op(&at.n("wgrad"), win.wgrad(), &[x, dy])?);
            }
            if at.want(2) {
                let mut axes = vec![0i64];
                axes.extend(&spatial_axes);
                out[2] = Some(e.reduce_sum(&at.n("dbias"), dy, axes, false)?);
            }
        }
        // y = dgrad(d, w), the transpose of the conv C_w: dd = C_w(dy) and, as
        // <dy, C_wᵀ d> = <C_w dy, d>, dw = wgrad(dy, d).
        Op::ConvGradInput {
            kernel_shape,
            strides,
            pads,
            dilations,
            group,
            auto_pad,
            ..
        } => {
            let (d, w) = (at.ins[0], at.ins[1]);
            let win = Window {
                kernel_shape: kernel_shape.clone(),
                strides,
                pads,
                dilations,
                group: *group,
                auto_pad: *auto_pad,
            };
            if at.want(0) {
                out[0] = Some(e.op(&at.n("d0"), win.conv(), &[dy, w])?);
            }
            if at.want(1) {
                out[1] = Some(e.op(&at.n("d1"), win.wgrad(), &[dy, d])?);
            }
        }
        _ => return Ok(None),
    }
    Ok(Some(out))
}
