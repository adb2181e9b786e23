//! ONNX Resize (opset 10+) and Upsample (opset 7+), imported as data movement the IR already
//! has: per resized axis, mode `nearest` is a `gather` of constant input positions and mode
//! `linear` two gathers (each output's lower and upper neighbour) and a weighted add, the
//! positions and weights worked out at import by `resize_coords.rs`. N-linear interpolation
//! is separable, so axes are resized one after another (bilinear = two axes).
//!
//! Needs `scales` or `sizes` as constants and static dims on the resized axes; refuses, naming
//! the node and the attribute or input, mode `cubic`, `antialias`, `exclude_outside`,
//! `tf_crop_and_resize` and `keep_aspect_ratio_policy` other than `stretch`.

use super::resize_coords::{self, AxisPlan, Coord, Rounding};
use super::{NodeCx, normalize_axis};
use crate::OnnxError;
use fp8c_ir::{Op, Tensor, Value};

/// ONNX `mode`, with the rounding of `nearest`.
#[derive(Clone, Copy, Debug)]
enum Mode {
    Nearest(Rounding),
    Linear,
}

/// The output length and scale of each axis (`None`: left as it is).
type Targets = Vec<Option<(f64, u64)>>;

/// Resize: opset 10 (`X, scales`; asymmetric coordinates, onnxruntime's legacy nearest
/// rounding) and opset 11+ (`X, roi, scales, sizes` and the coordinate attributes).
pub(super) fn resize(cx: &mut NodeCx<'_>) -> Result<Vec<Value>, OnnxError> {
    let x = cx.input(0)?;
    if cx.opset < 11 {
        let mode = read_mode(cx, Rounding::Legacy)?;
        let scales = const_floats(cx, 1, "scales")?
            .ok_or_else(|| cx.err("input 1 (`scales`) is required"))?;
        let targets = from_scales(cx, x, &all_axes(cx, x), &scales)?;
        return build(cx, x, mode, Coord::Asymmetric, &targets);
    }
    for (attr, default) in [("antialias", 0), ("exclude_outside", 0)] {
        let v = cx.attr_int(attr, default)?;
        if v != 0 {
            return Err(cx.err(format!(
                "attribute `{attr}` = {v} is not supported (only 0)"
            )));
        }
    }
    let nearest_mode = cx.attr_string("nearest_mode", "round_prefer_floor")?;
    let rounding = Rounding::parse(&nearest_mode).ok_or_else(|| {
        cx.err(format!(
            "attribute `nearest_mode`: unknown value \"{nearest_mode}\""
        ))
    })?;
    let mode = read_mode(cx, rounding)?;
    let ctm = cx.attr_string("coordinate_transformation_mode", "half_pixel")?;
    let coord = Coord::parse(&ctm).ok_or_else(|| {
        cx.err(format!(
            "attribute `coordinate_transformation_mode` = \"{ctm}\" is not supported (half_pixel, \
             half_pixel_symmetric, pytorch_half_pixel, align_corners, asymmetric and \
             tf_half_pixel_for_nn are)"
        ))
    })?;
    let axes = match cx.attr_ints("axes") {
        None => all_axes(cx, x),
        Some(given) => {
            let rank = cx.ty(x).rank();
            let mut axes = Vec::with_capacity(given.len());
            for a in given {
                let n = normalize_axis(a, rank)
                    .filter(|n| !axes.contains(n))
                    .ok_or_else(|| {
                        cx.err(format!(
                            "attribute `axes`: {a} is out of range for rank {rank} or repeated"
                        ))
                    })?;
                axes.push(n);
            }
            axes
        }
    };
    // An absent or empty input counts as not given (opset 11 needs `scales` present, even
    // when empty, to give `sizes`).
    let scales = const_floats(cx, 2, "scales")?.filter(|s| !s.is_empty());
    let sizes = cx
        .const_ints_input(3, "sizes")?
        .filter(|s: &Vec<i64>| !s.is_empty());
    let targets = match (scales, sizes) {
        (Some(scales), None) => from_scales(cx, x, &axes, &scales)?,
        (None, Some(sizes)) => {
            let policy = cx.attr_string("keep_aspect_ratio_policy", "stretch")?;
            if policy != "stretch" {
                return Err(cx.err(format!(
                    "attribute `keep_aspect_ratio_policy` = \"{policy}\" is not supported (only \
                     \"stretch\")"
                )));
            }
            from_sizes(cx, x, &axes, &sizes)?
        }
        (Some(_), Some(_)) => {
            return Err(cx.err("both `scales` and `sizes` are given; ONNX allows one"));
        }
        (None, None) => return Err(cx.err("neither `scales` nor `sizes` is given")),
    };
    build(cx, x, mode, coord, &targets)
}

/// Upsample (opset 7–9; deprecated by Resize from 10): `scales` an attribute (7, 8) or a
/// constant input (9), asymmetric coordinates, onnxruntime's legacy nearest rounding.
pub(super) fn upsample(cx: &mut NodeCx<'_>) -> Result<Vec<Value>, OnnxError> {
    let x = cx.input(0)?;
    let mode = read_mode(cx, Rounding::Legacy)?;
    let scales = if cx.opset < 9 {
        let s = cx
            .attr_floats("scales")
            .ok_or_else(|| cx.err("attribute `scales` is required"))?;
        s.into_iter().map(f64::from).collect()
    } else {
        const_floats(cx, 1, "scales")?.ok_or_else(|| cx.err("input 1 (`scales`) is required"))?
    };
    let targets = from_scales(cx, x, &all_axes(cx, x), &scales)?;
    build(cx, x, mode, Coord::Asymmetric, &targets)
}

/// The `mode` attribute; `rounding` is what `nearest` rounds with.
fn read_mode(cx: &NodeCx<'_>, rounding: Rounding) -> Result<Mode, OnnxError> {
    match cx.attr_string("mode", "nearest")?.as_str() {
        "nearest" => Ok(Mode::Nearest(rounding)),
        "linear" => Ok(Mode::Linear),
        other => Err(cx.err(format!(
            "attribute `mode` = \"{other}\" is not supported (nearest and linear are)"
        ))),
    }
}

fn all_axes(cx: &NodeCx<'_>, x: Value) -> Vec<usize> {
    (0..cx.ty(x).rank()).collect()
}

/// Input `i` as constant floats (exact f64 of the stored values): `None` if absent.
fn const_floats(cx: &NodeCx<'_>, i: usize, what: &str) -> Result<Option<Vec<f64>>, OnnxError> {
    let Some(v) = cx.opt_input(i) else {
        return Ok(None);
    };
    let t = cx.known_value(v).ok_or_else(|| {
        cx.err(format!(
            "input {i} (`{what}`, value \"{}\") must be a constant: the resize is planned at import",
            cx.input_name(i)
        ))
    })?;
    t.to_f64_vec()
        .map(Some)
        .map_err(|e| cx.err(format!("input {i} (`{what}`): {e}")))
}

/// The static size of axis `a` of `x`, which is resized.
fn static_dim(cx: &NodeCx<'_>, x: Value, a: usize) -> Result<u64, OnnxError> {
    let ty = cx.ty(x);
    match ty.shape[a].known() {
        Some(0) => Err(cx.err(format!("X has type {ty}: resized axis {a} is empty"))),
        Some(n) => Ok(n),
        None => Err(cx.err(format!(
            "X has type {ty}: {} needs a static size on resized axis {a} (fix the input shape, \
             e.g. --input-shape)",
            cx.op_type
        ))),
    }
}

/// One entry per axis in `axes`, or an error naming `what`.
fn check_len(cx: &NodeCx<'_>, what: &str, len: usize, axes: &[usize]) -> Result<(), OnnxError> {
    if len == axes.len() {
        return Ok(());
    }
    Err(cx.err(format!(
        "`{what}` has {len} entries, expected {} (one per resized axis)",
        axes.len()
    )))
}

/// Targets from `scales`: output length `floor(len · scale)`, the product taken in f32 as
/// onnxruntime and ONNX's shape inference take it. A scale of 1 leaves its axis alone (its dim
/// may be symbolic).
fn from_scales(
    cx: &NodeCx<'_>,
    x: Value,
    axes: &[usize],
    scales: &[f64],
) -> Result<Targets, OnnxError> {
    check_len(cx, "scales", scales.len(), axes)?;
    let mut targets = vec![None; cx.ty(x).rank()];
    for (&a, &s) in axes.iter().zip(scales) {
        if !(s > 0.0 && s.is_finite()) {
            return Err(cx.err(format!(
                "`scales`: {s} on axis {a} is not a positive number"
            )));
        }
        if s == 1.0 {
            continue;
        }
        let len_in = static_dim(cx, x, a)?;
        let len_out = ((len_in as f32) * (s as f32)).floor() as u64;
        if len_out == 0 {
            return Err(cx.err(format!(
                "`scales`: {s} on axis {a} of size {len_in} leaves nothing"
            )));
        }
        targets[a] = Some((s, len_out));
    }
    Ok(targets)
}

/// Targets from `sizes`: the scale is `size / len` (policy `stretch`).
fn from_sizes(
    cx: &NodeCx<'_>,
    x: Value,
    axes: &[usize],
    sizes: &[i64],
) -> Result<Targets, OnnxError> {
    check_len(cx, "sizes", sizes.len(), axes)?;
    let mut targets = vec![None; cx.ty(x).rank()];
    for (&a, &n) in axes.iter().zip(sizes) {
        if n < 1 {
            return Err(cx.err(format!("`sizes`: {n} on axis {a} is not a positive size")));
        }
        if cx.ty(x).shape[a].known() == Some(n as u64) {
            continue;
        }
        let len_in = static_dim(cx, x, a)?;
        targets[a] = Some((n as f64 / len_in as f64, n as u64));
    }
    Ok(targets)
}

/// Resizes `x` axis by axis; the last IR node is named after the ONNX node.
fn build(
    cx: &mut NodeCx<'_>,
    x: Value,
    mode: Mode,
    coord: Coord,
    targets: &Targets,
) -> Result<Vec<Value>, OnnxError> {
    let dtype = cx.ty(x).dtype;
    if matches!(mode, Mode::Linear) && !dtype.is_float() {
        return Err(cx.err(format!(
            "attribute `mode` = \"linear\" needs a floating-point X, got {dtype}"
        )));
    }
    check_sizes(cx, x, targets)?;
    let mut steps = Vec::new();
    for (a, t) in targets.iter().enumerate() {
        let Some((scale, len_out)) = *t else { continue };
        let len_in = static_dim(cx, x, a)?;
        let plan = match mode {
            Mode::Nearest(r) => resize_coords::nearest(coord, r, scale, len_in, len_out),
            Mode::Linear => resize_coords::linear(coord, scale, len_in, len_out),
        };
        if !plan.is_identity(len_in) {
            steps.push((a, plan));
        }
    }
    if steps.is_empty() {
        return Ok(vec![cx.add(Op::Identity, &[x])?]);
    }
    let last = steps.len() - 1;
    let mut y = x;
    for (k, (axis, plan)) in steps.iter().enumerate() {
        y = resize_axis(cx, y, *axis, plan, k == last)?;
    }
    Ok(vec![y])
}

/// Refuses a resize whose output, or the index and weight tables built for it (about 32
/// bytes per output position of each resized axis), would not fit: the error names the output
/// shape, before anything is allocated (`scales` of 1e9 would otherwise build tables of
/// billions of entries, then abort).
fn check_sizes(cx: &NodeCx<'_>, x: Value, targets: &Targets) -> Result<(), OnnxError> {
    let ty = cx.ty(x);
    let dims: Vec<u64> = targets
        .iter()
        .zip(&ty.shape)
        .map(|(t, d)| t.map_or(d.known().unwrap_or(1), |(_, n)| n))
        .collect();
    let Some(n) = fp8c_ir::checked_numel(&dims) else {
        return Err(cx.err(format!(
            "the output shape {dims:?} has more than {} elements",
            fp8c_ir::MAX_ELEMENTS
        )));
    };
    let tables: u64 = targets
        .iter()
        .flatten()
        .map(|&(_, len)| len.saturating_mul(32))
        .sum();
    for (what, bytes) in [
        ("the output", n.saturating_mul(ty.dtype.size() as u64)),
        ("its index tables", tables),
    ] {
        fp8c_ir::memory::check_tensor_bytes(bytes)
            .map_err(|m| cx.err(format!("{what} (output shape {dims:?}): {m}")))?;
    }
    Ok(())
}

/// One axis of the resize: a gather of `plan.lo`, or with two neighbours
/// `gather(lo) · w_lo + gather(hi) · w_hi`, the weights shaped to broadcast along `axis`.
fn resize_axis(
    cx: &mut NodeCx<'_>,
    y: Value,
    axis: usize,
    plan: &AxisPlan,
    last: bool,
) -> Result<Value, OnnxError> {
    let n = plan.lo.len() as u64;
    let gather = Op::Gather { axis: axis as i64 };
    let lo = cx.constant(
        &format!("axis{axis}.lo"),
        Tensor::from_i64(vec![n], &plan.lo),
    )?;
    if plan.is_gather() {
        return cx.add_step(last, &format!("axis{axis}"), gather, &[y, lo]);
    }
    let hi = cx.constant(
        &format!("axis{axis}.hi"),
        Tensor::from_i64(vec![n], &plan.hi),
    )?;
    let ty = cx.ty(y).clone();
    let mut wshape = vec![n];
    wshape.resize(ty.rank() - axis, 1);
    let weights = |w: &[f64]| {
        Tensor::from_f64_as(ty.dtype, wshape.clone(), w)
            .map_err(|e| cx.err(format!("interpolation weights: {e}")))
    };
    let (wl, wh) = (weights(&plan.w_lo)?, weights(&plan.w_hi)?);
    let wl = cx.constant(&format!("axis{axis}.w_lo"), wl)?;
    let wh = cx.constant(&format!("axis{axis}.w_hi"), wh)?;
    let g_lo = cx.add_helper(&format!("axis{axis}.gather_lo"), gather.clone(), &[y, lo])?;
    let g_hi = cx.add_helper(&format!("axis{axis}.gather_hi"), gather, &[y, hi])?;
    let a = cx.add_helper(&format!("axis{axis}.weigh_lo"), Op::Mul, &[g_lo, wl])?;
    let b = cx.add_helper(&format!("axis{axis}.weigh_hi"), Op::Mul, &[g_hi, wh])?;
    cx.add_step(last, &format!("axis{axis}"), Op::Add, &[a, b])
}
