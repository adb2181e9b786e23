//! fp8c's errors as Python exceptions: each `fp8c_session::Error` becomes an instance of the
//! class of `fp8c.errors` that its innermost variant names, carrying the library's message
//! (file, node and value at fault) unchanged.
//!
//! | library error (innermost)                      | Python class                          |
//! |------------------------------------------------|---------------------------------------|
//! | a caller's error (`Error::is_caller_error`: a  | `InvalidInputError` (also ValueError) |
//! | bad request, an input's name, dtype or shape)  |                                       |
//! | `Onnx`, `Ir` (import, IR text)                 | `ModelError`                          |
//! | `Pass` (a compiler pass failed)                | `CompileError`                        |
//! | `Runtime` (lowering, a backend), `Ranks`       | `RunError`                            |
//! | `Io` (a file)                                  | `FileError` (also OSError)            |

use fp8c_session::Error;
use pyo3::exceptions::{PyRuntimeError, PyTypeError};
use pyo3::prelude::*;

/// The `fp8c.errors` class name for `e`.
fn class_of(e: &Error) -> &'static str {
    if e.is_caller_error() {
        return "InvalidInputError";
    }
    match e.root() {
        Error::Onnx(_) | Error::Ir(_) => "ModelError",
        Error::Pass(_) => "CompileError",
        Error::Runtime(_) | Error::Ranks(_) => "RunError",
        Error::Io { .. } => "FileError",
        Error::Invalid(_) | Error::Context { .. } => "InvalidInputError",
    }
}

/// `e` as the Python exception of its class (a plain RuntimeError if `fp8c.errors` cannot be
/// imported, which only a broken installation does).
pub fn to_py(e: Error) -> PyErr {
    Python::attach(|py| {
        let message = e.to_string();
        let made = py
            .import("fp8c.errors")
            .and_then(|m| m.getattr(class_of(&e)))
            .and_then(|class| class.call1((message.clone(),)));
        match made {
            Ok(instance) => PyErr::from_value(instance),
            Err(_) => PyRuntimeError::new_err(message),
        }
    })
}

/// A session result as a Python result.
pub trait IntoPy<T> {
    /// The error, if any, as its Python exception.
    fn py_err(self) -> PyResult<T>;
}

impl<T> IntoPy<T> for fp8c_session::Result<T> {
    fn py_err(self) -> PyResult<T> {
        self.map_err(to_py)
    }
}

/// An `InvalidInputError` with `message` (a bad argument found by the binding itself).
pub fn invalid(message: impl std::fmt::Display) -> PyErr {
    to_py(Error::invalid(message))
}

/// A `TypeError` with `message`.
pub fn type_error(message: impl std::fmt::Display) -> PyErr {
    PyTypeError::new_err(message.to_string())
}
