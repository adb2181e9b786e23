#!/usr/bin/env python3
"""Builds tests/models/bert-tiny-ort-fused.onnx: a BERT in the layout onnxruntime's transformer
optimizer writes (HuggingFace Optimum's "O2"), with com.microsoft EmbedLayerNormalization,
Attention, SkipLayerNormalization and BiasGelu; its dynamically quantized form (QAttention,
QEmbedLayerNormalization, MatMulInteger); and onnxruntime references for tests/ort_parity.rs.

Usage (with the export venv, which has torch and transformers: PY=$(scripts/export-env.sh)):

  $PY scripts/export_ort_fused.py [OUT_DIR]      # default: tests/models

Steps: a `transformers.BertModel` from a config (vocab 512, hidden 128, 2 layers, 2 heads,
intermediate 256, eager attention; nothing is downloaded) with random weights (seed 0; every
weight and bias drawn, LayerNorm scales around 1, so no two tensors are equal and the
optimizer shares none), exported by the TorchScript exporter (`dynamo=False`, opset 14, batch
and sequence dynamic), then `onnxruntime.transformers.optimizer.optimize_model(model_type=
"bert", num_heads=2, hidden_size=128)`. Writes to OUT_DIR:
- bert-tiny-ort-fused.onnx (the optimized model; the script checks that the four fused ops
  are in it);
- bert-tiny-ort-fused.inputs.npz: input_ids, attention_mask (batch row 1 padded after 11
  tokens), token_type_ids (two segments) for a batch of 2 × 16;
- bert-tiny-ort-fused.ort.npz: onnxruntime's outputs (last_hidden_state, pooler_output) on
  them, CPU, graph optimizations off, one thread. It also prints how far they are from
  PyTorch's (the fusion itself is checked, not only fp8c);
- bert-tiny-ort-fused-qint8.onnx and .ort.npz: the optimized model through
  `onnxruntime.quantization.quantize_dynamic(weight_type=QInt8,
  extra_options={"DefaultTensorType": FLOAT})` (QAttention and QEmbedLayerNormalization
  checked), and onnxruntime's outputs on the same inputs.
"""

import os
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
import torch
import transformers
from onnxruntime.quantization import QuantType, quantize_dynamic
from onnxruntime.transformers import optimizer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ort_reference import save_npz  # noqa: E402  (byte-deterministic .npz)

NAME = "bert-tiny-ort-fused"
FUSED = {"EmbedLayerNormalization", "Attention", "SkipLayerNormalization", "BiasGelu"}
QUANTIZED = {"QEmbedLayerNormalization", "QAttention"}


class Outputs(torch.nn.Module):
    """BertModel returning (last_hidden_state, pooler_output) as a tuple."""

    def __init__(self, bert):
        super().__init__()
        self.bert = bert

    def forward(self, input_ids, attention_mask, token_type_ids):
        o = self.bert(input_ids=input_ids, attention_mask=attention_mask,
                      token_type_ids=token_type_ids)
        return o.last_hidden_state, o.pooler_output


def model():
    cfg = transformers.BertConfig(vocab_size=512, hidden_size=128, num_hidden_layers=2,
                                  num_attention_heads=2, intermediate_size=256,
                                  max_position_embeddings=128)
    cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    bert = transformers.BertModel(cfg).eval()
    with torch.no_grad():
        for name, p in bert.named_parameters():
            if "LayerNorm.weight" in name:
                p.copy_(1 + 0.1 * torch.randn_like(p))
            elif "embeddings" in name:
                p.copy_(0.5 * torch.randn_like(p))
            else:
                p.copy_(0.1 * torch.randn_like(p))
    return Outputs(bert).eval()


def main(argv):
    out_dir = argv[1] if len(argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "tests", "models")
    m = model()
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 512, (2, 16), generator=gen)
    mask = torch.ones(2, 16, dtype=torch.int64)
    mask[1, 11:] = 0
    types = torch.zeros(2, 16, dtype=torch.int64)
    types[:, 8:] = 1
    names = ["input_ids", "attention_mask", "token_type_ids"]
    outs = ["last_hidden_state", "pooler_output"]
    dyn = {n: {0: "batch", 1: "sequence"} for n in names}
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "bert.onnx")
        torch.onnx.export(m, (ids, mask, types), src, input_names=names, output_names=outs,
                          dynamic_axes=dyn, opset_version=14, dynamo=False)
        fused = optimizer.optimize_model(src, model_type="bert", num_heads=2, hidden_size=128)
        dst = os.path.join(out_dir, f"{NAME}.onnx")
        fused.save_model_to_file(dst)
    ops = {n.op_type for n in onnx.load(dst).graph.node if n.domain == "com.microsoft"}
    if not FUSED <= ops:
        sys.exit(f"export_ort_fused.py: the optimizer left out {sorted(FUSED - ops)}: {sorted(ops)}")
    qdst = os.path.join(out_dir, f"{NAME}-qint8.onnx")
    quantize_dynamic(dst, qdst, weight_type=QuantType.QInt8,
                     extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
    qops = {n.op_type for n in onnx.load(qdst).graph.node if n.domain == "com.microsoft"}
    if not QUANTIZED <= qops:
        sys.exit(f"export_ort_fused.py: the quantizer left out {sorted(QUANTIZED - qops)}")

    feeds = {"input_ids": ids.numpy(), "attention_mask": mask.numpy(),
             "token_type_ids": types.numpy()}
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.intra_op_num_threads = so.inter_op_num_threads = 1
    with torch.no_grad():
        want = [t.numpy() for t in m(ids, mask, types)]
    save_npz(os.path.join(out_dir, f"{NAME}.inputs.npz"), feeds)
    for path in (dst, qdst):
        got = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"]).run(outs, feeds)
        base = os.path.basename(path)[:-len(".onnx")]
        for n, g, w in zip(outs, got, want):
            rel = np.linalg.norm(g - w) / np.linalg.norm(w)
            print(f"{base}: {n}: onnxruntime vs PyTorch rel L2 {rel:.2e}")
        save_npz(os.path.join(out_dir, f"{base}.ort.npz"), dict(zip(outs, got)))
        print(f"wrote {path} ({os.path.getsize(path)} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
