//! The weights sidecar: parameter data next to a text or JSON graph
//! (`model.fp8ir.safetensors`), a standard safetensors file — one tensor per param, named as
//! the param, with its own dtype (FP8 as `F8_E4M3` / `F8_E5M2`, bf16 as `BF16`) — that
//! Python's `safetensors.numpy.load_file` and Hugging Face tools read as they are.
//!
//! Reading checks every tensor against the graph's params (name, dtype, shape) and against the
//! SHA-256 fp8c writes in the metadata (`fp8c.sha256`), and changes the graph only if the
//! whole file is valid. Files of fp8c's earlier sidecar format (magic
//! `FP8CW001`) are refused with a message naming the new one.

use crate::graph::interface_name;
use crate::{Graph, IrError, Result, TensorType};
use std::collections::BTreeMap;
use std::io::{Read, Write};

/// The first 8 bytes of fp8c's earlier (pre-safetensors) weights format, recognised only to
/// say that it is no longer read.
pub const OLD_WEIGHTS_MAGIC: &[u8; 8] = b"FP8CW001";

/// Metadata key naming the graph a sidecar belongs to.
const GRAPH_KEY: &str = "fp8c.graph";
/// Metadata key of the tensors' SHA-256 (`safetensors_codec::digest`), checked on reading when
/// present (files written by other tools have none).
const DIGEST_KEY: &str = "fp8c.sha256";

/// Writes every param's data (the graph's weights) as a safetensors file.
pub fn write_weights(g: &Graph, w: &mut impl Write) -> Result<()> {
    let meta = BTreeMap::from([
        (GRAPH_KEY.to_string(), g.name().to_string()),
        ("format".to_string(), "pt".to_string()),
        (
            DIGEST_KEY.to_string(),
            crate::safetensors_codec::digest(g.weights()),
        ),
    ]);
    // Streamed: a model's weights are not copied into one buffer first.
    crate::safetensors_codec::write_to(g.weights(), meta, w)
        .map_err(|e| IrError::Other(format!("writing weights: {e}")))?;
    w.flush()
        .map_err(|e| IrError::Other(format!("writing weights: {e}")))
}

/// Reads a safetensors sidecar written by [`write_weights`] (or any safetensors file whose
/// tensors are named as `g`'s params) and sets the data of those params. Errors (without
/// changing `g`) on a file that is not safetensors, an old `FP8CW001` file, a tensor that is
/// not a param, or data whose type differs from the param's.
pub fn read_weights(g: &mut Graph, r: &mut impl Read) -> Result<()> {
    let mut bytes = Vec::new();
    r.read_to_end(&mut bytes)
        .map_err(|e| bad(format!("read error: {e}")))?;
    if bytes.starts_with(OLD_WEIGHTS_MAGIC) {
        return Err(bad(
            "this is fp8c's old weights format (FP8CW001), no longer read: weights are now a \
             safetensors file (FILE.safetensors); recompile the model with \
             `fp8c compile MODEL.onnx --emit ir -o FILE` to write one",
        ));
    }
    let (tensors, meta) = crate::safetensors_codec::parse(&bytes).map_err(bad)?;
    drop(bytes);
    if let Some(want) = meta.get(DIGEST_KEY)
        && *want != crate::safetensors_codec::digest(&tensors)
    {
        return Err(bad(
            "the tensors do not match the file's checksum (fp8c.sha256): the file is damaged",
        ));
    }
    let params: BTreeMap<String, TensorType> = g
        .params()
        .iter()
        .filter_map(|&id| {
            let n = g.node(id);
            Some((
                interface_name(&n.op).to_string(),
                n.outputs.first()?.clone(),
            ))
        })
        .collect();
    for (name, t) in &tensors {
        let Some(declared) = params.get(name) else {
            return Err(bad(format!(
                "the file has weight {name:?}, which is not a param of graph @{}",
                g.name()
            )));
        };
        if *declared != t.ty() {
            let (f, d) = (
                super::print::type_text(&t.ty()),
                super::print::type_text(declared),
            );
            return Err(bad(format!(
                "weight {name:?}: the file has {f}, the graph declares {d}"
            )));
        }
    }
    for (name, t) in tensors {
        g.set_weight(&name, t)?;
    }
    Ok(())
}

fn bad(msg: impl Into<String>) -> IrError {
    IrError::Other(format!("weights file: {}", msg.into()))
}
