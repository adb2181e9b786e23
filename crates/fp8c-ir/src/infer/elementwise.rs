//! Inference for the elementwise family, read from each op's row (`crate::elementwise`): its
//! kind says how operands combine (unary and predicates keep the shape, binary ops broadcast,
//! comparisons and predicates give bool) and its types which element types the inputs may
//! have; only the `Own` ops (`not`, `pow`, `mod`, `where`, `clip`, `cast`, `gelu_grad`) have
//! rules of their own here.

use super::InferInput;
use super::common::{Res, args, broadcast, same_as};
use crate::elementwise::{Kind, Own, Types, row};
use crate::{DType, ElementwiseOp, TensorType};

/// The output types of an elementwise op.
pub(super) fn infer(op: ElementwiseOp<'_>, inputs: &[InferInput<'_>]) -> Res<Vec<TensorType>> {
    use DType::Bool;
    let row = row(op);
    let types = row.types;
    Ok(vec![match row.kind {
        Kind::Unary => unary(inputs, types, None)?,
        Kind::Predicate => unary(inputs, types, Some(Bool))?,
        // A variadic op (`max`, `min`) is inferred with two inputs, as the importer gives it.
        Kind::Binary | Kind::Variadic | Kind::Logic => binary(inputs, types, None)?,
        Kind::Compare => binary(inputs, types, Some(Bool))?,
        Kind::Own(own) => match own {
            Own::Not => unary(inputs, types, None)?,
            Own::Mod { fmod } => modulo(inputs, types, fmod)?,
            Own::Pow => pow(inputs, types)?,
            Own::Where => where_(inputs)?,
            Own::Clip => clip(inputs, types)?,
            Own::Cast { to, .. } => {
                let [x] = args(inputs, ["input"])?;
                TensorType::new(to, x.ty.shape.clone())
            }
            Own::GeluGrad { .. } => {
                let [x, dy] = args(inputs, ["x", "dy"])?;
                x.expect(types.admits(x.dtype()), types.expected())?;
                same_as(&dy, &x)?;
                x.ty.clone()
            }
        },
    }])
}

fn unary(inputs: &[InferInput<'_>], types: Types, out: Option<DType>) -> Res<TensorType> {
    let [x] = args(inputs, ["X"])?;
    x.expect(types.admits(x.dtype()), types.expected())?;
    Ok(TensorType::new(
        out.unwrap_or(x.dtype()),
        x.ty.shape.clone(),
    ))
}

/// Same-dtype broadcasting binary op; `out` overrides the result dtype (comparisons).
fn binary(inputs: &[InferInput<'_>], types: Types, out: Option<DType>) -> Res<TensorType> {
    let [a, b] = args(inputs, ["A", "B"])?;
    a.expect(types.admits(a.dtype()), types.expected())?;
    b.expect_same_dtype(&a)?;
    Ok(TensorType::new(
        out.unwrap_or(a.dtype()),
        broadcast(&[a, b])?,
    ))
}

fn modulo(inputs: &[InferInput<'_>], types: Types, fmod: bool) -> Res<TensorType> {
    let t = binary(inputs, types, None)?;
    if t.dtype.is_float() && !fmod {
        return Err(format!(
            "float inputs ({}) need fmod=true (ONNX Mod)",
            t.dtype
        ));
    }
    Ok(t)
}

/// The exponent may have another numeric dtype; the result has the base's.
fn pow(inputs: &[InferInput<'_>], types: Types) -> Res<TensorType> {
    let [x, y] = args(inputs, ["X", "Y"])?;
    x.expect(types.admits(x.dtype()), types.expected())?;
    y.expect(types.admits(y.dtype()), types.expected())?;
    Ok(TensorType::new(x.dtype(), broadcast(&[x, y])?))
}

fn where_(inputs: &[InferInput<'_>]) -> Res<TensorType> {
    let [cond, x, y] = args(inputs, ["condition", "X", "Y"])?;
    cond.expect(cond.dtype() == DType::Bool, "bool")?;
    y.expect_same_dtype(&x)?;
    Ok(TensorType::new(x.dtype(), broadcast(&[cond, x, y])?))
}

fn clip(inputs: &[InferInput<'_>], types: Types) -> Res<TensorType> {
    let [x, lo, hi] = args(inputs, ["input", "min", "max"])?;
    x.expect(types.admits(x.dtype()), types.expected())?;
    for bound in [lo, hi] {
        bound.expect_same_dtype(&x)?;
        bound.expect_scalar_like()?;
    }
    Ok(x.ty.clone())
}
