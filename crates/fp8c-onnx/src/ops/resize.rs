//! ONNX Resize (opset 10+) and Upsample (opset 7+), imported as data movement the IR already
//! has: per resized axis, mode `nearest` is a `gather` of constant input positions and mode
//! `linear` two gathers (each output's lower and upper neighbour) and a weighted add, the
//! positions and weights worked out at import by `resize_coords.rs`. N-linear interpolation
//! is separable, so axes are resized one after another (bilinear = two axes).
//!
//! From opset 11, modes `linear` and `cubic`, `antialias`, `exclude_outside` and
//! `tf_crop_and_resize` (its `roi` and `extrapolation_value`) take the general plan of
//! `resize_kernel.rs`: a fixed number of taps per output position, a gather of them, a
//! weighting and a sum (two taps keep the lower/upper form above), then the extrapolation
//! value where a cropped coordinate falls outside the input. `keep_aspect_ratio_policy`
//! `not_larger` / `not_smaller` scales every resized axis by the smallest / largest of the
//! `sizes` ratios, as ONNX's reference does.
//!
//! Needs `scales`, `sizes` (and a crop's `roi`) as constants and static dims on the resized
//! axes; an error names the node and the attribute or input otherwise.

use super::resize_coords::{self, AxisPlan, Coord, Rounding};
use super::resize_kernel::{self, Kernel, Sampling, Source, TapPlan};
use super::{NodeCx, normalize_axis};
use crate::OnnxError;
use fp8c_ir::{Op, Tensor, Value};

/// ONNX `mode`, with the rounding of `nearest`.
#[derive(Clone, Copy, Debug)]
enum Mode {
    Nearest(Rounding),
    Linear,
    Cubic,
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
    let antialias = cx.attr_bool("antialias", false)?;
    let exclude_outside = cx.attr_bool("exclude_outside", false)?;
    let nearest_mode = cx.attr_string("nearest_mode", "round_prefer_floor")?;
    let rounding = Rounding::parse(&nearest_mode).ok_or_else(|| {
        cx.err(format!(
            "attribute `nearest_mode`: unknown value \"{nearest_mode}\""
        ))
    })?;
    let mode = read_mode(cx, rounding)?;
    if antialias && matches!(mode, Mode::Nearest(_)) {
        return Err(cx.err("attribute `antialias` = 1 needs mode linear or cubic"));
    }
    let ctm = cx.attr_string("coordinate_transformation_mode", "half_pixel")?;
    let crop = ctm == "tf_crop_and_resize";
    let coord = match Coord::parse(&ctm) {
        Some(c) => c,
        None if crop => Coord::Asymmetric,
        None => {
            return Err(cx.err(format!(
                "attribute `coordinate_transformation_mode` = \"{ctm}\" is not supported \
                 (half_pixel, half_pixel_symmetric, pytorch_half_pixel, align_corners, \
                 asymmetric, tf_half_pixel_for_nn and tf_crop_and_resize are)"
            )));
        }
    };
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
    let mut targets = match (scales, sizes) {
        (Some(scales), None) => from_scales(cx, x, &axes, &scales)?,
        (None, Some(sizes)) => {
            let policy = cx.attr_string("keep_aspect_ratio_policy", "stretch")?;
            from_sizes(cx, x, &axes, &sizes, &policy)?
        }
        (Some(_), Some(_)) => {
            return Err(cx.err("both `scales` and `sizes` are given; ONNX allows one"));
        }
        (None, None) => return Err(cx.err("neither `scales` nor `sizes` is given")),
    };
    let general = crop || antialias || exclude_outside || !matches!(mode, Mode::Nearest(_));
    if !general {
        return build(cx, x, mode, coord, &targets);
    }
    let kernel = match mode {
        Mode::Nearest(r) => Kernel::Nearest(r),
        Mode::Linear => Kernel::Linear,
        Mode::Cubic => Kernel::Cubic(f64::from(cx.attr_float("cubic_coeff_a", -0.75)?)),
    };
    let rank = cx.ty(x).rank();
    let mut sources = vec![Source::Coord(coord); rank];
    if crop {
        let roi = const_floats(cx, 1, "roi")?
            .filter(|r| !r.is_empty())
            .ok_or_else(|| cx.err("input 1 (`roi`) is required by tf_crop_and_resize"))?;
        check_len(cx, "roi", roi.len(), &[axes.clone(), axes.clone()].concat())?;
        for (i, &a) in axes.iter().enumerate() {
            let (start, end) = (roi[i], roi[axes.len() + i]);
            sources[a] = Source::Crop { start, end };
            // A cropped axis changes even at scale 1.
            if targets[a].is_none() && (start, end) != (0.0, 1.0) {
                targets[a] = Some((1.0, static_dim(cx, x, a)?));
            }
        }
    }
    let sampling = Sampling {
        kernel,
        antialias,
        exclude_outside,
        source: Source::Coord(coord),
    };
    let extrapolation = f64::from(cx.attr_float("extrapolation_value", 0.0)?);
    build_taps(cx, x, &sampling, &sources, extrapolation, &targets)
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
        "cubic" if cx.op_type == "Resize" && cx.opset >= 11 => Ok(Mode::Cubic),
        other => Err(cx.err(format!(
            "attribute `mode` = \"{other}\" is not supported here (nearest and linear are; \
             Resize from opset 11 takes cubic too)"
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

/// Targets from `sizes`. Policy `stretch`: each axis's scale is `size / len`; `not_larger`
/// (`not_smaller`): every resized axis takes the smallest (largest) of those ratios and the
/// length `⌊scale · len + ½⌋`, as ONNX's reference rounds it.
fn from_sizes(
    cx: &NodeCx<'_>,
    x: Value,
    axes: &[usize],
    sizes: &[i64],
    policy: &str,
) -> Result<Targets, OnnxError> {
    check_len(cx, "sizes", sizes.len(), axes)?;
    let mut targets = vec![None; cx.ty(x).rank()];
    for (&a, &n) in axes.iter().zip(sizes) {
        if n < 1 {
            return Err(cx.err(format!("`sizes`: {n} on axis {a} is not a positive size")));
        }
    }
    let pick = match policy {
        "stretch" => None,
        "not_larger" => Some(f64::min as fn(f64, f64) -> f64),
        "not_smaller" => Some(f64::max as fn(f64, f64) -> f64),
        other => {
            return Err(cx.err(format!(
                "attribute `keep_aspect_ratio_policy`: unknown value \"{other}\" (stretch, \
                 not_larger and not_smaller are ONNX's)"
            )));
        }
    };
    let Some(pick) = pick else {
        for (&a, &n) in axes.iter().zip(sizes) {
            if cx.ty(x).shape[a].known() == Some(n as u64) {
                continue;
            }
            let len_in = static_dim(cx, x, a)?;
            targets[a] = Some((n as f64 / len_in as f64, n as u64));
        }
        return Ok(targets);
    };
    let mut scale: Option<f64> = None;
    for (&a, &n) in axes.iter().zip(sizes) {
        let r = n as f64 / static_dim(cx, x, a)? as f64;
        scale = Some(scale.map_or(r, |s| pick(s, r)));
    }
    let Some(scale) = scale.filter(|&s| s != 1.0) else {
        return Ok(targets);
    };
    for &a in axes {
        let len_in = static_dim(cx, x, a)?;
        let len_out = (scale * len_in as f64 + 0.5).floor() as u64;
        if len_out == 0 {
            return Err(cx.err(format!(
                "`sizes` with policy {policy}: axis {a} of size {len_in} would be empty"
            )));
        }
        targets[a] = Some((scale, len_out));
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
            Mode::Cubic => return Err(cx.err("mode cubic needs Resize of opset 11 or later")),
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

/// Resizes `x` axis by axis with the general plans of `resize_kernel.rs` (`sources`: each
/// axis's coordinate mapping); the last IR node is named after the ONNX node.
fn build_taps(
    cx: &mut NodeCx<'_>,
    x: Value,
    sampling: &Sampling,
    sources: &[Source],
    extrapolation: f64,
    targets: &Targets,
) -> Result<Vec<Value>, OnnxError> {
    let ty = cx.ty(x).clone();
    let mode = match sampling.kernel {
        Kernel::Nearest(_) => None,
        Kernel::Linear => Some("linear"),
        Kernel::Cubic(_) => Some("cubic"),
    };
    if let Some(mode) = mode.filter(|_| !ty.dtype.is_float()) {
        return Err(cx.err(format!(
            "attribute `mode` = \"{mode}\" needs a floating-point X, got {}",
            ty.dtype
        )));
    }
    check_sizes(cx, x, targets)?;
    // The gathered taps of the largest step must fit too: the output's elements times the
    // taps per position (antialiasing a large shrink reads many).
    let out_elems: u64 = targets
        .iter()
        .zip(&ty.shape)
        .map(|(t, d)| t.map_or(d.known().unwrap_or(1), |(_, n)| n))
        .product();
    let mut steps = Vec::new();
    for (a, t) in targets.iter().enumerate() {
        let Some((scale, len_out)) = *t else { continue };
        let len_in = static_dim(cx, x, a)?;
        let s = Sampling {
            source: sources[a],
            ..*sampling
        };
        let taps = resize_kernel::taps(&s, scale);
        let bytes = out_elems
            .saturating_mul(taps)
            .saturating_mul(ty.dtype.size() as u64);
        fp8c_ir::memory::check_tensor_bytes(bytes).map_err(|m| {
            cx.err(format!(
                "axis {a}: {taps} taps per output position (scale {scale}): {m}"
            ))
        })?;
        steps.push((a, resize_kernel::plan(&s, scale, len_in, len_out)));
    }
    if steps.is_empty() {
        return Ok(vec![cx.add(Op::Identity, &[x])?]);
    }
    let last = steps.len() - 1;
    let mut y = x;
    for (k, (axis, plan)) in steps.iter().enumerate() {
        y = resize_axis_taps(cx, y, *axis, plan, extrapolation, k == last)?;
    }
    Ok(vec![y])
}

/// One axis of a general resize: two taps as [`resize_axis`]'s lower/upper form, more as
/// `reduce_sum(gather(y, taps) · weights)` over the taps axis; then, where a cropped
/// coordinate falls outside the input, the extrapolation value.
fn resize_axis_taps(
    cx: &mut NodeCx<'_>,
    y: Value,
    axis: usize,
    plan: &TapPlan,
    extrapolation: f64,
    last: bool,
) -> Result<Value, OnnxError> {
    let ty = cx.ty(y).clone();
    let (n, k) = (plan.len() as u64, plan.taps as u64);
    let extrapolates = plan.extrapolates();
    let summed = if plan.taps == 2 {
        // The weighted tap first, so that a position reading one input is a plain gather.
        let mut pair = AxisPlan::default();
        for o in 0..plan.len() {
            let (i, w) = (
                &plan.index[2 * o..2 * o + 2],
                &plan.weight[2 * o..2 * o + 2],
            );
            let first = usize::from(w[0] == 0.0);
            pair.lo.push(i[first]);
            pair.w_lo.push(w[first]);
            pair.hi.push(i[1 - first]);
            pair.w_hi.push(w[1 - first]);
        }
        resize_axis(cx, y, axis, &pair, last && !extrapolates)?
    } else {
        let index = Tensor::from_i64(vec![n, k], &plan.index);
        let index = cx.constant(&format!("axis{axis}.taps"), index)?;
        let gather = Op::Gather { axis: axis as i64 };
        let g = cx.add_helper(&format!("axis{axis}.gather"), gather, &[y, index])?;
        let mut wshape = vec![n, k];
        wshape.resize(ty.rank() - axis + 1, 1);
        let w = Tensor::from_f64_as(ty.dtype, wshape, &plan.weight)
            .map_err(|e| cx.err(format!("interpolation weights: {e}")))?;
        let w = cx.constant(&format!("axis{axis}.weights"), w)?;
        let weighed = cx.add_helper(&format!("axis{axis}.weigh"), Op::Mul, &[g, w])?;
        let sum = Op::ReduceSum {
            axes: Some(vec![axis as i64 + 1]),
            keepdims: false,
        };
        cx.add_step(
            last && !extrapolates,
            &format!("axis{axis}"),
            sum,
            &[weighed],
        )?
    };
    if !extrapolates {
        return Ok(summed);
    }
    let mut mshape = vec![n];
    mshape.resize(ty.rank() - axis, 1);
    let mask = cx.constant(
        &format!("axis{axis}.outside"),
        Tensor::from_bool(mshape, &plan.outside),
    )?;
    let e = cx.scalar(
        &format!("axis{axis}.extrapolation"),
        ty.dtype,
        extrapolation,
    )?;
    cx.add_step(
        last,
        &format!("axis{axis}.crop"),
        Op::Where,
        &[mask, e, summed],
    )
}
