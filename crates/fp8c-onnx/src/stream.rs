//! Reading a model file without holding it in memory twice.
//!
//! Decoding a whole `ModelProto` keeps the file's bytes, the decoded message (every
//! initializer's `raw_data` copied) and then the IR's tensors alive at once: three copies of
//! the weights at the peak. This reader walks the protobuf wire format from the file instead:
//! every initializer's `raw_data` is read straight from the file into the aligned [`Storage`]
//! the IR tensor will own, and everything else (small: the nodes, the value infos, the
//! initializers' names and dims) is collected and decoded with prost as usual. The peak is
//! then one copy of the weights plus the metadata.
//!
//! The walk checks every length against what is left of the file before it allocates, so a
//! corrupt length is an error, not a huge allocation. Field numbers are ONNX's
//! (`onnx.proto`): `ModelProto.graph = 7`, `GraphProto.initializer = 5`,
//! `TensorProto.raw_data = 9`.

use crate::OnnxError;
use crate::proto::ModelProto;
use fp8c_ir::Storage;
use prost::Message;
use std::io::Read;

const MODEL_GRAPH: u64 = 7;
const GRAPH_INITIALIZER: u64 = 5;
const TENSOR_RAW_DATA: u64 = 9;
const WIRE_VARINT: u64 = 0;
const WIRE_I64: u64 = 1;
const WIRE_LEN: u64 = 2;
const WIRE_I32: u64 = 5;

/// A model read by [`read_model`]: the message with the initializers' `raw_data` taken out,
/// and that data by initializer index (None where the initializer had no `raw_data`).
pub(crate) struct StreamedModel {
    pub model: ModelProto,
    pub raw: Vec<Option<Storage>>,
}

fn bad(reason: impl Into<String>) -> OnnxError {
    OnnxError::Decode {
        what: "model",
        reason: reason.into(),
    }
}

/// A reader that counts what is left.
struct Input<R> {
    r: R,
    left: u64,
}

impl<R: Read> Input<R> {
    fn byte(&mut self) -> Result<u8, OnnxError> {
        let mut b = [0u8];
        self.exact(&mut b)?;
        Ok(b[0])
    }

    fn exact(&mut self, buf: &mut [u8]) -> Result<(), OnnxError> {
        if buf.len() as u64 > self.left {
            return Err(bad("unexpected end of the file (a field runs past it)"));
        }
        self.r.read_exact(buf).map_err(OnnxError::Io)?;
        self.left -= buf.len() as u64;
        Ok(())
    }

    /// A varint; its bytes are appended to `copy`.
    fn varint(&mut self, copy: &mut Vec<u8>) -> Result<u64, OnnxError> {
        let mut v = 0u64;
        for i in 0..10 {
            let b = self.byte()?;
            copy.push(b);
            v |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(bad("invalid varint"))
    }

    /// A length, checked against what is left of the file (and of the enclosing message).
    fn len(&mut self, copy: &mut Vec<u8>, limit: u64) -> Result<u64, OnnxError> {
        let n = self.varint(copy)?;
        if n > self.left || n > limit {
            return Err(bad(format!(
                "a field of {n} bytes runs past the end of its message"
            )));
        }
        Ok(n)
    }

    fn copy(&mut self, n: u64, out: &mut Vec<u8>) -> Result<(), OnnxError> {
        let start = out.len();
        out.resize(start + n as usize, 0);
        self.exact(&mut out[start..])
    }
}

/// Copies one field's payload (after its key) to `out`.
fn copy_payload<R: Read>(
    inp: &mut Input<R>,
    wire: u64,
    limit: u64,
    out: &mut Vec<u8>,
) -> Result<(), OnnxError> {
    match wire {
        WIRE_VARINT => inp.varint(out).map(drop),
        WIRE_I64 => inp.copy(8, out),
        WIRE_I32 => inp.copy(4, out),
        WIRE_LEN => {
            let n = inp.len(out, limit)?;
            inp.copy(n, out)
        }
        w => Err(bad(format!("unsupported wire type {w}"))),
    }
}

/// Reads a model from `r` (`len` bytes), taking every initializer's `raw_data` out into
/// aligned storage as it goes.
pub(crate) fn read_model(r: impl Read, len: u64) -> Result<StreamedModel, OnnxError> {
    let mut inp = Input { r, left: len };
    let mut model_rest = Vec::new();
    let mut graph_rest = Vec::new();
    let mut inits = Vec::new();
    let mut raw = Vec::new();
    let mut saw_graph = false;
    while inp.left > 0 {
        let mut key_bytes = Vec::new();
        let key = inp.varint(&mut key_bytes)?;
        let (field, wire) = (key >> 3, key & 7);
        if field == MODEL_GRAPH && wire == WIRE_LEN {
            let n = inp.len(&mut Vec::new(), u64::MAX)?;
            read_graph(&mut inp, n, &mut graph_rest, &mut inits, &mut raw)?;
            saw_graph = true;
        } else {
            model_rest.extend_from_slice(&key_bytes);
            copy_payload(&mut inp, wire, u64::MAX, &mut model_rest)?;
        }
    }
    let mut model = ModelProto::decode(model_rest.as_slice())
        .map_err(|e| bad(crate::error::protobuf_reason(&e)))?;
    let mut graph = crate::proto::GraphProto::decode(graph_rest.as_slice())
        .map_err(|e| bad(crate::error::protobuf_reason(&e)))?;
    // Initializers left in `graph_rest` cannot exist (every field 5 was taken out), so the
    // stubs are the initializers, in file order.
    graph.initializer = inits;
    if !saw_graph {
        return Err(OnnxError::NoGraph);
    }
    model.graph = Some(graph);
    Ok(StreamedModel { model, raw })
}

/// Reads `n` bytes of a `GraphProto`: initializers are split into a stub (decoded) and their
/// raw data (aligned storage); other fields are copied to `rest`.
fn read_graph<R: Read>(
    inp: &mut Input<R>,
    n: u64,
    rest: &mut Vec<u8>,
    inits: &mut Vec<crate::proto::TensorProto>,
    raw: &mut Vec<Option<Storage>>,
) -> Result<(), OnnxError> {
    let end = inp.left - n;
    while inp.left > end {
        let limit = inp.left - end;
        let mut key_bytes = Vec::new();
        let key = inp.varint(&mut key_bytes)?;
        let (field, wire) = (key >> 3, key & 7);
        if field == GRAPH_INITIALIZER && wire == WIRE_LEN {
            let m = inp.len(&mut Vec::new(), limit)?;
            let (stub, data) = read_tensor(inp, m)?;
            inits.push(stub);
            raw.push(data);
        } else {
            rest.extend_from_slice(&key_bytes);
            copy_payload(inp, wire, limit, rest)?;
        }
        if inp.left < end {
            return Err(bad("a graph field runs past the end of the graph"));
        }
    }
    Ok(())
}

/// Reads `n` bytes of a `TensorProto`: `raw_data` into aligned storage, the rest decoded.
fn read_tensor<R: Read>(
    inp: &mut Input<R>,
    n: u64,
) -> Result<(crate::proto::TensorProto, Option<Storage>), OnnxError> {
    let end = inp.left - n;
    let mut rest = Vec::new();
    let mut data: Option<Storage> = None;
    while inp.left > end {
        let limit = inp.left - end;
        let mut key_bytes = Vec::new();
        let key = inp.varint(&mut key_bytes)?;
        let (field, wire) = (key >> 3, key & 7);
        if field == TENSOR_RAW_DATA && wire == WIRE_LEN {
            let m = inp.len(&mut Vec::new(), limit)?;
            let mut s = Storage::zeroed(m as usize);
            inp.exact(s.bytes_mut())?;
            // A repeated bytes field keeps the last value (protobuf's rule for scalars).
            data = Some(s);
        } else {
            rest.extend_from_slice(&key_bytes);
            copy_payload(inp, wire, limit, &mut rest)?;
        }
        if inp.left < end {
            return Err(bad("a tensor field runs past the end of the tensor"));
        }
    }
    let stub = crate::proto::TensorProto::decode(rest.as_slice())
        .map_err(|e| bad(crate::error::protobuf_reason(&e)))?;
    Ok((stub, data))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{GraphProto, NodeProto, TensorProto};

    fn model() -> ModelProto {
        let t = |name: &str, raw: Vec<u8>| TensorProto {
            name: Some(name.into()),
            dims: vec![raw.len() as i64 / 4],
            data_type: Some(1),
            raw_data: Some(raw),
            ..Default::default()
        };
        ModelProto {
            ir_version: Some(8),
            graph: Some(GraphProto {
                name: Some("g".into()),
                node: vec![NodeProto {
                    op_type: Some("Relu".into()),
                    ..Default::default()
                }],
                initializer: vec![t("a", vec![1, 2, 3, 4]), t("b", (0..64).collect())],
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn raw_data_is_taken_out_and_the_rest_decodes_as_prost_does() {
        let m = model();
        let bytes = m.encode_to_vec();
        let s = read_model(bytes.as_slice(), bytes.len() as u64).unwrap();
        let mut want = m.clone();
        let g = want.graph.as_mut().unwrap();
        let raws: Vec<Vec<u8>> = g
            .initializer
            .iter_mut()
            .map(|t| t.raw_data.take().unwrap())
            .collect();
        assert_eq!(s.model, want);
        for (got, want) in s.raw.iter().zip(&raws) {
            assert_eq!(got.as_ref().unwrap().bytes(), want.as_slice());
        }
    }

    #[test]
    fn every_truncation_is_an_error() {
        let bytes = model().encode_to_vec();
        for cut in 0..bytes.len() {
            let r = read_model(&bytes[..cut], cut as u64);
            // A cut at a field boundary is a valid (smaller) message, or one with no graph;
            // anything else is a decode error.
            if let Err(e) = r {
                let m = e.to_string();
                assert!(
                    m.starts_with("not a valid ONNX model") || m.starts_with("not an ONNX model"),
                    "{m}"
                );
            }
        }
    }
}
