//! The general sampling plan of one resized axis of ONNX Resize (opset 11+), as ONNX's
//! reference computes it (`onnx/reference/ops/op_resize.py`, `_interpolate_1d_along_axis`):
//! every output position reads a fixed number of taps (input positions, clamped into the axis,
//! which is the spec's edge padding) with weights from the mode's kernel — `linear` (2 taps),
//! `cubic` (4 taps, `cubic_coeff_a`), either with `antialias` (the kernel stretched by
//! `1 / scale` when the axis shrinks, weights normalised), or `nearest` — renormalised without
//! the taps outside the input under `exclude_outside`. `tf_crop_and_resize` samples the
//! region of interest and marks output positions whose coordinate falls outside the input:
//! those take `extrapolation_value`.
//!
//! Coordinates are `resize_coords.rs`'s (the spec's formulas on the integer output length, as
//! onnxruntime computes them), and the crop's. `resize.rs` turns a plan into a gather, a weighting and a sum; nothing here touches a graph.

use super::resize_coords::{Coord, Rounding};

/// The interpolation kernel.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Kernel {
    /// `nearest`, with its `nearest_mode` (as 2 taps, one weighted 1).
    Nearest(Rounding),
    Linear,
    /// `cubic` with `cubic_coeff_a`.
    Cubic(f64),
}

/// Where an output coordinate maps to: one of the plain modes, or `tf_crop_and_resize`'s
/// region of interest `[start, end]` (fractions of the input length).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Source {
    Coord(Coord),
    Crop { start: f64, end: f64 },
}

/// What decides one axis's plan besides its lengths and scale.
#[derive(Clone, Copy, Debug)]
pub(super) struct Sampling {
    pub kernel: Kernel,
    pub antialias: bool,
    pub exclude_outside: bool,
    pub source: Source,
}

/// Every output position reads `taps` input positions: `index[o * taps + k]` weighted
/// `weight[o * taps + k]`; `outside[o]` marks positions that take the extrapolation value.
#[derive(Clone, Debug, Default, PartialEq)]
pub(super) struct TapPlan {
    pub taps: usize,
    pub index: Vec<i64>,
    pub weight: Vec<f64>,
    pub outside: Vec<bool>,
}

impl TapPlan {
    /// Number of output positions.
    pub(super) fn len(&self) -> usize {
        self.outside.len()
    }

    /// True if some output position takes the extrapolation value.
    pub(super) fn extrapolates(&self) -> bool {
        self.outside.iter().any(|&o| o)
    }
}

/// The number of taps `s` reads on an axis scaled by `scale` (the kernel's footprint), so
/// that a caller can check the plan's size before building it.
pub(super) fn taps(s: &Sampling, scale: f64) -> u64 {
    let shrink = scale.min(1.0);
    match (s.kernel, s.antialias) {
        (Kernel::Nearest(_), _) | (Kernel::Linear, false) => 2,
        (Kernel::Cubic(_), false) => 4,
        (Kernel::Linear, true) => {
            let start = (-1.0 / shrink).floor() + 1.0;
            (2.0 - 2.0 * start) as u64
        }
        (Kernel::Cubic(_), true) => {
            let start = (-2.0 / shrink).floor() + 1.0;
            (2.0 - 2.0 * start) as u64
        }
    }
}

/// The weights of the taps around a coordinate whose distance past its left tap is `ratio`
/// (in `(0, 1]`: an integer coordinate counts as 1 past the tap before it).
fn coeffs(s: &Sampling, ratio: f64, scale: f64) -> Vec<f64> {
    let shrink = scale.min(1.0);
    let normalised = |c: Vec<f64>| {
        let sum: f64 = c.iter().sum();
        c.into_iter().map(|w| w / sum).collect()
    };
    match (s.kernel, s.antialias) {
        (Kernel::Nearest(r), _) => {
            let right = match r {
                _ if ratio == 1.0 => true,
                Rounding::RoundPreferFloor => ratio > 0.5,
                Rounding::RoundPreferCeil => ratio >= 0.5,
                Rounding::Floor => false,
                Rounding::Ceil | Rounding::Legacy => true,
            };
            vec![f64::from(u8::from(!right)), f64::from(u8::from(right))]
        }
        (Kernel::Linear, false) => vec![1.0 - ratio, ratio],
        (Kernel::Cubic(a), false) => {
            let (r1, q, q1) = (ratio + 1.0, 1.0 - ratio, 2.0 - ratio);
            vec![
                ((a * r1 - 5.0 * a) * r1 + 8.0 * a) * r1 - 4.0 * a,
                ((a + 2.0) * ratio - (a + 3.0)) * ratio * ratio + 1.0,
                ((a + 2.0) * q - (a + 3.0)) * q * q + 1.0,
                ((a * q1 - 5.0 * a) * q1 + 8.0 * a) * q1 - 4.0 * a,
            ]
        }
        (Kernel::Linear, true) => {
            let start = ((-1.0 / shrink).floor() + 1.0) as i64;
            let n = taps(s, scale) as i64;
            normalised(
                (start..start + n)
                    .map(|i| (1.0 - ((i as f64 - ratio) * shrink).abs()).clamp(0.0, 1.0))
                    .collect(),
            )
        }
        (Kernel::Cubic(a), true) => {
            let cubic = |x: f64| {
                let x = x.abs();
                let (x2, x3) = (x * x, x * x * x);
                if x <= 1.0 {
                    (a + 2.0) * x3 - (a + 3.0) * x2 + 1.0
                } else if x < 2.0 {
                    a * x3 - 5.0 * a * x2 + 8.0 * a * x - 4.0 * a
                } else {
                    0.0
                }
            };
            let start = ((-2.0 / shrink).floor() + 1.0) as i64;
            normalised(
                (start..2 - start)
                    .map(|i| cubic(shrink * (i as f64 - ratio)))
                    .collect(),
            )
        }
    }
}

/// The input coordinate of output position `y`, and whether it lies outside the input
/// (`tf_crop_and_resize` only). The length of the resized axis is the output's, as the spec
/// writes `length_resized` and onnxruntime takes it: ONNX's reference takes `scale · len_in`
/// unrounded instead, which differs only for `scales` whose product with the length is not an
/// integer (test_resize_downsample_scales_{linear,cubic}_align_corners).
fn original(s: &Sampling, y: f64, scale: f64, len_in: u64, len_out: u64) -> (f64, bool) {
    match s.source {
        Source::Crop { start, end } => {
            let (n_in, n_out) = (len_in as f64, len_out as f64);
            let x = if len_out > 1 {
                start * (n_in - 1.0) + y * (end - start) * (n_in - 1.0) / (n_out - 1.0)
            } else {
                0.5 * (start + end) * (n_in - 1.0)
            };
            (x, x < 0.0 || x > n_in - 1.0)
        }
        Source::Coord(c) => (c.original(y, scale, len_in, len_out), false),
    }
}

/// The plan of an axis resized from `len_in` (at least 1) to `len_out` by `scale`.
pub(super) fn plan(s: &Sampling, scale: f64, len_in: u64, len_out: u64) -> TapPlan {
    let n = taps(s, scale) as usize;
    let mut p = TapPlan {
        taps: n,
        ..TapPlan::default()
    };
    let pad = n.div_ceil(2) as i64;
    for y in 0..len_out {
        let (x, outside) = original(s, y as f64, scale, len_in, len_out);
        let ratio = if x == x.floor() { 1.0 } else { x - x.floor() };
        let mut w = coeffs(s, ratio, scale);
        // The n taps nearest to x (ties to the smaller), as the reference picks them in its
        // edge-padded axis.
        let xp = x + pad as f64;
        let fp = xp.floor();
        let frac = xp - fp;
        let half = (n / 2) as i64;
        let offset = if n.is_multiple_of(2) {
            if frac == 0.0 { -half } else { 1 - half }
        } else {
            let base = -(((n - 1) / 2) as i64);
            if frac <= 0.5 { base } else { base + 1 }
        };
        let first = fp as i64 + offset - pad;
        let idx: Vec<i64> = (0..n as i64).map(|k| first + k).collect();
        if s.exclude_outside {
            for (wk, &i) in w.iter_mut().zip(&idx) {
                if i < 0 || i >= len_in as i64 {
                    *wk = 0.0;
                }
            }
            let sum: f64 = w.iter().sum();
            let sum = if sum == 0.0 { 1.0 } else { sum };
            w.iter_mut().for_each(|wk| *wk /= sum);
        }
        p.index
            .extend(idx.iter().map(|&i| i.clamp(0, len_in as i64 - 1)));
        p.weight.extend(w);
        p.outside.push(outside);
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sampling(kernel: Kernel, antialias: bool) -> Sampling {
        Sampling {
            kernel,
            antialias,
            exclude_outside: false,
            source: Source::Coord(Coord::HalfPixel),
        }
    }

    #[test]
    fn cubic_weights_sum_to_one_and_hit_integer_positions() {
        // 4 -> 8 by 2, half_pixel: output 1 sits at 0.25, between inputs 0 and 1.
        let p = plan(&sampling(Kernel::Cubic(-0.75), false), 2.0, 4, 8);
        assert_eq!(p.taps, 4);
        for o in 0..p.len() {
            let sum: f64 = p.weight[o * 4..o * 4 + 4].iter().sum();
            assert!((sum - 1.0).abs() < 1e-12);
        }
        assert_eq!(&p.index[4..8], &[0, 0, 1, 2]);
        // align_corners 3 -> 5: output 2 is input 1 exactly (weights 0, 1, 0, 0 after the
        // tap before it).
        let mut s = sampling(Kernel::Cubic(-0.75), false);
        s.source = Source::Coord(Coord::AlignCorners);
        let p = plan(&s, 5.0 / 3.0, 3, 5);
        assert_eq!(&p.index[8..12], &[0, 0, 1, 2]);
        let w = &p.weight[8..12];
        assert!(w[0].abs() < 1e-12 && w[1].abs() < 1e-12 && (w[2] - 1.0).abs() < 1e-12);
    }

    #[test]
    fn antialias_widens_the_kernel_when_shrinking_only() {
        let s = sampling(Kernel::Linear, true);
        assert_eq!(taps(&s, 2.0), 2);
        assert_eq!(taps(&s, 0.5), 4);
        let c = sampling(Kernel::Cubic(-0.75), true);
        assert_eq!(taps(&c, 1.0), 4);
        assert_eq!(taps(&c, 0.5), 8);
        let p = plan(&s, 0.5, 8, 4);
        let sum: f64 = p.weight[..4].iter().sum();
        assert!((sum - 1.0).abs() < 1e-12);
    }

    #[test]
    fn crop_marks_positions_outside_the_input() {
        let s = Sampling {
            kernel: Kernel::Linear,
            antialias: false,
            exclude_outside: false,
            source: Source::Crop {
                start: 0.4,
                end: 1.2,
            },
        };
        // 4 -> 3: coordinates 1.2, 2.4, 3.6 (the last is past input 3).
        let p = plan(&s, 0.75, 4, 3);
        assert_eq!(p.outside, [false, false, true]);
    }
}
