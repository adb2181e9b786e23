#!/usr/bin/env python3
"""Coefficients of fp8c's f32 erf (crates/fp8c-ir/src/fmath.rs, `ERF_TAYLOR`, `ERFC_SCALED`).

For |x| < LO fmath sums erf's Taylor series, x * sum_n a_n x^(2n) with
a_n = 2/sqrt(pi) * (-1)^n / (n! (2n + 1)), n = 0..=14 (the first omitted term is below
6e-16 relative at LO); this prints those a_n too.

For |x| in [LO, HI] fmath computes erf(x) = 1 - exp(-x^2) * R(x) with R(x) = erfc(x) * exp(x^2)
(smooth, from 0.47 down to 0.14), R as a Chebyshev series in u = (2x - (LO + HI)) / (HI - LO).
This fits R by least squares at 40 001 points from Python's math.erfc and math.exp (the C
library's double functions), prints the coefficients as a Rust array and the fit's largest
relative error. Usage: python3 scripts/gen_erf_coeffs.py [DEGREE]  (numpy needed)
"""
import math
import sys

import numpy as np
from numpy.polynomial import chebyshev as C

LO, HI = 0.875, 4.0
degree = int(sys.argv[1]) if len(sys.argv) > 1 else 22
print("const ERF_TAYLOR: [f64; 15] = [")
for n in range(15):
    print(f"    {2 / math.sqrt(math.pi) * (-1) ** n / (math.factorial(n) * (2 * n + 1))!r},")
print("];")
xs = np.linspace(LO, HI, 40001)
r = np.array([math.erfc(x) * math.exp(x * x) for x in xs])
u = (2 * xs - (LO + HI)) / (HI - LO)
c = C.chebfit(u, r, degree)
err = np.max(np.abs(C.chebval(u, c) - r) / r)
print(f"// Degree {degree} on [{LO}, {HI}]: largest relative error of the fit {err:.2e}")
print(f"const ERFC_SCALED: [f64; {degree + 1}] = [")
for v in c:
    print(f"    {float(v)!r},")
print("];")
