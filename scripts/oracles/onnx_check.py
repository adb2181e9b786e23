#!/usr/bin/env python3
"""Checks an ONNX model with ONNX's own full checker (with shape inference) and prints what it
holds, as one JSON object on stdout, for tests of fp8c's ONNX writers.

Usage (with the project's venv: PY=$(scripts/env/python-env.sh)):

  $PY scripts/oracles/onnx_check.py MODEL.onnx

Prints {"ir_version", "opsets": {domain: version}, "ops": {op_type: count},
"initializers": {onnx dtype name: count}, "initializer_bytes": n, "external_initializers": n
(initializers whose data lives in another file)}. Exits non-zero with the
checker's message if the model is invalid.
"""

import json
import sys

import onnx


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    path = sys.argv[1]
    # The full check loads external data relative to the file, runs strict shape inference.
    onnx.checker.check_model(path, full_check=True)
    model = onnx.load(path)
    ops: dict[str, int] = {}
    for node in model.graph.node:
        ops[node.op_type] = ops.get(node.op_type, 0) + 1
    inits: dict[str, int] = {}
    nbytes = 0
    external = 0
    for t in model.graph.initializer:
        external += t.data_location == onnx.TensorProto.EXTERNAL
        name = onnx.TensorProto.DataType.Name(t.data_type)
        inits[name] = inits.get(name, 0) + 1
        nbytes += len(t.raw_data)
    print(
        json.dumps(
            {
                "ir_version": model.ir_version,
                "opsets": {o.domain or "ai.onnx": o.version for o in model.opset_import},
                "ops": ops,
                "initializers": inits,
                "initializer_bytes": nbytes,
                "external_initializers": external,
            },
            sort_keys=True,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
