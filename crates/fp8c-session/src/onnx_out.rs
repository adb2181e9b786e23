//! `fp8c compile --emit onnx` as one call ([`emit_fp8_onnx`]): which recipe the file
//! computes its scales with, whether calibration data is needed, the checks of the target and
//! of the data before any work, then the export ([`crate::export::fp8_onnx`]) and the write.
//!
//! A current-scaling recipe named by the caller (`--recipe current|rowwise|block|mxfp8` or a
//! config's `[recipe]`) gives a graph that computes its own scales; otherwise delayed
//! scaling's scales are frozen from calibration inputs (`--calibrate`), except when no GEMM
//! goes to FP8 (nothing to calibrate). Q/DQ MatMuls accumulate in f32 in ONNX's semantics, so
//! the export calibrates and quantizes without fast accumulation unless `--fast-accum` says
//! otherwise.

use crate::error::{Context, Result, bail};
use crate::export::{Fp8Onnx, fp8_onnx, has_fp8_gemm};
use crate::files::Output;
use crate::model::Model;
use crate::options::{CompileOptions, Purpose};
use crate::settings::CompileSettings;
use fp8c_core::Recipe;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// What [`emit_fp8_onnx`] wrote.
#[derive(Debug)]
pub struct EmittedOnnx {
    /// The export's counts and notes.
    pub export: Fp8Onnx,
    /// The external data file written next to the model (over protobuf's 2 GiB).
    pub data_file: Option<PathBuf>,
    /// How the scales were chosen, in words (`4 of 4 FP8 tensors calibrated from cal.npz`).
    pub how: String,
}

/// Exports `model` (loaded from `model_path`) as FP8 Q/DQ ONNX to `out` with the compile
/// settings `s` (`opts`: those settings resolved for inference) and the calibration inputs
/// `calibrate`.
pub fn emit_fp8_onnx(
    model: &Model,
    model_path: &Path,
    s: &CompileSettings,
    mut opts: CompileOptions,
    calibrate: Option<&Path>,
    out: &Path,
) -> Result<EmittedOnnx> {
    if opts.policy.mode != fp8c_passes::precision::PrecisionMode::Fp8 {
        bail!("--emit onnx writes FP8 Q/DQ: use --precision fp8 (the default)");
    }
    let config = s.read_config()?;
    let f32_accum = |calibrated: bool| -> Result<Recipe> {
        let mut r = s.recipe_options(config.as_ref());
        r.fast_accum.get_or_insert_with(|| "none".to_string());
        r.recipe_for(Purpose::Inference { calibrated })
    };
    // A current-scaling recipe named by the user: the exported graph computes its scales.
    let named = s.recipe.kind.is_some() || s.config.is_some();
    if named
        && matches!(
            s.recipe_options(config.as_ref())
                .recipe_for(Purpose::Inference { calibrated: false })?,
            Recipe::Current(_)
        )
    {
        if calibrate.is_some() {
            bail!(
                "--calibrate freezes delayed scaling's scales, but the recipe is current scaling, whose scales the exported graph computes: drop --calibrate, or use --recipe delayed"
            );
        }
        let target = Output::check("-o", out, &[model_path])?;
        opts.recipe = f32_accum(false)?;
        let export = fp8_onnx(model, &opts, &Default::default())?;
        let data_file = export.save(&target)?;
        return Ok(EmittedOnnx {
            export,
            data_file,
            how: "current scaling computed in the graph".into(),
        });
    }
    // Without a GEMM in FP8 there are no scales to freeze (a small classifier whose GEMMs stay
    // high): export without calibration data.
    if calibrate.is_none() && !has_fp8_gemm(&model.compile(&opts)?) {
        let target = Output::check("-o", out, &[model_path])?;
        let export = fp8_onnx(model, &opts, &Default::default())?;
        let data_file = export.save(&target)?;
        return Ok(EmittedOnnx {
            export,
            data_file,
            how: "no FP8 GEMM, nothing to calibrate".into(),
        });
    }
    let Some(cal) = calibrate else {
        bail!(
            "--emit onnx freezes the activation scales: give --calibrate FILE.npz (inputs, as fp8c run --inputs takes them), or name a current-scaling recipe (--recipe current, rowwise, block or mxfp8) whose scales the exported graph computes"
        );
    };
    let target = Output::check("-o", out, &[model_path, cal])?;
    let mut data = BTreeMap::new();
    for (name, t) in crate::npy::read_npz(cal)? {
        let t = model
            .conform_input(&name, t)
            .with_context(|| format!("--calibrate {}", cal.display()))?;
        data.insert(name, t);
    }
    for (name, t) in &data {
        opts.input_shapes
            .entry(name.clone())
            .or_insert_with(|| t.shape().to_vec());
    }
    opts.recipe = f32_accum(true)?;
    let export = fp8_onnx(model, &opts, &data)?;
    let data_file = export.save(&target)?;
    let mut how = format!(
        "{} of {} FP8 tensors calibrated from {}",
        export.calibrated.0,
        export.calibrated.1,
        cal.display()
    );
    // Values left out of an amax (Inf, NaN), per FP8 tensor.
    for note in &export.calibration_notes {
        how.push_str("; ");
        how.push_str(note);
    }
    Ok(EmittedOnnx {
        export,
        data_file,
        how,
    })
}
