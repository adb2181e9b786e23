#!/usr/bin/env python3
"""Summarise ONNX models: opsets, producer, op histogram, interface, initializers.

Usage: $PY scripts/oracles/onnx_ops.py MODEL.onnx... [--json]     (PY=$(scripts/env/python-env.sh))

Per model it prints the opset imports, producer, IR version, the graph inputs/outputs
(initializers listed as inputs are left out) with element types and dims (value,
dim_param name, or ? when absent), the initializer count and bytes by element type, whether
any tensor uses external data, model-local functions (and which of them are called), and the
op histogram: top-graph nodes, nodes inside subgraphs (If/Loop/Scan bodies), and nodes
inside local functions, counted separately and in total. Ops outside the default ai.onnx
domain are shown as domain:op. Only the onnx package is needed; external data is not loaded.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys

try:
    import onnx
    from onnx import TensorProto
except ImportError:  # pragma: no cover - environment problem
    sys.exit("onnx_ops.py: error: the 'onnx' package is missing; run with PY=$(scripts/env/python-env.sh)")


def dtype_name(elem: int) -> str:
    try:
        return TensorProto.DataType.Name(elem)
    except ValueError:
        return f"type{elem}"


def dims_of(vi) -> "list | None":
    tt = vi.type.tensor_type
    if not tt.HasField("shape"):
        return None
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in tt.shape.dim]


def type_str(vi) -> str:
    t = vi.type
    kind = t.WhichOneof("value")
    if kind != "tensor_type":
        return kind or "?"
    dims = dims_of(vi)
    shape = "<unknown rank>" if dims is None else "[" + ", ".join(str(d) for d in dims) + "]"
    return f"{dtype_name(t.tensor_type.elem_type)} {shape}"


def tensor_bytes(t) -> int:
    """Bytes of a TensorProto's data as stored (raw_data or typed fields)."""
    if t.data_location == TensorProto.EXTERNAL:
        for e in t.external_data:
            if e.key == "length":
                return int(e.value)
        return 0
    if t.raw_data:
        return len(t.raw_data)
    n = 1
    for d in t.dims:
        n *= d
    try:
        size = onnx.helper.tensor_dtype_to_np_dtype(t.data_type).itemsize
    except Exception:  # noqa: BLE001 - strings and exotic types
        size = 0
    return n * size


def walk(graph, where: str, out: list) -> None:
    """Collect (where, node) for a graph and its subgraphs; where is 'graph' or 'subgraph'."""
    for n in graph.node:
        out.append((where, n))
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                walk(a.g, "subgraph", out)
            elif a.type == onnx.AttributeProto.GRAPHS:
                for g in a.graphs:
                    walk(g, "subgraph", out)


def graph_uses_external(graph) -> bool:
    if any(t.data_location == TensorProto.EXTERNAL for t in graph.initializer):
        return True
    for n in graph.node:
        for a in n.attribute:
            if a.type == onnx.AttributeProto.TENSOR and a.t.data_location == TensorProto.EXTERNAL:
                return True
            if a.type == onnx.AttributeProto.GRAPH and graph_uses_external(a.g):
                return True
            if a.type == onnx.AttributeProto.GRAPHS and any(graph_uses_external(g) for g in a.graphs):
                return True
    return False


def summarise(path: str) -> dict:
    model = onnx.load(path, load_external_data=False)
    g = model.graph
    inits = {t.name for t in g.initializer}
    nodes: list = []
    walk(g, "graph", nodes)
    funcs = {(f.domain, f.name): f for f in model.functions}
    for f in model.functions:
        for n in f.node:
            nodes.append(("function", n))
    called = collections.Counter(
        (n.domain, n.op_type) for _, n in nodes if (n.domain, n.op_type) in funcs)

    def key(n) -> str:
        d = n.domain
        return n.op_type if d in ("", "ai.onnx") else f"{d}:{n.op_type}"

    hist = collections.Counter(key(n) for _, n in nodes)
    by_where = {w: collections.Counter(key(n) for ww, n in nodes if ww == w)
                for w in ("graph", "subgraph", "function")}
    init_by_type: dict = collections.defaultdict(lambda: [0, 0])
    for t in g.initializer:
        e = init_by_type[dtype_name(t.data_type)]
        e[0] += 1
        e[1] += tensor_bytes(t)
    return {
        "path": path,
        "file_bytes": os.path.getsize(path),
        "producer": f"{model.producer_name} {model.producer_version}".strip(),
        "ir_version": model.ir_version,
        "opsets": {(o.domain or "ai.onnx"): o.version for o in model.opset_import},
        "inputs": [(i.name, type_str(i)) for i in g.input if i.name not in inits],
        "outputs": [(o.name, type_str(o)) for o in g.output],
        "initializers": len(g.initializer),
        "initializer_bytes": sum(v[1] for v in init_by_type.values()),
        "initializers_by_type": {k: {"count": v[0], "bytes": v[1]} for k, v in sorted(init_by_type.items())},
        "external_data": graph_uses_external(g)
        or any(graph_uses_external(f) for f in model.functions),
        "functions": [f"{d}:{n}" if d else n for (d, n) in funcs],
        "functions_called": {f"{d}:{n}": c for (d, n), c in sorted(called.items())},
        "nodes": {"total": len(nodes), **{w: sum(c.values()) for w, c in by_where.items()}},
        "ops": dict(sorted(hist.items(), key=lambda kv: (-kv[1], kv[0]))),
        "ops_in_functions": dict(sorted(by_where["function"].items(), key=lambda kv: (-kv[1], kv[0]))),
        "ops_in_subgraphs": dict(sorted(by_where["subgraph"].items(), key=lambda kv: (-kv[1], kv[0]))),
    }


def print_summary(s: dict) -> None:
    print(f"== {s['path']} ({s['file_bytes']} bytes)")
    print(f"producer     {s['producer'] or '-'}, IR {s['ir_version']}")
    print("opsets       " + ", ".join(f"{k} {v}" for k, v in s["opsets"].items()))
    for name, t in s["inputs"]:
        print(f"input        {name}: {t}")
    for name, t in s["outputs"]:
        print(f"output       {name}: {t}")
    print(f"initializers {s['initializers']}, {s['initializer_bytes']} bytes ("
          + ", ".join(f"{k} {v['count']}/{v['bytes']} B" for k, v in s["initializers_by_type"].items()) + ")")
    print(f"external     {'yes' if s['external_data'] else 'no'}")
    n = s["nodes"]
    print(f"nodes        {n['total']} (top graph {n['graph']}, subgraphs {n['subgraph']}, "
          f"local functions {n['function']})")
    print(f"functions    {len(s['functions'])}" + (": " + ", ".join(s["functions"]) if s["functions"] else ""))
    print(f"ops          {len(s['ops'])} types: " + ", ".join(f"{k} {v}" for k, v in s["ops"].items()))
    if s["ops_in_functions"]:
        print("  in functions: " + ", ".join(f"{k} {v}" for k, v in s["ops_in_functions"].items()))
    if s["ops_in_subgraphs"]:
        print("  in subgraphs: " + ", ".join(f"{k} {v}" for k, v in s["ops_in_subgraphs"].items()))


def main(argv: "list[str]") -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("models", nargs="+", metavar="MODEL.onnx")
    ap.add_argument("--json", action="store_true", help="one JSON array instead of text")
    args = ap.parse_args(argv)
    sums = []
    for p in args.models:
        if not os.path.isfile(p):
            print(f"onnx_ops.py: error: {p}: no such file", file=sys.stderr)
            return 1
        sums.append(summarise(p))
    if args.json:
        json.dump(sums, sys.stdout, indent=1)
        print()
    else:
        for i, s in enumerate(sums):
            if i:
                print()
            print_summary(s)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
