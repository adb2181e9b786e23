//! [`Storage`]: the bytes of a tensor, shared between clones and aligned for their elements.
//!
//! Graphs are cloned often (the pass manager keeps the last graph that verified; fusion and
//! the session copy graphs), and a clone must not copy weights: a `Storage` is an `Arc` over
//! one allocation, so cloning costs a reference count. Writing copies first if the bytes are
//! shared (`Arc::make_mut`), so a clone never sees another clone's writes.
//!
//! An allocation is either one made here (a `Vec` of 64-byte blocks, zero-filled by the
//! allocator, so the bytes can be viewed as any plain-old-data element type up to 64-byte
//! alignment) or a kernel's result `Vec` of 1-, 2-, 4- or 8-byte elements adopted as it is
//! ([`Storage::from_vec`]), aligned for its own elements: a CPU kernel's output becomes a
//! tensor without a copy, or bytes another owner holds ([`Storage::from_foreign`]: a memory
//! map, an array of a foreign runtime such as NumPy) read in place and copied on the first
//! write. Typed views (`bytemuck`) check alignment and report a mismatch as an error, never a
//! panic. Tensors are little-endian; so is every target fp8c builds for
//! (checked below).

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::sync::{Arc, Weak};

#[cfg(target_endian = "big")]
compile_error!(
    "fp8c stores tensors little-endian and views them natively: big-endian targets are not supported"
);

/// One 64-byte block of an allocation.
#[derive(Clone, Copy, bytemuck::Zeroable, bytemuck::Pod)]
#[repr(C, align(64))]
struct Block([u8; 64]);

/// An owned allocation: 64-byte blocks made here, or an adopted vector of words; or bytes
/// held by another owner, never written.
#[derive(Clone)]
enum Words {
    Blocks(Vec<Block>),
    Foreign(Arc<dyn AsRef<[u8]> + Send + Sync>),
    W8(Vec<u8>),
    W16(Vec<u16>),
    W32(Vec<u32>),
    W64(Vec<u64>),
}

/// An owned byte buffer of `len` bytes (the tail of the last block is unused).
#[derive(Clone)]
struct Aligned {
    words: Words,
    len: usize,
}

impl Aligned {
    fn zeroed(len: usize) -> Self {
        // `zeroed_vec` asks the allocator for zeroed memory (calloc): large buffers come as
        // fresh zero pages, with no memset.
        Aligned {
            words: Words::Blocks(bytemuck::zeroed_vec(len.div_ceil(64))),
            len,
        }
    }

    fn bytes(&self) -> &[u8] {
        let all: &[u8] = match &self.words {
            Words::Blocks(v) => bytemuck::cast_slice(v),
            Words::Foreign(b) => (**b).as_ref(),
            Words::W8(v) => v,
            Words::W16(v) => bytemuck::cast_slice(v),
            Words::W32(v) => bytemuck::cast_slice(v),
            Words::W64(v) => bytemuck::cast_slice(v),
        };
        &all[..self.len]
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        // Foreign bytes are never written: the first write copies them into blocks of ours.
        if let Words::Foreign(b) = &self.words {
            let mut own = Aligned::zeroed(self.len);
            own.bytes_mut().copy_from_slice(&(**b).as_ref()[..self.len]);
            *self = own;
        }
        let all: &mut [u8] = match &mut self.words {
            Words::Blocks(v) => bytemuck::cast_slice_mut(v),
            // Not reached: copied into blocks just above.
            Words::Foreign(_) => &mut [],
            Words::W8(v) => v,
            Words::W16(v) => bytemuck::cast_slice_mut(v),
            Words::W32(v) => bytemuck::cast_slice_mut(v),
            Words::W64(v) => bytemuck::cast_slice_mut(v),
        };
        &mut all[..self.len]
    }
}

/// Shared tensor bytes (see the module docs).
#[derive(Clone)]
pub struct Storage(Arc<Aligned>);

impl Storage {
    /// `len` zero bytes, 64-byte aligned.
    pub fn zeroed(len: usize) -> Self {
        Storage(Arc::new(Aligned::zeroed(len)))
    }

    /// A copy of `bytes`, 64-byte aligned.
    pub fn from_slice(bytes: &[u8]) -> Self {
        let mut a = Aligned::zeroed(bytes.len());
        a.bytes_mut().copy_from_slice(bytes);
        Storage(Arc::new(a))
    }

    /// Takes `values`' allocation as it is when its elements are 1, 2, 4 or 8 bytes with
    /// natural alignment (every primitive number type); copies other element types.
    pub fn from_vec<T: bytemuck::Pod>(values: Vec<T>) -> Self {
        use bytemuck::allocation::try_cast_vec;
        let len = std::mem::size_of_val(values.as_slice());
        let words = match std::mem::size_of::<T>() {
            1 => try_cast_vec(values).map(Words::W8),
            2 => try_cast_vec(values).map(Words::W16),
            4 => try_cast_vec(values).map(Words::W32),
            8 => try_cast_vec(values).map(Words::W64),
            _ => Err((bytemuck::PodCastError::SizeMismatch, values)),
        };
        match words {
            Ok(words) => Storage(Arc::new(Aligned { words, len })),
            Err((_, values)) => Self::from_slice(bytemuck::cast_slice(&values)),
        }
    }

    /// The bytes `owner` holds, read in place for as long as any clone lives (a memory map, a
    /// NumPy array handed over by a binding). They are never written: the first write through
    /// [`Storage::bytes_mut`] copies them into an allocation of ours. Typed views need the
    /// owner's bytes aligned for their element type.
    pub fn from_foreign(owner: Arc<dyn AsRef<[u8]> + Send + Sync>) -> Self {
        let len = (*owner).as_ref().len();
        Storage(Arc::new(Aligned {
            words: Words::Foreign(owner),
            len,
        }))
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

    /// True if no other `Storage` shares the allocation (a write would not copy).
    pub fn is_unique(&mut self) -> bool {
        Arc::get_mut(&mut self.0).is_some()
    }

    /// A handle on this allocation that does not keep its bytes alive ([`StorageHandle`]).
    pub fn handle(&self) -> StorageHandle {
        StorageHandle(Arc::downgrade(&self.0))
    }
}

/// A non-owning handle on one [`Storage`] allocation, for caches of what was computed from
/// its bytes. While a handle exists the allocation's address cannot be reused, and a write
/// through [`Storage::bytes_mut`] moves the bytes to a new allocation (`Arc::make_mut` with a
/// weak reference), so a storage the handle [refers to](StorageHandle::refers_to) holds the
/// very bytes it had when the handle was taken.
#[derive(Clone)]
pub struct StorageHandle(Weak<Aligned>);

impl StorageHandle {
    /// True while some `Storage` still holds the allocation.
    pub fn is_live(&self) -> bool {
        self.0.strong_count() > 0
    }

    /// The storage again, while some `Storage` still holds the allocation.
    pub fn upgrade(&self) -> Option<Storage> {
        self.0.upgrade().map(Storage)
    }

    /// True if `s` is the allocation this handle was taken from (its bytes unchanged).
    pub fn refers_to(&self, s: &Storage) -> bool {
        std::ptr::eq(self.0.as_ptr(), Arc::as_ptr(&s.0))
    }
}

impl fmt::Debug for StorageHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "StorageHandle({:p})", self.0.as_ptr())
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

    /// A handle refers to its allocation and its clones while they live; a write to the last
    /// holder moves the bytes away from the handle; dropping every holder ends it.
    #[test]
    fn handles_see_only_their_unchanged_allocation() {
        let a = Storage::from_slice(&[1, 2, 3]);
        let h = a.handle();
        let b = a.clone();
        assert!(h.is_live() && h.refers_to(&a) && h.refers_to(&b));
        assert!(!h.refers_to(&Storage::from_slice(&[1, 2, 3])));
        drop(b);
        let mut a = a;
        a.bytes_mut()[0] = 9;
        assert!(
            !h.refers_to(&a),
            "a write moves the bytes to a new allocation"
        );
        assert!(!h.is_live());
        let c = Storage::from_slice(&[4]);
        let hc = c.handle();
        drop(c);
        assert!(!hc.is_live());
    }

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

    /// Foreign bytes are read in place and never written: a write copies them first, even
    /// through the only `Storage` holding them.
    #[test]
    fn foreign_bytes_are_read_in_place_and_copied_on_write() {
        let owner: Arc<Vec<u8>> = Arc::new(vec![1, 2, 3, 4]);
        let mut s = Storage::from_foreign(owner.clone());
        assert_eq!(s.bytes().as_ptr(), owner.as_ptr(), "no copy");
        assert_eq!(s.len(), 4);
        assert!(s.is_unique());
        s.bytes_mut()[0] = 9;
        assert_eq!(s.bytes(), &[9, 2, 3, 4]);
        assert_eq!(*owner, [1, 2, 3, 4], "the owner's bytes are untouched");
        assert_ne!(s.bytes().as_ptr(), owner.as_ptr());
    }

    #[test]
    fn bytes_are_aligned_for_any_element_type() {
        for len in [0, 1, 63, 64, 65, 1000] {
            let s = Storage::zeroed(len);
            assert_eq!(s.bytes().as_ptr() as usize % 64, 0);
            assert_eq!(s.len(), len);
        }
    }

    #[test]
    fn adopted_vectors_keep_their_bytes() {
        let v: Vec<f32> = vec![1.5, -2.0, 3.25];
        let ptr = v.as_ptr() as usize;
        let s = Storage::from_vec(v);
        assert_eq!(s.bytes().as_ptr() as usize, ptr, "no copy");
        assert_eq!(s.len(), 12);
        assert_eq!(
            bytemuck::cast_slice::<u8, f32>(s.bytes()),
            &[1.5, -2.0, 3.25]
        );
        let w = Storage::from_vec(vec![[1u8, 2, 3]; 2]); // 3-byte elements: copied
        assert_eq!(w.bytes(), &[1, 2, 3, 1, 2, 3]);
        let mut c = s.clone();
        c.bytes_mut()[0] = 7;
        assert_ne!(c.bytes(), s.bytes());
    }
}
