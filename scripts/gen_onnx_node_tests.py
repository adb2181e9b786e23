#!/usr/bin/env python3
"""Copies ONNX's own backend node tests (from the installed onnx wheel) for fp8c's op set.

Usage (run with the project's venv: PY=$(scripts/python-env.sh)):

  $PY scripts/gen_onnx_node_tests.py [DEST]          # default DEST: <repo>/.cache/onnx-node-tests
  $PY scripts/gen_onnx_node_tests.py --list          # print the selection, copy nothing
  $PY scripts/gen_onnx_node_tests.py --near-misses   # also list ops that would unlock most tests

Source: onnx/backend/test/data/node/<test>/ of the installed onnx package (pinned in
scripts/requirements.txt; a different version is refused unless --any-onnx-version). Each
test directory holds model.onnx and test_data_set_N/{input,output}_K.pb (TensorProto).

Selection: a test is taken when every operator its model uses (top graph, subgraphs and
model-local functions, any domain) is in the op set (default: OPS below; --ops replaces it,
--add-ops extends it), or when its name matches an --also glob; names matching an --exclude
glob are dropped. The default op set is fp8c's importer list (crates/fp8c-onnx/src/ops/mod.rs), so the cast,
castlike (FLOAT8 and others), quantizelinear and dequantizelinear tests are all included,
and so are the *_expanded variants whose function bodies use only listed ops.
Use --no-expanded to drop the *_expanded tests, --no-composite to drop the expansions of
ops outside the set (test_mvn_expanded, test_rotary_embedding_*_expanded, ...).

DEST is rebuilt from scratch on every run (it must be empty, missing, or made by this script,
recognised by its MANIFEST.tsv), so the output depends only on the onnx version and the flags.
DEST/MANIFEST.tsv lists, per test: name, ops used (sorted, ';'-separated), data sets, bytes.
"""

from __future__ import annotations

import argparse
import collections
import fnmatch
import os
import shutil
import sys

try:
    import onnx
except ImportError:  # pragma: no cover - environment problem
    sys.exit("gen_onnx_node_tests.py: error: the 'onnx' package is missing; "
             "run with PY=$(scripts/python-env.sh)")

PINNED_ONNX = "1.22.0"

# fp8c's importer op list (ai.onnx domain), plus CastLike for the castlike tests.
OPS = """
Abs Add And ArgMax ArgMin Attention AveragePool BatchNormalization Cast CastLike Ceil Clip Concat Constant
ConstantOfShape Conv ConvInteger ConvTranspose Cos CumSum DequantizeLinear Div Dropout
DynamicQuantizeLinear Einsum Equal Erf Exp Expand Flatten Floor
GRU Gather GatherElements GatherND Gelu Gemm GlobalAveragePool GlobalMaxPool Greater GreaterOrEqual HardSigmoid
HardSwish Identity If IsInf IsNaN LSTM LayerNormalization LeakyRelu Less LessOrEqual Log LogSoftmax
MatMul MatMulInteger Max MaxPool Mean Min Mod Mul Neg Not Or Pad Pow QLinearConv QLinearMatMul
QuantizeLinear RMSNormalization RNN Range Reciprocal
ReduceL1 ReduceL2 ReduceLogSum ReduceLogSumExp ReduceMax ReduceMean ReduceMin ReduceProd ReduceSum
ReduceSumSquare Relu Reshape RotaryEmbedding Round Scan Shape Sigmoid Sign Sin Slice
Softmax Split Sqrt Squeeze Sub Sum Tanh Tile TopK Transpose Trilu Unsqueeze Where Xor
ScatterElements ScatterND
DepthToSpace GroupNormalization InstanceNormalization Resize SpaceToDepth Upsample
""".split()

MANIFEST = "MANIFEST.tsv"


def die(msg: str):
    print(f"gen_onnx_node_tests.py: error: {msg}", file=sys.stderr)
    sys.exit(1)


def ops_of(model: "onnx.ModelProto") -> "set[str]":
    """Operators used anywhere in the model, as 'Op' (ai.onnx) or 'domain::Op'."""
    local = {(f.domain, f.name): f for f in model.functions}
    seen_funcs: "set[tuple[str, str]]" = set()
    out: "set[str]" = set()

    def walk(nodes):
        for n in nodes:
            key = (n.domain, n.op_type)
            if key in local:
                if key not in seen_funcs:
                    seen_funcs.add(key)
                    walk(local[key].node)
                continue
            dom = n.domain if n.domain not in ("", "ai.onnx") else ""
            out.add(f"{dom}::{n.op_type}" if dom else n.op_type)
            for a in n.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    walk(a.g.node)
                elif a.type == onnx.AttributeProto.GRAPHS:
                    for g in a.graphs:
                        walk(g.node)

    walk(model.graph.node)
    return out


def main_op(name: str, used: "list[str]", opset: "set[str]") -> str:
    """The op a test is about: the listed op its name starts with (longest match, and the
    model must use it), else the op of a one-op model, else "(composite)" (an *_expanded test
    of an op outside the set, e.g. test_mvn_expanded or test_rotary_embedding_expanded)."""
    base = name[len("test_"):].replace("_expanded", "").replace("_", "").lower()
    for op in sorted(opset, key=len, reverse=True):
        if base.startswith(op.lower()) and op in used:
            return op
    return used[0] if len(used) == 1 else "(composite)"


def dir_bytes(path: str) -> int:
    total = 0
    for dp, _, fns in os.walk(path):
        for fn in fns:
            total += os.path.getsize(os.path.join(dp, fn))
    return total


def main(argv: "list[str]") -> int:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser(
        prog="gen_onnx_node_tests.py",
        description="Copy ONNX backend node tests for fp8c's op set.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1],
    )
    ap.add_argument("dest", nargs="?", default=os.path.join(root, ".cache", "onnx-node-tests"))
    ap.add_argument("--src", help="node test directory (default: the installed onnx package's)")
    ap.add_argument("--ops", help="comma/space separated op set replacing the default")
    ap.add_argument("--add-ops", default="", help="ops added to the op set")
    ap.add_argument("--also", action="append", default=[], metavar="GLOB", help="also take tests whose name matches")
    ap.add_argument("--exclude", action="append", default=[], metavar="GLOB", help="drop tests whose name matches")
    ap.add_argument("--no-expanded", action="store_true", help="drop *_expanded tests")
    ap.add_argument("--no-composite", action="store_true",
                    help="drop tests of ops outside the set, even when their expansion uses only listed ops")
    ap.add_argument("--list", action="store_true", help="print the selected test names; copy nothing")
    ap.add_argument("--near-misses", action="store_true",
                    help="print the ops missing from the most otherwise-selectable tests")
    ap.add_argument("--any-onnx-version", action="store_true", help=f"allow onnx other than {PINNED_ONNX}")
    args = ap.parse_args(argv)

    if onnx.__version__ != PINNED_ONNX and not args.any_onnx_version and not args.src:
        die(f"onnx {onnx.__version__} is installed, expected {PINNED_ONNX} (scripts/requirements.txt); "
            "use PY=$(scripts/python-env.sh) or pass --any-onnx-version")
    src = args.src or os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "node")
    if not os.path.isdir(src):
        die(f"node test directory {src!r} not found")

    split = lambda s: [x for x in s.replace(",", " ").split() if x]  # noqa: E731
    opset = set(split(args.ops)) if args.ops is not None else set(OPS)
    opset |= set(split(args.add_ops))

    selected: "list[tuple[str, list[str]]]" = []
    missing_count: "collections.Counter[str]" = collections.Counter()
    single_miss: "collections.Counter[str]" = collections.Counter()
    total_tests = 0
    for name in sorted(os.listdir(src)):
        d = os.path.join(src, name)
        mp = os.path.join(d, "model.onnx")
        if not os.path.isfile(mp):
            continue
        total_tests += 1
        if any(fnmatch.fnmatchcase(name, g) for g in args.exclude):
            continue
        if args.no_expanded and "_expanded" in name:
            continue
        try:
            model = onnx.load(mp)
        except Exception as e:  # noqa: BLE001
            die(f"cannot load {mp}: {e}")
        used = ops_of(model)
        miss = used - opset
        also = any(fnmatch.fnmatchcase(name, g) for g in args.also)
        if args.no_composite and not also and main_op(name, sorted(used), opset) == "(composite)":
            continue
        if not miss or also:
            selected.append((name, sorted(used)))
        else:
            for m in miss:
                missing_count[m] += 1
            if len(miss) == 1:
                single_miss[next(iter(miss))] += 1

    by_op = collections.Counter(main_op(name, used, opset) for name, used in selected)

    if args.list:
        for name, used in selected:
            print(f"{name}\t{';'.join(used)}")
    else:
        dest = os.path.abspath(args.dest)
        if os.path.exists(dest):
            if not os.path.isdir(dest):
                die(f"{dest} exists and is not a directory")
            if os.listdir(dest) and not os.path.isfile(os.path.join(dest, MANIFEST)):
                die(f"{dest} is not empty and was not made by this script (no {MANIFEST}); refusing to overwrite")
            shutil.rmtree(dest)
        os.makedirs(dest)
        rows = []
        for name, used in selected:
            s = os.path.join(src, name)
            shutil.copytree(s, os.path.join(dest, name))
            sets = len([x for x in os.listdir(s) if x.startswith("test_data_set_")])
            rows.append(f"{name}\t{';'.join(used)}\t{sets}\t{dir_bytes(s)}\n")
        with open(os.path.join(dest, MANIFEST), "w", encoding="utf-8") as f:
            f.write(f"# ONNX {onnx.__version__} backend node tests selected by scripts/gen_onnx_node_tests.py\n")
            f.write("# test\tops\tdata_sets\tbytes\n")
            f.writelines(rows)

    total_bytes = sum(dir_bytes(os.path.join(src, n)) for n, _ in selected)
    n_exp = sum(1 for n, _ in selected if "_expanded" in n)
    out = sys.stderr if args.list else sys.stdout
    print(f"selected {len(selected)} of {total_tests} ONNX {onnx.__version__} node tests "
          f"({n_exp} *_expanded), {total_bytes / 1e6:.2f} MB"
          + ("" if args.list else f" -> {os.path.abspath(args.dest)}"), file=out)
    print("by op: " + ", ".join(f"{k} {v}" for k, v in sorted(by_op.items(), key=lambda kv: (-kv[1], kv[0]))),
          file=out)
    absent = sorted(o for o in opset if o not in by_op)
    if absent:
        print("ops with no test of their own: " + " ".join(absent), file=out)
    if args.near_misses:
        print("ops blocking the most other tests (tests needing it / tests where it is the only missing op):",
              file=out)
        for op, c in missing_count.most_common(25):
            print(f"  {op:28s} {c:4d} / {single_miss.get(op, 0)}", file=out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
