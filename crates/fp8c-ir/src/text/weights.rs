//! The weights sidecar: parameter data next to a text or JSON graph (`model.fp8ir.weights`).
//!
//! Layout (all integers little-endian):
//!
//! ```text
//! magic      8 bytes   "FP8CW001"
//! count      u64       number of weights that follow
//! per weight, sorted by name:
//!   name_len u32, name (UTF-8, name_len bytes)
//!   dtype_len u8, dtype name (ASCII, as in the text form: "f32", "f8e4m3", ...)
//!   rank     u32, dims (rank × u64)
//!   byte_len u64, raw little-endian element bytes (byte_len bytes)
//! ```
//!
//! Reading checks every entry against the graph's params before reading its bytes, so a
//! corrupt length field can never make the reader allocate more than the graph declares or
//! than the file holds; the graph is changed only if the whole file is valid.

use crate::graph::interface_name;
use crate::{DType, Graph, IrError, Result, Tensor, TensorType};
use std::collections::BTreeMap;
use std::io::{Read, Write};

/// The first 8 bytes of a weights file.
pub const WEIGHTS_MAGIC: &[u8; 8] = b"FP8CW001";

/// Longest weight name the reader accepts (bytes).
const MAX_NAME_LEN: u32 = 1 << 20;
/// Highest rank the reader accepts.
const MAX_RANK: u32 = 64;
/// Largest buffer reserved up front for one weight; bigger ones grow as bytes arrive.
const MAX_RESERVE: u64 = 1 << 26;

/// Writes every param's data (the graph's weights) in the sidecar format.
pub fn write_weights(g: &Graph, w: &mut impl Write) -> Result<()> {
    let io = |e: std::io::Error| IrError::Other(format!("writing weights: {e}"));
    let weights = g.weights();
    w.write_all(WEIGHTS_MAGIC).map_err(io)?;
    w.write_all(&(weights.len() as u64).to_le_bytes())
        .map_err(io)?;
    for (name, t) in weights {
        let name_len = u32::try_from(name.len())
            .ok()
            .filter(|&n| n <= MAX_NAME_LEN)
            .ok_or_else(|| IrError::Other(format!("weight name {name:?} is too long")))?;
        w.write_all(&name_len.to_le_bytes()).map_err(io)?;
        w.write_all(name.as_bytes()).map_err(io)?;
        let dtype = t.dtype().name();
        w.write_all(&[dtype.len() as u8]).map_err(io)?;
        w.write_all(dtype.as_bytes()).map_err(io)?;
        w.write_all(&(t.shape().len() as u32).to_le_bytes())
            .map_err(io)?;
        for d in t.shape() {
            w.write_all(&d.to_le_bytes()).map_err(io)?;
        }
        w.write_all(&(t.bytes().len() as u64).to_le_bytes())
            .map_err(io)?;
        w.write_all(t.bytes()).map_err(io)?;
    }
    w.flush().map_err(io)
}

/// Reads a sidecar written by [`write_weights`] and sets the data of `g`'s params.
/// Errors (without changing `g`) on a bad magic, a truncated or over-long file, a name that
/// is not a param, a repeated name, or data whose type differs from the param's.
pub fn read_weights(g: &mut Graph, r: &mut impl Read) -> Result<()> {
    let params: BTreeMap<String, TensorType> = g
        .params()
        .iter()
        .map(|&id| {
            let n = g.node(id);
            (
                interface_name(&n.op).to_string(),
                n.outputs.first().cloned(),
            )
        })
        .filter_map(|(name, ty)| Some((name, ty?)))
        .collect();
    let mut rd = Reader { r, offset: 0 };
    let magic: [u8; 8] = rd.array("the magic")?;
    if &magic != WEIGHTS_MAGIC {
        return Err(bad("not an fp8c weights file (the magic is not FP8CW001)"));
    }
    let count = u64::from_le_bytes(rd.array("the weight count")?);
    let mut read: BTreeMap<String, Tensor> = BTreeMap::new();
    for i in 0..count {
        let what = format!("weight #{i}");
        let name_len = u32::from_le_bytes(rd.array(&format!("the name length of {what}"))?);
        if name_len > MAX_NAME_LEN {
            return Err(bad(format!(
                "{what}: name length {name_len} is too large (corrupt file?)"
            )));
        }
        let name = rd.bytes(name_len as u64, &format!("the name of {what}"))?;
        let name =
            String::from_utf8(name).map_err(|_| bad(format!("{what}: name is not UTF-8")))?;
        let [dtype_len] = rd.array(&format!("the dtype of weight {name:?}"))?;
        let dtype = rd.bytes(dtype_len as u64, &format!("the dtype of weight {name:?}"))?;
        let dtype: DType = std::str::from_utf8(&dtype)
            .map_err(|_| bad(format!("weight {name:?}: dtype is not text")))?
            .parse()
            .map_err(|e| bad(format!("weight {name:?}: {e}")))?;
        let rank = u32::from_le_bytes(rd.array(&format!("the rank of weight {name:?}"))?);
        if rank > MAX_RANK {
            return Err(bad(format!(
                "weight {name:?}: rank {rank} is too large (corrupt file?)"
            )));
        }
        let mut dims = Vec::with_capacity(rank as usize);
        for _ in 0..rank {
            dims.push(u64::from_le_bytes(
                rd.array(&format!("the shape of weight {name:?}"))?,
            ));
        }
        let byte_len = u64::from_le_bytes(rd.array(&format!("the size of weight {name:?}"))?);
        let file_ty = TensorType::fixed(dtype, &dims);
        let Some(declared) = params.get(&name) else {
            return Err(bad(format!(
                "the file has weight {name:?}, which is not a param of graph @{}",
                g.name()
            )));
        };
        if read.contains_key(&name) {
            return Err(bad(format!("weight {name:?} appears twice")));
        }
        if *declared != file_ty {
            let (f, d) = (
                super::print::type_text(&file_ty),
                super::print::type_text(declared),
            );
            return Err(bad(format!(
                "weight {name:?}: the file has {f}, the graph declares {d}"
            )));
        }
        let want = crate::checked_numel(&dims).and_then(|n| n.checked_mul(dtype.size() as u64));
        if want != Some(byte_len) {
            return Err(bad(format!(
                "weight {name:?}: {byte_len} bytes do not match its type {}",
                super::print::type_text(&file_ty)
            )));
        }
        let data = rd.bytes(byte_len, &format!("the data of weight {name:?}"))?;
        let t = Tensor::from_bytes(dtype, dims, data)
            .map_err(|e| bad(format!("weight {name:?}: {e}")))?;
        read.insert(name, t);
    }
    let mut extra = [0u8; 1];
    match rd.r.read(&mut extra) {
        Ok(0) => {}
        Ok(_) => {
            return Err(bad(format!(
                "unexpected data after the {count} weight(s), at byte {}",
                rd.offset
            )));
        }
        Err(e) => return Err(bad(format!("read error: {e}"))),
    }
    for (name, t) in read {
        g.set_weight(&name, t)?;
    }
    Ok(())
}

fn bad(msg: impl Into<String>) -> IrError {
    IrError::Other(format!("weights file: {}", msg.into()))
}

/// A reader that counts bytes and reports truncation with what was being read.
struct Reader<'r, R: Read> {
    r: &'r mut R,
    offset: u64,
}

impl<R: Read> Reader<'_, R> {
    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N]> {
        let mut buf = [0u8; N];
        let mut got = 0;
        while got < N {
            match self.r.read(&mut buf[got..]) {
                Ok(0) => return Err(self.truncated(what)),
                Ok(k) => got += k,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(bad(format!("read error: {e}"))),
            }
        }
        self.offset += N as u64;
        Ok(buf)
    }

    /// Reads exactly `len` bytes; the buffer grows with the data actually present, so a
    /// corrupt length cannot make it allocate more than the file holds.
    fn bytes(&mut self, len: u64, what: &str) -> Result<Vec<u8>> {
        let mut buf = Vec::with_capacity(len.min(MAX_RESERVE) as usize);
        let got = (&mut *self.r)
            .take(len)
            .read_to_end(&mut buf)
            .map_err(|e| bad(format!("read error: {e}")))?;
        if got as u64 != len {
            return Err(self.truncated(what));
        }
        self.offset += len;
        Ok(buf)
    }

    fn truncated(&self, what: &str) -> IrError {
        bad(format!(
            "truncated at byte {} while reading {what}",
            self.offset
        ))
    }
}
