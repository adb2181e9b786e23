#!/usr/bin/env python3
"""Golden cases for fp8c's fine-grained FP8 scaling ops (issue #16): `block_quantize`,
`block_dequantize` and `block_scaled_matmul`, computed here with numpy and ml_dtypes from the
published formulas, independently of fp8c's Rust code.

Semantics (ARCHITECTURE.md, "Fine-grained scaling"):
  * Tiles: a tensor [..., R, C] is cut into tiles of `rows` x `cols` (0: the whole axis; edge
    tiles may be short), each with its own scale from its own amax (max |x|, NaN propagating).
  * Scales: `fp32`: scale = fmt_max / max(amax, epsilon) in f32, amax 0 or non-finite -> 1, an
    infinite quotient -> f32 max (TransformerEngine's compute_scale); `pow2`: that scale with
    its mantissa cleared (rounded down to a power of two; TE's power_2_scale, DeepSeek-V3 and
    TE Float8BlockScaling use power-of-two scales); `e8m0`: the OCP MX v1.0 rule, shared
    exponent = floor(log2(amax)) - emax_elem (8 for E4M3, 15 for E5M2) clamped to [-127, 127],
    scale = 2^-shared (amax 0 or non-finite -> 1).
  * block_quantize: q = saturating round-to-nearest-even cast of f32(x * scale) (finite values
    clip to +-max; an infinite x gives NaN for E4M3 and +-inf for E5M2; NaN stays NaN); second
    output scale_inv = 1 / scale (f32), shaped [..., ceil(R/rows), ceil(C/cols)].
  * block_dequantize: f32(q) * scale_inv of its tile, in f32.
  * block_scaled_matmul (DeepSeek-V3 section 3.3's promotion): D[m, n] = sum over K blocks kb,
    in order, of (P * sa[m/a_rows, kb]) * sb[kb, n/b_cols], where P = sum over k in kb, in
    order, of f32(qa[m, k]) * f32(qb[k, n]); every sum and product rounded to f32, except
    that where P * sa overflows f32 the product P * sa * sb is taken in f64 and rounded once
    (a tile of huge values times a small scale of B: the value is finite, as per-tensor
    scaling's is).

Usage: PY=$(scripts/env/python-env.sh); $PY crates/fp8c-eval/tests/gen/gen_block_cases.py
Output: crates/fp8c-eval/tests/golden/block_cases.json (op_cases.json's format).
"""

import json
import pathlib

import ml_dtypes
import numpy as np

OUT = pathlib.Path(__file__).resolve().parent.parent / "golden" / "block_cases.json"
FMT = {
    "f8e4m3": (ml_dtypes.float8_e4m3fn, 448.0, 8),
    "f8e5m2": (ml_dtypes.float8_e5m2, 57344.0, 15),
}
F32_MAX = np.float32(np.finfo(np.float32).max)


def hexof(dtype, arr):
    return {"dtype": dtype, "shape": list(arr.shape), "hex": arr.tobytes().hex()}


def tile_shape(shape, rows, cols):
    r, c = shape[-2], shape[-1]
    tr, tc = (rows or r), (cols or c)
    return tr, tc, (-(-r // tr) if r else 0), (-(-c // tc) if c else 0)


def tile_amax(x, rows, cols):
    tr, tc, nr, nc = tile_shape(x.shape, rows, cols)
    out = np.zeros(x.shape[:-2] + (nr, nc), dtype=np.float32)
    for i in range(nr):
        for j in range(nc):
            t = np.abs(x[..., i * tr:(i + 1) * tr, j * tc:(j + 1) * tc])
            t = t.reshape(t.shape[:-2] + (-1,))
            nan = np.isnan(t).any(axis=-1)
            out[..., i, j] = np.where(nan, np.float32(np.nan), t.max(axis=-1, initial=0))
    return out


def scales(amax, fmt, scaling, epsilon):
    _, fmax, emax = FMT[fmt]
    a = amax.astype(np.float32)
    if scaling in ("fp32", "pow2"):
        a = np.where(np.isnan(a), a, np.maximum(a, np.float32(epsilon)))
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            s = (np.float32(fmax) / a).astype(np.float32)
        s = np.where(np.isinf(s), F32_MAX, s)
        s = np.where((a == 0) | ~np.isfinite(a), np.float32(1), s).astype(np.float32)
        if scaling == "pow2":
            s = (s.view(np.uint32) & np.uint32(0xFF800000)).view(np.float32)
        return s
    # e8m0
    ok = (a > 0) & np.isfinite(a)
    m, e = np.frexp(np.where(ok, a, 1).astype(np.float64))  # a = m * 2^e, m in [0.5, 1)
    floor_log2 = e - 1
    shared = np.clip(floor_log2 - emax, -127, 127)
    s = np.ldexp(1.0, -shared).astype(np.float32)
    return np.where(ok, s, np.float32(1)).astype(np.float32)


def expand(t, shape, rows, cols):
    tr, tc, _, _ = tile_shape(shape, rows, cols)
    t = np.repeat(np.repeat(t, tr, axis=-2), tc, axis=-1)
    return t[..., :shape[-2], :shape[-1]]


def encode(v, x, fmt):
    """Saturating RNE cast of the f32 products v; x (the unscaled input) decides infinities."""
    dt, fmax, _ = FMT[fmt]
    clipped = np.clip(v, -fmax, fmax).astype(np.float32)
    q = clipped.astype(dt)
    if fmt == "f8e4m3":
        q = np.where(np.isinf(x), dt(np.nan), q)
    else:
        q = np.where(np.isinf(x), np.where(x > 0, dt(np.inf), dt(-np.inf)), q)
    q = np.where(np.isnan(x) | np.isnan(v), dt(np.nan), q)
    return q.astype(dt)


def block_quantize(x, fmt, rows, cols, scaling, epsilon):
    amax = tile_amax(x, rows, cols)
    s = scales(amax, fmt, scaling, epsilon)
    with np.errstate(over="ignore", invalid="ignore"):
        v = (x * expand(s, x.shape, rows, cols)).astype(np.float32)
    q = encode(v, x, fmt)
    with np.errstate(divide="ignore"):
        s_inv = (np.float32(1) / s).astype(np.float32)
    return q, s_inv


def block_dequantize(q, s_inv, rows, cols):
    return (q.astype(np.float32) * expand(s_inv, q.shape, rows, cols)).astype(np.float32)


def block_scaled_matmul(qa, qb, sa, sb, k_block, a_rows, b_cols):
    m, k = qa.shape
    n = qb.shape[1]
    kb = k_block or k
    ar, bc = (a_rows or m), (b_cols or n)
    fa, fb = qa.astype(np.float32), qb.astype(np.float32)
    rows_a = sa[np.arange(m) // ar]            # [m, KB]
    cols_b = sb[:, np.arange(n) // bc]         # [KB, n]
    acc = np.zeros((m, n), dtype=np.float32)
    for b in range(-(-k // kb)):
        p = np.zeros((m, n), dtype=np.float32)
        for kk in range(b * kb, min(k, (b + 1) * kb)):
            p = (p + (fa[:, kk, None] * fb[None, kk, :]).astype(np.float32)).astype(np.float32)
        with np.errstate(over="ignore", invalid="ignore"):
            t = (p * rows_a[:, b, None]).astype(np.float32)
            scaled = (t * cols_b[None, b, :]).astype(np.float32)
            wide = (p.astype(np.float64) * rows_a[:, b, None].astype(np.float64)
                    * cols_b[None, b, :].astype(np.float64)).astype(np.float32)
        scaled = np.where(np.isinf(t), wide, scaled)
        acc = (acc + scaled).astype(np.float32)
    return acc


def data(rng, shape, specials=False):
    # Values over many binades, so tiles get very different scales.
    mag = np.exp2(rng.uniform(-12, 12, size=shape))
    x = (rng.choice([-1.0, 1.0], size=shape) * mag * rng.uniform(0.5, 1.0, size=shape)).astype(np.float32)
    # Rows of very different sizes: per-row and per-tile scales matter.
    x = (x * np.exp2(np.arange(shape[-2]) % 7 * 3 - 9)[:, None]).astype(np.float32)
    if specials:
        flat = x.reshape(-1)
        flat[:8] = [0, -0.0, np.nan, np.inf, -np.inf, 1e-40, 3e38, -2.5]
        flat[40:72] = 0  # an all-zero 1x32 tile
    return x


def main():
    rng = np.random.default_rng(0x16)
    cases = []
    a = data(rng, (2, 3, 260), specials=True)
    w = data(rng, (130, 40))
    for fmt in ("f8e4m3", "f8e5m2"):
        for name, x, rows, cols, scaling, eps in [
            ("tile1x128_pow2", a, 1, 128, "pow2", 0.0),
            ("block128x128_pow2", w, 128, 128, "pow2", 0.0),
            ("rowwise_pow2", a, 1, 0, "pow2", 0.0),
            ("colwise_fp32_eps", w, 0, 1, "fp32", 1e-3),
            ("tensorwise_fp32", a, 0, 0, "fp32", 0.0),
            ("mx1x32_e8m0", a, 1, 32, "e8m0", 0.0),
            ("tile4x16_fp32", w, 4, 16, "fp32", 0.0),
        ]:
            q, s_inv = block_quantize(x, fmt, rows, cols, scaling, eps)
            attrs = {"to": fmt, "saturate": True, "rows": rows, "cols": cols, "scaling": scaling, "epsilon": eps}
            code = "f8e4m3" if fmt == "f8e4m3" else "f8e5m2"
            cases.append({
                "name": f"block_quantize_{name}_{fmt}",
                "source": "numpy + ml_dtypes (crates/fp8c-eval/tests/gen/gen_block_cases.py)",
                "op": {"name": "block_quantize", "attrs": attrs},
                "inputs": [hexof("f32", x)],
                "outputs": [hexof(code, q.view(np.uint8)), hexof("f32", s_inv)],
                "atol": 0.0, "rtol": 0.0,
            })
            if fmt != "f8e4m3":
                continue
            y = block_dequantize(q, s_inv, rows, cols)
            cases.append({
                "name": f"block_dequantize_{name}_{fmt}",
                "source": "numpy + ml_dtypes (crates/fp8c-eval/tests/gen/gen_block_cases.py)",
                "op": {"name": "block_dequantize", "attrs": {"to": "f32", "rows": rows, "cols": cols}},
                "inputs": [hexof(code, q.view(np.uint8)), hexof("f32", s_inv)],
                "outputs": [hexof("f32", y)],
                "atol": 0.0, "rtol": 0.0,
            })
    # GEMMs: A [m, K] in 1 x k_block tiles (activations), B [K, n] in k_block x b_cols blocks
    # (weights, 128 x 128 in Float8BlockScaling), rowwise (k_block 0), MX (1 x 32 both sides).
    x = data(rng, (4, 300))
    wt = data(rng, (300, 20))  # [K, N]
    for name, k_block, a_rows, b_cols, scaling in [
        ("deepseek_1x128_128x128", 128, 1, 128, "pow2"),
        ("rowwise", 0, 1, 1, "pow2"),
        ("mx_1x32", 32, 1, 1, "e8m0"),
        ("tiles_fp32", 64, 2, 16, "fp32"),
    ]:
        for fmt in ("f8e4m3",):
            qa, sa = block_quantize(x, fmt, a_rows, k_block, scaling, 0.0)
            # B's tiles run along K (rows of [K, N]): quantize Bᵀ [N, K] in b_cols x k_block tiles.
            qbt, sbt = block_quantize(wt.T.copy(), fmt, b_cols, k_block, scaling, 0.0)
            qb, sb = qbt.T.copy(), sbt.T.copy()
            d = block_scaled_matmul(qa, qb, sa, sb, k_block, a_rows, b_cols)
            cases.append({
                "name": f"block_scaled_matmul_{name}_{fmt}",
                "source": "numpy + ml_dtypes (crates/fp8c-eval/tests/gen/gen_block_cases.py)",
                "op": {"name": "block_scaled_matmul", "attrs": {"out": "f32", "k_block": k_block, "a_rows": a_rows, "b_cols": b_cols}},
                "inputs": [hexof(fmt, qa.view(np.uint8)), hexof(fmt, qb.view(np.uint8)), hexof("f32", sa), hexof("f32", sb)],
                "outputs": [hexof("f32", d)],
                "atol": 0.0, "rtol": 0.0,
            })
    # Issue #46 case 12: one input of 1e37 in a row; per-tensor scaling and f32 stay finite,
    # so must every per-tile recipe (the row's P * sa overflows f32, P * sa * sb does not).
    big = rng.uniform(-1, 1, size=(4, 256)).astype(np.float32)
    big[2, 5] = np.float32(1e37)
    wt = rng.uniform(-0.1, 0.1, size=(256, 16)).astype(np.float32)
    for name, k_block, a_rows, b_cols, scaling in [
        ("huge_row_rowwise", 0, 1, 1, "pow2"),
        ("huge_row_deepseek_1x128_128x128", 128, 1, 128, "pow2"),
        ("huge_row_mx_1x32", 32, 1, 1, "e8m0"),
    ]:
        fmt = "f8e4m3"
        qa, sa = block_quantize(big.astype(np.float32), fmt, a_rows, k_block, scaling, 0.0)
        qbt, sbt = block_quantize(wt.T.astype(np.float32).copy(), fmt, b_cols, k_block, scaling, 0.0)
        qb, sb = qbt.T.copy(), sbt.T.copy()
        d = block_scaled_matmul(qa, qb, sa, sb, k_block, a_rows, b_cols)
        assert np.isfinite(d).all(), name
        cases.append({
            "name": f"block_scaled_matmul_{name}_{fmt}",
            "source": "numpy + ml_dtypes (crates/fp8c-eval/tests/gen/gen_block_cases.py)",
            "op": {"name": "block_scaled_matmul", "attrs": {"out": "f32", "k_block": k_block, "a_rows": a_rows, "b_cols": b_cols}},
            "inputs": [hexof(fmt, qa.view(np.uint8)), hexof(fmt, qb.view(np.uint8)), hexof("f32", sa), hexof("f32", sb)],
            "outputs": [hexof("f32", d)],
            "atol": 0.0, "rtol": 0.0,
        })
    doc = {
        "generator": "crates/fp8c-eval/tests/gen/gen_block_cases.py",
        "numpy": np.__version__,
        "ml_dtypes": ml_dtypes.__version__,
        "cases": cases,
    }
    OUT.write_text(json.dumps(doc) + "\n")
    print(f"wrote {len(cases)} cases to {OUT} ({OUT.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
