//! Keyword arguments as the CLI's settings: `compile(precision="fp8", recipe="delayed",
//! input_shapes={"x": [16, 64]}, keep_high="lm_head*")` fills the same
//! `fp8c_session::CompileSettings` as `fp8c compile --precision fp8 --recipe delayed
//! --input-shape x=16x64 --keep-high 'lm_head*'`, and training keywords the same
//! `TrainSettings` as `fp8c train`'s flags, so names, defaults, validation and messages are
//! the CLI's (a message names the flag: `--recipe foo: expected ...`). A keyword is a flag's
//! name with underscores; an unknown one is a TypeError.

use crate::errors::{invalid, type_error};
use fp8c_session::train::TrainSettings;
use fp8c_session::{CompileSettings, PrecisionMode};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::collections::BTreeSet;
use std::path::PathBuf;

/// Keyword arguments being read; [`Kwargs::finish`] refuses any left unread.
pub struct Kwargs<'py> {
    dict: Option<Bound<'py, PyDict>>,
    taken: BTreeSet<String>,
    func: &'static str,
}

impl<'py> Kwargs<'py> {
    /// The keywords `dict` of a call to `func` (for messages).
    pub fn new(dict: Option<&Bound<'py, PyDict>>, func: &'static str) -> Self {
        Kwargs {
            dict: dict.cloned(),
            taken: BTreeSet::new(),
            func,
        }
    }

    /// The value of `key` if given and not None.
    pub fn get(&mut self, key: &str) -> Option<Bound<'py, PyAny>> {
        self.taken.insert(key.to_string());
        let v = self.dict.as_ref()?.get_item(key).ok()??;
        (!v.is_none()).then_some(v)
    }

    /// `key` as a `T`, if given.
    pub fn take<T: pyo3::conversion::FromPyObjectOwned<'py>>(
        &mut self,
        key: &str,
    ) -> PyResult<Option<T>> {
        let func = self.func;
        self.get(key)
            .map(|v| {
                v.extract::<T>().map_err(|_| {
                    type_error(format!(
                        "{func}(): {key} has the wrong type ({})",
                        v.get_type()
                            .name()
                            .map(|n| n.to_string())
                            .unwrap_or_default()
                    ))
                })
            })
            .transpose()
    }

    /// `key` as a flag given once or repeated: a str or a list of str.
    pub fn strings(&mut self, key: &str) -> PyResult<Vec<String>> {
        let func = self.func;
        let Some(v) = self.get(key) else {
            return Ok(Vec::new());
        };
        if let Ok(s) = v.extract::<String>() {
            return Ok(vec![s]);
        }
        v.extract::<Vec<String>>()
            .map_err(|_| type_error(format!("{func}(): {key} must be a str or a list of str")))
    }

    /// Refuses keywords never read.
    pub fn finish(self) -> PyResult<()> {
        let Some(d) = &self.dict else { return Ok(()) };
        for (k, _) in d.iter() {
            let k: String = k.extract()?;
            if !self.taken.contains(&k) {
                let mut known: Vec<&String> = self.taken.iter().collect();
                known.sort();
                let known: Vec<&str> = known.iter().map(|s| s.as_str()).collect();
                return Err(type_error(format!(
                    "{}() got an unexpected keyword argument '{k}' (it takes {})",
                    self.func,
                    known.join(", ")
                )));
            }
        }
        Ok(())
    }
}

/// The compile keywords of `kw` as [`CompileSettings`].
pub fn compile_settings(kw: &mut Kwargs<'_>) -> PyResult<CompileSettings> {
    let mut s = CompileSettings::default();
    if let Some(p) = kw.take::<String>("precision")? {
        s.precision = p
            .parse::<PrecisionMode>()
            .map_err(|e| invalid(format!("--precision {p}: {e}")))?;
    }
    s.recipe.kind = kw.take("recipe")?;
    s.recipe.format = kw.take("format")?;
    s.recipe.amax_history = kw.take("amax_history")?;
    s.recipe.amax_algo = kw.take("amax_algo")?;
    s.recipe.margin = kw.take("margin")?;
    s.recipe.amax_epsilon = kw.take("amax_epsilon")?;
    s.recipe.power_2_scale = kw.take("power_2_scale")?.unwrap_or(false);
    let fast = kw.strings("fast_accum")?;
    s.recipe.fast_accum = (!fast.is_empty()).then(|| fast.join(","));
    s.config = kw.take::<PathBuf>("config")?;
    s.keep_high = kw.strings("keep_high")?;
    s.force_fp8 = kw.strings("force_fp8")?;
    s.granularity = pairs(kw, "granularity", |glob, v| {
        v.extract::<String>().map(|name| format!("{glob}={name}"))
    })?;
    s.keep_first_last = kw.take("keep_first_last")?.unwrap_or(false);
    s.fp8_attention = kw.take("fp8_attention")?.unwrap_or(false);
    s.pad_to_16 = kw.take("pad_to_16")?.unwrap_or(false);
    s.no_fuse = kw.take("no_fuse")?.unwrap_or(false);
    s.min_fp8_flops = kw.take("min_fp8_flops")?;
    s.hopper_accum = kw.take("hopper_accum")?.unwrap_or(false);
    s.input_shapes = pairs(kw, "input_shapes", |name, v| {
        if let Ok(dims) = v.extract::<String>() {
            return Ok(format!("{name}={dims}"));
        }
        let dims: Vec<i64> = v.extract()?;
        let dims: Vec<String> = dims.iter().map(i64::to_string).collect();
        Ok(format!("{name}={}", dims.join("x")))
    })?;
    s.print_after = kw.strings("print_after")?;
    s.stop_after = kw.take("stop_after")?;
    s.no_verify = !kw.take("verify")?.unwrap_or(true);
    Ok(s)
}

/// A keyword given as a dict (`{"x": [16, 64]}`, each entry made a flag value by `entry`) or
/// as the flag's own values (`"x=16x64"` or a list of them).
fn pairs(
    kw: &mut Kwargs<'_>,
    key: &str,
    entry: impl Fn(&str, &Bound<'_, PyAny>) -> PyResult<String>,
) -> PyResult<Vec<String>> {
    let func = kw.func;
    let Some(v) = kw.get(key) else {
        return Ok(Vec::new());
    };
    if let Ok(d) = v.cast::<PyDict>() {
        let mut out = Vec::new();
        for (k, val) in d.iter() {
            let k: String = k
                .extract()
                .map_err(|_| type_error(format!("{func}(): {key}'s keys must be str")))?;
            out.push(
                entry(&k, &val).map_err(|_| {
                    type_error(format!("{func}(): {key}[\"{k}\"] has the wrong type"))
                })?,
            );
        }
        return Ok(out);
    }
    if let Ok(s) = v.extract::<String>() {
        return Ok(vec![s]);
    }
    v.extract::<Vec<String>>().map_err(|_| {
        type_error(format!(
            "{func}(): {key} must be a dict, a str or a list of str"
        ))
    })
}

/// The training keywords of `kw` as [`TrainSettings`] (unset ones: the config's `[train]`
/// table, then the defaults).
pub fn train_settings(kw: &mut Kwargs<'_>) -> PyResult<TrainSettings> {
    let freeze = kw.strings("freeze")?;
    Ok(TrainSettings {
        lr: kw.take("lr")?,
        schedule: kw.take("schedule")?,
        warmup: kw.take("warmup")?,
        min_lr: kw.take("min_lr")?,
        weight_decay: kw.take("weight_decay")?,
        clip_grad_norm: kw.take("clip_grad_norm")?,
        accumulate: kw.take("accumulate")?,
        wgrad_high_precision: kw.take("wgrad_high_precision")?,
        optimizer: kw.take("optimizer")?,
        momentum: kw.take("momentum")?,
        batch: kw.take("batch")?,
        steps: kw.take("steps")?,
        seq_len: kw.take("seq_len")?,
        seed: kw.take("seed")?,
        loss: kw.take("loss")?,
        freeze: (!freeze.is_empty()).then_some(freeze),
        // A Python process is one rank: `shard` is checked as the CLI checks it (a no-op).
        shard: kw.take("shard")?,
        fp8_all_gather: kw.take("fp8_all_gather")?,
        activations: kw.take("activations")?,
        recompute: kw.take("recompute")?,
        optimizer_state: kw.take("optimizer_state")?,
    })
}

/// A device by name (`cpu`, `cuda`, `cuda-emulated`, `mlir`).
pub fn device(name: &str) -> PyResult<fp8c_session::Device> {
    name.parse()
        .map_err(|e: String| invalid(format!("device={name:?}: {e}")))
}
