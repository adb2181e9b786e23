//! The two FP8 element types fp8c emits and their limits.
//!
//! Both follow the OCP FP8 specification as ONNX (`FLOAT8E4M3FN`, `FLOAT8E5M2`), CUDA
//! (`__nv_fp8_e4m3`, `__nv_fp8_e5m2`) and ml_dtypes (`float8_e4m3fn`, `float8_e5m2`) define them:
//!
//! | format | bias | max finite | infinities | NaN codes (per sign) | smallest subnormal |
//! |--------|------|------------|------------|----------------------|--------------------|
//! | E4M3   | 7    | 448        | none       | S.1111.111 only      | 2^-9               |
//! | E5M2   | 15   | 57344      | S.11111.00 | S.11111.{01,10,11}   | 2^-16              |

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::CoreError;

/// An FP8 element type: E4M3 (the "FN" variant: no infinities) or E5M2.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Fp8Format {
    /// 1 sign, 4 exponent, 3 mantissa bits; max 448; no infinities; NaN = S.1111.111.
    E4M3,
    /// 1 sign, 5 exponent, 2 mantissa bits; max 57344; ±inf; three NaN codes per sign.
    E5M2,
}

impl Fp8Format {
    /// Both formats, in code order.
    pub const ALL: [Fp8Format; 2] = [Fp8Format::E4M3, Fp8Format::E5M2];

    /// Largest finite value (448 or 57344): TransformerEngine's `fp8_max`.
    pub const fn max(self) -> f32 {
        match self {
            Fp8Format::E4M3 => 448.0,
            Fp8Format::E5M2 => 57344.0,
        }
    }

    /// Smallest positive normal value (2^-6 or 2^-14).
    pub const fn min_normal(self) -> f32 {
        match self {
            Fp8Format::E4M3 => f32::from_bits(0x3C80_0000), // 2^-6
            Fp8Format::E5M2 => f32::from_bits(0x3880_0000), // 2^-14
        }
    }

    /// Smallest positive subnormal value (2^-9 or 2^-16).
    pub const fn min_subnormal(self) -> f32 {
        match self {
            Fp8Format::E4M3 => f32::from_bits(0x3B00_0000), // 2^-9
            Fp8Format::E5M2 => f32::from_bits(0x3780_0000), // 2^-16
        }
    }

    /// Number of explicit mantissa bits (3 or 2).
    pub const fn mantissa_bits(self) -> u32 {
        match self {
            Fp8Format::E4M3 => 3,
            Fp8Format::E5M2 => 2,
        }
    }

    /// Code of +max (0x7E or 0x7B); -max is this | 0x80.
    pub const fn max_code(self) -> u8 {
        match self {
            Fp8Format::E4M3 => 0x7E,
            Fp8Format::E5M2 => 0x7B,
        }
    }

    /// Code fp8c emits for a positive NaN (0x7F or 0x7E); a negative NaN gets | 0x80.
    pub const fn nan_code(self) -> u8 {
        match self {
            Fp8Format::E4M3 => 0x7F,
            Fp8Format::E5M2 => 0x7E,
        }
    }

    /// Whether `code` is one of the format's NaN encodings.
    pub const fn is_nan_code(self, code: u8) -> bool {
        match self {
            Fp8Format::E4M3 => code & 0x7F == 0x7F,
            Fp8Format::E5M2 => code & 0x7F > 0x7C,
        }
    }

    /// Lowercase name as used in IR text, TOML and on the command line ("e4m3", "e5m2").
    pub const fn name(self) -> &'static str {
        match self {
            Fp8Format::E4M3 => "e4m3",
            Fp8Format::E5M2 => "e5m2",
        }
    }
}

impl fmt::Display for Fp8Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Fp8Format {
    type Err = CoreError;

    /// Accepts "e4m3" and "e5m2" in any case, and ONNX's spelling "float8e4m3fn" / "float8e5m2".
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "e4m3" | "e4m3fn" | "float8e4m3fn" => Ok(Fp8Format::E4M3),
            "e5m2" | "float8e5m2" => Ok(Fp8Format::E5M2),
            _ => Err(CoreError::UnknownFp8Format(s.to_string())),
        }
    }
}
