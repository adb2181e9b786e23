//! The one error type of the evaluator. Every message names the op; the caller
//! (a pass, the executor) adds the node's name.

use thiserror::Error;

/// What went wrong, for callers that branch on it (tests, constant folding).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// Graph interface ops (`input`, `param`, `state`) have no evaluation.
    Interface,
    /// Wrong number of inputs.
    Arity,
    /// An input has a dtype the op does not accept, or dtypes that must agree do not.
    DType,
    /// Input shapes that do not fit together (broadcasting, matmul, concat, ...).
    Shape,
    /// An attribute out of its domain (axis out of range, zero stride, bad permutation).
    Attribute,
    /// Input values out of their domain (index out of range, integer division by zero).
    Value,
    /// An output (or scratch buffer) beyond `fp8c_ir::MAX_ELEMENTS` elements.
    TooLarge,
    /// A legal combination this evaluator does not implement.
    Unsupported,
}

/// An evaluation failure of one op: the op's text name, a kind and a message.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error("`{op}`: {message}")]
pub struct EvalError {
    /// The op's text name (`matmul`, `slice`, ...).
    pub op: &'static str,
    /// What went wrong.
    pub kind: ErrorKind,
    /// A sentence naming the offending input, attribute or value.
    pub message: String,
}

/// A kernel's failure before the op name is attached (see [`Fail::at`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Fail {
    pub kind: ErrorKind,
    pub message: String,
}

impl Fail {
    pub(crate) fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Fail {
            kind,
            message: message.into(),
        }
    }

    /// An arity failure: `expected` inputs (e.g. "2", "1 to 3"), `got` given.
    pub(crate) fn arity<T>(expected: &str, got: usize) -> KResult<T> {
        Err(Fail::new(
            ErrorKind::Arity,
            format!("expects {expected} inputs, got {got}"),
        ))
    }

    /// Attaches the op name.
    pub(crate) fn at(self, op: &'static str) -> EvalError {
        EvalError {
            op,
            kind: self.kind,
            message: self.message,
        }
    }
}

/// Result of a kernel.
pub(crate) type KResult<T> = Result<T, Fail>;

/// `Err(Fail)` of kind [`ErrorKind::DType`] with a formatted message.
macro_rules! dtype_err {
    ($($t:tt)*) => { Err($crate::error::Fail::new($crate::error::ErrorKind::DType, format!($($t)*))) };
}
/// `Err(Fail)` of kind [`ErrorKind::Shape`].
macro_rules! shape_err {
    ($($t:tt)*) => { Err($crate::error::Fail::new($crate::error::ErrorKind::Shape, format!($($t)*))) };
}
/// `Err(Fail)` of kind [`ErrorKind::Attribute`].
macro_rules! attr_err {
    ($($t:tt)*) => { Err($crate::error::Fail::new($crate::error::ErrorKind::Attribute, format!($($t)*))) };
}
/// `Err(Fail)` of kind [`ErrorKind::Value`].
macro_rules! value_err {
    ($($t:tt)*) => { Err($crate::error::Fail::new($crate::error::ErrorKind::Value, format!($($t)*))) };
}
pub(crate) use {attr_err, dtype_err, shape_err, value_err};
