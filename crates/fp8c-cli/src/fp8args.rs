//! The precision-policy and recipe flags shared by `compile`, `run` and `train`.

use anyhow::{Context, Result, bail};
use clap::Args;
use fp8c_core::{AmaxComputeAlgo, CurrentScaling, DelayedScaling, Format, Recipe};
use fp8c_passes::precision::{DEFAULT_MIN_FP8_FLOPS, PolicyOptions, PrecisionMode};
use serde::Deserialize;
use std::path::PathBuf;

/// Precision policy and FP8 recipe flags.
#[derive(Args, Debug, Clone)]
pub struct Fp8Args {
    /// Overall precision: fp8 (GEMMs in FP8 where the policy allows), or the bf16 / f32 baselines.
    #[arg(long, default_value = "fp8", value_name = "f32|bf16|fp8")]
    pub precision: PrecisionMode,
    /// Scaling recipe: delayed (amax history of past steps, TE's default) or current.
    #[arg(long, value_name = "delayed|current")]
    pub recipe: Option<String>,
    /// FP8 format: hybrid (E4M3 forward, E5M2 gradients) or e4m3.
    #[arg(long, value_name = "hybrid|e4m3")]
    pub format: Option<String>,
    /// Amax history length for delayed scaling [default: 1024].
    #[arg(long = "amax-history", value_name = "N")]
    pub amax_history: Option<usize>,
    /// How delayed scaling reads the history [default: max].
    #[arg(long = "amax-algo", value_name = "max|most-recent")]
    pub amax_algo: Option<String>,
    /// Scale margin: scale = fp8_max / amax / 2^margin [default: 0].
    #[arg(long, value_name = "M", allow_negative_numbers = true)]
    pub margin: Option<f32>,
    /// Current scaling: lower bound on amax [default: 0].
    #[arg(long = "amax-epsilon", value_name = "E", allow_negative_numbers = true)]
    pub amax_epsilon: Option<f32>,
    /// Current scaling: round scales down to powers of two.
    #[arg(long = "power-2-scale")]
    pub power_2_scale: bool,
    /// TOML file with a [recipe] table (same field names as TransformerEngine); flags override it.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Keep GEMMs whose node name matches GLOB in high precision (repeatable), e.g. 'lm_head*'.
    #[arg(long = "keep-high", value_name = "GLOB")]
    pub keep_high: Vec<String>,
    /// Put GEMMs whose node name matches GLOB in FP8 regardless of size or attention rules.
    #[arg(long = "force-fp8", value_name = "GLOB")]
    pub force_fp8: Vec<String>,
    /// Keep the first and last GEMM in high precision.
    #[arg(long = "keep-first-last")]
    pub keep_first_last: bool,
    /// Allow attention's activation×activation matmuls (QKᵀ, PV) in FP8.
    #[arg(long = "fp8-attention")]
    pub fp8_attention: bool,
    /// Pad GEMM dims to multiples of 16 instead of keeping misaligned GEMMs high.
    #[arg(long = "pad-to-16")]
    pub pad_to_16: bool,
    /// Do not run the fusion pass (every amax/scale/quantize node stays its own kernel).
    #[arg(long = "no-fuse")]
    pub no_fuse: bool,
    /// GEMMs with fewer FLOPs (2·M·N·K) stay high.
    #[arg(long = "min-fp8-flops", value_name = "N", default_value_t = DEFAULT_MIN_FP8_FLOPS)]
    pub min_fp8_flops: u64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigFile {
    recipe: Option<Recipe>,
}

impl Fp8Args {
    /// The policy options.
    pub fn policy(&self) -> Result<PolicyOptions> {
        let p = PolicyOptions {
            mode: self.precision,
            keep_high: self.keep_high.clone(),
            force_fp8: self.force_fp8.clone(),
            keep_first_last: self.keep_first_last,
            fp8_attention: self.fp8_attention,
            pad_to_16: self.pad_to_16,
            min_fp8_flops: self.min_fp8_flops,
        };
        p.validate().map_err(anyhow::Error::msg)?;
        Ok(p)
    }

    /// The recipe: the config file's (if any), then each given flag on top; validated.
    pub fn recipe(&self) -> Result<Recipe> {
        let base = match &self.config {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("{}: cannot read", path.display()))?;
                let cfg: ConfigFile = toml::from_str(&text)
                    .with_context(|| format!("{}: invalid recipe config", path.display()))?;
                cfg.recipe.unwrap_or_default()
            }
            None => Recipe::default(),
        };
        let kind = self.recipe.as_deref().unwrap_or(base.kind());
        let format: Format = match &self.format {
            Some(f) => f.parse().with_context(|| format!("--format {f}"))?,
            None => base.fp8_format(),
        };
        let recipe = match kind {
            "delayed" => {
                let d = match base {
                    Recipe::Delayed(d) => d,
                    Recipe::Current(_) => DelayedScaling::default(),
                };
                let algo: AmaxComputeAlgo = match &self.amax_algo {
                    Some(a) => a.parse().with_context(|| format!("--amax-algo {a}"))?,
                    None => d.amax_compute_algo,
                };
                if self.amax_epsilon.is_some() || self.power_2_scale {
                    bail!("--amax-epsilon and --power-2-scale apply to --recipe current only");
                }
                Recipe::Delayed(
                    DelayedScaling::new(
                        self.margin.unwrap_or(d.margin),
                        format,
                        self.amax_history.unwrap_or(d.amax_history_len),
                        algo,
                        d.reduce_amax,
                    )
                    .context("invalid delayed-scaling recipe")?,
                )
            }
            "current" => {
                let c = match base {
                    Recipe::Current(c) => c,
                    Recipe::Delayed(_) => CurrentScaling::default(),
                };
                if self.amax_history.is_some() || self.amax_algo.is_some() || self.margin.is_some()
                {
                    bail!(
                        "--amax-history, --amax-algo and --margin apply to --recipe delayed only"
                    );
                }
                Recipe::Current(
                    CurrentScaling::new(
                        format,
                        self.amax_epsilon.unwrap_or(c.amax_epsilon),
                        self.power_2_scale || c.power_2_scale,
                    )
                    .context("invalid current-scaling recipe")?,
                )
            }
            other => bail!("--recipe {other}: expected delayed or current"),
        };
        Ok(recipe)
    }
}
