//! Decoded B panels of small FP8 weights, kept from one call of the FP8 GEMM to the next.
//!
//! `fp8_gemm.rs` decodes B's codes into `k × 16` f32 panels on every call, which is cheap next
//! to the product when A has many rows but not for a small model at a few tokens: at 32 rows
//! the decoding was a quarter of the GEMM's time in bert-tiny (`perf`, session 23). A weight is
//! the same tensor on every run, so its panels can be decoded once. A B tensor is recognised
//! by its storage allocation ([`StorageHandle`]: the bytes behind a live handle cannot have
//! changed), and cached the second time it is seen alive, so activations (a new allocation
//! per run) are never decoded into the cache. Only weights whose panels take at most
//! [`ENTRY_BYTES`] are cached, [`BUDGET_BYTES`] in all: large weights stream their codes (a
//! quarter of the f32 bytes) as before, and a big model's memory does not grow.
//!
//! The panels are what `decode_panel` writes, so results are the same bits with or without
//! the cache.

use fp8c_core::Fp8Format;
use fp8c_ir::{Storage, StorageHandle};
use std::sync::{Arc, Mutex};

/// Largest decoded weight kept (1 MiB of f32 panels: a 512 × 512 weight).
pub(crate) const ENTRY_BYTES: usize = 1 << 20;
/// Decoded bytes kept in all.
const BUDGET_BYTES: usize = 16 << 20;

/// One B seen by the GEMM: its allocation, shape and format, and its panels once cached.
struct Entry {
    handle: StorageHandle,
    fmt: Fp8Format,
    k: usize,
    n: usize,
    panels: Option<Arc<[f32]>>,
}

static CACHE: Mutex<Vec<Entry>> = Mutex::new(Vec::new());

/// The cached panels of the `[k, n]` codes `bytes` held by `storage`, decoding them with
/// `decode` (into a zeroed `len`-element buffer) the second time this allocation is seen;
/// `None` on the first sighting, when the panels would exceed the limits, or when `len`
/// elements exceed [`ENTRY_BYTES`].
pub(crate) fn panels(
    storage: &Storage,
    fmt: Fp8Format,
    (k, n): (usize, usize),
    len: usize,
    decode: impl FnOnce(&mut [f32]),
) -> Option<Arc<[f32]>> {
    if len.saturating_mul(4) > ENTRY_BYTES {
        return None;
    }
    let mut cache = CACHE.lock().unwrap_or_else(|e| e.into_inner());
    let used: usize = cache
        .iter()
        .filter_map(|e| e.panels.as_ref().map(|p| p.len() * 4))
        .sum();
    if let Some(e) = cache
        .iter_mut()
        .find(|e| e.handle.refers_to(storage) && e.fmt == fmt && (e.k, e.n) == (k, n))
    {
        if e.panels.is_none() && used + len * 4 <= BUDGET_BYTES {
            let mut buf = vec![0f32; len];
            decode(&mut buf);
            e.panels = Some(buf.into());
        }
        return e.panels.clone();
    }
    // A new allocation: forget the dead ones (their panels too), remember this one.
    cache.retain(|e| e.handle.is_live());
    cache.push(Entry {
        handle: storage.handle(),
        fmt,
        k,
        n,
        panels: None,
    });
    None
}
