//! Constant tensor data (ONNX initializers, folded constants, runtime values): raw
//! little-endian bytes in a shared [`Storage`].
//!
//! Invariant: `data.len() == shape.product() * dtype.size()`. Constructors check it; the
//! fields are private so that nothing can break it afterwards.
//!
//! Cloning a tensor (and so a graph, whose weights are tensors) shares the bytes; writing
//! through [`Tensor::bytes_mut`] copies them first if they are shared. The bytes are 64-byte
//! aligned, so they can be read as a typed slice ([`Tensor::as_slice`]) without a copy.

use crate::storage::Storage;
use crate::{DType, TensorType};
use half::{bf16, f16};
use serde::{Deserialize, Serialize};

/// A dense constant tensor with a fully known shape.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Tensor {
    dtype: DType,
    shape: Vec<u64>,
    data: Storage,
}

/// Largest tensor (in elements) that constructors accept: guards against absurd shapes.
pub const MAX_ELEMENTS: u64 = 1 << 34;

/// Number of elements of a shape, or None on overflow or beyond [`MAX_ELEMENTS`].
pub fn checked_numel(shape: &[u64]) -> Option<u64> {
    shape
        .iter()
        .try_fold(1u64, |a, &d| a.checked_mul(d))
        .filter(|&n| n <= MAX_ELEMENTS)
}

impl Tensor {
    /// Builds a tensor from raw little-endian bytes; errors if the length does not match.
    pub fn from_bytes(dtype: DType, shape: Vec<u64>, data: Vec<u8>) -> Result<Self, String> {
        let n =
            checked_numel(&shape).ok_or_else(|| format!("tensor shape {shape:?} is too large"))?;
        let want = n
            .checked_mul(dtype.size() as u64)
            .ok_or_else(|| format!("tensor shape {shape:?} is too large"))?;
        if data.len() as u64 != want {
            return Err(format!(
                "{dtype} tensor of shape {shape:?} needs {want} bytes, got {}",
                data.len()
            ));
        }
        Ok(Tensor {
            dtype,
            shape,
            data: Storage::from_slice(&data),
        })
    }

    /// Builds a tensor over existing shared bytes (no copy); errors if the length does not
    /// match.
    pub fn from_storage(dtype: DType, shape: Vec<u64>, data: Storage) -> Result<Self, String> {
        let n =
            checked_numel(&shape).ok_or_else(|| format!("tensor shape {shape:?} is too large"))?;
        if Some(data.len() as u64) != n.checked_mul(dtype.size() as u64) {
            return Err(format!(
                "{dtype} tensor of shape {shape:?} needs {} bytes, got {}",
                n.saturating_mul(dtype.size() as u64),
                data.len()
            ));
        }
        Ok(Tensor { dtype, shape, data })
    }

    /// A tensor holding `values` (plain-old-data elements of `dtype`'s size), copied once into
    /// aligned storage.
    pub fn from_pod<T: bytemuck::Pod>(
        dtype: DType,
        shape: Vec<u64>,
        values: &[T],
    ) -> Result<Self, String> {
        elem_size_is::<T>(dtype)?;
        Self::from_storage(
            dtype,
            shape,
            Storage::from_slice(bytemuck::cast_slice(values)),
        )
    }

    /// A tensor holding `values` (plain-old-data elements of `dtype`'s size) in their own
    /// allocation, with no copy (see [`Storage::from_vec`]).
    pub fn from_vec<T: bytemuck::Pod>(
        dtype: DType,
        shape: Vec<u64>,
        values: Vec<T>,
    ) -> Result<Self, String> {
        elem_size_is::<T>(dtype)?;
        Self::from_storage(dtype, shape, Storage::from_vec(values))
    }

    /// A tensor of zeros (all bits zero).
    pub fn zeros(dtype: DType, shape: Vec<u64>) -> Result<Self, String> {
        let n =
            checked_numel(&shape).ok_or_else(|| format!("tensor shape {shape:?} is too large"))?;
        let bytes = (n as usize)
            .checked_mul(dtype.size())
            .ok_or_else(|| format!("tensor shape {shape:?} is too large"))?;
        Ok(Tensor {
            dtype,
            shape,
            data: Storage::zeroed(bytes),
        })
    }

    /// An f32 tensor. Panics only if `values.len()` does not match `shape` (a caller bug).
    pub fn from_f32(shape: Vec<u64>, values: &[f32]) -> Self {
        Self::from_vec(DType::F32, shape, values.to_vec())
            .expect("value count must match the shape")
    }

    /// An f64 tensor.
    pub fn from_f64(shape: Vec<u64>, values: &[f64]) -> Self {
        Self::from_vec(DType::F64, shape, values.to_vec())
            .expect("value count must match the shape")
    }

    /// An i64 tensor.
    pub fn from_i64(shape: Vec<u64>, values: &[i64]) -> Self {
        Self::from_vec(DType::I64, shape, values.to_vec())
            .expect("value count must match the shape")
    }

    /// An i32 tensor.
    pub fn from_i32(shape: Vec<u64>, values: &[i32]) -> Self {
        Self::from_vec(DType::I32, shape, values.to_vec())
            .expect("value count must match the shape")
    }

    /// A bool tensor.
    pub fn from_bool(shape: Vec<u64>, values: &[bool]) -> Self {
        Self::from_le(DType::Bool, shape, values.iter().map(|&b| b as u8))
    }

    /// A tensor of `dtype` holding `values` converted from f64 (float and int types;
    /// FP8 types are not handled here, see fp8c-core).
    pub fn from_f64_as(dtype: DType, shape: Vec<u64>, values: &[f64]) -> Result<Self, String> {
        let bytes: Vec<u8> = match dtype {
            DType::F64 => values.iter().flat_map(|v| v.to_le_bytes()).collect(),
            DType::F32 => values
                .iter()
                .flat_map(|&v| (v as f32).to_le_bytes())
                .collect(),
            DType::F16 => values
                .iter()
                .flat_map(|&v| f16::from_f64(v).to_le_bytes())
                .collect(),
            DType::BF16 => values
                .iter()
                .flat_map(|&v| bf16::from_f64(v).to_le_bytes())
                .collect(),
            DType::I64 => values
                .iter()
                .flat_map(|&v| (v as i64).to_le_bytes())
                .collect(),
            DType::I32 => values
                .iter()
                .flat_map(|&v| (v as i32).to_le_bytes())
                .collect(),
            DType::I16 => values
                .iter()
                .flat_map(|&v| (v as i16).to_le_bytes())
                .collect(),
            DType::I8 => values.iter().map(|&v| (v as i8) as u8).collect(),
            DType::U8 => values.iter().map(|&v| v as u8).collect(),
            DType::U16 => values
                .iter()
                .flat_map(|&v| (v as u16).to_le_bytes())
                .collect(),
            DType::U32 => values
                .iter()
                .flat_map(|&v| (v as u32).to_le_bytes())
                .collect(),
            DType::U64 => values
                .iter()
                .flat_map(|&v| (v as u64).to_le_bytes())
                .collect(),
            DType::Bool => values.iter().map(|&v| (v != 0.0) as u8).collect(),
            DType::F8E4M3
            | DType::F8E5M2
            | DType::F8E4M3Fnuz
            | DType::F8E5M2Fnuz
            | DType::F8E8M0
            | DType::F4E2M1 => {
                return Err(format!("cannot build a {dtype} tensor from f64 here"));
            }
        };
        Tensor::from_bytes(dtype, shape, bytes)
    }

    fn from_le(dtype: DType, shape: Vec<u64>, bytes: impl Iterator<Item = u8>) -> Self {
        let data: Vec<u8> = bytes.collect();
        Tensor::from_bytes(dtype, shape, data).expect("value count must match the shape")
    }

    /// The elements as a typed slice, without a copy. Errors if `T`'s size is not the
    /// dtype's, or if the storage is not aligned for `T` (storage is aligned for its dtype's
    /// elements, so only a `T` with stricter alignment than its size can meet that).
    pub fn as_slice<T: bytemuck::Pod>(&self) -> Result<&[T], String> {
        elem_size_is::<T>(self.dtype)?;
        bytemuck::try_cast_slice(self.data.bytes()).map_err(|e| {
            format!(
                "{} storage is not aligned for this view ({e:?})",
                self.dtype
            )
        })
    }

    /// The shared storage (cloning it shares the bytes).
    pub fn storage(&self) -> &Storage {
        &self.data
    }

    /// A scalar f32 tensor.
    pub fn scalar_f32(v: f32) -> Self {
        Self::from_f32(vec![], &[v])
    }

    /// A scalar i64 tensor.
    pub fn scalar_i64(v: i64) -> Self {
        Self::from_i64(vec![], &[v])
    }

    /// Element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Concrete shape.
    pub fn shape(&self) -> &[u64] {
        &self.shape
    }

    /// Raw little-endian bytes.
    pub fn bytes(&self) -> &[u8] {
        self.data.bytes()
    }

    /// Raw little-endian bytes, mutable (length cannot change); copies them first if they are
    /// shared with another tensor.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        self.data.bytes_mut()
    }

    /// Consumes the tensor, giving its bytes (a copy).
    pub fn into_bytes(self) -> Vec<u8> {
        self.data.bytes().to_vec()
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.data.len() / self.dtype.size()
    }

    /// True if the tensor has no elements.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// The IR type of this tensor.
    pub fn ty(&self) -> TensorType {
        TensorType::fixed(self.dtype, &self.shape)
    }

    /// The same data under another shape with the same element count.
    pub fn reshaped(mut self, shape: Vec<u64>) -> Result<Self, String> {
        if checked_numel(&shape) != Some(self.len() as u64) {
            return Err(format!(
                "cannot reshape {} elements to {shape:?}",
                self.len()
            ));
        }
        self.shape = shape;
        Ok(self)
    }

    /// Values as f64 (every type but FP8, which needs fp8c-core's decoder).
    pub fn to_f64_vec(&self) -> Result<Vec<f64>, String> {
        let d = self.data.bytes();
        Ok(match self.dtype {
            DType::F64 => d
                .chunks_exact(8)
                .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
                .collect(),
            DType::F32 => d
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes(c.try_into().unwrap()) as f64)
                .collect(),
            DType::F16 => d
                .chunks_exact(2)
                .map(|c| f16::from_le_bytes([c[0], c[1]]).to_f64())
                .collect(),
            DType::BF16 => d
                .chunks_exact(2)
                .map(|c| bf16::from_le_bytes([c[0], c[1]]).to_f64())
                .collect(),
            DType::I64 => d
                .chunks_exact(8)
                .map(|c| i64::from_le_bytes(c.try_into().unwrap()) as f64)
                .collect(),
            DType::I32 => d
                .chunks_exact(4)
                .map(|c| i32::from_le_bytes(c.try_into().unwrap()) as f64)
                .collect(),
            DType::I16 => d
                .chunks_exact(2)
                .map(|c| i16::from_le_bytes([c[0], c[1]]) as f64)
                .collect(),
            DType::I8 => d.iter().map(|&b| b as i8 as f64).collect(),
            DType::U8 | DType::Bool => d.iter().map(|&b| b as f64).collect(),
            DType::U16 => d
                .chunks_exact(2)
                .map(|c| u16::from_le_bytes([c[0], c[1]]) as f64)
                .collect(),
            DType::U32 => d
                .chunks_exact(4)
                .map(|c| u32::from_le_bytes(c.try_into().unwrap()) as f64)
                .collect(),
            DType::U64 => d
                .chunks_exact(8)
                .map(|c| u64::from_le_bytes(c.try_into().unwrap()) as f64)
                .collect(),
            DType::F8E4M3
            | DType::F8E5M2
            | DType::F8E4M3Fnuz
            | DType::F8E5M2Fnuz
            | DType::F8E8M0
            | DType::F4E2M1 => {
                return Err(format!("{} values need fp8c-core to decode", self.dtype));
            }
        })
    }

    /// Values as f32 (every type but FP8).
    pub fn to_f32_vec(&self) -> Result<Vec<f32>, String> {
        if self.dtype == DType::F32 {
            return Ok(self
                .data
                .bytes()
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
                .collect());
        }
        Ok(self.to_f64_vec()?.into_iter().map(|v| v as f32).collect())
    }

    /// Values as i64 (integer and bool types only).
    pub fn to_i64_vec(&self) -> Result<Vec<i64>, String> {
        let d = self.data.bytes();
        Ok(match self.dtype {
            DType::I64 => d
                .chunks_exact(8)
                .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
                .collect(),
            DType::I32 => d
                .chunks_exact(4)
                .map(|c| i32::from_le_bytes(c.try_into().unwrap()) as i64)
                .collect(),
            DType::I16 => d
                .chunks_exact(2)
                .map(|c| i16::from_le_bytes([c[0], c[1]]) as i64)
                .collect(),
            DType::I8 => d.iter().map(|&b| b as i8 as i64).collect(),
            DType::U8 | DType::Bool => d.iter().map(|&b| b as i64).collect(),
            DType::U16 => d
                .chunks_exact(2)
                .map(|c| u16::from_le_bytes([c[0], c[1]]) as i64)
                .collect(),
            DType::U32 => d
                .chunks_exact(4)
                .map(|c| u32::from_le_bytes(c.try_into().unwrap()) as i64)
                .collect(),
            // Values above i64::MAX wrap, as ONNX's shape inputs never hold them.
            DType::U64 => d
                .chunks_exact(8)
                .map(|c| u64::from_le_bytes(c.try_into().unwrap()) as i64)
                .collect(),
            other => return Err(format!("expected an integer tensor, got {other}")),
        })
    }
}

/// Errors unless `T`'s size is `dtype`'s element size.
fn elem_size_is<T>(dtype: DType) -> Result<(), String> {
    if std::mem::size_of::<T>() != dtype.size() {
        return Err(format!(
            "{dtype} elements are {} bytes, not {}",
            dtype.size(),
            std::mem::size_of::<T>()
        ));
    }
    Ok(())
}
