//! A summary of an ONNX model read straight from the proto (no IR), so it works on models
//! the importer cannot map: opsets, producer, op histogram, parameters, interface.

use crate::OnnxError;
use crate::import::{decode_model, is_default_domain, value_info_parts};
use crate::proto::tensor_proto::DataType;
use crate::proto::{ModelProto, ValueInfoProto};
use crate::tensor::{dtype_from_onnx, onnx_dtype_name, onnx_dtype_size, tensor_dims};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::fmt;
use std::path::Path;

/// One opset import.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct OpsetInfo {
    /// Domain (`""` is ai.onnx).
    pub domain: String,
    /// Version.
    pub version: i64,
}

/// A graph input or output.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ValueSummary {
    /// Name.
    pub name: String,
    /// Element type: the IR name (`f32`) where fp8c has one, else the ONNX name
    /// (`uint16`), or `?` when the value has no tensor type.
    pub dtype: String,
    /// Dims as text (`4`, `batch`, `?`); `None` when the rank is unknown.
    pub shape: Option<Vec<String>>,
}

/// What [`inspect`] reports.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ModelInfo {
    /// ONNX IR version.
    pub ir_version: i64,
    /// Opset imports, as listed.
    pub opset_imports: Vec<OpsetInfo>,
    /// Producer name.
    pub producer_name: String,
    /// Producer version.
    pub producer_version: String,
    /// Graph name.
    pub graph_name: String,
    /// Number of nodes in the main graph.
    pub node_count: usize,
    /// Op type -> count, sorted by op type (`domain::Op` outside the default domain).
    pub op_histogram: BTreeMap<String, usize>,
    /// Op types in the graph that the importer does not map, sorted.
    pub unsupported_ops: Vec<String>,
    /// Number of initializers.
    pub initializer_count: usize,
    /// Total elements over all initializers.
    pub parameter_count: u64,
    /// Total bytes over all initializers (as stored: dims times element size).
    pub parameter_bytes: u64,
    /// Graph inputs that are not initializers.
    pub inputs: Vec<ValueSummary>,
    /// Graph outputs.
    pub outputs: Vec<ValueSummary>,
}

/// Summarises the ONNX model file at `path`; errors are prefixed with the file name.
pub fn inspect(path: &Path) -> Result<ModelInfo, OnnxError> {
    let run = || {
        crate::import::check_regular(path)?;
        let bytes = std::fs::read(path)?;
        inspect_bytes(&bytes)
    };
    run().map_err(|e| e.in_file(path))
}

/// Summarises serialized model bytes.
pub fn inspect_bytes(bytes: &[u8]) -> Result<ModelInfo, OnnxError> {
    inspect_model(&decode_model(bytes)?)
}

/// Summarises a decoded model.
pub fn inspect_model(model: &ModelProto) -> Result<ModelInfo, OnnxError> {
    let graph = model.graph.as_ref().ok_or(OnnxError::NoGraph)?;
    let op_key = |domain: &str, op: &str| {
        if is_default_domain(domain) {
            op.to_string()
        } else {
            format!("{domain}::{op}")
        }
    };
    let mut op_histogram = BTreeMap::new();
    let mut unsupported = BTreeSet::new();
    for n in &graph.node {
        let key = op_key(n.domain(), n.op_type());
        if !crate::import::is_supported(n) {
            unsupported.insert(key.clone());
        }
        *op_histogram.entry(key).or_insert(0) += 1;
    }
    let (mut parameter_count, mut parameter_bytes) = (0u64, 0u64);
    for t in &graph.initializer {
        let (_, numel) = tensor_dims(t)?;
        let bytes = match DataType::try_from(t.data_type()) {
            Ok(DataType::String) => t.string_data.iter().map(|s| s.len() as u64).sum(),
            Ok(DataType::Uint4 | DataType::Int4 | DataType::Float4e2m1) => numel.div_ceil(2),
            Ok(DataType::Uint2 | DataType::Int2) => numel.div_ceil(4),
            _ => numel.saturating_mul(onnx_dtype_size(t.data_type()).unwrap_or(0)),
        };
        parameter_count = parameter_count.saturating_add(numel);
        parameter_bytes = parameter_bytes.saturating_add(bytes);
    }
    let inits: HashSet<&str> = graph.initializer.iter().map(|t| t.name()).collect();
    Ok(ModelInfo {
        ir_version: model.ir_version(),
        opset_imports: model
            .opset_import
            .iter()
            .map(|o| OpsetInfo {
                domain: o.domain().into(),
                version: o.version(),
            })
            .collect(),
        producer_name: model.producer_name().into(),
        producer_version: model.producer_version().into(),
        graph_name: graph.name().into(),
        node_count: graph.node.len(),
        op_histogram,
        unsupported_ops: unsupported.into_iter().collect(),
        initializer_count: graph.initializer.len(),
        parameter_count,
        parameter_bytes,
        inputs: graph
            .input
            .iter()
            .filter(|i| !inits.contains(i.name()))
            .map(summary)
            .collect(),
        outputs: graph.output.iter().map(summary).collect(),
    })
}

fn summary(vi: &ValueInfoProto) -> ValueSummary {
    let (dtype, shape) = match value_info_parts(vi) {
        Ok((code, shape)) => {
            let dtype = dtype_from_onnx(code)
                .map_or_else(|_| onnx_dtype_name(code).to_lowercase(), |d| d.to_string());
            (
                dtype,
                shape.map(|s| s.iter().map(|d| d.to_string()).collect()),
            )
        }
        Err(_) => ("?".to_string(), None),
    };
    ValueSummary {
        name: vi.name().into(),
        dtype,
        shape,
    }
}

impl fmt::Display for ValueSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.shape {
            Some(s) => write!(f, "{}: {}[{}]", self.name, self.dtype, s.join(",")),
            None => write!(f, "{}: {}[..]", self.name, self.dtype),
        }
    }
}

impl fmt::Display for ModelInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let opsets: Vec<String> = self
            .opset_imports
            .iter()
            .map(|o| {
                format!(
                    "{}={}",
                    if o.domain.is_empty() {
                        "ai.onnx"
                    } else {
                        &o.domain
                    },
                    o.version
                )
            })
            .collect();
        writeln!(
            f,
            "ir_version: {}  opsets: {}",
            self.ir_version,
            opsets.join(", ")
        )?;
        writeln!(
            f,
            "producer: {} {}",
            self.producer_name, self.producer_version
        )?;
        writeln!(f, "graph: {} ({} nodes)", self.graph_name, self.node_count)?;
        writeln!(
            f,
            "parameters: {} elements, {} bytes in {} initializers",
            self.parameter_count, self.parameter_bytes, self.initializer_count
        )?;
        for i in &self.inputs {
            writeln!(f, "input  {i}")?;
        }
        for o in &self.outputs {
            writeln!(f, "output {o}")?;
        }
        for (op, n) in &self.op_histogram {
            writeln!(f, "  {op:<28} {n}")?;
        }
        if !self.unsupported_ops.is_empty() {
            writeln!(f, "unsupported ops: {}", self.unsupported_ops.join(", "))?;
        }
        Ok(())
    }
}
