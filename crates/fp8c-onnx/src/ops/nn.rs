//! Neural-network ops: convolution, pooling, normalisation, softmax, activations, dropout.

use super::{NodeCx, known_dims, normalize_axis};
use crate::OnnxError;
use fp8c_ir::{AutoPad, DType, GeluApprox, Op, Tensor, Value};

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

/// `kernel_shape`: the attribute, else the weight's spatial dims.
pub(super) fn kernel_shape(cx: &NodeCx<'_>, w: Value) -> Result<Vec<i64>, OnnxError> {
    if let Some(k) = cx.attr_ints("kernel_shape") {
        return Ok(k);
    }
    let wty = cx.ty(w);
    if wty.rank() < 3 {
        return Err(cx.err(format!("weight has type {wty}; expected rank 3 or more")));
    }
    let dims: Option<Vec<u64>> = wty.shape[2..].iter().map(|d| d.known()).collect();
    let dims = dims.ok_or_else(|| {
        cx.err(format!(
            "attribute `kernel_shape` is absent and the weight's type {wty} does not give it"
        ))
    })?;
    Ok(dims.into_iter().map(|d| d as i64).collect())
}

/// The IR conv of `x` and `w` (plus `bias`) with the node's window attributes.
pub(super) fn conv_of(
    cx: &mut NodeCx<'_>,
    x: Value,
    w: Value,
    bias: Option<Value>,
) -> Result<Value, OnnxError> {
    let win = window(cx, kernel_shape(cx, w)?)?;
    let group = cx.attr_int("group", 1)?;
    let mut inputs = vec![x, w];
    inputs.extend(bias);
    let op = Op::Conv {
        kernel_shape: win.kernel_shape,
        strides: win.strides,
        pads: win.pads,
        dilations: win.dilations,
        group,
        auto_pad: win.auto_pad,
    };
    cx.add(op, &inputs)
}

pub(super) fn conv(cx: &mut NodeCx<'_>) -> Result<Vec<Value>, OnnxError> {
    let (x, w) = (cx.input(0)?, cx.input(1)?);
    let bias = cx.opt_input(2);
    Ok(vec![conv_of(cx, x, w, bias)?])
}

/// ConvTranspose, imported as the transposed convolution the IR already has: `conv_grad_input`
/// (a conv's dgrad) of X with W, whose "forward input" shape is the ConvTranspose's output,
/// then the bias added per channel. ONNX's rules give the output size and the pads: per
/// spatial axis, `out = s·(in − 1) + output_padding + (k − 1)·d + 1 − pad_begin − pad_end`;
/// with `output_shape` (or `auto_pad` SAME_*, whose output is `in·s`) the pads come from the
/// total padding (SAME_UPPER puts the odd one at the end, otherwise at the start). A negative
/// end pad (an output larger than the natural one) leaves zeros at the end, as ONNX's
/// reference does. X's dims must be static (the IR op records the output shape, batch
/// included).
pub(super) fn conv_transpose(cx: &mut NodeCx<'_>) -> Result<Vec<Value>, OnnxError> {
    let (x, w) = (cx.input(0)?, cx.input(1)?);
    let xty = cx.ty(x).clone();
    let wty = cx.ty(w).clone();
    let ks = kernel_shape(cx, w)?;
    let n = ks.len();
    if xty.rank() != n + 2 || wty.rank() != n + 2 {
        return Err(cx.err(format!(
            "X {xty} and W {wty} must have rank {} for a {n}-d kernel",
            n + 2
        )));
    }
    // The output size needs the spatial dims; the IR op records the whole output shape, so
    // the batch dim too. A session imports a model again with its input shapes when the first
    // import stops here (`fp8c_session::Model`).
    let xd = known_dims(&xty.shape).ok_or_else(|| {
        let symbolic: Vec<String> = (0..xty.rank())
            .filter(|&i| xty.shape[i].known().is_none())
            .map(|i| match i {
                0 => "0 (batch)".to_string(),
                1 => "1 (channels)".to_string(),
                i => format!("{i} (spatial)"),
            })
            .collect();
        let which = match symbolic.as_slice() {
            [one] => format!("dim {one} is"),
            many => format!("dims {} are", many.join(", ")),
        };
        cx.err(format!(
            "X (\"{}\") has type {xty}: ConvTranspose needs static dims (it records its output shape); its {which} symbolic",
            cx.input_name(0),
        ))
    })?;
    let cout_g = wty.shape[1]
        .known()
        .ok_or_else(|| cx.err(format!("W has type {wty}: its dim 1 must be static")))?;
    let win = window(cx, ks.clone())?;
    let group = cx.attr_int("group", 1)?;
    let out_pad = spatial_ints(cx, "output_padding", n, 0)?;
    let output_shape = cx.attr_ints("output_shape").map(|v| {
        let skip = v.len().saturating_sub(n);
        v[skip..].to_vec()
    });
    if output_shape.as_ref().is_some_and(|v| v.len() != n) {
        return Err(cx.err(format!("attribute `output_shape` needs {n} spatial sizes")));
    }
    let same = matches!(win.auto_pad, AutoPad::SameUpper | AutoPad::SameLower);
    let natural = |i: usize| -> i64 {
        win.strides[i] * (xd[i + 2] as i64 - 1) + out_pad[i] + (ks[i] - 1) * win.dilations[i] + 1
    };
    let mut pads = match win.auto_pad {
        AutoPad::Valid => vec![0; 2 * n],
        _ => win.pads.clone(),
    };
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let target = match (&output_shape, same) {
            (Some(v), _) => Some(v[i]),
            (None, true) => Some(xd[i + 2] as i64 * win.strides[i]),
            (None, false) => None,
        };
        match target {
            Some(t) => {
                let total = natural(i) - t;
                let (begin, end) = if win.auto_pad == AutoPad::SameUpper {
                    (total.div_euclid(2), total - total.div_euclid(2))
                } else {
                    (total - total.div_euclid(2), total.div_euclid(2))
                };
                if begin < 0 {
                    return Err(cx.err(format!(
                        "output size {t} on spatial axis {i} needs a negative start pad ({begin})"
                    )));
                }
                pads[i] = begin;
                pads[i + n] = end.max(0);
                out.push(t);
            }
            None => out.push(natural(i) - pads[i] - pads[i + n]),
        }
    }
    if let Some((i, o)) = out.iter().enumerate().find(|(_, o)| **o < 1) {
        return Err(cx.err(format!(
            "the output size on spatial axis {i} would be {o}: check pads and output_padding"
        )));
    }
    let cout = cout_g as i64 * group;
    let mut input_shape = vec![xd[0] as i64, cout];
    input_shape.extend(&out);
    let op = Op::ConvGradInput {
        kernel_shape: ks,
        strides: win.strides,
        pads,
        dilations: win.dilations,
        group,
        auto_pad: AutoPad::NotSet,
        input_shape,
    };
    let y = match cx.opt_input(2) {
        None => return Ok(vec![cx.add(op, &[x, w])?]),
        Some(b) => {
            let y = cx.add_helper("transposed", op, &[x, w])?;
            let axes = (1..=n as i64).collect();
            let b = cx.add_helper("bias", Op::Unsqueeze { axes }, &[b])?;
            cx.add(Op::Add, &[y, b])?
        }
    };
    Ok(vec![y])
}

fn pool_window(cx: &NodeCx<'_>) -> Result<Window, OnnxError> {
    let kernel_shape = cx
        .attr_ints("kernel_shape")
        .ok_or_else(|| cx.err("attribute `kernel_shape` is required"))?;
    window(cx, kernel_shape)
}

/// MaxPool; its Indices output, when read, is planned by `pool_indices.rs`.
pub(super) fn max_pool(cx: &mut NodeCx<'_>) -> Result<Vec<Value>, OnnxError> {
    let x = cx.input(0)?;
    let win = pool_window(cx)?;
    let ceil_mode = cx.attr_bool("ceil_mode", false)?;
    let storage_order = cx.attr_bool("storage_order", false)?;
    let op = Op::MaxPool {
        kernel_shape: win.kernel_shape.clone(),
        strides: win.strides.clone(),
        pads: win.pads.clone(),
        dilations: win.dilations.clone(),
        ceil_mode,
        auto_pad: win.auto_pad,
    };
    let y = cx.add(op, &[x])?;
    if !cx.output_used(1) {
        return Ok(vec![y]);
    }
    let geometry = super::pool_indices::PoolGeometry {
        kernel: &win.kernel_shape,
        strides: &win.strides,
        pads: &win.pads,
        dilations: &win.dilations,
        auto_pad: win.auto_pad,
    };
    let indices = super::pool_indices::max_pool_indices(cx, x, y, &geometry, storage_order)?;
    Ok(vec![y, indices])
}

pub(super) fn average_pool(cx: &mut NodeCx<'_>) -> Result<Vec<Value>, OnnxError> {
    let x = cx.input(0)?;
    Ok(vec![cx.add(average_pool_op(cx)?, &[x])?])
}

/// The `average_pool` op of an AveragePool-like node's attributes.
pub(super) fn average_pool_op(cx: &NodeCx<'_>) -> Result<Op, OnnxError> {
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
    Ok(op)
}

/// BatchNormalization. Inference (the default): the IR's `batch_normalization` with the given
/// statistics. `training_mode` = 1 (opset 14+), as ONNX's function and reference define it:
/// the batch's mean and population variance over every axis but 1 normalise X, and outputs 1
/// and 2 are the running statistics `input · momentum + batch · (1 − momentum)`. The saved
/// statistics of opsets 9–13 (outputs 1–4 there) are errors.
pub(super) fn batch_norm(cx: &mut NodeCx<'_>) -> Result<Vec<Value>, OnnxError> {
    if cx.opset < 9 && !cx.attr_bool("spatial", true)? {
        return Err(cx.err("attribute `spatial` = 0 (per-activation statistics) is not supported"));
    }
    let epsilon = cx.attr_float("epsilon", 1e-5)?;
    let inputs = cx.all_inputs()?;
    if cx.opset < 14 || !cx.attr_bool("training_mode", false)? {
        cx.reject_used_outputs(
            1,
            "the running and saved statistics are outputs of training mode only (opset 14's \
             training_mode = 1)",
        )?;
        return Ok(vec![cx.add(Op::BatchNormalization { epsilon }, &inputs)?]);
    }
    let momentum = f64::from(cx.attr_float("momentum", 0.9)?);
    let x = inputs[0];
    let (dtype, rank) = (cx.ty(x).dtype, cx.ty(x).rank());
    if rank < 2 {
        return Err(cx.err(format!("X has type {}; expected rank 2 or more", cx.ty(x))));
    }
    let axes: Vec<i64> = (0..rank as i64).filter(|&a| a != 1).collect();
    let mean_op = |keepdims| Op::ReduceMean {
        axes: Some(axes.clone()),
        keepdims,
    };
    let mean_kept = cx.add_helper("batch_mean_kept", mean_op(true), &[x])?;
    let mean = cx.add_helper("batch_mean", mean_op(false), &[x])?;
    let d = cx.add_helper("centered", Op::Sub, &[x, mean_kept])?;
    let dd = cx.add_helper("squared", Op::Mul, &[d, d])?;
    let var = cx.add_helper("batch_var", mean_op(false), &[dd])?;
    let stats = [inputs[0], inputs[1], inputs[2], mean, var];
    let y = cx.add(Op::BatchNormalization { epsilon }, &stats)?;
    let mut outs = vec![y];
    if !cx.output_used(1) && !cx.output_used(2) {
        return Ok(outs);
    }
    for (slot, (batch, what)) in [(mean, "mean"), (var, "var")].into_iter().enumerate() {
        let running = inputs[3 + slot];
        let rdt = cx.ty(running).dtype;
        let batch = if rdt == dtype {
            batch
        } else {
            let cast = Op::Cast {
                to: rdt,
                saturate: true,
            };
            cx.add_helper(&format!("batch_{what}_cast"), cast, &[batch])?
        };
        let m = cx.scalar(&format!("{what}.momentum"), rdt, momentum)?;
        let m1 = cx.scalar(&format!("{what}.one_minus_momentum"), rdt, 1.0 - momentum)?;
        let kept = cx.add_helper(&format!("running_{what}.kept"), Op::Mul, &[running, m])?;
        let new = cx.add_helper(&format!("running_{what}.new"), Op::Mul, &[batch, m1])?;
        outs.push(cx.add_helper(&format!("running_{what}"), Op::Add, &[kept, new])?);
    }
    Ok(outs)
}

/// LayerNormalization. Y is the IR's `layer_norm`; the optional Mean and InvStdDev outputs
/// (shaped like X with the normalised axes kept as 1, in the `stash_type` precision, f32 by
/// default) are built, when read, from ONNX's own function body for the op:
/// `mean = ReduceMean(X)`, `inv = 1 / √(ReduceMean((X − mean)²) + ε)`.
pub(super) fn layer_norm(cx: &mut NodeCx<'_>) -> Result<Vec<Value>, OnnxError> {
    let axis = cx.attr_int("axis", -1)?;
    let epsilon = cx.attr_float("epsilon", 1e-5)?;
    let x = cx.input(0)?;
    let mut inputs = vec![x, cx.input(1)?];
    inputs.extend(cx.opt_input(2));
    let y = cx.add(Op::LayerNormalization { axis, epsilon }, &inputs)?;
    if !cx.output_used(1) && !cx.output_used(2) {
        return Ok(vec![y]);
    }
    let rank = cx.ty(x).rank();
    let a = normalize_axis(axis, rank).ok_or_else(|| {
        cx.err(format!(
            "attribute `axis` = {axis} is out of range for rank {rank}"
        ))
    })?;
    let stash = stash_type(cx)?;
    let xs = if cx.ty(x).dtype == stash {
        x
    } else {
        cx.add_helper(
            "stash",
            Op::Cast {
                to: stash,
                saturate: true,
            },
            &[x],
        )?
    };
    let axes = Some((a as i64..rank as i64).collect::<Vec<_>>());
    let mean_op = |axes: &Option<Vec<i64>>| Op::ReduceMean {
        axes: axes.clone(),
        keepdims: true,
    };
    let mean = cx.add_helper("mean", mean_op(&axes), &[xs])?;
    let d = cx.add_helper("centered", Op::Sub, &[xs, mean])?;
    let dd = cx.add_helper("squared", Op::Mul, &[d, d])?;
    let var = cx.add_helper("var", mean_op(&axes), &[dd])?;
    let eps = cx.scalar("epsilon", stash, f64::from(epsilon))?;
    let ve = cx.add_helper("var_eps", Op::Add, &[var, eps])?;
    let sd = cx.add_helper("std", Op::Sqrt, &[ve])?;
    let inv = cx.add_helper("inv_std", Op::Reciprocal, &[sd])?;
    Ok(vec![y, mean, inv])
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

/// Dropout. At inference (`training_mode` absent or a constant false), and in training mode
/// with a constant `ratio` of 0, the identity, and a mask of all `true` shaped like the input
/// when output 1 is read. Training mode with a ratio above 0 is an error: it draws a random
/// mask, from a generator ONNX leaves to the runtime (its reference uses numpy's
/// `RandomState(seed)`, which no output of fp8c's could match), and fp8c's importer builds
/// inference graphs (`fp8c train` has no dropout).
pub(super) fn dropout(cx: &mut NodeCx<'_>) -> Result<Vec<Value>, OnnxError> {
    if let Some(mode) = cx.opt_input(2) {
        let values = cx.constant_of(mode).and_then(|t| t.to_i64_vec().ok());
        let Some(values) = values else {
            return Err(cx.err("input 2 (`training_mode`) must be a constant"));
        };
        // The ratio matters in training mode only (default 0.5).
        let ratio = match cx.opt_input(1) {
            None => Some(0.5),
            Some(r) => cx
                .known_value(r)
                .and_then(|t| t.to_f64_vec().ok())
                .and_then(|v| (v.len() == 1).then(|| v[0])),
        };
        if values.iter().any(|&b| b != 0) {
            match ratio {
                Some(0.0) => {}
                Some(ratio) => {
                    return Err(cx.err(format!(
                        "training_mode = true with ratio {ratio} drops a random mask: fp8c \
                         imports Dropout at inference (or with ratio 0) only; ONNX leaves the \
                         random generator to the runtime"
                    )));
                }
                None => {
                    return Err(cx.err(
                        "input 1 (`ratio`) must be a constant scalar when training_mode is true",
                    ));
                }
            }
        }
    }
    let x = cx.input(0)?;
    let y = cx.add(Op::Identity, &[x])?;
    if !cx.output_used(1) {
        return Ok(vec![y]);
    }
    let shape = cx.add_helper(
        "shape",
        Op::Shape {
            start: 0,
            end: None,
        },
        &[x],
    )?;
    let value = Tensor::from_bool(vec![1], &[true]);
    let mask = cx.add_helper("mask", Op::ConstantOfShape { value }, &[shape])?;
    Ok(vec![y, mask])
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
pub(super) fn hard_sigmoid_of(
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

/// onnxruntime's SimplifiedLayerNormalization (registered in the default domain; its
/// optimizer writes it for Llama's RMSNorm): `rms_normalization`, without the inverse
/// standard deviation output.
pub(super) fn simplified_layer_norm(cx: &mut NodeCx<'_>) -> Result<Vec<Value>, OnnxError> {
    cx.reject_used_outputs(1, "fp8c does not give the inverse standard deviation")?;
    rms_norm(cx)
}

/// A normalisation's `stash_type` attribute (the type its statistics are computed in;
/// default f32), which must be a floating-point type.
pub(super) fn stash_type(cx: &NodeCx<'_>) -> Result<DType, OnnxError> {
    let code = cx.attr_int("stash_type", 1)?;
    let t = i32::try_from(code)
        .map_err(|_| format!("unknown element type code {code}"))
        .and_then(crate::tensor::dtype_from_onnx)
        .map_err(|e| cx.err(format!("attribute `stash_type`: {e}")))?;
    if !t.is_float() {
        return Err(cx.err(format!(
            "attribute `stash_type` = {code} ({t}) is not a floating-point type"
        )));
    }
    Ok(t)
}
