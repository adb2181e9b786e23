//! Inference for the linalg family: numpy `matmul`, ONNX `gemm` and the FP8 GEMM
//! `scaled_matmul` (numpy matmul shapes over FP8 operands).

use super::InferInput;
use super::common::{
    Arg, NUMERIC, Res, args, args_opt, broadcast_shapes, expect_attr, fmt_shape, is_math_float,
    is_numeric, unify,
};
use crate::{DType, Dim, LinalgOp, Shape, TensorType};

/// The output types of a linalg op.
pub(super) fn infer(op: LinalgOp<'_>, inputs: &[InferInput<'_>]) -> Res<Vec<TensorType>> {
    let one = |t: TensorType| vec![t];
    Ok(match op {
        LinalgOp::MatMul => one(matmul(inputs)?),
        LinalgOp::Gemm {
            trans_a, trans_b, ..
        } => one(gemm(inputs, *trans_a, *trans_b)?),
        LinalgOp::ScaledMatMul { out, .. } => {
            let [a, b, sa, sb] = args(inputs, ["qa", "qb", "scale_inv_a", "scale_inv_b"])?;
            expect_attr(
                is_math_float(*out),
                "out",
                out,
                "a float type other than FP8",
            )?;
            a.expect(a.dtype().is_fp8(), "an FP8 type")?;
            b.expect(b.dtype().is_fp8(), "an FP8 type")?;
            sa.expect_f32_rank(0)?;
            sb.expect_f32_rank(0)?;
            one(TensorType::new(*out, matmul_shape(&a, &b)?))
        }
        LinalgOp::BlockScaledMatMul {
            out,
            k_block,
            a_rows,
            b_cols,
        } => {
            let [a, b, sa, sb] = args(inputs, ["qa", "qb", "scale_inv_a", "scale_inv_b"])?;
            expect_attr(
                is_math_float(*out),
                "out",
                out,
                "a float type other than FP8",
            )?;
            a.expect(a.dtype().is_fp8(), "an FP8 type")?;
            b.expect(b.dtype().is_fp8(), "an FP8 type")?;
            a.expect_rank(2)?;
            b.expect_rank(2)?;
            sa.expect(sa.dtype() == DType::F32, "f32")?;
            sb.expect(sb.dtype() == DType::F32, "f32")?;
            let shape = matmul_shape(&a, &b)?;
            // A's tiles are a_rows × k_block of [M, K]; B's k_block × b_cols of [K, N].
            let ga = super::fp8::tile_grid(&a, *a_rows, *k_block)?;
            let gb = super::fp8::tile_grid(&b, *k_block, *b_cols)?;
            super::fp8::unify_shapes(&sa, &ga)?;
            super::fp8::unify_shapes(&sb, &gb)?;
            one(TensorType::new(*out, shape))
        }
        LinalgOp::__Lifetime(never, _) => match never {},
    })
}

fn matmul(inputs: &[InferInput<'_>]) -> Res<TensorType> {
    let [a, b] = args(inputs, ["A", "B"])?;
    a.expect(
        is_numeric(a.dtype()),
        "a float or integer type (FP8 operands go through scaled_matmul)",
    )?;
    b.expect_same_dtype(&a)?;
    Ok(TensorType::new(a.dtype(), matmul_shape(&a, &b)?))
}

/// numpy matmul shapes: a 1-D operand is promoted to a matrix and the added axis removed
/// from the result; batch axes broadcast.
fn matmul_shape(a: &Arg<'_>, b: &Arg<'_>) -> Res<Shape> {
    let no_scalars = "expected rank ≥ 1 (matmul does not take scalars)";
    let (a_batch, m, ka) = match a.shape() {
        [] => return Err(a.shape_err(no_scalars)),
        [k] => (&[][..], None, k),
        [batch @ .., m, k] => (batch, Some(m), k),
    };
    let (b_batch, kb, n) = match b.shape() {
        [] => return Err(b.shape_err(no_scalars)),
        [k] => (&[][..], k, None),
        [batch @ .., k, n] => (batch, k, Some(n)),
    };
    if unify(ka, kb).is_none() {
        let which = if b.rank() <= 2 {
            "first dim".to_string()
        } else {
            format!("dim {}", b.rank() - 2)
        };
        return Err(b.shape_err(format!(
            "its {which} ({kb}) must equal input {}'s last dim ({ka})",
            a.index
        )));
    }
    let mut out = broadcast_shapes(a_batch, b_batch).map_err(|(x, y)| {
        b.shape_err(format!(
            "its batch dims do not broadcast with {a} {} ({y} vs {x})",
            a.ty
        ))
    })?;
    out.extend(m.cloned());
    out.extend(n.cloned());
    Ok(out)
}

fn gemm(inputs: &[InferInput<'_>], trans_a: bool, trans_b: bool) -> Res<TensorType> {
    let ([a, b], c) = args_opt(inputs, ["A", "B"], "C")?;
    a.expect(is_numeric(a.dtype()), NUMERIC)?;
    b.expect_same_dtype(&a)?;
    let ([a0, a1], [b0, b1]) = (a.shape(), b.shape()) else {
        let bad = if a.rank() != 2 { a } else { b };
        return Err(bad.shape_err("expected rank 2"));
    };
    let (m, ka, ka_axis) = if trans_a { (a1, a0, 0) } else { (a0, a1, 1) };
    let (kb, n, kb_axis) = if trans_b { (b1, b0, 1) } else { (b0, b1, 0) };
    if unify(ka, kb).is_none() {
        return Err(b.shape_err(format!(
            "its dim {kb_axis} ({kb}, trans_b={trans_b}) must equal input 0's dim {ka_axis} ({ka}, trans_a={trans_a})"
        )));
    }
    if let Some(c) = c {
        c.expect_same_dtype(&a)?;
        let target = [m.clone(), n.clone()];
        let fits = c.rank() <= 2
            && c.shape()
                .iter()
                .rev()
                .zip(target.iter().rev())
                .all(|(cd, t)| *cd == Dim::Known(1) || unify(cd, t).is_some());
        if !fits {
            return Err(c.shape_err(format!(
                "expected it to broadcast to the result shape {}",
                fmt_shape(&target)
            )));
        }
    }
    Ok(TensorType::new(a.dtype(), vec![m.clone(), n.clone()]))
}
