#!/usr/bin/env python3
"""Training memory options side by side (issue #43, parts 3-6): peak RSS and losses of
`fp8c train` runs that differ in one memory option, the contenders alternating.

Usage:
  PY=$(scripts/env/python-env.sh)
  $PY scripts/bench/train_memory.py FP8C [--only NAME,...] [--rounds N] [--threads N]
        [--model M.onnx] [--seq-len T]

Experiments (--only picks some; default all):
  fp8-saved        FP8 training (delayed scaling, HYBRID, every eligible GEMM in FP8:
                   --min-fp8-flops 0) keeping each FP8 GEMM's input for backward as its FP8
                   codes (--activations fp8) next to keeping it in high precision and
                   quantizing it again in backward (--activations high); llama-tiny, long
                   windows, small batch. The losses must agree bit for bit.
  fp8-saved-mlp    the same pair on an activation-dominated configuration: the residual
                   ReLU MLP of scripts/fixtures/make_wide_mlp.py (4 blocks, width 256, hidden
                   1024; made into .cache/models/ when missing), batch 32768, 3 steps.
  recompute        --recompute layer next to --recompute none at seq 4096, batch 1, f32, on
                   .cache/models/llama-long.onnx (4 layers x 64; make it with
                   PY=$(scripts/env/export-env.sh); $PY scripts/fixtures/export_llms.py
                   llama-long). The losses must agree bit for bit.
  optimizer-state  --optimizer-state bf16 next to f32 on examples/models/gpt2-tiny.onnx, 300
                   steps of `--text examples/data/shakespeare.txt`, data orders (seeds) 0, 1, 2:
                   the planned optimizer state (from --report=json) and the final loss (mean
                   of the last 50 steps, as `fp8c train --compare` takes it), the gap's mean
                   and standard error over the orders.

Peak RSS is `/usr/bin/time -v`'s "Maximum resident set size" of the whole `fp8c train`
process (compile included); the planned peak and its breakdown come from `--report=json`.
Each run writes its losses with --log; runs of a pair are compared step by step as the log
writes them (the shortest decimal that round-trips the f32 loss, so equal strings are equal
bits). Prints Markdown tables.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TEXT = os.path.join(ROOT, "examples", "data", "shakespeare.txt")


def run(fp8c, args, work, tag, threads):
    """One `fp8c train`: (peak RSS bytes, losses as logged, report JSON, seconds)."""
    log = os.path.join(work, f"{tag}.csv")
    cmd = ["/usr/bin/time", "-v", fp8c, "--threads", str(threads), "train", *args,
           "--log", log, "--quiet", "--report=json"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stderr[-3000:]}")
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", p.stderr).group(1)) * 1024
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\S+)", p.stderr).group(1)
    secs = sum(float(x) * 60 ** i for i, x in enumerate(reversed(wall.split(":"))))
    # The report is the JSON object at the start of stdout.
    report, _ = json.JSONDecoder().raw_decode(p.stdout.lstrip())
    with open(log) as f:
        losses = [row["loss"] for row in csv.DictReader(f)]
    return rss, losses, report, secs


def gib(b):
    return f"{b / 2**30:.2f} GiB" if b >= 2**30 else f"{b / 2**20:.0f} MiB"


def role(report, name):
    for r in report["memory"]["rows"]:
        if r["role"] == name:
            return r["bytes"]
    return 0


def pair(fp8c, base_args, a, b, rounds, threads, work, name):
    """Alternates contenders a and b (each a list of extra args) for `rounds` rounds."""
    res = {0: [], 1: []}
    for r in range(rounds):
        order = (0, 1) if r % 2 == 0 else (1, 0)
        for i in order:
            extra = (a, b)[i]
            res[i].append(run(fp8c, base_args + extra, work, f"{name}-{i}-{r}", threads))
    return res


def table_pair(name, labels, res, cmd):
    print(f"\n### {name}\n")
    print(f"`{cmd}`\n")
    print("| contender | peak RSS (each round) | planned peak | saved activations (planned) "
          "| workspace (planned) | s/run |")
    print("|---|---|---:|---:|---:|---:|")
    best = {}
    for i in (0, 1):
        rss = [r[0] for r in res[i]]
        best[i] = min(rss)
        rep = res[i][0][2]
        print(f"| {labels[i]} | {', '.join(gib(x) for x in rss)} "
              f"| {gib(rep['memory']['total_bytes'])} | {gib(role(rep, 'saved activations'))} "
              f"| {gib(role(rep, 'workspace'))} | {min(r[3] for r in res[i]):.1f} |")
    same = all(r[1] == res[0][0][1] for i in (0, 1) for r in res[i])
    print(f"\nratio {labels[0]} / {labels[1]} (lowest peak RSS of each): "
          f"{best[0] / best[1]:.3f}; losses bit-identical across all runs: {same} "
          f"({len(res[0][0][1])} steps, last loss {res[0][0][1][-1]})")


def fp8_saved(fp8c, rounds, threads, work, model=None, seq=2048):
    model = model or os.path.join(ROOT, "examples", "models", "llama-tiny.onnx")
    base = [model, "--text", TEXT, "--seq-len", str(seq), "--batch", "1", "--steps", "3",
            "--precision", "fp8", "--recipe", "delayed", "--format", "hybrid",
            "--min-fp8-flops", "0", "--recompute", "attention"]
    res = pair(fp8c, base, ["--activations", "fp8"], ["--activations", "high"], rounds,
               threads, work, "fp8saved")
    table_pair("FP8 saved activations", ["--activations fp8", "--activations high"], res,
               "fp8c train " + " ".join(os.path.relpath(x, ROOT) if x.startswith(ROOT) else x
                                        for x in base) + " --activations fp8|high")


def fp8_saved_mlp(fp8c, rounds, threads, work):
    models = os.path.join(ROOT, ".cache", "models")
    model = os.path.join(models, "wide_mlp.onnx")
    data = os.path.join(models, "wide_mlp_data.npz")
    if not (os.path.exists(model) and os.path.exists(data)):
        subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "fixtures",
                                                     "make_wide_mlp.py"), models], check=True)
    base = [model, "--data", data, "--labels", "y", "--batch", "32768", "--steps", "3",
            "--precision", "fp8", "--recipe", "delayed", "--format", "hybrid",
            "--min-fp8-flops", "0"]
    res = pair(fp8c, base, ["--activations", "fp8"], ["--activations", "high"], rounds,
               threads, work, "fp8savedmlp")
    table_pair("FP8 saved activations, activation-dominated MLP",
               ["--activations fp8", "--activations high"], res,
               "fp8c train " + " ".join(os.path.relpath(x, ROOT) if x.startswith(ROOT) else x
                                        for x in base) + " --activations fp8|high")


def recompute(fp8c, rounds, threads, work, model=None):
    model = model or os.path.join(ROOT, ".cache", "models", "llama-long.onnx")
    if not os.path.exists(model):
        sys.exit(f"{model} is missing: PY=$(scripts/env/export-env.sh); "
                 "$PY scripts/fixtures/export_llms.py llama-long")
    base = [model, "--text", TEXT, "--seq-len", "4096", "--batch", "1", "--steps", "2",
            "--precision", "f32"]
    res = pair(fp8c, base, ["--recompute", "layer"], ["--recompute", "none"], rounds, threads,
               work, "recompute")
    table_pair("Recompute at seq 4096", ["--recompute layer", "--recompute none"], res,
               "fp8c train " + " ".join(os.path.relpath(x, ROOT) if x.startswith(ROOT) else x
                                        for x in base) + " --recompute layer|none")


def optimizer_state(fp8c, threads, work, steps=300, seeds=(0, 1, 2)):
    model = os.path.join(ROOT, "examples", "models", "gpt2-tiny.onnx")
    base = [model, "--text", TEXT, "--steps", str(steps), "--precision", "f32"]
    tail = min(50, max(1, steps // 5))
    finals = {"f32": [], "bf16": []}
    reports, rss = {}, {"f32": [], "bf16": []}
    for seed in seeds:
        order = ("f32", "bf16") if seed % 2 == 0 else ("bf16", "f32")
        for st in order:
            r = run(fp8c, base + ["--seed", str(seed), "--optimizer-state", st], work,
                    f"opt-{st}-{seed}", threads)
            rss[st].append(r[0])
            losses = [float(x) for x in r[1]]
            finals[st].append(sum(losses[-tail:]) / tail)
            reports[st] = r[2]
    print("\n### Optimizer state precision\n")
    print(f"`fp8c train examples/models/gpt2-tiny.onnx --text examples/data/shakespeare.txt "
          f"--steps {steps} --seed S --optimizer-state f32|bf16` (S = {', '.join(map(str, seeds))})\n")
    print(f"| state | optimizer state (planned) | planned peak | peak RSS | final loss per seed "
          f"(mean of the last {tail} steps) | mean |")
    print("|---|---:|---:|---:|---|---:|")
    for st in ("f32", "bf16"):
        f = finals[st]
        print(f"| {st} | {gib(role(reports[st], 'optimizer state'))} "
              f"| {gib(reports[st]['memory']['total_bytes'])} | {gib(min(rss[st]))} "
              f"| {', '.join(f'{x:.4f}' for x in f)} | {sum(f) / len(f):.4f} |")
    gaps = [(b - a) / a * 100 for a, b in zip(finals["f32"], finals["bf16"])]
    n = len(gaps)
    mean = sum(gaps) / n
    se = math.sqrt(sum((g - mean) ** 2 for g in gaps) / (n - 1) / n) if n > 1 else 0.0
    f = finals["f32"]
    fm = sum(f) / n
    spread = math.sqrt(sum((x - fm) ** 2 for x in f) / (n - 1)) / fm * 100 if n > 1 else 0.0
    ratio = role(reports["bf16"], "optimizer state") / role(reports["f32"], "optimizer state")
    print(f"\nbf16 gap to f32: {mean:+.3f}% ± {se:.3f}% (mean ± s.e. over {n} orders); "
          f"f32's own spread across the orders {spread:.3f}%; "
          f"optimizer state bf16 / f32 = {ratio:.3f}")


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("fp8c")
    ap.add_argument("--only", default="fp8-saved,fp8-saved-mlp,recompute,optimizer-state")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--model", help="the model of fp8-saved and recompute (default: "
                    "llama-tiny and llama-long), e.g. .cache/models/llama-bench-23m.onnx")
    ap.add_argument("--seq-len", type=int, default=2048, help="fp8-saved's sequence length")
    a = ap.parse_args(argv)
    model = os.path.abspath(a.model) if a.model else None
    fp8c = os.path.abspath(a.fp8c)
    with tempfile.TemporaryDirectory() as work:
        for name in a.only.split(","):
            if name == "fp8-saved":
                fp8_saved(fp8c, a.rounds, a.threads, work, model, a.seq_len)
            elif name == "fp8-saved-mlp":
                fp8_saved_mlp(fp8c, a.rounds, a.threads, work)
            elif name == "recompute":
                recompute(fp8c, a.rounds, a.threads, work, model)
            elif name == "optimizer-state":
                optimizer_state(fp8c, a.threads, work)
            else:
                ap.error(f"unknown experiment {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
