#!/usr/bin/env python3
"""Builds the small models of `tests/onnx_export.rs`'s export cases (`fp8c compile --emit onnx`
on the forms a sweep of third-party exports found broken) with onnx's Python API only, never
with fp8c.

Usage (with the project's venv: PY=$(scripts/python-env.sh)):

  $PY scripts/make_export_models.py OUT_DIR

Writes to OUT_DIR (tests/models/export/ in the repo):
- mlp_f16.onnx, mlp_bf16.onnx: x [batch, 32] -> MatMul W1 [32, 32] -> Add b1 -> Relu ->
  MatMul W2 [32, 16] -> y [batch, 16], every tensor f16 (bf16), as a half-precision export
  from torch is;
- mlp_external.onnx + mlp_external.onnx.data: the same MLP in f32 with its weights as ONNX
  external data (onnx.save_model's save_as_external_data, every initializer in one file);
- einsum_linear.onnx: x f32 [batch, 8, 32] -> Einsum "btd,de->bte" (W1 [32, 32]) -> Relu ->
  Einsum "bte,fe->btf" (W2 [16, 32], Linear's [out, in]) -> y [batch, 8, 16]; and
  Einsum "btd,dg->bg" (W3 [32, 16]; t summed out before the product) -> pooled [batch, 16].
Weights are random normal (seed 0) scaled by 1/sqrt(fan_in); opset 17, as torch exports.
"""

import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def init(name: str, a: np.ndarray, elem: int) -> onnx.TensorProto:
    """An initializer of element type `elem` (FLOAT, FLOAT16 or BFLOAT16) holding `a`."""
    if elem == TensorProto.BFLOAT16:
        bits = (a.astype(np.float32).view(np.uint32) + 0x8000) >> 16  # round to nearest
        return helper.make_tensor(
            name, elem, a.shape, bits.astype(np.uint16).tobytes(), raw=True
        )
    dtype = np.float16 if elem == TensorProto.FLOAT16 else np.float32
    return numpy_helper.from_array(a.astype(dtype), name)


def weights(rng: np.random.Generator, *shapes: tuple) -> list:
    return [rng.standard_normal(s).astype(np.float32) / np.sqrt(s[0]) for s in shapes]


def mlp(elem: int) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w1, w2 = weights(rng, (32, 32), (32, 16))
    b1 = rng.standard_normal(32).astype(np.float32) * 0.1
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"], name="fc1"),
        helper.make_node("Add", ["h", "b1"], ["hb"], name="fc1_bias"),
        helper.make_node("Relu", ["hb"], ["r"], name="relu"),
        helper.make_node("MatMul", ["r", "w2"], ["y"], name="fc2"),
    ]
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("x", elem, ["batch", 32])],
        [helper.make_tensor_value_info("y", elem, ["batch", 16])],
        [init("w1", w1, elem), init("b1", b1, elem), init("w2", w2, elem)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def einsum_linear() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w1, w3 = weights(rng, (32, 32), (32, 16))
    (w2,) = weights(rng, (32, 16))
    nodes = [
        helper.make_node("Einsum", ["x", "w1"], ["h"], name="/proj/Einsum", equation="btd,de->bte"),
        helper.make_node("Relu", ["h"], ["r"], name="/act/Relu"),
        helper.make_node("Einsum", ["r", "w2"], ["y"], name="/out/Einsum", equation="bte,fe->btf"),
        helper.make_node("Einsum", ["x", "w3"], ["pooled"], name="/pool/Einsum", equation="btd,dg->bg"),
    ]
    f = TensorProto.FLOAT
    graph = helper.make_graph(
        nodes,
        "einsum_linear",
        [helper.make_tensor_value_info("x", f, ["batch", 8, 32])],
        [
            helper.make_tensor_value_info("y", f, ["batch", 8, 16]),
            helper.make_tensor_value_info("pooled", f, ["batch", 16]),
        ],
        [init("w1", w1, f), init("w2", w2.T.copy(), f), init("w3", w3, f)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for name, model in [
        ("mlp_f16", mlp(TensorProto.FLOAT16)),
        ("mlp_bf16", mlp(TensorProto.BFLOAT16)),
        ("einsum_linear", einsum_linear()),
    ]:
        onnx.checker.check_model(model, full_check=True)
        onnx.save_model(model, os.path.join(out, f"{name}.onnx"))
    ext = mlp(TensorProto.FLOAT)
    onnx.checker.check_model(ext, full_check=True)
    onnx.save_model(
        ext,
        os.path.join(out, "mlp_external.onnx"),
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location="mlp_external.onnx.data",
        size_threshold=0,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
