//! `fp8c._fp8c`: the native module of the `fp8c` Python package (crates/fp8c-py/python/fp8c
//! wraps it). A thin layer over `fp8c-session`: every behaviour is the library's; this crate
//! converts NumPy arrays to tensors and back ([`arrays`]), keyword arguments to the CLI's
//! settings ([`settings`]) and errors to Python exceptions ([`errors`]), and releases the GIL
//! while the library compiles, runs or trains ([`without_gil`]).
//!
//! One purpose per module: [`model`] (Model, Compiled, ONNX export), [`runner`] (Runner,
//! Profile, calibration), [`train`] (a whole `fp8c train` run, step by step or as a loop),
//! [`run`] (a whole `fp8c run`).

use pyo3::prelude::*;

mod arrays;
mod errors;
mod model;
mod run;
mod runner;
mod settings;
mod train;

/// Runs `f` with the GIL released (compiling, running, a training step), on this thread.
///
/// `Python::detach` asks for a `Send` closure so that nothing bound to the GIL is used while
/// it is released; the library's runners are not `Send` (a CUDA context belongs to its
/// thread), but `f` runs right here, on the thread that owns them, and touches no Python
/// object (a callback it calls attaches to the interpreter again first).
pub(crate) fn without_gil<T, F: FnOnce() -> T>(py: Python<'_>, f: F) -> T {
    struct OnThisThread<F>(F);
    // SAFETY: see above: the value never leaves this thread, and holds no GIL-bound reference.
    unsafe impl<F> Send for OnThisThread<F> {}
    impl<T, F: FnOnce() -> T> OnThisThread<F> {
        fn call(self) -> OnThisThread<T> {
            OnThisThread((self.0)())
        }
    }
    let f = OnThisThread(f);
    py.detach(move || f.call()).0
}

/// The native module: its classes and functions, re-exported by `fp8c/__init__.py`.
#[pymodule]
fn _fp8c(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<model::PyModel>()?;
    m.add_class::<model::PyCompiled>()?;
    m.add_class::<runner::PyRunner>()?;
    m.add_class::<runner::PyProfile>()?;
    m.add_class::<train::PyTrainRun>()?;
    m.add_function(wrap_pyfunction!(run::run_job, m)?)?;
    m.add_function(wrap_pyfunction!(model::pass_names, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
