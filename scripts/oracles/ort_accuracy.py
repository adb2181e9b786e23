"""Accuracy of an ONNX classifier under onnxruntime (CPU): argmax of the first output.

Usage: $PY scripts/oracles/ort_accuracy.py MODEL.onnx INPUTS.npz LABELS.npy
"""

import sys

import numpy as np
import onnxruntime as ort

model, inputs, labels = sys.argv[1:4]
sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
feed = dict(np.load(inputs))
logits = sess.run(None, feed)[0]
y = np.load(labels)
print(f"onnxruntime accuracy {np.mean(logits.argmax(-1) == y) * 100:.2f}% ({len(y)} samples)")
