//! Quantizers that read their tensor once.

use super::{Rule, multi};

/// The rules of this file.
pub fn rules() -> Vec<Rule> {
    vec![
        // quantize(x, s) and amax(x) = the two outputs of quantize_amax(x, s): one read of x.
        multi(
            "quantize-amax",
            "?q = (quantize ?qa ?x ?s), ?a = (amax ?x)",
            "?q = (proj 0 (quantize_amax ?qa ?x ?s)), ?a = (proj 1 (quantize_amax ?qa ?x ?s))",
        ),
        // transpose(quantize(x, s)) = the transposed output of cast_transpose(x, s), whose
        // first output is quantize(x, s): Hopper's FP8 GEMMs want K-major (TN) operands.
        multi(
            "cast-transpose",
            "?t = (transpose ?p ?q), ?q = (quantize ?qa ?x ?s)",
            "?q = (proj 0 (cast_transpose ?p ?qa ?x ?s)), ?t = (proj 1 (cast_transpose ?p ?qa ?x ?s))",
        ),
        // amax(x) = the third output of cast_transpose(x, s).
        multi(
            "cast-transpose-amax",
            "?c = (cast_transpose ?p ?qa ?x ?s), ?a = (amax ?x)",
            "?a = (proj 2 ?c)",
        ),
    ]
}
