#!/usr/bin/env python3
"""Builds a scikit-learn classifier exported by skl2onnx (a third party's ONNX, with the
ai.onnx.ml label branch every skl2onnx classifier has) for tests/cli.rs, and onnxruntime's
outputs on fixed inputs.

Usage (needs scikit-learn and skl2onnx: the export venv, PY=$(scripts/export-env.sh)):

  $PY scripts/make_sklearn_model.py [OUT_DIR]        # default: tests/models/sklearn

Writes mlp_digits_clf.onnx: sklearn's MLPClassifier (64 -> 32 ReLU -> 10, 60 Adam epochs,
random_state 0) trained on sklearn's bundled digits data (pixels / 16), converted with
skl2onnx's defaults (opset 17, ai.onnx.ml 3): Cast, MatMul, Add, Relu, Softmax, then ArgMax
plus the ai.onnx.ml ops ArrayFeatureExtractor (label) and ZipMap (probabilities as a
sequence of maps). `add_result1` is the logits, `out_activations_result` the probabilities,
`argmax_output` the class index. And mlp_digits_clf.ref.npz: `X` (the first 32 digits),
`probabilities` and `label`, onnxruntime's outputs for them (ZipMap's maps turned back into
an array), plus `y`, their true classes.
"""

import os
import sys
import warnings

import numpy as np
import onnx
import onnxruntime as ort
from sklearn.datasets import load_digits
from sklearn.exceptions import ConvergenceWarning
from sklearn.neural_network import MLPClassifier
from skl2onnx import to_onnx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ort_reference import save_npz  # noqa: E402  (byte-deterministic .npz writer)


def main(argv):
    out_dir = argv[1] if len(argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "tests", "models", "sklearn")
    os.makedirs(out_dir, exist_ok=True)
    x, y = load_digits(return_X_y=True)
    x = (x / 16).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        clf = MLPClassifier(hidden_layer_sizes=(32,), max_iter=60, random_state=0).fit(x, y)
    model = to_onnx(clf, x[:1], target_opset={"": 17, "ai.onnx.ml": 3})
    path = os.path.join(out_dir, "mlp_digits_clf.onnx")
    onnx.save(model, path)
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    xs = x[:32]
    label, maps = sess.run(["output_label", "output_probability"], {"X": xs})
    probs = np.array([[m[k] for k in sorted(m)] for m in maps], dtype=np.float32)
    ref = {"X": xs, "probabilities": probs, "label": np.asarray(label, np.int64),
           "y": y[:32].astype(np.int64)}
    save_npz(os.path.join(out_dir, "mlp_digits_clf.ref.npz"), ref)
    print(f"wrote {path}: train accuracy {clf.score(x, y):.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
