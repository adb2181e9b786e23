//! Tensors to and from safetensors files (the `safetensors` crate), with every IR dtype kept as
//! itself — FP8 as `F8_E4M3` / `F8_E5M2`, bf16 as `BF16` — so that Python's `safetensors`
//! reads them with their dtypes. Used for checkpoint state; reading checks the file size
//! against a budget before anything is allocated.

use crate::error::{Error, Result, bail};
use crate::files::Output;
use fp8c_ir::{DType, Tensor};
use safetensors::Dtype as St;
use std::collections::BTreeMap;
use std::path::Path;

/// The safetensors dtype of an IR dtype.
pub fn to_st(d: DType) -> Result<St> {
    Ok(match d {
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
        #[allow(unreachable_patterns)]
        other => bail!("{other} tensors have no safetensors dtype"),
    })
}

/// The IR dtype of a safetensors dtype.
pub fn from_st(d: St) -> Result<DType> {
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
        other => bail!("safetensors dtype {other:?} is not supported"),
    })
}

/// The bytes of a safetensors file holding `tensors` (sorted by name) and `metadata`.
pub fn to_bytes(
    tensors: &BTreeMap<String, Tensor>,
    metadata: BTreeMap<String, String>,
) -> Result<Vec<u8>> {
    let mut views = Vec::with_capacity(tensors.len());
    for (name, t) in tensors {
        let shape: Vec<usize> = t.shape().iter().map(|&d| d as usize).collect();
        let view = safetensors::tensor::TensorView::new(to_st(t.dtype())?, shape, t.bytes())
            .map_err(|e| Error::invalid(format!("tensor \"{name}\": {e}")))?;
        views.push((name.clone(), view));
    }
    let meta: std::collections::HashMap<String, String> = metadata.into_iter().collect();
    safetensors::tensor::serialize(views, Some(meta)).map_err(|e| Error::invalid(e.to_string()))
}

/// Writes `tensors` to `out` (atomically) as safetensors.
pub fn write(
    out: &Output,
    tensors: &BTreeMap<String, Tensor>,
    metadata: BTreeMap<String, String>,
) -> Result<Vec<u8>> {
    let bytes = to_bytes(tensors, metadata)?;
    out.write_bytes(&bytes)?;
    Ok(bytes)
}

/// Reads every tensor of a safetensors file of at most `budget` bytes; also returns the
/// file's bytes (for a digest) and its metadata.
pub fn read(
    path: &Path,
    budget: u64,
) -> Result<(BTreeMap<String, Tensor>, BTreeMap<String, String>, Vec<u8>)> {
    let name = path.display();
    let meta = std::fs::metadata(path).map_err(|e| Error::io(format_args!("{name}"), e))?;
    if !meta.is_file() {
        bail!("{name}: not a regular file");
    }
    if meta.len() > budget {
        bail!(
            "{name}: {} bytes is more than the {budget} bytes allowed",
            meta.len()
        );
    }
    let bytes =
        std::fs::read(path).map_err(|e| Error::io(format_args!("{name}: cannot read"), e))?;
    let (tensors, metadata) = parse(&bytes).map_err(|e| Error::invalid(format!("{name}: {e}")))?;
    Ok((tensors, metadata, bytes))
}

/// Parses safetensors bytes into IR tensors and the file's metadata.
pub fn parse(
    bytes: &[u8],
) -> std::result::Result<(BTreeMap<String, Tensor>, BTreeMap<String, String>), String> {
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

/// The lowercase hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    let d = sha2::Sha256::digest(bytes);
    d.iter().map(|b| format!("{b:02x}")).collect()
}

/// The SHA-256 of a file, read in chunks.
pub fn sha256_file(path: &Path) -> Result<String> {
    use sha2::Digest;
    use std::io::Read;
    let mut f = std::fs::File::open(path)
        .map_err(|e| Error::io(format_args!("{}: cannot read", path.display()), e))?;
    let mut h = sha2::Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f
            .read(&mut buf)
            .map_err(|e| Error::io(format_args!("{}: cannot read", path.display()), e))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(h.finalize().iter().map(|b| format!("{b:02x}")).collect())
}
