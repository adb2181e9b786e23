//! The importer's error type. Every message says what is wrong and where: the file (added
//! by [`crate::load_model`] / [`crate::inspect`] as a `FILE: ` prefix), the node
//! (`node "name" (OpType): ...`), the value or tensor, and the op.

use fp8c_ir::IrError;
use std::fmt;
use thiserror::Error;

/// One node whose op the importer does not support (see [`OnnxError::Unsupported`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnsupportedOp {
    /// Node name (or `{op_type}_{index}` when the model leaves it empty).
    pub node: String,
    /// ONNX op type.
    pub op_type: String,
    /// Op domain; empty for the default `ai.onnx` domain.
    pub domain: String,
}

impl UnsupportedOp {
    /// The entry for `node`, named `name` (its full path inside subgraphs).
    pub(crate) fn of(node: &crate::proto::NodeProto, name: &str) -> Self {
        UnsupportedOp {
            node: name.to_string(),
            op_type: node.op_type().into(),
            domain: if crate::value_info::is_default_domain(node.domain()) {
                String::new()
            } else {
                node.domain().into()
            },
        }
    }
}

impl fmt::Display for UnsupportedOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.domain.is_empty() {
            write!(f, "\"{}\" ({})", self.node, self.op_type)
        } else {
            write!(f, "\"{}\" ({}::{})", self.node, self.domain, self.op_type)
        }
    }
}

/// The reason of a protobuf decode error, cause first: prost prints the field path before
/// the reason (`failed to decode Protobuf message: NodeProto.attribute: AttributeProto.g:
/// ... : recursion limit reached`), which for a deeply nested message is thousands of
/// characters that hide the reason; here the reason comes first and a long path keeps only its
/// ends (`recursion limit reached (at NodeProto.attribute: ... 140 more ... : ModelProto.graph)`).
pub(crate) fn protobuf_reason(e: &prost::DecodeError) -> String {
    let text = e.to_string();
    let text = text
        .strip_prefix("failed to decode Protobuf message: ")
        .unwrap_or(&text);
    let parts: Vec<&str> = text.split(": ").collect();
    let is_frame = |p: &str| {
        p.split_once('.').is_some_and(|(m, f)| {
            !m.is_empty()
                && !f.is_empty()
                && m.chars()
                    .chain(f.chars())
                    .all(|c| c.is_ascii_alphanumeric() || c == '_')
        })
    };
    let frames = parts.iter().take_while(|p| is_frame(p)).count();
    if frames == 0 || frames == parts.len() {
        return text.to_string();
    }
    let reason = parts[frames..].join(": ");
    let path = &parts[..frames];
    let at = if path.len() <= 6 {
        path.join(": ")
    } else {
        format!(
            "{}: ... {} more ...: {}",
            path[..3].join(": "),
            path.len() - 5,
            path[path.len() - 2..].join(": ")
        )
    };
    format!("{reason} (at {at})")
}

/// An ONNX import, inspect or tensor-file error.
#[derive(Debug, Error)]
pub enum OnnxError {
    /// The same error, in the named file (the outermost layer of errors from file-based entry
    /// points).
    #[error("{file}: {source}")]
    File {
        /// The file, as given by the caller.
        file: String,
        /// What went wrong in it.
        #[source]
        source: Box<OnnxError>,
    },
    /// Reading a file failed.
    #[error("cannot read: {0}")]
    Io(#[from] std::io::Error),
    /// The bytes are not a protobuf message of the expected kind.
    #[error("not a valid ONNX {what}: {reason}")]
    Decode {
        /// `model` or `tensor`.
        what: &'static str,
        /// The protobuf decoder's message.
        reason: String,
    },
    /// The bytes decode, but there is no graph (an empty file decodes as an empty model).
    #[error("not an ONNX model (no graph)")]
    NoGraph,
    /// The model's opset imports are not ones the importer handles.
    #[error("opset: {0}")]
    Opset(String),
    /// Something is wrong with one node.
    #[error("node \"{node}\" ({op_type}): {msg}")]
    Node {
        /// Node name.
        node: String,
        /// ONNX op type.
        op_type: String,
        /// What is wrong.
        msg: String,
    },
    /// The IR rejected a node made from this ONNX node (type inference failed, usually).
    #[error("node \"{node}\" ({op_type}): {}", ir_detail(.node, .source))]
    NodeIr {
        /// ONNX node name.
        node: String,
        /// ONNX op type.
        op_type: String,
        /// The IR's error.
        #[source]
        source: IrError,
    },
    /// A node reads a value that nothing defines.
    #[error(
        "node \"{node}\" ({op_type}): input \"{value}\" is not produced by any node, graph input or initializer"
    )]
    MissingInput {
        /// Node name.
        node: String,
        /// ONNX op type.
        op_type: String,
        /// The undefined value.
        value: String,
    },
    /// Every node whose op is not supported, listed at once.
    #[error("unsupported ONNX ops ({}): {}", .0.len(), .0.iter().map(|u| u.to_string()).collect::<Vec<_>>().join(", "))]
    Unsupported(Vec<UnsupportedOp>),
    /// The nodes form a cycle (listed in dataflow order, first node repeated at the end).
    #[error("graph has a cycle: {}", .0.iter().chain(.0.first()).map(|n| format!("\"{n}\"")).collect::<Vec<_>>().join(" -> "))]
    Cycle(Vec<String>),
    /// A tensor (initializer, `Constant` value, tensor file) cannot be decoded.
    #[error("tensor \"{name}\": {msg}")]
    Tensor {
        /// Tensor name (`<unnamed>` when it has none).
        name: String,
        /// What is wrong.
        msg: String,
    },
    /// A graph input, output or other named value is wrong.
    #[error("{kind} \"{name}\": {msg}")]
    Value {
        /// `graph input`, `graph output`, `value`, ...
        kind: &'static str,
        /// The value's name.
        name: String,
        /// What is wrong.
        msg: String,
    },
    /// An initializer to be rewritten keeps its data in an external file
    /// ([`crate::export::with_weights`] writes inline data only).
    #[error("initializer \"{name}\" uses external data; only inline data can be written back")]
    ExternalData {
        /// The initializer's name.
        name: String,
    },
    /// An [`crate::ImportOptions`] entry does not fit the model.
    #[error("import options: {0}")]
    Options(String),
    /// An IR error outside any node (interface names, outputs).
    #[error(transparent)]
    Ir(#[from] IrError),
}

impl OnnxError {
    /// The error without its `File` wrapper (for matching on the kind of error).
    pub fn kind(&self) -> &OnnxError {
        match self {
            OnnxError::File { source, .. } => source.kind(),
            other => other,
        }
    }

    /// Wraps the error with the file it is about.
    pub(crate) fn in_file(self, file: &std::path::Path) -> OnnxError {
        OnnxError::File {
            file: file.display().to_string(),
            source: Box::new(self),
        }
    }

    pub(crate) fn node(node: &str, op_type: &str, msg: impl Into<String>) -> OnnxError {
        OnnxError::Node {
            node: node.into(),
            op_type: op_type.into(),
            msg: msg.into(),
        }
    }

    pub(crate) fn tensor(name: &str, msg: impl Into<String>) -> OnnxError {
        let name = if name.is_empty() { "<unnamed>" } else { name };
        OnnxError::Tensor {
            name: name.into(),
            msg: msg.into(),
        }
    }
}

/// The IR's message without repeating the node when it is the ONNX node itself; a helper
/// node made while expanding the ONNX node is named.
fn ir_detail(node: &str, e: &IrError) -> String {
    match e {
        IrError::Node {
            node: ir_node,
            op,
            msg,
        } if ir_node == node => format!("{op}: {msg}"),
        IrError::Node {
            node: ir_node,
            op,
            msg,
        } => format!("{op} \"{ir_node}\": {msg}"),
        other => other.to_string(),
    }
}
