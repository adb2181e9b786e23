//! External data of models fp8c writes: a rewritten copy of a model must not point at its
//! source's data files (their `location` is relative to the source's folder, not the copy's),
//! so [`read_in`] reads them into the model, and a model past protobuf's 2 GiB limit has its
//! large initializers moved to one data file of its own by [`write_out`] (ONNX's external data
//! form: `location`, `offset`, `length`, `data_location = EXTERNAL`).

use crate::OnnxError;
use crate::proto::tensor_proto::DataLocation;
use crate::proto::{GraphProto, ModelProto, StringStringEntryProto, TensorProto};
use crate::tensor::{tensor_from_proto, tensor_to_proto};
use std::path::Path;

/// The largest message protobuf (and so onnxruntime and onnx) parses: 2 GiB − 1.
pub const PROTOBUF_LIMIT: usize = i32::MAX as usize;

/// Offsets in a data file written by [`write_out`] are multiples of this (the page size
/// onnxruntime's memory mapping prefers).
const ALIGN: usize = 4096;

/// Reads every external initializer of `model` (its graphs and subgraphs) into the model;
/// `base_dir` is the folder of the file the model was read from.
pub fn read_in(model: &mut ModelProto, base_dir: Option<&Path>) -> Result<(), OnnxError> {
    match model.graph.as_mut() {
        Some(g) => read_in_graph(g, base_dir),
        None => Ok(()),
    }
}

fn read_in_graph(g: &mut GraphProto, base_dir: Option<&Path>) -> Result<(), OnnxError> {
    for t in &mut g.initializer {
        if t.data_location == Some(DataLocation::External as i32) {
            let mut inline = tensor_to_proto(t.name(), &tensor_from_proto(t, base_dir)?);
            inline.doc_string = t.doc_string.take();
            *t = inline;
        }
    }
    for n in &mut g.node {
        for a in &mut n.attribute {
            for sub in a.g.iter_mut().chain(a.graphs.iter_mut()) {
                read_in_graph(sub, base_dir)?;
            }
        }
    }
    Ok(())
}

/// Moves the data of every top-level initializer of at least `min_bytes` bytes out of
/// `model` into the returned bytes, to be saved as `location` next to the model file; the
/// initializers refer to it.
pub fn write_out(model: &mut ModelProto, location: &str, min_bytes: usize) -> Vec<u8> {
    let mut data = Vec::new();
    let Some(g) = model.graph.as_mut() else {
        return data;
    };
    for t in &mut g.initializer {
        if t.raw_data.as_ref().is_none_or(|r| r.len() < min_bytes) {
            continue;
        }
        let raw = t.raw_data.take().unwrap_or_default();
        data.resize(data.len().next_multiple_of(ALIGN), 0);
        let offset = data.len();
        data.extend_from_slice(&raw);
        set_external(t, location, offset, raw.len());
    }
    data
}

fn set_external(t: &mut TensorProto, location: &str, offset: usize, length: usize) {
    let entry = |k: &str, v: String| StringStringEntryProto {
        key: Some(k.into()),
        value: Some(v),
    };
    t.data_location = Some(DataLocation::External as i32);
    t.external_data = vec![
        entry("location", location.to_string()),
        entry("offset", offset.to_string()),
        entry("length", length.to_string()),
    ];
}

#[cfg(test)]
mod tests {
    use super::*;
    use fp8c_ir::Tensor;

    #[test]
    fn data_written_out_reads_back_in() {
        let dir = std::env::temp_dir().join(format!("fp8c_external_{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let big = Tensor::from_f32(
            vec![3, 700],
            &(0..2100).map(|i| i as f32).collect::<Vec<_>>(),
        );
        let small = Tensor::from_f32(vec![2], &[1.5, -2.0]);
        let mut model = ModelProto {
            graph: Some(GraphProto {
                initializer: vec![
                    tensor_to_proto("small", &small),
                    tensor_to_proto("big", &big),
                ],
                ..Default::default()
            }),
            ..Default::default()
        };
        let original = model.clone();
        let data = write_out(&mut model, "m.onnx.data", 1024);
        let g = model.graph.as_ref().unwrap();
        assert!(g.initializer[0].raw_data.is_some(), "small stays inline");
        assert_eq!(g.initializer[1].data_location, Some(1));
        assert_eq!(g.initializer[1].raw_data, None);
        assert_eq!(data.len(), 2100 * 4);
        std::fs::write(dir.join("m.onnx.data"), &data).unwrap();
        let t = tensor_from_proto(&g.initializer[1], Some(&dir)).unwrap();
        assert_eq!(t.bytes(), big.bytes());
        read_in(&mut model, Some(&dir)).unwrap();
        assert_eq!(model, original);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
