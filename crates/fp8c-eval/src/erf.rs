//! f32 `erf` and exact GELU (`0.5·x·(1 + erf(x·(1/√2)))`) over whole tensors, vectorised and
//! bit for bit the table's scalar forms, whose `erf` is musl's `erff` (the `libm` crate).
//!
//! `erff` picks one of six branches by |x|. Five are plain f32 arithmetic (NaN and ±∞, tiny
//! inputs, the rational approximations on |x| < 0.84375 and on [0.84375, 1.25), and the
//! constant beyond 6); [`erf_lanes`] evaluates all five with the same operations in the same
//! order as `erff` and selects, without branches, so a loop over a tensor vectorises. The
//! sixth, 1.25 ≤ |x| < 6, calls `expf` twice; lanes there are flagged and recomputed by
//! `erff` itself in a second, scalar pass. For GELU (x/√2 near N(0, ½) in a transformer)
//! about nine lanes in ten take the vector path. Called per element through the table,
//! `erff` had cost ~8.6 ns an element of a BERT GELU and kept the loop scalar.
//!
//! Rust never contracts `a·b + c` into a fused multiply-add, so the vector loop rounds
//! exactly as `erff` does; a unit test compares both over a sweep of f32 bit patterns.

use rayon::prelude::*;
use std::mem::MaybeUninit;

// musl's (FreeBSD's s_erff.c) constants, by the bit patterns the `libm` crate's comments give
// (a unit test checks them against `erff` itself).
const ERX: f32 = f32::from_bits(0x3f58560b);
const EFX8: f32 = f32::from_bits(0x3f8375d4);
const PP0: f32 = f32::from_bits(0x3e0375d4);
const PP1: f32 = f32::from_bits(0xbea66beb);
const PP2: f32 = f32::from_bits(0xbce9528f);
const PP3: f32 = f32::from_bits(0xbbbd1489);
const PP4: f32 = f32::from_bits(0xb7c756b1);
const QQ1: f32 = f32::from_bits(0x3ecbbbce);
const QQ2: f32 = f32::from_bits(0x3d852a63);
const QQ3: f32 = f32::from_bits(0x3ba68116);
const QQ4: f32 = f32::from_bits(0x390aee49);
const QQ5: f32 = f32::from_bits(0xb684e21a);
const PA0: f32 = f32::from_bits(0xbb1acdc6);
const PA1: f32 = f32::from_bits(0x3ed46805);
const PA2: f32 = f32::from_bits(0xbebe9208);
const PA3: f32 = f32::from_bits(0x3ea2fe54);
const PA4: f32 = f32::from_bits(0xbde31cc2);
const PA5: f32 = f32::from_bits(0x3d1151b3);
const PA6: f32 = f32::from_bits(0xbb0df9c0);
const QA1: f32 = f32::from_bits(0x3dd9f331);
const QA2: f32 = f32::from_bits(0x3f0a5785);
const QA3: f32 = f32::from_bits(0x3d931ae7);
const QA4: f32 = f32::from_bits(0x3e013307);
const QA5: f32 = f32::from_bits(0x3c5f6e13);
const QA6: f32 = f32::from_bits(0x3c445aa3);

/// |x| bit patterns where `erff`'s branches begin.
const TINY: u32 = 0x3180_0000; // 2^-28
const SMALL: u32 = 0x3f58_0000; // 0.84375
const MID: u32 = 0x3fa0_0000; // 1.25
const BIG: u32 = 0x40c0_0000; // 6
const INF: u32 = 0x7f80_0000;

/// Whether `erff(x)` takes its `expf` branch (1.25 ≤ |x| < 6), which [`erf_lanes`] leaves
/// to `erff`.
#[inline(always)]
fn needs_erff(x: f32) -> bool {
    let ix = x.to_bits() & 0x7fff_ffff;
    (MID..BIG).contains(&ix)
}

/// `erff(x)` wherever [`needs_erff`] is false (anything there otherwise), branch-free.
#[inline(always)]
fn erf_lanes(x: f32) -> f32 {
    let ix = x.to_bits() & 0x7fff_ffff;
    let neg = x.to_bits() >> 31 != 0;
    let signed = |y: f32| if neg { -y } else { y };
    // |x| < 2^-28.
    let tiny = 0.125 * (8.0 * x + EFX8 * x);
    // |x| < 0.84375.
    let z = x * x;
    let r = PP0 + z * (PP1 + z * (PP2 + z * (PP3 + z * PP4)));
    let s = 1.0 + z * (QQ1 + z * (QQ2 + z * (QQ3 + z * (QQ4 + z * QQ5))));
    let small = x + x * (r / s);
    // 0.84375 ≤ |x| < 1.25: 1 − erfc1(x), then the sign.
    let a = f32::from_bits(ix) - 1.0;
    let p = PA0 + a * (PA1 + a * (PA2 + a * (PA3 + a * (PA4 + a * (PA5 + a * PA6)))));
    let q = 1.0 + a * (QA1 + a * (QA2 + a * (QA3 + a * (QA4 + a * (QA5 + a * QA6)))));
    let mid = signed(1.0 - (1.0 - ERX - p / q));
    // |x| ≥ 6.
    let big = signed(1.0 - f32::from_bits(0x0380_0000));
    // NaN and ±∞.
    let special = 1.0 - 2.0 * f32::from(u8::from(neg)) + 1.0 / x;
    if ix >= INF {
        special
    } else if ix >= BIG {
        big
    } else if ix >= SMALL {
        mid
    } else if ix >= TINY {
        small
    } else {
        tiny
    }
}

/// Elements per task: both passes over a chunk run while it is in L1.
const CHUNK: usize = 1 << 12;

/// `f(x, erf(g(x)))` for every element of `xs`, written once into a new vector's
/// uninitialised capacity, chunk by chunk (in parallel over rayon's pool when there are
/// several).
fn map_with_erf(
    xs: &[f32],
    g: impl Fn(f32) -> f32 + Copy + Send + Sync,
    f: impl Fn(f32, f32) -> f32 + Copy + Send + Sync,
) -> Vec<f32> {
    let len = xs.len();
    let mut out = Vec::with_capacity(len);
    let dst = &mut out.spare_capacity_mut()[..len];
    let run = |(o, x): (&mut [MaybeUninit<f32>], &[f32])| chunk(x, o, g, f);
    if len > CHUNK && rayon::current_num_threads() > 1 {
        dst.par_chunks_mut(CHUNK)
            .zip(xs.par_chunks(CHUNK))
            .for_each(run);
    } else {
        run((dst, xs));
    }
    // SAFETY: `chunk` wrote every element of every chunk, and the chunks tile `len` (a
    // panic unwinds before this, leaving `out` empty).
    unsafe { out.set_len(len) };
    out
}

/// One chunk of [`map_with_erf`]; compiled for AVX2 where the CPU has it (the same IEEE
/// operations either way).
fn chunk(
    x: &[f32],
    o: &mut [MaybeUninit<f32>],
    g: impl Fn(f32) -> f32 + Copy,
    f: impl Fn(f32, f32) -> f32 + Copy,
) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2 (checked just above).
        return unsafe { chunk_avx2(x, o, g, f) };
    }
    chunk_any(x, o, g, f)
}

/// [`chunk`]'s loops for AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn chunk_avx2(
    x: &[f32],
    o: &mut [MaybeUninit<f32>],
    g: impl Fn(f32) -> f32 + Copy,
    f: impl Fn(f32, f32) -> f32 + Copy,
) {
    chunk_any(x, o, g, f)
}

/// The vector pass with [`erf_lanes`] over the whole chunk, then `erff` for the lanes
/// [`needs_erff`] flags (inlined into both callers so the first loop vectorises).
#[inline(always)]
fn chunk_any(
    x: &[f32],
    o: &mut [MaybeUninit<f32>],
    g: impl Fn(f32) -> f32 + Copy,
    f: impl Fn(f32, f32) -> f32 + Copy,
) {
    for (o, &x) in o.iter_mut().zip(x) {
        o.write(f(x, erf_lanes(g(x))));
    }
    for (o, &x) in o.iter_mut().zip(x) {
        let t = g(x);
        if needs_erff(t) {
            o.write(f(x, libm::erff(t)));
        }
    }
}

/// `erf(x)` per element, as `libm::erff`.
pub(crate) fn erf(xs: &[f32]) -> Vec<f32> {
    map_with_erf(xs, |x| x, |_, e| e)
}

/// Exact GELU per element: `0.5·x·(1 + erf(x·(1/√2)))` in f32, as the table computes it.
pub(crate) fn gelu(xs: &[f32]) -> Vec<f32> {
    let k = std::f64::consts::FRAC_1_SQRT_2 as f32;
    map_with_erf(xs, move |x| x * k, |x, e| 0.5 * x * (1.0 + e))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every 997th f32 bit pattern (both signs, NaNs, infinities, subnormals), every 7th
    /// with 0.5 ≤ |x| < 8 (where the branches meet and GELU's inputs lie), and the branch
    /// edges and their neighbours.
    fn sweep() -> Vec<f32> {
        let mut v: Vec<f32> = (0..=u32::MAX / 997)
            .map(|i| f32::from_bits(i * 997))
            .collect();
        for b in (0x3f00_0000u32..0x4100_0000).step_by(7) {
            v.extend([f32::from_bits(b), -f32::from_bits(b)]);
        }
        for edge in [TINY, SMALL, MID, BIG, INF, 0] {
            for d in 0..4u32 {
                for b in [edge.wrapping_add(d), edge.wrapping_sub(d)] {
                    v.push(f32::from_bits(b));
                    v.push(-f32::from_bits(b));
                }
            }
        }
        v
    }

    fn same(a: f32, b: f32) -> bool {
        a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
    }

    #[test]
    fn erf_is_erff_bit_for_bit() {
        let xs = sweep();
        let got = erf(&xs);
        for (&x, &y) in xs.iter().zip(&got) {
            assert!(
                same(y, libm::erff(x)),
                "erf({x:e}) = {y:e}, erff {:e}",
                libm::erff(x)
            );
        }
    }

    #[test]
    fn gelu_is_the_tables_formula_bit_for_bit() {
        let xs = sweep();
        let got = gelu(&xs);
        let k = std::f64::consts::FRAC_1_SQRT_2 as f32;
        for (&x, &y) in xs.iter().zip(&got) {
            let want = 0.5 * x * (1.0 + libm::erff(x * k));
            assert!(same(y, want), "gelu({x:e}) = {y:e}, want {want:e}");
        }
    }
}
