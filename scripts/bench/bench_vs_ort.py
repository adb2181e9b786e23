#!/usr/bin/env python3
"""fp8c's CPU backend next to onnxruntime on the same model, inputs and threads (issue #19).

For each model and thread count the contenders alternate (fp8c f32, onnxruntime, fp8c FP8)
for `--rounds` rounds, each timed as the fastest of `--reps` runs of one call on the same
inputs after a warm-up, and each keeps its fastest round: on a shared machine whose speed
drifts from one minute to the next, the rounds spread every contender over the same minutes
(fp8c: `fp8c --threads T run M --inputs IN --repeat R`, whose summary line reports the fastest
run; onnxruntime: `InferenceSession.run` with `intra_op_num_threads = T`, default graph
optimizations). Prints one row per model and thread count with the ratios later changes are
judged by: fp8c f32 / onnxruntime and fp8c FP8 / fp8c f32 (FP8 as `fp8c run` runs it by
default, every GEMM summed in f32 on the CPU; `--accum hopper` times `--hopper-accum` instead,
the forward GEMMs under the model of Hopper's fast accumulation, and `--accum both` times both,
adding a column). PyTorch is not run here: the committed models are ONNX exports without
their Python modules.

Usage (the repo's venv has onnxruntime and numpy: PY=$(scripts/env/python-env.sh)):

  $PY scripts/bench/bench_vs_ort.py [--fp8c target/release/fp8c] [--threads 1,2] [--reps 5]
        [--rounds 3] [--json OUT.json] [--shape INPUT=2x3x48x192 ...] [--accum default|hopper|both]
        [MODEL.onnx ...]

Without models it takes the example exports (BERT-style encoder, Llama-style decoder,
ResNet-style CNN, digits MLP). Inputs come from a model's `.ref.npz` when there is one, else
seeded random values shaped from `fp8c inspect --json` (symbolic dims: batch 2, sequence 32;
`--shape NAME=D0xD1x...` gives the whole shape of every input so named whose rank it matches,
e.g. the 48x192 text crops PP-OCR's classifier takes, whose symbolic height and width 32
would pool down to nothing).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_MODELS = [
    "examples/models/bert-tiny-enc.onnx",
    "examples/models/llama-tiny.onnx",
    "examples/models/light_resnet50.onnx",
    "examples/models/mlp_digits.onnx",
]


def make_inputs(fp8c: str, model: str, path: str, shapes: dict) -> dict:
    info = json.loads(subprocess.run([fp8c, "inspect", model, "--json"], check=True,
                                     capture_output=True, text=True).stdout)
    ref_path = model[:-5] + ".ref.npz"
    ref = np.load(ref_path) if os.path.exists(ref_path) else None
    rng = np.random.default_rng(0)
    arrays = {}
    for i in info["inputs"]:
        if ref is not None and i["name"] in ref.files:
            arrays[i["name"]] = ref[i["name"]]
            continue
        shape = i["shape"] or []
        dims = [int(d) if str(d).isdigit() else (2 if k == 0 else 32) for k, d in enumerate(shape)]
        if i["name"] in shapes and len(shapes[i["name"]]) == len(dims):
            dims = shapes[i["name"]]
        dt = i["dtype"]
        if "mask" in i["name"]:
            arrays[i["name"]] = np.ones(dims, dtype=np.int64 if dt.startswith("i") else np.float32)
        elif dt.startswith("i") or dt.startswith("u"):
            arrays[i["name"]] = rng.integers(0, 8, dims).astype(np.int32 if dt == "i32" else np.int64)
        elif dt == "bool":
            arrays[i["name"]] = np.ones(dims, dtype=bool)
        else:
            arrays[i["name"]] = rng.standard_normal(dims).astype(np.float32)
    np.savez(path, **arrays)
    return arrays


RUN_MS = re.compile(r"run ([0-9.]+) ms")


def fp8c_ms(fp8c: str, model: str, inputs: str, threads: int, precision: str, reps: int, out: str,
            extra: tuple = ()) -> float:
    r = subprocess.run([fp8c, "--threads", str(threads), "run", model, "--inputs", inputs,
                        "--precision", precision, "--repeat", str(reps + 1), "-o", out, *extra],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"fp8c run {model} ({precision}) failed:\n{r.stderr}")
    m = RUN_MS.search(r.stderr)
    if not m:
        raise RuntimeError(f"no run time in fp8c's output:\n{r.stderr}")
    return float(m.group(1))


def ort_session(model: str, threads: int):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.log_severity_level = 3  # no notes about unused initializers
    return ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])


def ort_ms(sess, arrays: dict, reps: int) -> float:
    import time

    feed = {i.name: arrays[i.name] for i in sess.get_inputs()}
    sess.run(None, feed)  # warm-up
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        sess.run(None, feed)
        best = min(best, (time.perf_counter() - t) * 1e3)
    return best


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("models", nargs="*")
    ap.add_argument("--fp8c", default=os.path.join(ROOT, "target/release/fp8c"))
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3,
                    help="alternations of the contenders; each keeps its fastest round")
    ap.add_argument("--json")
    ap.add_argument("--shape", action="append", default=[], metavar="NAME=D0xD1x...",
                    help="the shape of a random input (repeatable)")
    ap.add_argument("--accum", choices=["default", "hopper", "both"], default="default",
                    help="the FP8 run's forward GEMMs: fp8c's default (f32 sums on the CPU), "
                         "--hopper-accum's model of Hopper's fast accumulation, or both timed")
    a = ap.parse_args()
    shapes = {}
    for spec in a.shape:
        name, _, dims = spec.partition("=")
        if not dims:
            ap.error(f"--shape {spec!r}: expected NAME=D0xD1x...")
        shapes[name] = [int(d) for d in dims.split("x")]
    models = a.models or [os.path.join(ROOT, m) for m in DEFAULT_MODELS]
    threads = [int(t) for t in a.threads.split(",")]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "out.npz")
        accums = ["default", "hopper"] if a.accum == "both" else [a.accum]
        head = "".join(f" fp8c FP8 ({x}) ms | FP8 ({x}) / f32 |" for x in accums)
        print(f"| model | threads | fp8c f32 ms | onnxruntime ms | f32 / ort |{head}")
        print("|---|---:|---:|---:|---:|" + "---:|---:|" * len(accums))
        for model in models:
            inputs = os.path.join(tmp, "in.npz")
            arrays = make_inputs(a.fp8c, model, inputs, shapes)
            for t in threads:
                sess = ort_session(model, t)
                best = {}
                for _ in range(max(1, a.rounds)):
                    times = {"f32": fp8c_ms(a.fp8c, model, inputs, t, "f32", a.reps, out),
                             "ort": ort_ms(sess, arrays, a.reps)}
                    for x in accums:
                        flags = ("--hopper-accum",) if x == "hopper" else ()
                        times[x] = fp8c_ms(a.fp8c, model, inputs, t, "fp8", a.reps, out, flags)
                    for k, v in times.items():
                        best[k] = min(best.get(k, float("inf")), v)
                del sess
                f32, ort = best["f32"], best["ort"]
                row = {"model": os.path.basename(model), "threads": t, "fp8c_f32_ms": f32,
                       "ort_ms": ort, "f32_vs_ort": f32 / ort, "rounds": max(1, a.rounds)}
                cells = ""
                for x in accums:
                    fp8 = best[x]
                    sfx = "" if x == "default" else f"_{x}"
                    row[f"fp8c_fp8{sfx}_ms"] = fp8
                    row[f"fp8{sfx}_vs_f32"] = fp8 / f32
                    cells += f" {fp8:.3f} | {fp8 / f32:.2f}× |"
                rows.append(row)
                print(f"| {row['model']} | {t} | {f32:.3f} | {ort:.3f} | {f32 / ort:.2f}× |{cells}",
                      flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
