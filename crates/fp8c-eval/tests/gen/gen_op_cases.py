#!/usr/bin/env python3
"""Generates tests/golden/op_cases.json: input tensors, an fp8c op and the expected outputs,
for the golden cases every device runs (crates/fp8c-session/tests/golden/).

Expected values come from implementations fp8c did not write:
  * onnxruntime (CPU) running a one-node ONNX model, checked against the ONNX project's own
    reference evaluator (onnx.reference): the script stops if the two disagree beyond the
    case's tolerance, so a case only lands when two independent implementations agree;
  * numpy + ml_dtypes formulas, for fp8c's own FP8 ops (quantize, dequantize, amax,
    scaled_matmul) and for f16/bf16 variants onnxruntime's CPU provider lacks.

Every case names the ONNX node it was computed from and the fp8c op (its text-form name and
attributes) the Rust test evaluates; inputs the importer would fill in (slice axes/steps, clip
bounds) are written out explicitly.

Usage:  PY=$(scripts/env/python-env.sh); $PY crates/fp8c-eval/tests/gen/gen_op_cases.py
"""

from __future__ import annotations

import json
import pathlib
import sys

import ml_dtypes
import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper
from onnx.reference import ReferenceEvaluator

OUT = pathlib.Path(__file__).resolve().parents[1] / "golden" / "op_cases.json"
OPSET = 21

E4M3 = ml_dtypes.float8_e4m3fn
E5M2 = ml_dtypes.float8_e5m2
BF16 = ml_dtypes.bfloat16

DTYPES = {
    np.dtype(np.float64): "f64",
    np.dtype(np.float32): "f32",
    np.dtype(np.float16): "f16",
    np.dtype(BF16): "bf16",
    np.dtype(E4M3): "f8e4m3",
    np.dtype(E5M2): "f8e5m2",
    np.dtype(np.int64): "i64",
    np.dtype(np.int32): "i32",
    np.dtype(np.int16): "i16",
    np.dtype(np.int8): "i8",
    np.dtype(np.uint8): "u8",
    np.dtype(np.bool_): "bool",
}

rng = np.random.default_rng(20240601)
cases: list[dict] = []


def enc(a: np.ndarray) -> dict:
    a = np.asarray(a)
    return {"dtype": DTYPES[a.dtype], "shape": list(a.shape), "hex": np.ascontiguousarray(a).tobytes().hex()}


def onnx_type(a: np.ndarray) -> int:
    return helper.np_dtype_to_tensor_dtype(np.asarray(a).dtype)


def run_onnx(op_type: str, inputs: list, attrs: dict, n_out: int, opset: int, ort_too: bool = True, ref_too: bool = True):
    names = [f"in{i}" if x is not None else "" for i, x in enumerate(inputs)]
    outs = [f"out{i}" for i in range(n_out)]
    node = helper.make_node(op_type, names, outs, **attrs)
    vis = [helper.make_tensor_value_info(n, onnx_type(x), list(np.shape(x))) for n, x in zip(names, inputs) if x is not None]
    vos = [onnx.ValueInfoProto(name=o) for o in outs]
    graph = helper.make_graph([node], "case", vis, vos)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    feeds = {n: np.asarray(x) for n, x in zip(names, inputs) if x is not None}
    ref = ReferenceEvaluator(model).run(None, feeds) if ref_too else None
    if not ort_too:
        return None, ref
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    got = sess.run(None, feeds)
    return got, ref


def close(a: np.ndarray, b: np.ndarray, atol: float, rtol: float) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype.kind in "biu" or a.dtype in (np.dtype(E4M3), np.dtype(E5M2)):
        return a.tobytes() == b.tobytes() if atol == 0 else np.allclose(a.astype(np.float64), b.astype(np.float64), atol=atol, rtol=rtol, equal_nan=True)
    af, bf = a.astype(np.float64), b.astype(np.float64)
    return bool(np.allclose(af, bf, atol=atol, rtol=rtol, equal_nan=True))


def add(name: str, ir: dict, inputs: list, outputs: list, atol: float = 0.0, rtol: float = 0.0, source: str = ""):
    cases.append({
        "name": name,
        "source": source,
        "op": ir,
        "inputs": [enc(x) for x in inputs],
        "outputs": [enc(y) for y in outputs],
        "atol": atol,
        "rtol": rtol,
    })


def onnx_case(name: str, op_type: str, inputs: list, ir: dict, attrs: dict | None = None, ir_inputs: list | None = None,
              n_out: int = 1, atol: float = 0.0, rtol: float = 0.0, opset: int = OPSET, ref_check: bool = True,
              ref_atol: float | None = None):
    """A case whose expected outputs are onnxruntime's, cross-checked with onnx.reference."""
    attrs = attrs or {}
    got, ref = run_onnx(op_type, inputs, attrs, n_out, opset, ref_too=ref_check)
    if ref_check:
        for g, r in zip(got, ref):
            ta = atol if ref_atol is None else ref_atol
            if not close(g, np.asarray(r).astype(g.dtype) if np.asarray(r).dtype != g.dtype else r, ta, max(rtol, 1e-6) if ta else 0):
                sys.exit(f"{name}: onnxruntime and onnx.reference disagree:\n ort={g!r}\n ref={r!r}")
    add(name, ir, ir_inputs if ir_inputs is not None else [x for x in inputs if x is not None], got, atol, rtol,
        f"onnxruntime {ort.__version__} {op_type} opset {opset}")


def sat_cast(x: np.ndarray, fmt, saturate: bool) -> np.ndarray:
    if saturate:
        m = float(ml_dtypes.finfo(fmt).max)
        x = np.where(np.isnan(x), x, np.clip(x, -m, m)).astype(np.float32)
    return x.astype(fmt)


def fp8_case(name: str, op_type: str, inputs: list, ir: dict, attrs: dict, expected: np.ndarray):
    """A case with FP8 inputs or outputs (onnxruntime's Python API cannot pass FP8 arrays): the
    numpy + ml_dtypes formula, checked bit for bit against onnx.reference."""
    _, ref = run_onnx(op_type, inputs, attrs, 1, OPSET, ort_too=False)
    if np.asarray(ref[0]).tobytes() != expected.tobytes():
        sys.exit(f"{name}: onnx.reference and ml_dtypes disagree:\n ref={ref[0]!r}\n ml_dtypes={expected!r}")
    add(name, ir, inputs, [expected], source=f"ml_dtypes, equal to onnx.reference {op_type} opset {OPSET}")


def f32(*shape, lo=-3.0, hi=3.0):
    return rng.uniform(lo, hi, size=shape).astype(np.float32)


def i64(*vals):
    return np.array(vals, dtype=np.int64)


def op(name: str, **attrs) -> dict:
    """An fp8c op in text-form terms: its name and attributes (enum values as their words,
    tensors as {dtype, shape, hex}); the Rust test builds it with `Op::from_parts`."""
    if name in ("quantize_linear", "dequantize_linear"):
        attrs.setdefault("block_size", 0)  # per tensor / per axis (opset 21's blocks: > 0)
    return {"name": name, "attrs": attrs}


# ------------------------------------------------------------------ broadcasting arithmetic
a = np.array([[7, -7, 9, -9], [1, 0, -1, 5]], dtype=np.int64)
b = np.array([2, 2, -4, -4], dtype=np.int64)
for onnx_name, ir_name in [("Add", "add"), ("Sub", "sub"), ("Mul", "mul"), ("Div", "div")]:
    onnx_case(f"{ir_name}_i64_bcast", onnx_name, [a, b], op(ir_name))
onnx_case("div_i32_trunc", "Div", [a.astype(np.int32), np.array([[3], [-2]], dtype=np.int32)], op("div"))
onnx_case("mod_i64_python", "Mod", [a, b], op("mod", fmod=False), attrs={"fmod": 0})
onnx_case("mod_i32_c", "Mod", [a.astype(np.int32), b.astype(np.int32)], op("mod", fmod=True), attrs={"fmod": 1})
onnx_case("mod_f32_fmod", "Mod", [np.array([5.5, -5.5, 7.0, -0.0], np.float32), np.array([2.0, 2.0, -3.0, 1.0], np.float32)],
          op("mod", fmod=True), attrs={"fmod": 1})
x3, y3 = f32(2, 3, 4), f32(3, 1)
for onnx_name, ir_name in [("Add", "add"), ("Sub", "sub"), ("Mul", "mul"), ("Div", "div")]:
    onnx_case(f"{ir_name}_f32_bcast", onnx_name, [x3, y3], op(ir_name))
onnx_case("add_u8_wrap", "Add", [np.array([250, 3], np.uint8), np.array([10, 4], np.uint8)], op("add"))
onnx_case("mul_i8_wrap", "Mul", [np.array([100, -100, 7], np.int8), np.array([3, 3, -2], np.int8)], op("mul"))
onnx_case("max_f32", "Max", [x3, y3], op("max"))
onnx_case("min_i64", "Min", [a, b], op("min"))
onnx_case("pow_f32", "Pow", [np.abs(f32(2, 3)) + 0.1, f32(3)], op("pow"), atol=1e-6, rtol=1e-6)
onnx_case("pow_f32_i64", "Pow", [f32(2, 3), np.array([2, 3, 0], np.int64)], op("pow"), atol=1e-6, rtol=1e-6)
onnx_case("pow_i64", "Pow", [np.array([2, -3, 5, 0], np.int64), np.array([10, 3, 0, 2], np.int64)], op("pow"))
onnx_case("pow_i32_f32", "Pow", [np.array([1, 2, 3], np.int32), np.array([4.0, 5.0, 0.5], np.float32)], op("pow"))
for onnx_name, ir_name in [("Equal", "equal"), ("Less", "less"), ("LessOrEqual", "less_or_equal"),
                           ("Greater", "greater"), ("GreaterOrEqual", "greater_or_equal")]:
    onnx_case(f"{ir_name}_i64", onnx_name, [a, b], op(ir_name))
    onnx_case(f"{ir_name}_f32", onnx_name, [np.array([[1.0, 2.0, np.nan]], np.float32), np.array([[1.0], [3.0]], np.float32)],
              op(ir_name))
p = np.array([[True, False, True, False]])
q = np.array([[True], [False]])
for onnx_name, ir_name in [("And", "and"), ("Or", "or"), ("Xor", "xor")]:
    onnx_case(f"{ir_name}_bool", onnx_name, [p, q], op(ir_name))
onnx_case("not_bool", "Not", [p], op("not"))
onnx_case("where_f32", "Where", [np.array([[True, False, True]]), f32(2, 1), f32(3)], op("where"))
onnx_case("where_i64", "Where", [np.array([True, False]), i64(1, 2), np.array([[10], [20], [30]], np.int64)], op("where"))
lo, hi = np.float32(-1.0), np.float32(1.5)
onnx_case("clip_f32", "Clip", [f32(3, 4), np.array(lo), np.array(hi)], op("clip"))
onnx_case("clip_i64", "Clip", [a, np.array(-2, np.int64), np.array(4, np.int64)], op("clip"))
onnx_case("clip_min_above_max", "Clip", [f32(5), np.array(2.0, np.float32), np.array(1.0, np.float32)], op("clip"), ref_check=False)

# ------------------------------------------------------------------ unary float math
xu = np.concatenate([f32(20), np.array([0.0, -0.0, 1e-8, -30.0, 30.0, 0.5, -0.5, 2.5], np.float32)])
pos = np.abs(xu) + np.float32(1e-3)
for onnx_name, ir_name, data in [("Sqrt", "sqrt", pos), ("Reciprocal", "reciprocal", pos), ("Exp", "exp", xu),
                                 ("Log", "log", pos), ("Erf", "erf", xu), ("Tanh", "tanh", xu),
                                 ("Sigmoid", "sigmoid", xu), ("Relu", "relu", xu), ("Floor", "floor", xu),
                                 ("Ceil", "ceil", xu), ("Sin", "sin", xu), ("Cos", "cos", xu), ("Neg", "neg", xu),
                                 ("Abs", "abs", xu)]:
    onnx_case(f"{ir_name}_f32", onnx_name, [data], op(ir_name), atol=1e-7, rtol=2e-7)
onnx_case("neg_i32", "Neg", [np.array([1, -5, -2147483647], np.int32)], op("neg"))
onnx_case("abs_i8", "Abs", [np.array([1, -5, -127, 0], np.int8)], op("abs"))
onnx_case("relu_i32", "Relu", [np.array([1, -5, 0], np.int32)], op("relu"))
onnx_case("leaky_relu_f32", "LeakyRelu", [xu], op("leaky_relu", alpha=0.1), attrs={"alpha": 0.1}, atol=1e-7, rtol=1e-7)
onnx_case("gelu_none_f32", "Gelu", [xu], op("gelu", approximate="none"), atol=1e-6, rtol=1e-6)
onnx_case("gelu_tanh_f32", "Gelu", [xu], op("gelu", approximate="tanh"), attrs={"approximate": "tanh"}, atol=1e-6, rtol=1e-6)
special = np.array([np.nan, np.inf, -np.inf, 0.0, -1.0, 3.0], np.float32)
onnx_case("is_nan_f32", "IsNaN", [special], op("is_nan"))
onnx_case("is_inf_f32", "IsInf", [special], op("is_inf", detect_negative=True, detect_positive=True))
onnx_case("is_inf_pos_f32", "IsInf", [special], op("is_inf", detect_negative=False, detect_positive=True),
          attrs={"detect_negative": 0})
# f16 / bf16: numpy in f32, rounded once (onnxruntime lacks most bf16 CPU kernels).
for ty, tname in [(np.float16, "f16"), (BF16, "bf16")]:
    xa, xb = f32(3, 4).astype(ty), f32(4).astype(ty)
    add(f"add_{tname}", op("add"), [xa, xb], [(xa.astype(np.float32) + xb.astype(np.float32)).astype(ty)], source="numpy f32 then one rounding")
    add(f"mul_{tname}", op("mul"), [xa, xb], [(xa.astype(np.float32) * xb.astype(np.float32)).astype(ty)], source="numpy f32 then one rounding")
    add(f"div_{tname}", op("div"), [xa, xb], [(xa.astype(np.float32) / xb.astype(np.float32)).astype(ty)], source="numpy f32 then one rounding")

# ------------------------------------------------------------------ cast
castin = np.array([-2.5, -1.7, -0.5, 0.0, 0.5, 1.5, 2.5, 100.9, 65519.0, 1e-6], np.float32)
for ty, tname in [(np.int32, "i32"), (np.int64, "i64"), (np.int8, "i8"), (np.float16, "f16"), (np.float64, "f64"), (np.bool_, "bool")]:
    data = castin if ty != np.int8 else castin[:8]
    onnx_case(f"cast_f32_{tname}", "Cast", [data], op("cast", to=tname, saturate=True),
              attrs={"to": helper.np_dtype_to_tensor_dtype(np.dtype(ty))})
add("cast_f32_bf16", op("cast", to="bf16", saturate=True), [castin], [castin.astype(BF16)], source="ml_dtypes astype (round to nearest even)")
onnx_case("cast_i64_f32", "Cast", [i64(1, -3, 2**40 + 1, 2**24 + 1)], op("cast", to="f32", saturate=True),
          attrs={"to": onnx.TensorProto.FLOAT})
onnx_case("cast_i64_i8_wrap", "Cast", [i64(127, 128, -129, 300)], op("cast", to="i8", saturate=True), attrs={"to": onnx.TensorProto.INT8},
          ref_check=False)
onnx_case("cast_bool_f32", "Cast", [np.array([True, False])], op("cast", to="f32", saturate=True), attrs={"to": onnx.TensorProto.FLOAT})
# onnxruntime casts f64 to f16 through f32 (two roundings: 1 + 2^-11 + 2^-40 becomes 1.0);
# fp8c and the ONNX reference (numpy) round once.
c64 = np.array([1.0 + 2**-11 + 2**-40, 65504.0, 1e-8, -3.3], np.float64)
add("cast_f64_f16", op("cast", to="f16", saturate=True), [c64], [c64.astype(np.float16)], source="numpy astype (one rounding)")
fp8in = np.array([0.0, -0.0, 1.0, 0.3, -0.3, 448.0, 464.0, 500.0, -1000.0, 57344.0, 70000.0, np.inf, -np.inf, np.nan, 1e-4, 2.0**-10], np.float32)
for fmt, tname, proto in [(E4M3, "f8e4m3", onnx.TensorProto.FLOAT8E4M3FN), (E5M2, "f8e5m2", onnx.TensorProto.FLOAT8E5M2)]:
    for sat in (True, False):
        fp8_case(f"cast_f32_{tname}_sat{int(sat)}", "Cast", [fp8in], op("cast", to=tname, saturate=sat),
                 attrs={"to": proto, "saturate": int(sat)}, expected=sat_cast(fp8in, fmt, sat))
    codes = np.arange(256, dtype=np.uint8).view(fmt)
    fp8_case(f"cast_{tname}_f32", "Cast", [codes], op("cast", to="f32", saturate=True), attrs={"to": onnx.TensorProto.FLOAT},
             expected=codes.astype(np.float32))

# ------------------------------------------------------------------ shape and data movement
d = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
di = np.arange(24, dtype=np.int64).reshape(2, 3, 4)
onnx_case("shape_all", "Shape", [d], op("shape", start=0, end=None))
onnx_case("shape_start_end", "Shape", [d], op("shape", start=-2, end=10), attrs={"start": -2, "end": 10})
onnx_case("reshape_zero_minus_one", "Reshape", [d, i64(0, -1)], op("reshape", allowzero=False))
onnx_case("reshape_allowzero", "Reshape", [np.zeros((0, 3), np.float32), i64(3, 0)], op("reshape", allowzero=True), attrs={"allowzero": 1})
onnx_case("transpose_perm", "Transpose", [di], op("transpose", perm=[2, 0, 1]), attrs={"perm": [2, 0, 1]})
onnx_case("transpose_default", "Transpose", [di], op("transpose", perm=[]))
onnx_case("unsqueeze", "Unsqueeze", [d, i64(0, -1)], op("unsqueeze", axes=[0, -1]), ir_inputs=[d])
onnx_case("squeeze_axes", "Squeeze", [d.reshape(2, 1, 12, 1), i64(-1)], op("squeeze", axes=[-1]), ir_inputs=[d.reshape(2, 1, 12, 1)])
onnx_case("squeeze_all", "Squeeze", [d.reshape(2, 1, 12, 1)], op("squeeze", axes=None))
onnx_case("flatten_axis2", "Flatten", [d], op("flatten", axis=2), attrs={"axis": 2})
onnx_case("flatten_axis0", "Flatten", [d], op("flatten", axis=0), attrs={"axis": 0})
onnx_case("concat_axis1", "Concat", [di, di[:, :1, :], di[:, :0, :]], op("concat", axis=1), attrs={"axis": 1})
onnx_case("concat_neg_axis", "Concat", [d, d], op("concat", axis=-1), attrs={"axis": -1})
onnx_case("split_axis2", "Split", [di, i64(1, 3)], op("split", axis=2, split=[1, 3]), attrs={"axis": 2}, n_out=2, ir_inputs=[di])
starts, ends, axes_, steps = i64(-1, 0), i64(-100, 10), i64(2, 1), i64(-2, 2)
onnx_case("slice_neg_steps", "Slice", [di, starts, ends, axes_, steps], op("slice"))
onnx_case("slice_clamp", "Slice", [di, i64(1, -10), i64(2**62, 2), i64(0, 2), i64(1, 1)], op("slice"))
onnx_case("slice_reverse_all", "Slice", [di, i64(-1), i64(-(2**63)), i64(1), i64(-1)], op("slice"))
onnx_case("gather_axis0_neg", "Gather", [di, i64(-1, 0)], op("gather", axis=0))
onnx_case("gather_axis1_2d", "Gather", [d, np.array([[0, 2], [1, -3]], np.int64)], op("gather", axis=1), attrs={"axis": 1})
onnx_case("gather_scalar_idx", "Gather", [d, np.array(2, np.int32)], op("gather", axis=-1), attrs={"axis": -1})
onnx_case("expand_bidir", "Expand", [np.arange(3, dtype=np.float32).reshape(3, 1), i64(2, 1, 4)], op("expand"))
onnx_case("constant_of_shape_i64", "ConstantOfShape", [i64(2, 3)], op("constant_of_shape", value=enc(np.array([7], np.int64))),
          attrs={"value": helper.make_tensor("v", onnx.TensorProto.INT64, [1], [7])})
onnx_case("constant_of_shape_scalar", "ConstantOfShape", [np.zeros(0, np.int64)],
          op("constant_of_shape", value=enc(np.array([1.5], np.float32))),
          attrs={"value": helper.make_tensor("v", onnx.TensorProto.FLOAT, [1], [1.5])})
onnx_case("range_i64", "Range", [np.array(10, np.int64), np.array(-3, np.int64), np.array(-4, np.int64)], op("range"))
onnx_case("range_f32", "Range", [np.array(0.5, np.float32), np.array(2.0, np.float32), np.array(0.3, np.float32)], op("range"))
onnx_case("range_i32_empty", "Range", [np.array(3, np.int32), np.array(1, np.int32), np.array(1, np.int32)], op("range"))
onnx_case("tile", "Tile", [di[:, :2, :2], i64(2, 1, 3)], op("tile"))
pad_x = np.arange(12, dtype=np.float32).reshape(3, 4)
for mode in ["constant", "reflect", "edge", "wrap"]:
    pads = i64(1, 2, 2, 1)
    onnx_case(f"pad_{mode}", "Pad", [pad_x, pads, np.array(-1.0, np.float32)], op("pad", mode=mode),
              attrs={"mode": mode}, ref_check=(mode != "wrap"))
onnx_case("pad_negative_crop", "Pad", [pad_x, i64(-1, 1, 0, -2), np.array(9.0, np.float32)], op("pad", mode="constant"),
          ref_check=False)

# ------------------------------------------------------------------ linear algebra
for sa, sb, nm in [((3, 4), (4, 5), "2d"), ((2, 1, 3, 4), (3, 4, 2), "bcast"), ((4,), (2, 4, 3), "vec_mat"),
                   ((2, 3, 4), (4,), "mat_vec"), ((4,), (4,), "dot")]:
    onnx_case(f"matmul_{nm}", "MatMul", [f32(*sa), f32(*sb)], op("matmul"), atol=1e-5, rtol=1e-5)
onnx_case("matmul_i64", "MatMul", [np.arange(6, dtype=np.int64).reshape(2, 3) - 2, np.arange(12, dtype=np.int64).reshape(3, 4)], op("matmul"))
big_a, big_b = f32(16, 48, lo=-1, hi=1), f32(48, 24, lo=-1, hi=1)
onnx_case("matmul_16x48x24", "MatMul", [big_a, big_b], op("matmul"), atol=2e-5, rtol=1e-5)
ga, gb, gc = f32(4, 3), f32(5, 3), f32(5)
onnx_case("gemm_trans_b_bias", "Gemm", [ga.T.copy(), gb, gc], op("gemm", alpha=0.5, beta=2.0, trans_a=True, trans_b=True),
          attrs={"alpha": 0.5, "beta": 2.0, "transA": 1, "transB": 1}, atol=1e-5, rtol=1e-5)
onnx_case("gemm_c_col", "Gemm", [f32(3, 4), f32(4, 2), f32(3, 1)], op("gemm", alpha=1.0, beta=1.0, trans_a=False, trans_b=False),
          atol=1e-5, rtol=1e-5)
onnx_case("gemm_no_c", "Gemm", [f32(3, 4), f32(4, 2)], op("gemm", alpha=1.0, beta=1.0, trans_a=False, trans_b=False), atol=1e-5, rtol=1e-5)

# ------------------------------------------------------------------ conv and pooling
def conv_case(name, x, w, b=None, **attrs):
    ir = op("conv", kernel_shape=attrs.get("kernel_shape", []), strides=attrs.get("strides", []), pads=attrs.get("pads", []),
            dilations=attrs.get("dilations", []), group=attrs.get("group", 1),
            auto_pad=attrs.get("auto_pad", "NOTSET").lower())
    # onnx.reference gets Conv's auto_pad wrong (SAME with strides gives [3, 2] where the spec's
    # ceil(in / stride) gives [3, 3]; VALID pads anyway): auto_pad cases trust onnxruntime,
    # which follows the spec, alone.
    ref_check = attrs.get("auto_pad", "NOTSET") == "NOTSET"
    onnx_case(name, "Conv", [x, w] + ([b] if b is not None else []), ir, attrs=attrs, atol=1e-5, rtol=1e-5, ref_check=ref_check)


conv_case("conv2d_basic", f32(1, 2, 5, 5), f32(3, 2, 3, 3), f32(3))
conv_case("conv2d_stride_pad", f32(2, 3, 7, 6), f32(4, 3, 3, 2), pads=[1, 0, 2, 1], strides=[2, 1])
conv_case("conv2d_dilation", f32(1, 2, 9, 9), f32(2, 2, 3, 3), dilations=[2, 3], pads=[1, 1, 1, 1])
conv_case("conv2d_groups", f32(1, 4, 6, 6), f32(6, 2, 3, 3), f32(6), group=2, pads=[1, 1, 1, 1])
conv_case("conv2d_depthwise", f32(2, 3, 5, 5), f32(3, 1, 3, 3), group=3, strides=[2, 2])
conv_case("conv2d_same_upper", f32(1, 2, 6, 5), f32(2, 2, 2, 3), auto_pad="SAME_UPPER", strides=[2, 2])
conv_case("conv2d_same_lower", f32(1, 2, 6, 5), f32(2, 2, 2, 3), auto_pad="SAME_LOWER", strides=[1, 2])
conv_case("conv2d_valid", f32(1, 1, 5, 6), f32(1, 1, 3, 2), auto_pad="VALID", kernel_shape=[3, 2])
conv_case("conv1d", f32(2, 3, 10), f32(4, 3, 3), f32(4), pads=[2, 1], strides=[3])
conv_case("conv3d", f32(1, 2, 4, 5, 3), f32(2, 2, 2, 3, 2), pads=[1, 0, 1, 0, 1, 0])


def pool_case(name, kind, x, **attrs):
    ir = op(kind, kernel_shape=attrs["kernel_shape"], strides=attrs.get("strides", []), pads=attrs.get("pads", []),
            dilations=attrs.get("dilations", []), ceil_mode=bool(attrs.get("ceil_mode", 0)),
            auto_pad=attrs.get("auto_pad", "NOTSET").lower())
    if kind == "average_pool":
        ir["attrs"]["count_include_pad"] = bool(attrs.get("count_include_pad", 0))
    onnx_type_name = {"max_pool": "MaxPool", "average_pool": "AveragePool"}[kind]
    # onnx.reference's ceil_mode padding differs from onnxruntime's and PyTorch's (it pads both
    # sides); the ceil-mode cases trust onnxruntime only.
    onnx_case(name, onnx_type_name, [x], ir, attrs=attrs, atol=1e-6, rtol=1e-6, ref_check=not attrs.get("ceil_mode", 0))


px = f32(2, 3, 7, 6)
pool_case("maxpool_basic", "max_pool", px, kernel_shape=[3, 3])
pool_case("maxpool_pads_strides", "max_pool", px, kernel_shape=[3, 2], pads=[1, 1, 1, 0], strides=[2, 2])
pool_case("maxpool_dilation", "max_pool", px, kernel_shape=[2, 2], dilations=[2, 2])
pool_case("maxpool_ceil", "max_pool", px, kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)
pool_case("maxpool_same_upper", "max_pool", px, kernel_shape=[2, 3], strides=[2, 2], auto_pad="SAME_UPPER")
pool_case("maxpool_1d", "max_pool", f32(1, 2, 9), kernel_shape=[4], strides=[2], pads=[1, 2])
pool_case("avgpool_basic", "average_pool", px, kernel_shape=[3, 3])
pool_case("avgpool_pads_exclude", "average_pool", px, kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2])
pool_case("avgpool_pads_include", "average_pool", px, kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2], count_include_pad=1)
pool_case("avgpool_ceil_include", "average_pool", px, kernel_shape=[3, 3], pads=[1, 0, 1, 0], strides=[2, 2], ceil_mode=1,
          count_include_pad=1)
pool_case("avgpool_ceil_exclude", "average_pool", px, kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1)
pool_case("avgpool_same_lower", "average_pool", px, kernel_shape=[3, 2], strides=[2, 1], auto_pad="SAME_LOWER")
pool_case("avgpool_dilation", "average_pool", px, kernel_shape=[2, 2], dilations=[2, 1], pads=[1, 1, 0, 0])
onnx_case("global_avg", "GlobalAveragePool", [px], op("global_average_pool"), atol=1e-6, rtol=1e-6)
onnx_case("global_max", "GlobalMaxPool", [px], op("global_max_pool"))

# ------------------------------------------------------------------ normalisation and reductions
bx = f32(2, 3, 4, 2)
onnx_case("batch_norm", "BatchNormalization", [bx, f32(3), f32(3), f32(3), np.abs(f32(3)) + 0.1], op("batch_norm", epsilon=1e-3),
          attrs={"epsilon": 1e-3}, atol=1e-5, rtol=1e-5)
onnx_case("batch_norm_2d", "BatchNormalization", [f32(4, 3), f32(3), f32(3), f32(3), np.abs(f32(3)) + 0.1],
          op("batch_norm", epsilon=1e-5), atol=1e-5, rtol=1e-5)
lx = f32(2, 3, 8)
onnx_case("layer_norm_last", "LayerNormalization", [lx, f32(8), f32(8)], op("layer_norm", axis=-1, epsilon=1e-5),
          atol=1e-5, rtol=1e-5)
onnx_case("layer_norm_axis1_nobias", "LayerNormalization", [lx, f32(3, 8)], op("layer_norm", axis=1, epsilon=1e-3),
          attrs={"axis": 1, "epsilon": 1e-3}, atol=1e-5, rtol=1e-5)
sx = f32(2, 3, 5, lo=-10, hi=10)
for axis in (-1, 1, 0):
    onnx_case(f"softmax_axis{axis}", "Softmax", [sx], op("softmax", axis=axis), attrs={"axis": axis}, atol=1e-6, rtol=1e-5)
    onnx_case(f"log_softmax_axis{axis}", "LogSoftmax", [sx], op("log_softmax", axis=axis), attrs={"axis": axis}, atol=1e-5, rtol=1e-5)
rx = f32(2, 3, 4)
for onnx_name, ir_name in [("ReduceSum", "reduce_sum"), ("ReduceMean", "reduce_mean"), ("ReduceMax", "reduce_max"),
                           ("ReduceMin", "reduce_min"), ("ReduceProd", "reduce_prod")]:
    onnx_case(f"{ir_name}_axes_keep", onnx_name, [rx, i64(0, -1)], op(ir_name, axes=[0, -1], keepdims=True), ir_inputs=[rx],
              atol=1e-5, rtol=1e-5)
    onnx_case(f"{ir_name}_all_nokeep", onnx_name, [rx], op(ir_name, axes=None, keepdims=False), attrs={"keepdims": 0},
              atol=1e-5, rtol=1e-5)
    onnx_case(f"{ir_name}_i64", onnx_name, [di - 7, i64(1)], op(ir_name, axes=[1], keepdims=False), attrs={"keepdims": 0},
              ir_inputs=[di - 7])

# ------------------------------------------------------------------ ONNX quantization
qx = np.array([[-3.0, -2.5, -1.5, -0.5, 0.0], [0.5, 1.5, 2.5, 100.0, -300.0]], np.float32)
onnx_case("quantize_linear_i8", "QuantizeLinear", [qx, np.array(1.0, np.float32), np.array(2, np.int8)],
          op("quantize_linear", axis=1, saturate=True, to="i8"))
onnx_case("quantize_linear_u8_scale", "QuantizeLinear", [qx, np.array(0.5, np.float32), np.array(128, np.uint8)],
          op("quantize_linear", axis=1, saturate=True, to="u8"))
onnx_case("quantize_linear_u8_axis0", "QuantizeLinear", [qx, np.array([0.5, 2.0], np.float32), np.array([10, 200], np.uint8)],
          op("quantize_linear", axis=0, saturate=True, to="u8"), attrs={"axis": 0})
onnx_case("quantize_linear_i8_axis1", "QuantizeLinear", [qx, np.array([1, 2, 3, 4, 0.25], np.float32), np.array([0, 1, -1, 2, -2], np.int8)],
          op("quantize_linear", axis=1, saturate=True, to="i8"))
fq = np.concatenate([fp8in[np.isfinite(fp8in)], np.array([3.3, -0.07], np.float32)]).reshape(3, -1)
for fmt, tname, proto in [(E4M3, "f8e4m3", onnx.TensorProto.FLOAT8E4M3FN), (E5M2, "f8e5m2", onnx.TensorProto.FLOAT8E5M2)]:
    for sat in (True, False):
        fp8_case(f"quantize_linear_{tname}_sat{int(sat)}", "QuantizeLinear", [fq, np.array(0.5, np.float32), np.zeros((), fmt)],
                 op("quantize_linear", axis=1, saturate=sat, to=tname), attrs={"saturate": int(sat)},
                 expected=sat_cast((fq / np.float32(0.5)).astype(np.float32), fmt, sat))
    codes = np.arange(0, 256, 7, dtype=np.uint8).view(fmt).reshape(1, -1)
    fp8_case(f"dequantize_linear_{tname}", "DequantizeLinear", [codes, np.array(0.25, np.float32)], op("dequantize_linear", axis=1),
             attrs={}, expected=codes.astype(np.float32) * np.float32(0.25))
qi = np.array([[-128, -1, 0, 1, 127], [5, 6, 7, 8, 9]], np.int8)
onnx_case("dequantize_linear_i8", "DequantizeLinear", [qi, np.array(0.1, np.float32), np.array(3, np.int8)], op("dequantize_linear", axis=1))
onnx_case("dequantize_linear_u8_axis0", "DequantizeLinear", [qi.view(np.uint8), np.array([0.5, 3.0], np.float32), np.array([128, 7], np.uint8)],
          op("dequantize_linear", axis=0), attrs={"axis": 0})
onnx_case("dequantize_linear_i32", "DequantizeLinear", [np.array([-70000, 3, 2**30], np.int32), np.array(0.5, np.float32)],
          op("dequantize_linear", axis=1))

# ------------------------------------------------------------------ fp8c's FP8 ops (numpy + ml_dtypes)
fx = np.concatenate([f32(30, lo=-600, hi=600), np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-6], np.float32)])
for fmt, tname in [(E4M3, "f8e4m3"), (E5M2, "f8e5m2")]:
    for sat in (True, False):
        scale = np.float32(0.37)
        # fp8c's scaled quantize saturates finite values only: an infinite x stays non-finite
        # (ml_dtypes' cast without saturation: NaN in E4M3, inf in E5M2).
        prod = (fx * scale).astype(np.float32)
        want = np.where(np.isinf(fx), sat_cast(prod, fmt, False), sat_cast(prod, fmt, sat))
        add(f"quantize_{tname}_sat{int(sat)}", op("quantize", to=tname, saturate=sat), [fx, np.array(scale)],
            [want], source="ml_dtypes cast of f32(x * scale), infinite x unsaturated")
    qcodes = np.arange(256, dtype=np.uint8).view(fmt)
    add(f"dequantize_{tname}_f32", op("dequantize", to="f32"), [qcodes, np.array(np.float32(3.0))],
        [(qcodes.astype(np.float32) * np.float32(3.0)).astype(np.float32)], source="ml_dtypes decode times scale_inv")
    add(f"dequantize_{tname}_bf16", op("dequantize", to="bf16"), [qcodes, np.array(np.float32(0.1))],
        [(qcodes.astype(np.float32) * np.float32(0.1)).astype(BF16)], source="ml_dtypes decode times scale_inv, one rounding")
    # Operands with |v| in [1/8, 8] (or 0): every product and partial sum is exact in f32, so
    # the f32 accumulator equals the exact f64 one and the case can be bit-exact; only the
    # final multiply by sa·sb rounds, once, in both.
    vals = np.arange(256, dtype=np.uint8).view(fmt)
    ok = np.array([v == 0 or 0.125 <= abs(float(v)) <= 8 for v in vals])
    pool = np.arange(256, dtype=np.uint8)[ok]
    qa = rng.choice(pool, size=(2, 5, 16)).astype(np.uint8).view(fmt)
    qb = rng.choice(pool, size=(16, 3)).astype(np.uint8).view(fmt)
    sa, sb = np.float32(0.125), np.float32(3.0)
    acc = qa.astype(np.float64) @ qb.astype(np.float64)
    add(f"scaled_matmul_{tname}", op("scaled_matmul", out="f32", fast_accum=False), [qa, qb, np.array(sa), np.array(sb)],
        [(acc * np.float64(sa * sb)).astype(np.float32)], source="numpy f64 product of decoded operands (exact here)")
amx = f32(5, 7, lo=-9, hi=9)
add("amax_f32", op("amax"), [amx], [np.array(np.max(np.abs(amx)), np.float32)], source="numpy max(abs(x))")
amx16 = f32(9, lo=-9, hi=9).astype(BF16)
add("amax_bf16", op("amax"), [amx16], [np.array(np.max(np.abs(amx16.astype(np.float32))), np.float32)], source="numpy max(abs(x))")

# ------------------------------------------------------------------ fused attention
# onnxruntime's opset-23 Attention on 4-D [B, heads, T, D] inputs is fp8c's `attention` (its
# first output): the default scale 1/sqrt(D), is_causal with as many queries as keys, grouped
# KV heads (the query heads of each KV head consecutive), an additive float mask.
def attention_case(name, q, k, v, mask=None, scale=None, causal=False):
    attrs = {"is_causal": int(causal)}
    if scale is not None:
        attrs["scale"] = float(scale)
    ir = op("attention", scale=float(np.float32(scale)) if scale is not None else 1.0 / np.sqrt(q.shape[-1]),
            causal=causal)
    ins = [q, k, v] + ([mask] if mask is not None else [])
    onnx_case(name, "Attention", ins, ir, attrs=attrs, atol=1e-6, rtol=1e-5, opset=23)


attention_case("attention_plain", f32(2, 2, 5, 4), f32(2, 2, 7, 4), f32(2, 2, 7, 4))
attention_case("attention_causal", f32(1, 2, 6, 4), f32(1, 2, 6, 4), f32(1, 2, 6, 3), scale=0.3, causal=True)
attention_case("attention_grouped_masked", f32(1, 4, 3, 8), f32(1, 2, 5, 8), f32(1, 2, 5, 8),
               mask=f32(1, 1, 3, 5, lo=-4.0, hi=0.0))

OUT.parent.mkdir(parents=True, exist_ok=True)
text = json.dumps({"generator": "tests/gen/gen_op_cases.py", "numpy": np.__version__, "onnx": onnx.__version__,
                   "onnxruntime": ort.__version__, "cases": cases}, indent=None, separators=(",", ":"))
OUT.write_text(text.replace('{"name"', '\n{"name"') + "\n")
print(f"wrote {len(cases)} cases to {OUT} ({OUT.stat().st_size} bytes)")
