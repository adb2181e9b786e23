//! The one error type of fp8c-core. Every message names the field or input and the bad value.

use thiserror::Error;

/// Errors from recipe validation, parsing and scaling-state updates.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum CoreError {
    /// `amax_history_len` was 0 (TransformerEngine needs at least one slot) or beyond
    /// [`crate::MAX_AMAX_HISTORY`].
    #[error("amax_history_len must be between 1 and {max}, got {0}", max = crate::MAX_AMAX_HISTORY)]
    AmaxHistoryLen(usize),
    /// `margin` was infinite or NaN.
    #[error("margin must be finite, got {0}")]
    NonFiniteMargin(f32),
    /// `amax_epsilon` was negative, infinite or NaN.
    #[error("amax_epsilon must be finite and >= 0, got {0}")]
    InvalidAmaxEpsilon(f32),
    /// A scaling parameter outside the range whose scales stay in f32's normal range
    /// ([`crate::recipe`]'s range checks): `what` names it, `range` says the bounds and why.
    #[error("{what} = {value} is out of range: {range}")]
    ScaleOutOfRange {
        /// The field (`margin`, `amax_epsilon`).
        what: &'static str,
        /// Its value.
        value: f32,
        /// The allowed range and the reason for it.
        range: String,
    },
    /// A recipe asked for E5M2 in the forward pass, which TransformerEngine rejects.
    #[error(
        "fp8_format \"e5m2\" is not supported: pure E5M2 training is not supported \
         (TransformerEngine rejects it too); use \"hybrid\" (E4M3 forward, E5M2 gradients) or \"e4m3\""
    )]
    PureE5M2,
    /// A recipe format name other than "hybrid", "e4m3" (or the rejected "e5m2").
    #[error("unknown fp8_format {0:?}, expected \"hybrid\" or \"e4m3\"")]
    UnknownFormat(String),
    /// An FP8 element type name other than "e4m3" or "e5m2".
    #[error("unknown FP8 type {0:?}, expected \"e4m3\" or \"e5m2\"")]
    UnknownFp8Format(String),
    /// An amax algorithm name other than "max" or "most_recent".
    #[error("unknown amax_compute_algo {0:?}, expected \"max\" or \"most_recent\"")]
    UnknownAmaxComputeAlgo(String),
    /// A granularity name other than tensorwise, rowwise, block or mxfp8.
    #[error(
        "unknown granularity {0:?}, expected \"tensorwise\", \"rowwise\", \"block\" (TE's Float8BlockScaling) or \"mxfp8\" (MXFP8BlockScaling)"
    )]
    InvalidGranularity(String),
    /// A scaling state whose amax history has no slot to record into or compute from.
    #[error("amax history is empty: a scaling state needs amax_history_len >= 1 slots")]
    EmptyHistory,
}
