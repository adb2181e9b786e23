//! MaxPool's second output, `Indices`: for every output element, the flat index (over the
//! whole of X, row-major, or column-major over the spatial axes with `storage_order` = 1) of
//! the first largest input in its window, padding excluded — as ONNX's reference picks it.
//!
//! Imported as data movement and a reduction the IR has, planned at import from X's static
//! shape: the window taps of every output position are gathered from X flattened over its
//! spatial axes (`[N, C, Q, K]` for Q output positions and K taps; a tap in the padding reads
//! its window's first real tap, so it never wins on its own), `arg_max` over the taps picks
//! the first largest, and a table of the taps' flat indices (a padding tap's entry is its
//! window's first real tap) turns that into the input position, to which `(n·C + c)·P` is
//! added.

use super::{NodeCx, known_dims};
use crate::OnnxError;
use fp8c_ir::{AutoPad, Op, Tensor, Value};

/// The window attributes of the MaxPool node.
pub(super) struct PoolGeometry<'a> {
    pub kernel: &'a [i64],
    pub strides: &'a [i64],
    pub pads: &'a [i64],
    pub dilations: &'a [i64],
    pub auto_pad: AutoPad,
}

/// Row-major (or, `reverse`, column-major) strides of `dims`.
fn strides_of(dims: &[u64], reverse: bool) -> Vec<i64> {
    let mut s = vec![1i64; dims.len()];
    if reverse {
        for j in 1..dims.len() {
            s[j] = s[j - 1] * dims[j - 1] as i64;
        }
    } else {
        for j in (0..dims.len().saturating_sub(1)).rev() {
            s[j] = s[j + 1] * dims[j + 1] as i64;
        }
    }
    s
}

/// The coordinates of flat position `i` over `dims`, row-major.
fn unflatten(mut i: u64, dims: &[u64]) -> Vec<i64> {
    let mut c = vec![0i64; dims.len()];
    for j in (0..dims.len()).rev() {
        c[j] = (i % dims[j]) as i64;
        i /= dims[j];
    }
    c
}

/// The Indices output of MaxPool `y` of `x`.
pub(super) fn max_pool_indices(
    cx: &mut NodeCx<'_>,
    x: Value,
    y: Value,
    g: &PoolGeometry<'_>,
    storage_order: bool,
) -> Result<Value, OnnxError> {
    let (xty, yty) = (cx.ty(x).clone(), cx.ty(y).clone());
    let n = g.kernel.len();
    let (Some(xd), Some(yd)) = (known_dims(&xty.shape), known_dims(&yty.shape)) else {
        return Err(cx.err(format!(
            "output 1 (Indices) needs static dims: X has type {xty}, Y {yty} (fix the input \
             shape, e.g. --input-shape)"
        )));
    };
    if xd.len() != n + 2 || yd.len() != n + 2 {
        return Err(cx.err(format!(
            "X {xty} must have rank {} for a {n}-d kernel",
            n + 2
        )));
    }
    let (sp_in, sp_out) = (&xd[2..], &yd[2..]);
    let kdims: Vec<u64> = g.kernel.iter().map(|&k| k.max(1) as u64).collect();
    // The start pads actually used.
    let begin: Vec<i64> = (0..n)
        .map(|j| match g.auto_pad {
            AutoPad::NotSet => g.pads.get(j).copied().unwrap_or(0),
            AutoPad::Valid => 0,
            AutoPad::SameUpper | AutoPad::SameLower => {
                let total = ((sp_out[j] as i64 - 1) * g.strides[j]
                    + (g.kernel[j] - 1) * g.dilations[j]
                    + 1
                    - sp_in[j] as i64)
                    .max(0);
                if g.auto_pad == AutoPad::SameUpper {
                    total / 2
                } else {
                    total - total / 2
                }
            }
        })
        .collect();
    let (p, q, k) = (
        sp_in.iter().product::<u64>(),
        sp_out.iter().product::<u64>(),
        kdims.iter().product::<u64>(),
    );
    let gathered = xd[0]
        .saturating_mul(xd[1])
        .saturating_mul(q)
        .saturating_mul(k)
        .saturating_mul(xty.dtype.size() as u64);
    for bytes in [gathered, q.saturating_mul(k).saturating_mul(16)] {
        fp8c_ir::memory::check_tensor_bytes(bytes).map_err(|m| {
            cx.err(format!(
                "output 1 (Indices) gathers {k} taps for each of {q} output positions: {m}"
            ))
        })?;
    }
    let (row, reported) = (strides_of(sp_in, false), strides_of(sp_in, storage_order));
    let mut src = Vec::with_capacity((q * k) as usize);
    let mut table = Vec::with_capacity((q * k) as usize);
    for qi in 0..q {
        let o = unflatten(qi, sp_out);
        let taps: Vec<Option<(i64, i64)>> = (0..k)
            .map(|ti| {
                let t = unflatten(ti, &kdims);
                let mut at = (0i64, 0i64);
                for j in 0..n {
                    let c = o[j] * g.strides[j] - begin[j] + t[j] * g.dilations[j];
                    if c < 0 || c >= sp_in[j] as i64 {
                        return None;
                    }
                    at.0 += c * row[j];
                    at.1 += c * reported[j];
                }
                Some(at)
            })
            .collect();
        let first = taps.iter().flatten().next().copied().unwrap_or((0, 0));
        for t in taps {
            let (s, r) = t.unwrap_or(first);
            src.push(s);
            table.push(r);
        }
    }
    let (nb, c) = (xd[0], xd[1]);
    let flat_shape = Tensor::from_i64(vec![3], &[nb as i64, c as i64, p as i64]);
    let flat_shape = cx.constant("indices.flat_shape", flat_shape)?;
    let flat = cx.add_helper(
        "indices.flat",
        Op::Reshape { allowzero: false },
        &[x, flat_shape],
    )?;
    let src = cx.constant("indices.taps", Tensor::from_i64(vec![q, k], &src))?;
    let windows = cx.add_helper("indices.windows", Op::Gather { axis: 2 }, &[flat, src])?;
    let arg = Op::ArgMax {
        axis: 3,
        keepdims: true,
        select_last_index: false,
    };
    let best = cx.add_helper("indices.best_tap", arg, &[windows])?;
    let row_start: Vec<i64> = (0..q as i64).map(|i| i * k as i64).collect();
    let row_start = cx.constant(
        "indices.row_start",
        Tensor::from_i64(vec![q, 1], &row_start),
    )?;
    let at = cx.add_helper("indices.table_at", Op::Add, &[best, row_start])?;
    let table = cx.constant("indices.table", Tensor::from_i64(vec![q * k], &table))?;
    let spatial = cx.add_helper("indices.spatial", Op::Gather { axis: 0 }, &[table, at])?;
    let base: Vec<i64> = (0..nb * c).map(|i| (i * p) as i64).collect();
    let base = cx.constant(
        "indices.channel_base",
        Tensor::from_i64(vec![nb, c, 1, 1], &base),
    )?;
    let flat_idx = cx.add_helper("indices.flat_index", Op::Add, &[spatial, base])?;
    let out_shape: Vec<i64> = yd.iter().map(|&d| d as i64).collect();
    let out_shape = cx.constant(
        "indices.shape",
        Tensor::from_i64(vec![out_shape.len() as u64], &out_shape),
    )?;
    cx.add_helper(
        "indices",
        Op::Reshape { allowzero: false },
        &[flat_idx, out_shape],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strides_in_both_orders() {
        assert_eq!(strides_of(&[2, 3, 4], false), [12, 4, 1]);
        assert_eq!(strides_of(&[2, 3, 4], true), [1, 2, 6]);
        assert_eq!(unflatten(7, &[2, 3, 4]), [0, 1, 3]);
    }
}
