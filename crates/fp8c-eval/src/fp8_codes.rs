//! The FP8 and narrow-float helpers the kernels share: a dtype's format, encoding and
//! decoding FP8 codes (fp8c-core's rounding, so bit-exact), any tensor's values as f32, and
//! f32 results stored as a float dtype. A leaf of the crate: it calls no family's kernels, so
//! the cast, quantize, block and fp8 families can all read it.

use crate::data::{Data, PAR_MIN, tensor};
use crate::error::{ErrorKind, Fail, KResult, attr_err};
use fp8c_core::Fp8Format;
use fp8c_core::NarrowFormat;
use fp8c_ir::{DType, Tensor};
use half::{bf16, f16};
use rayon::prelude::*;
use std::borrow::Cow;

/// The FP8 format of a dtype, if it is one.
pub(crate) fn format_of(d: DType) -> Option<Fp8Format> {
    match d {
        DType::F8E4M3 => Some(Fp8Format::E4M3),
        DType::F8E5M2 => Some(Fp8Format::E5M2),
        _ => None,
    }
}

/// The storage-only narrow float format of a dtype (E4M3FNUZ, E5M2FNUZ, E8M0, FP4).
pub(crate) fn narrow_of(d: DType) -> Option<NarrowFormat> {
    match d {
        DType::F8E4M3Fnuz => Some(NarrowFormat::E4M3Fnuz),
        DType::F8E5M2Fnuz => Some(NarrowFormat::E5M2Fnuz),
        DType::F8E8M0 => Some(NarrowFormat::E8M0),
        DType::F4E2M1 => Some(NarrowFormat::E2M1),
        _ => None,
    }
}

/// Decodes FP8 codes to f32 (exact).
pub(crate) fn decode(fmt: Fp8Format, codes: &[u8]) -> Vec<f32> {
    let mut out = vec![0f32; codes.len()];
    if codes.len() >= PAR_MIN {
        out.par_chunks_mut(PAR_MIN)
            .zip(codes.par_chunks(PAR_MIN))
            .for_each(|(o, c)| fp8c_core::decode_slice(fmt, c, o));
    } else {
        fp8c_core::decode_slice(fmt, codes, &mut out);
    }
    out
}

/// Encodes f32 values to FP8 codes (round to nearest even, ONNX `saturate`).
pub(crate) fn encode(fmt: Fp8Format, v: &[f32], saturate: bool) -> Vec<u8> {
    let mut out = vec![0u8; v.len()];
    if v.len() >= PAR_MIN {
        out.par_chunks_mut(PAR_MIN)
            .zip(v.par_chunks(PAR_MIN))
            .for_each(|(o, s)| fp8c_core::encode_f32_slice(fmt, s, o, saturate));
    } else {
        fp8c_core::encode_f32_slice(fmt, v, &mut out, saturate);
    }
    out
}

/// Values of any tensor as f32: floats (FP8 decoded, f64 rounded), integers and bools
/// converted with `as`. `what` names the input in messages.
pub(crate) fn float_values_any(t: &Tensor, what: &str) -> KResult<Vec<f32>> {
    if let Some(fmt) = format_of(t.dtype()) {
        return Ok(decode(fmt, t.bytes()));
    }
    if let Some(fmt) = narrow_of(t.dtype()) {
        return Ok(t
            .bytes()
            .iter()
            .map(|&c| fp8c_core::narrow::decode(fmt, c))
            .collect());
    }
    Ok(
        match Data::load(t).map_err(|f| Fail::new(f.kind, format!("{what}: {}", f.message)))? {
            Data::F32(v) => v.into_owned(),
            Data::F64(v) => v.iter().copied().map(|x| x as f32).collect(),
            Data::I64(v) => v.iter().copied().map(|x| x as f32).collect(),
            Data::I32(v) => v.iter().copied().map(|x| x as f32).collect(),
            Data::I16(v) => v.iter().copied().map(f32::from).collect(),
            Data::I8(v) => v.iter().copied().map(f32::from).collect(),
            Data::U8(v) => v.iter().copied().map(f32::from).collect(),
            Data::U16(v) => v.iter().copied().map(f32::from).collect(),
            Data::U32(v) => v.iter().copied().map(|x| x as f32).collect(),
            Data::U64(v) => v.iter().copied().map(|x| x as f32).collect(),
            Data::Bool(v) => v
                .iter()
                .copied()
                .map(|b| if b { 1.0 } else { 0.0 })
                .collect(),
        },
    )
}

/// Stores f32 results as `to` (f32, f16 or bf16: rounded once to nearest even; f64 exactly).
pub(crate) fn store_f32(v: Vec<f32>, to: DType, shape: Vec<u64>) -> KResult<Tensor> {
    let bytes = match to {
        // The values' own buffer becomes the tensor's (no byte copy).
        DType::F32 => return Data::F32(v.into()).store(to, shape),
        DType::F64 => v.iter().flat_map(|&x| f64::from(x).to_le_bytes()).collect(),
        DType::F16 => v
            .iter()
            .flat_map(|&x| f16::from_f32(x).to_le_bytes())
            .collect(),
        DType::BF16 => v
            .iter()
            .flat_map(|&x| bf16::from_f32(x).to_le_bytes())
            .collect(),
        other => {
            return attr_err!("the output type must be a float type other than FP8, got {other}");
        }
    };
    tensor(to, shape, bytes)
}

/// FP8 codes as a tensor of `dtype`: the vector becomes the tensor's storage (no copy).
pub(crate) fn codes_tensor(dtype: DType, shape: Vec<u64>, codes: Vec<u8>) -> KResult<Tensor> {
    Tensor::from_vec(dtype, shape, codes).map_err(|m| Fail::new(ErrorKind::TooLarge, m))
}

/// The values of a float tensor as f32: borrowed when it is f32 already (no copy), else
/// converted as [`float_values_any`] does.
pub(crate) fn f32_values<'a>(t: &'a Tensor, what: &str) -> KResult<Cow<'a, [f32]>> {
    if t.dtype() == DType::F32
        && let Data::F32(v) = Data::load(t)?
    {
        return Ok(v);
    }
    float_values_any(t, what).map(Cow::Owned)
}
