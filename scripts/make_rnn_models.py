#!/usr/bin/env python3
"""Exports small PyTorch recurrent models (nn.LSTM, nn.GRU, nn.RNN with a Linear head) with
both of PyTorch's ONNX exporters, for tests/op_parity.rs, which runs each through `fp8c run`
and compares with onnxruntime on the same inputs (scripts/ort_reference.py --make-inputs).

Usage (with the export venv, PY=$(scripts/export-env.sh)):

  $PY scripts/make_rnn_models.py [OUT_DIR]     # default: tests/models/ops

Models (random weights, seed 0; sequence 7, batch 3, input 12, hidden 16), each as
`rnn_<case>_ts.onnx` (TorchScript exporter, opset 17) and `rnn_<case>_dyn.onnx` (dynamo
exporter, opset 18, weights embedded): a one-layer LSTM, a two-layer bidirectional LSTM, a
batch-first two-layer LSTM (ONNX layout stays 0: the exporters transpose), a batch-first GRU
(linear_before_reset), a bidirectional GRU and an RNN with ReLU, with a static sequence length;
and `rnn_lstm_dynseq_ts.onnx`, a batch-first LSTM with symbolic batch and sequence dims (fp8c
unrolls the recurrence over time, so `run` takes the length from its inputs). The TorchScript
files regenerate byte-identical; the dynamo exporter's files differ between runs in their
bytes, not in what they compute.
"""

import os
import sys
import warnings

import torch

CASES = {
    "lstm": ("LSTM", {}),
    "lstm_bi_2l": ("LSTM", dict(num_layers=2, bidirectional=True)),
    "lstm_bf_2l": ("LSTM", dict(batch_first=True, num_layers=2)),
    "gru_bf": ("GRU", dict(batch_first=True)),
    "gru_bi": ("GRU", dict(bidirectional=True)),
    "rnn_relu": ("RNN", dict(nonlinearity="relu")),
}


class Model(torch.nn.Module):
    def __init__(self, kind, **kw):
        super().__init__()
        self.rnn = getattr(torch.nn, kind)(input_size=12, hidden_size=16, **kw)
        width = 16 * (2 if kw.get("bidirectional") else 1)
        self.head = torch.nn.Linear(width, 5)

    def forward(self, x):
        y, _ = self.rnn(x)
        return self.head(y)


def main(argv):
    out_dir = argv[1] if len(argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "tests", "models", "ops")
    os.makedirs(out_dir, exist_ok=True)
    warnings.filterwarnings("ignore")
    for name, (kind, kw) in CASES.items():
        torch.manual_seed(0)
        m = Model(kind, **kw).eval()
        x = torch.randn((3, 7, 12) if kw.get("batch_first") else (7, 3, 12))
        ts = os.path.join(out_dir, f"rnn_{name}_ts.onnx")
        torch.onnx.export(m, (x,), ts, input_names=["x"], output_names=["y"], dynamo=False,
                          opset_version=17)
        dyn = os.path.join(out_dir, f"rnn_{name}_dyn.onnx")
        torch.onnx.export(m, (x,), dyn, input_names=["x"], output_names=["y"], dynamo=True,
                          opset_version=18, external_data=False)
        print(f"wrote {os.path.basename(ts)}, {os.path.basename(dyn)}")
    # Symbolic batch and sequence (`fp8c run` takes the length from the inputs).
    torch.manual_seed(0)
    m = Model("LSTM", batch_first=True).eval()
    path = os.path.join(out_dir, "rnn_lstm_dynseq_ts.onnx")
    torch.onnx.export(m, (torch.randn(3, 7, 12),), path, input_names=["x"], output_names=["y"],
                      dynamo=False, opset_version=17,
                      dynamic_axes={"x": {0: "batch", 1: "seq"}, "y": {0: "batch", 1: "seq"}})
    print(f"wrote {os.path.basename(path)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
