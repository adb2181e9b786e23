//! `quantize` with AVX2 intrinsics, 32 values per iteration: the scalar encoder's integer
//! arithmetic (`cast::encode_bits`) in eight-lane registers, then one pack of four registers
//! to 32 bytes.
//!
//! The compiler vectorises `quantize_slice`'s closure eight lanes at a time, but narrows each
//! register's eight 32-bit codes to bytes on its own (two shuffles, an unpack and a partial
//! store: a third of the loop in `perf`), and tests overflow and NaN with unsigned max-and-
//! compare pairs. Here the codes of four registers go down in three instructions
//! (`packus` twice, one lane permute) and the range tests are signed compares (every `|x|`
//! pattern is below 2³¹). The results are the scalar encoder's bit for bit: the same
//! operations, checked over every f32 pattern by `examples/exhaustive_f32.rs` and over the
//! special values in this file's tests.

use crate::cast::{EncodeSpec, infinite_code, spec};
use crate::format::Fp8Format;

/// `dst[i] = quantize(fmt, src[i], scale, saturate)` for the leading multiple of 32
/// elements; returns how many were written (the caller does the rest).
///
/// # Safety
/// The CPU must have AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn quantize_avx2(
    fmt: Fp8Format,
    src: &[f32],
    scale: f32,
    dst: &mut [u8],
    saturate: bool,
) -> usize {
    use std::arch::x86_64::*;
    let s: &EncodeSpec = spec(fmt);
    let n = src.len().min(dst.len()) / 32 * 32;
    let c = Consts {
        scale: _mm256_set1_ps(scale),
        abs_mask: _mm256_set1_epi32(0x7FFF_FFFF),
        one: _mm256_set1_epi32(1),
        shift: _mm_cvtsi32_si128(s.shift as i32),
        rebias: _mm256_set1_epi32(s.rebias as i32),
        half_minus_one: _mm256_set1_epi32((1 << (s.shift - 1)) - 1),
        magic: _mm256_set1_ps(s.subnormal_magic),
        min_normal: _mm256_set1_epi32(s.min_normal_bits as i32),
        overflow_above: _mm256_set1_epi32(s.overflow_above_bits as i32),
        overflow: _mm256_set1_epi32(if saturate {
            s.max_code
        } else {
            s.overflow_code
        } as i32),
        inf_bits: _mm256_set1_epi32(0x7F80_0000),
        nan: _mm256_set1_epi32(s.nan_code as i32),
        sign: _mm256_set1_epi32(0x80),
        inf_code: _mm256_set1_epi32(i32::from(infinite_code(fmt, 1.0))),
    };
    let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    let mut i = 0;
    while i < n {
        // SAFETY: i + 32 ≤ n ≤ both lengths; unaligned loads and stores.
        unsafe {
            let p = src.as_ptr().add(i);
            let a = encode8(&c, _mm256_loadu_ps(p));
            let b = encode8(&c, _mm256_loadu_ps(p.add(8)));
            let d = encode8(&c, _mm256_loadu_ps(p.add(16)));
            let e = encode8(&c, _mm256_loadu_ps(p.add(24)));
            // Codes are 0..=255: the saturating packs keep them; the permute undoes the
            // packs' per-128-bit-lane interleaving.
            let bytes = _mm256_packus_epi16(_mm256_packus_epi32(a, b), _mm256_packus_epi32(d, e));
            let bytes = _mm256_permutevar8x32_epi32(bytes, order);
            _mm256_storeu_si256(dst.as_mut_ptr().add(i).cast(), bytes);
        }
        i += 32;
    }
    n
}

/// The broadcast constants of [`quantize_avx2`].
#[cfg(target_arch = "x86_64")]
struct Consts {
    scale: std::arch::x86_64::__m256,
    abs_mask: std::arch::x86_64::__m256i,
    one: std::arch::x86_64::__m256i,
    shift: std::arch::x86_64::__m128i,
    rebias: std::arch::x86_64::__m256i,
    half_minus_one: std::arch::x86_64::__m256i,
    magic: std::arch::x86_64::__m256,
    min_normal: std::arch::x86_64::__m256i,
    overflow_above: std::arch::x86_64::__m256i,
    overflow: std::arch::x86_64::__m256i,
    inf_bits: std::arch::x86_64::__m256i,
    nan: std::arch::x86_64::__m256i,
    sign: std::arch::x86_64::__m256i,
    inf_code: std::arch::x86_64::__m256i,
}

/// Eight values quantized to their codes, one per 32-bit lane: `encode_bits(x * scale)`,
/// or the infinite code with x's sign where x is ±inf (`cast::quantize_slice`).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
fn encode8(c: &Consts, x: std::arch::x86_64::__m256) -> std::arch::x86_64::__m256i {
    use std::arch::x86_64::*;
    let xs = _mm256_mul_ps(x, c.scale);
    let bits = _mm256_castps_si256(xs);
    let abs = _mm256_and_si256(bits, c.abs_mask);
    // Normal range: round to nearest even by adding half an ulp minus one plus the lowest
    // kept bit, re-bias, shift (wrapping arithmetic; other ranges are selected away below).
    let lsb = _mm256_and_si256(_mm256_srl_epi32(abs, c.shift), c.one);
    let normal = _mm256_srl_epi32(
        _mm256_add_epi32(
            _mm256_sub_epi32(abs, c.rebias),
            _mm256_add_epi32(c.half_minus_one, lsb),
        ),
        c.shift,
    );
    // Subnormal range: the f32 addition rounds |x| to a multiple of the smallest subnormal.
    let sub = _mm256_sub_epi32(
        _mm256_castps_si256(_mm256_add_ps(_mm256_castsi256_ps(abs), c.magic)),
        _mm256_castps_si256(c.magic),
    );
    let mut mag = _mm256_blendv_epi8(normal, sub, _mm256_cmpgt_epi32(c.min_normal, abs));
    mag = _mm256_blendv_epi8(mag, c.overflow, _mm256_cmpgt_epi32(abs, c.overflow_above));
    mag = _mm256_blendv_epi8(mag, c.nan, _mm256_cmpgt_epi32(abs, c.inf_bits));
    let code = _mm256_or_si256(mag, _mm256_and_si256(_mm256_srli_epi32::<24>(bits), c.sign));
    // An infinite x keeps a non-finite code whatever the scale.
    let xb = _mm256_castps_si256(x);
    let is_inf = _mm256_cmpeq_epi32(_mm256_and_si256(xb, c.abs_mask), c.inf_bits);
    let inf = _mm256_or_si256(
        c.inf_code,
        _mm256_and_si256(_mm256_srli_epi32::<24>(xb), c.sign),
    );
    _mm256_blendv_epi8(code, inf, is_inf)
}

#[cfg(test)]
mod tests {
    use crate::cast::quantize;
    use crate::format::Fp8Format;

    /// Special values, every rounding boundary's neighbours and a sweep of magnitudes, at
    /// several scales (negative and non-finite included), against the one-value function.
    #[test]
    fn matches_the_scalar_quantize() {
        if !std::arch::is_x86_feature_detected!("avx2") {
            println!("skipped: this CPU has no AVX2 (the compiler's loop is used instead)");
            return;
        }
        let mut xs: Vec<f32> = vec![
            0.0,
            -0.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            -f32::NAN,
            f32::MIN_POSITIVE,
            f32::MAX,
            -f32::MAX,
            1.0e-45,
            464.0,
            464.00003,
            448.0,
            61440.0,
            61439.996,
            57344.0,
        ];
        for e in -150..=130 {
            let base = 2f32.powi(e);
            for m in [1.0f32, 1.0625, 1.125, 1.1875, 1.25, 1.5, 1.75, 1.9375] {
                let v = base * m;
                for b in [v.to_bits().wrapping_sub(1), v.to_bits(), v.to_bits() + 1] {
                    let x = f32::from_bits(b);
                    xs.extend([x, -x]);
                }
            }
        }
        xs.resize(xs.len().next_multiple_of(32), 1.0);
        for fmt in Fp8Format::ALL {
            for sat in [true, false] {
                for scale in [
                    1.0f32,
                    1.5,
                    0.3,
                    -2.0,
                    1.0e-3,
                    4.0e9,
                    f32::INFINITY,
                    f32::NAN,
                ] {
                    let mut got = vec![0u8; xs.len()];
                    // SAFETY: AVX2 is present (checked above).
                    let n = unsafe { super::quantize_avx2(fmt, &xs, scale, &mut got, sat) };
                    assert_eq!(n, xs.len());
                    for (&x, &g) in xs.iter().zip(&got) {
                        let want = quantize(fmt, x, scale, sat);
                        assert_eq!(
                            g,
                            want,
                            "{fmt:?} sat={sat} x={x:e} ({:#010x}) scale={scale}",
                            x.to_bits()
                        );
                    }
                }
            }
        }
    }
}
