//! Inference for the pool family: max and average pooling, the global pools, and the two
//! pooling gradients (dx is shaped like x; dy is checked against the forward rule).

use super::InferInput;
use super::common::{Arg, MATH_FLOAT, Res, args, is_math_float, kernel_attr, same_as, window_dims};
use crate::window::WindowAttrs;
use crate::{DType, Dim, PoolOp, TensorType};

/// The output types of a pool op.
pub(super) fn infer(op: PoolOp<'_>, inputs: &[InferInput<'_>]) -> Res<Vec<TensorType>> {
    let one = |t: TensorType| vec![t];
    Ok(match op {
        PoolOp::MaxPool {
            kernel_shape,
            strides,
            pads,
            dilations,
            ceil_mode,
            auto_pad,
        } => {
            let win = WindowAttrs {
                strides,
                pads,
                dilations,
                auto_pad: *auto_pad,
                ceil_mode: *ceil_mode,
            };
            let ok = |d: DType| is_math_float(d) || matches!(d, DType::I8 | DType::U8);
            one(pool(
                inputs,
                kernel_shape,
                &win,
                ok,
                "a float type (not FP8), i8 or u8",
            )?)
        }
        PoolOp::AveragePool {
            kernel_shape,
            strides,
            pads,
            dilations,
            ceil_mode,
            auto_pad,
            ..
        } => {
            let win = WindowAttrs {
                strides,
                pads,
                dilations,
                auto_pad: *auto_pad,
                ceil_mode: *ceil_mode,
            };
            one(pool(inputs, kernel_shape, &win, is_math_float, MATH_FLOAT)?)
        }
        PoolOp::GlobalAveragePool | PoolOp::GlobalMaxPool => one(global_pool(inputs)?),
        PoolOp::MaxPoolGrad {
            kernel_shape,
            strides,
            pads,
            dilations,
            ceil_mode,
            auto_pad,
        }
        | PoolOp::AveragePoolGrad {
            kernel_shape,
            strides,
            pads,
            dilations,
            ceil_mode,
            auto_pad,
            ..
        } => {
            let [x, dy] = args(inputs, ["x", "dy"])?;
            let win = WindowAttrs {
                strides,
                pads,
                dilations,
                auto_pad: *auto_pad,
                ceil_mode: *ceil_mode,
            };
            let y = pool(&inputs[..1], kernel_shape, &win, is_math_float, MATH_FLOAT)?;
            same_as(&dy, &Arg::new(0, "forward output", &InferInput::new(&y)))?;
            vec![x.ty.clone()]
        }
        PoolOp::__Lifetime(never, _) => match never {},
    })
}

fn pool(
    inputs: &[InferInput<'_>],
    kernel_shape: &[i64],
    win: &WindowAttrs<'_>,
    ok: fn(DType) -> bool,
    expected: &str,
) -> Res<TensorType> {
    let [x] = args(inputs, ["X"])?;
    x.expect(ok(x.dtype()), expected)?;
    let [n, c, spatial @ ..] = x.shape() else {
        return Err(x.shape_err("expected rank ≥ 3 (N, C, spatial...)"));
    };
    if spatial.is_empty() {
        return Err(x.shape_err("expected rank ≥ 3 (N, C, spatial...)"));
    }
    let kernel = kernel_attr(kernel_shape, spatial.len())?;
    let mut out = vec![n.clone(), c.clone()];
    out.extend(window_dims(spatial, &kernel, win)?);
    Ok(TensorType::new(x.dtype(), out))
}

fn global_pool(inputs: &[InferInput<'_>]) -> Res<TensorType> {
    let [x] = args(inputs, ["X"])?;
    x.expect(is_math_float(x.dtype()), MATH_FLOAT)?;
    x.expect_min_rank(3, "N, C, spatial...")?;
    let shape = x
        .shape()
        .iter()
        .enumerate()
        .map(|(i, d)| if i < 2 { d.clone() } else { Dim::Known(1) })
        .collect();
    Ok(TensorType::new(x.dtype(), shape))
}
