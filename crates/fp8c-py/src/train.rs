//! `fp8c.TrainRun`: a whole `fp8c train` (`fp8c_session::train::TrainRun`) driven from
//! Python: prepared from the CLI's settings (data from an `.npz`, a text file or NumPy arrays
//! in memory), then the library's loop (`fit`, every step reported to a Python callable), or
//! one step at a time on the caller's batches (`step`, for an iterator), then `finish`
//! (final checkpoint, plot, trained ONNX). The losses are the CLI's, bit for bit: the same
//! code runs.
//!
//! Ctrl-C during `fit` raises the library's stop flag: the step in flight finishes, the whole
//! state is checkpointed (to `checkpoint`, or a new `fp8c-interrupted-*` folder) and
//! `KeyboardInterrupt` is raised naming the folder.

use crate::arrays::{tensors_from_dict, tensors_to_py};
use crate::errors::{IntoPy, invalid};
use crate::settings::{Kwargs, compile_settings, device as parse_device, train_settings};
use crate::without_gil;
use fp8c_session::train::{DataSource, Fit, Observer, StepReport, TrainConfig, TrainRun};
use pyo3::exceptions::PyKeyboardInterrupt;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// A prepared training run.
#[pyclass(name = "TrainRun", module = "fp8c._fp8c", unsendable)]
pub struct PyTrainRun {
    run: TrainRun,
    /// Every step run so far, by `fit` and `step` (what `finish` plots and checks).
    fit: Fit,
    stop: Arc<AtomicBool>,
}

/// A step report as a dict.
fn report_dict<'py>(py: Python<'py>, r: &StepReport) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("step", r.step)?;
    d.set_item("loss", r.loss)?;
    d.set_item("lr", r.lr)?;
    d.set_item("applied", r.applied)?;
    d.set_item("grad_norm", r.grad_norm)?;
    d.set_item("accuracy", r.accuracy)?;
    d.set_item("elapsed_s", r.elapsed_s)?;
    Ok(d)
}

/// The loop's observer: checks for Ctrl-C and calls the Python callback with each report.
struct PyObserver {
    callback: Option<Py<PyAny>>,
    stop: Arc<AtomicBool>,
    /// The exception that stopped the loop: the callback's, or KeyboardInterrupt.
    raised: Option<PyErr>,
}

impl Observer for PyObserver {
    fn step(&mut self, report: &StepReport) -> fp8c_session::Result<()> {
        Python::attach(|py| {
            if let Err(e) = py.check_signals() {
                let interrupt = e.is_instance_of::<PyKeyboardInterrupt>(py);
                self.raised = Some(e);
                if interrupt {
                    // The loop saves the state after this step and ends.
                    self.stop.store(true, Ordering::Relaxed);
                    return Ok(());
                }
                return Err(fp8c_session::Error::invalid(
                    "training stopped by a Python exception",
                ));
            }
            let Some(cb) = &self.callback else {
                return Ok(());
            };
            let called = report_dict(py, report).and_then(|d| cb.call1(py, (d,)));
            match called {
                // A callback returning False stops the loop like Ctrl-C, state saved.
                Ok(v)
                    if v.bind(py).is_instance_of::<pyo3::types::PyBool>()
                        && !v.is_truthy(py).unwrap_or(true) =>
                {
                    self.stop.store(true, Ordering::Relaxed);
                    Ok(())
                }
                Ok(_) => Ok(()),
                Err(e) => {
                    self.raised = Some(e);
                    Err(fp8c_session::Error::invalid(
                        "training stopped: the on_step callback raised",
                    ))
                }
            }
        })
    }
}

/// Adds the steps of `more` to `all`.
fn merge(all: &mut Fit, more: Fit) {
    if all.losses.is_empty() {
        all.start_step = more.start_step;
    }
    all.losses.extend(more.losses);
    all.seconds += more.seconds;
    all.skipped += more.skipped;
    all.last_accuracy = more.last_accuracy.or(all.last_accuracy);
    all.interrupted = more.interrupted;
}

fn fit_dict<'py>(py: Python<'py>, f: &Fit) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("start_step", f.start_step)?;
    d.set_item("losses", f.losses.clone())?;
    d.set_item("seconds", f.seconds)?;
    d.set_item("skipped", f.skipped)?;
    d.set_item("last_accuracy", f.last_accuracy)?;
    d.set_item("interrupted", f.interrupted.clone())?;
    Ok(d)
}

#[pymethods]
impl PyTrainRun {
    /// Prepares `fp8c train MODEL ...`: `data` is an `.npz` path, or a dict of arrays (one
    /// sample per row), `text` a file whose bytes are the tokens; every other keyword is a
    /// training or compile flag by its name with underscores.
    #[new]
    #[pyo3(signature = (model, data=None, labels=None, text=None, input_map=None, output=None, device="cpu", checkpoint=None, checkpoint_every=0, resume=None, log=None, plot=None, save_onnx=None, profile=false, **kwargs))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        model: PathBuf,
        data: Option<&Bound<'_, PyAny>>,
        labels: Option<String>,
        text: Option<PathBuf>,
        input_map: Option<BTreeMap<String, String>>,
        output: Option<String>,
        device: &str,
        checkpoint: Option<PathBuf>,
        checkpoint_every: u64,
        resume: Option<PathBuf>,
        log: Option<PathBuf>,
        plot: Option<PathBuf>,
        save_onnx: Option<PathBuf>,
        profile: bool,
        kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Self> {
        let mut kw = Kwargs::new(kwargs, "TrainRun");
        let compile = compile_settings(&mut kw)?;
        let train = train_settings(&mut kw)?;
        kw.finish()?;
        let inputs = input_map.unwrap_or_default();
        let source = match (data, text) {
            (Some(_), Some(_)) => return Err(invalid("give data or text, not both")),
            (None, Some(t)) => DataSource::Text(t),
            (None, None) => {
                return Err(invalid(
                    "give data (an .npz path or a dict of arrays) or text",
                ));
            }
            (Some(d), None) => {
                let labels = labels.ok_or_else(|| {
                    invalid("labels: name the array of the labels (or the mse target)")
                })?;
                match d.cast::<PyDict>() {
                    Ok(arrays) => DataSource::Arrays {
                        arrays: tensors_from_dict(arrays, "data")?,
                        inputs,
                        labels,
                        source: "data".into(),
                    },
                    Err(_) => DataSource::Npz {
                        path: d.extract::<PathBuf>()?,
                        inputs,
                        labels,
                    },
                }
            }
        };
        let mut config = TrainConfig::new(model, source);
        config.output = output;
        config.compile = compile;
        config.train = train;
        config.device = parse_device(device)?;
        config.checkpoint = checkpoint;
        config.checkpoint_every = checkpoint_every;
        config.resume = resume;
        config.log = log;
        config.plot = plot;
        config.save_onnx = save_onnx;
        config.profile = profile;
        let stop = Arc::new(AtomicBool::new(false));
        config.stop = Some(stop.clone());
        let run = without_gil(py, || TrainRun::prepare(&config)).py_err()?;
        let fit = Fit {
            start_step: run.info().start_step,
            ..Fit::default()
        };
        Ok(PyTrainRun { run, fit, stop })
    }

    /// What the run is about to do (the summary `fp8c train` prints).
    #[getter]
    fn info<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let i = self.run.info();
        let d = PyDict::new(py);
        d.set_item("model", i.model.clone())?;
        d.set_item("rows", i.rows)?;
        d.set_item("batch", i.batch)?;
        d.set_item("accumulate", i.accumulate)?;
        d.set_item("output", i.output.clone())?;
        d.set_item("loss", format!("{:?}", i.loss))?;
        d.set_item("optimizer", format!("{:?}", i.optimizer))?;
        d.set_item("lr", i.lr)?;
        d.set_item("precision", i.precision)?;
        d.set_item("trained", i.trained)?;
        d.set_item("start_step", i.start_step)?;
        d.set_item("steps", i.steps)?;
        d.set_item("prepare_s", i.prepare_seconds)?;
        d.set_item("warnings", i.warnings.clone())?;
        d.set_item(
            "high_precision",
            self.run.trainer().high_precision_summary(),
        )?;
        Ok(d)
    }

    /// The trainer's step (steps run so far, a resumed run's included).
    #[getter]
    fn step_count(&self) -> u64 {
        self.run.trainer().steps()
    }

    /// Runs the library's training loop up to `steps`, calling `on_step(report)` after every
    /// step (return False to stop, state saved); returns this loop's losses and timings.
    #[pyo3(signature = (on_step=None))]
    fn fit<'py>(
        &mut self,
        py: Python<'py>,
        on_step: Option<Py<PyAny>>,
    ) -> PyResult<Bound<'py, PyDict>> {
        self.stop.store(false, Ordering::Relaxed);
        let mut observer = PyObserver {
            callback: on_step,
            stop: self.stop.clone(),
            raised: None,
        };
        let run = &mut self.run;
        let result = without_gil(py, || run.fit(&mut observer));
        if let Some(e) = observer.raised.take() {
            if let Ok(fit) = result {
                let dir = fit.interrupted.clone();
                merge(&mut self.fit, fit);
                if let Some(dir) = dir
                    && e.is_instance_of::<PyKeyboardInterrupt>(py)
                {
                    return Err(PyKeyboardInterrupt::new_err(format!(
                        "interrupted after step {}: the whole training state is in {} (continue with resume=\"{}\")",
                        self.run.trainer().steps().saturating_sub(1),
                        dir.display(),
                        dir.display()
                    )));
                }
            }
            return Err(e);
        }
        let fit = result.py_err()?;
        let d = fit_dict(py, &fit)?;
        merge(&mut self.fit, fit);
        Ok(d)
    }

    /// One step on the caller's batch (`{name: array}`: the model's inputs and the labels
    /// array, exactly one batch of rows); returns its report.
    fn step<'py>(
        &mut self,
        py: Python<'py>,
        batch: &Bound<'py, PyDict>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let arrays = tensors_from_dict(batch, "batch")?;
        let run = &mut self.run;
        let t0 = std::time::Instant::now();
        let report = without_gil(py, || run.step_on(arrays, "batch")).py_err()?;
        self.fit.losses.push((report.step, report.loss));
        self.fit.seconds += t0.elapsed().as_secs_f64();
        if !report.applied {
            self.fit.skipped += 1;
        }
        self.fit.last_accuracy = report.accuracy.or(self.fit.last_accuracy);
        report_dict(py, &report)
    }

    /// Writes the final checkpoint, the plot and the trained ONNX model that the run was
    /// given; returns what was written, or raises the first failure after the rest were
    /// written.
    fn finish<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let (run, fit) = (&self.run, &self.fit);
        let (done, failed) = without_gil(py, || run.finish(fit));
        if let Some(e) = failed {
            return Err(crate::errors::to_py(e));
        }
        let d = PyDict::new(py);
        d.set_item("checkpoint", done.checkpoint)?;
        d.set_item("plot", done.plot)?;
        d.set_item("saved_onnx", done.saved_onnx)?;
        Ok(d)
    }

    /// Every step run so far (by `fit` and `step`): `(step, loss)` pairs and timings.
    #[getter]
    fn history<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        fit_dict(py, &self.fit)
    }

    /// The whole training state (weights, optimizer moments, scaling state, counters).
    fn state<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        tensors_to_py(py, &self.run.trainer().state(), &[])
    }

    /// The current value of every parameter of the model.
    fn weights<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        tensors_to_py(py, &self.run.trainer().weights(), &[])
    }

    /// The explain report of the training graph as JSON text.
    #[pyo3(signature = (all=false))]
    fn report_json(&self, all: bool) -> PyResult<String> {
        serde_json::to_string(&self.run.trainer().report(all))
            .map_err(|e| invalid(format!("the report: {e}")))
    }

    /// The step times of a run prepared with `profile=True`.
    fn profile(&self) -> Option<crate::runner::PyProfile> {
        self.run
            .trainer()
            .profile()
            .map(|p| crate::runner::PyProfile { profile: p.clone() })
    }
}
