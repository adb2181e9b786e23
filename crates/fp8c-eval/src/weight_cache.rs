//! Forms of small weights that the GEMMs derive on every call, kept from one call to the
//! next ([`Form`]):
//! - FP8 B panels: `fp8_gemm.rs` decodes B's codes into `k × 16` f32 panels on every call,
//!   cheap next to the product when A has many rows but not for a small model at a few
//!   tokens: at 32 rows the decoding was a quarter of the GEMM's time in bert-tiny (`perf`,
//!   session 23);
//! - a transposed f32 B: ONNX `Gemm` with `transB = 1` (PyTorch's `nn.Linear` weight as it is
//!   exported) hands the `gemm` crate a B whose k axis is contiguous, which it repacks on
//!   every call: 68% of the digits MLP's f32 run at two rows (`perf`, session 23).
//!
//! A weight is the same tensor on every run. It is recognised by its storage allocation
//! ([`StorageHandle`]: the bytes behind a live handle cannot have changed) and cached the
//! second time it is seen alive, so activations (a new allocation per run) are never cached.
//! Only forms of at most [`ENTRY_BYTES`] are kept, [`BUDGET_BYTES`] in all: large weights go
//! the per-call way as before, and a big model's memory does not grow.
//!
//! Each form holds exactly the values the per-call path computes (decoded codes, moved
//! floats), so results are the same bits with or without the cache.

use fp8c_core::Fp8Format;
use fp8c_ir::{Storage, StorageHandle};
use std::sync::{Arc, Mutex};

/// Largest form kept (1 MiB of f32: a 512 × 512 weight).
pub(crate) const ENTRY_BYTES: usize = 1 << 20;
/// Bytes kept in all.
const BUDGET_BYTES: usize = 16 << 20;

/// What is derived from a weight's bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Form {
    /// A `[k, n]` FP8 B decoded into `fp8_gemm.rs`'s panels.
    Fp8Panels(Fp8Format),
    /// A stored `[n, k]` f32 B as the row-major `[k, n]` it stands for.
    Transposed,
}

/// One weight seen by a GEMM: its allocation, form and shape, and the form once cached.
struct Entry {
    handle: StorageHandle,
    form: Form,
    k: usize,
    n: usize,
    data: Option<Arc<[f32]>>,
}

static CACHE: Mutex<Vec<Entry>> = Mutex::new(Vec::new());

/// The cached `form` of the `[k, n]` weight held by `storage`, made by `fill` (into a zeroed
/// `len`-element buffer) the second time this allocation is seen; `None` on the first
/// sighting, beyond [`BUDGET_BYTES`], or when `len` elements exceed [`ENTRY_BYTES`].
pub(crate) fn derived(
    storage: &Storage,
    form: Form,
    (k, n): (usize, usize),
    len: usize,
    fill: impl FnOnce(&mut [f32]),
) -> Option<Arc<[f32]>> {
    if len.saturating_mul(4) > ENTRY_BYTES {
        return None;
    }
    let mut cache = CACHE.lock().unwrap_or_else(|e| e.into_inner());
    let used: usize = cache
        .iter()
        .filter_map(|e| e.data.as_ref().map(|p| p.len() * 4))
        .sum();
    if let Some(e) = cache
        .iter_mut()
        .find(|e| e.handle.refers_to(storage) && e.form == form && (e.k, e.n) == (k, n))
    {
        if e.data.is_none() && used + len * 4 <= BUDGET_BYTES {
            let mut buf = vec![0f32; len];
            fill(&mut buf);
            e.data = Some(buf.into());
        }
        return e.data.clone();
    }
    // A new allocation: forget the dead ones (their data too), remember this one.
    cache.retain(|e| e.handle.is_live());
    cache.push(Entry {
        handle: storage.handle(),
        form,
        k,
        n,
        data: None,
    });
    None
}

#[cfg(test)]
mod tests {
    use fp8c_ir::{Op, Tensor};

    /// `gemm { transB }` on one weight, called four times (first and second sighting, then
    /// from the cache), gives the bits of `gemm` on the weight transposed by hand, and so does
    /// a weight that is rewritten in place between calls (its bytes move, the cache misses).
    #[test]
    fn a_cached_transposed_weight_gives_the_uncached_bits() {
        let (m, k, n) = (3usize, 37usize, 21usize);
        let a: Vec<f32> = (0..m * k)
            .map(|i| ((i * 7 % 13) as f32 - 6.0) / 7.0)
            .collect();
        let w: Vec<f32> = (0..n * k)
            .map(|i| ((i * 5 % 11) as f32 - 5.0) / 3.0)
            .collect();
        let wt: Vec<f32> = (0..k * n).map(|i| w[(i % n) * k + i / n]).collect();
        let a = Tensor::from_f32(vec![m as u64, k as u64], &a);
        let gemm = |trans_b| Op::Gemm {
            alpha: 1.0,
            beta: 1.0,
            trans_a: false,
            trans_b,
        };
        let want = crate::eval_op(
            &gemm(false),
            &[&a, &Tensor::from_f32(vec![k as u64, n as u64], &wt)],
        )
        .unwrap()
        .remove(0);
        let mut b = Tensor::from_f32(vec![n as u64, k as u64], &w);
        for call in 0..4 {
            let got = crate::eval_op(&gemm(true), &[&a, &b]).unwrap().remove(0);
            assert_eq!(got.bytes(), want.bytes(), "call {call}");
        }
        // A write to the weight: the cached transpose must not be used for the new values.
        b.bytes_mut()[..4].copy_from_slice(&2.5f32.to_le_bytes());
        let mut wt2 = wt.clone();
        wt2[0] = 2.5;
        let want2 = crate::eval_op(
            &gemm(false),
            &[&a, &Tensor::from_f32(vec![k as u64, n as u64], &wt2)],
        )
        .unwrap()
        .remove(0);
        for call in 0..3 {
            let got = crate::eval_op(&gemm(true), &[&a, &b]).unwrap().remove(0);
            assert_eq!(got.bytes(), want2.bytes(), "after the write, call {call}");
        }
    }
}
