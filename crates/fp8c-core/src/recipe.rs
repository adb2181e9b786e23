//! Scaling recipes, named and defaulted as in TransformerEngine (`transformer_engine.common.recipe`)
//! so its users recognise them.
//!
//! Invariant: a recipe obtained from a constructor (`new`) or from serde is valid. Fields are
//! public so recipes can be written as struct literals (`DelayedScaling { margin: 1.0,
//! ..Default::default() }`); such a recipe should go through [`Recipe::validate`] (the scaling
//! functions also check it).
//!
//! Serialised layout (TOML shown; every field is optional and defaults to TE's value; unknown
//! fields are rejected so a typo is an error, not a silent default):
//!
//! ```toml
//! [recipe]
//! kind = "delayed"          # or "current"
//! margin = 0                # delayed only
//! fp8_format = "hybrid"     # or "e4m3"; "e5m2" is rejected as in TE
//! amax_history_len = 1024   # delayed only
//! amax_compute_algo = "max" # or "most_recent"; delayed only
//! reduce_amax = true        # delayed only
//! # amax_epsilon = 0.0      # current only
//! # power_2_scale = false   # current only
//! ```

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::CoreError;
use crate::format::Fp8Format;

/// Which FP8 types a recipe uses: TE's `Format` without E5M2 (pure E5M2 training is rejected).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(try_from = "String", into = "&'static str")]
pub enum Format {
    /// TE's `Format.HYBRID`: E4M3 in the forward pass, E5M2 for gradients (the default).
    #[default]
    Hybrid,
    /// TE's `Format.E4M3`: E4M3 everywhere.
    E4M3,
}

impl Format {
    /// Element type of forward-pass tensors (activations and weights).
    pub const fn forward(self) -> Fp8Format {
        Fp8Format::E4M3
    }

    /// Element type of backward-pass tensors (gradients).
    pub const fn backward(self) -> Fp8Format {
        match self {
            Format::Hybrid => Fp8Format::E5M2,
            Format::E4M3 => Fp8Format::E4M3,
        }
    }

    /// Lowercase name used in configs ("hybrid", "e4m3").
    pub const fn name(self) -> &'static str {
        match self {
            Format::Hybrid => "hybrid",
            Format::E4M3 => "e4m3",
        }
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Format {
    type Err = CoreError;

    /// Parses "hybrid" or "e4m3" (any case); "e5m2" gives TE's "pure E5M2" error.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "hybrid" => Ok(Format::Hybrid),
            "e4m3" => Ok(Format::E4M3),
            "e5m2" => Err(CoreError::PureE5M2),
            _ => Err(CoreError::UnknownFormat(s.to_string())),
        }
    }
}

impl TryFrom<String> for Format {
    type Error = CoreError;

    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl From<Format> for &'static str {
    fn from(f: Format) -> Self {
        f.name()
    }
}

/// How delayed scaling picks the amax from the history: TE's `amax_compute_algo`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AmaxComputeAlgo {
    /// The largest amax in the whole history window (TE's default, "max").
    #[default]
    Max,
    /// The amax of the current step only ("most_recent").
    MostRecent,
}

impl AmaxComputeAlgo {
    /// Name used in configs and IR text ("max", "most_recent").
    pub const fn name(self) -> &'static str {
        match self {
            AmaxComputeAlgo::Max => "max",
            AmaxComputeAlgo::MostRecent => "most_recent",
        }
    }
}

impl fmt::Display for AmaxComputeAlgo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for AmaxComputeAlgo {
    type Err = CoreError;

    /// Parses "max", "most_recent" or the command-line spelling "most-recent".
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "max" => Ok(AmaxComputeAlgo::Max),
            "most_recent" | "most-recent" => Ok(AmaxComputeAlgo::MostRecent),
            _ => Err(CoreError::UnknownAmaxComputeAlgo(s.to_string())),
        }
    }
}

/// TE's `DelayedScaling`: the scale comes from an amax history of past steps.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "DelayedScalingFields")]
pub struct DelayedScaling {
    /// Scale is divided by 2^margin (headroom against growth); TE default 0.
    pub margin: f32,
    /// FP8 types for forward and backward; TE default HYBRID.
    pub fp8_format: Format,
    /// Length of the amax history window; TE default 1024; must be >= 1.
    pub amax_history_len: usize,
    /// How the amax is taken from the history; TE default "max".
    pub amax_compute_algo: AmaxComputeAlgo,
    /// Reduce amaxes across data-parallel ranks before the update; TE default true. Carried
    /// for the runtime: a single-process run has nothing to reduce.
    pub reduce_amax: bool,
}

impl Default for DelayedScaling {
    fn default() -> Self {
        DelayedScaling {
            margin: 0.0,
            fp8_format: Format::Hybrid,
            amax_history_len: 1024,
            amax_compute_algo: AmaxComputeAlgo::Max,
            reduce_amax: true,
        }
    }
}

impl DelayedScaling {
    /// Builds a validated recipe.
    pub fn new(
        margin: f32,
        fp8_format: Format,
        amax_history_len: usize,
        amax_compute_algo: AmaxComputeAlgo,
        reduce_amax: bool,
    ) -> Result<Self, CoreError> {
        let recipe = DelayedScaling {
            margin,
            fp8_format,
            amax_history_len,
            amax_compute_algo,
            reduce_amax,
        };
        recipe.validate()?;
        Ok(recipe)
    }

    /// Checks `amax_history_len >= 1` and a finite `margin`.
    pub fn validate(&self) -> Result<(), CoreError> {
        if self.amax_history_len == 0 || self.amax_history_len > crate::MAX_AMAX_HISTORY {
            return Err(CoreError::AmaxHistoryLen(self.amax_history_len));
        }
        if !self.margin.is_finite() {
            return Err(CoreError::NonFiniteMargin(self.margin));
        }
        Ok(())
    }
}

/// Serde's view of [`DelayedScaling`]: missing fields take TE's defaults, then it is validated.
#[derive(Deserialize)]
#[serde(default, deny_unknown_fields)]
struct DelayedScalingFields {
    margin: f32,
    fp8_format: Format,
    amax_history_len: usize,
    amax_compute_algo: AmaxComputeAlgo,
    reduce_amax: bool,
}

impl Default for DelayedScalingFields {
    fn default() -> Self {
        let d = DelayedScaling::default();
        DelayedScalingFields {
            margin: d.margin,
            fp8_format: d.fp8_format,
            amax_history_len: d.amax_history_len,
            amax_compute_algo: d.amax_compute_algo,
            reduce_amax: d.reduce_amax,
        }
    }
}

impl TryFrom<DelayedScalingFields> for DelayedScaling {
    type Error = CoreError;

    fn try_from(f: DelayedScalingFields) -> Result<Self, Self::Error> {
        DelayedScaling::new(
            f.margin,
            f.fp8_format,
            f.amax_history_len,
            f.amax_compute_algo,
            f.reduce_amax,
        )
    }
}

/// TE's `Float8CurrentScaling`: the scale comes from the amax of the tensor being quantized.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "CurrentScalingFields")]
pub struct CurrentScaling {
    /// FP8 types for forward and backward; TE default HYBRID.
    pub fp8_format: Format,
    /// Lower bound applied to the amax before the scale is computed; TE default 0; >= 0.
    pub amax_epsilon: f32,
    /// Round the scale down to a power of two (TE's `power_2_scale`); default false.
    pub power_2_scale: bool,
}

impl Default for CurrentScaling {
    fn default() -> Self {
        CurrentScaling {
            fp8_format: Format::Hybrid,
            amax_epsilon: 0.0,
            power_2_scale: false,
        }
    }
}

impl CurrentScaling {
    /// Builds a validated recipe.
    pub fn new(
        fp8_format: Format,
        amax_epsilon: f32,
        power_2_scale: bool,
    ) -> Result<Self, CoreError> {
        let recipe = CurrentScaling {
            fp8_format,
            amax_epsilon,
            power_2_scale,
        };
        recipe.validate()?;
        Ok(recipe)
    }

    /// Checks that `amax_epsilon` is finite and >= 0.
    pub fn validate(&self) -> Result<(), CoreError> {
        if !(self.amax_epsilon.is_finite() && self.amax_epsilon >= 0.0) {
            return Err(CoreError::InvalidAmaxEpsilon(self.amax_epsilon));
        }
        Ok(())
    }
}

/// Serde's view of [`CurrentScaling`]: missing fields take TE's defaults, then it is validated.
#[derive(Deserialize)]
#[serde(default, deny_unknown_fields)]
struct CurrentScalingFields {
    fp8_format: Format,
    amax_epsilon: f32,
    power_2_scale: bool,
}

impl Default for CurrentScalingFields {
    fn default() -> Self {
        let d = CurrentScaling::default();
        CurrentScalingFields {
            fp8_format: d.fp8_format,
            amax_epsilon: d.amax_epsilon,
            power_2_scale: d.power_2_scale,
        }
    }
}

impl TryFrom<CurrentScalingFields> for CurrentScaling {
    type Error = CoreError;

    fn try_from(f: CurrentScalingFields) -> Result<Self, Self::Error> {
        CurrentScaling::new(f.fp8_format, f.amax_epsilon, f.power_2_scale)
    }
}

/// A per-tensor FP8 scaling recipe, tagged by `kind = "delayed" | "current"` when serialised.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Recipe {
    /// Scale from the amax history of past steps (TE's default recipe).
    Delayed(DelayedScaling),
    /// Scale from the amax of the tensor itself.
    Current(CurrentScaling),
}

impl Default for Recipe {
    fn default() -> Self {
        Recipe::Delayed(DelayedScaling::default())
    }
}

impl Recipe {
    /// Validates the recipe's fields (see [`DelayedScaling::validate`], [`CurrentScaling::validate`]).
    pub fn validate(&self) -> Result<(), CoreError> {
        match self {
            Recipe::Delayed(r) => r.validate(),
            Recipe::Current(r) => r.validate(),
        }
    }

    /// The recipe's FP8 format choice.
    pub const fn fp8_format(&self) -> Format {
        match self {
            Recipe::Delayed(r) => r.fp8_format,
            Recipe::Current(r) => r.fp8_format,
        }
    }

    /// Short name of the recipe kind ("delayed", "current").
    pub const fn kind(&self) -> &'static str {
        match self {
            Recipe::Delayed(_) => "delayed",
            Recipe::Current(_) => "current",
        }
    }
}

impl From<DelayedScaling> for Recipe {
    fn from(r: DelayedScaling) -> Self {
        Recipe::Delayed(r)
    }
}

impl From<CurrentScaling> for Recipe {
    fn from(r: CurrentScaling) -> Self {
        Recipe::Current(r)
    }
}
