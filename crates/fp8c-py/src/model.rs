//! `fp8c.Model` and `fp8c.Compiled`: loading (a file, or bytes through a private temporary
//! file), the declared interface, compiling with the CLI's settings, the compiled model's
//! text forms and report, and the FP8 Q/DQ ONNX export (`fp8c compile --emit onnx`).

use crate::errors::IntoPy;
use crate::runner::PyRunner;
use crate::settings::{Kwargs, compile_settings};
use crate::without_gil;
use fp8c_session::{Compiled, LoadOptions, Model, Purpose, Recipe};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use std::path::PathBuf;
use std::sync::Arc;

/// A loaded model (ONNX or fp8c IR text): `fp8c.load(...)`.
#[pyclass(name = "Model", module = "fp8c._fp8c", frozen)]
pub struct PyModel {
    pub(crate) model: Arc<Model>,
    /// The temporary folder holding a model given as bytes (the library re-reads the file
    /// to specialise or export it).
    _held: Option<Arc<tempfile::TempDir>>,
}

impl PyModel {
    fn new(model: Model, held: Option<Arc<tempfile::TempDir>>) -> Self {
        PyModel {
            model: Arc::new(model),
            _held: held,
        }
    }
}

#[pymethods]
impl PyModel {
    /// Loads an ONNX file or fp8c IR text (`.fp8ir`); `outputs` keeps only those outputs.
    #[staticmethod]
    #[pyo3(signature = (path, outputs=None))]
    fn load(py: Python<'_>, path: PathBuf, outputs: Option<Vec<String>>) -> PyResult<Self> {
        let opts = LoadOptions {
            outputs: outputs.unwrap_or_default(),
        };
        let m = without_gil(py, || Model::load_with(&path, &opts)).py_err()?;
        Ok(PyModel::new(m, None))
    }

    /// Loads a serialized ONNX model (messages name it `model.onnx` in a temporary folder).
    #[staticmethod]
    #[pyo3(signature = (data, outputs=None))]
    fn load_bytes(py: Python<'_>, data: Vec<u8>, outputs: Option<Vec<String>>) -> PyResult<Self> {
        let opts = LoadOptions {
            outputs: outputs.unwrap_or_default(),
        };
        let (m, dir) = without_gil(py, || -> fp8c_session::Result<_> {
            let dir = tempfile::Builder::new()
                .prefix("fp8c-model-")
                .tempdir()
                .map_err(|e| fp8c_session::Error::io("a temporary folder for the model", e))?;
            let path = dir.path().join("model.onnx");
            fp8c_session::files::write_bytes_atomic(&path, &data)?;
            Ok((Model::load_with(&path, &opts)?, dir))
        })
        .py_err()?;
        Ok(PyModel::new(m, Some(Arc::new(dir))))
    }

    /// The declared inputs: `(name, dtype, dims)`, a dim an int or a symbol's name.
    #[getter]
    fn inputs<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let rows = PyList::empty(py);
        for i in self.model.inputs() {
            let dims = PyList::empty(py);
            for d in &i.ty.shape {
                match d {
                    fp8c_session::Dim::Known(n) => dims.append(*n)?,
                    other => dims.append(other.to_string())?,
                }
            }
            rows.append((i.name, crate::arrays::numpy_name(i.ty.dtype), dims))?;
        }
        Ok(rows)
    }

    /// The output names.
    #[getter]
    fn outputs(&self) -> Vec<String> {
        self.model.outputs()
    }

    /// What loading warned about.
    #[getter]
    fn warnings(&self) -> Vec<String> {
        self.model.warnings().to_vec()
    }

    /// The file the model was read from.
    #[getter]
    fn path(&self) -> Option<PathBuf> {
        self.model.path().map(PathBuf::from)
    }

    /// Integer inputs whose values decide shapes (specialised on, like shapes).
    #[getter]
    fn shape_inputs(&self) -> Vec<String> {
        self.model.shape_inputs().to_vec()
    }

    /// Compiles with `fp8c compile`'s settings as keywords; `purpose` is "inference" (current
    /// scaling by default), "calibrated" (delayed by default: calibration fills the
    /// histories) or "training".
    #[pyo3(signature = (purpose="inference", **kwargs))]
    fn compile(
        &self,
        py: Python<'_>,
        purpose: &str,
        kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<PyCompiled> {
        let mut kw = Kwargs::new(kwargs, "compile");
        let settings = compile_settings(&mut kw)?;
        kw.finish()?;
        let purpose = match purpose {
            "inference" => Purpose::Inference { calibrated: false },
            "calibrated" => Purpose::Inference { calibrated: true },
            "training" => Purpose::Training,
            other => {
                return Err(crate::errors::invalid(format!(
                    "purpose={other:?}: expected \"inference\", \"calibrated\" or \"training\""
                )));
            }
        };
        let model = self.model.clone();
        let (compiled, recipe) = without_gil(py, || -> fp8c_session::Result<_> {
            let opts = settings.options(purpose)?;
            Ok((model.compile(&opts)?, opts.recipe))
        })
        .py_err()?;
        Ok(PyCompiled {
            compiled: Arc::new(compiled),
            model: self.model.clone(),
            recipe,
        })
    }

    /// Writes FP8 Q/DQ ONNX to `path` (`fp8c compile --emit onnx -o PATH`), calibrated on the
    /// `.npz` at `calibrate` under delayed scaling; returns what was exported.
    #[pyo3(signature = (path, calibrate=None, **kwargs))]
    fn export_onnx<'py>(
        &self,
        py: Python<'py>,
        path: PathBuf,
        calibrate: Option<PathBuf>,
        kwargs: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let mut kw = Kwargs::new(kwargs, "export_onnx");
        let settings = compile_settings(&mut kw)?;
        kw.finish()?;
        let model = self.model.clone();
        let Some(src) = model.path().map(PathBuf::from) else {
            return Err(crate::errors::invalid(
                "the FP8 ONNX export rewrites the source ONNX model: load the model from a file",
            ));
        };
        let done = without_gil(py, || -> fp8c_session::Result<_> {
            let opts = settings.options(Purpose::Inference {
                calibrated: calibrate.is_some(),
            })?;
            fp8c_session::emit_fp8_onnx(&model, &src, &settings, opts, calibrate.as_deref(), &path)
        })
        .py_err()?;
        let d = PyDict::new(py);
        d.set_item("weights", done.export.weights)?;
        d.set_item("activations", done.export.activations)?;
        d.set_item("calibrated", done.export.calibrated)?;
        d.set_item("high_precision", done.export.high_precision.clone())?;
        d.set_item("kept_high", done.export.kept_high.clone())?;
        d.set_item("data_file", done.data_file)?;
        d.set_item("how", done.how)?;
        Ok(d)
    }
}

/// A compiled model: `Model.compile(...)`.
#[pyclass(name = "Compiled", module = "fp8c._fp8c", frozen)]
pub struct PyCompiled {
    pub(crate) compiled: Arc<Compiled>,
    pub(crate) model: Arc<Model>,
    /// The recipe it was compiled with (calibration reads it).
    pub(crate) recipe: Recipe,
}

#[pymethods]
impl PyCompiled {
    /// The IR text (parses back: `fp8c.load` of a `.fp8ir` file).
    fn ir_text(&self) -> String {
        self.compiled.ir_text()
    }

    /// The IR as JSON text.
    fn json(&self) -> String {
        self.compiled.json()
    }

    /// The explain report as JSON text (`fp8c compile --report=json`; `all`: every node).
    #[pyo3(signature = (all=false))]
    fn report_json(&self, all: bool) -> PyResult<String> {
        serde_json::to_string(&self.compiled.report(all))
            .map_err(|e| crate::errors::invalid(format!("the report: {e}")))
    }

    /// The explain report as text (what `fp8c compile --report` prints).
    #[pyo3(signature = (all=false))]
    fn report_text(&self, all: bool) -> String {
        self.compiled.report(all).to_table()
    }

    /// The MLIR module (`--emit mlir`; needs a build with the `mlir` feature).
    fn mlir_text(&self, py: Python<'_>) -> PyResult<String> {
        let c = self.compiled.clone();
        without_gil(py, || c.mlir_text()).py_err()
    }

    /// Writes the IR text to `path` and its weights next to it (`PATH.safetensors`).
    fn write_ir(&self, py: Python<'_>, path: PathBuf) -> PyResult<()> {
        let c = self.compiled.clone();
        without_gil(py, || c.write_ir(&path)).py_err()
    }

    /// Notes the passes left.
    #[getter]
    fn notes(&self) -> Vec<String> {
        self.compiled.notes().to_vec()
    }

    /// `(pass, IR text)` after each pass named in `print_after`.
    #[getter]
    fn dumps(&self) -> Vec<(String, String)> {
        self.compiled.dumps().to_vec()
    }

    /// The GEMMs that stay in high precision although FP8 was asked for, one line per reason.
    fn high_precision_summary(&self) -> Vec<String> {
        self.compiled.high_precision_summary()
    }

    /// The recipe in words (`delayed E4M3/E5M2 (history 1024, max)`, ...).
    #[getter]
    fn recipe(&self) -> String {
        fp8c_session::recipe_word(&self.recipe)
    }

    /// Lowers the graph and loads it on `device` (`cpu`, `cuda`, `cuda-emulated`, `mlir`).
    #[pyo3(signature = (device="cpu"))]
    fn prepare(&self, py: Python<'_>, device: &str) -> PyResult<PyRunner> {
        let dev = crate::settings::device(device)?;
        let c = self.compiled.clone();
        let runner = without_gil(py, || c.prepare(dev)).py_err()?;
        Ok(PyRunner::new(runner, self.model.clone(), self.recipe))
    }
}

/// The compiler's passes in pipeline order, `(name, what it does)` (for `print_after` and
/// `stop_after`).
#[pyfunction]
pub fn pass_names() -> Vec<(String, String)> {
    fp8c_session::pass_names()
        .into_iter()
        .map(|(n, about)| (n.to_string(), about.to_string()))
        .collect()
}
