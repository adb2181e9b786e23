//! f32 `exp` and `tanh` for the elementwise table's scalar semantics, evaluated in f64 without
//! branches or library calls, so that the CPU evaluator's loops over a tensor vectorise.
//!
//! The platform's `expf` / `tanhf` are scalar calls (glibc's `tanhf` took 28 ns an element
//! here, a GELU's tanh a tenth of a GPT-2 training step), and their last bits differ between
//! C libraries. These compute the function in f64 and round once to f32:
//! - range reduction `y = n·ln 2 + r` with `n` an integer (`|r| ≤ ~0.35`), `ln 2` split in two
//!   parts (fdlibm's `ln2_hi`, exact in `n·ln2_hi` for the `n` used here, and `ln2_lo`);
//! - `e^r` (or `e^r − 1` for tanh, which avoids cancellation near 0) as its Taylor polynomial
//!   to degree 13 (remainder below 2^-52 relative on that range), evaluated by Estrin's
//!   scheme (`expm1_small`);
//! - `2^n` built from the bits of `n` (the integer is read off `y·log2(e) + 1.5·2^52`);
//! - one rounding to f32 (`as f32`: nearest even, with f32's overflow to ∞ and subnormals).
//!
//! The f64 value is within a few f64 ulps of the exact one, so the f32 result is the
//! correctly rounded value unless the exact one lies within ~2^-26 f32 ulps of a tie: never in
//! the tests' sweeps (against the `libm` crate's f64 functions), and never more than one ulp
//! off. NaN stays NaN, `exp(±∞)` is ∞ / 0, `tanh(±∞)` is ±1, `tanh(−0)` is −0.
//!
//! `erf` stays musl's `erff` (the `libm` crate). An f64 form of it (a Taylor series near 0,
//! `1 − e^(−x²)·erfc·e^(x²)` away from it, both taken for every lane) was tried in session
//! 14: 1.5× faster than `erff` alone on normal inputs, but inside GELU's closure, which
//! branches on the approximation per element and so stays scalar, it cost 12 ns an element
//! against `erff`'s 5 ns (most GELU inputs take `erff`'s short branch near 0).
//!
//! The MLIR emitter (`fp8c-mlir`, `Scalar::exp_f32` / `tanh_f32`) builds the same f64
//! operations from this module's constants, the polynomial by Horner's rule; the f32 results
//! are the same for every f32 input (`expm1_small`), so MLIR's JIT agrees with the CPU bit
//! for bit.

/// log2(e).
pub const LOG2E: f64 = std::f64::consts::LOG2_E;
/// ln 2, high part (fdlibm's `ln2_hi`, 0.6931471803691238: 32 significant bits, so `n·LN2_HI` is
/// exact for |n| < 2^21).
pub const LN2_HI: f64 = f64::from_bits(0x3fe6_2e42_fee0_0000);
/// ln 2 − LN2_HI.
pub const LN2_LO: f64 = f64::from_bits(0x3dea_39ef_3579_3c76);
/// 1.5·2^52: adding it rounds a smaller f64 to an integer kept in the low mantissa bits.
pub const ROUNDER: f64 = 6_755_399_441_055_744.0;

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

/// `exp_f32` clamps its f64 argument to this range (beyond it the f32 result is 0 or ∞).
pub const EXP_RANGE: (f64, f64) = (-110.0, 90.0);
/// `tanh_f32` clamps |x| to this (tanh(20) is 1 in f64).
pub const TANH_LIMIT: f64 = 20.0;

/// `1/(i+1)!`, i = 0..=12: `e^r − 1 = r·Σ EXPM1[i]·r^i`, summed by Horner from the last.
/// (The MLIR emitter builds the same operations from these constants, in this order.)
pub const EXPM1: [f64; 13] = [
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

/// `e^r − 1` for |r| ≤ ~0.35 (see [`EXPM1`]), the polynomial evaluated by Estrin's scheme:
/// pairs `c[2i] + c[2i+1]·r`, joined with `r²`, `r⁴` and `r⁸`, four levels deep where Horner's
/// rule is a chain of twelve dependent multiply-adds (1.4–1.5× faster in a vector loop). Its
/// f64 value may differ from Horner's in the last bits, but every f32 result of
/// [`exp_f32`] and [`tanh_f32`] is the same for every one of the 2^32 f32 inputs (checked
/// with `cargo run -p fp8c-ir --release --example exhaustive_fmath`; a unit test samples
/// it). The MLIR emitter evaluates the same polynomial by Horner's rule
/// ([`expm1_horner`]), so the two agree bit for bit on every f32.
#[inline(always)]
fn expm1_small(r: f64) -> f64 {
    let c = &EXPM1;
    let r2 = r * r;
    let r4 = r2 * r2;
    let r8 = r4 * r4;
    let q0 = c[0] + c[1] * r;
    let q1 = c[2] + c[3] * r;
    let q2 = c[4] + c[5] * r;
    let q3 = c[6] + c[7] * r;
    let q4 = c[8] + c[9] * r;
    let q5 = c[10] + c[11] * r;
    let s0 = q0 + q1 * r2;
    let s1 = q2 + q3 * r2;
    let s2 = q4 + q5 * r2;
    let t0 = s0 + s1 * r4;
    let t1 = s2 + c[12] * r4;
    r * (t0 + t1 * r8)
}

/// `e^r − 1` by Horner's rule over [`EXPM1`] (the order the MLIR emitter builds), the
/// reference [`expm1_small`] is checked against.
#[doc(hidden)]
pub fn expm1_horner(r: f64) -> f64 {
    let mut p = EXPM1[12];
    for &c in EXPM1[..12].iter().rev() {
        p = p * r + c;
    }
    r * p
}

/// [`exp_f32`] and [`tanh_f32`] with `e^r − 1` taken by `expm1` (the exhaustive check's
/// reference: `expm1_horner`).
#[doc(hidden)]
pub fn exp_tanh_with(x: f32, expm1: fn(f64) -> f64) -> (f32, f32) {
    let y = f64::from(x).clamp(EXP_RANGE.0, EXP_RANGE.1);
    let (_, scale, r) = reduce(y);
    let e = ((1.0 + expm1(r)) * scale) as f32;
    let a = f64::from(x).abs().min_nan(TANH_LIMIT);
    let (_, scale, r) = reduce(2.0 * a);
    let u = scale * expm1(r) + (scale - 1.0);
    (e, ((u / (u + 2.0)) as f32).copysign(x))
}

/// `e^x` rounded once to f32 (see the module docs).
#[inline(always)]
pub fn exp_f32(x: f32) -> f32 {
    // Beyond these bounds the f32 result is 0 or ∞ either way; NaN passes the clamp.
    let y = f64::from(x).clamp(EXP_RANGE.0, EXP_RANGE.1);
    let (_, scale, r) = reduce(y);
    ((1.0 + expm1_small(r)) * scale) as f32
}

/// `e^(a − b)` rounded once to f32, the difference taken in f64 (exact for all but extreme
/// exponent gaps): a softmax's `exp(x − max)` without the rounding of an f32 subtraction
/// (the attention kernels' online softmax). `a = −∞` gives 0; NaN stays NaN.
#[inline(always)]
pub fn exp_diff_f32(a: f32, b: f32) -> f32 {
    let y = (f64::from(a) - f64::from(b)).clamp(EXP_RANGE.0, EXP_RANGE.1);
    let (_, scale, r) = reduce(y);
    ((1.0 + expm1_small(r)) * scale) as f32
}

/// `tanh(x)` rounded once to f32: `u / (u + 2)` with `u = e^(2|x|) − 1`, the sign restored.
#[inline(always)]
pub fn tanh_f32(x: f32) -> f32 {
    // tanh(20) is 1 in f64 already; NaN passes the clamp.
    let a = f64::from(x).abs().min_nan(TANH_LIMIT);
    let (_, scale, r) = reduce(2.0 * a);
    // e^(2a) − 1 = 2^n·(e^r − 1) + (2^n − 1): both terms ≥ 0, no cancellation.
    let u = scale * expm1_small(r) + (scale - 1.0);
    ((u / (u + 2.0)) as f32).copysign(x)
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

    /// Estrin's scheme gives the f32 results Horner's rule gives (the whole 2^32 in the
    /// `exhaustive_fmath` example; here every 4093rd pattern).
    #[test]
    fn estrin_and_horner_give_the_same_f32() {
        let mut n = 0;
        for bits in (0..=u32::MAX).step_by(4093) {
            let x = f32::from_bits(bits);
            let (e, t) = exp_tanh_with(x, expm1_horner);
            let same = |a: f32, b: f32| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan());
            assert!(same(exp_f32(x), e), "exp({x:e}): {:e} vs {e:e}", exp_f32(x));
            assert!(
                same(tanh_f32(x), t),
                "tanh({x:e}): {:e} vs {t:e}",
                tanh_f32(x)
            );
            n += 1;
        }
        assert!(n > 1_000_000);
    }

    #[test]
    fn specials() {
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
