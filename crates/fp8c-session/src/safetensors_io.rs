//! Safetensors files of IR tensors (encoding in `fp8c_ir::safetensors_codec`: every IR dtype
//! kept as itself, so Python's `safetensors` reads them with their dtypes): atomic writes and
//! budgeted reads for checkpoint state, and SHA-256 digests.

use crate::error::{Error, Result, bail};
use crate::files::Output;
use fp8c_ir::Tensor;
use std::collections::BTreeMap;
use std::path::Path;

/// The bytes of a safetensors file holding `tensors` (sorted by name) and `metadata`
/// (the encoding is `fp8c_ir::safetensors_codec`'s).
pub fn to_bytes(
    tensors: &BTreeMap<String, Tensor>,
    metadata: BTreeMap<String, String>,
) -> Result<Vec<u8>> {
    fp8c_ir::safetensors_codec::to_bytes(tensors, metadata).map_err(Error::invalid)
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

/// Tensors by name.
pub type Tensors = BTreeMap<String, Tensor>;
/// A file's metadata.
pub type Metadata = BTreeMap<String, String>;

/// Reads every tensor of a safetensors file of at most `budget` bytes; also returns the
/// file's bytes (for a digest) and its metadata.
pub fn read(path: &Path, budget: u64) -> Result<(Tensors, Metadata, Vec<u8>)> {
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
pub use fp8c_ir::safetensors_codec::parse;

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
