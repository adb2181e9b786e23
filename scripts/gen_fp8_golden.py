#!/usr/bin/env python3
"""Generates the FP8 golden tables that `cargo test -p fp8c-core` compares against.

The expected values come from references fp8c did not write:
  * ml_dtypes `astype(float8_e4m3fn / float8_e5m2)`: round-to-nearest-even, overflow to NaN (E4M3)
    or to +-inf (E5M2). That is exactly ONNX Cast / QuantizeLinear with saturate=false.
  * saturate=true is `np.clip(x, -max, max)` then `astype`, which is what ONNX's own reference
    implementation of Cast does (onnx.numpy_helper.saturate_cast) and TransformerEngine's
    `satfinite` cast.
Before writing anything, every entry is checked against two more references:
  * an exact rounding model written here in plain numpy float64 (frexp, rint, ldexp), which is
    independent of ml_dtypes: it proves ml_dtypes rounds once (RNE) and does not double-round;
  * the ONNX project's reference Cast (`onnx.reference.ops.op_cast.cast_to`), when onnx is installed.
The script stops with an error if any of them disagree on any entry.

Usage:  PY=$(scripts/python-env.sh); $PY scripts/gen_fp8_golden.py
Output: crates/fp8c-core/tests/golden/ (see README.md there for the layout).
"""

from __future__ import annotations

import argparse
import hashlib
import pathlib
import sys
import zlib

import ml_dtypes
import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "crates" / "fp8c-core" / "tests" / "golden"

# Deterministic f32 inputs: SPECIALS (stored) followed by RANDOM_COUNT values from SplitMix64(SEED).
SEED = 0x0F8C_601D_E4E3_E5E2
RANDOM_COUNT = 1 << 20

FORMATS = {
    # name: (ml_dtypes type, mantissa bits, min normal exponent, max finite, max code,
    #        non-saturating overflow code, NaN code)
    "e4m3": (ml_dtypes.float8_e4m3fn, 3, -6, 448.0, 0x7E, 0x7F, 0x7F),
    "e5m2": (ml_dtypes.float8_e5m2, 2, -14, 57344.0, 0x7B, 0x7C, 0x7E),
}

M64 = np.uint64(0xFFFF_FFFF_FFFF_FFFF)


def splitmix64(seed: int, n: int) -> np.ndarray:
    """The i-th output (i = 1..n) of SplitMix64 started at `seed`; counter-based, so vectorised."""
    i = np.arange(1, n + 1, dtype=np.uint64)
    z = np.uint64(seed) + i * np.uint64(0x9E37_79B9_7F4A_7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58_476D_1CE4_E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D0_49BB_1331_11EB)
    return z ^ (z >> np.uint64(31))


def random_f32_bits(seed: int, n: int) -> np.ndarray:
    """Maps SplitMix64 outputs to f32 bit patterns; crates/fp8c-core/tests/golden.rs mirrors this.

    mode = z >> 62:
      0     any 32-bit pattern (z & 0xFFFFFFFF): every exponent, infinities, NaN payloads;
      1, 2  sign (z >> 61) & 1, biased exponent 97 + ((z >> 40) & 0xFFFF) % 51 (2^-30 .. 2^20,
            the range FP8 values and their underflow live in), mantissa z & 0x7FFFFF;
      3     as 1, 2 but the mantissa bits below the FP8 rounding point are set to exactly half an
            FP8 ulp (bit 19 for E4M3 if (z >> 32) & 1 == 0, else bit 20 for E5M2), then moved by
            d - 1 f32 ulps with d = [0, 1, 2, 1][(z >> 33) & 3]: ties and their neighbours.
    """
    z = splitmix64(seed, n)
    mode = z >> np.uint64(62)
    raw = z & np.uint64(0xFFFF_FFFF)
    sign = (z >> np.uint64(61)) & np.uint64(1)
    exp = np.uint64(97) + ((z >> np.uint64(40)) & np.uint64(0xFFFF)) % np.uint64(51)
    man = z & np.uint64(0x7F_FFFF)
    half = np.where(((z >> np.uint64(32)) & np.uint64(1)) == 0, np.uint64(1 << 19), np.uint64(1 << 20))
    d = np.array([0, 1, 2, 1], dtype=np.uint64)[((z >> np.uint64(33)) & np.uint64(3)).astype(np.int64)]
    tie = ((man & ~(np.uint64(2) * half - np.uint64(1)) & np.uint64(0x7F_FFFF)) | half) + d - np.uint64(1)
    man = np.where(mode == 3, tie, man)
    focused = (sign << np.uint64(31)) | (exp << np.uint64(23)) | man
    return np.where(mode == 0, raw, focused).astype(np.uint32)


def fnv1a64(data: bytes) -> int:
    h = 0xCBF2_9CE4_8422_2325
    for b in data:
        h = ((h ^ b) * 0x100_0000_01B3) & 0xFFFF_FFFF_FFFF_FFFF
    return h


def f32_specials() -> np.ndarray:
    """Every value a rounding rule can turn on, for both formats, with both signs."""
    bits: list[int] = [
        0x0000_0000, 0x0000_0001, 0x0000_0002, 0x0040_0000, 0x007F_FFFF,  # 0, f32 subnormals
        0x0080_0000, 0x3F80_0000, 0x7F7F_FFFF,                           # min normal, 1, f32 max
        0x7F80_0000,                                                     # inf
        0x7FC0_0000, 0x7F80_0001, 0x7FA0_0000, 0x7FE0_0000, 0x7FFF_FFFF, 0x7FC0_0001,  # NaNs
    ]

    def f32(v: float) -> np.float32:
        return np.float32(v)

    def around(v: np.float32) -> list[np.float32]:
        return [np.nextafter(v, f32(-np.inf)), v, np.nextafter(v, f32(np.inf))]

    vals: list[np.float32] = []
    for name, (dt, mbits, emin, maxv, maxcode, _, _) in FORMATS.items():
        codes = np.arange(0, maxcode + 1, dtype=np.uint8)
        grid = codes.view(dt).astype(np.float64)  # positive finite values, increasing
        for v in grid:
            vals += around(f32(v))
        for a, b in zip(grid[:-1], grid[1:]):
            vals += around(f32((a + b) / 2))  # ties: exact in f32 (one more mantissa bit)
        top_ulp = grid[-1] - grid[-2]
        for v in (maxv + top_ulp / 2, maxv + top_ulp, 2 * maxv, 4 * maxv):  # above max
            vals += around(f32(v))
        vals += around(f32(2.0 ** (emin - mbits - 1)))  # half the smallest subnormal
        vals += around(f32(2.0 ** (emin - mbits - 2)))
    bits += [int(np.float32(v).view(np.uint32)) for v in vals]
    bits += [b | 0x8000_0000 for b in bits]
    seen: set[int] = set()
    out = [b for b in bits if not (b in seen or seen.add(b))]
    return np.array(out, dtype=np.uint32)


def exact_reference(x: np.ndarray, fmt: str, saturate: bool) -> np.ndarray:
    """Independent model: round |x| to the FP8 grid with numpy float64 rint (ties to even)."""
    dt, mbits, emin, maxv, maxcode, ovf_code, nan_code = FORMATS[fmt]
    with np.errstate(invalid="ignore"):
        x = x.astype(np.float64)  # exact for f32 / bf16 / f16 inputs
    sign = np.signbit(x).astype(np.uint8) << 7
    ax = np.abs(x)
    nan = np.isnan(x)
    finite = np.isfinite(x)
    safe = np.where(finite & (ax > 0), ax, 1.0)
    _, e = np.frexp(safe)  # safe = m * 2^e with m in [0.5, 1)
    e = np.maximum(e - 1, emin)  # binade exponent, clamped to the subnormal binade
    quantum = np.ldexp(1.0, e - mbits)
    y = np.rint(np.where(finite, ax, 0.0) / quantum) * quantum  # exact: power-of-two scaling
    grid = np.arange(0, maxcode + 1, dtype=np.uint8).view(dt).astype(np.float64)
    overflow = (~finite & ~nan) | (y > maxv)
    idx = np.clip(np.searchsorted(grid, np.minimum(y, maxv)), 0, maxcode)
    assert np.all(overflow | (grid[idx] == y)), "rounded value not on the FP8 grid"
    code = idx.astype(np.uint8)
    code = np.where(overflow, np.uint8(maxcode if saturate else ovf_code), code)
    code = np.where(nan, np.uint8(nan_code), code)
    return (code | sign).astype(np.uint8)


def ml_dtypes_reference(x: np.ndarray, fmt: str, saturate: bool) -> np.ndarray:
    dt, _, _, maxv, _, _, _ = FORMATS[fmt]
    with np.errstate(invalid="ignore", over="ignore"):
        y = np.clip(x, -maxv, maxv) if saturate else x
        return y.astype(dt).view(np.uint8)


def onnx_reference(x: np.ndarray, fmt: str, saturate: bool):
    try:
        import onnx
        from onnx.reference.ops.op_cast import cast_to
    except ImportError:
        return None
    to = onnx.TensorProto.FLOAT8E4M3FN if fmt == "e4m3" else onnx.TensorProto.FLOAT8E5M2
    with np.errstate(invalid="ignore", over="ignore"):
        return np.asarray(cast_to(x, to, saturate)).view(np.uint8)


def check_and_encode(kind: str, x: np.ndarray) -> dict[str, bytes]:
    """Encodes x to both formats in both modes; every reference must agree on every entry."""
    files = {}
    for fmt in FORMATS:
        per_mode = {}
        for saturate in (True, False):
            want = ml_dtypes_reference(x, fmt, saturate)
            exact = exact_reference(x, fmt, saturate)
            bad = int(np.count_nonzero(want != exact))
            onnx_codes = onnx_reference(x, fmt, saturate)
            bad_onnx = -1 if onnx_codes is None else int(np.count_nonzero(want != onnx_codes))
            label = f"{kind} -> {fmt} saturate={str(saturate).lower()}"
            print(f"{label:32} {len(x):>9} entries; mismatches: exact model {bad}, "
                  f"onnx reference {'n/a' if bad_onnx < 0 else bad_onnx}")
            if bad or bad_onnx > 0:
                i = int(np.flatnonzero(want != (exact if bad else onnx_codes))[0])
                sys.exit(f"references disagree on {label} at entry {i}: input {x[i]!r}")
            per_mode[saturate] = want
        # Layout: saturating codes, then (non-saturating XOR saturating): the second half is
        # almost all zeros (the modes differ only on overflow) and compresses to nearly nothing.
        files[f"{kind}_{fmt}.u8.zz"] = per_mode[True].tobytes() + (per_mode[False] ^ per_mode[True]).tobytes()
    return files


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=pathlib.Path, default=OUT)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)

    specials = f32_specials()
    randoms = random_f32_bits(SEED, RANDOM_COUNT)
    f32_inputs = np.concatenate([specials, randoms]).view(np.float32)
    all16 = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)

    files: dict[str, bytes] = {"f32_specials.u32.zz": specials.astype("<u4").tobytes()}
    for fmt, (dt, *_rest) in FORMATS.items():
        decoded = np.arange(256, dtype=np.uint8).view(dt).astype(np.float32)
        files[f"decode_{fmt}.f32.zz"] = decoded.view("<u4").tobytes()
    files.update(check_and_encode("f32", f32_inputs))
    files.update(check_and_encode("bf16", all16.view(ml_dtypes.bfloat16)))
    files.update(check_and_encode("f16", all16.view(np.float16)))

    total = 0
    for name, raw in sorted(files.items()):
        packed = zlib.compress(raw, 9)
        (args.out / name).write_bytes(packed)
        total += len(packed)
        print(f"wrote {name:24} {len(raw):>9} bytes raw, {len(packed):>9} compressed, "
              f"sha256 {hashlib.sha256(raw).hexdigest()[:16]}")
    manifest = f"""# Written by scripts/gen_fp8_golden.py; do not edit by hand. Read by tests/golden.rs.
generator = "scripts/gen_fp8_golden.py"
numpy = "{np.__version__}"
ml_dtypes = "{ml_dtypes.__version__}"
seed = {SEED}
specials_count = {len(specials)}
random_count = {RANDOM_COUNT}
# FNV-1a 64 of the little-endian bytes of the random f32 bit patterns, to check the Rust generator.
random_fnv1a64 = "{fnv1a64(randoms.astype('<u4').tobytes()):016x}"
"""
    (args.out / "manifest.toml").write_text(manifest)
    print(f"total compressed: {total} bytes")


if __name__ == "__main__":
    main()
