//! NumPy arrays in, tensors out, and back.
//!
//! An input array must be a C-contiguous, native-order `numpy.ndarray` (the Python side makes
//! one with `numpy.ascontiguousarray`, which copies nothing when the array already is one).
//! Its bytes are not copied: the tensor reads them in place through
//! `fp8c_ir::Storage::from_foreign`, holding a reference to the array for as long as the
//! tensor lives; the library copies them only if it writes (it never writes an input it was
//! handed). Arrays misaligned for their element type are copied.
//!
//! Outputs go back as `(dtype name, shape, bytearray)`: one copy into a `bytearray` that the
//! Python side views as an array of the right type (`numpy.frombuffer`, writable).
//!
//! dtypes by NumPy name: the standard ones, and ml_dtypes' `bfloat16`, `float8_e4m3fn`,
//! `float8_e5m2`, `float8_e4m3fnuz`, `float8_e5m2fnuz`, `float8_e8m0fnu`, `float4_e2m1fn`.

use crate::errors::{invalid, type_error};
use fp8c_session::{DType, Tensor};
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyDict};
use std::collections::BTreeMap;
use std::sync::Arc;

/// NumPy's dtype name → fp8c's dtype.
const DTYPES: [(&str, DType); 19] = [
    ("float64", DType::F64),
    ("float32", DType::F32),
    ("float16", DType::F16),
    ("bfloat16", DType::BF16),
    ("float8_e4m3fn", DType::F8E4M3),
    ("float8_e5m2", DType::F8E5M2),
    ("float8_e4m3fnuz", DType::F8E4M3Fnuz),
    ("float8_e5m2fnuz", DType::F8E5M2Fnuz),
    ("float8_e8m0fnu", DType::F8E8M0),
    ("float4_e2m1fn", DType::F4E2M1),
    ("int64", DType::I64),
    ("int32", DType::I32),
    ("int16", DType::I16),
    ("int8", DType::I8),
    ("uint8", DType::U8),
    ("uint16", DType::U16),
    ("uint32", DType::U32),
    ("uint64", DType::U64),
    ("bool", DType::Bool),
];

/// The bytes of a NumPy array, kept alive by a reference to it.
struct ArrayBytes {
    /// The array (never resized while referenced: NumPy refuses to).
    _array: Py<PyAny>,
    addr: usize,
    len: usize,
}

impl AsRef<[u8]> for ArrayBytes {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: `addr` and `len` are the data pointer and byte size an exact
        // `numpy.ndarray` reported for its C-contiguous buffer (`tensor_from_array`), nonzero
        // and non-null; the array is referenced by `_array`, so the buffer lives as long as
        // `self`. The library never writes through it (`Storage::from_foreign` copies first).
        unsafe { std::slice::from_raw_parts(self.addr as *const u8, self.len) }
    }
}

/// A tensor over the bytes of `a`, an exact `numpy.ndarray` in C order and native byte order
/// (`what` names it in messages: `input "x"`).
pub fn tensor_from_array(a: &Bound<'_, PyAny>, what: &str) -> PyResult<Tensor> {
    let py = a.py();
    let ndarray = py.import("numpy")?.getattr("ndarray")?;
    if !a.get_type().is(&ndarray) {
        return Err(type_error(format!(
            "{what}: expected a numpy.ndarray, got {}",
            a.get_type().name()?
        )));
    }
    let name: String = a.getattr("dtype")?.getattr("name")?.extract()?;
    let Some(&(_, dtype)) = DTYPES.iter().find(|(n, _)| *n == name) else {
        let known: Vec<&str> = DTYPES.iter().map(|(n, _)| *n).collect();
        return Err(invalid(format!(
            "{what}: dtype {name} is not one fp8c reads (it reads {})",
            known.join(", ")
        )));
    };
    let iface = a.getattr("__array_interface__")?;
    let typestr: String = iface.get_item("typestr")?.extract()?;
    if typestr.starts_with('>') {
        return Err(invalid(format!(
            "{what}: a big-endian array ({typestr}); give a native-order one (arr.astype(arr.dtype.newbyteorder('=')))"
        )));
    }
    if !iface.get_item("strides")?.is_none() {
        return Err(invalid(format!(
            "{what}: not C-contiguous; give numpy.ascontiguousarray(arr)"
        )));
    }
    let shape: Vec<u64> = iface.get_item("shape")?.extract()?;
    let (addr, _readonly): (usize, bool) = iface.get_item("data")?.extract()?;
    let len: usize = a.getattr("nbytes")?.extract()?;
    let storage = if len == 0 || addr == 0 {
        fp8c_session::Storage::from_slice(&[])
    } else if addr % dtype.size().max(1) == 0 {
        fp8c_session::Storage::from_foreign(Arc::new(ArrayBytes {
            _array: a.clone().unbind(),
            addr,
            len,
        }))
    } else {
        let bytes = ArrayBytes {
            _array: a.clone().unbind(),
            addr,
            len,
        };
        fp8c_session::Storage::from_slice(bytes.as_ref())
    };
    Tensor::from_storage(dtype, shape, storage).map_err(|e| invalid(format!("{what}: {e}")))
}

/// `{name: array}` as tensors by name.
pub fn tensors_from_dict(d: &Bound<'_, PyDict>, what: &str) -> PyResult<BTreeMap<String, Tensor>> {
    let mut out = BTreeMap::new();
    for (k, v) in d.iter() {
        let name: String = k
            .extract()
            .map_err(|_| type_error(format!("{what}: keys must be str (input names)")))?;
        let t = tensor_from_array(&v, &format!("{what} \"{name}\""))?;
        out.insert(name, t);
    }
    Ok(out)
}

/// NumPy's name of `dtype` (what `fp8c._arrays` builds the array with).
pub fn numpy_name(dtype: DType) -> &'static str {
    DTYPES
        .iter()
        .find(|(_, d)| *d == dtype)
        .map_or("uint8", |(n, _)| n)
}

/// A tensor as `(numpy dtype name, shape, bytearray)`.
pub fn tensor_to_py<'py>(py: Python<'py>, t: &Tensor) -> PyResult<Bound<'py, PyAny>> {
    let bytes = PyByteArray::new(py, t.bytes());
    (numpy_name(t.dtype()), t.shape().to_vec(), bytes)
        .into_pyobject(py)
        .map(|b| b.into_any())
}

/// Tensors by name as a dict of `(dtype, shape, bytearray)`, in `order` first (the program's
/// outputs), then any other.
pub fn tensors_to_py<'py>(
    py: Python<'py>,
    tensors: &BTreeMap<String, Tensor>,
    order: &[String],
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    for n in order {
        if let Some(t) = tensors.get(n) {
            d.set_item(n, tensor_to_py(py, t)?)?;
        }
    }
    for (n, t) in tensors {
        if !d.contains(n)? {
            d.set_item(n, tensor_to_py(py, t)?)?;
        }
    }
    Ok(d)
}
