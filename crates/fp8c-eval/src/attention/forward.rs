//! The attention forward: FlashAttention-2's Algorithm 1 per query tile. For each tile of
//! keys the scores `S = scale·Q·Kᵀ + mask` are formed, the running row maximum `m` and sum
//! `l` updated, the tile's probabilities `e^(S − m)` multiplied into the output accumulator
//! (first rescaled by `e^(m_old − m)`), and at the end `o = acc / l`, `lse = m + ln l`.

use super::tile::{MaskRow, Real, View, exp_sub_sum, gemm, max_nan, scale_mask};
use super::{BLOCK_K, BLOCK_Q};
use fp8c_ir::attention::AttnDims;
use rayon::prelude::*;

/// A mask's values and its broadcast strides over `[B, H, Tq, Tk]`.
pub(crate) type Mask<'a, T> = Option<(&'a [T], [usize; 4])>;

/// The mask row of query `i` of head `(b, h)` from key `j0` on.
pub(super) fn mask_row<'a, T>(
    mask: Mask<'a, T>,
    b: usize,
    h: usize,
    i: usize,
    j0: usize,
) -> Option<MaskRow<'a, T>> {
    mask.map(|(data, s)| MaskRow {
        data,
        start: b * s[0] + h * s[1] + i * s[2] + j0 * s[3],
        step: s[3],
    })
}

/// o `[B, H, Tq, Dv]` and lse `[B, H, Tq]` of q, k, v (row-major) and the mask.
pub(super) fn run<T: Real>(
    d: &AttnDims,
    q: &[T],
    k: &[T],
    v: &[T],
    mask: Mask<'_, T>,
    scale: T,
    causal: bool,
) -> (Vec<T>, Vec<T>) {
    let tiles = d.q_len.div_ceil(BLOCK_Q);
    let tasks = d.batch * d.heads * tiles;
    let parts: Vec<(Vec<T>, Vec<T>)> = (0..tasks)
        .into_par_iter()
        .map(|t| {
            let (bh, tile) = (t / tiles, t % tiles);
            let (b, h) = (bh / d.heads, bh % d.heads);
            let i0 = tile * BLOCK_Q;
            let rows = BLOCK_Q.min(d.q_len - i0);
            q_tile(d, b, h, i0, rows, q, k, v, mask, scale, causal)
        })
        .collect();
    // Tasks are in (b, h, tile) order: the outputs' own order.
    let mut o = Vec::with_capacity(d.batch * d.heads * d.q_len * d.v_dim);
    let mut lse = Vec::with_capacity(d.batch * d.heads * d.q_len);
    for (po, pl) in parts {
        o.extend_from_slice(&po);
        lse.extend_from_slice(&pl);
    }
    (o, lse)
}

/// One query tile: rows `i0..i0 + rows` of head `(b, h)`; its o rows and lse entries.
#[allow(clippy::too_many_arguments)]
fn q_tile<T: Real>(
    d: &AttnDims,
    b: usize,
    h: usize,
    i0: usize,
    rows: usize,
    q: &[T],
    k: &[T],
    v: &[T],
    mask: Mask<'_, T>,
    scale: T,
    causal: bool,
) -> (Vec<T>, Vec<T>) {
    let (hd, dv, tk) = (d.head_dim, d.v_dim, d.kv_len);
    let g = d.kv_head(h);
    let qt = &q[((b * d.heads + h) * d.q_len + i0) * hd..][..rows * hd];
    let kh = &k[(b * d.kv_heads + g) * tk * hd..][..tk * hd];
    let vh = &v[(b * d.kv_heads + g) * tk * dv..][..tk * dv];
    // The tile's last row sees the most keys.
    let end = d.visible_end(i0 + rows - 1, causal);
    let mut acc = vec![T::ZERO; rows * dv];
    let mut m = vec![T::NEG_INF; rows];
    let mut l = vec![0f64; rows];
    let mut s = vec![T::ZERO; rows * BLOCK_K];
    for j0 in (0..end).step_by(BLOCK_K) {
        let bc = BLOCK_K.min(end - j0);
        let s = &mut s[..rows * bc];
        gemm(
            rows,
            bc,
            hd,
            s,
            bc,
            false,
            View::rows(qt, hd),
            View::trans(&kh[j0 * hd..], hd),
        );
        for r in 0..rows {
            let vis = d.visible_end(i0 + r, causal).saturating_sub(j0).min(bc);
            let row = &mut s[r * bc..(r + 1) * bc];
            scale_mask(row, vis, scale, mask_row(mask, b, h, i0 + r, j0));
            let m_new = {
                let mx = max_nan(&row[..vis]);
                if mx.is_nan() || m[r].is_nan() {
                    T::from_f64(f64::NAN)
                } else if mx > m[r] {
                    mx
                } else {
                    m[r]
                }
            };
            if m_new == T::NEG_INF {
                // No key of this row is visible yet: nothing to add.
                row.fill(T::ZERO);
                continue;
            }
            let sum = exp_sub_sum(&mut row[..vis], m_new);
            row[vis..].fill(T::ZERO);
            let alpha = T::exp_diff(m[r], m_new);
            if alpha != T::ONE {
                acc[r * dv..(r + 1) * dv]
                    .iter_mut()
                    .for_each(|x| *x *= alpha);
            }
            l[r] = l[r] * alpha.to_f64() + sum;
            m[r] = m_new;
        }
        gemm(
            rows,
            dv,
            bc,
            &mut acc,
            dv,
            true,
            View::rows(s, bc),
            View::rows(&vh[j0 * dv..], dv),
        );
    }
    let mut lse = vec![T::NEG_INF; rows];
    for r in 0..rows {
        let row = &mut acc[r * dv..(r + 1) * dv];
        if l[r] == 0.0 && !m[r].is_nan() {
            // Every key hidden: o = 0, lse = −∞.
            row.fill(T::ZERO);
            continue;
        }
        let sum = l[r];
        row.iter_mut()
            .for_each(|x| *x = T::from_f64(x.to_f64() / sum));
        lse[r] = T::from_f64(m[r].to_f64() + l[r].ln());
    }
    (acc, lse)
}
