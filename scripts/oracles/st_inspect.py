#!/usr/bin/env python3
"""Reads a safetensors file with Python's `safetensors` package (not fp8c) and prints what it
holds as JSON, for tests that fp8c's weights sidecar and checkpoints are standard files.

Usage (with the project's venv: PY=$(scripts/env/python-env.sh)):

  $PY scripts/oracles/st_inspect.py FILE.safetensors [--onnx MODEL.onnx]

Prints {"numpy_load_file": true|false, "metadata": {...}, "tensors": {name: {"dtype",
"shape", "matches_onnx"}}}. `numpy_load_file` says whether `safetensors.numpy.load_file`
read the file (it knows no bf16 or float8; those are read with `safetensors.deserialize`
and ml_dtypes). With --onnx, "matches_onnx" says whether the tensor's bytes equal those of the
model's initializer of the same name (null when the model has none).
"""

import argparse
import json
import sys

import numpy as np
from safetensors import deserialize, safe_open
from safetensors.numpy import load_file


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("path")
    ap.add_argument("--onnx")
    a = ap.parse_args()
    inits = {}
    if a.onnx:
        import onnx
        from onnx import numpy_helper

        m = onnx.load(a.onnx)
        for t in m.graph.initializer:
            arr = numpy_helper.to_array(t)
            inits[t.name] = np.ascontiguousarray(arr).tobytes()
    try:
        load_file(a.path)
        numpy_ok = True
    except Exception:  # noqa: BLE001 - bf16/float8 are not numpy dtypes
        numpy_ok = False
    with safe_open(a.path, framework="numpy") as f:
        metadata = f.metadata() or {}
    with open(a.path, "rb") as f:
        raw = f.read()
    tensors = {}
    for name, view in deserialize(raw):
        tensors[name] = {
            "dtype": view["dtype"],
            "shape": list(view["shape"]),
            "matches_onnx": (bytes(view["data"]) == inits[name]) if name in inits else None,
        }
    json.dump(
        {"numpy_load_file": numpy_ok, "metadata": metadata, "tensors": tensors},
        sys.stdout,
        sort_keys=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
