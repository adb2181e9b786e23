//! What a compilation is asked to do: [`CompileOptions`] (input shapes, precision policy,
//! scaling recipe, pass-manager switches), and [`RecipeOptions`], the recipe as a program's
//! flags give it (a TOML `[recipe]` file, then each flag on top, validated).
//!
//! Error messages name the `fp8c` flag of the faulty field (`--format e5m2: ...`), as the
//! pass crate's do; a program with other flag names maps them by field.

use crate::config::ConfigFile;
use crate::error::{Context, Error, Result, bail};
use crate::runner::HostAccum;
use fp8c_core::{
    AmaxComputeAlgo, CurrentScaling, DelayedScaling, Format, Gemm, Granularity, MMParams, Recipe,
};
use fp8c_passes::precision::{PolicyOptions, PrecisionMode};
use fp8c_passes::{PassManager, PassOptions};
use std::collections::BTreeMap;
use std::sync::Arc;

/// How to compile a model: shapes to bind, precision policy, recipe and pipeline switches.
///
/// ```
/// use fp8c_session::CompileOptions;
/// let opts = CompileOptions::fp8()
///     .input_shape("input_ids", &[2, 64])
///     .keep_high("lm_head*")
///     .min_fp8_flops(0);
/// assert_eq!(opts.input_shapes["input_ids"], [2, 64]);
/// ```
#[derive(Clone, Debug)]
pub struct CompileOptions {
    /// Concrete shapes of graph inputs; the symbols they bind (`batch`) apply to every input.
    pub input_shapes: BTreeMap<String, Vec<u64>>,
    /// Which GEMMs go to FP8.
    pub policy: PolicyOptions,
    /// The FP8 scaling recipe.
    pub recipe: Recipe,
    /// Skip the fusion pass.
    pub no_fuse: bool,
    /// Leave attention chains unfused (`fp8c_passes::attention`): the graph as exported.
    pub no_fuse_attention: bool,
    /// Keep the weights in f32 and quantize them at every run instead of once at compile
    /// time (same results; for measuring every quantization, as `fp8c run --stats` does).
    pub keep_weights: bool,
    /// Run the IR verifier after every pass.
    pub verify: bool,
    /// Record the IR text after these passes ([`crate::Compiled::dumps`]).
    pub print_after: Vec<String>,
    /// Stop after this pass.
    pub stop_after: Option<String>,
    /// How the host devices compute the GEMMs the recipe lets use fast accumulation
    /// ([`HostAccum`]: in f32 by default; `--hopper-accum` models Hopper's accumulator).
    pub host_accum: HostAccum,
}

impl Default for CompileOptions {
    fn default() -> Self {
        CompileOptions::fp8()
    }
}

/// What a recipe is for; it decides the default scaling when nothing else does.
///
/// Inference defaults to **current scaling** (a fresh model has no amax history, and
/// current scaling is right from the first call), or delayed scaling when calibration data
/// fills the histories first or a delayed-only field (history length, algorithm, margin) is
/// given. Training defaults to **delayed scaling** (TransformerEngine's `DelayedScaling`):
/// the history fills as steps run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Purpose {
    /// Compile or run a model; `calibrated` when calibration data fills the histories first.
    Inference {
        /// Calibration data is given (`--calibrate`).
        calibrated: bool,
    },
    /// Train a model.
    Training,
}

/// The default recipe for `purpose` when neither flags nor a config file name one.
pub fn default_recipe(purpose: Purpose) -> Recipe {
    match purpose {
        Purpose::Inference { calibrated: false } => Recipe::Current(CurrentScaling::default()),
        Purpose::Inference { calibrated: true } | Purpose::Training => {
            Recipe::Delayed(DelayedScaling::default())
        }
    }
}

impl CompileOptions {
    /// Compiles in `mode` with the default policy and the inference recipe (current scaling,
    /// HYBRID; see [`Purpose`]).
    pub fn precision(mode: PrecisionMode) -> Self {
        CompileOptions {
            input_shapes: BTreeMap::new(),
            policy: PolicyOptions {
                mode,
                ..PolicyOptions::default()
            },
            recipe: default_recipe(Purpose::Inference { calibrated: false }),
            no_fuse: false,
            no_fuse_attention: false,
            keep_weights: false,
            verify: true,
            print_after: Vec::new(),
            stop_after: None,
            host_accum: HostAccum::F32,
        }
    }

    /// GEMMs in FP8 where the policy allows (the default), for inference (current scaling).
    pub fn fp8() -> Self {
        Self::precision(PrecisionMode::Fp8)
    }

    /// GEMMs in FP8, for training: delayed scaling (TransformerEngine's default recipe).
    pub fn fp8_training() -> Self {
        Self::precision(PrecisionMode::Fp8).recipe(default_recipe(Purpose::Training))
    }

    /// Everything in f32: the reference path.
    pub fn f32() -> Self {
        Self::precision(PrecisionMode::F32)
    }

    /// GEMMs in bf16: the mixed-precision baseline.
    pub fn bf16() -> Self {
        Self::precision(PrecisionMode::Bf16)
    }

    /// Binds input `name` to `dims`.
    pub fn input_shape(mut self, name: &str, dims: &[u64]) -> Self {
        self.input_shapes.insert(name.to_string(), dims.to_vec());
        self
    }

    /// Replaces the precision mode, keeping the rest of the policy.
    pub fn with_precision(mut self, mode: PrecisionMode) -> Self {
        self.policy.mode = mode;
        self
    }

    /// Replaces the whole policy.
    pub fn policy(mut self, policy: PolicyOptions) -> Self {
        self.policy = policy;
        self
    }

    /// Replaces the recipe.
    pub fn recipe(mut self, recipe: Recipe) -> Self {
        self.recipe = recipe;
        self
    }

    /// Keeps GEMMs whose node name matches `glob` in high precision.
    pub fn keep_high(mut self, glob: &str) -> Self {
        self.policy.keep_high.push(glob.to_string());
        self
    }

    /// Puts GEMMs whose node name matches `glob` in FP8 regardless of size.
    pub fn force_fp8(mut self, glob: &str) -> Self {
        self.policy.force_fp8.push(glob.to_string());
        self
    }

    /// GEMMs whose node name matches `glob` use `granularity` under current scaling (a
    /// per-GEMM recipe choice; the first matching call wins).
    pub fn granularity(mut self, glob: &str, granularity: fp8c_core::Granularity) -> Self {
        self.policy
            .granularity
            .push((glob.to_string(), granularity));
        self
    }

    /// GEMMs with fewer FLOPs (2·M·N·K) stay high, in place of the recipe's size rule
    /// (torchao's H100 filter for linear layers, see `fp8c_passes::precision::size_rule`);
    /// 0 puts every eligible GEMM in FP8.
    pub fn min_fp8_flops(mut self, flops: u64) -> Self {
        self.policy.min_fp8_flops = Some(flops);
        self
    }

    /// How the host devices compute fast-accumulation GEMMs ([`HostAccum`]).
    pub fn host_accum(mut self, accum: HostAccum) -> Self {
        self.host_accum = accum;
        self
    }

    /// Skips (`true`) or runs the fusion pass.
    pub fn no_fuse(mut self, no_fuse: bool) -> Self {
        self.no_fuse = no_fuse;
        self
    }

    /// Leaves (`true`) attention chains unfused, or fuses them into `attention` (the default).
    pub fn no_fuse_attention(mut self, no_fuse_attention: bool) -> Self {
        self.no_fuse_attention = no_fuse_attention;
        self
    }

    /// Runs (`true`, the default) or skips the verifier after each pass.
    pub fn verify(mut self, verify: bool) -> Self {
        self.verify = verify;
        self
    }

    /// Records the IR after `pass`.
    pub fn print_after(mut self, pass: &str) -> Self {
        self.print_after.push(pass.to_string());
        self
    }

    /// Stops after `pass`.
    pub fn stop_after(mut self, pass: &str) -> Self {
        self.stop_after = Some(pass.to_string());
        self
    }

    /// Checks the recipe (its scaling parameters' ranges, `fp8c_core::Recipe::validate`),
    /// the policy's globs and the pass names (`print_after`, `stop_after`).
    pub fn validate(&self) -> Result<()> {
        self.recipe
            .validate()
            .map_err(|e| Error::invalid(format!("recipe: {e}")))?;
        validate_policy(&self.policy)?;
        PassManager::default().check_options(&self.pass_options())?;
        Ok(())
    }

    /// The pass manager's options (no training).
    pub fn pass_options(&self) -> PassOptions {
        PassOptions {
            skip_verify: !self.verify,
            print_after: self.print_after.clone(),
            stop_after: self.stop_after.clone(),
            policy: self.policy.clone(),
            recipe: self.recipe,
            no_fuse: self.no_fuse,
            no_fuse_attention: self.no_fuse_attention,
            keep_weights: self.keep_weights,
            train: None,
        }
    }
}

/// Checks a policy's globs (`--keep-high`, `--force-fp8`).
pub fn validate_policy(policy: &PolicyOptions) -> Result<()> {
    policy.validate().map_err(Error::Invalid)
}

/// Parses `NAME=2x64` specs (`--input-shape`) into a map; a name given twice is an error.
pub fn parse_input_shapes(specs: &[String]) -> Result<BTreeMap<String, Vec<u64>>> {
    let mut shapes = BTreeMap::new();
    for s in specs {
        let (name, dims) = fp8c_passes::shapes::parse_input_shape(s).map_err(Error::Invalid)?;
        if shapes.insert(name.clone(), dims).is_some() {
            bail!("--input-shape {name} is given twice");
        }
    }
    Ok(shapes)
}

/// The short name of a precision mode (`f32`, `bf16`, `fp8`), as flags and files spell it.
pub fn precision_name(mode: PrecisionMode) -> &'static str {
    match mode {
        PrecisionMode::F32 => "f32",
        PrecisionMode::Bf16 => "bf16",
        PrecisionMode::Fp8 => "fp8",
    }
}

/// The recipe as a program's flags give it; every field is optional and overrides the
/// `config` file's `[recipe]` table (TransformerEngine's field names), which overrides the
/// defaults. [`RecipeOptions::recipe`] validates the result.
#[derive(Clone, Debug, Default)]
pub struct RecipeOptions {
    /// `delayed` or `current` (`--recipe`).
    pub kind: Option<String>,
    /// `hybrid` or `e4m3` (`--format`).
    pub format: Option<String>,
    /// Delayed scaling: amax history length (`--amax-history`).
    pub amax_history: Option<usize>,
    /// Delayed scaling: `max` or `most-recent` (`--amax-algo`).
    pub amax_algo: Option<String>,
    /// Delayed scaling: scale margin (`--margin`).
    pub margin: Option<f32>,
    /// Current scaling: lower bound on amax (`--amax-epsilon`).
    pub amax_epsilon: Option<f32>,
    /// Round scales down to powers of two, current, delayed or calibrated (`--power-2-scale`).
    pub power_2_scale: bool,
    /// Which FP8 GEMMs use fast accumulation, comma-separated `fprop`, `dgrad`, `wgrad`, or
    /// `none` (`--fast-accum`; default the recipe's, TE's `fprop`).
    pub fast_accum: Option<String>,
    /// The config file (`--config`), parsed once: its `[recipe]` table is the base the
    /// fields above override.
    pub config: Option<Arc<ConfigFile>>,
}

/// A granularity by its name or a recipe name that implies one (`block`,
/// `Float8BlockScaling`, `tensorwise`, `mxfp8`, ...).
pub fn parse_granularity(name: &str) -> Result<fp8c_core::Granularity> {
    name.parse::<fp8c_core::Granularity>().map_err(|_| {
        Error::Invalid(format!(
            "granularity \"{name}\": expected tensorwise, rowwise, block or mxfp8 (or \
             Float8BlockScaling, MXFP8BlockScaling)"
        ))
    })
}

impl RecipeOptions {
    /// Whether the recipe asks for the weight gradient in high precision: torchao's
    /// `rowwise_with_gw_hp`, named by `--recipe` or else by the config's `[recipe] kind`.
    pub fn wgrad_high_precision(&self) -> bool {
        let name = match (&self.kind, &self.config) {
            (Some(kind), _) => Some(kind.as_str()),
            (None, Some(cfg)) => cfg.recipe_kind.as_deref(),
            (None, None) => None,
        };
        name == Some("rowwise_with_gw_hp")
    }

    /// The recipe for `purpose`: the config file's `[recipe]` (if it has one, else the
    /// purpose's default), then each given field on top; validated.
    pub fn recipe_for(&self, purpose: Purpose) -> Result<Recipe> {
        let configured = self.config.as_ref().and_then(|c| c.recipe);
        let delayed_fields =
            self.amax_history.is_some() || self.amax_algo.is_some() || self.margin.is_some();
        let base = configured.unwrap_or_else(|| match purpose {
            Purpose::Inference { calibrated: false } if delayed_fields => {
                default_recipe(Purpose::Training)
            }
            p => default_recipe(p),
        });
        let named = self.kind.as_deref().map(recipe_name).transpose()?;
        let kind = named.map_or(base.kind(), |(k, _)| k);
        let format: Format = match &self.format {
            Some(f) => parsed(f.parse(), || format!("--format {f}"))?,
            None => base.fp8_format(),
        };
        let recipe = match kind {
            "delayed" => {
                let d = match base {
                    Recipe::Delayed(d) => d,
                    Recipe::Current(_) => DelayedScaling::default(),
                };
                let algo: AmaxComputeAlgo = match &self.amax_algo {
                    Some(a) => parsed(a.parse(), || format!("--amax-algo {a}"))?,
                    None => d.amax_compute_algo,
                };
                if self.amax_epsilon.is_some() {
                    bail!("--amax-epsilon applies to --recipe current only");
                }
                Recipe::Delayed(DelayedScaling {
                    power_2_scale: self.power_2_scale || d.power_2_scale,
                    ..parsed(
                        DelayedScaling::new(
                            self.margin.unwrap_or(d.margin),
                            format,
                            self.amax_history.unwrap_or(d.amax_history_len),
                            algo,
                            d.reduce_amax,
                        ),
                        || "invalid delayed-scaling recipe",
                    )?
                })
            }
            "current" => {
                let mut c = match base {
                    Recipe::Current(c) => c,
                    Recipe::Delayed(_) => CurrentScaling::default(),
                };
                // A per-tile recipe named on the command line comes with its library's
                // defaults (power-of-two scales); one from the config file keeps its fields.
                if let Some((_, Some(g))) = named
                    && g != c.granularity
                {
                    c = CurrentScaling {
                        fp8_format: c.fp8_format,
                        amax_epsilon: c.amax_epsilon,
                        ..CurrentScaling::tiled(g)
                    };
                }
                if self.amax_history.is_some() || self.amax_algo.is_some() || self.margin.is_some()
                {
                    bail!(
                        "--amax-history, --amax-algo and --margin apply to --recipe delayed only"
                    );
                }
                Recipe::Current(CurrentScaling {
                    granularity: c.granularity,
                    ..parsed(
                        CurrentScaling::new(
                            format,
                            self.amax_epsilon.unwrap_or(c.amax_epsilon),
                            self.power_2_scale || c.power_2_scale,
                        ),
                        || "invalid current-scaling recipe",
                    )?
                })
            }
            other => bail!("--recipe {other}: expected delayed or current"),
        };
        let mut recipe = recipe;
        let fast = match &self.fast_accum {
            Some(list) => Some(parse_fast_accum(list)?),
            None => None,
        };
        for gemm in Gemm::ALL {
            let p = match &fast {
                Some(fast) => MMParams {
                    use_split_accumulator: !fast.contains(&gemm),
                },
                None => base.mm_params(gemm),
            };
            recipe.set_mm_params(gemm, p);
        }
        Ok(recipe)
    }
}

/// The recipe names `--recipe` and a config's `kind` accept: fp8c's (`delayed`, `current`),
/// TransformerEngine's class names and torchao's recipe names. Returns the kind and, for the
/// current-scaling family, the granularity the name fixes (`None`: `current`, which keeps the
/// configured one).
pub fn recipe_name(name: &str) -> Result<(&'static str, Option<Granularity>)> {
    Ok(match name {
        "delayed" | "DelayedScaling" => ("delayed", None),
        "current" => ("current", None),
        "tensorwise" | "Float8CurrentScaling" => ("current", Some(Granularity::Tensorwise)),
        // torchao's rowwise recipe with the weight gradient in high precision: in training
        // the session also sets `TrainSpec::wgrad_high_precision`
        // ([`RecipeOptions::wgrad_high_precision`]).
        "rowwise" | "rowwise_with_gw_hp" => ("current", Some(Granularity::Rowwise)),
        "block" | "Float8BlockScaling" => ("current", Some(Granularity::Block)),
        "mxfp8" | "MXFP8BlockScaling" => ("current", Some(Granularity::Mxfp8)),
        other => bail!(
            "--recipe {other}: expected delayed or current (per tensor), rowwise, block or mxfp8 \
             (per tile), or TransformerEngine's / torchao's names: DelayedScaling, \
             Float8CurrentScaling, Float8BlockScaling, MXFP8BlockScaling, tensorwise, \
             rowwise_with_gw_hp"
        ),
    })
}

/// `--fast-accum`'s value: `none`, or GEMM names (`fprop`, `dgrad`, `wgrad`) separated by
/// commas.
pub fn parse_fast_accum(list: &str) -> Result<Vec<Gemm>> {
    if list.trim() == "none" {
        return Ok(Vec::new());
    }
    list.split(',')
        .map(|g| {
            g.trim()
                .parse::<Gemm>()
                .map_err(|e| Error::invalid(format!("--fast-accum {list}: {e}, or none")))
        })
        .collect()
}

/// A core (recipe) result as a session result, prefixed with `context`.
fn parsed<T, E: std::fmt::Display, C: std::fmt::Display>(
    r: std::result::Result<T, E>,
    context: impl FnOnce() -> C,
) -> Result<T> {
    r.map_err(Error::invalid).with_context(context)
}
