//! How a C API call reports failure: a status code (the class of the library's error), the
//! message of the last failure on the calling thread (`fp8c_last_error`), and the guard every
//! entry point runs in, so that no panic unwinds into C (a panic becomes
//! `FP8C_STATUS_INTERNAL_ERROR` with its message).

use fp8c_session::Error;
use std::cell::RefCell;
use std::ffi::{CString, c_char};
use std::panic::{AssertUnwindSafe, catch_unwind};

/// What a call returned: `FP8C_STATUS_OK`, or the class of what went wrong.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fp8cStatus {
    /// Success.
    Ok = 0,
    /// The model could not be read or imported (ONNX or IR text).
    ModelError = 1,
    /// A compiler pass failed.
    CompileError = 2,
    /// Lowering, loading on the device or running failed.
    RunError = 3,
    /// A request that does not fit the model or the data: an unknown input, a wrong dtype or
    /// shape, a bad option.
    InvalidInput = 4,
    /// A file could not be read or written.
    FileError = 5,
    /// A required pointer argument was NULL.
    NullArgument = 6,
    /// A bug in fp8c (a panic, caught at the boundary).
    InternalError = 7,
}

/// A failed call: its status and message.
pub(crate) struct Failure(pub Fp8cStatus, pub String);

impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        let status = match e.root() {
            _ if e.is_caller_error() => Fp8cStatus::InvalidInput,
            Error::Onnx(_) | Error::Ir(_) => Fp8cStatus::ModelError,
            Error::Pass(_) => Fp8cStatus::CompileError,
            Error::Runtime(_) | Error::Ranks(_) => Fp8cStatus::RunError,
            Error::Io { .. } => Fp8cStatus::FileError,
            Error::Invalid(_) | Error::Context { .. } => Fp8cStatus::InvalidInput,
        };
        Failure(status, e.to_string())
    }
}

/// An `FP8C_STATUS_INVALID_INPUT` failure.
pub(crate) fn invalid(message: impl Into<String>) -> Failure {
    Failure(Fp8cStatus::InvalidInput, message.into())
}

/// An `FP8C_STATUS_NULL_ARGUMENT` failure naming the argument.
pub(crate) fn null(what: &str) -> Failure {
    Failure(Fp8cStatus::NullArgument, format!("{what} is NULL"))
}

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn set_last_error(message: &str) {
    let c = CString::new(message.replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|l| *l.borrow_mut() = c);
}

/// Runs an entry point's body: its failure or panic becomes a status and the thread's last
/// error message.
pub(crate) fn guard(body: impl FnOnce() -> Result<(), Failure>) -> Fp8cStatus {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => Fp8cStatus::Ok,
        Ok(Err(Failure(status, message))) => {
            set_last_error(&message);
            status
        }
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown".into());
            set_last_error(&format!("internal error in fp8c (a panic): {what}"));
            Fp8cStatus::InternalError
        }
    }
}

/// The message of the last failed call on this thread (an empty string if none failed). The
/// pointer stays valid until the next failing call on this thread.
#[unsafe(no_mangle)]
pub extern "C" fn fp8c_last_error() -> *const c_char {
    LAST_ERROR.with(|l| l.borrow().as_ptr())
}
