"""Makes the small CNN example: examples/models/cnn_digits.onnx, for the 8x8 digits of
examples/data/ (made by make_mlp_example.py).

What a PyTorch user would export for `nn.Sequential(Unflatten(1, (1, 8, 8)), Conv2d(1, 16, 3,
padding=1), ReLU(), MaxPool2d(2), Conv2d(16, 32, 3, padding=1), ReLU(), AvgPool2d(2),
Flatten(), Linear(128, 10))`: input `x` f32[batch, 64] (the flat digits, as the MLP takes
them), output `logits` f32[batch, 10], opset 17, PyTorch's default initialisation (uniform
±1/sqrt(fan_in)) from a fixed seed. Convolutions, both poolings and their gradients are what
the CUDA backend's CNN training is checked with (tests/cuda_cli.rs).

Usage: PY=$(scripts/python-env.sh); $PY scripts/make_cnn_example.py
"""

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parent.parent


def model(seed: int = 0) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)

    def uniform(shape, fan_in):
        bound = 1.0 / np.sqrt(fan_in)
        return rng.uniform(-bound, bound, shape).astype(np.float32)

    inits = [
        numpy_helper.from_array(np.array([-1, 1, 8, 8], dtype=np.int64), "image_shape"),
        numpy_helper.from_array(uniform((16, 1, 3, 3), 9), "conv1.weight"),
        numpy_helper.from_array(uniform((16,), 9), "conv1.bias"),
        numpy_helper.from_array(uniform((32, 16, 3, 3), 144), "conv2.weight"),
        numpy_helper.from_array(uniform((32,), 144), "conv2.bias"),
        numpy_helper.from_array(uniform((10, 128), 128), "fc.weight"),
        numpy_helper.from_array(uniform((10,), 128), "fc.bias"),
    ]
    nodes = [
        helper.make_node("Reshape", ["x", "image_shape"], ["image"], name="unflatten"),
        helper.make_node("Conv", ["image", "conv1.weight", "conv1.bias"], ["c1"], name="conv1",
                         kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("MaxPool", ["r1"], ["p1"], name="pool1", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "conv2.weight", "conv2.bias"], ["c2"], name="conv2",
                         kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        helper.make_node("AveragePool", ["r2"], ["p2"], name="pool2", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", ["p2"], ["flat"], name="flatten", axis=1),
        helper.make_node("Gemm", ["flat", "fc.weight", "fc.bias"], ["logits"], name="fc", transB=1),
    ]
    graph = helper.make_graph(
        nodes,
        "cnn_digits",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 64])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 10])],
        inits,
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="fp8c-examples")
    m.ir_version = 8
    onnx.checker.check_model(m, full_check=True)
    return m


def main() -> None:
    out = ROOT / "examples" / "models" / "cnn_digits.onnx"
    onnx.save(model(), out)
    print(f"wrote {out.relative_to(ROOT)} ({out.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
