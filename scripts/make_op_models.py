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
import zlib

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


def float_mlp():
    """The float MLP the weight-only quantizer cases start from: x [batch, 72] → MatMul (72×64)
    → Relu → MatMul (64×48) → + bias (K = 72: a partial last block of 32)."""
    rng = np.random.default_rng(11)
    w = lambda *shape: (rng.standard_normal(shape) * 0.2).astype(np.float32)  # noqa: E731
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]),
             helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("MatMul", ["r", "w2"], ["y0"]),
             helper.make_node("Add", ["y0", "b2"], ["y"])]
    return model("mlp", nodes, [("x", F, ["batch", 72])], [("y", F, ["batch", 48])],
                 [init("w1", w(72, 64)), init("w2", w(64, 48)), init("b2", w(48))])


def nbits_mlp(out_dir, name, **quant):
    """A 2-layer MLP (K = 72: a partial last block) whose MatMuls onnxruntime's weight-only
    quantizer (`MatMulNBitsQuantizer`, the format of onnxruntime-genai's LLM exports) turned
    into com.microsoft MatMulNBits; `quant` are its options (bits, block_size, is_symmetric)."""
    from onnxruntime.quantization import matmul_nbits_quantizer as mq

    q = mq.MatMulNBitsQuantizer(float_mlp(), **quant)
    q.process()
    dst = os.path.join(out_dir, f"{name}.onnx")
    q.model.save_model_to_file(dst)
    return dst


def nbits_qdq_mlp(out_dir, name, is_symmetric):
    """`nbits_mlp`'s MLP at opset 21 through the same quantizer in QDQ format: each weight an
    INT4 (symmetric) or UINT4 (with UINT4 zero points) initializer behind a blocked
    DequantizeLinear (block 32 along K = 72: a partial last block), as onnxruntime writes
    4-bit weight-only models for other runtimes."""
    from onnxruntime.quantization import QuantFormat
    from onnxruntime.quantization import matmul_nbits_quantizer as mq

    cfg = mq.DefaultWeightOnlyQuantConfig(block_size=32, is_symmetric=is_symmetric,
                                          quant_format=QuantFormat.QDQ)
    q = mq.MatMulNBitsQuantizer(float_mlp(), algo_config=cfg)
    q.process()
    dst = os.path.join(out_dir, f"{name}.onnx")
    q.model.save_model_to_file(dst)
    return dst


def gbq_model(name, data_type, data, scales, zp=None, **attrs):
    """One com.microsoft GatherBlockQuantized over initializer `data` (INT4 / UINT4 written with
    onnx's helper, two per byte; UINT8 as it is), `scales` and optional zero points `zp`, on
    graph input `ids` int64 [2, 3] (filled with --vocab)."""
    ins = ["data", "ids", "scales"] + (["zp"] if zp is not None else [])
    node = helper.make_node("GatherBlockQuantized", ins, ["y"], domain="com.microsoft", **attrs)

    def tensor(n, a):
        if data_type in (TensorProto.INT4, TensorProto.UINT4):
            return helper.make_tensor(n, data_type, a.shape, a.flatten().tolist())
        return numpy_helper.from_array(a, n)
    inits = [tensor("data", data), numpy_helper.from_array(scales, "scales")]
    if zp is not None:
        inits.append(tensor("zp", zp))
    out = TensorProto.FLOAT16 if scales.dtype == np.float16 else F
    g = helper.make_graph([node], name, [helper.make_tensor_value_info("ids", TensorProto.INT64, [2, 3])],
                          [helper.make_tensor_value_info("y", out, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET),
                                            helper.make_opsetid("com.microsoft", 1)],
                          producer_name="make_op_models.py")
    m.ir_version = 10
    return name, m


def nbits_g_idx(name, with_zero_points):
    """com.microsoft MatMulNBits with g_idx (GPTQ's act-order: row k of B takes the scale and
    zero point of block g_idx[k], a shuffled assignment), 4-bit codes, K = 64 in blocks of 16,
    with or without (float) zero points, on input a [batch, 64]."""
    rng = np.random.default_rng(2)
    k, n, bs = 64, 8, 16
    blocks = k // bs
    b = rng.integers(0, 256, (n, blocks, bs // 2), dtype=np.uint8)
    scales = (rng.random((n * blocks,), dtype=np.float32) * 0.1).astype(np.float32)
    g_idx = rng.permutation(np.repeat(np.arange(blocks), bs)).astype(np.int32)
    inits = [init("b", b), init("s", scales), init("g", g_idx)]
    ins = ["a", "b", "s", "", "g"]
    if with_zero_points:
        # Float zero points: onnxruntime 1.31's CPU kernel reads packed uint8 zero points
        # next to g_idx into a variable it never uses (its zero point stays 8), so only
        # these can be compared with it.
        inits.append(init("zp", (rng.random((n * blocks,)) * 15).astype(np.float32)))
        ins[3] = "zp"
    node = helper.make_node("MatMulNBits", ins, ["y"], domain="com.microsoft", K=k, N=n, bits=4,
                            block_size=bs)
    g = helper.make_graph([node], name, [helper.make_tensor_value_info("a", F, ["batch", k])],
                          [helper.make_tensor_value_info("y", F, ["batch", n])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET),
                                            helper.make_opsetid("com.microsoft", 1)],
                          producer_name="make_op_models.py")
    m.ir_version = 10
    return name, m


CASES += [nbits_g_idx("nbits4_g_idx", False), nbits_g_idx("nbits4_g_idx_zero_points", True)]

RNG_GBQ = np.random.default_rng(5)
# GatherBlockQuantized on each code format: UINT8 with two 4-bit codes per byte (no zero
# points; packed zero points with a pad nibble, 5 blocks a row), UINT8 8-bit codes, INT4
# gathered along axis 1 and quantized along axis 0 with float16 scales, a 3-D UINT4 table
# with UINT4 zero points.
CASES += [
    gbq_model("gbq_u8_4bit", TensorProto.UINT8, RNG_GBQ.integers(0, 256, (6, 40), dtype=np.uint8),
              RNG_GBQ.random((6, 5), dtype=np.float32), block_size=16),
    gbq_model("gbq_u8_4bit_zero_points", TensorProto.UINT8,
              RNG_GBQ.integers(0, 256, (6, 40), dtype=np.uint8), RNG_GBQ.random((6, 5), dtype=np.float32),
              zp=RNG_GBQ.integers(0, 256, (6, 3), dtype=np.uint8), block_size=16),
    gbq_model("gbq_u8_8bit_zero_points", TensorProto.UINT8,
              RNG_GBQ.integers(0, 256, (6, 40), dtype=np.uint8), RNG_GBQ.random((6, 3), dtype=np.float32),
              zp=RNG_GBQ.integers(0, 256, (6, 3), dtype=np.uint8), block_size=16, bits=8),
    gbq_model("gbq_int4_axis1_f16", TensorProto.INT4, RNG_GBQ.integers(-8, 8, (40, 7)),
              RNG_GBQ.random((3, 7)).astype(np.float16), block_size=16, gather_axis=1,
              quantize_axis=0),
    gbq_model("gbq_uint4_3d_zero_points", TensorProto.UINT4, RNG_GBQ.integers(0, 16, (3, 4, 32)),
              RNG_GBQ.random((3, 4, 2), dtype=np.float32), zp=RNG_GBQ.integers(0, 16, (3, 4, 2)),
              block_size=16, quantize_axis=2),
]


def gbq_embedding(out_dir, name, is_symmetric):
    """An embedding (Gather of a [50, 72] table) through onnxruntime's weight-only quantizer
    with Gather among its op types: a GatherBlockQuantized of INT4 codes (symmetric) or UINT4
    codes and zero points, blocks of 32 along the hidden axis (a partial last block)."""
    from onnxruntime.quantization import matmul_nbits_quantizer as mq

    rng = np.random.default_rng(3)
    emb = (rng.standard_normal((50, 72)) * 0.3).astype(np.float32)
    g = helper.make_graph([helper.make_node("Gather", ["emb", "ids"], ["y"], axis=0)], "embedding",
                          [helper.make_tensor_value_info("ids", TensorProto.INT64, ["b", "s"])],
                          [helper.make_tensor_value_info("y", F, ["b", "s", 72])], [init("emb", emb)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)],
                          producer_name="make_op_models.py")
    m.ir_version = 10
    cfg = mq.DefaultWeightOnlyQuantConfig(block_size=32, is_symmetric=is_symmetric,
                                          op_types_to_quantize=("MatMul", "Gather"),
                                          quant_axes=(("Gather", 1),))
    q = mq.MatMulNBitsQuantizer(m, algo_config=cfg)
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


# onnxruntime's attention fusions (com.microsoft Attention, MultiHeadAttention,
# EmbedLayerNormalization) on every mask format its CPU kernels read. Masks that must hold
# padding are initializers; a graph input named "keep" gets uniform ints in [0, 10) from
# ort_reference.py (about one zero in ten: hidden keys, or entries Embed's count skips).
I32 = TensorProto.INT32


def rng_of(name):
    """A generator of its own per model, so that adding a case changes no other model."""
    return np.random.default_rng(zlib.crc32(name.encode()))


def ms_attention(name, op, inputs, outputs, inits=(), **attrs):
    """One com.microsoft node; `inputs` are node input names (None: omitted), graph inputs
    given as (name, elem, shape) in `graph_inputs=`, initializers as (name, array)."""
    graph_inputs = attrs.pop("graph_inputs")
    names = [n or "" for n in inputs]
    while names and not names[-1]:
        names.pop()
    node = helper.make_node(op, names, [o for o, _ in outputs], domain="com.microsoft", **attrs)
    g = helper.make_graph(
        [node], name, [helper.make_tensor_value_info(n, t, s) for n, t, s in graph_inputs],
        [helper.make_tensor_value_info(o, I32 if o == "mask_index" else F, s)
         for o, s in outputs if o],
        [init(n, a) for n, a in inits])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET),
                                            helper.make_opsetid("com.microsoft", 1)],
                          producer_name="make_op_models.py")
    m.ir_version = 10
    return name, m


def randn(rng, *shape, scale=0.5):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def mask_3d(name, shape):
    return (rng_of(name + ".mask").random(shape) > 0.3).astype(np.int32)


def attention(name, mask=None, b=2, s=6, di=16, heads=2, sizes=None, past=0, bias_in=False,
              mask_input=None, dims=None, **attrs):
    """com.microsoft Attention on x [b, s, di] (symbolic `dims` names if given) with a packed
    QKV weight; `mask` a constant mask_index, `mask_input` a graph-input one; `past` > 0 adds
    past [2, b, heads, past, head] and the present output; `bias_in` an attention_bias."""
    d, dv = (sizes[0], sizes[2]) if sizes else (di, di)
    if sizes:
        attrs["qkv_hidden_sizes"] = sizes
    rng = rng_of(name)
    bb, ss = dims or (b, s)
    graph_inputs = [("x", F, [bb, ss, di])]
    inits = [("weights", randn(rng, di, 2 * d + dv)), ("bias", randn(rng, 2 * d + dv))]
    if mask is not None:
        inits.append(("mask_index", np.asarray(mask, np.int32)))
    if mask_input is not None:
        graph_inputs.append(mask_input)
    mask_name = "mask_index" if mask is not None else (mask_input[0] if mask_input else None)
    h = d // heads
    outputs = [("y", [bb, ss, dv])]
    if past:
        graph_inputs.append(("past", F, [2, b, heads, past, h]))
        outputs.append(("present", [2, b, heads, past + s, h]))
    if bias_in:
        graph_inputs.append(("attention_bias", F, [1, heads, s, past + s]))
    return ms_attention(name, "Attention",
                        ["x", "weights", "bias", mask_name, "past" if past else None,
                         "attention_bias" if bias_in else None],
                        outputs, inits, graph_inputs=graph_inputs, num_heads=heads, **attrs)


def mha(name, b=2, s=5, kv=7, d=16, dv=16, heads=2, key_4d=False, bias=True, mask=None,
        past=0, bias_in=False, qk=False, **attrs):
    """com.microsoft MultiHeadAttention with separate query [b, s, d], key [b, kv, d] and
    value [b, kv, dv] (or, with `key_4d`, key and value already [b, heads, kv, head])."""
    h, hv = d // heads, dv // heads
    if key_4d:
        kin = [("key", F, [b, heads, kv, h]), ("value", F, [b, heads, kv, hv])]
    else:
        kin = [("key", F, [b, kv, d]), ("value", F, [b, kv, dv])]
    graph_inputs = [("query", F, [b, s, d])] + kin
    inits = [("bias", randn(rng_of(name), 2 * d + dv))] if bias else []
    if mask is not None:
        inits.append(("key_padding_mask", np.asarray(mask, np.int32)))
    total = past + kv
    if bias_in:
        graph_inputs.append(("attention_bias", F, [b, 1, s, total]))
    if past:
        graph_inputs += [("past_key", F, [b, heads, past, h]), ("past_value", F, [b, heads, past, hv])]
    outputs = [("y", [b, s, dv])]
    if past or qk:
        outputs += [("present_key", [b, heads, total, h]), ("present_value", [b, heads, total, hv])]
    if qk:
        outputs.append(("qk", [b, heads, s, total]))
    inputs = ["query", "key", "value", "bias" if bias else None,
              "key_padding_mask" if mask is not None else None,
              "attention_bias" if bias_in else None,
              "past_key" if past else None, "past_value" if past else None]
    return ms_attention(name, "MultiHeadAttention", inputs, outputs, inits,
                        graph_inputs=graph_inputs, num_heads=heads, **attrs)


def embed_layer_norm(name, segment=True, mask=True, position_ids=None, b=2, s=7, hidden=16):
    """com.microsoft EmbedLayerNormalization with all three outputs: tables of ten rows or
    more, so the uniform ids in [0, 10) ort_reference.py makes index them all."""
    rng = rng_of(name)
    graph_inputs = [("input_ids", I32, [b, s])]
    inits = [("word_embedding", randn(rng, 12, hidden, scale=1.0)),
             ("position_embedding", randn(rng, max(s, 10), hidden, scale=1.0)),
             ("gamma", randn(rng, hidden, scale=1.0)), ("beta", randn(rng, hidden, scale=1.0))]
    if segment:
        graph_inputs.append(("sentence", I32, [b, s]))
        inits.append(("segment_embedding", randn(rng, 10, hidden, scale=1.0)))
    if mask:
        graph_inputs.append(("keep", I32, [b, s]))
    if position_ids:
        graph_inputs.append(("position_ids", I32, position_ids))
    inputs = ["input_ids", "sentence" if segment else None, "word_embedding",
              "position_embedding", "segment_embedding" if segment else None, "gamma", "beta",
              "keep" if mask else None, "position_ids" if position_ids else None]
    outputs = [("y", [b, s, hidden]), ("mask_index", [b]), ("embedding_sum", [b, s, hidden])]
    return ms_attention(name, "EmbedLayerNormalization", inputs, outputs, inits,
                        graph_inputs=graph_inputs, epsilon=1e-5)


CASES += [
    attention("ms_attention_no_mask"),
    attention("ms_attention_raw_mask_padding",
              mask=[[1, 1, 1, 1, 0, 0], [0, 0, 1, 1, 1, 1]]),
    attention("ms_attention_raw_mask_runtime", mask_input=("keep", I32, ["batch", "seq"]),
              dims=("batch", "seq")),
    attention("ms_attention_mask_index_ends", mask=[4, 6]),
    attention("ms_attention_mask_index_ends_starts", mask=[5, 6, 0, 2]),
    attention("ms_attention_mask_3d", mask=mask_3d("ms_attention_mask_3d", (2, 6, 6))),
    attention("ms_attention_unidirectional_left_padding", unidirectional=1,
              mask=[[0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1]]),
    attention("ms_attention_qkv_hidden_sizes", di=12, sizes=[16, 16, 8],
              mask=[[1, 1, 1, 1, 1, 0], [1, 1, 1, 0, 0, 0]]),
    attention("ms_attention_past_causal", past=3, unidirectional=1,
              mask=[[0, 1, 1, 1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1, 1, 1, 0]]),
    attention("ms_attention_bias_causal", bias_in=True, unidirectional=1, mask=[5, 6]),
    attention("ms_attention_filter_value_scale_all_masked_row",
              mask=[[1, 1, 1, 0, 0, 0], [0, 0, 0, 0, 0, 0]], mask_filter_value=-50.0, scale=0.3),
    mha("ms_mha_key_padding_mask", mask=[[1, 1, 1, 1, 1, 0, 0], [0, 1, 1, 1, 1, 1, 1]], dv=8),
    mha("ms_mha_lengths_past_causal_qk", kv=5, past=3, mask=[6, 8], bias_in=True,
        unidirectional=1, qk=True),
    mha("ms_mha_mask_3d_scale", mask=mask_3d("ms_mha_mask_3d_scale", (2, 5, 7)),
        scale=0.2, mask_filter_value=-30.0),
    mha("ms_mha_projected_kv", key_4d=True, bias=False),
    embed_layer_norm("ms_embed_layer_norm"),
    embed_layer_norm("ms_embed_layer_norm_position_ids", segment=False, mask=False,
                     position_ids=[1, 7]),
    embed_layer_norm("ms_embed_layer_norm_batch_position_ids", position_ids=[2, 7]),
]


def mha_packed(name, kv_only, b=2, s=5, heads=2, h=8):
    """MultiHeadAttention on a packed QKV query [b, s, heads, 3, h] (or, with `kv_only`, a
    query [b, s, heads·h] and a packed KV key [b, s + 2, heads, 2, h]), with a bias; and
    NAME_ref, the same inputs unpacked with Gather and Reshape into the separate form, which
    onnxruntime's CPU kernel runs (it has no packed path): the reference for NAME."""
    d, kv = heads * h, s + 2
    bias = init("bias", randn(rng_of(name), 3 * d))
    if kv_only:
        graph_inputs = [("query", F, [b, s, d]), ("kv", F, [b, kv, heads, 2, h])]
        packed, parts, length = "kv", ["key", "value"], kv
    else:
        graph_inputs = [("qkv", F, [b, s, heads, 3, h])]
        packed, parts, length = "qkv", ["query", "key", "value"], s
    out = [("y", F, [b, s, d])]
    attrs = dict(domain="com.microsoft", num_heads=heads)
    inputs = ["query", "kv"] if kv_only else ["qkv"]
    node = helper.make_node("MultiHeadAttention", inputs + [""] * (3 - len(inputs)) + ["bias"],
                            ["y"], **attrs)
    ref_nodes, inits = [], [bias, init("flat", np.array([0, 0, -1], np.int64))]
    for i, part in enumerate(parts):
        inits.append(init(f"{part}_at", np.array(i, np.int64)))
        ref_nodes += [helper.make_node("Gather", [packed, f"{part}_at"], [f"{part}_bsnh"], axis=3),
                      helper.make_node("Reshape", [f"{part}_bsnh", "flat"], [part])]
    ref_nodes.append(helper.make_node("MultiHeadAttention", ["query", "key", "value", "bias"],
                                      ["y"], **attrs))
    opsets = [helper.make_opsetid("", OPSET), helper.make_opsetid("com.microsoft", 1)]
    models = []
    for n, nodes, inits_ in [(name, [node], [bias]), (f"{name}_ref", ref_nodes, inits)]:
        g = helper.make_graph(nodes, n,
                              [helper.make_tensor_value_info(i, t, sh) for i, t, sh in graph_inputs],
                              [helper.make_tensor_value_info(o, t, sh) for o, t, sh in out], inits_)
        m = helper.make_model(g, opset_imports=opsets, producer_name="make_op_models.py")
        m.ir_version = 10
        models.append((n, m))
    assert length > 0
    return models


CASES += mha_packed("ms_mha_packed_qkv", False) + mha_packed("ms_mha_packed_kv", True)


def q_attention(out_dir, name, weight_type, mask):
    """An Attention (mask_index given as a constant) quantized by onnxruntime's dynamic
    quantizer: DynamicQuantizeLinear of the input, then com.microsoft QAttention with the
    8-bit weight (`weight_type` QInt8 or QUInt8) and its scale and zero point. Int8 weights
    get `reduce_range` (7 bits): onnxruntime's U8S8 kernel on an AVX2 CPU without VNNI
    saturates pairs of full-range products in 16 bits (see ARCHITECTURE.md), so its sums would
    not be the exact ones fp8c computes."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    _, m = attention(name, mask=mask, dims=("batch", 6))
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "attention.onnx")
        onnx.save(m, src)
        dst = os.path.join(out_dir, f"{name}.onnx")
        quantize_dynamic(src, dst, weight_type=getattr(QuantType, weight_type),
                         reduce_range=weight_type == "QInt8",
                         extra_options={"DefaultTensorType": F})
    assert any(n.op_type == "QAttention" for n in onnx.load(dst).graph.node), dst
    return dst


def q_embed_layer_norm(out_dir, name):
    """An EmbedLayerNormalization (segments, a mask; outputs output and mask_index) quantized
    by onnxruntime's dynamic quantizer into com.microsoft QEmbedLayerNormalization: the five
    tables uint8 with their scales and zero points."""
    from onnxruntime.quantization import quantize_dynamic

    _, m = embed_layer_norm(name)
    del m.graph.output[2]
    m.graph.node[0].output.pop()
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "embed.onnx")
        onnx.save(m, src)
        dst = os.path.join(out_dir, f"{name}.onnx")
        quantize_dynamic(src, dst, extra_options={"DefaultTensorType": F})
    ops = [n.op_type for n in onnx.load(dst).graph.node]
    assert ops == ["QEmbedLayerNormalization"], (dst, ops)
    return dst


# onnxruntime-genai's com.microsoft GroupQueryAttention (the attention of its LLM exports).
def gqa_model(name, batch, seq, past, lens, heads, kv_heads, head, packed, rotary, **attrs):
    """One GroupQueryAttention node as onnxruntime-genai writes it: query [B, S, N·H] with key
    and value [B, S, kvN·H], or all three packed in query; past KV [B, kvN, P, H] when `past`;
    seqlens_k (`lens`, each row's total length − 1) and total_sequence_length as int32
    constants; with `rotary` (the rotated dims), cos/sin caches [64, rotary/2]."""
    total = max(lens) + 1
    width = (heads + 2 * kv_heads) * head if packed else heads * head
    vi = helper.make_tensor_value_info
    ins, names = [vi("query", F, [batch, seq, width])], ["query"]
    kv = ("key", "value")
    if not packed:
        ins += [vi(n, F, [batch, seq, kv_heads * head]) for n in kv]
    names += list(kv) if not packed else ["", ""]
    pasts = ("past_key", "past_value")
    if past:
        ins += [vi(n, F, [batch, kv_heads, past, head]) for n in pasts]
    names += list(pasts) if past else ["", ""]
    inits = [init("seqlens_k", np.array(lens, np.int32)), init("total_len", np.int32(total))]
    names += ["seqlens_k", "total_len"]
    if rotary:
        half = rotary // 2
        angle = np.arange(64)[:, None] / (10000 ** (np.arange(half) / half))[None, :]
        inits += [init("cos", np.cos(angle).astype(np.float32)),
                  init("sin", np.sin(angle).astype(np.float32))]
        names += ["cos", "sin"]
        attrs["do_rotary"] = 1
    present = max(past, total)
    outs = [vi("y", F, [batch, seq, heads * head])]
    outs += [vi(n, F, [batch, kv_heads, present, head]) for n in ("present_key", "present_value")]
    node = helper.make_node("GroupQueryAttention", names, [o.name for o in outs],
                            domain="com.microsoft", num_heads=heads, kv_num_heads=kv_heads, **attrs)
    g = helper.make_graph([node], name, ins, outs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET),
                                            helper.make_opsetid("com.microsoft", 1)],
                          producer_name="make_op_models.py")
    m.ir_version = 10
    return name, m


CASES += [
    gqa_model("ms_gqa_prompt_window_softcap", 2, 6, 0, [5, 5], 4, 2, 16, False, 0,
              local_window_size=2, softcap=3.0),
    gqa_model("ms_gqa_prompt_packed_rotary", 1, 5, 0, [4], 4, 1, 16, True, 16,
              rotary_interleaved=1),
    gqa_model("ms_gqa_decode_ragged_rotary_partial", 2, 1, 6, [3, 5], 2, 2, 32, True, 16,
              scale=0.3),
    gqa_model("ms_gqa_chunk_after_past", 1, 3, 4, [6], 4, 2, 16, False, 16),
]


# What onnxruntime's own graph optimizer saves (SessionOptions.optimized_model_filepath).
def ort_graph_model(name, op, ins, out_shape, inits, **attrs):
    """One com.microsoft node of onnxruntime's graph optimizer on f32 graph inputs `ins`
    (name, shape) and initializers `inits` (name, array)."""
    vi = helper.make_tensor_value_info
    names = [n for n, _ in ins] + [n if a is not None else "" for n, a in inits]
    node = helper.make_node(op, names, ["y"], domain="com.microsoft", **attrs)
    g = helper.make_graph([node], name, [vi(n, F, s) for n, s in ins], [vi("y", F, out_shape)],
                          [init(n, a) for n, a in inits if a is not None])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET),
                                            helper.make_opsetid("com.microsoft", 1)],
                          producer_name="make_op_models.py")
    m.ir_version = 10
    return name, m


RNG_GRAPH = np.random.default_rng(23)


def graph_w(*shape, dtype=np.float32):
    """Random f32 weights, or integer codes: int8 within ±63 (onnxruntime's AVX2 u8×s8
    kernel adds code pairs in saturating 16-bit lanes, so full-range int8 weights make its own
    sums inexact; `quantize_dynamic`'s `reduce_range` keeps them this small for that reason)."""
    if dtype == np.float32:
        return (RNG_GRAPH.standard_normal(shape) * 0.5).astype(np.float32)
    lo, hi = (-63, 64) if dtype == np.int8 else (0, 256)
    return RNG_GRAPH.integers(lo, hi, size=shape).astype(dtype)


CASES += [
    ort_graph_model("ms_fused_matmul_trans_alpha", "FusedMatMul", [("a", [2, 8, 5])], [2, 5, 3],
                    [("b", graph_w(2, 8, 3))], alpha=0.25, transA=1),
    ort_graph_model("ms_fused_matmul_trans_b", "FusedMatMul", [("a", [4, 6])], [4, 3],
                    [("b", graph_w(3, 6))], transB=1),
    ort_graph_model("ms_fused_gemm_leaky_relu", "FusedGemm", [("a", [4, 6])], [4, 3],
                    [("b", graph_w(3, 6)), ("c", graph_w(3))], transB=1, alpha=0.5, beta=2.0,
                    activation="LeakyRelu", activation_alpha=0.2),
    ort_graph_model("ms_fused_conv_hard_sigmoid", "FusedConv", [("x", [2, 3, 7, 7])],
                    [2, 4, 7, 7], [("w", graph_w(4, 3, 3, 3)), ("b", graph_w(4))],
                    pads=[1, 1, 1, 1], activation="HardSigmoid",
                    activation_params=[0.25, 0.5]),
    ort_graph_model("ms_fused_conv_sum_relu", "FusedConv", [("x", [1, 3, 6, 6])],
                    [1, 4, 3, 3], [("w", graph_w(4, 3, 2, 2)), ("b", graph_w(4)),
                                   ("z", graph_w(1, 4, 3, 3))],
                    strides=[2, 2], activation="Relu"),
    ort_graph_model("ms_dynamic_quantize_matmul", "DynamicQuantizeMatMul", [("a", [3, 4, 8])],
                    [3, 4, 5], [("b", graph_w(8, 5, dtype=np.int8)),
                                ("b_scale", (np.arange(1, 6) * 0.02).astype(np.float32)),
                                ("b_zero_point", np.zeros(5, np.int8)),
                                ("bias", graph_w(5))]),
    ort_graph_model("ms_dynamic_quantize_matmul_u8", "DynamicQuantizeMatMul", [("a", [4, 8])],
                    [4, 5], [("b", graph_w(8, 5, dtype=np.uint8)),
                             ("b_scale", np.float32(0.03)), ("b_zero_point", np.uint8(130))]),
]


def rotary_caches(positions, half):
    """cos and sin caches [positions, half] of the usual 10000^(−i/half) frequencies."""
    angle = np.arange(positions)[:, None] / (10000 ** (np.arange(half) / half))[None, :]
    return np.cos(angle).astype(np.float32), np.sin(angle).astype(np.float32)


def ms_rotary(name, shape, positions, half, **attrs):
    """One com.microsoft RotaryEmbedding (onnxruntime's own; its optimizer writes it for
    Phi/Llama graphs): input of `shape`, position_ids `positions` (one offset, or [B, S])."""
    cos, sin = rotary_caches(32, half)
    return ort_graph_model(name, "RotaryEmbedding", [("x", shape)], shape,
                           [("position_ids", np.asarray(positions, np.int64)),
                            ("cos", cos), ("sin", sin)], **attrs)


CASES += [
    ms_rotary("ms_rotary_offset_3d", [2, 5, 64], [3], 8, num_heads=4),
    ms_rotary("ms_rotary_ids_4d_interleaved_partial", [2, 2, 5, 16],
              [[0, 1, 2, 3, 4], [6, 7, 8, 9, 10]], 4, interleaved=1, rotary_embedding_dim=8,
              num_heads=2),
    ms_rotary("ms_rotary_3d_heads_from_cache", [1, 4, 32], [0], 8),
]


def matmul_integer_to_float(name):
    """MatMulIntegerToFloat on a uint8 graph input A and int8 weights with zero points, per
    column scales and a bias (what the optimizer makes of MatMulInteger → Cast → Mul)."""
    vi = helper.make_tensor_value_info
    ins = ["a", "b", "a_scale", "b_scale", "a_zero_point", "b_zero_point", "bias"]
    node = helper.make_node("MatMulIntegerToFloat", ins, ["y"], domain="com.microsoft")
    inits = [init("b", graph_w(6, 4, dtype=np.int8)), init("a_scale", np.float32(0.05)),
             init("b_scale", (np.arange(1, 5) * 0.01).astype(np.float32)),
             init("a_zero_point", np.uint8(120)), init("b_zero_point", np.zeros(4, np.int8)),
             init("bias", graph_w(4))]
    g = helper.make_graph([node], name, [vi("a", U8, [3, 6])], [vi("y", F, [3, 4])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET),
                                            helper.make_opsetid("com.microsoft", 1)],
                          producer_name="make_op_models.py")
    m.ir_version = 10
    return name, m


CASES += [matmul_integer_to_float("ms_matmul_integer_to_float")]


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
    for name, weight_type, mask in [("ms_q_attention_s8", "QInt8", [4, 6]),
                                    ("ms_q_attention_u8", "QUInt8", [[1, 1, 1, 1, 1, 1],
                                                                     [0, 1, 1, 1, 1, 0]])]:
        print(f"wrote {os.path.basename(q_attention(out_dir, name, weight_type, mask))}")
    print(f"wrote {os.path.basename(q_embed_layer_norm(out_dir, 'ms_q_embed_layer_norm'))}")
    for name, quant in [("nbits4_sym_b32", dict(bits=4, block_size=32, is_symmetric=True)),
                        ("nbits4_asym_b16", dict(bits=4, block_size=16, is_symmetric=False)),
                        ("nbits8_asym_b32", dict(bits=8, block_size=32, is_symmetric=False))]:
        print(f"wrote {os.path.basename(nbits_mlp(out_dir, name, **quant))}")
    for name, sym in [("nbits4_qdq_int4_sym", True), ("nbits4_qdq_uint4_zero_points", False)]:
        print(f"wrote {os.path.basename(nbits_qdq_mlp(out_dir, name, sym))}")
    for name, sym in [("gbq_embedding_int4", True), ("gbq_embedding_uint4_zero_points", False)]:
        print(f"wrote {os.path.basename(gbq_embedding(out_dir, name, sym))}")
    for name in cast_e8m0_dirs(out_dir):
        print(f"wrote {name}/")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
