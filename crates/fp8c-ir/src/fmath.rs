//! f32 `exp`, `tanh` and `erf` for the elementwise table's scalar semantics, evaluated in f64
//! without branches or library calls, so that the CPU evaluator's loops over a tensor vectorise.
//!
//! The platform's `expf` / `tanhf` are scalar calls (glibc's `tanhf` took 28 ns an element
//! here, a GELU's tanh a tenth of a GPT-2 training step), and their last bits differ between
//! C libraries. These compute the function in f64 and round once to f32:
//! - range reduction `y = n·ln 2 + r` with `n` an integer (`|r| ≤ ~0.35`), `ln 2` split in two
//!   parts (fdlibm's `ln2_hi`, exact in `n·ln2_hi` for the `n` used here, and `ln2_lo`);
//! - `e^r` (or `e^r − 1` for tanh, which avoids cancellation near 0) as its Taylor polynomial
//!   to degree 13 (remainder below 2^-52 relative on that range);
//! - `2^n` built from the bits of `n` (the integer is read off `y·log2(e) + 1.5·2^52`);
//! - one rounding to f32 (`as f32`: nearest even, with f32's overflow to ∞ and subnormals).
//!
//! `erf` (musl's `erff` before, 17 ns an element, a BERT GELU's fifth of a run) takes both of
//! two f64 forms and selects: below 0.875 its Taylor series to x^29; above, `1 − e^(−x²)·R(x)`
//! with `R = erfc·e^(x²)` a Chebyshev series fitted by `scripts/gen_erf_coeffs.py` (relative
//! error 1.3e-14) and `x²` exact in f64; from 4 on the f32 result is ±1.
//!
//! The f64 value is within a few f64 ulps of the exact one, so the f32 result is the
//! correctly rounded value unless the exact one lies within ~2^-26 f32 ulps of a tie: never in
//! the tests' sweeps (against the `libm` crate's f64 functions), and never more than one ulp
//! off. NaN stays NaN, `exp(±∞)` is ∞ / 0, `tanh(±∞)` and `erf(±∞)` are ±1, `tanh(−0)`
//! and `erf(−0)` are −0.

/// log2(e).
const LOG2E: f64 = std::f64::consts::LOG2_E;
/// ln 2, high part (33 significant bits: `n·LN2_HI` is exact for |n| < 2^20).
const LN2_HI: f64 = 6.931_471_803_691_238_164_90e-1;
/// ln 2 − LN2_HI.
const LN2_LO: f64 = 1.908_214_929_270_587_700_02e-10;
/// 1.5·2^52: adding it rounds a smaller f64 to an integer kept in the low mantissa bits.
const ROUNDER: f64 = 6_755_399_441_055_744.0;

/// `(n, 2^n, r)` with `y = n·ln 2 + r`, for |y| < 2^19.
#[inline(always)]
fn reduce(y: f64) -> (f64, f64, f64) {
    let k = y * LOG2E + ROUNDER;
    let n = k - ROUNDER;
    let bits = (k.to_bits() as i64).wrapping_sub(ROUNDER.to_bits() as i64);
    let scale = f64::from_bits((bits.wrapping_add(1023) << 52) as u64);
    let r = (y - n * LN2_HI) - n * LN2_LO;
    (n, scale, r)
}

/// `e^r − 1` for |r| ≤ ~0.35: `r·Σ r^i/(i+1)!`, i = 0..=12, by Horner.
#[inline(always)]
fn expm1_small(r: f64) -> f64 {
    const C: [f64; 13] = [
        1.0,
        1.0 / 2.0,
        1.0 / 6.0,
        1.0 / 24.0,
        1.0 / 120.0,
        1.0 / 720.0,
        1.0 / 5_040.0,
        1.0 / 40_320.0,
        1.0 / 362_880.0,
        1.0 / 3_628_800.0,
        1.0 / 39_916_800.0,
        1.0 / 479_001_600.0,
        1.0 / 6_227_020_800.0,
    ];
    let mut p = C[12];
    for &c in C[..12].iter().rev() {
        p = p * r + c;
    }
    r * p
}

/// `e^x` rounded once to f32 (see the module docs).
#[inline(always)]
pub fn exp_f32(x: f32) -> f32 {
    // Beyond these bounds the f32 result is 0 or ∞ either way; NaN passes the clamp.
    let y = f64::from(x).clamp(-110.0, 90.0);
    let (_, scale, r) = reduce(y);
    ((1.0 + expm1_small(r)) * scale) as f32
}

/// `tanh(x)` rounded once to f32: `u / (u + 2)` with `u = e^(2|x|) − 1`, the sign restored.
#[inline(always)]
pub fn tanh_f32(x: f32) -> f32 {
    // tanh(20) is 1 in f64 already; NaN passes the clamp.
    let a = f64::from(x).abs().min_nan(20.0);
    let (_, scale, r) = reduce(2.0 * a);
    // e^(2a) − 1 = 2^n·(e^r − 1) + (2^n − 1): both terms ≥ 0, no cancellation.
    let u = scale * expm1_small(r) + (scale - 1.0);
    ((u / (u + 2.0)) as f32).copysign(x)
}

/// Where erf's two forms meet, and from where its f32 value is ±1.
const ERF_LO: f64 = 0.875;
const ERF_HI: f64 = 4.0;

/// erf's Taylor coefficients (scripts/gen_erf_coeffs.py): `erf(x) = x·Σ a_n·x^(2n)`.
const ERF_TAYLOR: [f64; 15] = [
    1.1283791670955126,
    -0.37612638903183754,
    0.11283791670955126,
    -0.026866170645131252,
    0.005223977625442188,
    -0.0008548327023450852,
    0.00012055332981789664,
    -1.492565035840625e-05,
    1.6462114365889246e-06,
    -1.6365844691234924e-07,
    1.4807192815879218e-08,
    -1.2290555301717926e-09,
    9.422759064650411e-11,
    -6.7113668551641105e-12,
    4.4632242632864775e-13,
];
/// `erfc(x)·e^(x²)` on [ERF_LO, ERF_HI] as a Chebyshev series (scripts/gen_erf_coeffs.py).
// Degree 22 on [0.875, 4.0]: largest relative error of the fit 1.30e-14
const ERFC_SCALED: [f64; 23] = [
    0.2552512634888537,
    -0.15168881785550078,
    0.04238945017632923,
    -0.011237872530232437,
    0.0028447023939702897,
    -0.0006910092442428218,
    0.00016171591947899394,
    -3.6580865399797076e-05,
    8.019764557541156e-06,
    -1.7079263392388742e-06,
    3.5402060714338983e-07,
    -7.154496205609174e-08,
    1.4117846079682118e-08,
    -2.7237628224835034e-09,
    5.143889424478785e-10,
    -9.519021880594515e-11,
    1.7277841055769116e-11,
    -3.078520507396913e-12,
    5.386688715377772e-13,
    -9.271828533596904e-14,
    1.5528165837037322e-14,
    -2.4798562285186848e-15,
    5.814623434900882e-16,
];

/// `erf(x)` rounded once to f32 (see the module docs).
#[inline(always)]
pub fn erf_f32(x: f32) -> f32 {
    let a = f64::from(x).abs().min_nan(ERF_HI);
    // Near 0: the Taylor series.
    let z = a * a;
    let mut p = ERF_TAYLOR[14];
    for &c in ERF_TAYLOR[..14].iter().rev() {
        p = p * z + c;
    }
    let near = a * p;
    // Away from 0: 1 − e^(−x²)·R(x), R by Clenshaw's recurrence in u ∈ [−1, 1] (a clamped
    // copy of `a` keeps the unused lanes in range).
    let t = if a < ERF_LO { ERF_LO } else { a };
    let u = (2.0 * t - (ERF_LO + ERF_HI)) / (ERF_HI - ERF_LO);
    let (mut b1, mut b2) = (0.0f64, 0.0f64);
    for &c in ERFC_SCALED[1..].iter().rev() {
        let b0 = c + 2.0 * u * b1 - b2;
        b2 = b1;
        b1 = b0;
    }
    let r = ERFC_SCALED[0] + u * b1 - b2;
    let (_, scale, rr) = reduce(-(t * t));
    let far = 1.0 - (1.0 + expm1_small(rr)) * scale * r;
    let y = if a < ERF_LO { near } else { far };
    (y as f32).copysign(x)
}

/// `min` that keeps NaN (a select, which vectorises).
trait MinNan {
    fn min_nan(self, hi: Self) -> Self;
}

impl MinNan for f64 {
    #[inline(always)]
    fn min_nan(self, hi: f64) -> f64 {
        if self > hi { hi } else { self }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every `stride`-th f32 from `lo` up to `hi` (same sign), by bit pattern.
    fn sweep(lo: f32, hi: f32, stride: u32) -> impl Iterator<Item = f32> {
        let (a, b) = (
            lo.to_bits().min(hi.to_bits()),
            lo.to_bits().max(hi.to_bits()),
        );
        (a..=b).step_by(stride as usize).map(f32::from_bits)
    }

    fn ulps(a: f32, b: f32) -> u32 {
        if a.is_sign_negative() != b.is_sign_negative() {
            return a.to_bits().wrapping_add(b.to_bits()) & 0x7fff_ffff;
        }
        a.to_bits().abs_diff(b.to_bits())
    }

    /// `f` against `reference` (the `libm` crate's f64 function, rounded to f32) over sweeps
    /// of both signs: never more than one ulp apart; returns how many differ at all.
    fn check(f: fn(f32) -> f32, reference: fn(f64) -> f64, max: f32) -> (usize, usize) {
        let (mut n, mut differ) = (0, 0);
        for x in sweep(1e-30, max, 211)
            .chain(sweep(-1e-30, -max, 211))
            .chain([0.0, -0.0, 1e-45, -1e-45])
        {
            let (got, want) = (f(x), reference(f64::from(x)) as f32);
            assert!(ulps(got, want) <= 1, "{x:e}: {got:e} vs {want:e}");
            n += 1;
            differ += usize::from(got.to_bits() != want.to_bits());
        }
        (n, differ)
    }

    #[test]
    fn exp_is_the_f64_value_rounded_once() {
        let (n, differ) = check(exp_f32, libm::exp, 110.0);
        assert!(n > 5_000_000, "{n} points");
        assert_eq!(
            differ, 0,
            "{differ} of {n} differ from libm's exp rounded to f32"
        );
    }

    #[test]
    fn tanh_is_the_f64_value_rounded_once() {
        let (n, differ) = check(tanh_f32, libm::tanh, 25.0);
        assert!(n > 5_000_000, "{n} points");
        assert_eq!(
            differ, 0,
            "{differ} of {n} differ from libm's tanh rounded to f32"
        );
    }

    #[test]
    fn erf_is_the_f64_value_rounded_once() {
        let (n, differ) = check(erf_f32, libm::erf, 5.0);
        assert!(n > 5_000_000, "{n} points");
        assert_eq!(
            differ, 0,
            "{differ} of {n} differ from libm's erf rounded to f32"
        );
    }

    #[test]
    fn specials() {
        assert!(erf_f32(f32::NAN).is_nan());
        assert_eq!(erf_f32(f32::INFINITY), 1.0);
        assert_eq!(erf_f32(-4.5), -1.0);
        assert_eq!(erf_f32(-0.0).to_bits(), (-0.0f32).to_bits());
        assert_eq!(erf_f32(1e-40), libm::erf(1e-40f32 as f64) as f32);
        assert!(exp_f32(f32::NAN).is_nan() && tanh_f32(f32::NAN).is_nan());
        assert_eq!(exp_f32(f32::INFINITY), f32::INFINITY);
        assert_eq!(exp_f32(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp_f32(89.0), f32::INFINITY);
        assert_eq!(exp_f32(0.0), 1.0);
        // The smallest subnormal: e^-103.97 ≈ 2^-150 rounds to it, e^-104 to 0.
        assert_eq!(exp_f32(-103.0), libm::exp(-103.0) as f32);
        assert!(exp_f32(-103.0) > 0.0);
        assert_eq!(tanh_f32(f32::INFINITY), 1.0);
        assert_eq!(tanh_f32(f32::NEG_INFINITY), -1.0);
        assert_eq!(tanh_f32(-0.0).to_bits(), (-0.0f32).to_bits());
        assert_eq!(tanh_f32(1e-40), 1e-40);
    }
}
