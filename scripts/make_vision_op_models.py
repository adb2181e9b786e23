#!/usr/bin/env python3
"""Builds small one-op ONNX models of the vision ops fp8c imports by decomposition
(InstanceNormalization, GroupNormalization, DepthToSpace, SpaceToDepth, Resize, Upsample) with
onnx's Python API, never with fp8c, for tests/op_parity.rs, which runs each through `fp8c run`
and compares with onnxruntime on the same inputs.

Usage (with the project's venv: PY=$(scripts/python-env.sh)):

  $PY scripts/make_vision_op_models.py [OUT_DIR]     # default: tests/models/ops

One model per mode and attribute combination fp8c claims: Resize `nearest` with each
`nearest_mode` and `coordinate_transformation_mode`, `linear` with half_pixel,
pytorch_half_pixel (including an output length of 1), align_corners, asymmetric and
half_pixel_symmetric, up and down, from `scales` and from `sizes`, opset 18's `axes`, an
integer tensor, trilinear 5-D and plain 2-D inputs; Resize-10 and Upsample-9/7 (asymmetric,
onnxruntime's legacy rounding); DepthToSpace DCR and CRD, SpaceToDepth; InstanceNormalization
on 1-D, 2-D and 3-D images; GroupNormalization-21 (per-channel affine) and -18 (per-group).
Scales are chosen so that nearest coordinates land on exact halves, where the rounding modes
differ. Initializers are random (seed 0); graph inputs are filled by scripts/ort_reference.py
(--make-inputs) at test time.
"""

import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

RNG = np.random.default_rng(0)
F = TensorProto.FLOAT
I32 = TensorProto.INT32


def model(nodes, inputs, outputs, inits=(), opset=21, check=True):
    g = helper.make_graph(
        nodes, "vision_op",
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs],
        list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)],
                          producer_name="make_vision_op_models.py")
    m.ir_version = 10 if opset <= 21 else 11
    if check:
        onnx.checker.check_model(m, full_check=True)
    return m


def init(name, a):
    return numpy_helper.from_array(np.asarray(a), name)


def rand(shape):
    return RNG.standard_normal(shape).astype(np.float32)


def instance_norm(name, shape, **attrs):
    c = shape[1]
    node = helper.make_node("InstanceNormalization", ["x", "scale", "bias"], ["y"], **attrs)
    return name, model([node], [("x", F, shape)], [("y", F, shape)],
                       [init("scale", rand([c])), init("bias", rand([c]))])


def group_norm(name, shape, groups, opset, **attrs):
    n = shape[1] if opset >= 21 else groups
    node = helper.make_node("GroupNormalization", ["x", "scale", "bias"], ["y"],
                            num_groups=groups, **attrs)
    return name, model([node], [("x", F, shape)], [("y", F, shape)],
                       [init("scale", rand([n])), init("bias", rand([n]))], opset,
                       check=opset >= 21)


def depth_to_space(name, shape, b, mode):
    n, c, h, w = shape
    node = helper.make_node("DepthToSpace", ["x"], ["y"], blocksize=b, mode=mode)
    return name, model([node], [("x", F, shape)], [("y", F, [n, c // (b * b), h * b, w * b])])


def space_to_depth(name, shape, b):
    n, c, h, w = shape
    node = helper.make_node("SpaceToDepth", ["x"], ["y"], blocksize=b)
    return name, model([node], [("x", F, shape)], [("y", F, [n, c * b * b, h // b, w // b])])


def resize(name, shape, out_shape, scales=None, sizes=None, dtype=F, opset=21, **attrs):
    """Resize with constant `scales` or `sizes` (initializers) and an empty roi."""
    ins, inits = ["x", ""], []
    if scales is not None:
        ins.append("scales")
        inits.append(init("scales", np.array(scales, np.float32)))
    if sizes is not None:
        if scales is None:
            ins.append("")
        ins.append("sizes")
        inits.append(init("sizes", np.array(sizes, np.int64)))
    node = helper.make_node("Resize", ins, ["y"], **attrs)
    return name, model([node], [("x", dtype, shape)], [("y", dtype, out_shape)], inits, opset)


def legacy(name, op, opset, shape, out_shape, scales, mode):
    """Resize-10 / Upsample-9 (scales an input) or Upsample-7 (scales an attribute)."""
    if opset < 9:
        node = helper.make_node(op, ["x"], ["y"], mode=mode, scales=[float(s) for s in scales])
        inits = []
    else:
        node = helper.make_node(op, ["x", "scales"], ["y"], mode=mode)
        inits = [init("scales", np.array(scales, np.float32))]
    g = helper.make_graph([node], "vision_op", [helper.make_tensor_value_info("x", F, shape)],
                          [helper.make_tensor_value_info("y", F, out_shape)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)],
                          producer_name="make_vision_op_models.py")
    m.ir_version = 7
    onnx.checker.check_model(m)
    return name, m


X4 = [1, 2, 4, 5]

CASES = [
    instance_norm("instance_norm_2d", [2, 3, 5, 7]),
    instance_norm("instance_norm_1d_epsilon", [2, 4, 9], epsilon=1e-3),
    instance_norm("instance_norm_3d", [1, 2, 3, 4, 5]),
    group_norm("group_norm_21", [2, 6, 4, 5], 3, 21, epsilon=1e-4),
    group_norm("group_norm_21_one_group_1d", [2, 4, 10], 1, 21),
    group_norm("group_norm_18_per_group", [2, 6, 3, 4], 2, 18),
    depth_to_space("depth_to_space_dcr", [2, 8, 3, 4], 2, "DCR"),
    depth_to_space("depth_to_space_crd", [1, 18, 2, 3], 3, "CRD"),
    space_to_depth("space_to_depth", [2, 3, 6, 4], 2),
    # nearest: torch's Upsample(scale_factor=2) and each rounding x coordinate mode
    resize("resize_nearest_asymmetric_floor", X4, [1, 2, 8, 10], scales=[1, 1, 2, 2],
           mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor"),
    resize("resize_nearest_half_pixel_prefer_floor", X4, [1, 2, 6, 3],
           scales=[1, 1, 1.5, 0.6], mode="nearest"),
    resize("resize_nearest_half_pixel_prefer_ceil", X4, [1, 2, 6, 3],
           scales=[1, 1, 1.5, 0.6], mode="nearest", nearest_mode="round_prefer_ceil"),
    resize("resize_nearest_align_corners_prefer_ceil", X4, [1, 2, 7, 3],
           sizes=[1, 2, 7, 3], mode="nearest", coordinate_transformation_mode="align_corners",
           nearest_mode="round_prefer_ceil"),
    resize("resize_nearest_align_corners_prefer_floor", X4, [1, 2, 7, 9],
           sizes=[1, 2, 7, 9], mode="nearest", coordinate_transformation_mode="align_corners"),
    resize("resize_nearest_pytorch_half_pixel_ceil", X4, [1, 2, 10, 6],
           scales=[1, 1, 2.5, 1.25], mode="nearest",
           coordinate_transformation_mode="pytorch_half_pixel", nearest_mode="ceil"),
    resize("resize_nearest_tf_half_pixel_for_nn", X4, [1, 2, 3, 8], sizes=[1, 2, 3, 8],
           mode="nearest", coordinate_transformation_mode="tf_half_pixel_for_nn"),
    resize("resize_nearest_asymmetric_ceil_down", X4, [1, 2, 2, 3],
           scales=[1, 1, 0.5, 0.75], mode="nearest",
           coordinate_transformation_mode="asymmetric", nearest_mode="ceil"),
    resize("resize_nearest_half_pixel_symmetric_floor", X4, [1, 2, 6, 2],
           scales=[1, 1, 1.5, 0.5], mode="nearest",
           coordinate_transformation_mode="half_pixel_symmetric", nearest_mode="floor"),
    resize("resize_nearest_axes_int32", [2, 3, 4], [2, 6, 12], scales=[2, 3], dtype=I32,
           opset=18, axes=[1, -1], mode="nearest"),
    # linear: torch's bilinear (align_corners False / True) and the other coordinate modes
    resize("resize_linear_pytorch_half_pixel", X4, [1, 2, 8, 10], scales=[1, 1, 2, 2],
           mode="linear", coordinate_transformation_mode="pytorch_half_pixel"),
    resize("resize_linear_pytorch_half_pixel_to_one", X4, [1, 2, 1, 9], sizes=[1, 2, 1, 9],
           mode="linear", coordinate_transformation_mode="pytorch_half_pixel"),
    resize("resize_linear_align_corners", X4, [1, 2, 8, 10], scales=[1, 1, 2, 2],
           mode="linear", coordinate_transformation_mode="align_corners"),
    resize("resize_linear_align_corners_down", X4, [1, 2, 3, 3], sizes=[1, 2, 3, 3],
           mode="linear", coordinate_transformation_mode="align_corners"),
    # onnxruntime takes align_corners' output length as the integer size (2), where ONNX's
    # reference takes scale·in = 2.4 (test_resize_downsample_scales_linear_align_corners)
    resize("resize_linear_align_corners_scales_down", X4, [1, 2, 2, 3], scales=[1, 1, 0.6, 0.6],
           mode="linear", coordinate_transformation_mode="align_corners"),
    resize("resize_linear_half_pixel_up_down", X4, [1, 2, 6, 3], scales=[1, 1, 1.5, 0.6],
           mode="linear"),
    resize("resize_linear_asymmetric", X4, [1, 2, 2, 8], scales=[1, 1, 0.5, 1.7],
           mode="linear", coordinate_transformation_mode="asymmetric"),
    resize("resize_linear_half_pixel_symmetric", X4, [1, 2, 7, 3], sizes=[1, 2, 7, 3],
           mode="linear", coordinate_transformation_mode="half_pixel_symmetric"),
    resize("resize_linear_trilinear", [1, 2, 3, 4, 5], [1, 2, 6, 8, 7],
           sizes=[1, 2, 6, 8, 7], mode="linear"),
    resize("resize_linear_2d", [5, 6], [8, 4], sizes=[8, 4], mode="linear"),
    # deprecated forms: asymmetric coordinates, floor up / ceil down for nearest
    legacy("resize10_nearest", "Resize", 10, X4, [1, 2, 2, 12], [1, 1, 0.6, 2.5], "nearest"),
    legacy("resize10_linear", "Resize", 10, X4, [1, 2, 8, 7], [1, 1, 2, 1.5], "linear"),
    legacy("upsample9_nearest", "Upsample", 9, X4, [1, 2, 8, 15], [1, 1, 2, 3], "nearest"),
    legacy("upsample9_linear", "Upsample", 9, X4, [1, 2, 8, 10], [1, 1, 2, 2], "linear"),
    legacy("upsample7_nearest", "Upsample", 7, X4, [1, 2, 12, 10], [1, 1, 3, 2], "nearest"),
]


def main(argv):
    out_dir = argv[1] if len(argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "tests", "models", "ops")
    os.makedirs(out_dir, exist_ok=True)
    for name, m in CASES:
        onnx.save(m, os.path.join(out_dir, f"{name}.onnx"))
    print(f"wrote {len(CASES)} models to {out_dir}")


if __name__ == "__main__":
    main(sys.argv)
