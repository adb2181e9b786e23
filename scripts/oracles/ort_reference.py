#!/usr/bin/env python3
"""Reference outputs from ONNX Runtime (CPU) for an ONNX model, for comparing fp8c against.

Usage (run with the project's venv: PY=$(scripts/env/python-env.sh)):

  $PY scripts/oracles/ort_reference.py MODEL.onnx --inputs IN.npz --out OUT.npz
        Runs MODEL on the inputs stored in IN.npz (keys = graph input names) and writes
        the outputs to OUT.npz (keys = graph output names).

  $PY scripts/oracles/ort_reference.py MODEL.onnx --make-inputs --inputs IN.npz --out OUT.npz \\
        [--seed N] [--shape NAME=2x64 ...] [--dim PARAM=VALUE ...] [--vocab N]
        First generates deterministic random inputs and saves them to IN.npz:
          - integer inputs named like input_ids / *ids*: token ids uniform in [0, vocab), where
            vocab is read from the embedding table the input indexes (Gather), or --vocab;
          - integer inputs whose name contains "mask": all ones;
          - integer inputs whose name contains "token_type" or "segment": all zeros;
          - other integer inputs: uniform in [0, 10) (or [0, vocab) if they feed a Gather);
          - bool inputs: all true;
          - float inputs (f16/bf16/f32/f64): standard normal, rounded to the input's dtype.
        Shapes come from the model; symbolic or unknown dims are resolved, in order, from
        --shape NAME=AxBxC (whole shape of one input), --dim PARAM=VALUE (a dim_param by name),
        then defaults: axis 0 -> 1; other dims of integer/bool inputs -> 16;
        other dims of float inputs -> 64. --fill NAME=VALUE fills one input with VALUE
        instead (a sample rate, a flag: 0 or 1 for bool inputs).

  $PY scripts/oracles/ort_reference.py MODEL.onnx --info
        Prints the model's inputs, outputs, opsets, producer and op histogram; runs nothing.

Reference-grade settings: CPUExecutionProvider only, every graph optimization disabled,
one intra-op and one inter-op thread, sequential execution, deterministic compute.
Inputs derive from --seed (default 0) and each input's name only, so adding an input does
not change the others. The .npz files are written byte-for-byte deterministically
(uncompressed, fixed zip timestamps, arrays in graph order). Keys are the ONNX names verbatim
(they may contain '/' or ':'); the member for key K is "K.npy".
"""

from __future__ import annotations

import argparse
import collections
import io
import os
import sys
import zipfile
import zlib

import numpy as np

try:
    import onnx
    from onnx import TensorProto
except ImportError:  # pragma: no cover - environment problem
    sys.exit("ort_reference.py: error: the 'onnx' package is missing; run with PY=$(scripts/env/python-env.sh)")


def die(msg: str) -> "NoReturn":  # type: ignore[name-defined]
    print(f"ort_reference.py: error: {msg}", file=sys.stderr)
    sys.exit(1)


# ----------------------------------------------------------------------------- npz i/o

def save_npz(path: str, arrays: "collections.OrderedDict[str, np.ndarray]") -> None:
    """np.savez-compatible, but byte-deterministic (fixed timestamps, no compression)."""
    tmp = f"{path}.tmp{os.getpid()}"
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as zf:
        for key, arr in arrays.items():
            buf = io.BytesIO()
            np.lib.format.write_array(buf, np.asarray(arr), allow_pickle=False)
            info = zipfile.ZipInfo(key + ".npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_STORED
            info.external_attr = 0o644 << 16
            zf.writestr(info, buf.getvalue())
    os.replace(tmp, path)


def load_npz(path: str) -> "dict[str, np.ndarray]":
    if not os.path.isfile(path):
        die(f"inputs file {path!r} does not exist (use --make-inputs to create it)")
    with np.load(path, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


# ----------------------------------------------------------------------------- model info

def dtype_name(elem: int) -> str:
    return TensorProto.DataType.Name(elem)


def dims_of(vi: "onnx.ValueInfoProto") -> "list[int | str | None] | None":
    tt = vi.type.tensor_type
    if not tt.HasField("shape"):
        return None
    out: "list[int | str | None]" = []
    for d in tt.shape.dim:
        if d.HasField("dim_value"):
            out.append(d.dim_value)
        elif d.dim_param:
            out.append(d.dim_param)
        else:
            out.append(None)
    return out


def fmt_dims(dims: "list[int | str | None] | None") -> str:
    if dims is None:
        return "<unknown rank>"
    return "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"


def real_inputs(model: "onnx.ModelProto") -> "list[onnx.ValueInfoProto]":
    inits = {t.name for t in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in inits]


def iter_nodes(graph: "onnx.GraphProto"):
    for n in graph.node:
        yield n
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                yield from iter_nodes(a.g)
            elif a.type == onnx.AttributeProto.GRAPHS:
                for g in a.graphs:
                    yield from iter_nodes(g)


def print_info(path: str, model: "onnx.ModelProto") -> None:
    g = model.graph
    ext = any(t.data_location == TensorProto.EXTERNAL for t in g.initializer)
    print(f"model     {path} ({os.path.getsize(path)} bytes)")
    print(f"producer  {model.producer_name or '-'} {model.producer_version or ''}".rstrip())
    print(f"ir        {model.ir_version}")
    print("opsets    " + ", ".join(f"{o.domain or 'ai.onnx'}:{o.version}" for o in model.opset_import))
    print(f"external  {'yes' if ext else 'no'}")
    for i in real_inputs(model):
        print(f"input     {i.name}: {dtype_name(i.type.tensor_type.elem_type)} {fmt_dims(dims_of(i))}")
    for o in g.output:
        print(f"output    {o.name}: {dtype_name(o.type.tensor_type.elem_type)} {fmt_dims(dims_of(o))}")
    nodes = list(iter_nodes(g))
    hist = collections.Counter((n.domain or "ai.onnx", n.op_type) for n in nodes)
    print(f"nodes     {len(nodes)} (top graph {len(g.node)}), initializers {len(g.initializer)},"
          f" functions {len(model.functions)}")
    init_types = collections.Counter(dtype_name(t.data_type) for t in g.initializer)
    print("init      " + ", ".join(f"{k}:{v}" for k, v in sorted(init_types.items())))
    for (dom, op), c in sorted(hist.items(), key=lambda kv: (-kv[1], kv[0])):
        print(f"op        {c:5d} {op}" + ("" if dom == "ai.onnx" else f" ({dom})"))


# ----------------------------------------------------------------------------- input generation

NP_OF = {
    TensorProto.FLOAT: np.float32,
    TensorProto.DOUBLE: np.float64,
    TensorProto.FLOAT16: np.float16,
    TensorProto.INT64: np.int64,
    TensorProto.INT32: np.int32,
    TensorProto.INT16: np.int16,
    TensorProto.INT8: np.int8,
    TensorProto.UINT8: np.uint8,
    TensorProto.UINT16: np.uint16,
    TensorProto.UINT32: np.uint32,
    TensorProto.UINT64: np.uint64,
    TensorProto.BOOL: np.bool_,
}
INT_TYPES = {TensorProto.INT64, TensorProto.INT32, TensorProto.INT16, TensorProto.INT8,
             TensorProto.UINT8, TensorProto.UINT16, TensorProto.UINT32, TensorProto.UINT64}


def gather_vocab(model: "onnx.ModelProto", name: str) -> "int | None":
    """Rows of the table a graph input indexes through Gather(data, indices=name), if known."""
    users = [n for n in model.graph.node if n.op_type == "Gather" and len(n.input) > 1 and n.input[1] == name]
    if not users:
        return None
    shapes: "dict[str, list[int | str | None]]" = {}
    for t in model.graph.initializer:
        shapes[t.name] = list(t.dims)
    for n in model.graph.node:
        if n.op_type == "Constant":
            for a in n.attribute:
                if a.name == "value":
                    shapes[n.output[0]] = list(a.t.dims)
    missing = [u.input[0] for u in users if u.input[0] not in shapes]
    if missing:
        try:  # the table may be computed (e.g. dequantized int8 weights): ask shape inference
            inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False)
            for vi in list(inferred.graph.value_info) + list(inferred.graph.input):
                d = dims_of(vi)
                if d is not None:
                    shapes.setdefault(vi.name, d)
        except Exception as e:  # noqa: BLE001 - best effort only
            print(f"ort_reference.py: note: shape inference failed ({e}); vocab unknown", file=sys.stderr)
    for u in users:
        axis = 0
        for a in u.attribute:
            if a.name == "axis":
                axis = a.i
        d = shapes.get(u.input[0])
        if d is not None and len(d) > 0:
            v = d[axis if axis >= 0 else axis + len(d)]
            if isinstance(v, int) and v > 0:
                return v
    return None


def parse_dims(text: str, what: str) -> "list[int]":
    try:
        dims = [int(x) for x in text.lower().split("x")] if text.strip() not in ("", "scalar") else []
    except ValueError:
        die(f"bad shape {text!r} in {what}; expected e.g. 2x64 (or 'scalar')")
    if any(d < 0 for d in dims):
        die(f"negative dimension in {what}")
    return dims


def resolve_shape(vi, shapes: dict, dims: dict) -> "list[int]":
    if vi.name in shapes:
        return shapes[vi.name]
    model_dims = dims_of(vi)
    if model_dims is None:
        die(f"input {vi.name!r} has unknown rank; pass --shape {vi.name}=AxB...")
    elem = vi.type.tensor_type.elem_type
    is_float = elem not in INT_TYPES and elem != TensorProto.BOOL
    out = []
    for axis, d in enumerate(model_dims):
        if isinstance(d, int) and d > 0:
            out.append(d)
        elif isinstance(d, str) and d in dims:
            out.append(dims[d])
        elif axis == 0:
            out.append(1)
        else:
            out.append(64 if is_float else 16)
    return out


def make_inputs(model, seed: int, shapes: dict, dims: dict, vocab_override: "int | None",
                fills: "dict | None" = None):
    feeds: "collections.OrderedDict[str, np.ndarray]" = collections.OrderedDict()
    for vi in real_inputs(model):
        name = vi.name
        elem = vi.type.tensor_type.elem_type
        if not vi.type.HasField("tensor_type"):
            die(f"input {name!r} is not a tensor; cannot generate it")
        shape = resolve_shape(vi, shapes, dims)
        # One stream per input, derived from the seed and the input's name only.
        rng = np.random.default_rng([seed, zlib.crc32(name.encode("utf-8"))])
        lname = name.lower()
        if fills and name in fills:
            npt = np.bool_ if elem == TensorProto.BOOL else NP_OF.get(elem)
            if npt is None:
                die(f"--fill {name}: no generator for dtype {dtype_name(elem)}")
            arr = np.full(shape, float(fills[name])).astype(npt)
            how = f"filled with {fills[name]}"
        elif elem in INT_TYPES:
            npt = NP_OF[elem]
            vocab = vocab_override or gather_vocab(model, name)
            if "mask" in lname:
                arr = np.ones(shape, npt)
                how = "ones"
            elif "token_type" in lname or "segment" in lname:
                arr = np.zeros(shape, npt)
                how = "zeros"
            else:
                hi = vocab if vocab else 10
                arr = rng.integers(0, hi, size=shape, dtype=np.int64).astype(npt)
                how = f"uniform ints in [0, {hi})" + (" (vocab)" if vocab else "")
        elif elem == TensorProto.BOOL:
            arr = np.ones(shape, np.bool_)
            how = "all true"
        elif elem in (TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16):
            arr = rng.standard_normal(size=shape, dtype=np.float64).astype(NP_OF[elem])
            how = "standard normal"
        elif elem == TensorProto.BFLOAT16:
            import ml_dtypes
            arr = rng.standard_normal(size=shape, dtype=np.float64).astype(ml_dtypes.bfloat16)
            how = "standard normal"
        else:
            die(f"input {name!r} has dtype {dtype_name(elem)}; no generator for it, pass --inputs instead")
        print(f"ort_reference.py: input {name}: {arr.dtype} {list(arr.shape)} {how}", file=sys.stderr)
        feeds[name] = arr
    return feeds


# ----------------------------------------------------------------------------- main

def main(argv: "list[str]") -> int:
    ap = argparse.ArgumentParser(
        prog="ort_reference.py",
        description="Reference-grade ONNX Runtime CPU outputs for an ONNX model.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1],
    )
    ap.add_argument("model", help="path of the .onnx model")
    ap.add_argument("--inputs", help="input .npz (read, or written with --make-inputs)")
    ap.add_argument("--out", help="output .npz to write")
    ap.add_argument("--make-inputs", action="store_true", help="generate random inputs into --inputs first")
    ap.add_argument("--seed", type=int, default=0, help="seed for --make-inputs (default 0)")
    ap.add_argument("--shape", action="append", default=[], metavar="NAME=AxB",
                    help="shape of one input for --make-inputs (repeatable)")
    ap.add_argument("--dim", action="append", default=[], metavar="PARAM=N",
                    help="value of a symbolic dim_param for --make-inputs (repeatable)")
    ap.add_argument("--vocab", type=int, help="upper bound (exclusive) for generated token ids")
    ap.add_argument("--fill", action="append", default=[], metavar="NAME=VALUE",
                    help="fill one input with a constant for --make-inputs (repeatable)")
    ap.add_argument("--info", action="store_true", help="print the model's interface and op histogram, run nothing")
    args = ap.parse_args(argv)

    if not os.path.isfile(args.model):
        die(f"model {args.model!r} does not exist")
    try:
        model = onnx.load(args.model, load_external_data=False)
    except Exception as e:  # noqa: BLE001
        die(f"cannot parse {args.model!r} as an ONNX model: {e}")

    if args.info:
        print_info(args.model, model)
        return 0
    if not args.inputs or not args.out:
        die("--inputs and --out are required (or use --info)")

    input_names = [i.name for i in real_inputs(model)]
    if args.make_inputs:
        shapes, dims = {}, {}
        for s in args.shape:
            if "=" not in s:
                die(f"bad --shape {s!r}; expected NAME=AxB")
            k, v = s.rsplit("=", 1)
            if k not in input_names:
                die(f"--shape names {k!r}, which is not a graph input (inputs: {input_names})")
            shapes[k] = parse_dims(v, f"--shape {s}")
        for s in args.dim:
            if "=" not in s:
                die(f"bad --dim {s!r}; expected PARAM=N")
            k, v = s.rsplit("=", 1)
            try:
                dims[k] = int(v)
            except ValueError:
                die(f"bad --dim {s!r}; N must be an integer")
        fills = {}
        for s in args.fill:
            if "=" not in s:
                die(f"bad --fill {s!r}; expected NAME=VALUE")
            k, v = s.rsplit("=", 1)
            if k not in input_names:
                die(f"--fill names {k!r}, which is not a graph input (inputs: {input_names})")
            fills[k] = v
        feeds = make_inputs(model, args.seed, shapes, dims, args.vocab, fills)
        os.makedirs(os.path.dirname(os.path.abspath(args.inputs)), exist_ok=True)
        save_npz(args.inputs, feeds)
    else:
        if args.shape or args.dim or args.vocab or args.fill:
            die("--shape/--dim/--vocab/--fill only apply with --make-inputs")
        loaded = load_npz(args.inputs)
        missing = [n for n in input_names if n not in loaded]
        if missing:
            die(f"{args.inputs} lacks graph inputs {missing} (has {sorted(loaded)})")
        extra = sorted(set(loaded) - set(input_names))
        if extra:
            print(f"ort_reference.py: note: ignoring keys {extra} that are not graph inputs", file=sys.stderr)
        feeds = collections.OrderedDict((n, loaded[n]) for n in input_names)

    try:
        import onnxruntime as ort
    except ImportError:
        die("the 'onnxruntime' package is missing; run with PY=$(scripts/env/python-env.sh)")
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.use_deterministic_compute = True
    so.log_severity_level = 3  # errors only (unused-initializer warnings are noise here)
    try:
        sess = ort.InferenceSession(args.model, sess_options=so, providers=["CPUExecutionProvider"])
        out_names = [o.name for o in sess.get_outputs()]
        results = sess.run(out_names, dict(feeds))
    except Exception as e:  # noqa: BLE001
        die(f"onnxruntime {ort.__version__} failed on {args.model}: {e}")

    outs: "collections.OrderedDict[str, np.ndarray]" = collections.OrderedDict()
    for name, val in zip(out_names, results):
        arr = np.asarray(val)
        outs[name] = arr
        if arr.dtype.kind == "f" and arr.size:
            f = arr.astype(np.float64)
            stats = f"min {np.nanmin(f):.6g} max {np.nanmax(f):.6g} mean {np.nanmean(f):.6g}"
            if not np.isfinite(f).all():
                stats += " (has non-finite values)"
        else:
            stats = ""
        print(f"ort_reference.py: output {name}: {arr.dtype} {list(arr.shape)} {stats}".rstrip(), file=sys.stderr)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    save_npz(args.out, outs)
    print(f"ort_reference.py: wrote {args.out} (onnxruntime {ort.__version__}, CPU, optimizations off, 1 thread)",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
