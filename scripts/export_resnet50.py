#!/usr/bin/env python3
"""A ResNet-50 with random weights and unfolded batch norms, for issue #19's CNN figures.

Builds transformers' `ResNetForImageClassification` from its default config (ResNet-50:
bottleneck blocks, depths 3-4-6-3, 25.6M parameters; random weights, nothing from a hub),
gives every batch norm running statistics and an affine away from 0/1 (a trained net's), and
exports it with PyTorch's TorchScript exporter keeping the norms as `BatchNormalization`
nodes (`training=PRESERVE` on a module in eval mode: the exporter's eval-mode Conv+BN fusion
is skipped), as models converted from other frameworks arrive. fp8c folds them itself:
`fold-batch-norm` into f32 convs, `fold-batch-norm-fp8` behind FP8 convs' dequantized weights.
Unlike `examples/models/light_resnet50.onnx`, whose weights are `ConstantOfShape` fills of
one value, every weight here is a real tensor, so FP8 quantizes and decodes real data.

Writes .cache/models/resnet50-rand-bn.onnx (~94 MB, not committed) and next to it
resnet50-rand-bn.ref.npz (one 1x3x224x224 input, `pixel_values`, and PyTorch's logits).

  .venv-export/bin/python scripts/export_resnet50.py [--out-dir .cache/models]
"""
from __future__ import annotations

import argparse
import os

import numpy as np
import torch
import transformers as tf

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out-dir", default=os.path.join(ROOT, ".cache", "models"))
    a = ap.parse_args()
    os.makedirs(a.out_dir, exist_ok=True)
    torch.manual_seed(0)
    model = tf.ResNetForImageClassification(tf.ResNetConfig(num_channels=3)).eval()
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.copy_(torch.randn(m.running_mean.shape, generator=g) * 0.1)
                m.running_var.copy_(torch.rand(m.running_var.shape, generator=g) + 0.5)
                m.weight.copy_(torch.rand(m.weight.shape, generator=g) + 0.5)
                m.bias.copy_(torch.randn(m.bias.shape, generator=g) * 0.1)
    x = torch.randn(1, 3, 224, 224, generator=g)
    path = os.path.join(a.out_dir, "resnet50-rand-bn.onnx")
    torch.onnx.export(model, (x,), path, dynamo=False, opset_version=17,
                      training=torch.onnx.TrainingMode.PRESERVE,
                      input_names=["pixel_values"], output_names=["logits"])
    with torch.no_grad():
        logits = model(x).logits.numpy()
    np.savez(path[:-5] + ".ref.npz", pixel_values=x.numpy(), logits=logits)
    print(f"wrote {path} ({os.path.getsize(path) / 1e6:.1f} MB) and its .ref.npz")


if __name__ == "__main__":
    main()
