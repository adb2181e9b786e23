#!/usr/bin/env python3
"""fp8c's fused attention, forward and backward, timed next to PyTorch SDPA at one shape
(issue #48's must-show line; the op is issue #43's). Run by scripts/gpu-check.sh (part
`attention`) on the GPU machine; it needs python3 with torch, transformers and onnxscript there.

Usage: attention_vs_sdpa.py FP8C WORK_DIR [--size 1.3b] [--batch 4] [--seq 2048]

Steps: (1) whether this fp8c has the fused op at all (`fp8c train --help` lists
--no-fuse-attention): if not, it says so and exits 0 (a prepared step, nothing to time yet);
(2) exports a one-layer Llama of the size's width (scripts/bench/e2e_torch.py export --layers
1); (3) trains it 3 steps with `fp8c train --device cuda --precision bf16` under ncu (one
metric, gpu__time_duration.sum; --clock-control none) and sums the kernels whose names say
attention (attn, flash) per step, and separately under `--profile`, whose op rows
`attention` / `attention_grad` appear only when CUDA runs the fused op itself (otherwise the
session decomposes it into matmul and softmax rows); (4) times
torch.nn.functional.scaled_dot_product_attention (causal, GQA, bf16) forward and forward +
backward at the same [batch, heads, seq, head_dim] by CUDA events. Prints a table; writes
WORK_DIR/attention.json.
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import e2e_run  # noqa: E402  (profile and ncu parsers, the token text)
import e2e_spec as spec  # noqa: E402

ATTN = re.compile(r"attn|attention|flash", re.I)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("fp8c")
    ap.add_argument("work")
    ap.add_argument("--size", default="1.3b", choices=sorted(spec.SIZES))
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=2048)
    a = ap.parse_args(argv)
    os.makedirs(a.work, exist_ok=True)
    out = {"size": a.size, "batch": a.batch, "seq": a.seq}
    help_text = subprocess.run([a.fp8c, "train", "--help"], capture_output=True, text=True).stdout
    if "--no-fuse-attention" not in help_text:
        print("attention: this fp8c has no fused attention op yet (issue #43): nothing to time")
        out["status"] = "no fused attention op in this fp8c"
        json.dump(out, open(os.path.join(a.work, "attention.json"), "w"), indent=1)
        return 0
    py = sys.executable
    cfg = spec.SIZES[a.size]
    model_dir = os.path.join(a.work, "attn-model")
    subprocess.run([py, os.path.join(HERE, "e2e_torch.py"), "export", "--size", a.size, "--layers", "1",
                    "--seq", str(a.seq), "--out", model_dir], check=True)
    text = os.path.join(a.work, "attn-tokens.txt")
    open(text, "wb").write(e2e_run.token_text(a.batch * a.seq * 4 + 1, dry=False))
    train = [a.fp8c, "train", os.path.join(model_dir, "model.onnx"), "--text", text, "--seq-len",
             str(a.seq), "--batch", str(a.batch), "--steps", "3", "--device", "cuda",
             "--precision", "bf16", "--quiet"]
    ncu = shutil.which("ncu")
    if ncu:
        csvp = os.path.join(a.work, "attn-ncu.csv")
        subprocess.run([ncu, "--clock-control", "none", "--metrics", "gpu__time_duration.sum", "--csv",
                        "--log-file", csvp] + train, check=True)
        k = e2e_run.parse_ncu(csvp)
        hits = [x for x in k["kernels"] if ATTN.search(x["kernel"])]
        out["ncu_attention_kernels"] = hits
        out["fp8c_attention_ms_per_step"] = sum(x["ms"] for x in hits) / 3 if hits else None
    prof = subprocess.run(train + ["--profile"], capture_output=True, text=True)
    p = e2e_run.parse_profile(prof.stderr + prof.stdout)
    out["profile_ops"] = [o for o in p.get("ops", []) if o["op"] in ("attention", "attention_grad")]
    out["fused_on_cuda"] = bool(out["profile_ops"])
    sd = os.path.join(a.work, "sdpa.json")
    subprocess.run([py, os.path.join(HERE, "e2e_torch.py"), "sdpa", "--batch", str(a.batch),
                    "--heads", str(cfg["heads"]), "--kv-heads", str(cfg["kv_heads"]), "--seq", str(a.seq),
                    "--head-dim", str(spec.head_dim(cfg)), "--out", sd], check=True)
    out["sdpa"] = json.load(open(sd))
    json.dump(out, open(os.path.join(a.work, "attention.json"), "w"), indent=1)
    shape = f"batch {a.batch}, {cfg['heads']} heads ({cfg['kv_heads']} KV), seq {a.seq}, head_dim {spec.head_dim(cfg)}"
    print(f"| attention fwd+bwd, {shape} | ms per layer-step |")
    print("|---|---:|")
    print(f"| PyTorch SDPA (causal, bf16) forward | {out['sdpa']['forward_ms']:.3f} |")
    print(f"| PyTorch SDPA forward + backward | {out['sdpa']['forward_backward_ms']:.3f} |")
    v = out.get("fp8c_attention_ms_per_step")
    print(f"| fp8c attention kernels (ncu) | {'–' if v is None else f'{v:.3f}'} |")
    if not out["fused_on_cuda"]:
        print("fp8c's CUDA program has no attention op: the session ran the unfused decomposition")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
