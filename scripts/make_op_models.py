#!/usr/bin/env python3
"""Builds small one-op ONNX models (with onnx's Python API and onnxruntime's quantizer, never
with fp8c) for tests/op_parity.rs, which runs each through `fp8c run` and compares with
onnxruntime on the same inputs.

Usage (with the project's venv: PY=$(scripts/python-env.sh)):

  $PY scripts/make_op_models.py [OUT_DIR]     # default: tests/models/ops

Each model exercises one ONNX op fp8c imports by rewriting it into other IR ops (Einsum,
ConvTranspose, MatMulInteger, ConvInteger, DynamicQuantizeLinear, LayerNormalization's Mean
and InvStdDev) or a new kernel (TopK), on shapes and attributes the ONNX backend node tests
do not cover: broadcast ellipses, three-operand and bilinear einsums, strided/padded/grouped
transposed convolutions with output_padding and output_shape, per-column zero points, and a
dynamically quantized MLP made by onnxruntime.quantization.quantize_dynamic; and regressions
from PyTorch exports: Sign on integers, Einsum and ConvTranspose with symbolic dims. Weights are
random (seed 0) initializers; the graph inputs are filled by scripts/ort_reference.py
(--make-inputs) at test time. Opset 21.

Also Cast to FLOAT8E8M0 with each `round_mode` (opset 25), as ONNX backend-test directories
(model.onnx, test_data_set_0/input_0.pb and output_0.pb): onnxruntime cannot hand E8M0 to
numpy, so the expected codes come from onnx's reference evaluator, on inputs chosen around
the rounding boundaries (powers of two, 1.5x midpoints, one ulp either side, subnormals,
zero, negatives, inf, NaN, values past 2^127).
"""

import os
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 21
RNG = np.random.default_rng(0)
F = TensorProto.FLOAT
U8 = TensorProto.UINT8


def model(name, nodes, inputs, outputs, inits=()):
    return model_at(name, nodes, inputs, outputs, inits, OPSET)


def model_at(name, nodes, inputs, outputs, inits=(), opset=OPSET):
    g = helper.make_graph(
        nodes, name,
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs],
        list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)],
                          producer_name="make_op_models.py")
    m.ir_version = 10 if opset <= 21 else 11
    onnx.checker.check_model(m, full_check=True)
    return m


def init(name, a):
    return numpy_helper.from_array(np.asarray(a), name)


def layer_norm_before_17(name):
    """LayerNormalization in an opset-14 model, as onnxruntime's transformer optimizer writes
    it (onnxruntime defines the op in the default domain from opset 1; onnx's checker does not
    know it there, so the model is not checked)."""
    node = helper.make_node("LayerNormalization", ["x", "g", "b"], ["y"], epsilon=1e-5)
    g = helper.make_graph(
        [node], name, [helper.make_tensor_value_info("x", F, [2, 4, 8])],
        [helper.make_tensor_value_info("y", F, [2, 4, 8])],
        [init("g", RNG.standard_normal(8).astype(np.float32)),
         init("b", RNG.standard_normal(8).astype(np.float32))])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)],
                          producer_name="make_op_models.py")
    m.ir_version = 8
    return name, m


def einsum(name, eq, shapes, out_shape):
    ins = [(f"x{i}", F, s) for i, s in enumerate(shapes)]
    node = helper.make_node("Einsum", [n for n, _, _ in ins], ["y"], equation=eq)
    return name, model(name, [node], ins, [("y", F, out_shape)])


def top_k(name, shape, k, **attrs):
    node = helper.make_node("TopK", ["x", "k"], ["values", "indices"], **attrs)
    axis = attrs.get("axis", -1) % len(shape)
    out = list(shape)
    out[axis] = k
    return name, model(name, [node], [("x", F, shape)],
                       [("values", F, out), ("indices", TensorProto.INT64, out)],
                       [init("k", np.array([k], np.int64))])


def conv_transpose(name, x_shape, w_shape, y_shape, bias, **attrs):
    w = RNG.standard_normal(w_shape).astype(np.float32)
    inits = [init("w", w)]
    ins = ["x", "w"]
    if bias:
        inits.append(init("b", RNG.standard_normal(w_shape[1] * attrs.get("group", 1))
                          .astype(np.float32)))
        ins.append("b")
    node = helper.make_node("ConvTranspose", ins, ["y"], **attrs)
    return name, model(name, [node], [("x", F, x_shape)], [("y", F, y_shape)], inits)


# The cases added after the first set draw from their own generator, so the earlier models
# (and the quantized MLP, drawn last) keep their weights.
RNG_CONV = np.random.default_rng(1)


def conv(name, x_shape, w_shape, y_shape, bias, **attrs):
    """A Conv; with group = channels, the depthwise layers of MobileNet-style CNNs."""
    w = RNG_CONV.standard_normal(w_shape).astype(np.float32)
    inits = [init("w", w)]
    ins = ["x", "w"]
    if bias:
        inits.append(init("b", RNG_CONV.standard_normal(w_shape[0]).astype(np.float32)))
        ins.append("b")
    node = helper.make_node("Conv", ins, ["y"], **attrs)
    return name, model(name, [node], [("x", F, x_shape)], [("y", F, y_shape)], inits)


def max_pool(name, x_shape, y_shape, **attrs):
    node = helper.make_node("MaxPool", ["x"], ["y"], **attrs)
    return name, model(name, [node], [("x", F, x_shape)], [("y", F, y_shape)])


def matmul_integer(name, b_type):
    lo, hi = (0, 255) if b_type == U8 else (-128, 127)
    np_b = np.uint8 if b_type == U8 else np.int8
    b = RNG.integers(lo, hi + 1, size=(8, 6)).astype(np_b)
    b_zp = RNG.integers(lo, hi + 1, size=(6,)).astype(np_b)
    node = helper.make_node("MatMulInteger", ["a", "b", "a_zp", "b_zp"], ["y"])
    return name, model(name, [node], [("a", U8, [2, 4, 8])],
                       [("y", TensorProto.INT32, [2, 4, 6])],
                       [init("b", b), init("a_zp", np.uint8(3)), init("b_zp", b_zp)])


def conv_integer(name):
    w = RNG.integers(0, 256, size=(3, 2, 3, 3)).astype(np.uint8)
    node = helper.make_node("ConvInteger", ["x", "w", "x_zp", "w_zp"], ["y"],
                            pads=[1, 1, 1, 1], strides=[2, 1])
    return name, model(name, [node], [("x", U8, [1, 2, 6, 5])],
                       [("y", TensorProto.INT32, [1, 3, 3, 5])],
                       [init("w", w), init("x_zp", np.uint8(4)), init("w_zp", np.uint8(120))])


def dynamic_quantize(name):
    node = helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "scale", "zp"])
    return name, model(name, [node], [("x", F, [4, 16])],
                       [("y", U8, [4, 16]), ("scale", F, []), ("zp", U8, [])])


def layer_norm_stats(name):
    node = helper.make_node("LayerNormalization", ["x", "g", "b"], ["y", "mean", "inv_std"],
                            axis=1, epsilon=1e-3)
    g = RNG.standard_normal((5, 6)).astype(np.float32)
    b = RNG.standard_normal((5, 6)).astype(np.float32)
    return name, model(name, [node], [("x", F, [3, 5, 6])],
                       [("y", F, [3, 5, 6]), ("mean", F, [3, 1, 1]), ("inv_std", F, [3, 1, 1])],
                       [init("g", g), init("b", b)])


def dynamic_mlp(out_dir):
    """A 2-layer MLP quantized by onnxruntime's own dynamic quantizer (DynamicQuantizeLinear,
    MatMulInteger, Cast and Mul, the graph ORT users ship)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    w1 = RNG.standard_normal((32, 64)).astype(np.float32) * 0.2
    w2 = RNG.standard_normal((64, 16)).astype(np.float32) * 0.2
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]),
             helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("MatMul", ["r", "w2"], ["y"])]
    m = model("mlp", nodes, [("x", F, ["batch", 32])], [("y", F, ["batch", 16])],
              [init("w1", w1), init("w2", w2)])
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "mlp.onnx")
        onnx.save(m, src)
        dst = os.path.join(out_dir, "dynamic_quant_mlp.onnx")
        quantize_dynamic(src, dst, weight_type=QuantType.QUInt8)
    return dst


CASES = [
    einsum("einsum_attention", "bhqd,bhkd->bhqk", [[2, 3, 5, 8], [2, 3, 7, 8]], [2, 3, 5, 7]),
    einsum("einsum_broadcast", "...ij,...jk->...ik", [[2, 3, 4, 5], [1, 3, 5, 6]], [2, 3, 4, 6]),
    einsum("einsum_three", "abc,cd,de->abe", [[2, 3, 4], [4, 5], [5, 6]], [2, 3, 6]),
    einsum("einsum_trace_outer", "ii,j->j", [[4, 4], [3]], [3]),
    einsum("einsum_implicit", "kj,ji", [[3, 4], [4, 5]], [5, 3]),
    einsum("einsum_bilinear", "bn,anm,bm->ba", [[2, 3], [4, 3, 5], [2, 5]], [2, 4]),
    einsum("einsum_sum_diag", "bii->b", [[3, 4, 4]], [3]),
    top_k("top_k_largest", [3, 10], 4),
    top_k("top_k_smallest_axis0", [6, 4, 2], 2, axis=0, largest=0),
    conv_transpose("conv_transpose_stride_pad", [1, 3, 5, 5], [3, 4, 3, 3], [1, 4, 10, 10], True,
                   strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 1]),
    conv_transpose("conv_transpose_group_dilation", [2, 4, 4, 4], [4, 3, 2, 2], [2, 6, 6, 9], True,
                   group=2, dilations=[2, 2], strides=[1, 2]),
    conv_transpose("conv_transpose_1d_output_shape", [1, 2, 7], [2, 3, 4], [1, 3, 22], False,
                   strides=[3], output_shape=[22], auto_pad="SAME_UPPER"),
    matmul_integer("matmul_integer_u8", U8),
    matmul_integer("matmul_integer_u8_i8", TensorProto.INT8),
    conv_integer("conv_integer"),
    dynamic_quantize("dynamic_quantize_linear"),
    layer_norm_stats("layer_norm_stats"),
    layer_norm_before_17("layer_norm_opset14"),
    conv("conv_depthwise_5x5_stride", [2, 6, 7, 19], [6, 1, 5, 5], [2, 6, 4, 19], True,
         group=6, pads=[2, 2, 2, 2], strides=[2, 1]),
    conv("conv_depthwise_multiplier_dilation", [1, 3, 9, 8], [6, 1, 3, 3], [1, 6, 6, 4], False,
         group=3, dilations=[2, 1], pads=[1, 0, 0, 1], strides=[1, 2]),
    conv("conv_depthwise_1d_same", [2, 4, 23], [4, 1, 4], [2, 4, 8], True,
         group=4, strides=[3], auto_pad="SAME_UPPER"),
    conv("conv_depthwise_3d", [1, 2, 4, 5, 6], [2, 1, 3, 2, 3], [1, 2, 4, 2, 3], True,
         group=2, pads=[1, 0, 1, 1, 0, 0], strides=[1, 2, 2]),
    conv("conv_single_channel_wide_pads", [1, 1, 3, 4], [2, 1, 2, 2], [1, 2, 5, 6], True,
         pads=[2, 2, 1, 1]),
    max_pool("max_pool_pads_ceil", [2, 3, 7, 9], [2, 3, 4, 4], kernel_shape=[3, 3],
             strides=[2, 3], pads=[1, 1, 0, 1], ceil_mode=1),
    # Stride 2 along the last axis with output rows of exactly 16 and of 20 positions: the
    # direct kernels' two-lane-wide runs and their remainders.
    conv("conv_stride2_rows_of_16", [1, 3, 10, 32], [4, 3, 3, 3], [1, 4, 5, 16], True,
         pads=[1, 1, 1, 1], strides=[2, 2]),
    conv("conv_depthwise_stride2_rows_of_20", [1, 4, 9, 40], [4, 1, 3, 3], [1, 4, 5, 20], True,
         group=4, pads=[1, 1, 1, 1], strides=[2, 2]),
    max_pool("max_pool_stride2_rows_of_16", [1, 2, 6, 33], [1, 2, 2, 16], kernel_shape=[3, 3],
             strides=[2, 2]),
]


# Regressions from third-party PyTorch exports, with their own generator (the earlier
# models keep their weights): integer Sign (DeBERTa's relative-position buckets), Einsum and
# ConvTranspose on inputs with symbolic dims (fed by --dim at test time).
RNG_SYM = np.random.default_rng(2)


def sign_int(name, elem, np_type, shift):
    """Sign(x - shift) on an integer input: ort_reference.py draws integers in [0, 10), so a
    shift of 5 gives negatives, zeros and positives."""
    nodes = [helper.make_node("Sub", ["x", "shift"], ["d"]),
             helper.make_node("Sign", ["d"], ["y"])]
    return name, model(name, nodes, [("x", elem, [3, 7])], [("y", elem, [3, 7])],
                       [init("shift", np.array(shift, np_type))])


def conv_transpose_symbolic_batch(name):
    w = RNG_SYM.standard_normal((3, 2, 3, 3)).astype(np.float32)
    b = RNG_SYM.standard_normal(2).astype(np.float32)
    node = helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], strides=[2, 2],
                            pads=[1, 1, 1, 1], output_padding=[1, 1])
    return name, model(name, [node], [("x", F, ["batch", 3, 4, 5])],
                       [("y", F, ["batch", 2, 8, 10])], [init("w", w), init("b", b)])


CASES += [
    sign_int("sign_int64", TensorProto.INT64, np.int64, 5),
    sign_int("sign_int32", TensorProto.INT32, np.int32, 5),
    sign_int("sign_uint8", U8, np.uint8, 0),
    einsum("einsum_linear_symbolic", "btd,de->bte", [["b", "t", 8], [8, 6]], ["b", "t", 6]),
    einsum("einsum_symbolic_groups", "bsti,bij->bstj", [["b", "s", "t", 4], ["b", 4, 5]],
           ["b", "s", "t", 5]),
    conv_transpose_symbolic_batch("conv_transpose_symbolic_batch"),
]


def quantize_qop(m, calib, dst, signed, **options):
    """`m` (input `x`) quantized by onnxruntime's static quantizer in its QOperator format,
    calibrated on the arrays `calib`, into `dst`: int8 activations and per-channel int8 weights
    when `signed`, else uint8 per tensor. `options` go to `quantize_static`."""
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                          quantize_static)

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter([{"x": x} for x in calib])

        def get_next(self):
            return next(self.it, None)

    q = QuantType.QInt8 if signed else QuantType.QUInt8
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "cnn.onnx")
        onnx.save(m, src)
        quantize_static(src, dst, Reader(), quant_format=QuantFormat.QOperator,
                        activation_type=q, weight_type=q, per_channel=signed, **options)
    return dst


def static_qop_cnn(out_dir, name, signed):
    """A small CNN (Conv+ReLU twice, max pool, flatten, MatMul) quantized by onnxruntime's
    static quantizer in its QOperator format for Conv and MatMul: QLinearConv (with its i32
    bias) and QLinearMatMul between QuantizeLinear and DequantizeLinear. `signed`: int8
    activations and per-channel int8 weights; else uint8 per tensor."""
    rng = np.random.default_rng(7)
    w = lambda *shape: (rng.standard_normal(shape) * 0.3).astype(np.float32)  # noqa: E731
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], strides=[2, 2]),
             helper.make_node("Relu", ["c2"], ["r2"]),
             helper.make_node("MaxPool", ["r2"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Flatten", ["p"], ["f"]),
             helper.make_node("MatMul", ["f", "wm"], ["y"])]
    m = model("cnn", nodes, [("x", F, ["batch", 3, 10, 10])], [("y", F, ["batch", 5])],
              [init("w1", w(8, 3, 3, 3)), init("b1", w(8)), init("w2", w(6, 8, 3, 3)),
               init("b2", w(6)), init("wm", w(24, 5))])
    calib = [rng.standard_normal((1, 3, 10, 10)).astype(np.float32) for _ in range(8)]
    return quantize_qop(m, calib, os.path.join(out_dir, f"{name}.onnx"), signed,
                        op_types_to_quantize=["Conv", "MatMul"])


def static_qop_full(out_dir, name, signed):
    """A CNN with a residual Add, Sigmoid·x (SiLU), LeakyRelu, a Concat, AveragePool,
    GlobalAveragePool and a Gemm, quantized by onnxruntime's static quantizer in its QOperator
    format for every op it handles: QLinearConv plus the com.microsoft QLinearAdd, QLinearMul,
    QLinearSigmoid, QLinearLeakyRelu, QLinearConcat, QLinearAveragePool,
    QLinearGlobalAveragePool and QGemm."""
    rng = np.random.default_rng(9)
    w = lambda *shape: (rng.standard_normal(shape) * 0.3).astype(np.float32)  # noqa: E731
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Sigmoid", ["c1"], ["s1"]),
             helper.make_node("Mul", ["c1", "s1"], ["a1"]),
             helper.make_node("Conv", ["a1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c2", "a1"], ["r"]),
             helper.make_node("LeakyRelu", ["r"], ["l"], alpha=0.1),
             helper.make_node("AveragePool", ["l"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Conv", ["p", "w3", "b3"], ["c3"]),
             helper.make_node("Concat", ["p", "c3"], ["cat"], axis=1),
             helper.make_node("GlobalAveragePool", ["cat"], ["g"]),
             helper.make_node("Flatten", ["g"], ["f"]),
             helper.make_node("Gemm", ["f", "wf", "bf"], ["y"], transB=1)]
    m = model("cnn", nodes, [("x", F, ["batch", 3, 8, 8])], [("y", F, ["batch", 7])],
              [init("w1", w(8, 3, 3, 3)), init("b1", w(8)), init("w2", w(8, 8, 3, 3)),
               init("b2", w(8)), init("w3", w(4, 8, 1, 1)), init("b3", w(4)),
               init("wf", w(7, 12)), init("bf", w(7))])
    calib = [rng.standard_normal((1, 3, 8, 8)).astype(np.float32) for _ in range(8)]
    return quantize_qop(m, calib, os.path.join(out_dir, f"{name}.onnx"), signed)


def static_qop_attention(out_dir, name, signed, masked_with):
    """One causal self-attention head (Q/K/V MatMuls, scores, an additive mask, Softmax,
    the weighted sum) quantized by onnxruntime's static quantizer in its QOperator format:
    QLinearMatMul, com.microsoft QLinearMul, QLinearAdd and QLinearSoftmax. The mask holds
    `masked_with` above the diagonal; with −inf (as BERT exports mask) the calibrated scale
    of the scores is infinite, the case onnxruntime's kernel turns into saturated codes."""
    rng = np.random.default_rng(11)
    w = lambda *shape: (rng.standard_normal(shape) * 0.3).astype(np.float32)  # noqa: E731
    seq, d = 6, 8
    mask = np.triu(np.full((seq, seq), masked_with, np.float32), 1)
    nodes = [helper.make_node("MatMul", ["x", "wq"], ["q"]),
             helper.make_node("MatMul", ["x", "wk"], ["k"]),
             helper.make_node("MatMul", ["x", "wv"], ["v"]),
             helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
             helper.make_node("MatMul", ["q", "kt"], ["s"]),
             helper.make_node("Mul", ["s", "scale"], ["ss"]),
             helper.make_node("Add", ["ss", "mask"], ["sm"]),
             helper.make_node("Softmax", ["sm"], ["p"], axis=-1),
             helper.make_node("MatMul", ["p", "v"], ["y"])]
    m = model("attention", nodes, [("x", F, ["batch", seq, d])], [("y", F, ["batch", seq, d])],
              [init("wq", w(d, d)), init("wk", w(d, d)), init("wv", w(d, d)),
               init("scale", np.float32(d ** -0.5)), init("mask", mask)])
    calib = [rng.standard_normal((1, seq, d)).astype(np.float32) for _ in range(8)]
    return quantize_qop(m, calib, os.path.join(out_dir, f"{name}.onnx"), signed)


def nbits_mlp(out_dir, name, **quant):
    """A 2-layer MLP (K = 72: a partial last block) whose MatMuls onnxruntime's weight-only
    quantizer (`MatMulNBitsQuantizer`, the format of onnxruntime-genai's LLM exports) turned
    into com.microsoft MatMulNBits; `quant` are its options (bits, block_size, is_symmetric)."""
    from onnxruntime.quantization import matmul_nbits_quantizer as mq

    rng = np.random.default_rng(11)
    w = lambda *shape: (rng.standard_normal(shape) * 0.2).astype(np.float32)  # noqa: E731
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]),
             helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("MatMul", ["r", "w2"], ["y0"]),
             helper.make_node("Add", ["y0", "b2"], ["y"])]
    m = model("mlp", nodes, [("x", F, ["batch", 72])], [("y", F, ["batch", 48])],
              [init("w1", w(72, 64)), init("w2", w(64, 48)), init("b2", w(48))])
    q = mq.MatMulNBitsQuantizer(m, **quant)
    q.process()
    dst = os.path.join(out_dir, f"{name}.onnx")
    q.model.save_model_to_file(dst)
    return dst


# onnxruntime's transformer-optimizer ops (com.microsoft, and its default-domain
# SimplifiedLayerNormalization), one model each, with their own generator.
RNG_MS = np.random.default_rng(5)


def ms_model(name, op, ins, out_shape, inits, outputs=("y",), **attrs):
    """One com.microsoft (or, with `domain=""`, ai.onnx) node on float inputs `ins`."""
    domain = attrs.pop("domain", "com.microsoft")
    names = [n for n, _ in ins] + [n for n, _ in inits]
    node = helper.make_node(op, names, list(outputs), domain=domain, **attrs)
    g = helper.make_graph(
        [node], name, [helper.make_tensor_value_info(n, F, s) for n, s in ins],
        [helper.make_tensor_value_info(o, F, out_shape) for o in outputs if o],
        [init(n, RNG_MS.standard_normal(s).astype(np.float32)) for n, s in inits])
    opsets = [helper.make_opsetid("", OPSET)]
    if domain:
        opsets.append(helper.make_opsetid(domain, 1))
    m = helper.make_model(g, opset_imports=opsets, producer_name="make_op_models.py")
    m.ir_version = 10
    return name, m


CASES += [
    ms_model("ms_skip_layer_norm", "SkipLayerNormalization", [("x", [2, 5, 16]), ("skip", [2, 5, 16])],
             [2, 5, 16], [("gamma", [16]), ("beta", [16]), ("bias", [16])], epsilon=1e-5),
    ms_model("ms_skip_layer_norm_sum", "SkipLayerNormalization",
             [("x", [2, 5, 16]), ("skip", [2, 5, 16])], [2, 5, 16], [("gamma", [16])],
             outputs=("y", "", "", "sum")),
    ms_model("ms_skip_simplified_layer_norm", "SkipSimplifiedLayerNormalization",
             [("x", [3, 16]), ("skip", [3, 16])], [3, 16], [("gamma", [16]), ("bias", [16])],
             epsilon=1e-6),
    ms_model("ms_simplified_layer_norm", "SimplifiedLayerNormalization", [("x", [2, 3, 16])],
             [2, 3, 16], [("scale", [16])], domain="", axis=-1, epsilon=1e-6),
    ms_model("ms_bias_gelu", "BiasGelu", [("x", [4, 32])], [4, 32], [("bias", [32])]),
    ms_model("ms_fast_gelu_bias", "FastGelu", [("x", [4, 32])], [4, 32], [("bias", [32])]),
    ms_model("ms_fast_gelu", "FastGelu", [("x", [4, 32])], [4, 32], []),
    ms_model("ms_gelu", "Gelu", [("x", [4, 32])], [4, 32], []),
    ms_model("ms_quick_gelu", "QuickGelu", [("x", [4, 32])], [4, 32], [], alpha=1.5),
]


def if_model(name, static_cond):
    """If whose branches read outer values (x, and the initializer w only they use): the
    condition is `sum(x) > 0` (known at run time: both branches computed and selected) or
    `shape(x)[0] == 3` (folded at import: one branch inlined)."""
    rng = np.random.default_rng(13)
    w = rng.standard_normal((6, 6)).astype(np.float32)
    then_b = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["t0"]), helper.make_node("Relu", ["t0"], ["t"])],
        "then", [], [helper.make_tensor_value_info("t", F, [3, 6])])
    else_b = helper.make_graph(
        [helper.make_node("Mul", ["x", "two"], ["e0"]), helper.make_node("MatMul", ["e0", "w"], ["e"])],
        "else", [], [helper.make_tensor_value_info("e", F, [3, 6])],
        [init("two", np.array(2.0, np.float32))])
    if static_cond:
        nodes = [helper.make_node("Shape", ["x"], ["s"], start=0, end=1),
                 helper.make_node("Equal", ["s", "three"], ["c1"]),
                 helper.make_node("Squeeze", ["c1"], ["cond"])]
        inits = [init("w", w), init("three", np.array([3], np.int64))]
    else:
        nodes = [helper.make_node("ReduceSum", ["x"], ["total"], keepdims=0),
                 helper.make_node("Greater", ["total", "zero"], ["cond"])]
        inits = [init("w", w), init("zero", np.array(0.0, np.float32))]
    nodes.append(helper.make_node("If", ["cond"], ["y"], then_branch=then_b, else_branch=else_b))
    return name, model(name, nodes, [("x", F, [3, 6])], [("y", F, [3, 6])], inits)


CASES += [if_model("if_runtime_cond", False), if_model("if_static_cond", True)]


def attention_masked(name, causal):
    """Opset-23 Attention (as PyTorch's exporter writes scaled_dot_product_attention) with a
    constant bool mask that hides every key from some queries (left padding): onnxruntime
    gives those rows zeros, as PyTorch's SDPA does. With `causal`, is_causal and grouped
    query heads (4 query heads sharing 2 KV heads) too."""
    kv = 2 if causal else 4
    mask = np.ones((2, 1, 6, 6), dtype=bool)
    mask[1, 0, :2, :] = False          # two queries of batch row 1 see nothing
    mask[0, 0, 3, 4:] = False
    node = helper.make_node("Attention", ["q", "k", "v", "mask"], ["y"], is_causal=int(causal))
    return name, model_at(
        name, [node],
        [("q", F, [2, 4, 6, 8]), ("k", F, [2, kv, 6, 8]), ("v", F, [2, kv, 6, 8])],
        [("y", F, [2, 4, 6, 8])], [init("mask", mask)], opset=23)


CASES += [attention_masked("attention_fully_masked_rows", False),
          attention_masked("attention_fully_masked_rows_causal_gqa", True)]


def cast_e8m0_dirs(out_dir):
    from onnx.reference import ReferenceEvaluator

    one = np.float32(1.0)
    x = [0.0, -0.0, 1.0, 1.5, 3.0, 0.75, 2.0 ** -126, 2.0 ** -127, 2.0 ** -130, 1e-45,
         2.0 ** 127, 2.0 ** 127 * 1.5, 3.4e38, -2.0, -3.0, -0.1, np.inf, -np.inf, np.nan]
    x += [np.nextafter(np.float32(v), np.float32(np.inf)) for v in (1.0, 1.5, 0.75, 2.0 ** -127)]
    x += [np.nextafter(np.float32(v), np.float32(0)) for v in (1.0, 1.5, 2.0, 2.0 ** -127)]
    x += list(RNG.standard_normal(16).astype(np.float32) * np.float32(1e3))
    x = np.array(x, dtype=np.float32) * one
    names = []
    for mode in ("up", "down", "nearest"):
        for sat in (1, 0):
            name = f"cast_e8m0_{mode}" + ("" if sat else "_no_saturate")
            node = helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT8E8M0,
                                    round_mode=mode, saturate=sat)
            m = model_at(name, [node], [("x", F, list(x.shape))],
                         [("y", TensorProto.FLOAT8E8M0, list(x.shape))], opset=25)
            y = ReferenceEvaluator(m).run(None, {"x": x})[0]
            d = os.path.join(out_dir, name)
            os.makedirs(os.path.join(d, "test_data_set_0"), exist_ok=True)
            onnx.save(m, os.path.join(d, "model.onnx"))
            ins = numpy_helper.from_array(x, "x")
            outs = helper.make_tensor("y", TensorProto.FLOAT8E8M0, list(x.shape),
                                      np.asarray(y).view(np.uint8).tobytes(), raw=True)
            for fname, t in (("input_0.pb", ins), ("output_0.pb", outs)):
                with open(os.path.join(d, "test_data_set_0", fname), "wb") as f:
                    f.write(t.SerializeToString())
            names.append(name)
    return names


def main(argv):
    out_dir = argv[1] if len(argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "tests", "models", "ops")
    os.makedirs(out_dir, exist_ok=True)
    for name, m in CASES:
        onnx.save(m, os.path.join(out_dir, f"{name}.onnx"))
        print(f"wrote {name}.onnx")
    print(f"wrote {os.path.basename(dynamic_mlp(out_dir))}")
    print(f"wrote {os.path.basename(static_qop_cnn(out_dir, 'static_qop_cnn_u8', False))}")
    print(f"wrote {os.path.basename(static_qop_cnn(out_dir, 'static_qop_cnn_s8', True))}")
    print(f"wrote {os.path.basename(static_qop_full(out_dir, 'static_qop_full_u8', False))}")
    print(f"wrote {os.path.basename(static_qop_full(out_dir, 'static_qop_full_s8', True))}")
    for name, signed, masked in [("static_qop_attention_u8", False, -1e4),
                                 ("static_qop_attention_s8_inf", True, -np.inf)]:
        print(f"wrote {os.path.basename(static_qop_attention(out_dir, name, signed, masked))}")
    for name, quant in [("nbits4_sym_b32", dict(bits=4, block_size=32, is_symmetric=True)),
                        ("nbits4_asym_b16", dict(bits=4, block_size=16, is_symmetric=False)),
                        ("nbits8_asym_b32", dict(bits=8, block_size=32, is_symmetric=False))]:
        print(f"wrote {os.path.basename(nbits_mlp(out_dir, name, **quant))}")
    for name in cast_e8m0_dirs(out_dir):
        print(f"wrote {name}/")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
