//! Per-thread scratch buffers that the convolution kernels reuse from call to call (im2col
//! matrices, padded input planes), so a conv neither takes fresh pages from the allocator
//! (page faults, and the kernel zeroing them) nor zero-fills a buffer it overwrites anyway.
//!
//! A buffer's contents are whatever the last user left there: callers write every element
//! they later read. One buffer per thread and element type; a request while that buffer is
//! in use on the same thread (a rayon worker that picks up another conv's task while it
//! waits), or one larger than [`KEEP_BYTES`], gets a fresh zeroed buffer for the call alone.

use std::cell::RefCell;
use std::thread::LocalKey;

/// Largest scratch buffer kept between calls, in bytes (ResNet-50's largest im2col matrix,
/// 576 × 3136 f32, is 7 MiB).
const KEEP_BYTES: usize = 64 << 20;

/// Element types with a per-thread scratch buffer.
pub(crate) trait ScratchElem: Copy + Default + 'static {
    /// This type's per-thread buffer.
    fn buffer() -> &'static LocalKey<RefCell<Vec<Self>>>;
}

thread_local! {
    static F32: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
    static F64: RefCell<Vec<f64>> = const { RefCell::new(Vec::new()) };
}

impl ScratchElem for f32 {
    fn buffer() -> &'static LocalKey<RefCell<Vec<f32>>> {
        &F32
    }
}

impl ScratchElem for f64 {
    fn buffer() -> &'static LocalKey<RefCell<Vec<f64>>> {
        &F64
    }
}

/// Calls `f` with a scratch slice of `len` elements holding unspecified (initialised)
/// values: this thread's buffer, grown if needed, or a fresh one (see the module docs).
pub(crate) fn with_scratch<T: ScratchElem, R>(len: usize, f: impl FnOnce(&mut [T]) -> R) -> R {
    let keep = len.saturating_mul(size_of::<T>()) <= KEEP_BYTES;
    T::buffer().with(|cell| match cell.try_borrow_mut() {
        Ok(mut buf) if keep => {
            if buf.len() < len {
                buf.resize(len, T::default());
            }
            f(&mut buf[..len])
        }
        _ => f(&mut vec![T::default(); len]),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reuses_the_buffer_and_nests_without_panicking() {
        with_scratch::<f32, _>(16, |s| s.fill(7.0));
        // The same thread's next request sees the buffer again (stale values, same length
        // or grown).
        let first = with_scratch::<f32, _>(8, |s| s[0]);
        assert_eq!(first, 7.0);
        // A nested request while the buffer is borrowed gets its own zeroed buffer.
        with_scratch::<f32, _>(4, |outer| {
            outer.fill(1.0);
            with_scratch::<f32, _>(4, |inner| {
                assert_eq!(inner, &[0.0; 4]);
                inner.fill(2.0);
            });
            assert_eq!(outer, &[1.0; 4]);
        });
        // Larger than KEEP_BYTES: a fresh buffer, not kept.
        let big = KEEP_BYTES / 4 + 1;
        with_scratch::<f32, _>(big, |s| assert_eq!(s.len(), big));
        with_scratch::<f64, _>(3, |s| assert_eq!(s.len(), 3));
    }
}
