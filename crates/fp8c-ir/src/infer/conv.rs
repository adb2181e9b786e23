//! Inference for the conv family: N-d convolution and its two gradients (dgrad checked
//! by running the forward rule on the recorded input shape, wgrad by running it on the
//! weight shape it produces). Output sizes come from `common::window_dims`.

use super::InferInput;
use super::common::{
    Arg, MATH_FLOAT, Res, args, args_opt, fmt_list, is_math_float, kernel_attr, same_as, unify,
    window_dims,
};
use crate::window::WindowAttrs;
use crate::{ConvOp, Dim, Shape, TensorType};

/// The output types of a conv op.
pub(super) fn infer(op: ConvOp<'_>, inputs: &[InferInput<'_>]) -> Res<Vec<TensorType>> {
    let one = |t: TensorType| vec![t];
    let cw = op.conv_window();
    let (kernel_shape, win, group) = (cw.kernel_shape, &cw.window, cw.group);
    Ok(match op {
        ConvOp::Conv { .. } => one(conv(inputs, kernel_shape, win, group)?),
        ConvOp::ConvGradInput { input_shape, .. } => {
            let [dy, w] = args(inputs, ["dy", "w"])?;
            let dims = input_shape
                .iter()
                .map(|&d| u64::try_from(d).map(Dim::Known))
                .collect::<Result<Shape, _>>()
                .map_err(|_| {
                    format!(
                        "attribute input_shape={} holds a negative size",
                        fmt_list(input_shape)
                    )
                })?;
            let x_ty = TensorType::new(w.dtype(), dims);
            let y = conv(
                &[InferInput::new(&x_ty), inputs[1]],
                kernel_shape,
                win,
                group,
            )
            .map_err(|e| {
                format!(
                    "the forward conv of attribute input_shape={}: {e}",
                    fmt_list(input_shape)
                )
            })?;
            same_as(&dy, &Arg::new(0, "forward output", &InferInput::new(&y)))?;
            vec![x_ty]
        }
        ConvOp::ConvGradWeight { .. } => {
            let [x, dy] = args(inputs, ["x", "dy"])?;
            x.expect(is_math_float(x.dtype()), MATH_FLOAT)?;
            let (Some(c), Some(m)) = (x.shape().get(1), dy.shape().get(1)) else {
                return Err(x.shape_err("expected rank ≥ 3 (N, C, spatial...)"));
            };
            if kernel_shape.len() + 2 != x.rank() {
                return Err(format!(
                    "attribute kernel_shape={} needs one size per spatial axis of {x} {}",
                    fmt_list(kernel_shape),
                    x.ty
                ));
            }
            let g = u64::try_from(group)
                .ok()
                .filter(|&g| g >= 1)
                .ok_or_else(|| format!("attribute group={group}, expected ≥ 1"))?;
            let cg = match c {
                Dim::Known(c) if c.is_multiple_of(g) => Dim::Known(c / g),
                Dim::Known(c) => {
                    return Err(x.shape_err(format!(
                        "its {c} channels are not a multiple of group={group}"
                    )));
                }
                _ => Dim::Unknown,
            };
            let mut w_shape = vec![m.clone(), cg];
            w_shape.extend(kernel_attr(kernel_shape, kernel_shape.len())?);
            let w_ty = TensorType::new(x.dtype(), w_shape);
            let y = conv(
                &[inputs[0], InferInput::new(&w_ty)],
                kernel_shape,
                win,
                group,
            )?;
            same_as(&dy, &Arg::new(0, "forward output", &InferInput::new(&y)))?;
            vec![w_ty]
        }
        ConvOp::__Lifetime(never, _) => match never {},
    })
}

fn conv(
    inputs: &[InferInput<'_>],
    kernel_shape: &[i64],
    win: &WindowAttrs<'_>,
    group: i64,
) -> Res<TensorType> {
    let ([x, w], bias) = args_opt(inputs, ["X", "W"], "B")?;
    x.expect(is_math_float(x.dtype()), MATH_FLOAT)?;
    w.expect_same_dtype(&x)?;
    let [n, c, spatial @ ..] = x.shape() else {
        return Err(x.shape_err("expected rank ≥ 3 (N, C, spatial...)"));
    };
    if spatial.is_empty() {
        return Err(x.shape_err("expected rank ≥ 3 (N, C, spatial...)"));
    }
    let [m, cg, kernel @ ..] = w.shape() else {
        return Err(w.shape_err(format!("expected rank {} like {x}", x.rank())));
    };
    if w.rank() != x.rank() {
        return Err(w.shape_err(format!("expected rank {} like {x}", x.rank())));
    }
    let group_u = u64::try_from(group)
        .ok()
        .filter(|&g| g >= 1)
        .ok_or_else(|| format!("attribute group={group}, expected ≥ 1"))?;
    if let (Dim::Known(c), Dim::Known(cg)) = (c, cg)
        && cg.checked_mul(group_u) != Some(*c)
    {
        return Err(w.shape_err(format!(
            "its dim 1 ({cg}) times group ({group}) must equal input 0's channel dim ({c})"
        )));
    }
    if let Dim::Known(m) = m
        && !m.is_multiple_of(group_u)
    {
        return Err(w.shape_err(format!(
            "its dim 0 ({m} output channels) must be a multiple of group ({group})"
        )));
    }
    let kernel: Shape = if kernel_shape.is_empty() {
        kernel.to_vec()
    } else {
        let attr = kernel_attr(kernel_shape, spatial.len())?;
        if attr.iter().zip(kernel).any(|(a, k)| unify(a, k).is_none()) {
            return Err(w.shape_err(format!(
                "its kernel dims disagree with attribute kernel_shape={}",
                fmt_list(kernel_shape)
            )));
        }
        attr
    };
    let mut out_channels = m.clone();
    if let Some(b) = bias {
        b.expect_same_dtype(&x)?;
        let [bm] = b.shape() else {
            return Err(b.shape_err(format!(
                "expected a 1-D bias of {m} (input 1's dim 0) elements"
            )));
        };
        out_channels = unify(m, bm)
            .ok_or_else(|| b.shape_err(format!("expected {m} elements (input 1's dim 0)")))?;
    }
    let mut out = vec![n.clone(), out_channels];
    out.extend(window_dims(spatial, &kernel, win)?);
    Ok(TensorType::new(x.dtype(), out))
}

#[cfg(test)]
mod tests {
    use crate::window::conv_out_dim;

    #[test]
    fn out_dim_matches_hand_computed() {
        // floor((7 + 1 + 1 − 3) / 2) + 1 = 4
        assert_eq!(conv_out_dim(7, 3, 2, 1, (1, 1), false), Ok(4));
        // ceil: (5 − 2) / 2 = 1.5 → 2, +1 = 3; last window starts at 4 < 5: kept.
        assert_eq!(conv_out_dim(5, 2, 2, 1, (0, 0), true), Ok(3));
        // ceil with padding: in 4, k 2, s 2, pads (1,1): span 4, ceil 2 + 1 = 3; last start
        // (3−1)·2 = 4 ≥ 4 + 1? no → 3 kept. With pads (0,1): span 3 → 2 + 1 = 3, start 4 ≥ 4 → 2.
        assert_eq!(conv_out_dim(4, 2, 2, 1, (1, 1), true), Ok(3));
        assert_eq!(conv_out_dim(4, 2, 2, 1, (0, 1), true), Ok(2));
        assert!(conv_out_dim(2, 5, 1, 1, (0, 0), false).is_err());
        assert!(conv_out_dim(u64::MAX, 3, 1, u64::MAX, (1, 1), false).is_err());
    }
}
