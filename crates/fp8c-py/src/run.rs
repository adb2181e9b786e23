//! `fp8c.run(...)`: a whole `fp8c run` (`fp8c_session::RunJob`): load, read the inputs from
//! files, specialise, compile, calibrate, run `repeat` times, profile, compare with the f32
//! path, FP8 statistics. The outcome comes back as data; the warnings and notes the CLI
//! prints come back as `messages`.

use crate::arrays::tensors_to_py;
use crate::errors::IntoPy;
use crate::runner::PyProfile;
use crate::settings::{Kwargs, compile_settings};
use crate::without_gil;
use fp8c_session::{InputSources, RunConfig, RunJob};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use std::path::PathBuf;

/// A whole `fp8c run MODEL --inputs NPZ ...`; see `fp8c.run` for the keywords.
#[pyfunction]
#[pyo3(signature = (model, inputs=None, npy=None, data_dir=None, outputs=None, device="cpu", calibrate=None, compare=false, stats=false, repeat=1, profile=false, **kwargs))]
#[allow(clippy::too_many_arguments)]
pub fn run_job<'py>(
    py: Python<'py>,
    model: PathBuf,
    inputs: Option<PathBuf>,
    npy: Option<Vec<String>>,
    data_dir: Option<PathBuf>,
    outputs: Option<Vec<String>>,
    device: &str,
    calibrate: Option<PathBuf>,
    compare: bool,
    stats: bool,
    repeat: u32,
    profile: bool,
    kwargs: Option<&Bound<'py, PyDict>>,
) -> PyResult<Bound<'py, PyDict>> {
    let mut kw = Kwargs::new(kwargs, "run");
    let compile = compile_settings(&mut kw)?;
    kw.finish()?;
    let config = RunConfig {
        model,
        outputs: outputs.unwrap_or_default(),
        inputs: InputSources {
            npz: inputs,
            npy: npy.unwrap_or_default(),
            pb_dir: data_dir,
        },
        compile,
        device: crate::settings::device(device)?,
        calibrate,
        compare,
        stats,
        repeat: repeat.max(1),
        profile,
    };
    let (job, outcome, comparison, messages) = without_gil(py, || -> fp8c_session::Result<_> {
        let mut messages = Vec::new();
        let mut job = RunJob::prepare(&config, &mut |m: &str| messages.push(m.to_string()))?;
        let outcome = job.run()?;
        let comparison = job.compare(&outcome.outputs)?;
        Ok((job, outcome, comparison, messages))
    })
    .py_err()?;
    let order: Vec<String> = job
        .runner()
        .program()
        .outputs()
        .iter()
        .map(|(n, _)| n.clone())
        .collect();
    let d = PyDict::new(py);
    d.set_item("outputs", tensors_to_py(py, &outcome.outputs, &order)?)?;
    d.set_item(
        "times",
        outcome
            .times
            .iter()
            .map(|t| t.as_secs_f64())
            .collect::<Vec<f64>>(),
    )?;
    d.set_item(
        "profile",
        outcome.profile.map(|profile| PyProfile { profile }),
    )?;
    d.set_item("stats_json", json(&outcome.stats)?)?;
    let rows = PyList::empty(py);
    for (name, c) in &comparison {
        rows.append((name, json(c)?))?;
    }
    d.set_item("comparison_json", rows)?;
    d.set_item("messages", messages)?;
    d.set_item("high_precision", job.compiled().high_precision_summary())?;
    d.set_item("recipe", fp8c_session::recipe_word(job.recipe()))?;
    d.set_item("compile_s", job.compile_time().as_secs_f64())?;
    Ok(d)
}

/// A serialisable value as JSON text (the Python side parses it).
fn json<T: serde::Serialize + ?Sized>(v: &T) -> PyResult<String> {
    serde_json::to_string(v).map_err(|e| crate::errors::invalid(format!("JSON: {e}")))
}
