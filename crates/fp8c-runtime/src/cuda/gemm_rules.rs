//! cuBLASLt's documented rules for FP8 matmuls, checked on a [`GemmSpec`] before it is
//! planned (so a request cuBLASLt would refuse, or worse accept and misread, is an error that
//! names the rule) and by the emulated device (issue #15) in place of the library.
//!
//! From the cuBLAS documentation of `cublasLtMatmul` (FP8, compute type 32F, scale type 32F):
//! - A and B both FP8 and not both E5M2, in the TN layout (our `trans_b && !trans_a`, see
//!   `gemm.rs`);
//! - the type table: E4M3×E4M3 gives D of C's type (BF16, F16 or F32) or E4M3; a product with
//!   an E5M2 operand may also give E5M2; an FP8 D needs C in BF16 or F16; the bias has C's
//!   type, except BF16 with an F32 C;
//! - pointers 16-byte aligned and leading dimensions (and batch strides) multiples of 16
//!   bytes, the Tensor Core requirement FP8 kernels do not relax;
//! - the D scale and amax of D belong to an FP8 D (fp8c sets them for nothing else);
//! - block-scaled modes (cuBLASLt 12.9, Hopper; PyTorch's `_scaled_mm` checks the same): A
//!   and B per row (`OUTER_VEC`) together, or A per 1×128 (`VEC128`) with B per 1×128 or
//!   128×128 (`BLK128x128`); K a multiple of 128 for the 128 modes; no fast accumulation, no
//!   epilogue, no FP8 D. fp8c also keeps the scale layouts unambiguous: m a multiple of 4
//!   under `VEC128` and K/128 a multiple of 4 under `BLK128x128`.
//!
//! The C type is fp8c's choice ([`c_type`]): C shares D's memory and is never read (β is 0
//! for FP8), so for an FP8 D it takes the bias's 16-bit type, which the table requires.

use crate::cuda::gemm::{Epilogue, GemmSpec, ScaleMode};
use fp8c_ir::DType;

/// The C type a plan uses for `s`: D's type, or for an FP8 D the bias's 16-bit type (BF16
/// without a bias or with another one).
pub fn c_type(s: &GemmSpec) -> DType {
    if !s.d_type.is_fp8() {
        return s.d_type;
    }
    match s.bias {
        Some((_, DType::F16)) => DType::F16,
        _ => DType::BF16,
    }
}

/// The largest power of two (at most 256) dividing every address a batched operand takes:
/// its base and, with several batch entries, its stride in bytes.
fn alignment(base: u64, stride_bytes: u64, batch: u64) -> u32 {
    let mut a = base;
    if batch > 1 && stride_bytes != 0 {
        a |= stride_bytes;
    }
    if a == 0 {
        return 256;
    }
    (1u64 << a.trailing_zeros().min(8)) as u32
}

/// The byte alignment of cuBLAS's A (our B), B (our A), C and D (both our D) for the
/// heuristic's `MIN_ALIGNMENT_*_BYTES` preferences, so it only offers kernels that can read
/// these pointers: per-image convolution pointers can be 2-byte aligned, and a kernel that
/// assumes 16 faults with a misaligned address that poisons the context (TE and PyTorch hit
/// it).
pub fn min_alignments(s: &GemmSpec) -> [u32; 4] {
    let es = |t: DType| t.size() as u64;
    let a = alignment(s.a, s.stride_a * es(s.a_type), s.batch);
    let b = alignment(s.b, s.stride_b * es(s.b_type), s.batch);
    let d = alignment(s.d, s.stride_d * es(s.d_type), s.batch);
    [b, a, d, d]
}

/// Checks `s` against the rules above; the error names the rule broken.
pub fn check(s: &GemmSpec) -> Result<(), String> {
    let uses_bias = matches!(s.epilogue, Epilogue::Bias | Epilogue::GeluBias);
    if uses_bias && s.bias.is_none() {
        return Err("a bias epilogue needs a bias".into());
    }
    let fp8 = s.a_type.is_fp8() || s.b_type.is_fp8();
    if !fp8 {
        if s.d_scale.is_some() || s.amax_d.is_some() || s.d_type.is_fp8() {
            return Err("a D scale, an amax of D or an FP8 D needs FP8 operands".into());
        }
        return Ok(());
    }
    if !(s.a_type.is_fp8() && s.b_type.is_fp8()) {
        return Err(format!(
            "an FP8 GEMM needs both operands in FP8 (got {} × {})",
            s.a_type, s.b_type
        ));
    }
    if !s.trans_b || s.trans_a {
        return Err("FP8 GEMMs need B stored [n, k] and A stored [m, k] (cuBLASLt's TN)".into());
    }
    if s.a_type == DType::F8E5M2 && s.b_type == DType::F8E5M2 {
        return Err("cuBLASLt has no E5M2 × E5M2 GEMM".into());
    }
    let c = c_type(s);
    let e5m2_operand = s.a_type == DType::F8E5M2 || s.b_type == DType::F8E5M2;
    let d_ok = match s.d_type {
        d if d == c => matches!(c, DType::BF16 | DType::F16 | DType::F32),
        DType::F8E4M3 => matches!(c, DType::BF16 | DType::F16),
        DType::F8E5M2 => e5m2_operand && matches!(c, DType::BF16 | DType::F16),
        _ => false,
    };
    if !d_ok {
        return Err(format!(
            "cuBLASLt's FP8 table has no {} × {} GEMM giving D {} with C {c}{}",
            s.a_type,
            s.b_type,
            s.d_type,
            if s.d_type == DType::F8E5M2 && !e5m2_operand {
                " (an E5M2 D needs an E5M2 operand)"
            } else {
                ""
            }
        ));
    }
    if uses_bias && let Some((_, t)) = s.bias {
        let want = if c == DType::F32 { DType::BF16 } else { c };
        if t != want {
            return Err(format!(
                "an FP8 GEMM with C {c} takes a {want} bias, not {t}"
            ));
        }
    }
    if (s.d_scale.is_some() || s.amax_d.is_some()) && !s.d_type.is_fp8() {
        return Err("the D scale and amax of D are for an FP8 D".into());
    }
    check_scale_modes(s)?;
    let d_bytes = s.d_type.size() as u64;
    for (what, p) in [("A", s.a), ("B", s.b), ("D", s.d)] {
        if !p.is_multiple_of(16) {
            return Err(format!(
                "FP8 GEMM operand {what} at {p:#x} is not 16-byte aligned"
            ));
        }
    }
    for (what, p) in [
        ("A's scale", s.a_scale),
        ("B's scale", s.b_scale),
        ("D's scale", s.d_scale),
        ("amax of D", s.amax_d),
    ] {
        if let Some(p) = p
            && !p.is_multiple_of(4)
        {
            return Err(format!("{what} at {p:#x} is not a 4-byte aligned f32"));
        }
    }
    // A [m, k] and B [n, k] have k contiguous (1-byte elements); D [m, n] has n.
    if !s.k.is_multiple_of(16) {
        return Err(format!(
            "FP8 GEMM: K = {} is not a multiple of 16 (A's and B's leading dimension)",
            s.k
        ));
    }
    if !(s.n * d_bytes).is_multiple_of(16) {
        return Err(format!(
            "FP8 GEMM: D's rows of {} {} are not a multiple of 16 bytes",
            s.n, s.d_type
        ));
    }
    if s.batch > 1 {
        for (what, stride, bytes) in [
            ("A", s.stride_a, 1),
            ("B", s.stride_b, 1),
            ("D", s.stride_d, d_bytes),
        ] {
            if !(stride * bytes).is_multiple_of(16) {
                return Err(format!(
                    "FP8 GEMM: {what}'s batch stride of {stride} elements is not a multiple of 16 bytes"
                ));
            }
        }
    }
    Ok(())
}

/// The block-scaled modes' rules (module docs).
fn check_scale_modes(s: &GemmSpec) -> Result<(), String> {
    use ScaleMode::*;
    let modes = (s.a_scale_mode, s.b_scale_mode);
    if modes == (Scalar, Scalar) {
        return Ok(());
    }
    if !matches!(
        modes,
        (OuterVec, OuterVec) | (Vec128, Vec128) | (Vec128, Blk128)
    ) {
        return Err(format!(
            "cuBLASLt has no FP8 GEMM with A scaled {:?} and B scaled {:?}",
            modes.0, modes.1
        ));
    }
    if s.fast_accum || s.epilogue != Epilogue::None || s.d_type.is_fp8() {
        return Err("block-scaled FP8 GEMMs take no fast accumulation, epilogue or FP8 D".into());
    }
    if s.a_scale.is_none() || s.b_scale.is_none() {
        return Err("a block-scaled FP8 GEMM needs both scale pointers".into());
    }
    if s.batch > 1 {
        return Err("block-scaled FP8 GEMMs are not batched".into());
    }
    if modes.0 == Vec128 {
        if !s.k.is_multiple_of(128) {
            return Err(format!(
                "1×128 block scaling needs K a multiple of 128, got {}",
                s.k
            ));
        }
        if !s.m.is_multiple_of(4) {
            return Err(format!(
                "1×128 block scaling of A needs m a multiple of 4, got {}",
                s.m
            ));
        }
    }
    if modes.1 == Blk128 && !(s.k / 128).is_multiple_of(4) {
        return Err(format!(
            "128×128 block scaling of B needs K/128 a multiple of 4, got K = {}",
            s.k
        ));
    }
    Ok(())
}
