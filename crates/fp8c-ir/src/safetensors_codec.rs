//! IR tensors as safetensors bytes (the `safetensors` crate): every IR dtype maps to itself —
//! FP8 as `F8_E4M3` / `F8_E5M2`, bf16 as `BF16` — so Python's `safetensors` reads the files
//! with their dtypes (FP4 E2M1, one element per byte in the IR, is packed two per byte, the
//! first element in the low nibble, as safetensors' `F4` wants). The weights sidecar (`text::write_weights`) and the session's checkpoint
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
        DType::U16 => St::U16,
        DType::U32 => St::U32,
        DType::U64 => St::U64,
        DType::F8E4M3Fnuz => St::F8_E4M3FNUZ,
        DType::F8E5M2Fnuz => St::F8_E5M2FNUZ,
        DType::F8E8M0 => St::F8_E8M0,
        DType::F4E2M1 => St::F4,
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
        St::U16 => DType::U16,
        St::U32 => DType::U32,
        St::U64 => DType::U64,
        St::F8_E4M3FNUZ => DType::F8E4M3Fnuz,
        St::F8_E5M2FNUZ => DType::F8E5M2Fnuz,
        St::F8_E8M0 => DType::F8E8M0,
        St::F4 => DType::F4E2M1,
        other => return Err(format!("safetensors dtype {other:?} is not supported")),
    })
}

/// The bytes of a safetensors file holding `tensors` (in name order) and `metadata`.
pub fn to_bytes(
    tensors: &BTreeMap<String, Tensor>,
    metadata: BTreeMap<String, String>,
) -> Result<Vec<u8>, String> {
    let mut views = Vec::with_capacity(tensors.len());
    let mut packed = Vec::with_capacity(tensors.len());
    for (name, t) in tensors {
        let shape: Vec<usize> = t.shape().iter().map(|&d| d as usize).collect();
        packed.push((name, shape, to_st(t.dtype()), stored_bytes(t)));
    }
    for (name, shape, dtype, bytes) in &packed {
        let view = safetensors::tensor::TensorView::new(*dtype, shape.clone(), bytes)
            .map_err(|e| format!("tensor \"{name}\": {e}"))?;
        views.push(((*name).clone(), view));
    }
    let meta: std::collections::HashMap<String, String> = metadata.into_iter().collect();
    let bytes = safetensors::tensor::serialize(views, Some(meta)).map_err(|e| e.to_string())?;
    canonical_header(bytes)
}

/// Writes the safetensors file [`to_bytes`] gives to `w`, the same bytes, without holding
/// them all: the header is made by the crate from the tensors' types and lengths alone (a
/// view whose data is left out), then each tensor's bytes are written in the order its
/// header offsets give.
pub fn write_to(
    tensors: &BTreeMap<String, Tensor>,
    metadata: BTreeMap<String, String>,
    w: &mut impl std::io::Write,
) -> Result<(), String> {
    /// A tensor's type and length, no data: the crate's header needs only these.
    struct Shape {
        dtype: St,
        shape: Vec<usize>,
        len: usize,
    }
    impl safetensors::tensor::View for &Shape {
        fn dtype(&self) -> St {
            self.dtype
        }
        fn shape(&self) -> &[usize] {
            &self.shape
        }
        fn data(&self) -> std::borrow::Cow<'_, [u8]> {
            std::borrow::Cow::Borrowed(&[])
        }
        fn data_len(&self) -> usize {
            self.len
        }
    }
    let mut shapes = Vec::with_capacity(tensors.len());
    for (name, t) in tensors {
        let shape: Vec<usize> = t.shape().iter().map(|&d| d as usize).collect();
        let len = stored_len(t);
        // The crate's own checks, as `to_bytes` meets them (no copy: a borrowed view).
        safetensors::tensor::TensorView::new(to_st(t.dtype()), shape.clone(), &stored_bytes(t))
            .map_err(|e| format!("tensor \"{name}\": {e}"))?;
        shapes.push((
            name.as_str(),
            Shape {
                dtype: to_st(t.dtype()),
                shape,
                len,
            },
        ));
    }
    let views = shapes.iter().map(|(n, s)| (*n, s));
    let meta: std::collections::HashMap<String, String> = metadata.into_iter().collect();
    let head = safetensors::tensor::serialize(views, Some(meta)).map_err(|e| e.to_string())?;
    let head = canonical_header(head)?;
    // The data's order is the header's offsets' (the crate sorts by dtype, then name).
    let bad = || "internal: the crate wrote an unexpected header".to_string();
    let header: serde_json::Value =
        serde_json::from_slice(head.get(8..).ok_or_else(bad)?).map_err(|e| e.to_string())?;
    let mut order: Vec<(u64, &String)> = Vec::with_capacity(tensors.len());
    for name in tensors.keys() {
        let start = header
            .get(name)
            .and_then(|t| t.get("data_offsets"))
            .and_then(|o| o.get(0))
            .and_then(serde_json::Value::as_u64)
            .ok_or_else(bad)?;
        order.push((start, name));
    }
    order.sort();
    let io = |e: std::io::Error| e.to_string();
    w.write_all(&head).map_err(io)?;
    for (_, name) in order {
        w.write_all(&stored_bytes(&tensors[name])).map_err(io)?;
    }
    Ok(())
}

/// The number of bytes a tensor takes in the file (FP4 packs two elements per byte).
fn stored_len(t: &Tensor) -> usize {
    if t.dtype() == DType::F4E2M1 {
        t.len().div_ceil(2)
    } else {
        t.bytes().len()
    }
}

/// A tensor's bytes as safetensors stores them: FP4 packed two per byte (low nibble first).
fn stored_bytes(t: &Tensor) -> std::borrow::Cow<'_, [u8]> {
    if t.dtype() != DType::F4E2M1 {
        return std::borrow::Cow::Borrowed(t.bytes());
    }
    std::borrow::Cow::Owned(
        t.bytes()
            .chunks(2)
            .map(|p| (p[0] & 0x0F) | (p.get(1).copied().unwrap_or(0) << 4))
            .collect(),
    )
}

/// The IR bytes of stored data: FP4 unpacked to one element per byte.
fn loaded_bytes(dtype: DType, data: &[u8], shape: &[usize]) -> Vec<u8> {
    if dtype != DType::F4E2M1 {
        return data.to_vec();
    }
    let n: usize = shape.iter().product();
    data.iter()
        .flat_map(|&b| [b & 0x0F, b >> 4])
        .take(n)
        .collect()
}

/// Rewrites the JSON header with its keys sorted: the crate writes `__metadata__` from a
/// `HashMap`, whose order changes from process to process, and the same tensors must give the
/// same file bytes (checkpoints are compared by digest). Data offsets are relative to the end
/// of the header, so only the header changes; it stays padded with spaces to a multiple of 8.
fn canonical_header(bytes: Vec<u8>) -> Result<Vec<u8>, String> {
    use std::collections::BTreeMap;
    let bad = || "internal: the safetensors crate wrote an unexpected header".to_string();
    let n = u64::from_le_bytes(
        bytes
            .get(..8)
            .ok_or_else(bad)?
            .try_into()
            .map_err(|_| bad())?,
    );
    let end = usize::try_from(n)
        .ok()
        .and_then(|n| n.checked_add(8))
        .ok_or_else(bad)?;
    let header: BTreeMap<String, serde_json::Value> =
        serde_json::from_slice(bytes.get(8..end).ok_or_else(bad)?).map_err(|e| e.to_string())?;
    let sorted: BTreeMap<String, serde_json::Value> = header
        .into_iter()
        .map(|(k, v)| match v {
            serde_json::Value::Object(m) => {
                let m: BTreeMap<String, serde_json::Value> = m.into_iter().collect();
                (k, serde_json::to_value(m).expect("a map of JSON values"))
            }
            v => (k, v),
        })
        .collect();
    let mut text = serde_json::to_vec(&sorted).map_err(|e| e.to_string())?;
    while !text.len().is_multiple_of(8) {
        text.push(b' ');
    }
    if 8 + text.len() == end {
        // The same keys and values in another order: as long as the crate's header, so it
        // is written over it (no second copy of a model's weights).
        let mut bytes = bytes;
        bytes[8..end].copy_from_slice(&text);
        return Ok(bytes);
    }
    let mut out = Vec::with_capacity(8 + text.len() + bytes.len() - end);
    out.extend_from_slice(&(text.len() as u64).to_le_bytes());
    out.extend_from_slice(&text);
    out.extend_from_slice(&bytes[end..]);
    Ok(out)
}

/// The SHA-256 (lowercase hex) of tensors: each name, dtype, shape and bytes in name order —
/// independent of the file layout, so a reader can check the tensors it parsed.
pub fn digest(tensors: &BTreeMap<String, Tensor>) -> String {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    for (name, t) in tensors {
        h.update((name.len() as u64).to_le_bytes());
        h.update(name.as_bytes());
        h.update(t.dtype().name().as_bytes());
        h.update((t.shape().len() as u64).to_le_bytes());
        for d in t.shape() {
            h.update(d.to_le_bytes());
        }
        h.update((t.bytes().len() as u64).to_le_bytes());
        h.update(t.bytes());
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
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
        let t = Tensor::from_bytes(dtype, shape, loaded_bytes(dtype, v.data(), v.shape()))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_tensors_and_metadata_give_the_same_bytes() {
        let tensors = BTreeMap::from([
            ("b".to_string(), Tensor::from_f32(vec![2], &[1.0, 2.0])),
            ("a".to_string(), Tensor::from_f32(vec![], &[3.0])),
        ]);
        let meta: BTreeMap<String, String> = (0..8)
            .map(|i| (format!("key{i}"), format!("value{i}")))
            .collect();
        let first = to_bytes(&tensors, meta.clone()).unwrap();
        // Each call builds a fresh HashMap (its own random order) inside the crate.
        for _ in 0..20 {
            assert_eq!(to_bytes(&tensors, meta.clone()).unwrap(), first);
        }
        let (back, m) = parse(&first).unwrap();
        assert_eq!(back, tensors);
        assert_eq!(m, meta);
        let n = u64::from_le_bytes(first[..8].try_into().unwrap());
        assert_eq!(n % 8, 0, "the header stays padded to 8 bytes");
    }

    #[test]
    fn every_dtype_round_trips_and_fp4_is_packed() {
        for d in DType::ALL {
            let t = Tensor::from_bytes(d, vec![2, 2], vec![1; 4 * d.size()]).unwrap();
            let tensors = BTreeMap::from([("t".to_string(), t)]);
            let bytes = to_bytes(&tensors, BTreeMap::new()).unwrap();
            assert_eq!(parse(&bytes).unwrap().0, tensors, "{d}");
        }
        let fp4 = Tensor::from_bytes(DType::F4E2M1, vec![4], vec![1, 2, 3, 15]).unwrap();
        assert_eq!(&stored_bytes(&fp4)[..], &[0x21, 0xF3]);
    }

    /// `write_to` streams the bytes `to_bytes` builds: every dtype at once (the crate orders
    /// the data by dtype, then name), an odd-length FP4, an empty tensor, metadata.
    #[test]
    fn streaming_writes_the_same_bytes() {
        let mut tensors = BTreeMap::new();
        for (i, d) in DType::ALL.iter().enumerate() {
            let n = 2 + 2 * (i % 3);
            let data: Vec<u8> = (0..n * d.size())
                .map(|k| (k * 7 + i) as u8 & 0x0F)
                .collect();
            let t = Tensor::from_bytes(*d, vec![n as u64], data).unwrap();
            tensors.insert(format!("{}{d}", (b'z' - i as u8) as char), t);
        }
        tensors.insert("empty".into(), Tensor::from_f32(vec![0, 3], &[]));
        let meta = BTreeMap::from([("k".to_string(), "v".to_string())]);
        let want = to_bytes(&tensors, meta.clone()).unwrap();
        let mut got = Vec::new();
        write_to(&tensors, meta.clone(), &mut got).unwrap();
        assert_eq!(got, want);
        // What `to_bytes` refuses, `write_to` refuses (an FP4 tensor ending mid-byte).
        let odd = Tensor::from_bytes(DType::F4E2M1, vec![3], vec![1, 2, 3]).unwrap();
        let odd = BTreeMap::from([("odd".to_string(), odd)]);
        let e = to_bytes(&odd, meta.clone()).unwrap_err();
        assert_eq!(write_to(&odd, meta, &mut Vec::new()).unwrap_err(), e);
    }
}
