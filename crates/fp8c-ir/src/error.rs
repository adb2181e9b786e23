//! Errors of the IR crate. Every error about a node names it: `node "fc1" (matmul): ...`.

use thiserror::Error;

/// An IR error.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum IrError {
    /// Something is wrong with one node.
    #[error("node \"{node}\" ({op}): {msg}")]
    Node {
        /// Node name.
        node: String,
        /// Op text name.
        op: String,
        /// What is wrong.
        msg: String,
    },
    /// The graph has a cycle through these nodes.
    #[error("graph has a cycle through nodes: {}", .0.join(", "))]
    Cycle(Vec<String>),
    /// Two interface entries (inputs, params, state, outputs) share a name.
    #[error("duplicate {kind} name \"{name}\"")]
    Duplicate {
        /// What kind of entry.
        kind: &'static str,
        /// The repeated name.
        name: String,
    },
    /// A name that is not in the graph.
    #[error("no {kind} named \"{name}\"")]
    NotFound {
        /// What kind of entry.
        kind: &'static str,
        /// The name looked for.
        name: String,
    },
    /// The verifier found these problems (all of them, not just the first).
    #[error("verification failed with {} error(s):\n{}", .0.len(), .0.iter().map(|e| format!("  - {e}")).collect::<Vec<_>>().join("\n"))]
    Verify(Vec<IrError>),
    /// A text-form parse error with its position.
    #[error("{line}:{col}: {msg}")]
    Parse {
        /// 1-based line.
        line: usize,
        /// 1-based column.
        col: usize,
        /// What was expected.
        msg: String,
    },
    /// Any other error.
    #[error("{0}")]
    Other(String),
}

impl IrError {
    /// An error about one node.
    pub fn node(node: impl Into<String>, op: &str, msg: impl Into<String>) -> Self {
        IrError::Node {
            node: node.into(),
            op: op.to_string(),
            msg: msg.into(),
        }
    }
}

/// Result with [`IrError`].
pub type Result<T, E = IrError> = std::result::Result<T, E>;
