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
    #[error("{}", .0.error)]
    Pass(Box<PassFailure>),
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
    /// An error every rank of a data-parallel run raised alike (ranks started with different
    /// models, flags or data): rank 0 reports it, the others end without repeating it.
    #[error("{0}")]
    Ranks(String),
    /// Another error, with a prefix saying where it happened (`FILE: `, `--flag V: `).
    #[error("{context}: {inner}")]
    Context {
        /// The prefix.
        context: String,
        /// The error it describes.
        inner: Box<Error>,
    },
}

/// A failed compilation: the pass error and what the passes before it recorded.
#[derive(Debug)]
pub struct PassFailure {
    /// The error; [`PassError::Failed`] holds the last IR that verified.
    pub error: PassError,
    /// `(pass, IR text)` recorded for `print_after` before the failure.
    pub dumps: Vec<(String, String)>,
    /// Notes the passes left before the failure.
    pub notes: Vec<String>,
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

    /// Whether the error is about what the caller handed in (an input's name, dtype or shape,
    /// a state entry, a request that does not fit the model or the data) rather than about
    /// the model, a pass or a backend: bindings report these as bad arguments.
    pub fn is_caller_error(&self) -> bool {
        matches!(
            self.root(),
            Error::Invalid(_)
                | Error::Runtime(RuntimeError::Input { .. } | RuntimeError::State { .. })
        )
    }

    /// The pass error inside, if a pass failed (it holds the last IR that verified).
    pub fn pass_error(&self) -> Option<&PassError> {
        self.pass_failure().map(|f| &f.error)
    }

    /// The failed compilation inside, if a pass failed: the error, and the IR dumps and notes
    /// recorded before it.
    pub fn pass_failure(&self) -> Option<&PassFailure> {
        match self.root() {
            Error::Pass(p) => Some(p),
            _ => None,
        }
    }
}

impl PassFailure {
    /// Writes the last IR that verified before the failing pass to a private temporary file
    /// (`fp8c-last-good-*.fp8ir`) and returns its path; None when the failure kept no IR.
    pub fn dump_last_good(&self) -> Option<std::path::PathBuf> {
        let fp8c_passes::PassError::Failed { last_good, .. } = &self.error else {
            return None;
        };
        let text = fp8c_ir::text::print(last_good);
        crate::files::private_dump("last-good", ".fp8ir", &text).ok()
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
from_err!(OnnxError => Onnx, IrError => Ir, RuntimeError => Runtime);

impl From<PassError> for Error {
    fn from(error: PassError) -> Self {
        Error::Pass(Box::new(PassFailure {
            error,
            dumps: Vec::new(),
            notes: Vec::new(),
        }))
    }
}

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
