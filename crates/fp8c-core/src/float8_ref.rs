//! The `float8` crate's conversions, wrapped to the ONNX / TransformerEngine spec.
//!
//! This is fp8c's second, independent FP8 codec: the fast kernels in [`crate::cast`] are checked
//! against it (golden tests, property tests and an exhaustive sweep of all 2^32 f32 patterns).
//! It is slower (it converts through f64 with branches), so nothing on a hot path uses it.
//!
//! What float8 0.7 does and where we wrap it (checked in this module's tests):
//! * `F8E4M3::from_f32` / `F8E5M2::from_f32` are a port of CUDA's `__nv_cvt_double_to_fp8`
//!   with `__NV_SATFINITE`: round to nearest even from the exact value (f32 → f64 is exact, so
//!   there is one rounding), overflow and ±inf saturate to ±max. That is ONNX saturate=true.
//! * It has no public non-saturating mode (its `NoSat` path is private), so for
//!   `saturate = false` we detect overflow ourselves: |x| rounds past max exactly when it is
//!   above the midpoint between max and the next (unrepresentable) grid point, or on that
//!   midpoint when max's code is odd (ties to even). Those inputs give NaN (E4M3) or ±inf (E5M2).
//! * NaN input: E4M3 gives S.1111.111 like the spec, but E5M2 gives 0x7E | the top two
//!   mantissa bits of the input (so 0x7F for some payloads); we always return S.11111.10.
//! * Decoding a NaN code gives f16 0x7FFF widened, without its sign; we return the
//!   sign-preserving quiet f32 NaN as [`crate::cast::decode`] does.
//! * Its constants `F8E4M3::MAX` (0x7D = 416) and `F8E4M3::INFINITY` (0x7E = 448, a finite
//!   value in E4M3FN), and `F8E5M2::MAX` / `INFINITY` (0x7A, 0x7B) are off by one code; fp8c
//!   uses [`Fp8Format::max`] and [`Fp8Format::max_code`] instead.

use float8::{F8E4M3, F8E5M2};

use crate::format::Fp8Format;

/// Encodes an f32 through float8, with the spec fixes listed in the module docs.
pub fn encode_f32(fmt: Fp8Format, x: f32, saturate: bool) -> u8 {
    let sign = if x.is_sign_negative() { 0x80 } else { 0x00 };
    if x.is_nan() {
        return sign | fmt.nan_code();
    }
    let satfinite = match fmt {
        Fp8Format::E4M3 => F8E4M3::from_f32(x).to_bits(),
        Fp8Format::E5M2 => F8E5M2::from_f32(x).to_bits(),
    };
    if saturate || !overflows(fmt, x) {
        return satfinite;
    }
    sign | match fmt {
        Fp8Format::E4M3 => fmt.nan_code(),
        Fp8Format::E5M2 => 0x7C, // infinity
    }
}

/// Whether |x| rounds (to nearest even) past the format's max; true for ±inf.
fn overflows(fmt: Fp8Format, x: f32) -> bool {
    let max = f64::from(fmt.max());
    let below_max = f64::from(decode(fmt, fmt.max_code() - 1));
    let midpoint = max + (max - below_max) / 2.0; // 464 or 61440; exact in f64
    let ax = f64::from(x).abs();
    ax > midpoint || (ax == midpoint && fmt.max_code() & 1 == 1)
}

/// Decodes through float8, with a sign-preserving quiet NaN for NaN codes.
pub fn decode(fmt: Fp8Format, code: u8) -> f32 {
    let value = match fmt {
        Fp8Format::E4M3 => F8E4M3::from_bits(code).to_f32(),
        Fp8Format::E5M2 => F8E5M2::from_bits(code).to_f32(),
    };
    if value.is_nan() {
        f32::from_bits((u32::from(code & 0x80) << 24) | 0x7FC0_0000)
    } else {
        value
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pins the float8 0.7 behaviours the module docs describe, so an upgrade that changes
    /// them is noticed (and the wrappers re-checked).
    #[test]
    fn float8_quirks_we_wrap() {
        let nan_with_payload = f32::from_bits(0x7FE0_0000);
        assert_eq!(F8E5M2::from_f32(nan_with_payload).to_bits(), 0x7F);
        assert_eq!(encode_f32(Fp8Format::E5M2, nan_with_payload, true), 0x7E);
        assert!(F8E4M3::from_bits(0xFF).to_f32().is_sign_positive());
        assert!(decode(Fp8Format::E4M3, 0xFF).is_sign_negative());
        // No non-saturating mode: 1000 saturates to 448 either way in float8.
        assert_eq!(F8E4M3::from_f32(1000.0).to_bits(), 0x7E);
        assert_eq!(encode_f32(Fp8Format::E4M3, 1000.0, false), 0x7F);
        assert_eq!(encode_f32(Fp8Format::E5M2, -1e6, false), 0xFC);
        // Its MAX / INFINITY constants are one code off for both formats.
        assert_eq!(F8E4M3::MAX.to_bits(), 0x7D);
        assert_eq!(F8E4M3::INFINITY.to_f32(), 448.0);
        assert_eq!(F8E5M2::MAX.to_bits(), 0x7A);
        assert_eq!(F8E5M2::INFINITY.to_f32(), 57344.0);
    }

    #[test]
    fn agrees_with_fast_kernels_on_boundaries() {
        for fmt in Fp8Format::ALL {
            for x in [
                0.0, -0.0, 1e-30, 448.0, 449.0, 464.0, 465.0, 57344.0, 61440.0, 1e9,
            ] {
                for sat in [true, false] {
                    for x in [x, -x, f32::from_bits(f32::to_bits(x) + 1)] {
                        assert_eq!(
                            encode_f32(fmt, x, sat),
                            crate::cast::encode_f32(fmt, x, sat),
                            "{fmt} {x} saturate={sat}"
                        );
                    }
                }
            }
        }
    }
}
