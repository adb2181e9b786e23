//! Scaling recipes, named and defaulted as in TransformerEngine (`transformer_engine.common.recipe`)
//! so its users recognise them.
//!
//! Invariant: a recipe obtained from a constructor (`new`) or from serde is valid. Fields are
//! public so recipes can be written as struct literals (`DelayedScaling { margin: 1.0,
//! ..Default::default() }`); such a recipe should go through [`Recipe::validate`] (the scaling
//! functions and the scaling pass also check it).
//!
//! Range checks: a scaling parameter is valid when, for every amax an FP8 format of the recipe
//! represents as a normal number (`min_normal ..= max`), the scale it gives maps that amax to
//! a normal number of the format and scale, scale_inv and the product of two scale_invs (an
//! FP8 GEMM's dequantize factor) are finite normal f32 values. For delayed scaling's `margin`
//! (`amax · scale = fp8_max · 2^-margin`) that is `0 ..= log2(max / min_normal)` of E4M3,
//! 14.8 ([`Format::max_margin`]): a negative margin overflows the format, a larger one leaves
//! every value subnormal. For current scaling's `amax_epsilon` it is `0 ..= 448`
//! ([`Format::max_amax_epsilon`]): a larger floor scales tensors the format holds below its
//! smallest normal number. Outside these ranges outputs are zeros or NaN from finite inputs.
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
//! # power_2_scale = false   # both: round scales down to powers of two (TE: current only)
//! # granularity = "tensorwise"  # current only: or "rowwise", "block", "mxfp8" (issue #16)
//! # How each GEMM of a linear layer accumulates (TE's MMParams; both kinds):
//! fp8_gemm_fprop.use_split_accumulator = false  # forward: Hopper's fast accumulation
//! fp8_gemm_dgrad.use_split_accumulator = true   # input gradient: f32 accumulation
//! fp8_gemm_wgrad.use_split_accumulator = true   # weight gradient: f32 accumulation
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

    /// The element type with the narrowest range among those the recipe uses (E4M3 for both
    /// choices): the one the range checks bind on.
    fn narrowest(self) -> Fp8Format {
        let [f, b] = [self.forward(), self.backward()];
        if f.max() / f.min_normal() <= b.max() / b.min_normal() {
            f
        } else {
            b
        }
    }

    /// The largest `margin` delayed scaling allows with this choice: `log2(max / min_normal)`
    /// of its narrowest format (14.8 for E4M3), see the module docs.
    pub fn max_margin(self) -> f32 {
        let f = self.narrowest();
        (f64::from(f.max()) / f64::from(f.min_normal())).log2() as f32
    }

    /// The largest `amax_epsilon` current scaling allows with this choice: the largest value
    /// of its narrowest format (448 for E4M3), see the module docs.
    pub fn max_amax_epsilon(self) -> f32 {
        self.narrowest().max()
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

/// TE's `MMParams`: how one FP8 GEMM accumulates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MMParams {
    /// Promote partial sums to f32 as the K loop goes (TE's `use_split_accumulator`, cuBLASLt
    /// without `FAST_ACCUM`); false keeps them in the FP8 tensor cores' narrower accumulator
    /// (fast accumulation: faster, about 14 significant bits). TE's default: true.
    pub use_split_accumulator: bool,
}

impl Default for MMParams {
    fn default() -> Self {
        MMParams {
            use_split_accumulator: true,
        }
    }
}

impl MMParams {
    /// TE's forward-GEMM setting: fast accumulation.
    pub const FAST: MMParams = MMParams {
        use_split_accumulator: false,
    };
    /// TE's dgrad and wgrad setting: f32 (split) accumulation.
    pub const SPLIT: MMParams = MMParams {
        use_split_accumulator: true,
    };
}

/// The three GEMMs of a linear layer in training.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Gemm {
    /// The forward product `y = x·W`.
    Fprop,
    /// The input gradient `dx = dy·Wᵀ`.
    Dgrad,
    /// The weight gradient `dW = xᵀ·dy`.
    Wgrad,
}

impl Gemm {
    /// Every GEMM, in training order.
    pub const ALL: [Gemm; 3] = [Gemm::Fprop, Gemm::Dgrad, Gemm::Wgrad];

    /// Name used on the command line and in TOML keys (`fprop`, `dgrad`, `wgrad`).
    pub const fn name(self) -> &'static str {
        match self {
            Gemm::Fprop => "fprop",
            Gemm::Dgrad => "dgrad",
            Gemm::Wgrad => "wgrad",
        }
    }
}

impl FromStr for Gemm {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Gemm::ALL
            .into_iter()
            .find(|g| g.name() == s)
            .ok_or_else(|| format!("unknown GEMM `{s}` (expected fprop, dgrad or wgrad)"))
    }
}

/// TE's `fp8_gemm_fprop/dgrad/wgrad` defaults: fast accumulation forward, split backward.
const DEFAULT_GEMMS: [MMParams; 3] = [MMParams::FAST, MMParams::SPLIT, MMParams::SPLIT];

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
    /// Round each scale down to a power of two; default false. Not in TE's `DelayedScaling`
    /// (its current and block recipes have it; torchao's `round_scales_to_power_of_2` applies
    /// to every scaling type): with power-of-two scales, multiplying by the scale and dividing
    /// by its inverse (ONNX QuantizeLinear) are both exact, so an exported FP8 Q/DQ model
    /// quantizes and dequantizes to the very codes fp8c computes in any engine.
    pub power_2_scale: bool,
    /// Accumulation of the forward GEMM; TE default fast (`use_split_accumulator = false`).
    pub fp8_gemm_fprop: MMParams,
    /// Accumulation of the input-gradient GEMM; TE default split (f32).
    pub fp8_gemm_dgrad: MMParams,
    /// Accumulation of the weight-gradient GEMM; TE default split (f32).
    pub fp8_gemm_wgrad: MMParams,
}

impl Default for DelayedScaling {
    fn default() -> Self {
        DelayedScaling {
            margin: 0.0,
            fp8_format: Format::Hybrid,
            amax_history_len: 1024,
            amax_compute_algo: AmaxComputeAlgo::Max,
            reduce_amax: true,
            power_2_scale: false,
            fp8_gemm_fprop: DEFAULT_GEMMS[0],
            fp8_gemm_dgrad: DEFAULT_GEMMS[1],
            fp8_gemm_wgrad: DEFAULT_GEMMS[2],
        }
    }
}

impl DelayedScaling {
    /// Builds a validated recipe (GEMM accumulation at TE's defaults).
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
            ..DelayedScaling::default()
        };
        recipe.validate()?;
        Ok(recipe)
    }

    /// Checks `amax_history_len >= 1` and a `margin` in `0 ..= fp8_format.max_margin()`
    /// (the module docs' range checks).
    pub fn validate(&self) -> Result<(), CoreError> {
        if self.amax_history_len == 0 || self.amax_history_len > crate::MAX_AMAX_HISTORY {
            return Err(CoreError::AmaxHistoryLen(self.amax_history_len));
        }
        if !self.margin.is_finite() {
            return Err(CoreError::NonFiniteMargin(self.margin));
        }
        let max = self.fp8_format.max_margin();
        if !(0.0..=max).contains(&self.margin) {
            let f = self.fp8_format.narrowest();
            return Err(CoreError::ScaleOutOfRange {
                what: "margin",
                value: self.margin,
                range: format!(
                    "with fp8_format \"{}\" it must be between 0 and {max:.2}: the scale maps a \
                     tensor's amax to fp8_max · 2^-margin, which must stay a normal {} number \
                     (a negative margin overflows its largest value {}, a larger one leaves every value below \
                     its smallest normal number {}, and scale_inv products overflow f32)",
                    self.fp8_format,
                    f.name().to_ascii_uppercase(),
                    f.max(),
                    f.min_normal()
                ),
            });
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
    power_2_scale: bool,
    fp8_gemm_fprop: MMParams,
    fp8_gemm_dgrad: MMParams,
    fp8_gemm_wgrad: MMParams,
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
            power_2_scale: d.power_2_scale,
            fp8_gemm_fprop: d.fp8_gemm_fprop,
            fp8_gemm_dgrad: d.fp8_gemm_dgrad,
            fp8_gemm_wgrad: d.fp8_gemm_wgrad,
        }
    }
}

impl TryFrom<DelayedScalingFields> for DelayedScaling {
    type Error = CoreError;

    fn try_from(f: DelayedScalingFields) -> Result<Self, Self::Error> {
        let recipe = DelayedScaling {
            power_2_scale: f.power_2_scale,
            fp8_gemm_fprop: f.fp8_gemm_fprop,
            fp8_gemm_dgrad: f.fp8_gemm_dgrad,
            fp8_gemm_wgrad: f.fp8_gemm_wgrad,
            ..DelayedScaling::new(
                f.margin,
                f.fp8_format,
                f.amax_history_len,
                f.amax_compute_algo,
                f.reduce_amax,
            )?
        };
        Ok(recipe)
    }
}

/// How finely current scaling scales a GEMM's operands (issue #16): one scale per tensor (TE's
/// `Float8CurrentScaling`, torchao `tensorwise`), per row of the activation and column of the
/// weight along K (torchao `rowwise`), per 1×128 activation tile and 128×128 weight block
/// (TE's `Float8BlockScaling`, DeepSeek-V3), or per 1×32 block along K with E8M0 scales (TE's
/// `MXFP8BlockScaling`, OCP MX).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(try_from = "String", into = "&'static str")]
pub enum Granularity {
    /// One scale per tensor.
    #[default]
    Tensorwise,
    /// One scale per activation row and per weight column, over all of K.
    Rowwise,
    /// 1×128 activation tiles, 128×128 weight blocks.
    Block,
    /// 1×32 blocks along K on both operands, E8M0 (power-of-two) scales.
    Mxfp8,
}

/// The tiles of a GEMM `[M, K] · [K, N]` under a [`Granularity`]: A in `a_rows` × `k_block`
/// tiles, B in `k_block` × `b_cols` tiles (0: the whole axis); `e8m0`: OCP MX scales.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tiling {
    /// Rows of an A tile.
    pub a_rows: i64,
    /// The K block (0: all of K).
    pub k_block: i64,
    /// Columns of a B tile.
    pub b_cols: i64,
    /// E8M0 scales (MX) instead of FP32 ones.
    pub e8m0: bool,
}

impl Granularity {
    /// The tiling of a GEMM's operands, or `None` for one scale per tensor.
    pub fn tiling(self) -> Option<Tiling> {
        let t = |a_rows, k_block, b_cols, e8m0| {
            Some(Tiling {
                a_rows,
                k_block,
                b_cols,
                e8m0,
            })
        };
        match self {
            Granularity::Tensorwise => None,
            Granularity::Rowwise => t(1, 0, 1, false),
            Granularity::Block => t(1, 128, 128, false),
            Granularity::Mxfp8 => t(1, 32, 1, true),
        }
    }

    /// The name used in flags and config files.
    pub const fn name(self) -> &'static str {
        match self {
            Granularity::Tensorwise => "tensorwise",
            Granularity::Rowwise => "rowwise",
            Granularity::Block => "block",
            Granularity::Mxfp8 => "mxfp8",
        }
    }
}

impl fmt::Display for Granularity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Granularity {
    type Err = CoreError;
    fn from_str(s: &str) -> Result<Self, CoreError> {
        match s.to_ascii_lowercase().as_str() {
            "tensorwise" | "tensor" => Ok(Granularity::Tensorwise),
            "rowwise" | "row" => Ok(Granularity::Rowwise),
            "block" | "float8blockscaling" => Ok(Granularity::Block),
            "mxfp8" | "mx" | "mxfp8blockscaling" => Ok(Granularity::Mxfp8),
            _ => Err(CoreError::InvalidGranularity(s.to_string())),
        }
    }
}

impl TryFrom<String> for Granularity {
    type Error = CoreError;
    fn try_from(s: String) -> Result<Self, CoreError> {
        s.parse()
    }
}

impl From<Granularity> for &'static str {
    fn from(g: Granularity) -> &'static str {
        g.name()
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
    /// One scale per tensor (default) or per tile ([`Granularity`]).
    pub granularity: Granularity,
    /// Accumulation of the forward GEMM; TE default fast (`use_split_accumulator = false`).
    pub fp8_gemm_fprop: MMParams,
    /// Accumulation of the input-gradient GEMM; TE default split (f32).
    pub fp8_gemm_dgrad: MMParams,
    /// Accumulation of the weight-gradient GEMM; TE default split (f32).
    pub fp8_gemm_wgrad: MMParams,
}

impl Default for CurrentScaling {
    fn default() -> Self {
        CurrentScaling {
            fp8_format: Format::Hybrid,
            amax_epsilon: 0.0,
            power_2_scale: false,
            granularity: Granularity::Tensorwise,
            fp8_gemm_fprop: DEFAULT_GEMMS[0],
            fp8_gemm_dgrad: DEFAULT_GEMMS[1],
            fp8_gemm_wgrad: DEFAULT_GEMMS[2],
        }
    }
}

impl CurrentScaling {
    /// The per-tile recipe of `granularity` with its library's defaults: power-of-two scales
    /// (TE's `Float8BlockScaling` and torchao's `rowwise` round scales to powers of two; MX
    /// scales are powers of two by construction).
    pub fn tiled(granularity: Granularity) -> CurrentScaling {
        CurrentScaling {
            power_2_scale: granularity != Granularity::Tensorwise,
            granularity,
            ..CurrentScaling::default()
        }
    }

    /// Builds a validated recipe (GEMM accumulation at TE's defaults).
    pub fn new(
        fp8_format: Format,
        amax_epsilon: f32,
        power_2_scale: bool,
    ) -> Result<Self, CoreError> {
        let recipe = CurrentScaling {
            fp8_format,
            amax_epsilon,
            power_2_scale,
            ..CurrentScaling::default()
        };
        recipe.validate()?;
        Ok(recipe)
    }

    /// Checks that `amax_epsilon` is finite and in `0 ..= fp8_format.max_amax_epsilon()`
    /// (the module docs' range checks).
    pub fn validate(&self) -> Result<(), CoreError> {
        if !(self.amax_epsilon.is_finite() && self.amax_epsilon >= 0.0) {
            return Err(CoreError::InvalidAmaxEpsilon(self.amax_epsilon));
        }
        let max = self.fp8_format.max_amax_epsilon();
        if self.amax_epsilon > max {
            let f = self.fp8_format.narrowest();
            return Err(CoreError::ScaleOutOfRange {
                what: "amax_epsilon",
                value: self.amax_epsilon,
                range: format!(
                    "with fp8_format \"{}\" it must be at most {max} ({}'s largest value): a \
                     larger floor on the amax scales tensors that {} holds below its smallest \
                     normal number {} (to zero), and scale_inv products overflow f32",
                    self.fp8_format,
                    f.name().to_ascii_uppercase(),
                    f.name().to_ascii_uppercase(),
                    f.min_normal()
                ),
            });
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
    granularity: Granularity,
    fp8_gemm_fprop: MMParams,
    fp8_gemm_dgrad: MMParams,
    fp8_gemm_wgrad: MMParams,
}

impl Default for CurrentScalingFields {
    fn default() -> Self {
        let d = CurrentScaling::default();
        CurrentScalingFields {
            fp8_format: d.fp8_format,
            amax_epsilon: d.amax_epsilon,
            power_2_scale: d.power_2_scale,
            granularity: d.granularity,
            fp8_gemm_fprop: d.fp8_gemm_fprop,
            fp8_gemm_dgrad: d.fp8_gemm_dgrad,
            fp8_gemm_wgrad: d.fp8_gemm_wgrad,
        }
    }
}

impl TryFrom<CurrentScalingFields> for CurrentScaling {
    type Error = CoreError;

    fn try_from(f: CurrentScalingFields) -> Result<Self, Self::Error> {
        Ok(CurrentScaling {
            granularity: f.granularity,
            fp8_gemm_fprop: f.fp8_gemm_fprop,
            fp8_gemm_dgrad: f.fp8_gemm_dgrad,
            fp8_gemm_wgrad: f.fp8_gemm_wgrad,
            ..CurrentScaling::new(f.fp8_format, f.amax_epsilon, f.power_2_scale)?
        })
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

    /// How `gemm` accumulates (TE's `fp8_gemm_fprop/dgrad/wgrad`).
    pub const fn mm_params(&self, gemm: Gemm) -> MMParams {
        let (f, d, w) = match self {
            Recipe::Delayed(r) => (r.fp8_gemm_fprop, r.fp8_gemm_dgrad, r.fp8_gemm_wgrad),
            Recipe::Current(r) => (r.fp8_gemm_fprop, r.fp8_gemm_dgrad, r.fp8_gemm_wgrad),
        };
        match gemm {
            Gemm::Fprop => f,
            Gemm::Dgrad => d,
            Gemm::Wgrad => w,
        }
    }

    /// Whether `gemm` uses fast accumulation (the IR's `fast_accum`).
    pub const fn fast_accum(&self, gemm: Gemm) -> bool {
        !self.mm_params(gemm).use_split_accumulator
    }

    /// Sets how `gemm` accumulates.
    pub fn set_mm_params(&mut self, gemm: Gemm, p: MMParams) {
        let (f, d, w) = match self {
            Recipe::Delayed(r) => (
                &mut r.fp8_gemm_fprop,
                &mut r.fp8_gemm_dgrad,
                &mut r.fp8_gemm_wgrad,
            ),
            Recipe::Current(r) => (
                &mut r.fp8_gemm_fprop,
                &mut r.fp8_gemm_dgrad,
                &mut r.fp8_gemm_wgrad,
            ),
        };
        *match gemm {
            Gemm::Fprop => f,
            Gemm::Dgrad => d,
            Gemm::Wgrad => w,
        } = p;
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
