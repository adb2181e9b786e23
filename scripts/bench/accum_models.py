#!/usr/bin/env python3
"""Candidate CPU models of Hopper's FP8 fast accumulation against a real H100's outputs.

Reads crates/fp8c-eval/tests/golden/hw/h100_fp8_accum.npz (written on an H100 by
scripts/bench/fp8_accum_probe.py: E4M3 operands, unit scales, K = 64, 512, 4096) and prints, per K,
each model's relative L2 to the hardware's fast-accumulation result and the share of outputs
it matches bit for bit:
- `exact`: fp8c-eval's model (src/fast_accum.rs): per 32-product block, every product and the
  running sum truncated toward zero at 14 bits below the largest exponent among them;
- `blocksum`: a cheaper candidate, each block's products summed in f32 (K order), then one
  truncating add of that sum to the running sum at 14 bits below the larger of the two;
- `f32`: plain f32 summation in K order (what the host devices do by default).
Usage: PY=$(scripts/env/python-env.sh); $PY scripts/bench/accum_models.py   (numpy, ml_dtypes)
"""
import os

import ml_dtypes
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BITS, BLOCK = 14, 32


def decode(codes):
    return codes.view(ml_dtypes.float8_e4m3fn).astype(np.float64)


def exponent(x):
    _, e = np.frexp(x)
    return np.where(x == 0, -10000, e - 1)


def trunc(x, q):
    return np.trunc(x / q) * q


def exact(a, b):
    acc = np.zeros((a.shape[0], b.shape[1]))
    for k0 in range(0, a.shape[1], BLOCK):
        p = a[:, None, k0:k0 + BLOCK] * b.T[None, :, k0:k0 + BLOCK]
        big = np.maximum(np.abs(p).max(-1), np.abs(acc))
        q = 2.0 ** (exponent(big) - (BITS - 1))
        acc = trunc(acc, q) + trunc(p, q[..., None]).sum(-1)
    return acc


def f32_sum(a, b, lo=0, hi=None):
    hi = a.shape[1] if hi is None else hi
    s = np.zeros((a.shape[0], b.shape[1]), np.float32)
    for k in range(lo, hi):
        s = (s + (a[:, k:k + 1] * b[k:k + 1, :]).astype(np.float32)).astype(np.float32)
    return s.astype(np.float64)


def blocksum(a, b):
    acc = np.zeros((a.shape[0], b.shape[1]))
    for k0 in range(0, a.shape[1], BLOCK):
        s = f32_sum(a, b, k0, min(k0 + BLOCK, a.shape[1]))
        q = 2.0 ** (exponent(np.maximum(np.abs(acc), np.abs(s))) - (BITS - 1))
        acc = trunc(acc, q) + trunc(s, q)
    return acc


def main():
    z = np.load(os.path.join(ROOT, "crates/fp8c-eval/tests/golden/hw/h100_fp8_accum.npz"))
    print(f"{'K':>6} {'model':>9} {'rel L2 vs H100 fast':>20} {'bit-equal':>10}")
    for k in (64, 512, 4096):
        # The probe multiplied a @ b.T with b as [n, k].
        a, b = decode(z[f"a_k{k}"]), decode(z[f"b_k{k}"]).T
        hw = z[f"y_k{k}_fast"].astype(np.float64)
        for name, f in (("exact", exact), ("blocksum", blocksum), ("f32", f32_sum)):
            y = f(a, b)
            rel = np.linalg.norm(y - hw) / np.linalg.norm(hw)
            print(f"{k:>6} {name:>9} {rel:20.3e} {np.mean(y == hw):10.3f}")


if __name__ == "__main__":
    main()
