"""Makes the MLP-classifier example: examples/models/mlp_digits.onnx and the digits data.

The model is what a PyTorch user would export for `nn.Sequential(Linear(64, 256), ReLU(),
Linear(256, 256), ReLU(), Linear(256, 10))`: three `Gemm` nodes (transB=1, weights stored as
[out, in]) with ReLUs, input `x` f32[batch, 64], output `logits` f32[batch, 10], opset 17,
PyTorch's default initialisation (uniform ±1/sqrt(fan_in)) from a fixed seed.

The data is scikit-learn's copy of the UCI "Optical Recognition of Handwritten Digits" test
set (1797 8x8 images, pixels 0..16; CC BY 4.0, E. Alpaydin and C. Kaynak), read from
`sklearn/datasets/data/digits.csv.gz` of a scikit-learn wheel, scaled to [0, 1] and split
80/20 with a fixed shuffle.

Usage: PY=$(scripts/python-env.sh); $PY scripts/make_mlp_example.py PATH/TO/digits.csv.gz
"""

import gzip
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parent.parent


def model(seed: int = 0) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    sizes = [64, 256, 256, 10]
    inits, nodes = [], []
    x = "x"
    for i, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        bound = 1.0 / np.sqrt(fan_in)
        w = rng.uniform(-bound, bound, (fan_out, fan_in)).astype(np.float32)
        b = rng.uniform(-bound, bound, (fan_out,)).astype(np.float32)
        inits += [numpy_helper.from_array(w, f"fc{i + 1}.weight"), numpy_helper.from_array(b, f"fc{i + 1}.bias")]
        y = "logits" if i == len(sizes) - 2 else f"fc{i + 1}.out"
        nodes.append(helper.make_node("Gemm", [x, f"fc{i + 1}.weight", f"fc{i + 1}.bias"], [y], name=f"fc{i + 1}", transB=1))
        if y != "logits":
            nodes.append(helper.make_node("Relu", [y], [f"relu{i + 1}"], name=f"relu{i + 1}"))
            x = f"relu{i + 1}"
    graph = helper.make_graph(
        nodes,
        "mlp_digits",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 64])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 10])],
        inits,
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="fp8c-examples")
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def main() -> None:
    src = Path(sys.argv[1])
    rows = np.loadtxt(gzip.open(src, "rt"), delimiter=",", dtype=np.float64)
    x = (rows[:, :64] / 16.0).astype(np.float32)
    y = rows[:, 64].astype(np.int64)
    order = np.random.default_rng(1).permutation(len(y))
    x, y = x[order], y[order]
    n_train = int(len(y) * 0.8)
    data = ROOT / "examples" / "data"
    np.savez_compressed(data / "digits_train.npz", x=x[:n_train], y=y[:n_train])
    np.savez_compressed(data / "digits_test.npz", x=x[n_train:])
    np.save(data / "digits_test_labels.npy", y[n_train:])
    onnx.save(model(), ROOT / "examples" / "models" / "mlp_digits.onnx")
    print(f"train {n_train}, test {len(y) - n_train} samples; wrote examples/models/mlp_digits.onnx")


if __name__ == "__main__":
    main()
