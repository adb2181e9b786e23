//! A summary of an ONNX model read straight from the proto (no IR), so it works on models
//! the importer cannot map: opsets, producer, op histogram, parameters, interface. It walks
//! the bodies of If, Scan and Loop nodes (and any other graph attribute) too, naming their
//! nodes by the path the importer gives them (`{if}.then.{node}`, `{scan}.body.{node}`).

use crate::OnnxError;
use crate::import::decode_model;
use crate::proto::tensor_proto::DataType;
use crate::proto::{GraphProto, ModelProto, ValueInfoProto};
use crate::subgraph::{bodies, local_name};
use crate::tensor::{dtype_from_onnx, onnx_dtype_name, onnx_dtype_size, tensor_dims};
use crate::value_info::{is_default_domain, value_info_parts};
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

/// A node whose op the importer does not map, wherever it is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct UnsupportedNode {
    /// The node's full path: its name in the main graph, or `{outer}.{then|else|body}.{node}`
    /// inside subgraphs (the name the importer's errors use).
    pub path: String,
    /// Op type (`domain::Op` outside the default domain).
    pub op: String,
}

/// One subgraph (a body or branch of a node, at any depth).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SubgraphInfo {
    /// Path of the subgraph: `{node path}.then`, `.else`, `.body` (other graph attributes by
    /// their name).
    pub path: String,
    /// The op type of the node that holds it.
    pub owner_op: String,
    /// Nodes directly in it (not counting deeper subgraphs).
    pub node_count: usize,
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
    /// Number of nodes in the main graph and every subgraph.
    pub node_count_with_subgraphs: usize,
    /// Op type -> count in the main graph, sorted by op type (`domain::Op` outside the
    /// default domain).
    pub op_histogram: BTreeMap<String, usize>,
    /// Op type -> count over the main graph and every subgraph.
    pub op_histogram_with_subgraphs: BTreeMap<String, usize>,
    /// Every subgraph, in the order the walk meets them (depth first).
    pub subgraphs: Vec<SubgraphInfo>,
    /// Op types anywhere in the model (subgraphs included) that the importer does not map,
    /// sorted.
    pub unsupported_ops: Vec<String>,
    /// Every node whose op the importer does not map, with its full path, in walk order.
    pub unsupported_nodes: Vec<UnsupportedNode>,
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
        crate::tensor::check_regular(path)?;
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
    let mut walk = Walk {
        op_histogram: BTreeMap::new(),
        with_subgraphs: BTreeMap::new(),
        subgraphs: Vec::new(),
        unsupported: BTreeSet::new(),
        unsupported_nodes: Vec::new(),
        nodes: 0,
    };
    walk.graph(graph, None);
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
        node_count_with_subgraphs: walk.nodes,
        op_histogram: walk.op_histogram,
        op_histogram_with_subgraphs: walk.with_subgraphs,
        subgraphs: walk.subgraphs,
        unsupported_ops: walk.unsupported.into_iter().collect(),
        unsupported_nodes: walk.unsupported_nodes,
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

/// What the walk over the main graph and its subgraphs collects.
struct Walk {
    op_histogram: BTreeMap<String, usize>,
    with_subgraphs: BTreeMap<String, usize>,
    subgraphs: Vec<SubgraphInfo>,
    unsupported: BTreeSet<String>,
    unsupported_nodes: Vec<UnsupportedNode>,
    nodes: usize,
}

impl Walk {
    /// Counts `g`'s nodes (the main graph when `prefix` is `None`) and walks their bodies.
    fn graph(&mut self, g: &GraphProto, prefix: Option<&str>) {
        for (k, n) in g.node.iter().enumerate() {
            let path = match prefix {
                Some(p) => local_name(p, n, k),
                None if n.name().is_empty() => format!("{}_{k}", n.op_type()),
                None => n.name().to_string(),
            };
            let key = if is_default_domain(n.domain()) {
                n.op_type().to_string()
            } else {
                format!("{}::{}", n.domain(), n.op_type())
            };
            if !crate::import::is_supported(n) {
                self.unsupported.insert(key.clone());
                self.unsupported_nodes.push(UnsupportedNode {
                    path: path.clone(),
                    op: key.clone(),
                });
            }
            if prefix.is_none() {
                *self.op_histogram.entry(key.clone()).or_insert(0) += 1;
            }
            *self.with_subgraphs.entry(key).or_insert(0) += 1;
            self.nodes += 1;
            for (seg, sub) in bodies(n) {
                let sub_path = format!("{path}.{seg}");
                self.subgraphs.push(SubgraphInfo {
                    path: sub_path.clone(),
                    owner_op: n.op_type().to_string(),
                    node_count: sub.node.len(),
                });
                self.graph(sub, Some(&sub_path));
            }
        }
    }
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
        if self.subgraphs.is_empty() {
            writeln!(f, "graph: {} ({} nodes)", self.graph_name, self.node_count)?;
        } else {
            writeln!(
                f,
                "graph: {} ({} nodes; {} with its {} subgraphs)",
                self.graph_name,
                self.node_count,
                self.node_count_with_subgraphs,
                self.subgraphs.len()
            )?;
        }
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
        if self.subgraphs.is_empty() {
            for (op, n) in &self.op_histogram {
                writeln!(f, "  {op:<28} {n}")?;
            }
        } else {
            for s in &self.subgraphs {
                writeln!(
                    f,
                    "subgraph {} ({}, {} nodes)",
                    s.path, s.owner_op, s.node_count
                )?;
            }
            writeln!(f, "  {:<28} {:>6} {:>15}", "op", "main", "with subgraphs")?;
            for (op, n) in &self.op_histogram_with_subgraphs {
                let main = self.op_histogram.get(op).copied().unwrap_or(0);
                writeln!(f, "  {op:<28} {main:>6} {n:>15}")?;
            }
        }
        if !self.unsupported_ops.is_empty() {
            writeln!(f, "unsupported ops: {}", self.unsupported_ops.join(", "))?;
            for u in &self.unsupported_nodes {
                writeln!(f, "  \"{}\" ({})", u.path, u.op)?;
            }
        }
        Ok(())
    }
}
