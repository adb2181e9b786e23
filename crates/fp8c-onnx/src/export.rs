//! Writing trained weights back into an ONNX model: a copy of the source model in which every
//! named tensor replaces the initializer (or the `Constant` node's value) of that name.
//!
//! Everything else in the model (nodes, opsets, metadata, value infos) is kept byte for byte
//! as decoded, so the result runs wherever the source did (onnxruntime, `fp8c run`).

use crate::OnnxError;
use crate::proto::ModelProto;
use crate::proto::attribute_proto::AttributeType;
use fp8c_ir::Tensor;
use prost::Message;
use std::collections::BTreeMap;

/// The source model's bytes with `weights` written in: each name replaces the initializer of
/// that name, or the `value` of the `Constant` node that outputs it. Returns the encoded model
/// and the names found in neither place (their values are not in the result).
///
/// Initializers stored as external data are refused ([`OnnxError::ExternalData`]): the
/// result holds inline data only, so it would silently disagree with the external file
/// (read the data in first and use [`set_weights`]).
pub fn with_weights(
    src: &[u8],
    weights: &BTreeMap<String, Tensor>,
) -> Result<(Vec<u8>, Vec<String>), OnnxError> {
    let mut model = crate::decode_model(src)?;
    let missing = set_weights(&mut model, weights)?;
    Ok((model.encode_to_vec(), missing))
}

/// [`with_weights`] on a decoded model, in place. A caller that has read the model's
/// external data in first ([`crate::external_data::read_in`]) can write any model's weights.
pub fn set_weights(
    model: &mut ModelProto,
    weights: &BTreeMap<String, Tensor>,
) -> Result<Vec<String>, OnnxError> {
    let graph = model.graph.as_mut().ok_or(OnnxError::NoGraph)?;
    let mut missing = Vec::new();
    for (name, t) in weights {
        let proto = crate::tensor_to_proto(name, t);
        if let Some(init) = graph.initializer.iter_mut().find(|i| i.name() == name) {
            // TensorProto.DataLocation: 0 = DEFAULT (inline), 1 = EXTERNAL.
            if init.data_location == Some(1) {
                return Err(OnnxError::ExternalData { name: name.clone() });
            }
            *init = proto;
            continue;
        }
        let node = graph.node.iter_mut().find(|n| {
            n.op_type() == "Constant" && n.output.first().map(String::as_str) == Some(name)
        });
        match node.and_then(|n| n.attribute.iter_mut().find(|a| a.name() == "value")) {
            Some(attr) => {
                attr.t = Some(proto);
                attr.r#type = Some(AttributeType::Tensor as i32);
            }
            None => missing.push(name.clone()),
        }
    }
    Ok(missing)
}
