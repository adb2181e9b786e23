#!/usr/bin/env python3
"""Time per training step on the CPU: fp8c (f32, bf16, FP8) next to PyTorch eager, on the same
model, batch, data and thread count (issues #14, #19).

Usage (needs torch: the export venv):

  PY=$(scripts/env/export-env.sh)
  $PY scripts/bench/torch_step_time.py target/release/fp8c [--model llama-tiny] [--steps 60]
        [--batch 16] [--seq 16] [--threads 2]

A decoder (`--model llama-tiny`, `gpt2-tiny`, ...) is the committed export's own transformers
config (scripts/fixtures/export_llms.py, random init, seed 0); PyTorch trains it eagerly (AdamW lr 3e-3,
the same byte windows of README.md, in order), fp8c trains the committed ONNX export with
`fp8c train --text README.md`. `--model mlp_digits` is the digits MLP
(examples/models/mlp_digits.onnx, scripts/fixtures/make_mlp_example.py): PyTorch builds the same
`nn.Sequential` from the ONNX file's weights and both train on examples/data/digits_train.npz
(cross-entropy on `y`, batches in order, AdamW lr 3e-3). Both use
`--threads` CPU threads (torch.set_num_threads; RAYON_NUM_THREADS for fp8c). The first 10
PyTorch steps are warm-up and not timed; fp8c's figure is its own steps/s line (compilation
excluded). Prints a Markdown table.
"""

import argparse
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "fixtures"))  # export_llms

import numpy as np  # noqa: E402

import export_llms as ex  # noqa: E402  (the model specs; sets HF offline)


def torch_steps_per_s(name, steps, batch, seq, threads):
    torch = ex.torch
    torch.set_num_threads(threads)
    kind, cls, cfg = ex.COMMITTED[name](ex.tf)
    torch.manual_seed(ex.SEED)
    model = cls(cfg).float().train()
    data = np.frombuffer(open(os.path.join(ROOT, "README.md"), "rb").read(), np.uint8)
    data = data.astype(np.int64)
    n = (len(data) - 1) // seq
    x = torch.from_numpy(data[: n * seq].reshape(n, seq))
    y = torch.from_numpy(data[1 : n * seq + 1].reshape(n, seq))

    def loss_of(i):
        logits = model(input_ids=x[i : i + batch], use_cache=False).logits
        return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                 y[i : i + batch].reshape(-1))
    return timed_steps(model, steps, batch, n, loss_of)


def timed_steps(model, steps, batch, n, loss_of):
    """Steps/s of AdamW (lr 3e-3, weight decay 0.01) on `loss_of(i)`, the loss of the batch
    starting at sample i (batches in order, wrapping), after 10 untimed warm-up steps."""
    opt = ex.torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    warm = 10
    t0 = None
    for s in range(warm + steps):
        if s == warm:
            t0 = time.perf_counter()
        loss = loss_of((s * batch) % (n - batch))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return steps / (time.perf_counter() - t0)


MLP = "mlp_digits"
DIGITS = os.path.join(ROOT, "examples", "data", "digits_train.npz")


def torch_mlp_steps_per_s(steps, batch, threads):
    import onnx
    from onnx import numpy_helper
    torch = ex.torch
    torch.set_num_threads(threads)
    w = {t.name: numpy_helper.to_array(t)
         for t in onnx.load(os.path.join(ROOT, "examples", "models", f"{MLP}.onnx")).graph.initializer}
    layers = []
    for i in (1, 2, 3):
        weight = w[f"fc{i}.weight"]
        lin = torch.nn.Linear(weight.shape[1], weight.shape[0])
        with torch.no_grad():
            lin.weight.copy_(torch.from_numpy(weight.copy()))
            lin.bias.copy_(torch.from_numpy(w[f"fc{i}.bias"].copy()))
        layers += [lin, torch.nn.ReLU()] if i < 3 else [lin]
    model = torch.nn.Sequential(*layers).train()
    d = np.load(DIGITS)
    x, y = torch.from_numpy(d["x"]), torch.from_numpy(d["y"])
    return timed_steps(model, steps, batch, len(y), lambda i: torch.nn.functional.cross_entropy(
        model(x[i : i + batch]), y[i : i + batch]))


def fp8c_steps_per_s(binary, name, precision, steps, batch, seq, threads):
    env = dict(os.environ, RAYON_NUM_THREADS=str(threads))
    data = (["--data", DIGITS, "--labels", "y"] if name == MLP else
            ["--text", os.path.join(ROOT, "README.md"), "--seq-len", str(seq)])
    out = subprocess.run(
        [binary, "train", os.path.join(ROOT, "examples", "models", f"{name}.onnx"), *data,
         "--batch", str(batch), "--steps", str(steps), "--lr", "0.003",
         "--min-fp8-flops", "0", "--precision", precision, "--quiet"],
        env=env, capture_output=True, text=True, check=True)
    m = re.search(r"\(([0-9.]+) steps/s", out.stderr)
    if not m:
        sys.exit(f"no steps/s in fp8c's output:\n{out.stderr}")
    return float(m.group(1))


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("fp8c")
    ap.add_argument("--model", default="llama-tiny", choices=sorted(ex.COMMITTED) + [MLP])
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=16)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args(argv)
    if a.model == MLP:
        torch_sps = torch_mlp_steps_per_s(a.steps, a.batch, a.threads)
    else:
        torch_sps = torch_steps_per_s(a.model, a.steps, a.batch, a.seq, a.threads)
    rows = [("PyTorch eager f32", torch_sps)]
    for p in ("f32", "bf16", "fp8"):
        rows.append((f"fp8c {p}",
                     fp8c_steps_per_s(a.fp8c, a.model, p, a.steps, a.batch, a.seq, a.threads)))
    shape = f"batch {a.batch}" if a.model == MLP else f"batch {a.batch} x {a.seq} tokens"
    print(f"{a.model}, {shape}, {a.threads} threads, torch {ex.torch.__version__}")
    print("| run | steps/s | ms/step | vs PyTorch eager |")
    print("|---|---:|---:|---:|")
    base = rows[0][1]
    for name, sps in rows:
        print(f"| {name} | {sps:.2f} | {1000 / sps:.1f} | {sps / base:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
