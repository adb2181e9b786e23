//! FP8 codes decoded to f32 by arithmetic, eight at a time with AVX2: [`decode_slice`] and
//! [`dequantize_slice`] use it for whole slices, fp8c-eval's GEMM for its B panels
//! ([`decode8_avx2`]).
//!
//! A finite code's 7 magnitude bits, shifted into an f32's exponent and mantissa fields, read
//! as an f32 that is the value divided by a power of two (subnormal codes included, they land
//! on f32 normals or exact subnormals), so one integer shift and one multiply by that power
//! decode it exactly; the sign bit moves to bit 31. A group of eight with an infinity or NaN
//! code reads the decode table instead (its bits, NaN payloads included). The results are the
//! table's bit for bit (`tests::every_code_matches_the_table`).
//!
//! [`decode_slice`]: crate::decode_slice
//! [`dequantize_slice`]: crate::dequantize_slice

use crate::cast::decode_table;
use crate::format::Fp8Format;

/// How a format's finite codes decode by arithmetic (see the module docs).
#[derive(Clone, Copy, Debug)]
pub struct DecodeLayout {
    /// Left shift of the 7 magnitude bits (to f32's mantissa MSB).
    pub shift: i32,
    /// 2^(127 − bias): the f32 reading of the shifted bits times this is the value.
    pub rebase: f32,
    /// Magnitudes above this are infinities or NaN (decoded from the table).
    pub finite_max: i32,
}

impl DecodeLayout {
    /// The layout of `fmt`.
    pub fn of(fmt: Fp8Format) -> DecodeLayout {
        match fmt {
            // 4 exponent bits, bias 7; S.1111.111 is NaN.
            Fp8Format::E4M3 => DecodeLayout {
                shift: 20,
                rebase: f32::from_bits((127 + 120) << 23),
                finite_max: 0x7E,
            },
            // 5 exponent bits, bias 15; S.11111.xx is ±inf or NaN.
            Fp8Format::E5M2 => DecodeLayout {
                shift: 21,
                rebase: f32::from_bits((127 + 112) << 23),
                finite_max: 0x7B,
            },
        }
    }
}

/// Eight codes at `src` decoded into an AVX2 register, times `scale` (1.0 for plain decoding;
/// a power of two or any f32, one rounding, as `decode(q) * scale` in scalar code).
///
/// # Safety
/// The CPU must have AVX2, and `src` must be valid for reading 8 bytes.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
pub unsafe fn decode8_avx2(
    l: DecodeLayout,
    table: &[f32; 256],
    src: *const u8,
) -> std::arch::x86_64::__m256 {
    use std::arch::x86_64::*;
    // SAFETY: the caller passes 8 readable bytes; gather indices are bytes, within the table.
    unsafe {
        let c = _mm256_cvtepu8_epi32(_mm_loadl_epi64(src.cast()));
        let v = _mm256_and_si256(c, _mm256_set1_epi32(0x7F));
        if _mm256_movemask_epi8(_mm256_cmpgt_epi32(v, _mm256_set1_epi32(l.finite_max))) != 0 {
            return _mm256_i32gather_ps::<4>(table.as_ptr(), c);
        }
        let shifted = _mm256_sll_epi32(v, _mm_cvtsi32_si128(l.shift));
        let m = _mm256_mul_ps(_mm256_castsi256_ps(shifted), _mm256_set1_ps(l.rebase));
        let s = _mm256_sll_epi32(
            _mm256_and_si256(c, _mm256_set1_epi32(0x80)),
            _mm_cvtsi32_si128(24),
        );
        _mm256_or_ps(m, _mm256_castsi256_ps(s))
    }
}

/// `dst[i] = decode(src[i]) * scale` for equal-length slices, eight codes at a time (`None`:
/// plain decoding, no multiply); the tail through the table.
///
/// # Safety
/// The CPU must have AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn decode_scaled_avx2(
    fmt: Fp8Format,
    src: &[u8],
    scale: Option<f32>,
    dst: &mut [f32],
) {
    // SAFETY: same layout; only initialised f32 values are written (the contract above).
    unsafe { decode_scaled_into_avx2(fmt, src, scale, as_uninit(dst)) }
}

/// `dst` viewed as possibly uninitialised memory (only ever written with valid values).
fn as_uninit(dst: &mut [f32]) -> &mut [std::mem::MaybeUninit<f32>] {
    // SAFETY: `MaybeUninit<f32>` has `f32`'s layout, and callers only write valid f32s.
    unsafe { &mut *(dst as *mut [f32] as *mut [std::mem::MaybeUninit<f32>]) }
}

/// [`decode_scaled_avx2`] into uninitialised memory: writes `min(src.len(), dst.len())`
/// elements.
///
/// # Safety
/// The CPU must have AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn decode_scaled_into_avx2(
    fmt: Fp8Format,
    src: &[u8],
    scale: Option<f32>,
    dst: &mut [std::mem::MaybeUninit<f32>],
) {
    use std::arch::x86_64::*;
    let (l, table) = (DecodeLayout::of(fmt), decode_table(fmt));
    let n = src.len().min(dst.len());
    let whole = n / 8 * 8;
    for i in (0..whole).step_by(8) {
        // SAFETY: i + 8 ≤ n, within both slices; the CPU has AVX2 (this function's contract).
        unsafe {
            let v = decode8_avx2(l, table, src.as_ptr().add(i));
            let v = match scale {
                Some(s) => _mm256_mul_ps(v, _mm256_set1_ps(s)),
                None => v,
            };
            _mm256_storeu_ps(dst.as_mut_ptr().add(i).cast::<f32>(), v);
        }
    }
    for i in whole..n {
        let v = table[usize::from(src[i])];
        dst[i] = std::mem::MaybeUninit::new(match scale {
            Some(s) => v * s,
            None => v,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every code of both formats, plain and scaled (powers of two and not), at every
    /// position of a group and in a tail, against the table in scalar code, bit for bit.
    #[test]
    fn every_code_matches_the_table() {
        if !std::arch::is_x86_feature_detected!("avx2") {
            println!("skipped: this CPU has no AVX2 (the table is used instead)");
            return;
        }
        let codes: Vec<u8> = (0..=255u8).chain([0x7F, 0x80, 0x01, 0xFF, 0x3C]).collect();
        for fmt in [Fp8Format::E4M3, Fp8Format::E5M2] {
            let table = decode_table(fmt);
            for scale in [None, Some(1.0), Some(0.5), Some(3.0e-3), Some(1.0e30)] {
                for start in 0..8 {
                    let src = &codes[start..];
                    let mut got = vec![0f32; src.len()];
                    // SAFETY: AVX2 is present (checked above).
                    unsafe { decode_scaled_avx2(fmt, src, scale, &mut got) };
                    for (&q, g) in src.iter().zip(&got) {
                        let want = table[usize::from(q)] * scale.unwrap_or(1.0);
                        assert_eq!(g.to_bits(), want.to_bits(), "{fmt:?} {q:#04x} {scale:?}");
                    }
                }
            }
        }
    }
}
