//! Inference for the attention family: fused scaled dot-product attention and its gradient
//! (shapes and semantics in `crate::attention`).

use super::InferInput;
use super::common::{
    Arg, MATH_FLOAT, Res, args_opt, broadcast_shapes, fmt_shape, is_math_float, unify,
};
use crate::{AttentionOp, DType, Dim, Shape, TensorType};

/// The output types of an attention op.
pub(super) fn infer(op: AttentionOp<'_>, inputs: &[InferInput<'_>]) -> Res<Vec<TensorType>> {
    Ok(match op {
        AttentionOp::Attention { .. } => {
            let ([q, k, v], mask) = args_opt(inputs, ["q", "k", "v"], "mask")?;
            let (o, lse) = forward(&q, &k, &v, mask.as_ref())?;
            vec![o, lse]
        }
        AttentionOp::AttentionGrad { .. } => {
            let ([q, k, v, o, lse, d_o], mask) =
                args_opt(inputs, ["q", "k", "v", "o", "lse", "do"], "mask")?;
            let (o_ty, lse_ty) = forward(&q, &k, &v, mask.as_ref())?;
            for (arg, want) in [(&o, &o_ty), (&d_o, &o_ty), (&lse, &lse_ty)] {
                let fits = arg.dtype() == want.dtype
                    && arg.rank() == want.rank()
                    && arg
                        .shape()
                        .iter()
                        .zip(&want.shape)
                        .all(|(a, b)| unify(a, b).is_some());
                if !fits {
                    return Err(format!(
                        "{arg} has type {}, expected {want} (the forward's)",
                        arg.ty
                    ));
                }
            }
            vec![q.ty.clone(), k.ty.clone(), v.ty.clone()]
        }
        AttentionOp::__Lifetime(never, _) => match never {},
    })
}

/// The types of o and lse for q, k, v and the optional mask.
fn forward(
    q: &Arg<'_>,
    k: &Arg<'_>,
    v: &Arg<'_>,
    mask: Option<&Arg<'_>>,
) -> Res<(TensorType, TensorType)> {
    q.expect(is_math_float(q.dtype()), MATH_FLOAT)?;
    for a in [q, k, v] {
        a.expect_rank(4)?;
    }
    k.expect_same_dtype(q)?;
    v.expect_same_dtype(q)?;
    let (qs, ks, vs) = (q.shape(), k.shape(), v.shape());
    let same = |a: &Arg<'_>, ai: usize, b: &Arg<'_>, bi: usize, what: &str| -> Res<Dim> {
        unify(&a.shape()[ai], &b.shape()[bi]).ok_or_else(|| {
            a.shape_err(format!(
                "its {what} ({}) must equal {b}'s ({})",
                a.shape()[ai],
                b.shape()[bi]
            ))
        })
    };
    let batch = same(k, 0, q, 0, "batch")?;
    let batch = unify(&batch, &vs[0])
        .ok_or_else(|| v.shape_err(format!("its batch must equal {q}'s ({})", qs[0])))?;
    same(v, 1, k, 1, "head count")?;
    same(v, 2, k, 2, "length")?;
    same(k, 3, q, 3, "head size")?;
    if let (Dim::Known(h), Dim::Known(hkv)) = (&qs[1], &ks[1])
        && (*hkv == 0 || !h.is_multiple_of(*hkv))
    {
        return Err(q.shape_err(format!(
            "its {h} heads must be a multiple of {k}'s {hkv} KV heads"
        )));
    }
    let scores: Shape = vec![batch.clone(), qs[1].clone(), qs[2].clone(), ks[2].clone()];
    if let Some(m) = mask {
        m.expect_same_dtype(q)?;
        let fits = m.rank() <= 4
            && broadcast_shapes(m.shape(), &scores)
                .is_ok_and(|b| b.iter().zip(&scores).all(|(x, y)| unify(x, y).is_some()));
        if !fits {
            return Err(m.shape_err(format!(
                "expected a shape broadcasting to the scores {}",
                fmt_shape(&scores)
            )));
        }
    }
    let lse_dtype = if q.dtype() == DType::F64 {
        DType::F64
    } else {
        DType::F32
    };
    let o = TensorType::new(
        q.dtype(),
        vec![batch.clone(), qs[1].clone(), qs[2].clone(), vs[3].clone()],
    );
    let lse = TensorType::new(lse_dtype, vec![batch, qs[1].clone(), qs[2].clone()]);
    Ok((o, lse))
}
