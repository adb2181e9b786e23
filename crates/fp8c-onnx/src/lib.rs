//! ONNX import for fp8c: a `ModelProto` (prost, over the vendored `proto/onnx.proto`) becomes
//! an [`fp8c_ir::Graph`].
//!
//! - [`load_model`] / [`import_bytes`]: import, with [`ImportOptions`] to select outputs
//!   (pruning what feeds none of them) and override input dims. See `import.rs` for the
//!   stages and `ops/` for the op registry ([`SUPPORTED_OPS`]).
//! - [`inspect`]: a summary read from the proto alone (works on unsupported models).
//! - [`load_tensor_pb`] / [`save_tensor_pb`]: the `.pb` tensor files of ONNX backend tests.
//! - [`export::with_weights`]: trained weights written back into a copy of the model.
//! - [`builder::ModelBuilder`]: builds small models for tests.
//!
//! Nothing here panics on a corrupt file: every failure is an [`OnnxError`] naming the file,
//! the node (`node "name" (OpType): ...`), the value and what is wrong.

pub mod builder;
mod error;
pub mod export;
pub mod external_data;
mod if_node;
mod import;
mod inspect;
mod ops;
pub mod qdq;
pub mod qdq_current;
mod qdq_origin;
mod scan;
mod shape_inputs;
mod stream;
mod strings;
mod subgraph;
mod tensor;
mod value_info;

/// The prost types generated from `proto/onnx.proto` (package `onnx`).
#[allow(missing_docs, clippy::all, clippy::pedantic, rustdoc::all)]
pub mod proto {
    include!(concat!(env!("OUT_DIR"), "/onnx.rs"));
}

pub use error::{OnnxError, UnsupportedOp};
pub use import::{
    ImportOptions, Imported, MAX_OPSET, MIN_OPSET, ai_onnx_opset, decode_model, import_bytes,
    import_model, load_interface, load_model,
};
pub use inspect::{
    ModelInfo, OpsetInfo, SubgraphInfo, UnsupportedNode, ValueSummary, inspect, inspect_bytes,
    inspect_model,
};
pub use ops::SUPPORTED_OPS;
pub use ops::contrib::CONTRIB_SUPPORTED_OPS;
pub use ops::ml::ML_SUPPORTED_OPS;
pub use shape_inputs::shape_inputs;
pub use tensor::{
    decode_tensor_pb, dtype_from_onnx, dtype_to_onnx, load_tensor_pb, onnx_dtype_name,
    save_tensor_pb, string_tensor_pb_bytes, tensor_from_proto, tensor_pb_bytes, tensor_to_proto,
};
