#!/usr/bin/env python3
"""Builds a small FP8 Q/DQ ONNX model the way NVIDIA ModelOpt exports them — with onnx's Python
API only, never with fp8c — for tests of fp8c's Q/DQ import (issue #17).

Usage (with the project's venv: PY=$(scripts/python-env.sh)):

  $PY scripts/make_qdq_model.py OUT.onnx

The model: x f32[batch, 64] -> Q/DQ (E4M3FN, scalar scale) -> MatMul with an FP8 weight
initializer behind DequantizeLinear -> Add bias -> Relu -> Q/DQ -> Gemm (transB=1, FP8 weight)
-> y f32[batch, 32]. Weights are random normal (seed 0) quantized with per-tensor amax scales
(ml_dtypes' round-to-nearest-even with saturation); activation scales are fixed numbers.
Opset 19, ir_version 9: FP8 Q/DQ's first opset.
"""

import sys

import ml_dtypes
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

E4M3_MAX = 448.0


def fp8_weight(name: str, w: np.ndarray):
    """An FLOAT8E4M3FN initializer, its f32 scale (amax / 448) and a zero point."""
    scale = np.float32(np.abs(w).max() / E4M3_MAX)
    q = np.clip(w / scale, -E4M3_MAX, E4M3_MAX).astype(ml_dtypes.float8_e4m3fn)
    t = helper.make_tensor(
        name, TensorProto.FLOAT8E4M3FN, q.shape, q.view(np.uint8).tobytes(), raw=True
    )
    return t, numpy_helper.from_array(np.array(scale, np.float32), name + "_scale")


def zero_point(name: str):
    return helper.make_tensor(name, TensorProto.FLOAT8E4M3FN, [], b"\x00", raw=True)


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    rng = np.random.default_rng(0)
    w1 = rng.standard_normal((64, 128)).astype(np.float32) * 0.1
    b1 = rng.standard_normal(128).astype(np.float32) * 0.1
    w2 = rng.standard_normal((32, 128)).astype(np.float32) * 0.1  # Gemm transB=1: [N, K]
    w1q, w1s = fp8_weight("w1", w1)
    w2q, w2s = fp8_weight("w2", w2)
    inits = [
        w1q,
        w1s,
        w2q,
        w2s,
        numpy_helper.from_array(b1, "b1"),
        numpy_helper.from_array(np.array(0.02, np.float32), "x_scale"),
        numpy_helper.from_array(np.array(0.01, np.float32), "h_scale"),
        zero_point("zp"),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "x_scale", "zp"], ["xq"], name="x_q", saturate=1),
        helper.make_node("DequantizeLinear", ["xq", "x_scale", "zp"], ["xd"], name="x_dq"),
        helper.make_node("DequantizeLinear", ["w1", "w1_scale", "zp"], ["w1d"], name="w1_dq"),
        helper.make_node("MatMul", ["xd", "w1d"], ["h0"], name="fc1"),
        helper.make_node("Add", ["h0", "b1"], ["h1"], name="fc1_bias"),
        helper.make_node("Relu", ["h1"], ["h"], name="relu"),
        helper.make_node("QuantizeLinear", ["h", "h_scale", "zp"], ["hq"], name="h_q", saturate=1),
        helper.make_node("DequantizeLinear", ["hq", "h_scale", "zp"], ["hd"], name="h_dq"),
        helper.make_node("DequantizeLinear", ["w2", "w2_scale"], ["w2d"], name="w2_dq"),
        helper.make_node("Gemm", ["hd", "w2d"], ["y"], name="fc2", transB=1),
    ]
    graph = helper.make_graph(
        nodes,
        "qdq_mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 32])],
        inits,
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 19)],
        producer_name="make_qdq_model.py (onnx helper API)",
        ir_version=9,
    )
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, sys.argv[1])
    return 0


if __name__ == "__main__":
    sys.exit(main())
