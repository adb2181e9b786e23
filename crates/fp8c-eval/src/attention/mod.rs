//! The attention family: `attention` and `attention_grad`, FlashAttention-2's algorithm on
//! the CPU (the semantics are `fp8c_ir::attention`'s).
//!
//! Neither kernel holds a score matrix: the forward (`forward.rs`) walks each tile of
//! [`BLOCK_Q`] queries over tiles of [`BLOCK_K`] keys with the online softmax (a running row
//! maximum and sum, the partial output rescaled when the maximum grows), and keeps only the
//! output and the row log-sum-exp; the backward (`backward.rs`) recomputes each tile's
//! probabilities from q, k and that log-sum-exp. Tiles wholly above the causal diagonal are
//! never visited. Grouped-query attention reads each KV head in place for its query heads;
//! nothing is repeated.
//!
//! Arithmetic: f32 inputs compute in f32 (the tile products on the `gemm` crate, f32
//! accumulation, like the unfused matmuls; `exp` is `fp8c_ir::fmath::exp_f32`, correctly
//! rounded), f64 in f64 (the gradient checks), f16 and bf16 widen to f32 and round once at
//! the end. The log-sum-exp is f32 (f64 for f64 inputs).
//!
//! Determinism: work is split over (batch, head, query tile) in the forward and over
//! (batch, KV head, key-tile stripe) in the backward, a split that depends on the shapes
//! alone; each output element is summed by one task in a fixed order (the stripes' partial
//! dq summed in stripe order), so results never depend on the thread count.

mod backward;
mod forward;
mod tile;

use crate::data::{Data, numel};
use crate::error::{ErrorKind, Fail, KResult, dtype_err, shape_err};
use fp8c_ir::attention::AttnDims;
use fp8c_ir::{AttentionOp, DType, Support, Tensor};
use std::borrow::Cow;

/// Queries per tile.
pub(crate) const BLOCK_Q: usize = 128;
/// Keys per tile.
pub(crate) const BLOCK_K: usize = 128;

/// Evaluates an op of the attention family.
pub(crate) fn eval(op: AttentionOp<'_>, inputs: &[&Tensor]) -> KResult<Vec<Tensor>> {
    match op {
        AttentionOp::Attention { scale, causal } => {
            let (qkv, mask) = match inputs {
                [q, k, v] => ([*q, *k, *v], None),
                [q, k, v, m] => ([*q, *k, *v], Some(*m)),
                _ => return Fail::arity("3 or 4", inputs.len()),
            };
            attention(qkv, mask, *scale, *causal)
        }
        AttentionOp::AttentionGrad { scale, causal } => {
            let (six, mask) = match inputs {
                [q, k, v, o, lse, d_o] => ([*q, *k, *v, *o, *lse, *d_o], None),
                [q, k, v, o, lse, d_o, m] => ([*q, *k, *v, *o, *lse, *d_o], Some(*m)),
                _ => return Fail::arity("6 or 7", inputs.len()),
            };
            attention_grad(six, mask, *scale, *causal)
        }
        AttentionOp::__Lifetime(never, _) => match never {},
    }
}

/// Every op of the family is evaluated.
pub(crate) fn support(op: AttentionOp<'_>) -> Support {
    match op {
        AttentionOp::Attention { .. } | AttentionOp::AttentionGrad { .. } => Support::Yes,
        AttentionOp::__Lifetime(never, _) => match never {},
    }
}

/// The checked geometry of q, k, v and the mask's broadcast strides.
fn geometry(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: Option<&Tensor>,
) -> KResult<(AttnDims, Option<[usize; 4]>)> {
    let dt = q.dtype();
    if !matches!(dt, DType::F32 | DType::F64 | DType::F16 | DType::BF16) {
        return dtype_err!("q must be f32, f64, f16 or bf16, got {dt}");
    }
    for (name, t) in [("k", k), ("v", v)]
        .into_iter()
        .chain(mask.map(|m| ("mask", m)))
    {
        if t.dtype() != dt {
            return dtype_err!("{name} is {}, expected {dt} like q", t.dtype());
        }
    }
    let dims = AttnDims::of(q.shape(), k.shape(), v.shape())
        .map_err(|m| Fail::new(ErrorKind::Shape, m))?;
    let strides = mask
        .map(|m| dims.mask_strides(m.shape()))
        .transpose()
        .map_err(|m| Fail::new(ErrorKind::Shape, m))?;
    numel(&dims.o_shape())?;
    Ok((dims, strides))
}

/// Values as f32 (f16/bf16 widened) or f64, by the tensors' shared dtype.
enum Vals<'a> {
    F32(Vec<Cow<'a, [f32]>>),
    F64(Vec<Cow<'a, [f64]>>),
}

fn load_all<'a>(ts: &[&'a Tensor]) -> KResult<Vals<'a>> {
    let mut f32s = Vec::new();
    let mut f64s = Vec::new();
    for t in ts {
        match Data::load(t)? {
            Data::F32(v) => f32s.push(v),
            Data::F64(v) => f64s.push(v),
            _ => return dtype_err!("expected float inputs, got {}", t.dtype()),
        }
    }
    match (f32s.is_empty(), f64s.is_empty()) {
        (false, true) => Ok(Vals::F32(f32s)),
        (true, false) => Ok(Vals::F64(f64s)),
        _ => dtype_err!("inputs of mixed float types"),
    }
}

/// f32 results as a tensor of `dtype` (f32, or f16/bf16 rounded once).
fn store_f32(dtype: DType, shape: Vec<u64>, v: Vec<f32>) -> KResult<Tensor> {
    Data::F32(Cow::Owned(v)).store(dtype, shape)
}

/// f64 results as an f64 tensor.
fn store_f64(shape: Vec<u64>, v: Vec<f64>) -> KResult<Tensor> {
    Data::F64(Cow::Owned(v)).store(DType::F64, shape)
}

/// `attention`: outputs o and lse.
fn attention(
    qkv: [&Tensor; 3],
    mask: Option<&Tensor>,
    scale: f64,
    causal: bool,
) -> KResult<Vec<Tensor>> {
    let [q, k, v] = qkv;
    let (dims, mstr) = geometry(q, k, v, mask)?;
    let dt = q.dtype();
    let mut ts = vec![q, k, v];
    ts.extend(mask);
    let (o_shape, lse_shape) = (dims.o_shape(), dims.lse_shape());
    Ok(match load_all(&ts)? {
        Vals::F32(vals) => {
            let m = mask.map(|_| (&*vals[3], mstr.unwrap_or_default()));
            let (o, lse) =
                forward::run::<f32>(&dims, &vals[0], &vals[1], &vals[2], m, scale as f32, causal);
            vec![
                store_f32(dt, o_shape, o)?,
                store_f32(DType::F32, lse_shape, lse)?,
            ]
        }
        Vals::F64(vals) => {
            let m = mask.map(|_| (&*vals[3], mstr.unwrap_or_default()));
            let (o, lse) =
                forward::run::<f64>(&dims, &vals[0], &vals[1], &vals[2], m, scale, causal);
            vec![store_f64(o_shape, o)?, store_f64(lse_shape, lse)?]
        }
    })
}

/// `attention_grad`: outputs dq, dk, dv.
fn attention_grad(
    six: [&Tensor; 6],
    mask: Option<&Tensor>,
    scale: f64,
    causal: bool,
) -> KResult<Vec<Tensor>> {
    let [q, k, v, o, lse, d_o] = six;
    let (dims, mstr) = geometry(q, k, v, mask)?;
    let dt = q.dtype();
    let lse_dt = if dt == DType::F64 {
        DType::F64
    } else {
        DType::F32
    };
    let o_shape = dims.o_shape();
    for (name, t) in [("o", o), ("do", d_o)] {
        if t.dtype() != dt || t.shape() != o_shape.as_slice() {
            return shape_err!(
                "{name} is {} {:?}, expected {dt} {o_shape:?}",
                t.dtype(),
                t.shape()
            );
        }
    }
    if lse.dtype() != lse_dt || lse.shape() != dims.lse_shape().as_slice() {
        return shape_err!(
            "lse is {} {:?}, expected {lse_dt} {:?}",
            lse.dtype(),
            lse.shape(),
            dims.lse_shape()
        );
    }
    let mut ts = vec![q, k, v, o, d_o];
    ts.extend(mask);
    let shapes = [q.shape().to_vec(), k.shape().to_vec(), v.shape().to_vec()];
    let grads = match load_all(&ts)? {
        Vals::F32(vals) => {
            let lse = lse
                .as_slice::<f32>()
                .map_err(|m| Fail::new(ErrorKind::DType, m))?;
            let m = mask.map(|_| (&*vals[5], mstr.unwrap_or_default()));
            let g = backward::run::<f32>(
                &dims,
                [&vals[0], &vals[1], &vals[2], &vals[3], &vals[4]],
                lse,
                m,
                scale as f32,
                causal,
            );
            g.into_iter()
                .zip(shapes)
                .map(|(g, s)| store_f32(dt, s, g))
                .collect::<KResult<Vec<_>>>()?
        }
        Vals::F64(vals) => {
            let lse = lse
                .as_slice::<f64>()
                .map_err(|m| Fail::new(ErrorKind::DType, m))?;
            let m = mask.map(|_| (&*vals[5], mstr.unwrap_or_default()));
            let g = backward::run::<f64>(
                &dims,
                [&vals[0], &vals[1], &vals[2], &vals[3], &vals[4]],
                lse,
                m,
                scale,
                causal,
            );
            g.into_iter()
                .zip(shapes)
                .map(|(g, s)| store_f64(s, g))
                .collect::<KResult<Vec<_>>>()?
        }
    };
    Ok(grads)
}
