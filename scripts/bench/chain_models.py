#!/usr/bin/env python3
"""Chain models for the compile -> run scaling benchmark (issue #46, case 8): a graph of N
elementwise nodes in one chain, x: f32[1, 16] -> Neg -> Neg -> ... -> y (N nodes), written
with onnx's helpers.

Usage: PY=$(scripts/env/python-env.sh); $PY scripts/bench/chain_models.py N OUT.onnx
"""

import sys

import onnx
from onnx import TensorProto, helper


def chain(n: int) -> onnx.ModelProto:
    names = ["x"] + [f"t{i}" for i in range(1, n)] + ["y"]
    nodes = [helper.make_node("Neg", [names[i]], [names[i + 1]], name=f"n{i}") for i in range(n)]
    graph = helper.make_graph(
        nodes,
        f"chain{n}",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def main() -> None:
    n, out = int(sys.argv[1]), sys.argv[2]
    onnx.save(chain(n), out)


if __name__ == "__main__":
    main()
