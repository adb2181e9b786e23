#!/usr/bin/env python3
"""How precisely Hopper's FP8 tensor cores accumulate, measured through PyTorch's cuBLASLt GEMM.

Run on a machine with a Hopper GPU and PyTorch (the device tool's machines have both):
    python3 scripts/bench/fp8_accum_probe.py OUT.npz
For each K it draws E4M3 operands (unit scales), multiplies them with torch._scaled_mm with
and without fast accumulation (cuBLASLt's CUBLASLT_MATMUL_DESC_FAST_ACCUM), and prints the
relative L2 and the largest relative error against the exact product (float64 of the decoded
operands). It saves the operands' codes and both results in OUT.npz: golden data for
fp8c-eval's model of fast accumulation (crates/fp8c-eval/src/fast_accum.rs), checked by
crates/fp8c-eval/tests/hopper_accum.rs without a GPU.
"""
import sys

import numpy as np
import torch

torch.manual_seed(0)
out = {}
m = n = 64
print(f"{'K':>6} {'mode':>6} {'rel L2 vs exact':>16} {'max rel':>10}")
for k in (64, 512, 4096):
    a = (torch.randn(m, k, device="cuda") * 2).to(torch.float8_e4m3fn)
    b = (torch.randn(n, k, device="cuda") * 2).to(torch.float8_e4m3fn)
    exact = a.double().cpu() @ b.double().cpu().T
    one = torch.tensor(1.0, device="cuda")
    for fast in (False, True):
        y = torch._scaled_mm(a, b.T, scale_a=one, scale_b=one, out_dtype=torch.float32, use_fast_accum=fast)
        torch.cuda.synchronize()
        d = y.double().cpu() - exact
        rel = (d.norm() / exact.norm()).item()
        mx = (d.abs() / exact.abs().clamp_min(1e-30)).max().item()
        print(f"{k:>6} {'fast' if fast else 'split':>6} {rel:16.3e} {mx:10.3e}")
        out[f"y_k{k}_{'fast' if fast else 'split'}"] = y.cpu().numpy()
    out[f"a_k{k}"] = a.view(torch.uint8).cpu().numpy()
    out[f"b_k{k}"] = b.view(torch.uint8).cpu().numpy()
out["device"] = np.array(torch.cuda.get_device_name())
out["torch"] = np.array(torch.__version__)
np.savez_compressed(sys.argv[1], **out)
