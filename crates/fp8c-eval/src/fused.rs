//! The fused family: the fusion pass's ops, evaluated as exactly the unfused ops they stand for: each kernel
//! here composes the reference kernels (`quantize`, `amax`, `transpose`, `layer_norm`,
//! `scaled_matmul`, the elementwise ops, `amax_history_update`, `compute_scale`), so a fused
//! graph and its unfused original agree bit for bit on the CPU by construction. Every output
//! is computed, read or not.
//!
//! An elementwise program ([`EwExpr`]) runs one instruction at a time, each result rounded to
//! its own dtype as the unfused node's output would be.

use crate::error::{Fail, KResult, attr_err};
use crate::{fp8, linalg, movement, normalize};
use fp8c_ir::{AmaxSource, DType, EwArg, EwExpr, FusedOp, Support, Tensor};

/// Evaluates an op of the fused family.
pub(crate) fn eval(op: FusedOp<'_>, inputs: &[&Tensor]) -> KResult<Vec<Tensor>> {
    match op {
        FusedOp::QuantizeAmax { to, saturate } => {
            let [x, _] = crate::args(inputs)?;
            Ok(vec![fp8::quantize(inputs, *to, *saturate)?, fp8::amax(x)?])
        }
        FusedOp::CastTranspose { perm, to, saturate } => {
            let [x, _] = crate::args(inputs)?;
            let q = fp8::quantize(inputs, *to, *saturate)?;
            let t = movement::transpose(&q, perm)?;
            Ok(vec![q, t, fp8::amax(x)?])
        }
        FusedOp::LayerNormQuantize {
            axis,
            epsilon,
            to,
            saturate,
        } => {
            if !(3..=4).contains(&inputs.len()) {
                return Fail::arity("3 or 4", inputs.len());
            }
            let mut ln_in = vec![inputs[0]];
            ln_in.extend_from_slice(&inputs[2..]);
            let y = normalize::layer_norm(&ln_in, *axis, *epsilon)?;
            quantized(y, inputs[1], *to, *saturate)
        }
        FusedOp::ElementwiseQuantize { expr, to, saturate } => {
            let n = expr.num_inputs();
            if inputs.len() != n + 1 {
                return Fail::arity(
                    &format!("{} (the program's {n} and the scale)", n + 1),
                    inputs.len(),
                );
            }
            let y = run_expr(expr, &inputs[..n])?;
            quantized(y, inputs[n], *to, *saturate)
        }
        FusedOp::LayerNormBlockQuantize {
            axis,
            epsilon,
            to,
            saturate,
            cols,
            scaling,
            amax_epsilon,
        } => {
            if !(2..=3).contains(&inputs.len()) {
                return Fail::arity("2 or 3", inputs.len());
            }
            let y = normalize::layer_norm(inputs, *axis, *epsilon)?;
            with_tiles(y, *to, *saturate, *cols, *scaling, *amax_epsilon)
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
                return Fail::arity(&format!("{n} (the program's)"), inputs.len());
            }
            let y = run_expr(expr, inputs)?;
            with_tiles(y, *to, *saturate, *cols, *scaling, *epsilon)
        }
        FusedOp::ScaledMatMulEpilogue {
            out,
            fast_accum,
            expr,
            to,
            saturate,
        } => {
            let extras = expr.num_inputs().saturating_sub(1);
            let want = 4 + extras + usize::from(to.is_some());
            if inputs.len() != want {
                return Fail::arity(&want.to_string(), inputs.len());
            }
            let acc = linalg::scaled_matmul(&inputs[..4], *out, *fast_accum)?;
            let d = run_expr_on(expr, Some(acc), &inputs[4..4 + extras])?;
            match to {
                Some(to) => quantized(d, inputs[4 + extras], *to, *saturate),
                None => Ok(vec![d]),
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
                return Fail::arity(
                    "a non-zero multiple of 3 (history, amax, scale per tensor)",
                    inputs.len(),
                );
            }
            if *source == AmaxSource::Current {
                return attr_err!("source=current has no history to update");
            }
            let mut outs = Vec::with_capacity(inputs.len());
            for (i, t) in inputs.chunks(3).enumerate() {
                let at = |f: Fail| Fail::new(f.kind, format!("tensor {i}: {}", f.message));
                let hist = fp8::amax_history_update(&t[..2]).map_err(at)?;
                let scales = fp8::compute_scale(
                    &[&hist[0], t[2]],
                    *fmt,
                    *margin,
                    *source,
                    *epsilon,
                    *power_2,
                )
                .map_err(at)?;
                let [_, next] = <[Tensor; 2]>::try_from(hist).map_err(|_| {
                    Fail::new(
                        crate::error::ErrorKind::Unsupported,
                        "internal: history outputs",
                    )
                })?;
                outs.push(next);
                outs.extend(scales);
            }
            Ok(outs)
        }
        FusedOp::__Lifetime(never, _) => match never {},
    }
}

/// Every op of the family is evaluated.
pub(crate) fn support(op: FusedOp<'_>) -> Support {
    match op {
        FusedOp::QuantizeAmax { .. }
        | FusedOp::CastTranspose { .. }
        | FusedOp::LayerNormQuantize { .. }
        | FusedOp::ElementwiseQuantize { .. }
        | FusedOp::ElementwiseBlockQuantize { .. }
        | FusedOp::LayerNormBlockQuantize { .. }
        | FusedOp::ScaledMatMulEpilogue { .. }
        | FusedOp::BatchedScaleUpdate { .. } => Support::Yes,
        FusedOp::__Lifetime(never, _) => match never {},
    }
}

/// `[y, quantize(y, scale), amax(y)]`.
fn quantized(y: Tensor, scale: &Tensor, to: DType, saturate: bool) -> KResult<Vec<Tensor>> {
    let q = fp8::quantize(&[&y, scale], to, saturate)?;
    let a = fp8::amax(&y)?;
    Ok(vec![y, q, a])
}

/// `y` and its one-row tiles quantized (`block_quantize`'s codes and scales after it): the
/// outputs of the tile-quantizing fused ops.
fn with_tiles(
    y: Tensor,
    to: DType,
    saturate: bool,
    cols: i64,
    scaling: fp8c_ir::BlockScaling,
    epsilon: f32,
) -> KResult<Vec<Tensor>> {
    let mut outs = crate::block::block_quantize(&[&y], to, saturate, (1, cols), scaling, epsilon)?;
    outs.insert(0, y);
    Ok(outs)
}

/// Runs an elementwise program on its inputs `a0..`; the empty program returns `a0`.
fn run_expr(expr: &EwExpr, inputs: &[&Tensor]) -> KResult<Tensor> {
    run_expr_on(expr, None, inputs)
}

/// Runs an elementwise program. `owned`, when given, is `a0` by value (a GEMM epilogue's
/// accumulator), and `rest` are `a1..`; otherwise `rest` are all the inputs. An instruction
/// that is the only reader of `owned` or of an earlier instruction's result overwrites it
/// where [`crate::eval_in_place`] handles the op (the same bits); the others get fresh
/// tensors from [`crate::eval_op`].
fn run_expr_on(expr: &EwExpr, mut owned: Option<Tensor>, rest: &[&Tensor]) -> KResult<Tensor> {
    let insts = expr.insts();
    let offset = usize::from(owned.is_some());
    let mut input_reads = vec![0u32; rest.len() + offset];
    let mut temp_reads = vec![0u32; insts.len()];
    for a in insts.iter().flat_map(|i| &i.args) {
        let n = match *a {
            EwArg::Input(k) => input_reads.get_mut(k as usize),
            EwArg::Temp(k) => temp_reads.get_mut(k as usize),
        };
        if let Some(n) = n {
            *n += 1;
        }
    }
    let mut temps: Vec<Option<Tensor>> = Vec::with_capacity(insts.len());
    for (i, inst) in insts.iter().enumerate() {
        // The argument this instruction may overwrite: its only reader, of at most two.
        let sole = inst.args.iter().position(|a| match *a {
            EwArg::Input(0) => owned.is_some() && input_reads[0] == 1,
            EwArg::Temp(k) => {
                temp_reads.get(k as usize) == Some(&1)
                    && temps.get(k as usize).is_some_and(Option::is_some)
            }
            EwArg::Input(_) => false,
        });
        if let Some(pos) = sole.filter(|_| inst.args.len() <= 2) {
            let mut acc = match inst.args[pos] {
                EwArg::Temp(k) => temps[k as usize].take(),
                _ => owned.take(),
            }
            .ok_or_else(|| Fail::new(crate::ErrorKind::Unsupported, "internal: value taken"))?;
            let other = match inst.args.get(1 - pos) {
                Some(a) => Some(arg(*a, i, owned.as_ref(), offset, rest, &temps)?),
                None => None,
            };
            if crate::eval_in_place(&inst.op, &mut acc, pos, other) {
                temps.push(Some(acc));
                continue;
            }
            match inst.args[pos] {
                EwArg::Temp(k) => temps[k as usize] = Some(acc),
                _ => owned = Some(acc),
            }
        }
        let args = inst
            .args
            .iter()
            .map(|a| arg(*a, i, owned.as_ref(), offset, rest, &temps))
            .collect::<KResult<Vec<&Tensor>>>()?;
        let at = |e: crate::EvalError| Fail::new(e.kind, format!("instruction {i}: {e}"));
        let mut out = crate::eval_op(&inst.op, &args).map_err(at)?;
        if out.len() != 1 {
            return attr_err!(
                "instruction {i} (`{}`) does not give one output",
                inst.op.name()
            );
        }
        temps.push(Some(out.remove(0)));
    }
    match temps.pop() {
        Some(Some(y)) => Ok(y),
        Some(None) => Err(Fail::new(
            crate::ErrorKind::Unsupported,
            "internal: result taken",
        )),
        None => match owned {
            Some(t) => Ok(t),
            None => rest
                .first()
                .map(|t| (*t).clone())
                .map_or_else(|| Fail::arity("at least 1", 0), Ok),
        },
    }
}

/// The tensor argument `a` of instruction `i` names (see [`run_expr_on`]).
fn arg<'a>(
    a: EwArg,
    i: usize,
    owned: Option<&'a Tensor>,
    offset: usize,
    rest: &[&'a Tensor],
    temps: &'a [Option<Tensor>],
) -> KResult<&'a Tensor> {
    let t = match a {
        EwArg::Input(0) if offset == 1 => owned,
        EwArg::Input(k) => (k as usize)
            .checked_sub(offset)
            .and_then(|k| rest.get(k))
            .copied(),
        EwArg::Temp(k) => temps.get(k as usize).and_then(Option::as_ref),
    };
    match t {
        Some(t) => Ok(t),
        None => attr_err!("instruction {i} reads {a:?}, which does not exist"),
    }
}
