//! FP8 casts: f32 / bf16 / f16 → E4M3 / E5M2 and back, scalar and whole-slice.
//!
//! These are the CPU runtime's kernels, so they are the definition of "bit-exact" in fp8c:
//!
//! * Encoding rounds once, to nearest, ties to even (bf16 and f16 inputs widen to f32 exactly
//!   first, so they are also rounded once from their exact value).
//! * `saturate = true`: |x| that rounds past max, and ±inf, become ±max; NaN stays NaN. This is
//!   ONNX Cast / QuantizeLinear (opset 19+) with saturate=1 and TransformerEngine's `satfinite`
//!   cast (`__nv_cvt_float_to_fp8(x, __NV_SATFINITE, ..)` in its quantize kernels).
//! * `saturate = false`: overflow and ±inf become NaN for E4M3 (it has no infinities) and ±inf
//!   for E5M2, as in ONNX's saturate=0 tables.
//! * NaN payloads: a NaN input encodes to the sign-preserving canonical code S.1111.111 (0x7F /
//!   0xFF) for E4M3 and S.11111.10 (0x7E / 0xFE) for E5M2, whatever the input payload; decoding
//!   any NaN code gives the sign-preserving quiet f32 NaN 0x7FC00000 / 0xFFC00000. Both are what
//!   ml_dtypes does, so the golden tests compare NaNs bit for bit too.
//!
//! The encoder is branch-light integer arithmetic on the f32 bit pattern (`encode_bits` below),
//! which the compiler vectorises in the slice loops. It is checked entry by entry against
//! ml_dtypes tables (tests/golden.rs) and against the `float8` crate ([`crate::float8_ref`]).
//! Decoding is a 256-entry table built at compile time from `float8`'s const conversions.

use float8::{F8E4M3, F8E5M2};
use half::{bf16, f16};

use crate::format::Fp8Format;

/// Constants of the bit-manipulation encoder for one format.
pub(crate) struct EncodeSpec {
    /// `(127 - bias) << 23`: subtracting it re-biases an f32 exponent to the FP8 bias.
    pub(crate) rebias: u32,
    /// `23 - mantissa_bits`: f32 mantissa bits dropped by the cast.
    pub(crate) shift: u32,
    /// Bits of the smallest normal FP8 value as f32; below it the subnormal path applies.
    pub(crate) min_normal_bits: u32,
    /// |x| bit patterns above this round past max (464 rounds down to 448 by ties-to-even;
    /// 61440 rounds up past 57344, so E5M2's limit is the f32 just below 61440).
    pub(crate) overflow_above_bits: u32,
    /// 2^(23 + log2(smallest subnormal)): adding it to |x| < min normal makes the FPU round |x|
    /// to a multiple of the smallest subnormal, to nearest even, in one step.
    pub(crate) subnormal_magic: f32,
    /// Code of +max.
    pub(crate) max_code: u32,
    /// Code of a positive non-saturated overflow: NaN for E4M3, +inf for E5M2.
    pub(crate) overflow_code: u32,
    /// Code of a positive NaN.
    pub(crate) nan_code: u32,
}

const E4M3_SPEC: EncodeSpec = EncodeSpec {
    rebias: 120 << 23,
    shift: 20,
    min_normal_bits: 0x3C80_0000,     // 2^-6
    overflow_above_bits: 0x43E8_0000, // 464
    subnormal_magic: 16384.0,         // 2^14 = 2^(23 - 9)
    max_code: 0x7E,
    overflow_code: 0x7F,
    nan_code: 0x7F,
};

const E5M2_SPEC: EncodeSpec = EncodeSpec {
    rebias: 112 << 23,
    shift: 21,
    min_normal_bits: 0x3880_0000,     // 2^-14
    overflow_above_bits: 0x476F_FFFF, // just below 61440
    subnormal_magic: 128.0,           // 2^7 = 2^(23 - 16)
    max_code: 0x7B,
    overflow_code: 0x7C,
    nan_code: 0x7E,
};

pub(crate) const fn spec(fmt: Fp8Format) -> &'static EncodeSpec {
    match fmt {
        Fp8Format::E4M3 => &E4M3_SPEC,
        Fp8Format::E5M2 => &E5M2_SPEC,
    }
}

/// Encodes one f32 with the given spec; `SAT` picks the overflow result. Every path is computed
/// and the right one selected, so the slice loops have no data-dependent branches.
#[inline(always)]
fn encode_bits<const SAT: bool>(s: &EncodeSpec, x: f32) -> u8 {
    let bits = x.to_bits();
    let sign = (bits >> 24) & 0x80;
    let abs = bits & 0x7FFF_FFFF;
    // Normal range: drop `shift` mantissa bits with round-to-nearest-even (add half an ulp
    // minus one, plus the lowest kept bit), then re-bias the exponent. A carry out of the
    // mantissa correctly bumps the exponent.
    let lsb = (abs >> s.shift) & 1;
    let half_minus_one = (1 << (s.shift - 1)) - 1;
    let normal = abs
        .wrapping_sub(s.rebias)
        .wrapping_add(half_minus_one + lsb)
        >> s.shift;
    // Subnormal range: the f32 addition rounds |x| to a multiple of the smallest subnormal
    // (ties to even); the difference of bit patterns is then the FP8 code (up to min normal).
    let subnormal = (f32::from_bits(abs) + s.subnormal_magic)
        .to_bits()
        .wrapping_sub(s.subnormal_magic.to_bits());
    let mut mag = if abs < s.min_normal_bits {
        subnormal
    } else {
        normal
    };
    if abs > s.overflow_above_bits {
        mag = if SAT { s.max_code } else { s.overflow_code };
    }
    if abs > 0x7F80_0000 {
        mag = s.nan_code;
    }
    (mag | sign) as u8
}

/// Encodes an f32 to FP8: round to nearest even, ONNX saturate semantics (see module docs).
#[inline]
pub fn encode_f32(fmt: Fp8Format, x: f32, saturate: bool) -> u8 {
    if saturate {
        encode_bits::<true>(spec(fmt), x)
    } else {
        encode_bits::<false>(spec(fmt), x)
    }
}

/// Encodes a bf16 to FP8, rounding once from its exact value.
#[inline]
pub fn encode_bf16(fmt: Fp8Format, x: bf16, saturate: bool) -> u8 {
    encode_f32(fmt, x.to_f32(), saturate) // bf16 -> f32 is exact
}

/// Encodes an f16 to FP8, rounding once from its exact value.
#[inline]
pub fn encode_f16(fmt: Fp8Format, x: f16, saturate: bool) -> u8 {
    encode_f32(fmt, x.to_f32(), saturate) // f16 -> f32 is exact
}

/// Decodes an FP8 code to f32 (exact; NaN codes give the sign-preserving quiet NaN).
#[inline]
pub fn decode(fmt: Fp8Format, code: u8) -> f32 {
    decode_table(fmt)[code as usize]
}

/// The 256-entry decode table of a format, indexed by code.
#[inline]
pub fn decode_table(fmt: Fp8Format) -> &'static [f32; 256] {
    match fmt {
        Fp8Format::E4M3 => &DECODE_E4M3,
        Fp8Format::E5M2 => &DECODE_E5M2,
    }
}

/// The code a scaled quantize gives an infinite input: NaN in E4M3 (which has no infinity),
/// ±inf in E5M2, the sign kept.
#[inline]
pub fn infinite_code(fmt: Fp8Format, x: f32) -> u8 {
    let sign = ((x.to_bits() >> 24) & 0x80) as u8;
    sign | match fmt {
        Fp8Format::E4M3 => 0x7F,
        Fp8Format::E5M2 => 0x7C,
    }
}

/// Quantizes one value: `encode(x * scale)`, the product rounded to f32 first (as TE does).
/// Saturation applies to finite values only: an infinite `x` gives [`infinite_code`] (and a
/// NaN stays NaN), so a tensor holding inf or NaN never becomes plausible finite FP8 codes —
/// what f32 would compute, a non-finite result, is what the FP8 GEMM then gives. (ONNX `Cast`
/// and `QuantizeLinear`, [`encode_f32`], keep ONNX's table: saturate maps ±inf to ±max.)
#[inline]
pub fn quantize(fmt: Fp8Format, x: f32, scale: f32, saturate: bool) -> u8 {
    if x.is_infinite() {
        return infinite_code(fmt, x);
    }
    encode_f32(fmt, x * scale, saturate)
}

/// Dequantizes one code: `decode(q) * scale_inv`, rounded to f32.
#[inline]
pub fn dequantize(fmt: Fp8Format, code: u8, scale_inv: f32) -> f32 {
    decode(fmt, code) * scale_inv
}

static DECODE_E4M3: [f32; 256] = build_decode_table(Fp8Format::E4M3);
static DECODE_E5M2: [f32; 256] = build_decode_table(Fp8Format::E5M2);

/// Builds a decode table from float8's const `to_f32`. float8 decodes every NaN code to the
/// f16 NaN 0x7FFF, dropping the sign; we substitute the sign-preserving f32 quiet NaN so that
/// decode(encode(-NaN)) is negative, as in ml_dtypes. Finite values and ±inf are float8's.
const fn build_decode_table(fmt: Fp8Format) -> [f32; 256] {
    let mut table = [0.0f32; 256];
    let mut i = 0;
    while i < 256 {
        let code = i as u8;
        let value = match fmt {
            Fp8Format::E4M3 => F8E4M3::from_bits(code).to_f32(),
            Fp8Format::E5M2 => F8E5M2::from_bits(code).to_f32(),
        };
        table[i] = if value.is_nan() {
            f32::from_bits(((code as u32 & 0x80) << 24) | 0x7FC0_0000)
        } else {
            value
        };
        i += 1;
    }
    table
}

/// Applies `f` element-wise; one monomorphised copy per call site keeps the loop vectorisable
/// (callers pass `move` closures: a closure holding references to its captures kept the AVX2
/// copy of `quantize_slice` scalar, 6× slower than SSE2). Where the CPU has AVX2 the same loop runs compiled for it ([`map_avx2`]): release builds
/// target baseline x86-64 (SSE2, four lanes), and the encoders' integer arithmetic doubles its
/// width with AVX2. Both copies compute every element the same way, so the bits agree.
#[inline(always)]
fn map_into<S: Copy, D>(src: &[S], dst: &mut [D], f: impl Fn(S) -> D) {
    assert_eq!(
        src.len(),
        dst.len(),
        "source has {} elements, destination {}",
        src.len(),
        dst.len()
    );
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2 (checked just above).
        return unsafe { map_avx2(src, dst, f) };
    }
    map_loop(src, dst, f);
}

/// The loop of [`map_into`].
#[inline(always)]
fn map_loop<S: Copy, D>(src: &[S], dst: &mut [D], f: impl Fn(S) -> D) {
    for (d, &s) in dst.iter_mut().zip(src) {
        *d = f(s);
    }
}

/// [`map_loop`] compiled for AVX2.
///
/// # Safety
/// The CPU must have AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn map_avx2<S: Copy, D>(src: &[S], dst: &mut [D], f: impl Fn(S) -> D) {
    map_loop(src, dst, f);
}

/// Runs `$body` with `$enc` bound to the encoder for (`$fmt`, `$sat`), each a separate loop.
macro_rules! with_encoder {
    ($fmt:expr, $sat:expr, |$enc:ident| $body:expr) => {
        match ($fmt, $sat) {
            (Fp8Format::E4M3, true) => {
                let $enc = |x: f32| encode_bits::<true>(&E4M3_SPEC, x);
                $body
            }
            (Fp8Format::E4M3, false) => {
                let $enc = |x: f32| encode_bits::<false>(&E4M3_SPEC, x);
                $body
            }
            (Fp8Format::E5M2, true) => {
                let $enc = |x: f32| encode_bits::<true>(&E5M2_SPEC, x);
                $body
            }
            (Fp8Format::E5M2, false) => {
                let $enc = |x: f32| encode_bits::<false>(&E5M2_SPEC, x);
                $body
            }
        }
    };
}

/// Encodes a whole f32 buffer. Panics if the lengths differ.
pub fn encode_f32_slice(fmt: Fp8Format, src: &[f32], dst: &mut [u8], saturate: bool) {
    with_encoder!(fmt, saturate, |enc| map_into(src, dst, enc))
}

/// Encodes a whole bf16 buffer. Panics if the lengths differ.
pub fn encode_bf16_slice(fmt: Fp8Format, src: &[bf16], dst: &mut [u8], saturate: bool) {
    with_encoder!(fmt, saturate, |enc| map_into(src, dst, move |x: bf16| enc(
        x.to_f32()
    )))
}

/// Encodes a whole f16 buffer. Panics if the lengths differ.
pub fn encode_f16_slice(fmt: Fp8Format, src: &[f16], dst: &mut [u8], saturate: bool) {
    with_encoder!(fmt, saturate, |enc| map_into(src, dst, move |x: f16| enc(
        x.to_f32()
    )))
}

/// Decodes a whole FP8 buffer to f32. Panics if the lengths differ.
pub fn decode_slice(fmt: Fp8Format, src: &[u8], dst: &mut [f32]) {
    assert_eq!(src.len(), dst.len(), "decode_slice: lengths differ");
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2 (checked just above).
        return unsafe { crate::decode_simd::decode_scaled_avx2(fmt, src, None, dst) };
    }
    let table = decode_table(fmt);
    map_into(src, dst, move |q| table[q as usize]);
}

/// Fused quantize: `dst[i] = quantize(src[i], scale)` ([`quantize`]: the product rounded to
/// f32 first; infinite inputs stay non-finite). Panics if the lengths differ.
pub fn quantize_slice(fmt: Fp8Format, src: &[f32], scale: f32, dst: &mut [u8], saturate: bool) {
    // Both results computed and one selected (no call or branch per element, so the loop
    // vectorises); `inf` is the positive infinite code, the sign added per element.
    assert_eq!(src.len(), dst.len(), "quantize_slice: lengths differ");
    let mut done = 0;
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2 (checked just above).
        done = unsafe { crate::encode_simd::quantize_avx2(fmt, src, scale, dst, saturate) };
    }
    let (src, dst) = (&src[done..], &mut dst[done..]);
    let inf = infinite_code(fmt, 1.0);
    with_encoder!(fmt, saturate, |enc| map_into(src, dst, move |x: f32| {
        let c = enc(x * scale);
        let sign = ((x.to_bits() >> 24) & 0x80) as u8;
        if x.is_infinite() { sign | inf } else { c }
    }))
}

/// Fused dequantize: `dst[i] = decode(src[i]) * scale_inv`. Panics if the lengths differ.
pub fn dequantize_slice(fmt: Fp8Format, src: &[u8], scale_inv: f32, dst: &mut [f32]) {
    assert_eq!(src.len(), dst.len(), "dequantize_slice: lengths differ");
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2 (checked just above).
        return unsafe { crate::decode_simd::decode_scaled_avx2(fmt, src, Some(scale_inv), dst) };
    }
    let table = decode_table(fmt);
    map_into(src, dst, move |q| table[q as usize] * scale_inv);
}

/// [`dequantize_slice`] into uninitialised memory (a result vector's spare capacity): every
/// element of `dst` is written, with the same bits.
pub fn dequantize_into(
    fmt: Fp8Format,
    src: &[u8],
    scale_inv: f32,
    dst: &mut [std::mem::MaybeUninit<f32>],
) {
    assert_eq!(src.len(), dst.len(), "dequantize_into: lengths differ");
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2 (checked just above).
        return unsafe {
            crate::decode_simd::decode_scaled_into_avx2(fmt, src, Some(scale_inv), dst)
        };
    }
    let table = decode_table(fmt);
    map_into(src, dst, move |q| {
        std::mem::MaybeUninit::new(table[q as usize] * scale_inv)
    });
}

/// max |x| over a buffer; 0.0 for an empty one.
///
/// NaN propagates: any NaN element gives NaN, as `torch.amax(x.abs())` does, so a NaN tensor
/// makes the scale update keep the previous scale instead of silently ignoring the NaN.
/// (TransformerEngine's CUDA amax kernels reduce with `fmaxf`, which skips NaNs; fp8c follows
/// the PyTorch reference semantics and lets the training loop decide what a NaN means.)
pub fn amax_f32(src: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2 (checked just above).
        return unsafe { amax_avx2(src) };
    }
    amax_loop(src)
}

/// [`amax_f32`]'s reduction. For non-negative floats the bit patterns order like the values,
/// and every NaN pattern is above +inf's, so an integer max over |x| bits is max |x| with NaN
/// winning. It vectorises as a plain integer reduction.
#[inline(always)]
fn amax_loop(src: &[f32]) -> f32 {
    let max_bits = src
        .iter()
        .fold(0u32, |m, &x| m.max(x.to_bits() & 0x7FFF_FFFF));
    if max_bits > 0x7F80_0000 {
        f32::NAN
    } else {
        f32::from_bits(max_bits)
    }
}

/// [`amax_loop`] compiled for AVX2 (an integer max is exact in any order).
///
/// # Safety
/// The CPU must have AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn amax_avx2(src: &[f32]) -> f32 {
    amax_loop(src)
}

#[cfg(test)]
mod tests {

    /// `dequantize_into` (uninitialised output) writes what `dequantize_slice` writes, for
    /// every code of both formats.
    #[test]
    fn dequantize_into_matches_dequantize_slice() {
        let codes: Vec<u8> = (0..=255u8).chain([0x7F, 0x80, 0x01]).collect();
        for fmt in [Fp8Format::E4M3, Fp8Format::E5M2] {
            for s in [1.0f32, 0.37, 2.0e-3] {
                let mut want = vec![0f32; codes.len()];
                dequantize_slice(fmt, &codes, s, &mut want);
                let mut got: Vec<f32> = Vec::with_capacity(codes.len());
                dequantize_into(fmt, &codes, s, &mut got.spare_capacity_mut()[..codes.len()]);
                // SAFETY: dequantize_into wrote every element.
                unsafe { got.set_len(codes.len()) };
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&got), bits(&want), "{fmt:?} scale {s}");
            }
        }
    }
    use super::*;

    #[test]
    fn rounding_and_overflow_points() {
        use Fp8Format::*;
        // Ties to even at the top: 464 is halfway between 448 (0x7E, even) and 480 (would be
        // 0x7F, odd), so it rounds down; 61440 is halfway between 57344 (0x7B, odd) and 65536.
        assert_eq!(encode_f32(E4M3, 464.0, false), 0x7E);
        assert_eq!(encode_f32(E4M3, 464.00003, false), 0x7F);
        assert_eq!(encode_f32(E5M2, 61439.996, false), 0x7B);
        assert_eq!(encode_f32(E5M2, 61440.0, false), 0x7C);
        assert_eq!(encode_f32(E5M2, 61440.0, true), 0x7B);
        assert_eq!(encode_f32(E4M3, f32::NEG_INFINITY, true), 0xFE);
        assert_eq!(encode_f32(E4M3, f32::NEG_INFINITY, false), 0xFF);
        assert_eq!(encode_f32(E5M2, f32::NEG_INFINITY, false), 0xFC);
        // Subnormal ties: 2^-10 is half the smallest E4M3 subnormal, rounds to even (0).
        assert_eq!(encode_f32(E4M3, 2f32.powi(-10), true), 0x00);
        assert_eq!(encode_f32(E4M3, -3.0 * 2f32.powi(-10), true), 0x82);
        assert_eq!(encode_f32(E4M3, -0.0, true), 0x80);
        // NaN codes keep the sign and drop the payload.
        assert_eq!(encode_f32(E5M2, f32::from_bits(0xFFE0_0000), true), 0xFE);
        assert_eq!(encode_f32(E4M3, f32::from_bits(0x7F80_0001), false), 0x7F);
    }

    #[test]
    fn decode_table_round_trips_every_non_nan_code() {
        for fmt in Fp8Format::ALL {
            for code in 0..=255u8 {
                let v = decode(fmt, code);
                if fmt.is_nan_code(code) {
                    assert!(v.is_nan() && v.is_sign_negative() == (code & 0x80 != 0));
                    assert_eq!(encode_f32(fmt, v, false), fmt.nan_code() | (code & 0x80));
                } else {
                    assert_eq!(encode_f32(fmt, v, false), code, "{fmt} code {code:#04x}");
                }
            }
            assert_eq!(decode(fmt, fmt.max_code()), fmt.max());
        }
    }

    #[test]
    fn amax_propagates_nan_and_handles_empty() {
        assert_eq!(amax_f32(&[]), 0.0);
        assert_eq!(amax_f32(&[-0.0]).to_bits(), 0);
        assert_eq!(amax_f32(&[1.0, -3.5, 2.0]), 3.5);
        assert_eq!(amax_f32(&[1.0, f32::NEG_INFINITY]), f32::INFINITY);
        assert!(amax_f32(&[1.0, f32::NAN, f32::INFINITY]).is_nan());
    }
}
