//! Inference for the elementwise family: unary math (dtype checked, shape kept), numpy
//! broadcasting binary arithmetic, comparisons and logic, `where`, `clip`, `cast`, and the
//! GELU gradient.

use super::InferInput;
use super::common::{
    ANY, MATH_FLOAT, NUMERIC, Res, SIGNED, args, broadcast, is_math_float, is_numeric, is_signed,
    same_as,
};
use crate::{DType, ElementwiseOp, TensorType};

/// The output types of an elementwise op.
pub(super) fn infer(op: ElementwiseOp<'_>, inputs: &[InferInput<'_>]) -> Res<Vec<TensorType>> {
    use DType::Bool;
    let one = |t: TensorType| vec![t];
    Ok(match op {
        // ---- elementwise unary
        ElementwiseOp::Identity => one(unary(inputs, |_| true, ANY, None)?),
        ElementwiseOp::Neg | ElementwiseOp::Relu => one(unary(inputs, is_signed, SIGNED, None)?),
        ElementwiseOp::Abs | ElementwiseOp::Erf => one(unary(inputs, is_numeric, NUMERIC, None)?),
        ElementwiseOp::Sqrt
        | ElementwiseOp::Reciprocal
        | ElementwiseOp::Exp
        | ElementwiseOp::Log
        | ElementwiseOp::Tanh
        | ElementwiseOp::Sigmoid
        | ElementwiseOp::Floor
        | ElementwiseOp::Sign
        | ElementwiseOp::Ceil
        | ElementwiseOp::Round
        | ElementwiseOp::Sin
        | ElementwiseOp::Cos
        | ElementwiseOp::Gelu { .. }
        | ElementwiseOp::LeakyRelu { .. } => one(unary(inputs, is_math_float, MATH_FLOAT, None)?),
        ElementwiseOp::Not => one(unary(inputs, |d| d == Bool, "bool", None)?),
        ElementwiseOp::IsNaN | ElementwiseOp::IsInf { .. } => {
            one(unary(inputs, is_math_float, MATH_FLOAT, Some(Bool))?)
        }

        // ---- elementwise binary
        ElementwiseOp::Add
        | ElementwiseOp::Sub
        | ElementwiseOp::Mul
        | ElementwiseOp::Div
        | ElementwiseOp::Max
        | ElementwiseOp::Min => one(binary(inputs, is_numeric, NUMERIC, None)?),
        ElementwiseOp::Mod { fmod } => one(modulo(inputs, *fmod)?),
        ElementwiseOp::Pow => one(pow(inputs)?),
        ElementwiseOp::Equal => one(binary(
            inputs,
            |d| is_numeric(d) || d == Bool,
            "a numeric type or bool",
            Some(Bool),
        )?),
        ElementwiseOp::Less
        | ElementwiseOp::LessOrEqual
        | ElementwiseOp::Greater
        | ElementwiseOp::GreaterOrEqual => one(binary(inputs, is_numeric, NUMERIC, Some(Bool))?),
        ElementwiseOp::And | ElementwiseOp::Or | ElementwiseOp::Xor => {
            one(binary(inputs, |d| d == Bool, "bool", None)?)
        }
        ElementwiseOp::Where => one(where_(inputs)?),
        ElementwiseOp::Clip => one(clip(inputs)?),
        ElementwiseOp::Cast { to, .. } => {
            let [x] = args(inputs, ["input"])?;
            one(TensorType::new(*to, x.ty.shape.clone()))
        }
        ElementwiseOp::GeluGrad { .. } => {
            let [x, dy] = args(inputs, ["x", "dy"])?;
            x.expect(is_math_float(x.dtype()), MATH_FLOAT)?;
            same_as(&dy, &x)?;
            vec![x.ty.clone()]
        }
        ElementwiseOp::__Lifetime(never, _) => match never {},
    })
}

fn unary(
    inputs: &[InferInput<'_>],
    ok: fn(DType) -> bool,
    expected: &str,
    out: Option<DType>,
) -> Res<TensorType> {
    let [x] = args(inputs, ["X"])?;
    x.expect(ok(x.dtype()), expected)?;
    Ok(TensorType::new(
        out.unwrap_or(x.dtype()),
        x.ty.shape.clone(),
    ))
}

/// Same-dtype broadcasting binary op; `out` overrides the result dtype (comparisons).
fn binary(
    inputs: &[InferInput<'_>],
    ok: fn(DType) -> bool,
    expected: &str,
    out: Option<DType>,
) -> Res<TensorType> {
    let [a, b] = args(inputs, ["A", "B"])?;
    a.expect(ok(a.dtype()), expected)?;
    b.expect_same_dtype(&a)?;
    Ok(TensorType::new(
        out.unwrap_or(a.dtype()),
        broadcast(&[a, b])?,
    ))
}

fn modulo(inputs: &[InferInput<'_>], fmod: bool) -> Res<TensorType> {
    let t = binary(inputs, is_numeric, NUMERIC, None)?;
    if t.dtype.is_float() && !fmod {
        return Err(format!(
            "float inputs ({}) need fmod=true (ONNX Mod)",
            t.dtype
        ));
    }
    Ok(t)
}

/// The exponent may have another numeric dtype; the result has the base's.
fn pow(inputs: &[InferInput<'_>]) -> Res<TensorType> {
    let [x, y] = args(inputs, ["X", "Y"])?;
    x.expect(is_numeric(x.dtype()), NUMERIC)?;
    y.expect(is_numeric(y.dtype()), NUMERIC)?;
    Ok(TensorType::new(x.dtype(), broadcast(&[x, y])?))
}

fn where_(inputs: &[InferInput<'_>]) -> Res<TensorType> {
    let [cond, x, y] = args(inputs, ["condition", "X", "Y"])?;
    cond.expect(cond.dtype() == DType::Bool, "bool")?;
    y.expect_same_dtype(&x)?;
    Ok(TensorType::new(x.dtype(), broadcast(&[cond, x, y])?))
}

fn clip(inputs: &[InferInput<'_>]) -> Res<TensorType> {
    let [x, lo, hi] = args(inputs, ["input", "min", "max"])?;
    x.expect(is_numeric(x.dtype()), NUMERIC)?;
    for bound in [lo, hi] {
        bound.expect_same_dtype(&x)?;
        bound.expect_scalar_like()?;
    }
    Ok(x.ty.clone())
}
