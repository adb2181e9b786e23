//! `fp8c.Runner` (a compiled model loaded on a device: run on NumPy arrays, state,
//! calibration, profiling) and `fp8c.Profile` (step times, `fp8c run --profile`).
//!
//! Inputs are checked and converted by the model's declared interface as `fp8c run` does
//! (`Model::conform_input`: an f32 array given for a bf16 input is rounded to bf16; errors
//! name the input).

use crate::arrays::{tensor_from_array, tensors_from_dict, tensors_to_py};
use crate::errors::IntoPy;
use crate::without_gil;
use fp8c_session::{Model, Profile, Recipe, Runner, Tensor};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use std::collections::BTreeMap;
use std::sync::Arc;

/// A compiled model loaded on a device: `Compiled.prepare(device)`.
#[pyclass(name = "Runner", module = "fp8c._fp8c", unsendable)]
pub struct PyRunner {
    runner: Runner,
    model: Arc<Model>,
    recipe: Recipe,
}

impl PyRunner {
    pub(crate) fn new(runner: Runner, model: Arc<Model>, recipe: Recipe) -> Self {
        PyRunner {
            runner,
            model,
            recipe,
        }
    }

    /// `inputs` as the program's inputs, conformed to the model's declared types.
    fn inputs(&self, inputs: &Bound<'_, PyDict>) -> PyResult<BTreeMap<String, Tensor>> {
        let mut out = BTreeMap::new();
        for (name, t) in tensors_from_dict(inputs, "input")? {
            let t = self.model.conform_input(&name, t).py_err()?;
            out.insert(name, t);
        }
        Ok(out)
    }

    /// The program's output names, in order.
    fn order(&self) -> Vec<String> {
        self.runner
            .program()
            .outputs()
            .iter()
            .map(|(n, _)| n.clone())
            .collect()
    }
}

#[pymethods]
impl PyRunner {
    /// For each of `inputs`, whether the tensor `run` would be handed reads the array's own
    /// memory (no copy) after the same checks and conversions: a diagnostic for tests.
    fn _reads_in_place(&self, inputs: &Bound<'_, PyDict>) -> PyResult<BTreeMap<String, bool>> {
        let feed = self.inputs(inputs)?;
        let mut out = BTreeMap::new();
        for (k, v) in inputs.iter() {
            let name: String = k.extract()?;
            let iface = v.getattr("__array_interface__")?;
            let (addr, _): (usize, bool) = iface.get_item("data")?.extract()?;
            let same = feed
                .get(&name)
                .is_some_and(|t| t.bytes().as_ptr() as usize == addr);
            out.insert(name, same);
        }
        Ok(out)
    }

    /// Runs on `inputs` (`{name: array}`, every input) and returns the outputs by name as
    /// `(dtype, shape, bytearray)`; state (amax histories, scales) carries to the next run.
    fn run<'py>(
        &mut self,
        py: Python<'py>,
        inputs: &Bound<'py, PyDict>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let feed = self.inputs(inputs)?;
        let runner = &mut self.runner;
        let outs = without_gil(py, || runner.run(&feed)).py_err()?;
        tensors_to_py(py, &outs, &self.order())
    }

    /// Runs `repeat` times on `inputs`, timing every step; returns the first run's outputs and
    /// the profile.
    #[pyo3(signature = (inputs, repeat=1))]
    fn run_profiled<'py>(
        &mut self,
        py: Python<'py>,
        inputs: &Bound<'py, PyDict>,
        repeat: u32,
    ) -> PyResult<(Bound<'py, PyDict>, PyProfile)> {
        let feed = self.inputs(inputs)?;
        let runner = &mut self.runner;
        let (outs, profile) = without_gil(py, || -> fp8c_session::Result<_> {
            let mut profile = Profile::new();
            let first = runner.run_profiled(&feed, &mut profile)?;
            for _ in 1..repeat.max(1) {
                runner.run_profiled(&feed, &mut profile)?;
            }
            Ok((first, profile))
        })
        .py_err()?;
        Ok((
            tensors_to_py(py, &outs, &self.order())?,
            PyProfile { profile },
        ))
    }

    /// Fills the delayed-scaling state from `inputs` run through `reference` (the same model
    /// compiled with `precision="f32"`), as `fp8c run --calibrate` does; returns
    /// `(calibrated, total)` FP8 tensors.
    fn calibrate(
        &mut self,
        py: Python<'_>,
        reference: &mut PyRunner,
        inputs: &Bound<'_, PyDict>,
    ) -> PyResult<(usize, usize)> {
        let Recipe::Delayed(recipe) = self.recipe else {
            return Err(crate::errors::invalid(
                "calibrate: only delayed scaling keeps amax histories; compile with recipe=\"delayed\"",
            ));
        };
        let feed = self.inputs(inputs)?;
        let (target, reference) = (&mut self.runner, &mut reference.runner);
        let c = without_gil(py, || {
            fp8c_session::calibrate::calibrate(target, reference, &feed, &recipe)
        })
        .py_err()?;
        Ok((c.calibrated, c.total))
    }

    /// Every state entry by name (amax histories, scales) as `(dtype, shape, bytearray)`.
    fn state<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        tensors_to_py(py, &self.runner.state(), &[])
    }

    /// Replaces a state entry (same dtype and shape).
    fn set_state(&mut self, name: &str, value: &Bound<'_, PyAny>) -> PyResult<()> {
        let t = tensor_from_array(value, &format!("state \"{name}\""))?;
        self.runner.set_state(name, t).py_err()
    }

    /// The device it runs on.
    #[getter]
    fn device(&self) -> &'static str {
        self.runner.device().name()
    }

    /// The program's outputs in order.
    #[getter]
    fn output_names(&self) -> Vec<String> {
        self.order()
    }
}

/// Step times over profiled runs: `Runner.run_profiled`, `fp8c.run(..., profile=True)`.
#[pyclass(name = "Profile", module = "fp8c._fp8c", frozen)]
pub struct PyProfile {
    pub(crate) profile: Profile,
}

/// Profile rows as dicts.
fn rows<'py>(py: Python<'py>, rows: Vec<fp8c_session::ProfileRow>) -> PyResult<Bound<'py, PyList>> {
    let out = PyList::empty(py);
    for r in rows {
        let d = PyDict::new(py);
        d.set_item("name", r.name)?;
        d.set_item("detail", r.detail)?;
        d.set_item("seconds", r.time.as_secs_f64())?;
        d.set_item("share", r.share)?;
        d.set_item("calls", r.calls)?;
        out.append(d)?;
    }
    Ok(out)
}

#[pymethods]
impl PyProfile {
    /// The table `fp8c run --profile` prints: time per op kind, then the `top` slowest nodes.
    #[pyo3(signature = (top=15))]
    fn report(&self, top: usize) -> String {
        self.profile.report(top)
    }

    /// Runs profiled.
    #[getter]
    fn runs(&self) -> u64 {
        self.profile.runs()
    }

    /// Time of the profiled runs, summed, in seconds.
    #[getter]
    fn total_s(&self) -> f64 {
        self.profile.total().as_secs_f64()
    }

    /// One dict per op kind (`name`, `detail`, `seconds`, `share`, `calls`), slowest first.
    fn by_op<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        rows(py, self.profile.by_op())
    }

    /// One dict per node, slowest first.
    fn by_node<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        rows(py, self.profile.by_node())
    }

    fn __repr__(&self) -> String {
        format!(
            "<fp8c.Profile: {} runs, {:.3} s>",
            self.profile.runs(),
            self.profile.total().as_secs_f64()
        )
    }
}
