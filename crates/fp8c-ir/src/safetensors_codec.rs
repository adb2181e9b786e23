//! IR tensors as safetensors bytes (the `safetensors` crate): every IR dtype maps to itself —
//! FP8 as `F8_E4M3` / `F8_E5M2`, bf16 as `BF16` — so Python's `safetensors` reads the files
//! with their dtypes. The weights sidecar (`text::write_weights`) and the session's checkpoint
//! state both use it.

use crate::{DType, Tensor};
use safetensors::Dtype as St;
use std::collections::BTreeMap;

/// The safetensors dtype of an IR dtype (every IR dtype has one).
pub fn to_st(d: DType) -> St {
    match d {
        DType::F64 => St::F64,
        DType::F32 => St::F32,
        DType::F16 => St::F16,
        DType::BF16 => St::BF16,
        DType::I64 => St::I64,
        DType::I32 => St::I32,
        DType::I16 => St::I16,
        DType::I8 => St::I8,
        DType::U8 => St::U8,
        DType::Bool => St::BOOL,
        DType::F8E4M3 => St::F8_E4M3,
        DType::F8E5M2 => St::F8_E5M2,
    }
}

/// The IR dtype of a safetensors dtype, or a message naming the unsupported one.
pub fn from_st(d: St) -> Result<DType, String> {
    Ok(match d {
        St::F64 => DType::F64,
        St::F32 => DType::F32,
        St::F16 => DType::F16,
        St::BF16 => DType::BF16,
        St::I64 => DType::I64,
        St::I32 => DType::I32,
        St::I16 => DType::I16,
        St::I8 => DType::I8,
        St::U8 => DType::U8,
        St::BOOL => DType::Bool,
        St::F8_E4M3 => DType::F8E4M3,
        St::F8_E5M2 => DType::F8E5M2,
        other => return Err(format!("safetensors dtype {other:?} is not supported")),
    })
}

/// The bytes of a safetensors file holding `tensors` (in name order) and `metadata`.
pub fn to_bytes(
    tensors: &BTreeMap<String, Tensor>,
    metadata: BTreeMap<String, String>,
) -> Result<Vec<u8>, String> {
    let mut views = Vec::with_capacity(tensors.len());
    for (name, t) in tensors {
        let shape: Vec<usize> = t.shape().iter().map(|&d| d as usize).collect();
        let view = safetensors::tensor::TensorView::new(to_st(t.dtype()), shape, t.bytes())
            .map_err(|e| format!("tensor \"{name}\": {e}"))?;
        views.push((name.clone(), view));
    }
    let meta: std::collections::HashMap<String, String> = metadata.into_iter().collect();
    safetensors::tensor::serialize(views, Some(meta)).map_err(|e| e.to_string())
}

/// Tensors by name and the file's metadata (string to string).
pub type Parsed = (BTreeMap<String, Tensor>, BTreeMap<String, String>);

/// Parses safetensors bytes into IR tensors and the file's metadata. Never panics: the crate
/// checks the header against the buffer before any tensor is read.
pub fn parse(bytes: &[u8]) -> Result<Parsed, String> {
    let st = safetensors::SafeTensors::deserialize(bytes)
        .map_err(|e| format!("not a valid safetensors file: {e}"))?;
    let mut out = BTreeMap::new();
    for (k, v) in st.tensors() {
        let dtype = from_st(v.dtype()).map_err(|e| format!("tensor \"{k}\": {e}"))?;
        let shape: Vec<u64> = v.shape().iter().map(|&d| d as u64).collect();
        let t = Tensor::from_bytes(dtype, shape, v.data().to_vec())
            .map_err(|e| format!("tensor \"{k}\": {e}"))?;
        out.insert(k, t);
    }
    let (_, header) = safetensors::SafeTensors::read_metadata(bytes)
        .map_err(|e| format!("not a valid safetensors file: {e}"))?;
    let metadata = header
        .metadata()
        .clone()
        .map(|m| m.into_iter().collect())
        .unwrap_or_default();
    Ok((out, metadata))
}
