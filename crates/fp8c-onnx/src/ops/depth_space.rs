//! DepthToSpace (modes DCR and CRD; PyTorch's PixelShuffle is CRD) and SpaceToDepth, imported
//! as ONNX's own definitions: reshape to 6-D, transpose, reshape back to 4-D. X is
//! `[N, C, H, W]` with static C, H and W (N may be symbolic: the reshapes copy it with 0).

use super::NodeCx;
use crate::OnnxError;
use fp8c_ir::{Op, Tensor, Value};

/// DepthToSpace with `blocksize` b: `[N, C, H, W]` → `[N, C/b², H·b, W·b]`. DCR (the default)
/// takes the channels as `[b, b, C/b²]`, CRD as `[C/b², b, b]`.
pub(super) fn depth_to_space(cx: &mut NodeCx<'_>) -> Result<Vec<Value>, OnnxError> {
    let x = cx.input(0)?;
    let b = blocksize(cx)?;
    let [c, h, w] = chw(cx, x)?;
    if c % (b * b) != 0 {
        return Err(cx.err(format!(
            "X has type {}: its {c} channels are not a multiple of blocksize² = {}",
            cx.ty(x),
            b * b
        )));
    }
    let mode = if cx.opset >= 11 {
        cx.attr_string("mode", "DCR")?
    } else {
        "DCR".to_string()
    };
    let cb = c / (b * b);
    let (split, perm) = match mode.as_str() {
        "DCR" => ([0, b, b, cb, h, w], [0, 3, 4, 1, 5, 2]),
        "CRD" => ([0, cb, b, b, h, w], [0, 1, 4, 2, 5, 3]),
        other => {
            return Err(cx.err(format!(
                "attribute `mode`: unknown value \"{other}\" (DCR or CRD)"
            )));
        }
    };
    shuffle(cx, x, split, perm, [0, cb, h * b, w * b])
}

/// SpaceToDepth with `blocksize` b: `[N, C, H, W]` → `[N, C·b², H/b, W/b]`, each b×b block's
/// pixels becoming channels (block row, block column, then the input channel).
pub(super) fn space_to_depth(cx: &mut NodeCx<'_>) -> Result<Vec<Value>, OnnxError> {
    let x = cx.input(0)?;
    let b = blocksize(cx)?;
    let [c, h, w] = chw(cx, x)?;
    if h % b != 0 || w % b != 0 {
        return Err(cx.err(format!(
            "X has type {}: its height and width are not multiples of blocksize {b}",
            cx.ty(x)
        )));
    }
    let split = [0, c, h / b, b, w / b, b];
    shuffle(
        cx,
        x,
        split,
        [0, 3, 5, 1, 2, 4],
        [0, c * b * b, h / b, w / b],
    )
}

/// The required positive `blocksize` attribute.
fn blocksize(cx: &NodeCx<'_>) -> Result<i64, OnnxError> {
    match cx.attr_int_opt("blocksize")? {
        Some(b) if b >= 1 => Ok(b),
        Some(b) => Err(cx.err(format!("attribute `blocksize` = {b} must be positive"))),
        None => Err(cx.err("attribute `blocksize` is required")),
    }
}

/// The static C, H and W of a 4-D X.
fn chw(cx: &NodeCx<'_>, x: Value) -> Result<[i64; 3], OnnxError> {
    let ty = cx.ty(x);
    let dims: Option<Vec<u64>> = match ty.rank() {
        4 => ty.shape[1..].iter().map(|d| d.known()).collect(),
        _ => None,
    };
    match dims.as_deref() {
        Some(&[c, h, w]) => Ok([c as i64, h as i64, w as i64]),
        _ => Err(cx.err(format!(
            "X has type {ty}; expected [N, C, H, W] with static C, H and W (fix the input shape, \
             e.g. --input-shape)"
        ))),
    }
}

/// `reshape(transpose(reshape(x, split), perm), out)`, the last named after the node.
fn shuffle(
    cx: &mut NodeCx<'_>,
    x: Value,
    split: [i64; 6],
    perm: [i64; 6],
    out: [i64; 4],
) -> Result<Vec<Value>, OnnxError> {
    let reshape = Op::Reshape { allowzero: false };
    let split = cx.constant("split_shape", Tensor::from_i64(vec![6], &split))?;
    let blocks = cx.add_helper("blocks", reshape.clone(), &[x, split])?;
    let perm = perm.to_vec();
    let moved = cx.add_helper("moved", Op::Transpose { perm }, &[blocks])?;
    let out = cx.constant("out_shape", Tensor::from_i64(vec![4], &out))?;
    Ok(vec![cx.add(reshape, &[moved, out])?])
}
