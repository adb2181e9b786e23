#!/usr/bin/env python3
"""Issue #48's bandwidth line from `fp8c bench --json` output: the quantize kernels that
read bf16 (quantize+amax, cast+transpose+amax; the forms FP8 training runs on bf16
activations) against the device-to-device copy, goal at least 85% of the copy's bandwidth.
Standard library only. Run by scripts/gpu-check.sh (part `quantbw`).

What `fp8c bench` measures (crates/fp8c-runtime/src/cuda/bench.rs, `Bench::copy` and
`Bench::quantize`): CUDA events, median of 7 samples after warm-up, random inputs; a
kernel's GB/s is the bytes it must move over its time, input read once plus outputs written
once (bf16 -> E4M3: 2 + 1 bytes an element, with the transpose 2 + 2; the amax is one 4-byte
atomic), and the copy's the same count for cudaMemcpy of --elements f32 values (4 read + 4
written). So "of copy" compares achieved bytes per second, the measure the goal names.

Usage: quant_bw_check.py BENCH.json [BENCH2.json ...]   (one per --elements size)
Prints a table and the verdict; exit code 0 (the verdict is a measurement, not a test).
"""

import json
import sys

GOAL = 0.85
ROWS = ("quantize+amax bf16->e4m3", "cast+transpose+amax bf16->e4m3")


def main(argv):
    if not argv:
        print(__doc__)
        return 2
    print("| kernel | elements | GB/s | copy GB/s | of copy | goal ≥ 85% |")
    print("|---|---:|---:|---:|---:|---|")
    worst = None
    for path in argv:
        doc = json.load(open(path))
        bw = {r["kernel"]: r for r in doc["bandwidth"]}
        copy = next(r for k, r in bw.items() if k.startswith("device-to-device copy"))
        # --elements, from the copy's own figures (it moves 8 bytes an element).
        n = copy["gb_per_s"] * 1e6 * copy["ms"] / 8
        elements = f"2^{round(__import__('math').log2(n))}" if n > 0 else "?"
        for k in ROWS:
            r = bw.get(k)
            if r is None:
                print(f"| {k} | {elements} | – | – | – | not in this fp8c bench |")
                continue
            ok = r["of_copy"] >= GOAL
            worst = r["of_copy"] if worst is None else min(worst, r["of_copy"])
            print(f"| {k} | {elements} | {r['gb_per_s']:.0f} | {copy['gb_per_s']:.0f} | "
                  f"{100 * r['of_copy']:.1f}% | {'met' if ok else 'missed'} |")
    if worst is None:
        print("verdict: no bf16-input quantize rows measured")
    elif worst >= GOAL:
        print(f"verdict: goal met (every bf16-input row ≥ {GOAL:.0%} of the copy)")
    else:
        print(f"verdict: goal missed (worst {worst:.1%}, {100 * (GOAL - worst):.1f} points short)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
