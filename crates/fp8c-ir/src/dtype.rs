//! Element types of IR tensors.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// The element type of a tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    F64,
    F32,
    F16,
    BF16,
    /// FP8 E4M3 "FN" variant: max 448, no infinities.
    F8E4M3,
    /// FP8 E5M2: max 57344, with infinities.
    F8E5M2,
    I64,
    I32,
    I16,
    I8,
    U8,
    /// Unsigned 16-, 32- and 64-bit integers (ONNX UINT16/32/64).
    U16,
    U32,
    U64,
    Bool,
    /// FP8 E4M3 "FNUZ" (AMD MI300's FP8): bias 8, max 240, no infinities, no negative zero,
    /// one NaN code (0x80). Storage only: Cast, QuantizeLinear/DequantizeLinear and data
    /// movement; fp8c's own FP8 compute uses [`DType::F8E4M3`].
    F8E4M3Fnuz,
    /// FP8 E5M2 "FNUZ": bias 16, max 57344, no infinities, no negative zero, NaN = 0x80.
    /// Storage only, like [`DType::F8E4M3Fnuz`].
    F8E5M2Fnuz,
    /// FP8 E8M0 (the OCP MX block-scale type): an unsigned power of two 2^(code − 127),
    /// code 0xFF = NaN; no zero, no sign. Storage only.
    F8E8M0,
    /// FP4 E2M1 (OCP MX FP4): ±{0, 0.5, 1, 1.5, 2, 3, 4, 6}, no infinities or NaN. Stored one
    /// element per byte in the IR (low nibble); ONNX packs two per byte, the importer and
    /// exporter unpack and pack. Storage only.
    F4E2M1,
}

impl DType {
    /// Every dtype, in a fixed order.
    pub const ALL: [DType; 19] = [
        DType::F64,
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::F8E4M3,
        DType::F8E5M2,
        DType::I64,
        DType::I32,
        DType::I16,
        DType::I8,
        DType::U8,
        DType::U16,
        DType::U32,
        DType::U64,
        DType::Bool,
        DType::F8E4M3Fnuz,
        DType::F8E5M2Fnuz,
        DType::F8E8M0,
        DType::F4E2M1,
    ];

    /// Size of one element in bytes.
    pub fn size(self) -> usize {
        match self {
            DType::F64 | DType::I64 | DType::U64 => 8,
            DType::F32 | DType::I32 | DType::U32 => 4,
            DType::F16 | DType::BF16 | DType::I16 | DType::U16 => 2,
            DType::F8E4M3
            | DType::F8E5M2
            | DType::I8
            | DType::U8
            | DType::Bool
            | DType::F8E4M3Fnuz
            | DType::F8E5M2Fnuz
            | DType::F8E8M0
            | DType::F4E2M1 => 1,
        }
    }

    /// The text name used in the IR (`f32`, `f8e4m3`, ...).
    pub fn name(self) -> &'static str {
        match self {
            DType::F64 => "f64",
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::F8E4M3 => "f8e4m3",
            DType::F8E5M2 => "f8e5m2",
            DType::I64 => "i64",
            DType::I32 => "i32",
            DType::I16 => "i16",
            DType::I8 => "i8",
            DType::U8 => "u8",
            DType::U16 => "u16",
            DType::U32 => "u32",
            DType::U64 => "u64",
            DType::Bool => "bool",
            DType::F8E4M3Fnuz => "f8e4m3fnuz",
            DType::F8E5M2Fnuz => "f8e5m2fnuz",
            DType::F8E8M0 => "f8e8m0",
            DType::F4E2M1 => "f4e2m1",
        }
    }

    /// True for the floating-point types that compute (FP8 E4M3/E5M2 included); the
    /// storage-only narrow formats ([`DType::is_narrow_float`]) are not.
    pub fn is_float(self) -> bool {
        matches!(
            self,
            DType::F64 | DType::F32 | DType::F16 | DType::BF16 | DType::F8E4M3 | DType::F8E5M2
        )
    }

    /// True for the two FP8 formats.
    pub fn is_fp8(self) -> bool {
        matches!(self, DType::F8E4M3 | DType::F8E5M2)
    }

    /// True for signed and unsigned integer types (not bool).
    pub fn is_int(self) -> bool {
        matches!(
            self,
            DType::I64
                | DType::I32
                | DType::I16
                | DType::I8
                | DType::U8
                | DType::U16
                | DType::U32
                | DType::U64
        )
    }

    /// True for the storage-only narrow float formats (E4M3FNUZ, E5M2FNUZ, E8M0, FP4 E2M1):
    /// ONNX Cast, QuantizeLinear/DequantizeLinear and data movement accept them; arithmetic
    /// does not.
    pub fn is_narrow_float(self) -> bool {
        matches!(
            self,
            DType::F8E4M3Fnuz | DType::F8E5M2Fnuz | DType::F8E8M0 | DType::F4E2M1
        )
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for DType {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        DType::ALL
            .into_iter()
            .find(|d| d.name() == s)
            .ok_or_else(|| format!("unknown dtype `{s}`"))
    }
}
