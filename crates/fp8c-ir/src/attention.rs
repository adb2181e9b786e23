//! Attention geometry, the one home of it: the dims of an `attention` / `attention_grad`
//! node read off its concrete input shapes, which KV head serves a query head (grouped-query
//! attention), which keys the causal flag hides, and how a broadcasting mask is indexed.
//! Type inference, the CPU kernels, the CUDA lowering and the MLIR emitter all read it.
//!
//! The semantics both ops share (`op.rs` has the rows): per batch `b` and query head `h`,
//! with `g = h / (H / Hkv)` the KV head,
//!
//! ```text
//! s[i, j] = scale · Σ_d q[b, h, i, d] · k[b, g, j, d] + mask[b, h, i, j]   (j visible to i)
//! lse[i]  = log Σ_j exp(s[i, j])          (over the visible j; −∞ when there is none)
//! o[i, :] = Σ_j exp(s[i, j] − lse[i]) · v[b, g, j, :]                      (0 when lse = −∞)
//! ```
//!
//! Key `j` is visible to query `i` unless `causal` and `j > i + Tk − Tq` (the bottom-right
//! alignment of FlashAttention and of ONNX `Attention`'s past keys; with `Tq = Tk`, PyTorch's
//! `is_causal`). A mask value of −∞ hides a key too.

/// The dims of one attention: batch, query heads, KV heads, query and key lengths, the head
/// size of q and k and that of v.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttnDims {
    /// Batch size B.
    pub batch: usize,
    /// Query heads H.
    pub heads: usize,
    /// KV heads Hkv (H is a multiple of it).
    pub kv_heads: usize,
    /// Query length Tq.
    pub q_len: usize,
    /// Key length Tk.
    pub kv_len: usize,
    /// Head size D of q and k.
    pub head_dim: usize,
    /// Head size Dv of v and o.
    pub v_dim: usize,
}

impl AttnDims {
    /// The dims of q `[B, H, Tq, D]`, k `[B, Hkv, Tk, D]` and v `[B, Hkv, Tk, Dv]`, or what
    /// does not fit.
    pub fn of(q: &[u64], k: &[u64], v: &[u64]) -> Result<AttnDims, String> {
        let four = |name: &str, s: &[u64]| -> Result<[usize; 4], String> {
            let dims: Vec<usize> = s
                .iter()
                .map(|&d| usize::try_from(d).map_err(|_| format!("{name} dim {d} is too large")))
                .collect::<Result<_, _>>()?;
            <[usize; 4]>::try_from(dims)
                .map_err(|_| format!("{name} has shape {s:?}, expected rank 4 [B, H, T, D]"))
        };
        let [b, h, tq, d] = four("q", q)?;
        let [kb, hkv, tk, kd] = four("k", k)?;
        let [vb, vh, vt, dv] = four("v", v)?;
        if kb != b || vb != b {
            return Err(format!(
                "batch sizes differ: q {b}, k {kb}, v {vb} (shapes {q:?}, {k:?}, {v:?})"
            ));
        }
        if vh != hkv || vt != tk {
            return Err(format!(
                "k {k:?} and v {v:?} must agree on heads and length"
            ));
        }
        if kd != d {
            return Err(format!("q {q:?} and k {k:?} must have the same head size"));
        }
        if (hkv == 0 && h != 0) || (hkv != 0 && !h.is_multiple_of(hkv)) {
            return Err(format!(
                "q's {h} heads are not a multiple of k's and v's {hkv}"
            ));
        }
        Ok(AttnDims {
            batch: b,
            heads: h,
            kv_heads: hkv,
            q_len: tq,
            kv_len: tk,
            head_dim: d,
            v_dim: dv,
        })
    }

    /// Query heads per KV head (`H / Hkv`; 1 without grouping).
    pub fn group(&self) -> usize {
        self.heads.checked_div(self.kv_heads).unwrap_or(1).max(1)
    }

    /// The KV head query head `h` reads.
    pub fn kv_head(&self, h: usize) -> usize {
        h / self.group()
    }

    /// The keys `0..end` query `i` may see: all of them, or with `causal` those up to
    /// `i + Tk − Tq` (none when that is negative).
    pub fn visible_end(&self, i: usize, causal: bool) -> usize {
        if !causal {
            return self.kv_len;
        }
        // j ≤ i + Tk − Tq  ⇔  j < i + 1 + Tk − Tq.
        (i + 1 + self.kv_len)
            .saturating_sub(self.q_len)
            .min(self.kv_len)
    }

    /// The shape of o, `[B, H, Tq, Dv]`.
    pub fn o_shape(&self) -> Vec<u64> {
        [self.batch, self.heads, self.q_len, self.v_dim]
            .map(|d| d as u64)
            .to_vec()
    }

    /// The shape of the log-sum-exp, `[B, H, Tq]`.
    pub fn lse_shape(&self) -> Vec<u64> {
        [self.batch, self.heads, self.q_len]
            .map(|d| d as u64)
            .to_vec()
    }

    /// The element strides of a mask of shape `mask` broadcast to `[B, H, Tq, Tk]` (0 along
    /// broadcast axes), or why it does not broadcast.
    pub fn mask_strides(&self, mask: &[u64]) -> Result<[usize; 4], String> {
        let target = [self.batch, self.heads, self.q_len, self.kv_len];
        if mask.len() > 4 {
            return Err(format!(
                "the mask has shape {mask:?}, expected rank ≤ 4 broadcasting to {target:?}"
            ));
        }
        let mut dims = [1usize; 4];
        for (slot, &d) in dims[4 - mask.len()..].iter_mut().zip(mask) {
            *slot = usize::try_from(d).map_err(|_| format!("mask dim {d} is too large"))?;
        }
        let mut strides = [0usize; 4];
        let mut step = 1usize;
        for a in (0..4).rev() {
            if dims[a] == target[a] && target[a] != 1 {
                strides[a] = step;
            } else if dims[a] != 1 {
                return Err(format!(
                    "the mask has shape {mask:?}, which does not broadcast to {target:?}"
                ));
            }
            step = step.saturating_mul(dims[a]);
        }
        Ok(strides)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grouped_heads_and_causal_ends() {
        let d = AttnDims::of(&[2, 8, 3, 16], &[2, 4, 5, 16], &[2, 4, 5, 8]).unwrap();
        assert_eq!((d.group(), d.kv_head(5), d.v_dim), (2, 2, 8));
        // Tk − Tq = 2: query 0 sees keys 0..=2.
        assert_eq!(d.visible_end(0, true), 3);
        assert_eq!(d.visible_end(2, true), 5);
        assert_eq!(d.visible_end(1, false), 5);
        let short = AttnDims::of(&[1, 1, 4, 2], &[1, 1, 2, 2], &[1, 1, 2, 2]).unwrap();
        assert_eq!(short.visible_end(0, true), 0);
        assert_eq!(short.visible_end(3, true), 2);
        assert!(AttnDims::of(&[1, 3, 4, 2], &[1, 2, 4, 2], &[1, 2, 4, 2]).is_err());
    }

    #[test]
    fn mask_strides_broadcast() {
        let d = AttnDims::of(&[2, 4, 3, 8], &[2, 4, 5, 8], &[2, 4, 5, 8]).unwrap();
        assert_eq!(d.mask_strides(&[2, 1, 1, 5]).unwrap(), [5, 0, 0, 1]);
        assert_eq!(d.mask_strides(&[3, 5]).unwrap(), [0, 0, 5, 1]);
        assert_eq!(d.mask_strides(&[]).unwrap(), [0, 0, 0, 0]);
        assert!(d.mask_strides(&[3, 4]).is_err());
    }
}
