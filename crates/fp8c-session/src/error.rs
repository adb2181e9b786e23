//! The session layer's error type.
//!
//! Every message is complete on its own: a variant's `Display` already holds the text of what
//! it wraps, so no variant reports a `source()` (printing the chain would repeat it).
//! [`Context`] adds a prefix naming the file, the flag or the input at fault.

use fp8c_ir::IrError;
use fp8c_onnx::OnnxError;
use fp8c_passes::PassError;
use fp8c_runtime::RuntimeError;
use std::fmt;
use thiserror::Error;

/// What went wrong in a session call.
#[derive(Debug, Error)]
pub enum Error {
    /// Importing or writing ONNX failed.
    #[error("{0}")]
    Onnx(OnnxError),
    /// A pass failed; the pass error carries the last IR that verified.
    #[error("{0}")]
    Pass(PassError),
    /// Building, parsing or verifying IR failed.
    #[error("{0}")]
    Ir(IrError),
    /// Lowering, preparing or running on a backend failed.
    #[error("{0}")]
    Runtime(RuntimeError),
    /// A file could not be read or written.
    #[error("{message}")]
    Io {
        /// What was attempted and why it failed.
        message: String,
        /// The underlying error's kind (e.g. `NotFound`, `BrokenPipe`).
        kind: std::io::ErrorKind,
    },
    /// A request that does not fit the model or the data (an unknown input, a wrong shape, a
    /// corrupt array, an option out of range).
    #[error("{0}")]
    Invalid(String),
    /// Another error, with a prefix saying where it happened (`FILE: `, `--flag V: `).
    #[error("{context}: {inner}")]
    Context {
        /// The prefix.
        context: String,
        /// The error it describes.
        inner: Box<Error>,
    },
}

/// The result of a session call.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// An [`Error::Invalid`] from anything printable.
    pub fn invalid(message: impl fmt::Display) -> Self {
        Error::Invalid(message.to_string())
    }

    /// An [`Error::Io`]: `what` (e.g. `"x.npz: cannot read"`) and the OS error.
    pub fn io(what: impl fmt::Display, e: std::io::Error) -> Self {
        Error::Io {
            message: format!("{what}: {e}"),
            kind: e.kind(),
        }
    }

    /// The innermost error, under every [`Error::Context`].
    pub fn root(&self) -> &Error {
        match self {
            Error::Context { inner, .. } => inner.root(),
            e => e,
        }
    }

    /// The pass error inside, if a pass failed (it holds the last IR that verified).
    pub fn pass_error(&self) -> Option<&PassError> {
        match self.root() {
            Error::Pass(p) => Some(p),
            _ => None,
        }
    }
}

macro_rules! from_err {
    ($($t:ty => $v:ident),*) => {$(
        impl From<$t> for Error {
            fn from(e: $t) -> Self {
                Error::$v(e)
            }
        }
    )*};
}
from_err!(OnnxError => Onnx, PassError => Pass, IrError => Ir, RuntimeError => Runtime);

/// Adds a prefix to errors, like `anyhow::Context` but typed.
pub trait Context<T> {
    /// Prefixes the error with `context`.
    fn context(self, context: impl fmt::Display) -> Result<T>;
    /// Prefixes the error with a lazily built context.
    fn with_context<C: fmt::Display>(self, f: impl FnOnce() -> C) -> Result<T>;
}

impl<T, E: Into<Error>> Context<T> for std::result::Result<T, E> {
    fn context(self, context: impl fmt::Display) -> Result<T> {
        self.map_err(|e| Error::Context {
            context: context.to_string(),
            inner: Box::new(e.into()),
        })
    }

    fn with_context<C: fmt::Display>(self, f: impl FnOnce() -> C) -> Result<T> {
        self.map_err(|e| Error::Context {
            context: f().to_string(),
            inner: Box::new(e.into()),
        })
    }
}

/// `return Err(Error::Invalid(format!(...)))`.
macro_rules! bail {
    ($($t:tt)*) => { return Err($crate::Error::Invalid(format!($($t)*))) };
}
pub(crate) use bail;

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::Io {
            message: e.to_string(),
            kind: e.kind(),
        }
    }
}

impl From<zip::result::ZipError> for Error {
    fn from(e: zip::result::ZipError) -> Self {
        Error::Invalid(e.to_string())
    }
}
