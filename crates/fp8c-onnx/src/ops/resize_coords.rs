//! The sampling plan of one resized axis of ONNX Resize/Upsample: for every output position,
//! which input positions it reads and with what weights, computed at import in f64 from the
//! ONNX spec's formulas (`coordinate_transformation_mode`, `nearest_mode`, linear
//! interpolation with the edge clamped). `resize.rs` turns a plan into gathers and a weighted
//! add; nothing here touches a graph.

/// ONNX `coordinate_transformation_mode`: how an output coordinate maps to an input one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Coord {
    /// `(x + 0.5) / scale − 0.5` (opset 11+'s default).
    HalfPixel,
    /// half_pixel shifted so the sampled grid is centred (opset 19):
    /// `offset + (x + 0.5) / scale − 0.5` with `offset = in/2 · (1 − out / (scale · in))`.
    HalfPixelSymmetric,
    /// half_pixel, except `0` where the output length is 1.
    PytorchHalfPixel,
    /// `x · (in − 1) / (out − 1)` (`0` where the output length is 1).
    AlignCorners,
    /// `x / scale` (Upsample's and Resize-10's only mode).
    Asymmetric,
    /// `(x + 0.5) / scale`.
    TfHalfPixelForNn,
}

impl Coord {
    /// The mode called `name`, if fp8c implements it.
    pub(super) fn parse(name: &str) -> Option<Coord> {
        Some(match name {
            "half_pixel" => Coord::HalfPixel,
            "half_pixel_symmetric" => Coord::HalfPixelSymmetric,
            "pytorch_half_pixel" => Coord::PytorchHalfPixel,
            "align_corners" => Coord::AlignCorners,
            "asymmetric" => Coord::Asymmetric,
            "tf_half_pixel_for_nn" => Coord::TfHalfPixelForNn,
            _ => return None,
        })
    }

    /// The input coordinate of output position `x` on an axis resized from `len_in` to
    /// `len_out` by `scale`.
    pub(super) fn original(self, x: f64, scale: f64, len_in: u64, len_out: u64) -> f64 {
        let (n_in, n_out) = (len_in as f64, len_out as f64);
        match self {
            Coord::HalfPixel => (x + 0.5) / scale - 0.5,
            Coord::HalfPixelSymmetric => {
                let adjustment = n_out / (scale * n_in);
                let offset = n_in / 2.0 * (1.0 - adjustment);
                offset + (x + 0.5) / scale - 0.5
            }
            Coord::PytorchHalfPixel if len_out > 1 => (x + 0.5) / scale - 0.5,
            Coord::PytorchHalfPixel => 0.0,
            Coord::AlignCorners if len_out > 1 => x * (n_in - 1.0) / (n_out - 1.0),
            Coord::AlignCorners => 0.0,
            Coord::Asymmetric => x / scale,
            Coord::TfHalfPixelForNn => (x + 0.5) / scale,
        }
    }
}

/// ONNX `nearest_mode`: how mode `nearest` rounds an input coordinate to a position.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Rounding {
    /// Nearest, halves down (opset 11+'s default).
    RoundPreferFloor,
    /// Nearest, halves up.
    RoundPreferCeil,
    Floor,
    Ceil,
    /// Upsample's and Resize-10's rule, as onnxruntime applies it: floor when the axis grows
    /// (scale ≥ 1), ceil when it shrinks.
    Legacy,
}

impl Rounding {
    /// The mode called `name` (an opset 11+ `nearest_mode`), if it is one.
    pub(super) fn parse(name: &str) -> Option<Rounding> {
        Some(match name {
            "round_prefer_floor" => Rounding::RoundPreferFloor,
            "round_prefer_ceil" => Rounding::RoundPreferCeil,
            "floor" => Rounding::Floor,
            "ceil" => Rounding::Ceil,
            _ => return None,
        })
    }

    fn apply(self, x: f64, scale: f64) -> f64 {
        let half = x - x.floor() == 0.5;
        match self {
            Rounding::RoundPreferFloor if half => x.floor(),
            Rounding::RoundPreferCeil if half => x.ceil(),
            Rounding::RoundPreferFloor | Rounding::RoundPreferCeil => x.round(),
            Rounding::Floor => x.floor(),
            Rounding::Ceil => x.ceil(),
            Rounding::Legacy if scale < 1.0 => x.ceil(),
            Rounding::Legacy => x.floor(),
        }
    }
}

/// What one output position reads: `lo` with weight `w_lo` plus `hi` with weight `w_hi`
/// (nearest: `hi == lo`, `w_lo = 1`, `w_hi = 0`).
#[derive(Clone, Debug, Default, PartialEq)]
pub(super) struct AxisPlan {
    pub lo: Vec<i64>,
    pub hi: Vec<i64>,
    pub w_lo: Vec<f64>,
    pub w_hi: Vec<f64>,
}

impl AxisPlan {
    /// True if every output position reads only `lo` (no second neighbour is weighted).
    pub(super) fn is_gather(&self) -> bool {
        self.w_hi.iter().all(|&w| w == 0.0)
    }

    /// True if the axis is unchanged: output position `i` reads input position `i` alone.
    pub(super) fn is_identity(&self, len_in: u64) -> bool {
        self.lo.len() as u64 == len_in
            && self.is_gather()
            && self.lo.iter().enumerate().all(|(i, &j)| j == i as i64)
    }
}

/// Clamps an input coordinate's position into `0..len_in`.
fn clamp_index(i: f64, len_in: u64) -> i64 {
    i.clamp(0.0, (len_in - 1) as f64) as i64
}

/// Mode `nearest`: each output position reads the input position its coordinate rounds to,
/// clamped into the axis. `len_in` must be at least 1.
pub(super) fn nearest(
    coord: Coord,
    rounding: Rounding,
    scale: f64,
    len_in: u64,
    len_out: u64,
) -> AxisPlan {
    let lo: Vec<i64> = (0..len_out)
        .map(|x| {
            let c = coord.original(x as f64, scale, len_in, len_out);
            clamp_index(rounding.apply(c, scale), len_in)
        })
        .collect();
    AxisPlan {
        hi: lo.clone(),
        w_lo: vec![1.0; lo.len()],
        w_hi: vec![0.0; lo.len()],
        lo,
    }
}

/// Mode `linear`: each output position's coordinate, clamped into `[0, len_in − 1]` (the
/// spec's edge padding), reads its two neighbours `floor(c)` and `floor(c) + 1` weighted
/// `1 − frac` and `frac`. `len_in` must be at least 1.
pub(super) fn linear(coord: Coord, scale: f64, len_in: u64, len_out: u64) -> AxisPlan {
    let mut plan = AxisPlan::default();
    let last = (len_in - 1) as f64;
    for x in 0..len_out {
        let c = coord
            .original(x as f64, scale, len_in, len_out)
            .clamp(0.0, last);
        let lo = c.floor();
        let frac = c - lo;
        let lo = lo as i64;
        plan.lo.push(lo);
        plan.hi.push(if frac > 0.0 { lo + 1 } else { lo });
        plan.w_lo.push(1.0 - frac);
        plan.w_hi.push(frac);
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;

    // Expected positions and weights below are worked by hand from the ONNX spec's formulas
    // (and agree with the outputs of ONNX's backend tests test_resize_*).

    #[test]
    fn nearest_asymmetric_floor_repeats_each_pixel() {
        let p = nearest(Coord::Asymmetric, Rounding::Floor, 2.0, 3, 6);
        assert_eq!(p.lo, [0, 0, 1, 1, 2, 2]);
        assert!(p.is_gather() && !p.is_identity(3));
    }

    #[test]
    fn nearest_half_pixel_halves_follow_the_rounding_mode() {
        // in 4 -> out 6 (scale 1.5): coordinates (x + 0.5) / 1.5 − 0.5 =
        // -1/6, 1/2, 7/6, 11/6, 5/2, 19/6.
        let floor = nearest(Coord::HalfPixel, Rounding::RoundPreferFloor, 1.5, 4, 6);
        assert_eq!(floor.lo, [0, 0, 1, 2, 2, 3]);
        let ceil = nearest(Coord::HalfPixel, Rounding::RoundPreferCeil, 1.5, 4, 6);
        assert_eq!(ceil.lo, [0, 1, 1, 2, 3, 3]);
    }

    #[test]
    fn nearest_legacy_floors_up_and_ceils_down() {
        assert_eq!(
            nearest(Coord::Asymmetric, Rounding::Legacy, 2.5, 2, 5).lo,
            [0, 0, 0, 1, 1]
        );
        // shrinking 5 -> 2 by 0.5: x / 0.5 = 0, 2 (ceil of an integer is itself)
        assert_eq!(
            nearest(Coord::Asymmetric, Rounding::Legacy, 0.5, 5, 2).lo,
            [0, 2]
        );
        // shrinking 4 -> 3 by 0.75: 0, 4/3, 8/3 -> ceil 0, 2, 3
        assert_eq!(
            nearest(Coord::Asymmetric, Rounding::Legacy, 0.75, 4, 3).lo,
            [0, 2, 3]
        );
    }

    #[test]
    fn nearest_clamps_past_the_edges() {
        // tf_half_pixel_for_nn, 2 -> 5 by 2.5, ceil: (x + 0.5) / 2.5 = 0.2 .. 1.8 -> 1, 1, 1, 2, 2
        let p = nearest(Coord::TfHalfPixelForNn, Rounding::Ceil, 2.5, 2, 5);
        assert_eq!(p.lo, [1, 1, 1, 1, 1]);
    }

    #[test]
    fn same_size_is_the_identity() {
        let p = nearest(Coord::HalfPixel, Rounding::RoundPreferFloor, 1.0, 5, 5);
        assert!(p.is_identity(5));
        let l = linear(Coord::AlignCorners, 1.0, 4, 4);
        assert!(l.is_identity(4));
    }

    #[test]
    fn linear_half_pixel_doubles_with_quarter_weights() {
        // 2 -> 4 by 2: coordinates -0.25 (clamped to 0), 0.25, 0.75, 1.25 (clamped to 1)
        let p = linear(Coord::HalfPixel, 2.0, 2, 4);
        assert_eq!(p.lo, [0, 0, 0, 1]);
        assert_eq!(p.hi, [0, 1, 1, 1]);
        assert_eq!(p.w_lo, [1.0, 0.75, 0.25, 1.0]);
        assert_eq!(p.w_hi, [0.0, 0.25, 0.75, 0.0]);
    }

    #[test]
    fn linear_align_corners_hits_both_ends() {
        // 3 -> 5: x · 2 / 4 = 0, 0.5, 1, 1.5, 2
        let p = linear(Coord::AlignCorners, 5.0 / 3.0, 3, 5);
        assert_eq!(p.lo, [0, 0, 1, 1, 2]);
        assert_eq!(p.w_hi, [0.0, 0.5, 0.0, 0.5, 0.0]);
    }

    #[test]
    fn pytorch_half_pixel_of_one_output_reads_the_first_input() {
        let p = linear(Coord::PytorchHalfPixel, 0.25, 4, 1);
        assert_eq!((p.lo.as_slice(), p.w_lo.as_slice()), (&[0][..], &[1.0][..]));
        let h = linear(Coord::HalfPixel, 0.25, 4, 1);
        assert_eq!((h.lo[0], h.w_hi[0]), (1, 0.5));
    }

    #[test]
    fn half_pixel_symmetric_centres_the_grid() {
        // 5 -> 2 by 0.5 (floor(2.5) = 2): adjustment 2 / 2.5 = 0.8, offset 2.5 · 0.2 = 0.5,
        // coordinates 0.5 + 1 − 0.5 = 1 and 0.5 + 3 − 0.5 = 3
        let p = nearest(Coord::HalfPixelSymmetric, Rounding::Floor, 0.5, 5, 2);
        assert_eq!(p.lo, [1, 3]);
    }
}
