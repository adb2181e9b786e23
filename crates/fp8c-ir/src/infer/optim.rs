//! Inference for the optim family: the SGD and AdamW steps (every state operand shaped
//! like the param; lr and t f32 scalars).

use super::InferInput;
use super::common::{Arg, MATH_FLOAT, Res, args, is_math_float, same_as};
use crate::{OptimOp, TensorType};

/// The output types of an optimizer step.
pub(super) fn infer(op: OptimOp<'_>, inputs: &[InferInput<'_>]) -> Res<Vec<TensorType>> {
    let scalar_f32 = |a: &Arg<'_>| a.expect_f32_rank(0);
    Ok(match op {
        OptimOp::SgdUpdate { .. } => {
            let [param, grad, buf, lr] = args(inputs, ["param", "grad", "momentum_buffer", "lr"])?;
            param.expect(is_math_float(param.dtype()), MATH_FLOAT)?;
            same_as(&grad, &param)?;
            same_as(&buf, &param)?;
            scalar_f32(&lr)?;
            vec![param.ty.clone(), param.ty.clone()]
        }
        OptimOp::AdamwUpdate { .. } => {
            let [param, grad, m, v, lr, t] = args(inputs, ["param", "grad", "m", "v", "lr", "t"])?;
            param.expect(is_math_float(param.dtype()), MATH_FLOAT)?;
            for x in [grad, m, v] {
                same_as(&x, &param)?;
            }
            scalar_f32(&lr)?;
            scalar_f32(&t)?;
            vec![param.ty.clone(), param.ty.clone(), param.ty.clone()]
        }
        OptimOp::__Lifetime(never, _) => match never {},
    })
}
