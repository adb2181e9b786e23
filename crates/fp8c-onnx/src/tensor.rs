//! `TensorProto` <-> [`fp8c_ir::Tensor`], element-type mapping, external data, and the
//! `.pb` tensor files of the ONNX backend tests.
//!
//! Decoding never trusts the proto: dims must be non-negative, the element count goes through
//! [`checked_numel`] (absurd sizes are an error, never an allocation), and every data field's
//! length is checked against the dims before anything is copied.

use crate::OnnxError;
use crate::proto::TensorProto;
use crate::proto::tensor_proto::{DataLocation, DataType};
use fp8c_ir::{DType, Storage, Tensor, checked_numel};
use prost::Message;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Component, Path};

/// The IR dtype of an ONNX `TensorProto.DataType` code, or the ONNX name of an unsupported one.
pub fn dtype_from_onnx(code: i32) -> Result<DType, String> {
    Ok(match DataType::try_from(code) {
        Ok(DataType::Float) => DType::F32,
        Ok(DataType::Uint8) => DType::U8,
        Ok(DataType::Int8) => DType::I8,
        Ok(DataType::Int16) => DType::I16,
        Ok(DataType::Int32) => DType::I32,
        Ok(DataType::Int64) => DType::I64,
        Ok(DataType::Bool) => DType::Bool,
        Ok(DataType::Float16) => DType::F16,
        Ok(DataType::Double) => DType::F64,
        Ok(DataType::Bfloat16) => DType::BF16,
        Ok(DataType::Float8e4m3fn) => DType::F8E4M3,
        Ok(DataType::Float8e5m2) => DType::F8E5M2,
        Ok(DataType::Uint16) => DType::U16,
        Ok(DataType::Uint32) => DType::U32,
        Ok(DataType::Uint64) => DType::U64,
        Ok(DataType::Float8e4m3fnuz) => DType::F8E4M3Fnuz,
        Ok(DataType::Float8e5m2fnuz) => DType::F8E5M2Fnuz,
        Ok(DataType::Float8e8m0) => DType::F8E8M0,
        Ok(DataType::Float4e2m1) => DType::F4E2M1,
        Ok(other) => return Err(format!("unsupported element type {}", other.as_str_name())),
        Err(_) => return Err(format!("unknown element type code {code}")),
    })
}

/// The ONNX `TensorProto.DataType` code of an IR dtype.
pub fn dtype_to_onnx(dtype: DType) -> i32 {
    let t = match dtype {
        DType::F64 => DataType::Double,
        DType::F32 => DataType::Float,
        DType::F16 => DataType::Float16,
        DType::BF16 => DataType::Bfloat16,
        DType::F8E4M3 => DataType::Float8e4m3fn,
        DType::F8E5M2 => DataType::Float8e5m2,
        DType::I64 => DataType::Int64,
        DType::I32 => DataType::Int32,
        DType::I16 => DataType::Int16,
        DType::I8 => DataType::Int8,
        DType::U8 => DataType::Uint8,
        DType::Bool => DataType::Bool,
        DType::U16 => DataType::Uint16,
        DType::U32 => DataType::Uint32,
        DType::U64 => DataType::Uint64,
        DType::F8E4M3Fnuz => DataType::Float8e4m3fnuz,
        DType::F8E5M2Fnuz => DataType::Float8e5m2fnuz,
        DType::F8E8M0 => DataType::Float8e8m0,
        DType::F4E2M1 => DataType::Float4e2m1,
    };
    t as i32
}

/// The name ONNX gives a data type code (`FLOAT`, `UINT16`, ...), for diagnostics.
pub fn onnx_dtype_name(code: i32) -> String {
    DataType::try_from(code).map_or_else(
        |_| format!("type code {code}"),
        |t| t.as_str_name().to_string(),
    )
}

/// Element size in bytes of an ONNX data type code, where it is a whole number of bytes.
pub(crate) fn onnx_dtype_size(code: i32) -> Option<u64> {
    Some(match DataType::try_from(code).ok()? {
        DataType::Double | DataType::Int64 | DataType::Uint64 | DataType::Complex64 => 8,
        DataType::Complex128 => 16,
        DataType::Float | DataType::Int32 | DataType::Uint32 => 4,
        DataType::Float16 | DataType::Bfloat16 | DataType::Int16 | DataType::Uint16 => 2,
        DataType::Uint8
        | DataType::Int8
        | DataType::Bool
        | DataType::Float8e4m3fn
        | DataType::Float8e4m3fnuz
        | DataType::Float8e5m2
        | DataType::Float8e5m2fnuz
        | DataType::Float8e8m0 => 1,
        _ => return None,
    })
}

/// The checked dims of a tensor proto (non-negative, element count within bounds).
pub(crate) fn tensor_dims(t: &TensorProto) -> Result<(Vec<u64>, u64), OnnxError> {
    let name = t.name();
    let mut dims = Vec::with_capacity(t.dims.len());
    for &d in &t.dims {
        if d < 0 {
            return Err(OnnxError::tensor(
                name,
                format!("negative dimension {d} in dims {:?}", t.dims),
            ));
        }
        dims.push(d as u64);
    }
    let numel = checked_numel(&dims).ok_or_else(|| {
        OnnxError::tensor(
            name,
            format!(
                "dims {:?} are too large ({} elements at most)",
                t.dims,
                fp8c_ir::MAX_ELEMENTS
            ),
        )
    })?;
    Ok((dims, numel))
}

/// A tensor from a proto whose `raw_data` was read separately into `raw` (see `stream.rs`);
/// the same checks as [`tensor_from_proto`].
pub(crate) fn tensor_from_raw(t: &TensorProto, raw: Storage) -> Result<Tensor, OnnxError> {
    let name = t.name();
    let err = |msg: String| OnnxError::tensor(name, msg);
    let dtype = stored_dtype(t.data_type()).map_err(err)?;
    let (dims, numel) = tensor_dims(t)?;
    if t.segment.is_some() {
        return Err(err("segmented tensors are not supported".into()));
    }
    let want = stored_len(dtype, numel);
    if raw.len() as u64 != want {
        return Err(err(format!(
            "raw_data has {} bytes, but {} dims {dims:?} need {want}",
            raw.len(),
            dtype.name()
        )));
    }
    if dtype.packed() {
        return Tensor::from_bytes(dtype.ir(), dims, dtype.unpack(raw.bytes(), numel)).map_err(err);
    }
    Tensor::from_storage(dtype.ir(), dims, raw).map_err(err)
}

/// Decodes a tensor proto; `base_dir` is where external data files are looked up.
pub fn tensor_from_proto(t: &TensorProto, base_dir: Option<&Path>) -> Result<Tensor, OnnxError> {
    let name = t.name();
    let err = |msg: String| OnnxError::tensor(name, msg);
    let dtype = stored_dtype(t.data_type()).map_err(err)?;
    let (dims, numel) = tensor_dims(t)?;
    if t.segment.is_some() {
        return Err(err("segmented tensors are not supported".into()));
    }
    // numel * size fits: numel <= MAX_ELEMENTS (2^34) and size <= 8.
    let want = stored_len(dtype, numel);
    let bytes = if t.data_location == Some(DataLocation::External as i32) {
        read_external(t, base_dir, want)?
    } else if let Some(raw) = &t.raw_data {
        if raw.len() as u64 != want {
            return Err(err(format!(
                "raw_data has {} bytes, but {} dims {dims:?} need {want}",
                raw.len(),
                dtype.name()
            )));
        }
        raw.clone()
    } else {
        typed_bytes(t, dtype, numel).map_err(err)?
    };
    let bytes = if dtype.packed() {
        dtype.unpack(&bytes, numel)
    } else {
        bytes
    };
    Tensor::from_bytes(dtype.ir(), dims, bytes).map_err(err)
}

/// How a tensor proto's element type is stored: an IR dtype as it is, or ONNX's 4-bit integers
/// (INT4 / UINT4: two per byte, the first in the low nibble), which the IR holds one per byte
/// as I8 / U8 with the same values. Int4 weights arrive in weight-only quantized exports
/// (onnxruntime's `MatMulNBitsQuantizer` in QDQ format: an int4 `DequantizeLinear` per weight);
/// an I8 / U8 `DequantizeLinear` of the same integers gives the same values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stored {
    Ir(DType),
    Int4,
    Uint4,
}

impl Stored {
    /// The dtype the IR tensor has.
    fn ir(self) -> DType {
        match self {
            Stored::Ir(d) => d,
            Stored::Int4 => DType::I8,
            Stored::Uint4 => DType::U8,
        }
    }

    /// The type's name in messages (the IR's, or `int4` / `uint4`).
    fn name(self) -> String {
        match self {
            Stored::Ir(d) => d.to_string(),
            Stored::Int4 => "int4".into(),
            Stored::Uint4 => "uint4".into(),
        }
    }

    /// Two elements per byte in ONNX (FP4 and the 4-bit integers).
    fn packed(self) -> bool {
        matches!(
            self,
            Stored::Ir(DType::F4E2M1) | Stored::Int4 | Stored::Uint4
        )
    }

    /// One element per byte from ONNX's packed form; INT4 nibbles sign-extended.
    fn unpack(self, packed: &[u8], numel: u64) -> Vec<u8> {
        let mut v = unpack_nibbles(packed, numel);
        if self == Stored::Int4 {
            v.iter_mut()
                .for_each(|b| *b = (((*b << 4) as i8) >> 4) as u8);
        }
        v
    }
}

/// Whether `code` is ONNX INT4 or UINT4 (imported as I8 / U8, see [`Stored`]).
pub(crate) fn is_four_bit_int(code: i32) -> bool {
    matches!(stored_dtype(code), Ok(Stored::Int4 | Stored::Uint4))
}

/// The storage of a tensor proto's element type `code` (see [`Stored`]).
fn stored_dtype(code: i32) -> Result<Stored, String> {
    match DataType::try_from(code) {
        Ok(DataType::Int4) => Ok(Stored::Int4),
        Ok(DataType::Uint4) => Ok(Stored::Uint4),
        _ => dtype_from_onnx(code).map(Stored::Ir),
    }
}

/// Bytes ONNX stores for `numel` elements: FP4 and the 4-bit integers pack two per byte (the
/// first element in the low nibble), every other IR dtype is whole bytes.
fn stored_len(dtype: Stored, numel: u64) -> u64 {
    if dtype.packed() {
        numel.div_ceil(2)
    } else {
        numel * dtype.ir().size() as u64
    }
}

/// FP4 codes one per byte from ONNX's packed form.
fn unpack_nibbles(packed: &[u8], numel: u64) -> Vec<u8> {
    packed
        .iter()
        .flat_map(|&b| [b & 0x0F, b >> 4])
        .take(numel as usize)
        .collect()
}

/// ONNX's packed form of one-per-byte FP4 codes.
fn pack_nibbles(codes: &[u8]) -> Vec<u8> {
    codes
        .chunks(2)
        .map(|p| (p[0] & 0x0F) | (p.get(1).copied().unwrap_or(0) << 4))
        .collect()
}

/// The little-endian bytes held in the typed `*_data` fields.
fn typed_bytes(t: &TensorProto, dtype: Stored, numel: u64) -> Result<Vec<u8>, String> {
    // Packed types keep each byte (two elements) in one int32_data value.
    let name = dtype.name();
    let dtype = if dtype.packed() {
        DType::F4E2M1
    } else {
        dtype.ir()
    };
    let check = |field: &str, len: usize, numel: u64| -> Result<(), String> {
        if len as u64 != numel {
            if len == 0 {
                return Err(format!(
                    "has no data ({name} needs raw_data or {field} with {numel} values)"
                ));
            }
            return Err(format!(
                "{field} has {} values, but the dims hold {numel}",
                len
            ));
        }
        Ok(())
    };
    Ok(match dtype {
        DType::F32 => {
            check("float_data", t.float_data.len(), numel)?;
            t.float_data.iter().flat_map(|v| v.to_le_bytes()).collect()
        }
        DType::F64 => {
            check("double_data", t.double_data.len(), numel)?;
            t.double_data.iter().flat_map(|v| v.to_le_bytes()).collect()
        }
        DType::I64 => {
            check("int64_data", t.int64_data.len(), numel)?;
            t.int64_data.iter().flat_map(|v| v.to_le_bytes()).collect()
        }
        DType::I32 => {
            check("int32_data", t.int32_data.len(), numel)?;
            t.int32_data.iter().flat_map(|v| v.to_le_bytes()).collect()
        }
        DType::U32 => {
            check("uint64_data", t.uint64_data.len(), numel)?;
            t.uint64_data
                .iter()
                .flat_map(|&v| (v as u32).to_le_bytes())
                .collect()
        }
        DType::U64 => {
            check("uint64_data", t.uint64_data.len(), numel)?;
            t.uint64_data.iter().flat_map(|v| v.to_le_bytes()).collect()
        }
        // FP4: each int32_data value is one byte holding two packed elements.
        DType::F4E2M1 => {
            check("int32_data", t.int32_data.len(), numel.div_ceil(2))?;
            t.int32_data.iter().map(|&v| v as u8).collect()
        }
        // 16-bit types (f16 and bf16 as bit patterns) live in int32_data, one per element.
        DType::I16 | DType::U16 | DType::F16 | DType::BF16 => {
            check("int32_data", t.int32_data.len(), numel)?;
            t.int32_data
                .iter()
                .flat_map(|&v| (v as u16).to_le_bytes())
                .collect()
        }
        DType::Bool => {
            check("int32_data", t.int32_data.len(), numel)?;
            t.int32_data.iter().map(|&v| (v != 0) as u8).collect()
        }
        // 8-bit types (FP8 as bit patterns) also live in int32_data.
        DType::I8
        | DType::U8
        | DType::F8E4M3
        | DType::F8E5M2
        | DType::F8E4M3Fnuz
        | DType::F8E5M2Fnuz
        | DType::F8E8M0 => {
            check("int32_data", t.int32_data.len(), numel)?;
            t.int32_data.iter().map(|&v| v as u8).collect()
        }
    })
}

/// Reads `want` bytes of external data, checking the path stays inside `base_dir`.
fn read_external(
    t: &TensorProto,
    base_dir: Option<&Path>,
    want: u64,
) -> Result<Vec<u8>, OnnxError> {
    let name = t.name();
    let err = |msg: String| OnnxError::tensor(name, msg);
    let mut location = None;
    let mut offset = 0u64;
    let mut length = None;
    for kv in &t.external_data {
        let parse = |v: &str| {
            v.parse::<u64>()
                .map_err(|_| format!("external data {}: `{v}` is not a byte count", kv.key()))
        };
        match kv.key() {
            "location" => location = Some(kv.value()),
            "offset" => offset = parse(kv.value()).map_err(err)?,
            "length" => length = Some(parse(kv.value()).map_err(err)?),
            _ => {}
        }
    }
    let location = location
        .filter(|l| !l.is_empty())
        .ok_or_else(|| err("external data has no location".into()))?;
    let rel = Path::new(location);
    if rel.is_absolute()
        || rel
            .components()
            .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
    {
        return Err(err(format!(
            "external data location \"{location}\" must be a relative path inside the model's directory"
        )));
    }
    let base = base_dir.ok_or_else(|| {
        err(format!(
            "external data \"{location}\" needs the model's directory (load the model from a file)"
        ))
    })?;
    // A model named without a directory ("m.onnx") has the empty path as its parent.
    let base = if base.as_os_str().is_empty() {
        Path::new(".")
    } else {
        base
    };
    let path = base.join(rel);
    let ioerr = |e: std::io::Error| err(format!("external data file \"{}\": {e}", path.display()));
    // The data must stay inside the model's folder: no link may lead out of it (a link to
    // /etc/passwd would otherwise be read and copied into the weights).
    let inside = std::fs::canonicalize(&path)
        .and_then(|p| Ok((p, std::fs::canonicalize(base)?)))
        .map_err(ioerr)?;
    if !inside.0.starts_with(&inside.1) {
        return Err(err(format!(
            "external data \"{location}\" leads outside the model's directory (through a symbolic link)"
        )));
    }
    if !std::fs::metadata(&path).map_err(ioerr)?.is_file() {
        return Err(err(format!(
            "external data \"{location}\" is not a regular file"
        )));
    }
    let mut file = std::fs::File::open(&path).map_err(ioerr)?;
    let file_len = file.metadata().map_err(ioerr)?.len();
    let length = match length {
        Some(l) => l,
        None => file_len.saturating_sub(offset),
    };
    if length != want {
        return Err(err(format!(
            "external data length is {length} bytes, but the dims need {want}"
        )));
    }
    match offset.checked_add(length) {
        Some(end) if end <= file_len => {}
        _ => {
            return Err(err(format!(
                "external data file \"{}\" has {file_len} bytes, too short for offset {offset} + length {length}",
                path.display()
            )));
        }
    }
    file.seek(SeekFrom::Start(offset)).map_err(ioerr)?;
    let mut buf = vec![0u8; length as usize];
    file.read_exact(&mut buf).map_err(ioerr)?;
    Ok(buf)
}

/// A tensor proto holding `tensor` as raw little-endian data.
pub fn tensor_to_proto(name: &str, tensor: &Tensor) -> TensorProto {
    TensorProto {
        name: Some(name.to_string()),
        dims: tensor.shape().iter().map(|&d| d as i64).collect(),
        data_type: Some(dtype_to_onnx(tensor.dtype())),
        raw_data: Some(if tensor.dtype() == DType::F4E2M1 {
            pack_nibbles(tensor.bytes())
        } else {
            tensor.bytes().to_vec()
        }),
        ..Default::default()
    }
}

/// Decodes a serialized `TensorProto` (an ONNX backend test's `input_0.pb`). FP8 tensors
/// keep their raw bytes with dtype F8E4M3 / F8E5M2; external data is not allowed.
pub fn decode_tensor_pb(bytes: &[u8]) -> Result<Tensor, OnnxError> {
    let t = TensorProto::decode(bytes).map_err(|e| OnnxError::Decode {
        what: "tensor",
        reason: crate::error::protobuf_reason(&e),
    })?;
    tensor_from_proto(&t, None)
}

/// Reads a serialized `TensorProto` file (see [`decode_tensor_pb`]).
pub fn load_tensor_pb(path: &Path) -> Result<Tensor, OnnxError> {
    let run = || {
        check_regular(path)?;
        let bytes = std::fs::read(path)?;
        decode_tensor_pb(&bytes)
    };
    run().map_err(|e| e.in_file(path))
}

/// Writes `tensor` as a serialized `TensorProto` named `name`.
/// The bytes of a `.pb` tensor file (a serialized `TensorProto` named `name`).
pub fn tensor_pb_bytes(name: &str, tensor: &Tensor) -> Vec<u8> {
    tensor_to_proto(name, tensor).encode_to_vec()
}

/// A STRING `TensorProto` of `shape` holding `strings` (row-major), encoded: a model's string
/// output (class labels) as onnxruntime's test data stores it.
pub fn string_tensor_pb_bytes(name: &str, shape: &[u64], strings: &[&str]) -> Vec<u8> {
    TensorProto {
        name: Some(name.to_string()),
        dims: shape.iter().map(|&d| d as i64).collect(),
        data_type: Some(crate::proto::tensor_proto::DataType::String as i32),
        string_data: strings.iter().map(|s| s.as_bytes().to_vec()).collect(),
        ..Default::default()
    }
    .encode_to_vec()
}

/// Writes a `.pb` tensor file (plainly; the CLI writes through its checked, atomic outputs).
pub fn save_tensor_pb(path: &Path, name: &str, tensor: &Tensor) -> Result<(), OnnxError> {
    std::fs::write(path, tensor_to_proto(name, tensor).encode_to_vec())
        .map_err(|e| OnnxError::Io(e).in_file(path))
}

/// Refuses anything but a regular file (`/dev/zero` would be read forever, a FIFO would block).
pub(crate) fn check_regular(path: &Path) -> Result<(), OnnxError> {
    if !std::fs::metadata(path)?.is_file() {
        return Err(OnnxError::Io(std::io::Error::other(
            "not a regular file (a device, FIFO or directory)",
        )));
    }
    Ok(())
}
