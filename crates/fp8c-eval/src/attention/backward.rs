//! The attention backward: FlashAttention-2's Algorithm 2. With `D_i = Σ dO_i·O_i`, for each
//! key tile j (outer) and each query tile i that sees it (inner), the probabilities are
//! recomputed as `P = e^(scale·Q_i·K_jᵀ + mask − lse_i)`, then
//!
//! ```text
//! dV_j += Pᵀ·dO_i      dP = dO_i·V_jᵀ      dS = P ∘ (dP − D_i)·scale
//! dQ_i += dS·K_j       dK_j += dSᵀ·Q_i
//! ```
//!
//! A task owns one (batch, KV head) and a stripe of its key tiles (every `stripes`-th tile),
//! iterating over the KV head's query heads, so dK and dV of a grouped head are summed in
//! the task and K and V are never repeated. Each stripe has its own dQ, summed in stripe
//! order at the end; the stripe count comes from the shapes, so results do not depend on the
//! thread count.

use super::forward::{Mask, mask_row};
use super::tile::{Real, View, exp_sub, gemm, scale_mask, softmax_back};
use super::{BLOCK_K, BLOCK_Q};
use fp8c_ir::attention::AttnDims;
use rayon::prelude::*;

/// At least this many backward tasks when the key tiles allow (stripes per KV head).
const MIN_TASKS: usize = 8;

/// One task's results: dq of its KV head's query heads (`[G, Tq, D]`, this stripe's part),
/// and dk and dv of each of its key tiles.
struct Part<T> {
    dq: Vec<T>,
    dkv: Vec<(usize, Vec<T>, Vec<T>)>,
}

/// `[dq, dk, dv]` of `[q, k, v, o, do]` (row-major), lse, the mask and the attributes.
pub(super) fn run<T: Real>(
    d: &AttnDims,
    [q, k, v, o, d_o]: [&[T]; 5],
    lse: &[T],
    mask: Mask<'_, T>,
    scale: T,
    causal: bool,
) -> [Vec<T>; 3] {
    let (hd, dv, tq, tk) = (d.head_dim, d.v_dim, d.q_len, d.kv_len);
    // D_i = Σ dO_i · O_i, per query row.
    let delta: Vec<T> = (0..d.batch * d.heads * tq)
        .into_par_iter()
        .map(|row| {
            let (a, b) = (&o[row * dv..(row + 1) * dv], &d_o[row * dv..(row + 1) * dv]);
            T::from_f64(a.iter().zip(b).map(|(x, y)| x.to_f64() * y.to_f64()).sum())
        })
        .collect();
    let kv_tiles = tk.div_ceil(BLOCK_K);
    let heads = d.batch * d.kv_heads;
    let stripes = MIN_TASKS.div_ceil(heads.max(1)).min(kv_tiles).max(1);
    let g = d.group();
    let parts: Vec<Part<T>> = (0..heads * stripes)
        .into_par_iter()
        .map(|t| {
            let (bg, stripe) = (t / stripes, t % stripes);
            let (b, kvh) = (bg / d.kv_heads, bg % d.kv_heads);
            {
                let mut dq = vec![T::ZERO; g * tq * hd];
                let dkv = (stripe..kv_tiles)
                    .step_by(stripes)
                    .map(|jt| {
                        let (dk, dv) = key_tile(
                            d,
                            b,
                            kvh,
                            jt,
                            [q, k, v, d_o],
                            lse,
                            &delta,
                            mask,
                            scale,
                            causal,
                            &mut dq,
                        );
                        (jt, dk, dv)
                    })
                    .collect();
                Part { dq, dkv }
            }
        })
        .collect();
    let mut dq = vec![T::ZERO; q.len()];
    let mut dk = vec![T::ZERO; k.len()];
    let mut dvv = vec![T::ZERO; v.len()];
    for (t, part) in parts.into_iter().enumerate() {
        let bg = t / stripes;
        // The KV head's query heads are contiguous in q: heads g·kvh .. g·kvh + g of batch b.
        let span = &mut dq[bg * g * tq * hd..(bg + 1) * g * tq * hd];
        if t % stripes == 0 {
            span.copy_from_slice(&part.dq);
        } else {
            span.iter_mut().zip(&part.dq).for_each(|(a, &b)| *a += b);
        }
        for (jt, tdk, tdv) in part.dkv {
            let j0 = jt * BLOCK_K;
            dk[(bg * tk + j0) * hd..][..tdk.len()].copy_from_slice(&tdk);
            dvv[(bg * tk + j0) * dv..][..tdv.len()].copy_from_slice(&tdv);
        }
    }
    [dq, dk, dvv]
}

/// Key tile `jt` of KV head `(b, kvh)`: its dk and dv rows; adds each query head's dS·K_j
/// into `dq` (`[G, Tq, D]`, the KV head's query heads).
#[allow(clippy::too_many_arguments)]
fn key_tile<T: Real>(
    d: &AttnDims,
    b: usize,
    kvh: usize,
    jt: usize,
    [q, k, v, d_o]: [&[T]; 4],
    lse: &[T],
    delta: &[T],
    mask: Mask<'_, T>,
    scale: T,
    causal: bool,
    dq: &mut [T],
) -> (Vec<T>, Vec<T>) {
    let (hd, dv, tq, tk) = (d.head_dim, d.v_dim, d.q_len, d.kv_len);
    let j0 = jt * BLOCK_K;
    let bc = BLOCK_K.min(tk - j0);
    let kj = &k[((b * d.kv_heads + kvh) * tk + j0) * hd..][..bc * hd];
    let vj = &v[((b * d.kv_heads + kvh) * tk + j0) * dv..][..bc * dv];
    let mut dk = vec![T::ZERO; bc * hd];
    let mut dvt = vec![T::ZERO; bc * dv];
    let mut p = vec![T::ZERO; BLOCK_Q * bc];
    let mut ds = vec![T::ZERO; BLOCK_Q * bc];
    // The first query that sees key j0: visible_end(i) > j0.
    let first = if causal {
        (j0 + tq).saturating_sub(tk)
    } else {
        0
    };
    let g = d.group();
    for hg in 0..g {
        let h = kvh * g + hg;
        let bh = b * d.heads + h;
        for i0 in (first / BLOCK_Q * BLOCK_Q..tq).step_by(BLOCK_Q) {
            let rows = BLOCK_Q.min(tq - i0);
            let qi = &q[(bh * tq + i0) * hd..][..rows * hd];
            let doi = &d_o[(bh * tq + i0) * dv..][..rows * dv];
            let p = &mut p[..rows * bc];
            let ds = &mut ds[..rows * bc];
            gemm(
                rows,
                bc,
                hd,
                p,
                bc,
                false,
                View::rows(qi, hd),
                View::trans(kj, hd),
            );
            for r in 0..rows {
                let i = i0 + r;
                let vis = d.visible_end(i, causal).saturating_sub(j0).min(bc);
                let row = &mut p[r * bc..(r + 1) * bc];
                let l = lse[bh * tq + i];
                if l == T::NEG_INF {
                    // Every key hidden from this query: no probability, no gradient.
                    row.fill(T::ZERO);
                    continue;
                }
                scale_mask(row, vis, scale, mask_row(mask, b, h, i, j0));
                exp_sub(row, l);
            }
            // dV_j += Pᵀ·dO_i.
            gemm(
                bc,
                dv,
                rows,
                &mut dvt,
                dv,
                true,
                View::trans(p, bc),
                View::rows(doi, dv),
            );
            // dP = dO_i·V_jᵀ, then dS = P ∘ (dP − D_i)·scale.
            gemm(
                rows,
                bc,
                dv,
                ds,
                bc,
                false,
                View::rows(doi, dv),
                View::trans(vj, dv),
            );
            for r in 0..rows {
                let di = delta[bh * tq + i0 + r];
                let (pr, sr) = (&p[r * bc..(r + 1) * bc], &mut ds[r * bc..(r + 1) * bc]);
                softmax_back(sr, pr, di, scale);
            }
            // dQ_i += dS·K_j; dK_j += dSᵀ·Q_i.
            let dqi = &mut dq[(hg * tq + i0) * hd..][..rows * hd];
            gemm(
                rows,
                hd,
                bc,
                dqi,
                hd,
                true,
                View::rows(ds, bc),
                View::rows(kj, hd),
            );
            gemm(
                bc,
                hd,
                rows,
                &mut dk,
                hd,
                true,
                View::trans(ds, bc),
                View::rows(qi, hd),
            );
        }
    }
    (dk, dvt)
}
