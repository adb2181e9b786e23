//! What the compile flags shared by `fp8c compile`, `run` and `train` say, as plain data
//! ([`CompileSettings`]), and their resolution into [`CompileOptions`]: the `--config` file
//! is read once ([`ConfigFile`]) and every field given here overrides it, which overrides the
//! defaults. A program with other flag names (the Python binding, the C API) fills the same
//! struct; messages name the `fp8c` flag of the faulty field.

use crate::config::ConfigFile;
use crate::error::{Context, Result, bail};
use crate::options::{
    CompileOptions, Purpose, RecipeOptions, parse_granularity, parse_input_shapes, validate_policy,
};
use crate::runner::HostAccum;
use fp8c_core::{Granularity, Recipe};
use fp8c_passes::precision::{PolicyOptions, PrecisionMode};
use std::path::PathBuf;
use std::sync::Arc;

/// The shared compile flags, as given (unset fields take the config file's value, then the
/// default).
#[derive(Clone, Debug)]
pub struct CompileSettings {
    /// `--precision` (f32, bf16, fp8).
    pub precision: PrecisionMode,
    /// The recipe fields (`--recipe`, `--format`, `--amax-history`, ...); its `config` is
    /// filled from [`CompileSettings::config`] when resolving.
    pub recipe: RecipeOptions,
    /// `--config FILE`: `[recipe]`, `[[gemms]]` and (for training) `[train]` tables.
    pub config: Option<PathBuf>,
    /// `--keep-high GLOB`.
    pub keep_high: Vec<String>,
    /// `--granularity GLOB=NAME`, before the config's `[[gemms]]` entries.
    pub granularity: Vec<String>,
    /// `--force-fp8 GLOB`.
    pub force_fp8: Vec<String>,
    /// `--keep-first-last`.
    pub keep_first_last: bool,
    /// `--fp8-attention`.
    pub fp8_attention: bool,
    /// `--pad-to-16`.
    pub pad_to_16: bool,
    /// `--no-fuse`.
    pub no_fuse: bool,
    /// `--no-fuse-attention`.
    pub no_fuse_attention: bool,
    /// `--min-fp8-flops N`.
    pub min_fp8_flops: Option<u64>,
    /// `--hopper-accum`.
    pub hopper_accum: bool,
    /// `--input-shape NAME=DIMS`.
    pub input_shapes: Vec<String>,
    /// `--print-after PASS`.
    pub print_after: Vec<String>,
    /// `--stop-after PASS`.
    pub stop_after: Option<String>,
    /// `--no-verify`.
    pub no_verify: bool,
}

impl Default for CompileSettings {
    fn default() -> Self {
        CompileSettings {
            precision: PrecisionMode::Fp8,
            recipe: RecipeOptions::default(),
            config: None,
            keep_high: Vec::new(),
            granularity: Vec::new(),
            force_fp8: Vec::new(),
            keep_first_last: false,
            fp8_attention: false,
            pad_to_16: false,
            no_fuse: false,
            no_fuse_attention: false,
            min_fp8_flops: None,
            hopper_accum: false,
            input_shapes: Vec::new(),
            print_after: Vec::new(),
            stop_after: None,
            no_verify: false,
        }
    }
}

impl CompileSettings {
    /// Reads the `--config` file, if one is given (once per run: pass the result to
    /// [`CompileSettings::options_with`] and, for training, to the `[train]` settings).
    pub fn read_config(&self) -> Result<Option<Arc<ConfigFile>>> {
        self.config
            .as_deref()
            .map(|p| ConfigFile::read(p).map(Arc::new))
            .transpose()
    }

    /// The recipe fields with the config file attached.
    pub fn recipe_options(&self, config: Option<&Arc<ConfigFile>>) -> RecipeOptions {
        RecipeOptions {
            config: config.cloned(),
            ..self.recipe.clone()
        }
    }

    /// The policy options, validated (`--keep-high` / `--force-fp8` globs, `--granularity`).
    pub fn policy(&self, config: Option<&Arc<ConfigFile>>) -> Result<PolicyOptions> {
        let p = PolicyOptions {
            mode: self.precision,
            keep_high: self.keep_high.clone(),
            force_fp8: self.force_fp8.clone(),
            keep_first_last: self.keep_first_last,
            fp8_attention: self.fp8_attention,
            pad_to_16: self.pad_to_16,
            min_fp8_flops: self.min_fp8_flops,
            granularity: self.granularity(config)?,
        };
        validate_policy(&p)?;
        Ok(p)
    }

    /// `--granularity` entries, then the config file's `[[gemms]]`.
    fn granularity(&self, config: Option<&Arc<ConfigFile>>) -> Result<Vec<(String, Granularity)>> {
        let mut v = Vec::new();
        for e in &self.granularity {
            let Some((glob, name)) = e.rsplit_once('=') else {
                bail!("--granularity {e}: expected GLOB=NAME, e.g. '*mlp*=block'");
            };
            let g = parse_granularity(name.trim()).with_context(|| format!("--granularity {e}"))?;
            v.push((glob.to_string(), g));
        }
        if let Some(cfg) = config {
            v.extend(cfg.gemms.iter().cloned());
        }
        Ok(v)
    }

    /// The compile options for `purpose`, reading the config file.
    pub fn options(&self, purpose: Purpose) -> Result<CompileOptions> {
        let config = self.read_config()?;
        self.options_with(config.as_ref(), |r| r.recipe_for(purpose))
    }

    /// The compile options with the config file already read and the recipe made by
    /// `recipe` from the recipe fields (most callers: `|r| r.recipe_for(purpose)`); the policy
    /// is validated first, then the recipe, then the input shapes and pass names.
    pub fn options_with(
        &self,
        config: Option<&Arc<ConfigFile>>,
        recipe: impl FnOnce(RecipeOptions) -> Result<Recipe>,
    ) -> Result<CompileOptions> {
        let policy = self.policy(config)?;
        let recipe = recipe(self.recipe_options(config))?;
        let mut opts = CompileOptions::fp8()
            .policy(policy)
            .recipe(recipe)
            .no_fuse(self.no_fuse)
            .no_fuse_attention(self.no_fuse_attention)
            .host_accum(if self.hopper_accum {
                HostAccum::Hopper
            } else {
                HostAccum::F32
            });
        opts.input_shapes = parse_input_shapes(&self.input_shapes)?;
        opts.verify = !self.no_verify;
        opts.print_after = self.print_after.clone();
        opts.stop_after = self.stop_after.clone();
        opts.validate()?;
        Ok(opts)
    }
}
