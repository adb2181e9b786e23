//! ONNX's storage-only narrow float formats, encoded from f32 and decoded to f32 bit-exactly as
//! ONNX's `Cast` does (its reference converts with ml_dtypes, and E8M0 with
//! `onnx.numpy_helper.to_float8e8m0`):
//!
//! | format    | layout       | bias | max      | specials                                   |
//! |-----------|--------------|------|----------|--------------------------------------------|
//! | E4M3FNUZ  | S.EEEE.MMM   | 8    | 240      | NaN = 0x80 only; no −0, no inf             |
//! | E5M2FNUZ  | S.EEEEE.MM   | 16   | 57344    | NaN = 0x80 only; no −0, no inf             |
//! | E8M0      | EEEEEEEE     | 127  | 2^127    | 2^(code−127); 0xFF = NaN; no sign, no zero |
//! | FP4 E2M1  | S.EE.M       | 1    | 6        | none: always saturates                     |
//!
//! fp8c computes in FP8 E4M3/E5M2 only ([`crate::Fp8Format`]); these formats are for models
//! that carry them (AMD MI300's FP8, OCP MX scales and FP4 weights): Cast, QuantizeLinear and
//! DequantizeLinear convert, and data movement copies the bytes.
//!
//! Rounding is to nearest, ties to even, once from the exact input (f16/bf16 widen to f32
//! exactly first). Out of range: with `saturate`, ±max (±inf too); without, NaN (the FNUZ
//! formats have no infinity). A result of −0 in FNUZ is +0 (0x80 is NaN). FP4 has no NaN:
//! ml_dtypes turns a NaN with the sign bit clear into 0x8 (−0) and one with it set into 0x0,
//! and ONNX's test data follow it, so fp8c does too.

/// A storage-only narrow float format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NarrowFormat {
    /// FP8 E4M3 FNUZ: bias 8, max 240, NaN = 0x80.
    E4M3Fnuz,
    /// FP8 E5M2 FNUZ: bias 16, max 57344, NaN = 0x80.
    E5M2Fnuz,
    /// FP8 E8M0: 2^(code − 127), 0xFF = NaN.
    E8M0,
    /// FP4 E2M1: ±{0, 0.5, 1, 1.5, 2, 3, 4, 6} in the low nibble.
    E2M1,
}

/// How a cast to E8M0 rounds (ONNX Cast's `round_mode`, opset 24+; default `up`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum E8M0Rounding {
    /// Any fraction rounds the exponent up (the default).
    Up,
    /// The fraction is dropped.
    Down,
    /// Round to nearest, as ONNX's reference does it (see [`encode_e8m0`]).
    Nearest,
}

impl E8M0Rounding {
    /// Parses ONNX's attribute value.
    pub fn from_onnx(s: &str) -> Option<Self> {
        match s {
            "up" => Some(Self::Up),
            "down" => Some(Self::Down),
            "nearest" => Some(Self::Nearest),
            _ => None,
        }
    }
}

/// Exponent and mantissa widths and bias of a sign-magnitude minifloat.
struct Layout {
    exp_bits: u32,
    man_bits: u32,
    bias: i32,
}

const fn layout(fmt: NarrowFormat) -> Layout {
    match fmt {
        NarrowFormat::E4M3Fnuz => Layout {
            exp_bits: 4,
            man_bits: 3,
            bias: 8,
        },
        NarrowFormat::E5M2Fnuz => Layout {
            exp_bits: 5,
            man_bits: 2,
            bias: 16,
        },
        // E8M0 has no sign or mantissa; its codec is separate.
        NarrowFormat::E8M0 => Layout {
            exp_bits: 8,
            man_bits: 0,
            bias: 127,
        },
        NarrowFormat::E2M1 => Layout {
            exp_bits: 2,
            man_bits: 1,
            bias: 1,
        },
    }
}

impl NarrowFormat {
    /// Largest finite value.
    pub fn max(self) -> f32 {
        match self {
            NarrowFormat::E4M3Fnuz => 240.0,
            NarrowFormat::E5M2Fnuz => 57344.0,
            NarrowFormat::E8M0 => f32::from_bits(0x7F00_0000), // 2^127
            NarrowFormat::E2M1 => 6.0,
        }
    }

    /// Code of +max (for the sign-magnitude formats).
    fn max_code(self) -> u8 {
        match self {
            NarrowFormat::E4M3Fnuz | NarrowFormat::E5M2Fnuz => 0x7F,
            NarrowFormat::E8M0 => 0xFE,
            NarrowFormat::E2M1 => 0x7,
        }
    }

    /// Position of the sign bit (sign-magnitude formats).
    fn sign_bit(self) -> u8 {
        match self {
            NarrowFormat::E2M1 => 0x8,
            _ => 0x80,
        }
    }
}

/// Decodes a code to f32 (exact; NaN codes give the quiet f32 NaN).
pub fn decode(fmt: NarrowFormat, code: u8) -> f32 {
    match fmt {
        NarrowFormat::E8M0 => {
            match code {
                0xFF => f32::NAN,
                0 => f32::from_bits(0x0040_0000), // 2^-127, an f32 subnormal
                c => f32::from_bits(u32::from(c) << 23),
            }
        }
        NarrowFormat::E4M3Fnuz | NarrowFormat::E5M2Fnuz if code == 0x80 => f32::NAN,
        _ => {
            let l = layout(fmt);
            let code = code & (fmt.sign_bit() | (fmt.sign_bit() - 1));
            let neg = code & fmt.sign_bit() != 0;
            let e = i32::from((code >> l.man_bits) & ((1 << l.exp_bits) - 1) as u8);
            let m = f32::from(code & ((1 << l.man_bits) - 1) as u8);
            let frac = m / (1u32 << l.man_bits) as f32;
            let v = if e == 0 {
                frac * 2f32.powi(1 - l.bias)
            } else {
                (1.0 + frac) * 2f32.powi(e - l.bias)
            };
            if neg { -v } else { v }
        }
    }
}

/// Encodes an f32 to E4M3FNUZ, E5M2FNUZ or FP4 E2M1 (see the module docs; FP4 always
/// saturates). E8M0 takes [`encode_e8m0`] (this calls it with round mode `up`).
pub fn encode(fmt: NarrowFormat, x: f32, saturate: bool) -> u8 {
    if fmt == NarrowFormat::E8M0 {
        return encode_e8m0(x, saturate, E8M0Rounding::Up);
    }
    let fp4 = fmt == NarrowFormat::E2M1;
    let neg = x.is_sign_negative();
    let sign = if neg { fmt.sign_bit() } else { 0 };
    if x.is_nan() {
        return if fp4 {
            if neg { 0x0 } else { 0x8 }
        } else {
            0x80
        };
    }
    let l = layout(fmt);
    let a = f64::from(x.abs());
    let over = |sign: u8| {
        if saturate || fp4 {
            fmt.max_code() | sign
        } else {
            0x80
        }
    };
    if a.is_infinite() {
        return over(sign);
    }
    // Quantum of a's binade (never below the subnormal quantum), then round to nearest even.
    let emin = 1 - l.bias;
    let e = if a == 0.0 {
        emin
    } else {
        (a.log2().floor() as i32).max(emin)
    };
    // log2 of a power-of-two boundary can land one off; fix the binade exactly.
    let e = if a >= 2f64.powi(e + 1) {
        e + 1
    } else if e > emin && a < 2f64.powi(e) {
        e - 1
    } else {
        e
    };
    let q = 2f64.powi(e - l.man_bits as i32);
    let r = (a / q).round_ties_even() * q;
    if r > f64::from(fmt.max()) {
        return over(sign);
    }
    if r == 0.0 {
        // FNUZ has no −0 (0x80 is NaN); FP4 keeps the sign.
        return if fp4 { sign } else { 0 };
    }
    // Code of r: exponent field and mantissa.
    let er = (r.log2().floor() as i32).max(emin);
    let er = if r >= 2f64.powi(er + 1) { er + 1 } else { er };
    let normal = r >= 2f64.powi(emin);
    let (ef, mant) = if normal {
        let m = (r / 2f64.powi(er) - 1.0) * f64::from(1u32 << l.man_bits);
        ((er + l.bias) as u8, m as u8)
    } else {
        (0, (r / 2f64.powi(emin - l.man_bits as i32)) as u8)
    };
    sign | (ef << l.man_bits) | mant
}

/// Encodes an f32 to E8M0 as `onnx.numpy_helper.to_float8e8m0` does: the sign is dropped; NaN
/// and ±inf give 0xFF; the f32 exponent field is the code, raised by one when the mode rounds
/// up (`up`: any fraction; `nearest`: guard bit set and round/sticky bits or a nonzero
/// exponent), except past 0xFE when `saturate`.
pub fn encode_e8m0(x: f32, saturate: bool, round: E8M0Rounding) -> u8 {
    let bits = x.to_bits();
    let exponent = ((bits >> 23) & 0xFF) as u16;
    if exponent == 0xFF {
        return 0xFF;
    }
    let up = match round {
        E8M0Rounding::Down => false,
        E8M0Rounding::Up => bits & 0x7F_FFFF != 0,
        E8M0Rounding::Nearest => {
            let g = bits & 0x40_0000 != 0;
            let r = bits & 0x20_0000 != 0;
            let s = bits & 0x1F_FFFF != 0;
            g && (r || s || exponent > 0)
        }
    };
    let up = up && !(saturate && exponent == 0xFE);
    (exponent + u16::from(up)) as u8
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_round_trips() {
        for fmt in [
            NarrowFormat::E4M3Fnuz,
            NarrowFormat::E5M2Fnuz,
            NarrowFormat::E2M1,
        ] {
            let codes: u8 = if fmt == NarrowFormat::E2M1 { 15 } else { 255 };
            for c in 0..=codes {
                let v = decode(fmt, c);
                if v.is_nan() || (v == 0.0 && c != 0 && fmt != NarrowFormat::E2M1) {
                    continue;
                }
                assert_eq!(encode(fmt, v, false), c, "{fmt:?} code {c:#x} = {v}");
            }
        }
        for c in 0..255u8 {
            let v = decode(NarrowFormat::E8M0, c);
            assert_eq!(encode_e8m0(v, true, E8M0Rounding::Down), c, "{c:#x}");
        }
    }
}
