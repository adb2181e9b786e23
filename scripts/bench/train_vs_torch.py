#!/usr/bin/env python3
"""Training step time and peak RSS of `fp8c train` next to PyTorch eager at long sequences
(issue #43): the Llama-style benchmark decoder of scripts/fixtures/make_llama_bench.py.

Usage (needs torch: the export venv; export the model first):

  PY=$(scripts/env/export-env.sh)
  $PY scripts/fixtures/make_llama_bench.py
  $PY scripts/bench/train_vs_torch.py target/release/fp8c [--sizes 4x512,1x2048,1x4096,1x16384]
        [--rounds 2] [--threads 2] [--fp8c-flags "--no-fuse-attention"] [--skip-torch]

For each batch×seq size and each round, the two contenders run one after the other, each in
its own process (the order alternates between rounds), on the same model (the same config
and seed 0 weights), the same byte windows of examples/data/shakespeare.txt (fp8c: `fp8c
train --text FILE --seq-len T --batch B --precision f32`; PyTorch: consecutive windows, the
labels the next bytes), AdamW (lr 1e-3), f32, the same thread count (fp8c `--threads`,
torch.set_num_threads; one inter-op thread). PyTorch's attention is transformers' default,
SDPA (its fused CPU flash attention). Step time is the mean over the steps after the first
(fp8c: from its `--log` CSV's elapsed times; PyTorch: timed around each step, after one
warm-up step); peak RSS is the process's maximum resident set (`wait4`'s ru_maxrss), so it
includes loading and, for fp8c, compilation. Prints a Markdown table and the raw rounds as
JSON lines.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
TEXT = os.path.join(ROOT, "examples", "data", "shakespeare.txt")
MODEL = os.path.join(ROOT, ".cache", "models", "llama-bench-23m.onnx")


def steps_for(tokens):
    """Steps per run: enough to time, few enough to finish at 16k tokens."""
    return 6 if tokens <= 2048 else 4 if tokens <= 4096 else 3


def run_measured(cmd, env=None):
    """Runs `cmd`; returns (stdout, stderr, peak RSS in bytes)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        p = subprocess.Popen(cmd, stdout=out, stderr=err, env=env)
        _, status, usage = os.wait4(p.pid, 0)
        out.seek(0)
        err.seek(0)
        o, e = out.read().decode(), err.read().decode()
        if os.waitstatus_to_exitcode(status) != 0:
            sys.exit(f"{' '.join(cmd)} failed:\n{e[-4000:]}")
        return o, e, usage.ru_maxrss * 1024


def fp8c_round(binary, model, batch, seq, steps, threads, flags):
    with tempfile.TemporaryDirectory() as d:
        log = os.path.join(d, "log.csv")
        cmd = [binary, "train", model, "--text", TEXT, "--seq-len", str(seq), "--batch",
               str(batch), "--steps", str(steps), "--precision", "f32", "--lr", "1e-3",
               "--threads", str(threads), "--log", log, "--quiet", *flags]
        _, _, rss = run_measured(cmd)
        rows = list(csv.DictReader(open(log)))
    t = [float(r["elapsed_s"]) for r in rows]
    return {"s_per_step": (t[-1] - t[0]) / (len(t) - 1), "rss": rss,
            "losses": [float(r["loss"]) for r in rows]}


def torch_round(batch, seq, steps, threads):
    cmd = [sys.executable, os.path.abspath(__file__), "--torch-worker",
           f"{batch}x{seq}", "--steps", str(steps), "--threads", str(threads)]
    out, _, rss = run_measured(cmd)
    r = json.loads(out.strip().splitlines()[-1])
    r["rss"] = rss
    return r


def torch_worker(batch, seq, steps, threads):
    """One PyTorch run in this process: prints {"s_per_step", "losses"} as JSON."""
    import numpy as np
    import torch
    sys.path.insert(0, os.path.join(ROOT, "scripts", "fixtures"))
    import make_llama_bench as bench
    torch.set_num_threads(threads)
    torch.set_num_interop_threads(1)
    model = bench.build().train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = np.frombuffer(open(TEXT, "rb").read(), np.uint8).astype(np.int64)
    times, losses = [], []
    for s in range(steps):
        rows = [data[(s * batch + b) * seq:(s * batch + b) * seq + seq + 1] for b in range(batch)]
        xy = torch.from_numpy(np.stack(rows))
        x, y = xy[:, :-1], xy[:, 1:]
        t0 = time.perf_counter()
        logits = model(input_ids=x, use_cache=False).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                 y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t0)
        losses.append(float(loss))
    timed = times[1:]
    print(json.dumps({"s_per_step": sum(timed) / len(timed), "losses": losses}))


def gb(b):
    return f"{b / 1e9:.2f} GB"


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("fp8c", nargs="?")
    ap.add_argument("--model", default=MODEL)
    ap.add_argument("--sizes", default="4x512,1x2048,1x4096,1x16384")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, help="steps per run (default: by size)")
    ap.add_argument("--fp8c-flags", default="", help="extra flags for fp8c train")
    ap.add_argument("--skip-torch", action="store_true")
    ap.add_argument("--torch-worker", metavar="BxT", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.torch_worker:
        b, t = map(int, a.torch_worker.split("x"))
        torch_worker(b, t, a.steps, a.threads)
        return 0
    if not a.fp8c or not os.path.exists(a.model):
        sys.exit("give the fp8c binary, and export the model first "
                 "(scripts/fixtures/make_llama_bench.py)")
    flags = a.fp8c_flags.split()
    table = []
    for size in a.sizes.split(","):
        b, t = map(int, size.split("x"))
        steps = a.steps or steps_for(b * t)
        res = {"fp8c": [], "torch": []}
        for r in range(a.rounds):
            order = ["fp8c", "torch"] if r % 2 == 0 else ["torch", "fp8c"]
            for who in order:
                if who == "torch" and a.skip_torch:
                    continue
                got = (fp8c_round(a.fp8c, a.model, b, t, steps, a.threads, flags)
                       if who == "fp8c" else torch_round(b, t, steps, a.threads))
                res[who].append(got)
                print(json.dumps({"size": size, "round": r, "who": who, **got}), flush=True)
        table.append((size, res))
    print(f"\n{os.path.basename(a.model)}, f32, {a.threads} threads, fp8c flags "
          f"'{a.fp8c_flags}', {a.rounds} alternating rounds (min over rounds)")
    print("| batch × seq | fp8c s/step | PyTorch s/step | ratio | fp8c peak RSS | PyTorch peak RSS | ratio |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for size, res in table:
        f = min(x["s_per_step"] for x in res["fp8c"])
        fm = min(x["rss"] for x in res["fp8c"])
        if res["torch"]:
            p = min(x["s_per_step"] for x in res["torch"])
            pm = min(x["rss"] for x in res["torch"])
            print(f"| {size.replace('x', ' × ')} | {f:.2f} | {p:.2f} | {f / p:.2f}× | "
                  f"{gb(fm)} | {gb(pm)} | {fm / pm:.2f}× |")
        else:
            print(f"| {size.replace('x', ' × ')} | {f:.2f} | – | – | {gb(fm)} | – | – |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
