"""NumPy arrays to the native module and back.

Inputs: a C-contiguous array in native byte order is handed over as it is (no copy; fp8c
reads its bytes in place, so do not change it while a call that reads it is running).
Other arrays are made contiguous first (``numpy.ascontiguousarray``).

Outputs: standard dtypes as NumPy arrays; bf16 and FP8/FP4 as ml_dtypes arrays
(``bfloat16``, ``float8_e4m3fn``, ...) when ml_dtypes is installed, else widened as
``fp8c run -o out.npz`` writes them: bf16 as float32 (exact), FP8/FP4 as their uint8 codes.
"""

from __future__ import annotations

import numpy as np

_STANDARD = {
    "float64", "float32", "float16", "int64", "int32", "int16", "int8",
    "uint8", "uint16", "uint32", "uint64", "bool",
}

try:
    import ml_dtypes as _ml
except ImportError:  # pragma: no cover - exercised where ml_dtypes is missing
    _ml = None


def has_ml_dtypes() -> bool:
    """Whether bf16/FP8 outputs come back as ml_dtypes arrays."""
    return _ml is not None


def as_input(x) -> np.ndarray:
    """``x`` as an exact, C-contiguous, native-order ndarray (copied only when it is not one)."""
    a = np.asarray(x)
    if a.dtype.byteorder == ">":
        a = a.astype(a.dtype.newbyteorder("="))
    if not a.flags.c_contiguous:
        a = np.ascontiguousarray(a)
    return a


def inputs(d) -> dict:
    """A mapping of arrays as the native module takes it."""
    if not hasattr(d, "items"):
        raise TypeError(f"expected a dict of arrays by input name, got {type(d).__name__}")
    return {str(k): as_input(v) for k, v in d.items()}


def to_numpy(triple) -> np.ndarray:
    """``(dtype name, shape, bytearray)`` from the native module as an array (a view of the
    bytearray, writable)."""
    name, shape, buf = triple
    if name in _STANDARD:
        return np.frombuffer(buf, dtype=np.dtype(name)).reshape(shape)
    if _ml is not None and hasattr(_ml, name):
        return np.frombuffer(buf, dtype=np.dtype(getattr(_ml, name))).reshape(shape)
    if name == "bfloat16":
        bits = np.frombuffer(buf, dtype="<u2").astype("<u4") << 16
        return bits.view("<f4").reshape(shape)
    return np.frombuffer(buf, dtype=np.uint8).reshape(shape)


def outputs(d) -> dict:
    """A dict of native triples as arrays."""
    return {k: to_numpy(v) for k, v in d.items()}
