//! Inference for the fp8 family: ONNX QuantizeLinear / DequantizeLinear (per tensor or per
//! axis) and fp8c's scaling ops (`amax`, `compute_scale`, `amax_history_update`,
//! `quantize`, `dequantize`), and `cast_e8m0` (Cast to FLOAT8E8M0 with a round mode).

use super::InferInput;
use super::common::{
    Arg, MATH_FLOAT, Res, args, args_opt, axis_of, expect_attr, is_math_float, unify,
};
use crate::op::AmaxSource;
use crate::{DType, Dim, Fp8Op, TensorType};

/// The output types of an fp8 op.
pub(super) fn infer(op: Fp8Op<'_>, inputs: &[InferInput<'_>]) -> Res<Vec<TensorType>> {
    let one = |t: TensorType| vec![t];
    Ok(match op {
        Fp8Op::QuantizeLinear {
            axis,
            to,
            block_size,
            ..
        } => one(quantize_linear(inputs, *axis, *to, *block_size)?),
        Fp8Op::DequantizeLinear { axis, block_size } => {
            one(dequantize_linear(inputs, *axis, *block_size)?)
        }
        Fp8Op::Amax => {
            let [x] = args(inputs, ["x"])?;
            x.expect(x.dtype().is_float(), "a float type")?;
            one(TensorType::scalar(DType::F32))
        }
        Fp8Op::ComputeScale {
            fmt,
            margin,
            source,
            epsilon,
            ..
        } => compute_scale(inputs, *fmt, *margin, *source, *epsilon)?,
        Fp8Op::AmaxHistoryUpdate => {
            let [history, amax] = args(inputs, ["history", "amax"])?;
            history.expect_f32_rank(1)?;
            amax.expect_f32_rank(0)?;
            // `recorded` (slot 0 = this amax) and `next` (rolled), both like the history.
            vec![history.ty.clone(), history.ty.clone()]
        }
        Fp8Op::Quantize { to, .. } => {
            let [x, scale] = args(inputs, ["x", "scale"])?;
            expect_attr(to.is_fp8(), "to", to, "an FP8 type (f8e4m3 or f8e5m2)")?;
            x.expect(
                is_math_float(x.dtype()),
                "a float type (not FP8: it is already quantized)",
            )?;
            scale.expect_f32_rank(0)?;
            one(TensorType::new(*to, x.ty.shape.clone()))
        }
        Fp8Op::Dequantize { to } => {
            let [q, scale_inv] = args(inputs, ["q", "scale_inv"])?;
            expect_attr(is_math_float(*to), "to", to, "a float type other than FP8")?;
            q.expect(q.dtype().is_fp8(), "an FP8 type")?;
            scale_inv.expect_f32_rank(0)?;
            one(TensorType::new(*to, q.ty.shape.clone()))
        }
        Fp8Op::CastE8m0 { .. } => {
            let [x] = args(inputs, ["x"])?;
            x.expect(
                is_math_float(x.dtype()) || x.dtype().is_fp8() || x.dtype().is_narrow_float(),
                "a float type",
            )?;
            one(TensorType::new(DType::F8E8M0, x.ty.shape.clone()))
        }
        Fp8Op::BlockQuantize { to, rows, cols, .. } => {
            let [x] = args(inputs, ["x"])?;
            expect_attr(to.is_fp8(), "to", to, "an FP8 type (f8e4m3 or f8e5m2)")?;
            x.expect(
                is_math_float(x.dtype()),
                "a float type (not FP8: it is already quantized)",
            )?;
            let tiles = tile_grid(&x, *rows, *cols)?;
            vec![
                TensorType::new(*to, x.ty.shape.clone()),
                TensorType::new(DType::F32, tiles),
            ]
        }
        Fp8Op::BlockDequantize { to, rows, cols } => {
            let [q, scale_inv] = args(inputs, ["q", "scale_inv"])?;
            expect_attr(is_math_float(*to), "to", to, "a float type other than FP8")?;
            q.expect(q.dtype().is_fp8(), "an FP8 type")?;
            let tiles = tile_grid(&q, *rows, *cols)?;
            scale_inv.expect(scale_inv.dtype() == DType::F32, "f32")?;
            unify_shapes(&scale_inv, &tiles)?;
            one(TensorType::new(*to, q.ty.shape.clone()))
        }
        Fp8Op::__Lifetime(never, _) => match never {},
    })
}

/// The per-tile shape of `x` [..., R, C] cut into `rows` × `cols` tiles (0: the whole axis):
/// [..., ceil(R/rows), ceil(C/cols)].
pub(super) fn tile_grid(x: &Arg<'_>, rows: i64, cols: i64) -> Res<Vec<Dim>> {
    if x.rank() < 2 {
        return Err(x.shape_err("expected rank ≥ 2 ([..., rows, cols])"));
    }
    expect_attr(rows >= 0, "rows", rows, "≥ 0 (0: the whole axis)")?;
    expect_attr(cols >= 0, "cols", cols, "≥ 0 (0: the whole axis)")?;
    let shape = x.shape();
    let r = shape.len();
    let tiles = |d: &Dim, size: i64| -> Dim {
        match (d, size) {
            (_, 0) => Dim::Known(1),
            (Dim::Known(n), s) => Dim::Known(n.div_ceil(s as u64)),
            _ => Dim::Unknown,
        }
    };
    let mut out = shape[..r - 2].to_vec();
    out.push(tiles(&shape[r - 2], rows));
    out.push(tiles(&shape[r - 1], cols));
    Ok(out)
}

/// `arg`'s shape must agree with `want` wherever both are known.
pub(super) fn unify_shapes(arg: &Arg<'_>, want: &[Dim]) -> Res<()> {
    let ok = arg.shape().len() == want.len()
        && arg
            .shape()
            .iter()
            .zip(want)
            .all(|(a, b)| match (a.known(), b.known()) {
                (Some(x), Some(y)) => x == y,
                _ => true,
            });
    if ok {
        Ok(())
    } else {
        let w: Vec<String> = want.iter().map(ToString::to_string).collect();
        Err(arg.shape_err(format!("expected [{}] (one scale per tile)", w.join(", "))))
    }
}

/// The scale (and zero point) of ONNX Q/DQ: a scalar (per tensor) or 1-D along `axis`
/// (per axis). The zero point must have `zp_dtype` and the scale's shape.
fn check_qparams(
    x: &Arg<'_>,
    scale: &Arg<'_>,
    zero_point: Option<&Arg<'_>>,
    axis: i64,
    zp_dtype: DType,
    block_size: i64,
) -> Res<()> {
    scale.expect(is_math_float(scale.dtype()), MATH_FLOAT)?;
    if block_size < 0 {
        return Err(format!("attribute block_size={block_size} must be ≥ 0"));
    }
    if block_size > 0 {
        // Blocked: x's rank; ceil(dim / block_size) entries along the axis, x's dims elsewhere.
        let ax = axis_of(x, axis, "axis")?;
        if scale.rank() != x.rank() {
            return Err(scale.shape_err(format!(
                "a blocked scale (block_size={block_size}) has the rank of {x} {}",
                x.ty
            )));
        }
        for (i, (s, d)) in scale.shape().iter().zip(x.shape()).enumerate() {
            let want = match d {
                Dim::Known(n) if i == ax => Dim::Known(n.div_ceil(block_size as u64)),
                _ if i == ax => Dim::Unknown,
                d => d.clone(),
            };
            if unify(s, &want).is_none() {
                return Err(scale.shape_err(format!(
                    "dim {i} must be {want} for blocks of {block_size} along axis {ax} of {x} {}",
                    x.ty
                )));
            }
        }
    } else {
        match scale.shape() {
            [] | [Dim::Known(1)] => {}
            [n] => {
                let ax = axis_of(x, axis, "axis")?;
                let along = x.shape().get(ax).cloned().unwrap_or(Dim::Unknown);
                if unify(n, &along).is_none() {
                    return Err(scale.shape_err(format!(
                        "a per-axis scale needs {along} entries (axis {ax} of {x})"
                    )));
                }
            }
            _ => {
                return Err(scale.shape_err(
                "expected a scalar or a 1-D per-axis scale (or block_size > 0 for a blocked one)",
            ));
            }
        }
    }
    if let Some(zp) = zero_point {
        zp.expect(zp.dtype() == zp_dtype, zp_dtype.name())?;
        // A per-tensor zero point may be [1] beside a scalar scale, or the reverse (ONNX's
        // float8 Q/DQ backend tests do this; the reference and onnxruntime accept it).
        let one = |s: &[Dim]| s.iter().all(|d| *d == Dim::Known(1));
        let same = (one(zp.shape()) && one(scale.shape()) && zp.rank() <= 1 && scale.rank() <= 1)
            || (zp.rank() == scale.rank()
                && zp
                    .shape()
                    .iter()
                    .zip(scale.shape())
                    .all(|(a, b)| unify(a, b).is_some()));
        if !same {
            return Err(zp.shape_err(format!("expected the shape of {scale} {}", scale.ty)));
        }
    }
    Ok(())
}

fn quantize_linear(
    inputs: &[InferInput<'_>],
    axis: i64,
    to: DType,
    block_size: i64,
) -> Res<TensorType> {
    let ([x, scale], zp) = args_opt(inputs, ["x", "y_scale"], "y_zero_point")?;
    let quantized = to.is_fp8()
        || to.is_narrow_float()
        || matches!(to, DType::I8 | DType::U8 | DType::I16 | DType::U16);
    expect_attr(quantized, "to", to, QUANTIZED)?;
    x.expect(
        is_math_float(x.dtype()) || x.dtype() == DType::I32,
        "a float type (not FP8) or i32",
    )?;
    check_qparams(&x, &scale, zp.as_ref(), axis, to, block_size)?;
    Ok(TensorType::new(to, x.ty.shape.clone()))
}

/// What QuantizeLinear produces and DequantizeLinear reads, for messages.
const QUANTIZED: &str =
    "a quantized type (i8, u8, i16, u16, f8e4m3, f8e5m2, f8e4m3fnuz, f8e5m2fnuz, f8e8m0, f4e2m1)";
const DEQUANTIZED: &str = "a quantized type (i8, u8, i16, u16, i32, f8e4m3, f8e5m2, f8e4m3fnuz, \
     f8e5m2fnuz, f8e8m0, f4e2m1)";

fn dequantize_linear(inputs: &[InferInput<'_>], axis: i64, block_size: i64) -> Res<TensorType> {
    let ([x, scale], zp) = args_opt(inputs, ["x", "x_scale"], "x_zero_point")?;
    let d = x.dtype();
    let quantized = d.is_fp8()
        || d.is_narrow_float()
        || matches!(
            d,
            DType::I8 | DType::U8 | DType::I16 | DType::U16 | DType::I32
        );
    x.expect(quantized, DEQUANTIZED)?;
    check_qparams(&x, &scale, zp.as_ref(), axis, x.dtype(), block_size)?;
    Ok(TensorType::new(scale.dtype(), x.ty.shape.clone()))
}

// ------------------------------------------------------------------ fp8c's FP8 ops

/// Inputs: the amax source (an f32[L] history, or f32[] for `source=current`) and the
/// previous scale f32[]; outputs scale and scale_inv.
fn compute_scale(
    inputs: &[InferInput<'_>],
    fmt: DType,
    margin: f32,
    source: AmaxSource,
    epsilon: f32,
) -> Res<Vec<TensorType>> {
    let roles = match source {
        AmaxSource::Current => ["amax", "prev_scale"],
        _ => ["amax_history", "prev_scale"],
    };
    let [amax, prev] = args(inputs, roles)?;
    expect_attr(fmt.is_fp8(), "fmt", fmt, "an FP8 type (f8e4m3 or f8e5m2)")?;
    expect_attr(margin.is_finite(), "margin", margin, "a finite number")?;
    expect_attr(
        epsilon.is_finite() && epsilon >= 0.0,
        "epsilon",
        epsilon,
        "a finite number ≥ 0",
    )?;
    match source {
        AmaxSource::Current => amax.expect_f32_rank(0)?,
        AmaxSource::HistoryMax | AmaxSource::HistoryMostRecent => {
            amax.expect_f32_rank(1)?;
            if matches!(amax.shape(), [Dim::Known(0)]) {
                return Err(amax.shape_err("an amax history needs at least one entry"));
            }
        }
    }
    prev.expect_f32_rank(0)?;
    Ok(vec![
        TensorType::scalar(DType::F32),
        TensorType::scalar(DType::F32),
    ])
}
