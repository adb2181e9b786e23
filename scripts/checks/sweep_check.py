#!/usr/bin/env python3
"""Run every model scripts/checks/sweep_exports.py wrote through fp8c and compare with onnxruntime.

Usage: PY=$(scripts/env/python-env.sh); $PY scripts/checks/sweep_check.py [NAME ...]
(FP8C=path/to/fp8c, default target/release/fp8c; SWEEP_DIR as for sweep_exports.py.)
Writes $SWEEP_DIR/results/<name>/ (outputs, logs) and appends to $SWEEP_DIR/results.jsonl.
"""

import json
import os
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SWEEP = os.environ.get("SWEEP_DIR", os.path.join(ROOT, ".cache", "sweep"))
FP8C = os.environ.get("FP8C", os.path.join(ROOT, "target", "release", "fp8c"))
MODELS = os.path.join(SWEEP, "models")
RES = os.path.join(SWEEP, "results")


def sh(cmd, log, timeout=600):
    t0 = time.time()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        rc, out, err = p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired:
        rc, out, err = "timeout", "", f"timeout after {timeout}s"
    with open(log, "a") as f:
        f.write(f"$ {' '.join(cmd)}\nrc={rc} ({time.time() - t0:.1f}s)\n--- stdout\n{out[-6000:]}\n"
                f"--- stderr\n{err[-6000:]}\n\n")
    return rc, out, err


def last_err(out, err):
    lines = [l for l in (err + out).strip().splitlines() if l.strip()]
    return " | ".join(lines[-4:])[:800]


def rel_l2(a, b):
    a = a.astype(np.float64)
    b = b.astype(np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def cosine(a, b):
    a = a.astype(np.float64).ravel()
    b = b.astype(np.float64).ravel()
    return float(a @ b / max(np.linalg.norm(a) * np.linalg.norm(b), 1e-30))


def compare(got_path, ref):
    got = dict(np.load(got_path))
    res = {}
    for k, r in ref.items():
        if k not in got:
            res[k] = f"missing (have {list(got)})"
        elif got[k].shape != r.shape:
            res[k] = f"shape {got[k].shape} vs ORT {r.shape}"
        else:
            res[k] = {"rel_l2": rel_l2(got[k], r), "cos": cosine(got[k], r),
                      "nonfinite": int((~np.isfinite(got[k])).sum())}
    return res


def ort_run(path, inputs, default_opt=False):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.log_severity_level = 3
    if not default_opt:
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    feed = {i.name: inputs[i.name] for i in sess.get_inputs()}
    return dict(zip(names, sess.run(names, feed)))


def emitted_vs_ref(path, inputs, ref):
    """An emitted ONNX file run in onnxruntime, each output against the reference."""
    try:
        outs = ort_run(path, inputs)
    except Exception as e:
        return f"ORT failed: {type(e).__name__}: {str(e)[:800]}"
    return {k: ({"rel_l2": rel_l2(outs[k], v), "cos": cosine(outs[k], v)}
                if k in outs and outs[k].shape == v.shape else "missing/shape")
            for k, v in ref.items()}


def check(name):
    d = os.path.join(RES, name)
    os.makedirs(d, exist_ok=True)
    log = os.path.join(d, "log.txt")
    if os.path.exists(log):
        os.remove(log)
    m = os.path.join(MODELS, f"{name}.onnx")
    inp = os.path.join(MODELS, f"{name}.in.npz")
    # onnxruntime's outputs, or PyTorch's where onnxruntime could not run the export.
    ref_path = os.path.join(MODELS, f"{name}.ref.npz")
    if not os.path.exists(ref_path):
        ref_path = os.path.join(MODELS, f"{name}.torch.npz")
    ref = dict(np.load(ref_path))
    inputs = dict(np.load(inp))
    rec = {"name": name}

    rc, out, err = sh([FP8C, "inspect", m], log)
    rec["inspect"] = "ok" if rc == 0 else f"rc={rc}: {last_err(out, err)}"

    f32 = os.path.join(d, "f32.npz")
    rc, out, err = sh([FP8C, "run", m, "--inputs", inp, "--precision", "f32", "-o", f32], log)
    rec["f32"] = compare(f32, ref) if rc == 0 else f"rc={rc}: {last_err(out, err)}"

    fp8 = os.path.join(d, "fp8.npz")
    rc, out, err = sh([FP8C, "run", m, "--inputs", inp, "--precision", "fp8", "--compare",
                       "-o", fp8], log)
    if rc == 0:
        rec["fp8"] = compare(fp8, ref)
        rec["fp8_compare_stdout"] = out.strip()[-1200:]
    else:
        rec["fp8"] = f"rc={rc}: {last_err(out, err)}"

    fp8a = os.path.join(d, "fp8_all.npz")
    rc, out, err = sh([FP8C, "run", m, "--inputs", inp, "--precision", "fp8", "--min-fp8-flops",
                       "0", "-o", fp8a], log)
    rec["fp8_min0"] = compare(fp8a, ref) if rc == 0 else f"rc={rc}: {last_err(out, err)}"

    x = os.path.join(d, f"{name}.fp8qdq.onnx")
    rc, out, err = sh([FP8C, "compile", m, "--emit", "onnx", "--calibrate", inp, "-o", x], log)
    if rc == 0:
        rec["emit_onnx"] = emitted_vs_ref(x, inputs, ref)
        try:
            ort_run(x, inputs, default_opt=True)
            rec["emit_onnx_ort_default_opt"] = "ok"
        except Exception as e:
            rec["emit_onnx_ort_default_opt"] = f"ORT failed: {str(e)[:300]}"
    else:
        rec["emit_onnx"] = f"compile rc={rc}: {last_err(out, err)}"

    xb = os.path.join(d, f"{name}.block.onnx")
    rc, out, err = sh([FP8C, "compile", m, "--emit", "onnx", "--recipe", "block", "-o", xb], log)
    if rc == 0:
        rec["emit_onnx_block"] = emitted_vs_ref(xb, inputs, ref)
    else:
        rec["emit_onnx_block"] = f"compile rc={rc}: {last_err(out, err)}"

    with open(os.path.join(SWEEP, "results.jsonl"), "a") as f:
        f.write(json.dumps(rec) + "\n")
    print(json.dumps(rec)[:3000], flush=True)


def main(argv):
    names = argv or sorted(f[:-5] for f in os.listdir(MODELS) if f.endswith(".onnx")
                           and os.path.exists(os.path.join(MODELS, f[:-5] + ".ref.npz")))
    for n in names:
        check(n)


if __name__ == "__main__":
    main(sys.argv[1:])
