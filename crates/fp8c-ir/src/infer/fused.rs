//! Inference for the fused family: each fused op has the types of the unfused ops it
//! computes, so its rule runs theirs (through [`super::infer`]); also the type of an
//! elementwise program ([`ew_expr`]).

use super::InferInput;
use super::common::{Res, args, arity_msg};
use super::normalize::layer_norm;
use crate::op::AmaxSource;
use crate::{DType, FusedOp, Op, TensorType};

/// The output types of a fused op.
pub(super) fn infer(op: FusedOp<'_>, inputs: &[InferInput<'_>]) -> Res<Vec<TensorType>> {
    Ok(match op {
        FusedOp::QuantizeAmax { to, saturate } => {
            let [x, _scale] = args(inputs, ["x", "scale"])?;
            let q = quantize_of(inputs, *to, *saturate)?;
            vec![q, amax_of(x.ty)?]
        }
        FusedOp::CastTranspose { perm, to, saturate } => {
            let [x, _scale] = args(inputs, ["x", "scale"])?;
            let q = quantize_of(inputs, *to, *saturate)?;
            let t = single(super::infer(
                &Op::Transpose { perm: perm.clone() },
                &[InferInput::new(&q)],
            )?)?;
            vec![q, t, amax_of(x.ty)?]
        }
        FusedOp::LayerNormQuantize {
            axis,
            epsilon: _,
            to,
            saturate,
        } => {
            if !(3..=4).contains(&inputs.len()) {
                return Err(arity_msg(&["x", "scale", "gamma", "beta"], 3, inputs.len()));
            }
            let mut ln_in = vec![inputs[0]];
            ln_in.extend_from_slice(&inputs[2..]);
            let y = layer_norm(&ln_in, *axis)?;
            quantized_outputs(y, inputs[1], *to, *saturate)?
        }
        FusedOp::ElementwiseQuantize { expr, to, saturate } => {
            let n = expr.num_inputs();
            if inputs.len() != n + 1 {
                return Err(format!(
                    "expects {} inputs (the program's {n} and the scale), got {}",
                    n + 1,
                    inputs.len()
                ));
            }
            let y = ew_expr(expr, &inputs[..n])?;
            quantized_outputs(y, inputs[n], *to, *saturate)?
        }
        FusedOp::LayerNormBlockQuantize {
            axis,
            epsilon: _,
            to,
            saturate,
            cols,
            scaling,
            amax_epsilon,
        } => {
            if !(2..=3).contains(&inputs.len()) {
                return Err(arity_msg(&["x", "gamma", "beta"], 2, inputs.len()));
            }
            let rank = inputs[0].ty.shape.len() as i64;
            if *axis != -1 && *axis != rank - 1 {
                return Err(format!(
                    "attribute axis={axis} must be the last axis (-1 or {}): the tiles are rows",
                    rank - 1
                ));
            }
            let y = layer_norm(inputs, *axis)?;
            tiles_of(y, (*to, *saturate, *cols, *scaling, *amax_epsilon))?
        }
        FusedOp::ElementwiseBlockQuantize {
            expr,
            to,
            saturate,
            cols,
            scaling,
            epsilon,
        } => {
            let n = expr.num_inputs();
            if inputs.len() != n {
                return Err(format!(
                    "expects the program's {n} inputs, got {}",
                    inputs.len()
                ));
            }
            let y = ew_expr(expr, inputs)?;
            tiles_of(y, (*to, *saturate, *cols, *scaling, *epsilon))?
        }
        FusedOp::ScaledMatMulEpilogue {
            out,
            fast_accum,
            expr,
            to,
            saturate,
        } => {
            let extras = expr.num_inputs() - 1;
            let want = 4 + extras + usize::from(to.is_some());
            if inputs.len() != want {
                return Err(format!(
                    "expects {want} inputs (qa, qb, scale_inv_a, scale_inv_b, {extras} epilogue input(s){}), got {}",
                    if to.is_some() { ", d_scale" } else { "" },
                    inputs.len()
                ));
            }
            let acc = single(super::infer(
                &Op::ScaledMatMul {
                    out: *out,
                    fast_accum: *fast_accum,
                },
                &inputs[..4],
            )?)?;
            let mut ew_in = vec![InferInput::new(&acc)];
            ew_in.extend_from_slice(&inputs[4..4 + extras]);
            let d = ew_expr(expr, &ew_in)?;
            if d != acc {
                return Err(format!(
                    "the epilogue gives {d}, expected the product's type {acc} (an epilogue \
                     computes one value per output element)"
                ));
            }
            match to {
                Some(to) => quantized_outputs(d, inputs[4 + extras], *to, *saturate)?,
                None => vec![d],
            }
        }
        FusedOp::BatchedScaleUpdate {
            fmt,
            margin,
            source,
            epsilon,
            power_2,
        } => {
            if inputs.is_empty() || !inputs.len().is_multiple_of(3) {
                return Err(format!(
                    "expects (history, amax, scale) for each tensor, a multiple of 3 inputs, got {}",
                    inputs.len()
                ));
            }
            if *source == AmaxSource::Current {
                return Err("attribute source=current has no history to update".into());
            }
            let cs = Op::ComputeScale {
                fmt: *fmt,
                margin: *margin,
                source: *source,
                epsilon: *epsilon,
                power_2: *power_2,
            };
            let mut outs = Vec::with_capacity(inputs.len());
            for (i, t) in inputs.chunks(3).enumerate() {
                let at = |e: String| format!("tensor {i} (inputs {}..{}): {e}", 3 * i, 3 * i + 2);
                let hist = super::infer(&Op::AmaxHistoryUpdate, &t[..2]).map_err(at)?;
                let scale = super::infer(&cs, &[InferInput::new(&hist[0]), t[2]]).map_err(at)?;
                outs.push(hist[1].clone());
                outs.extend(scale);
            }
            outs
        }
        FusedOp::__Lifetime(never, _) => match never {},
    })
}

/// `[y, block_quantize { rows: 1, cols, .. }(y)'s codes and scale_inv]` for an f32 `y`.
fn tiles_of(
    y: TensorType,
    (to, saturate, cols, scaling, epsilon): (DType, bool, i64, crate::BlockScaling, f32),
) -> Res<Vec<TensorType>> {
    if y.dtype != DType::F32 {
        return Err(format!(
            "the result must be f32 (its tiles are quantized from f32), got {}",
            y.dtype
        ));
    }
    let bq = Op::BlockQuantize {
        to,
        saturate,
        rows: 1,
        cols,
        scaling,
        epsilon,
    };
    let mut outs = super::infer(&bq, &[InferInput::new(&y)])?;
    outs.insert(0, y);
    Ok(outs)
}

/// The one output of an op that has one.
fn single(mut outs: Vec<TensorType>) -> Res<TensorType> {
    match outs.len() {
        1 => Ok(outs.remove(0)),
        n => Err(format!("expected one output, the op gives {n}")),
    }
}

/// `quantize { to, saturate }` of `inputs` (x, scale).
fn quantize_of(inputs: &[InferInput<'_>], to: DType, saturate: bool) -> Res<TensorType> {
    single(super::infer(&Op::Quantize { to, saturate }, inputs)?)
}

fn amax_of(x: &TensorType) -> Res<TensorType> {
    single(super::infer(&Op::Amax, &[InferInput::new(x)])?)
}

/// `(y, quantize(y, scale), amax(y))`.
fn quantized_outputs(
    y: TensorType,
    scale: InferInput<'_>,
    to: DType,
    saturate: bool,
) -> Res<Vec<TensorType>> {
    let q = quantize_of(&[InferInput::new(&y), scale], to, saturate)?;
    let a = amax_of(&y)?;
    Ok(vec![y, q, a])
}

/// The result type of an elementwise program on `inputs` (each instruction inferred as the op).
pub fn ew_expr(expr: &crate::EwExpr, inputs: &[InferInput<'_>]) -> Res<TensorType> {
    use crate::EwArg;
    if expr.num_inputs() > inputs.len() {
        return Err(format!(
            "the program reads {} inputs, {} given",
            expr.num_inputs(),
            inputs.len()
        ));
    }
    let mut temps: Vec<TensorType> = Vec::with_capacity(expr.insts().len());
    for (i, inst) in expr.insts().iter().enumerate() {
        let ins: Vec<InferInput<'_>> = inst
            .args
            .iter()
            .map(|a| match a {
                EwArg::Input(k) => inputs[*k as usize],
                EwArg::Temp(t) => InferInput::new(&temps[*t as usize]),
            })
            .collect();
        let t = super::infer(&inst.op, &ins)
            .and_then(single)
            .map_err(|e| format!("program instruction {i} ({}): {e}", inst.op.name()))?;
        temps.push(t);
    }
    Ok(match temps.pop() {
        Some(t) => t,
        None => inputs
            .first()
            .map(|x| x.ty.clone())
            .ok_or("an empty program needs an input")?,
    })
}
