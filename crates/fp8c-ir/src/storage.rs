//! [`Storage`]: the bytes of a tensor, shared between clones and 64-byte aligned.
//!
//! Graphs are cloned often (the pass manager keeps the last graph that verified; fusion and
//! the session copy graphs), and a clone must not copy weights: a `Storage` is an `Arc` over
//! one aligned allocation, so cloning costs a reference count. Writing copies first if the
//! bytes are shared (`Arc::make_mut`), so a clone never sees another clone's writes.
//!
//! The allocation is a `Vec` of 64-byte blocks, so the bytes can be viewed as any
//! plain-old-data element type up to 64-byte alignment (`bytemuck::cast_slice`) — what the
//! CPU kernels and the CUDA uploads read without a copy. Tensors are little-endian; so is
//! every target fp8c builds for (checked below).

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::sync::Arc;

#[cfg(target_endian = "big")]
compile_error!(
    "fp8c stores tensors little-endian and views them natively: big-endian targets are not supported"
);

/// One 64-byte block of an allocation.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Block([u8; 64]);

/// An aligned, owned byte buffer of `len` bytes (the tail of the last block is unused).
#[derive(Clone)]
struct Aligned {
    blocks: Vec<Block>,
    len: usize,
}

impl Aligned {
    fn zeroed(len: usize) -> Self {
        Aligned {
            blocks: vec![Block([0; 64]); len.div_ceil(64)],
            len,
        }
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: `blocks` holds at least `len` initialised bytes (blocks are arrays of u8,
        // zero-filled on creation), and u8 has alignment 1.
        unsafe { std::slice::from_raw_parts(self.blocks.as_ptr().cast::<u8>(), self.len) }
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `bytes`; the borrow of `self` is exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.blocks.as_mut_ptr().cast::<u8>(), self.len) }
    }
}

/// Shared, 64-byte-aligned tensor bytes (see the module docs).
#[derive(Clone)]
pub struct Storage(Arc<Aligned>);

impl Storage {
    /// `len` zero bytes.
    pub fn zeroed(len: usize) -> Self {
        Storage(Arc::new(Aligned::zeroed(len)))
    }

    /// A copy of `bytes`.
    pub fn from_slice(bytes: &[u8]) -> Self {
        let mut a = Aligned::zeroed(bytes.len());
        a.bytes_mut().copy_from_slice(bytes);
        Storage(Arc::new(a))
    }

    /// The bytes.
    pub fn bytes(&self) -> &[u8] {
        self.0.bytes()
    }

    /// The bytes, mutable; copies them first if another `Storage` shares them.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        Arc::make_mut(&mut self.0).bytes_mut()
    }

    /// Number of bytes.
    pub fn len(&self) -> usize {
        self.0.len
    }

    /// True if there are no bytes.
    pub fn is_empty(&self) -> bool {
        self.0.len == 0
    }

    /// True if `self` and `other` share one allocation (a clone of the other).
    pub fn shares(&self, other: &Storage) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl PartialEq for Storage {
    fn eq(&self, other: &Self) -> bool {
        self.shares(other) || self.bytes() == other.bytes()
    }
}

impl fmt::Debug for Storage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.bytes()).finish()
    }
}

impl Serialize for Storage {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.bytes())
    }
}

impl<'de> Deserialize<'de> for Storage {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v: Vec<u8> = Vec::deserialize(d)?;
        Ok(Storage::from_slice(&v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clones_share_and_writes_copy() {
        let a = Storage::from_slice(&[1, 2, 3, 4, 5]);
        let mut b = a.clone();
        assert!(a.shares(&b));
        b.bytes_mut()[0] = 9;
        assert!(!a.shares(&b));
        assert_eq!(a.bytes(), &[1, 2, 3, 4, 5]);
        assert_eq!(b.bytes(), &[9, 2, 3, 4, 5]);
    }

    #[test]
    fn bytes_are_aligned_for_any_element_type() {
        for len in [0, 1, 63, 64, 65, 1000] {
            let s = Storage::zeroed(len);
            assert_eq!(s.bytes().as_ptr() as usize % 64, 0);
            assert_eq!(s.len(), len);
        }
    }
}
