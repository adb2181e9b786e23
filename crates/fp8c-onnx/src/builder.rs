//! A tiny fluent ONNX model builder, so that tests never spell out protobuf structs.
//!
//! ```
//! use fp8c_onnx::builder::{ModelBuilder, dim};
//! use fp8c_ir::DType;
//!
//! let bytes = ModelBuilder::new()
//!     .opset(17)
//!     .input("x", DType::F32, &[dim("batch"), 4.into()])
//!     .initializer_f32("w", &[4, 8], &[0.5; 32])
//!     .node("MatMul", &["x", "w"], &["y"]).name("mm")
//!     .output("y", DType::F32, &[dim("batch"), 8.into()])
//!     .to_bytes();
//! assert!(!bytes.is_empty());
//! ```
//!
//! Attribute and naming methods (`attr_*`, `name`, `domain`) apply to the last node added;
//! calling them before any `node` is a caller bug and panics.

use crate::proto::attribute_proto::AttributeType;
use crate::proto::tensor_shape_proto::{Dimension, dimension};
use crate::proto::{
    AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorProto,
    TensorShapeProto, TypeProto, ValueInfoProto, type_proto,
};
use crate::tensor::{dtype_to_onnx, tensor_to_proto};
use fp8c_ir::{DType, Dim, Tensor};
use prost::Message;
use std::path::Path;

/// A symbolic dimension (`dim("batch")`).
pub fn dim(name: &str) -> Dim {
    Dim::Sym(name.to_string())
}

/// Builds an ONNX model (ir_version 8, ai.onnx opset 17 unless told otherwise).
#[derive(Clone, Debug)]
pub struct ModelBuilder {
    model: ModelProto,
}

impl Default for ModelBuilder {
    fn default() -> Self {
        Self::new()
    }
}

/// A tensor value info of `dtype` and `dims`.
pub fn value_info(name: &str, dtype: DType, dims: &[Dim]) -> ValueInfoProto {
    let dim = dims
        .iter()
        .map(|d| Dimension {
            value: match d {
                Dim::Known(n) => Some(dimension::Value::DimValue(*n as i64)),
                Dim::Sym(s) => Some(dimension::Value::DimParam(s.clone())),
                Dim::Unknown => None,
            },
            denotation: None,
        })
        .collect();
    ValueInfoProto {
        name: Some(name.to_string()),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: Some(dtype_to_onnx(dtype)),
                shape: Some(TensorShapeProto { dim }),
            })),
            denotation: None,
        }),
        ..Default::default()
    }
}

impl ModelBuilder {
    /// An empty model: ir_version 8, ai.onnx opset 17, graph `test`.
    pub fn new() -> Self {
        let model = ModelProto {
            ir_version: Some(8),
            producer_name: Some("fp8c-onnx-builder".into()),
            producer_version: Some(env!("CARGO_PKG_VERSION").into()),
            opset_import: vec![OperatorSetIdProto {
                domain: Some(String::new()),
                version: Some(17),
            }],
            graph: Some(GraphProto {
                name: Some("test".into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        ModelBuilder { model }
    }

    fn graph(&mut self) -> &mut GraphProto {
        self.model.graph.get_or_insert_with(Default::default)
    }

    fn last_node(&mut self) -> &mut NodeProto {
        self.graph()
            .node
            .last_mut()
            .expect("ModelBuilder: add a node before naming it or giving it attributes")
    }

    /// Sets the ai.onnx opset version.
    pub fn opset(self, version: i64) -> Self {
        self.opset_import("", version)
    }

    /// Sets (or adds) the opset version of `domain`.
    pub fn opset_import(mut self, domain: &str, version: i64) -> Self {
        let imports = &mut self.model.opset_import;
        match imports.iter_mut().find(|o| o.domain() == domain) {
            Some(o) => o.version = Some(version),
            None => imports.push(OperatorSetIdProto {
                domain: Some(domain.into()),
                version: Some(version),
            }),
        }
        self
    }

    /// Removes every opset import.
    pub fn clear_opsets(mut self) -> Self {
        self.model.opset_import.clear();
        self
    }

    /// Sets the IR version.
    pub fn ir_version(mut self, v: i64) -> Self {
        self.model.ir_version = Some(v);
        self
    }

    /// Sets the producer name and version.
    pub fn producer(mut self, name: &str, version: &str) -> Self {
        self.model.producer_name = Some(name.into());
        self.model.producer_version = Some(version.into());
        self
    }

    /// Sets the graph name.
    pub fn graph_name(mut self, name: &str) -> Self {
        self.graph().name = Some(name.into());
        self
    }

    /// Adds a typed graph input.
    pub fn input(mut self, name: &str, dtype: DType, dims: &[Dim]) -> Self {
        self.graph().input.push(value_info(name, dtype, dims));
        self
    }

    /// Adds a graph input given as a raw value info (untyped, unranked, odd types).
    pub fn input_proto(mut self, vi: ValueInfoProto) -> Self {
        self.graph().input.push(vi);
        self
    }

    /// Adds a graph input without a type.
    pub fn input_untyped(self, name: &str) -> Self {
        self.input_proto(ValueInfoProto {
            name: Some(name.into()),
            ..Default::default()
        })
    }

    /// Adds a typed graph output.
    pub fn output(mut self, name: &str, dtype: DType, dims: &[Dim]) -> Self {
        self.graph().output.push(value_info(name, dtype, dims));
        self
    }

    /// Adds a graph output without a type (the importer infers it).
    pub fn output_untyped(mut self, name: &str) -> Self {
        self.graph().output.push(ValueInfoProto {
            name: Some(name.into()),
            ..Default::default()
        });
        self
    }

    /// Adds an initializer holding `tensor` (raw data).
    pub fn initializer(self, name: &str, tensor: &Tensor) -> Self {
        self.initializer_proto(tensor_to_proto(name, tensor))
    }

    /// Adds an f32 initializer. Panics if `data` does not match `dims` (a caller bug).
    pub fn initializer_f32(self, name: &str, dims: &[u64], data: &[f32]) -> Self {
        self.initializer(name, &Tensor::from_f32(dims.to_vec(), data))
    }

    /// Adds an i64 initializer. Panics if `data` does not match `dims` (a caller bug).
    pub fn initializer_i64(self, name: &str, dims: &[u64], data: &[i64]) -> Self {
        self.initializer(name, &Tensor::from_i64(dims.to_vec(), data))
    }

    /// Adds an initializer given as a raw tensor proto (for corrupt or unusual encodings).
    pub fn initializer_proto(mut self, t: TensorProto) -> Self {
        self.graph().initializer.push(t);
        self
    }

    /// Adds a node (unnamed: the importer calls it `{op_type}_{index}`).
    pub fn node(mut self, op_type: &str, inputs: &[&str], outputs: &[&str]) -> Self {
        self.graph().node.push(NodeProto {
            op_type: Some(op_type.into()),
            input: inputs.iter().map(|s| s.to_string()).collect(),
            output: outputs.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        });
        self
    }

    /// Names the last node.
    pub fn name(mut self, name: &str) -> Self {
        self.last_node().name = Some(name.into());
        self
    }

    /// Sets the last node's domain.
    pub fn domain(mut self, domain: &str) -> Self {
        self.last_node().domain = Some(domain.into());
        self
    }

    /// Adds a raw attribute to the last node.
    pub fn attr(mut self, a: AttributeProto) -> Self {
        self.last_node().attribute.push(a);
        self
    }

    fn attr_of(name: &str, ty: AttributeType) -> AttributeProto {
        AttributeProto {
            name: Some(name.into()),
            r#type: Some(ty as i32),
            ..Default::default()
        }
    }

    /// An int attribute on the last node.
    pub fn attr_int(self, name: &str, v: i64) -> Self {
        self.attr(AttributeProto {
            i: Some(v),
            ..Self::attr_of(name, AttributeType::Int)
        })
    }

    /// A float attribute on the last node.
    pub fn attr_float(self, name: &str, v: f32) -> Self {
        self.attr(AttributeProto {
            f: Some(v),
            ..Self::attr_of(name, AttributeType::Float)
        })
    }

    /// An ints attribute on the last node.
    pub fn attr_ints(self, name: &str, v: &[i64]) -> Self {
        self.attr(AttributeProto {
            ints: v.to_vec(),
            ..Self::attr_of(name, AttributeType::Ints)
        })
    }

    /// A floats attribute on the last node.
    pub fn attr_floats(self, name: &str, v: &[f32]) -> Self {
        self.attr(AttributeProto {
            floats: v.to_vec(),
            ..Self::attr_of(name, AttributeType::Floats)
        })
    }

    /// A string attribute on the last node.
    pub fn attr_str(self, name: &str, v: &str) -> Self {
        self.attr(AttributeProto {
            s: Some(v.as_bytes().to_vec()),
            ..Self::attr_of(name, AttributeType::String)
        })
    }

    /// A tensor attribute on the last node.
    pub fn attr_tensor(self, name: &str, t: &Tensor) -> Self {
        self.attr_tensor_proto(name, tensor_to_proto("", t))
    }

    /// A tensor attribute given as a raw tensor proto.
    pub fn attr_tensor_proto(self, name: &str, t: TensorProto) -> Self {
        self.attr(AttributeProto {
            t: Some(t),
            ..Self::attr_of(name, AttributeType::Tensor)
        })
    }

    /// A graph attribute on the last node (an If branch, a Scan or Loop body): the graph
    /// `body` builds (its inputs, initializers, nodes and outputs; opsets are the outer
    /// model's).
    pub fn attr_graph(self, name: &str, body: ModelBuilder) -> Self {
        let g = body.model.graph.unwrap_or_default();
        self.attr(AttributeProto {
            g: Some(g),
            ..Self::attr_of(name, AttributeType::Graph)
        })
    }

    /// The model built so far.
    pub fn model(&self) -> &ModelProto {
        &self.model
    }

    /// The model, for edits the builder has no method for.
    pub fn model_mut(&mut self) -> &mut ModelProto {
        &mut self.model
    }

    /// The finished model.
    pub fn into_model(self) -> ModelProto {
        self.model
    }

    /// The serialized model.
    pub fn to_bytes(&self) -> Vec<u8> {
        self.model.encode_to_vec()
    }

    /// Writes the serialized model to `path`.
    pub fn write(&self, path: &Path) -> std::io::Result<()> {
        std::fs::write(path, self.to_bytes())
    }
}
