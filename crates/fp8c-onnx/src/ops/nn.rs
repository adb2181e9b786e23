//! Neural-network ops: convolution, pooling, normalisation, softmax, activations, dropout.

use super::{NodeCx, known_dims, normalize_axis};
use crate::OnnxError;
use fp8c_ir::{AutoPad, GeluApprox, Op, Tensor, Value};

fn auto_pad(cx: &NodeCx<'_>) -> Result<AutoPad, OnnxError> {
    Ok(match cx.attr_string("auto_pad", "NOTSET")?.as_str() {
        "NOTSET" | "" => AutoPad::NotSet,
        "SAME_UPPER" => AutoPad::SameUpper,
        "SAME_LOWER" => AutoPad::SameLower,
        "VALID" => AutoPad::Valid,
        other => return Err(cx.err(format!("attribute `auto_pad`: unknown value \"{other}\""))),
    })
}

/// An ints attribute with one entry per spatial axis (or `2 * spatial` for pads), defaulting
/// to `default` repeated.
fn spatial_ints(
    cx: &NodeCx<'_>,
    name: &str,
    len: usize,
    default: i64,
) -> Result<Vec<i64>, OnnxError> {
    match cx.attr_ints(name) {
        None => Ok(vec![default; len]),
        Some(v) if v.len() == len => Ok(v),
        Some(v) => Err(cx.err(format!(
            "attribute `{name}` has {} entries, expected {len}",
            v.len()
        ))),
    }
}

/// The strides, pads and dilations shared by convolution and pooling.
struct Window {
    kernel_shape: Vec<i64>,
    strides: Vec<i64>,
    pads: Vec<i64>,
    dilations: Vec<i64>,
    auto_pad: AutoPad,
}

fn window(cx: &NodeCx<'_>, kernel_shape: Vec<i64>) -> Result<Window, OnnxError> {
    let n = kernel_shape.len();
    Ok(Window {
        strides: spatial_ints(cx, "strides", n, 1)?,
        pads: spatial_ints(cx, "pads", 2 * n, 0)?,
        dilations: spatial_ints(cx, "dilations", n, 1)?,
        auto_pad: auto_pad(cx)?,
        kernel_shape,
    })
}

pub(super) fn conv(cx: &mut NodeCx<'_>) -> Result<Vec<Value>, OnnxError> {
    let (x, w) = (cx.input(0)?, cx.input(1)?);
    let kernel_shape = match cx.attr_ints("kernel_shape") {
        Some(k) => k,
        None => {
            let wty = cx.ty(w);
            if wty.rank() < 3 {
                return Err(cx.err(format!("weight has type {wty}; expected rank 3 or more")));
            }
            let dims: Option<Vec<u64>> = wty.shape[2..].iter().map(|d| d.known()).collect();
            let dims = dims.ok_or_else(|| {
                cx.err(format!("attribute `kernel_shape` is absent and the weight's type {wty} does not give it"))
            })?;
            dims.into_iter().map(|d| d as i64).collect()
        }
    };
    let win = window(cx, kernel_shape)?;
    let group = cx.attr_int("group", 1)?;
    let mut inputs = vec![x, w];
    inputs.extend(cx.opt_input(2));
    let op = Op::Conv {
        kernel_shape: win.kernel_shape,
        strides: win.strides,
        pads: win.pads,
        dilations: win.dilations,
        group,
        auto_pad: win.auto_pad,
    };
    Ok(vec![cx.add(op, &inputs)?])
}

fn pool_window(cx: &NodeCx<'_>) -> Result<Window, OnnxError> {
    let kernel_shape = cx
        .attr_ints("kernel_shape")
        .ok_or_else(|| cx.err("attribute `kernel_shape` is required"))?;
    window(cx, kernel_shape)
}

pub(super) fn max_pool(cx: &mut NodeCx<'_>) -> Result<Vec<Value>, OnnxError> {
    cx.reject_used_outputs(1, "MaxPool indices are not supported")?;
    let x = cx.input(0)?;
    let win = pool_window(cx)?;
    let ceil_mode = cx.attr_bool("ceil_mode", false)?;
    let op = Op::MaxPool {
        kernel_shape: win.kernel_shape,
        strides: win.strides,
        pads: win.pads,
        dilations: win.dilations,
        ceil_mode,
        auto_pad: win.auto_pad,
    };
    Ok(vec![cx.add(op, &[x])?])
}

pub(super) fn average_pool(cx: &mut NodeCx<'_>) -> Result<Vec<Value>, OnnxError> {
    let x = cx.input(0)?;
    let win = pool_window(cx)?;
    let ceil_mode = cx.attr_bool("ceil_mode", false)?;
    let count_include_pad = cx.attr_bool("count_include_pad", false)?;
    let op = Op::AveragePool {
        kernel_shape: win.kernel_shape,
        strides: win.strides,
        pads: win.pads,
        dilations: win.dilations,
        ceil_mode,
        count_include_pad,
        auto_pad: win.auto_pad,
    };
    Ok(vec![cx.add(op, &[x])?])
}

/// Inference-mode batch norm; training mode and its extra outputs are errors.
pub(super) fn batch_norm(cx: &mut NodeCx<'_>) -> Result<Vec<Value>, OnnxError> {
    if cx.opset < 9 && !cx.attr_bool("spatial", true)? {
        return Err(cx.err("attribute `spatial` = 0 (per-activation statistics) is not supported"));
    }
    if cx.attr_bool("training_mode", false)? {
        return Err(cx.err("training_mode = 1 is not supported (inference only)"));
    }
    cx.reject_used_outputs(
        1,
        "training outputs (running mean/var, saved statistics) are not supported",
    )?;
    let epsilon = cx.attr_float("epsilon", 1e-5)?;
    let inputs = cx.all_inputs()?;
    Ok(vec![cx.add(Op::BatchNormalization { epsilon }, &inputs)?])
}

pub(super) fn layer_norm(cx: &mut NodeCx<'_>) -> Result<Vec<Value>, OnnxError> {
    cx.reject_used_outputs(1, "the Mean and InvStdDev outputs are not supported")?;
    let axis = cx.attr_int("axis", -1)?;
    let epsilon = cx.attr_float("epsilon", 1e-5)?;
    let mut inputs = vec![cx.input(0)?, cx.input(1)?];
    inputs.extend(cx.opt_input(2));
    Ok(vec![
        cx.add(Op::LayerNormalization { axis, epsilon }, &inputs)?,
    ])
}

/// Softmax and LogSoftmax. From opset 13 the op works along one axis (default -1). Before,
/// it flattened the input to 2-D at `axis` (default 1) and worked along the second axis: that
/// is the same op when `axis` is the last axis, and flatten + op + reshape otherwise.
pub(super) fn softmax(cx: &mut NodeCx<'_>, make: fn(i64) -> Op) -> Result<Vec<Value>, OnnxError> {
    let x = cx.input(0)?;
    if cx.opset >= 13 {
        let axis = cx.attr_int("axis", -1)?;
        return Ok(vec![cx.add(make(axis), &[x])?]);
    }
    let rank = cx.ty(x).rank();
    let axis = cx.attr_int("axis", 1)?;
    let a = normalize_axis(axis, rank).ok_or_else(|| {
        cx.err(format!(
            "attribute `axis` = {axis} is out of range for rank {rank}"
        ))
    })?;
    if a + 1 == rank {
        return Ok(vec![cx.add(make(a as i64), &[x])?]);
    }
    let flat = cx.add_helper("flatten", Op::Flatten { axis: a as i64 }, &[x])?;
    let y = cx.add_helper("2d", make(1), &[flat])?;
    // A static shape is a constant, so the result keeps its dims without constant folding.
    let static_dims = known_dims(&cx.ty(x).shape).and_then(|d| {
        d.into_iter()
            .map(i64::try_from)
            .collect::<Result<Vec<i64>, _>>()
            .ok()
    });
    let shape = match static_dims {
        Some(dims) => cx.constant("shape", Tensor::from_i64(vec![dims.len() as u64], &dims))?,
        None => cx.add_helper(
            "shape",
            Op::Shape {
                start: 0,
                end: None,
            },
            &[x],
        )?,
    };
    Ok(vec![cx.add(Op::Reshape { allowzero: false }, &[y, shape])?])
}

/// Dropout is the identity at inference; its mask output and training mode are errors.
pub(super) fn dropout(cx: &mut NodeCx<'_>) -> Result<Vec<Value>, OnnxError> {
    cx.reject_used_outputs(1, "the dropout mask is not supported")?;
    if let Some(mode) = cx.opt_input(2) {
        let off = cx
            .constant_of(mode)
            .and_then(|t| t.to_i64_vec().ok())
            .is_some_and(|v| v.iter().all(|&b| b == 0));
        if !off {
            return Err(cx.err("input 2 (`training_mode`) must be a constant false"));
        }
    }
    let x = cx.input(0)?;
    Ok(vec![cx.add(Op::Identity, &[x])?])
}

pub(super) fn gelu(cx: &mut NodeCx<'_>) -> Result<Vec<Value>, OnnxError> {
    let approximate = match cx.attr_string("approximate", "none")?.as_str() {
        "none" => GeluApprox::None,
        "tanh" => GeluApprox::Tanh,
        other => {
            return Err(cx.err(format!(
                "attribute `approximate`: unknown value \"{other}\""
            )));
        }
    };
    let x = cx.input(0)?;
    Ok(vec![cx.add(Op::Gelu { approximate }, &[x])?])
}

pub(super) fn leaky_relu(cx: &mut NodeCx<'_>) -> Result<Vec<Value>, OnnxError> {
    let alpha = cx.attr_float("alpha", 0.01)?;
    let x = cx.input(0)?;
    Ok(vec![cx.add(Op::LeakyRelu { alpha }, &[x])?])
}

/// `clip(alpha * x + beta, 0, 1)`, with the final node named after the ONNX node unless
/// `last` is false.
fn hard_sigmoid_of(
    cx: &mut NodeCx<'_>,
    x: Value,
    alpha: f64,
    beta: f64,
    last: bool,
) -> Result<Value, OnnxError> {
    let dtype = cx.ty(x).dtype;
    let a = cx.scalar("alpha", dtype, alpha)?;
    let b = cx.scalar("beta", dtype, beta)?;
    let zero = cx.scalar("zero", dtype, 0.0)?;
    let one = cx.scalar("one", dtype, 1.0)?;
    let ax = cx.add_helper("scale", Op::Mul, &[x, a])?;
    let axb = cx.add_helper("shift", Op::Add, &[ax, b])?;
    if last {
        cx.add(Op::Clip, &[axb, zero, one])
    } else {
        cx.add_helper("clip", Op::Clip, &[axb, zero, one])
    }
}

pub(super) fn hard_sigmoid(cx: &mut NodeCx<'_>) -> Result<Vec<Value>, OnnxError> {
    let alpha = cx.attr_float("alpha", 0.2)?;
    let beta = cx.attr_float("beta", 0.5)?;
    let x = cx.input(0)?;
    Ok(vec![hard_sigmoid_of(
        cx,
        x,
        alpha.into(),
        beta.into(),
        true,
    )?])
}

/// `x * hard_sigmoid(x; 1/6, 1/2)`.
pub(super) fn hard_swish(cx: &mut NodeCx<'_>) -> Result<Vec<Value>, OnnxError> {
    let x = cx.input(0)?;
    let gate = hard_sigmoid_of(cx, x, 1.0 / 6.0, 0.5, false)?;
    Ok(vec![cx.add(Op::Mul, &[x, gate])?])
}

/// RMSNormalization (opset 23): `axis` (default -1), `epsilon` (default 1e-5); `stash_type`
/// must be float (1, the default): fp8c accumulates in f64 and rounds once, at least as precise.
pub(super) fn rms_norm(cx: &mut NodeCx<'_>) -> Result<Vec<Value>, OnnxError> {
    let axis = cx.attr_int("axis", -1)?;
    let epsilon = cx.attr_float("epsilon", 1e-5)?;
    let (x, scale) = (cx.input(0)?, cx.input(1)?);
    Ok(vec![cx.add(
        Op::RmsNormalization { axis, epsilon },
        &[x, scale],
    )?])
}
