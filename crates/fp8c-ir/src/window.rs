//! Sliding-window geometry, the one home of it: convolutions, their gradients and the pools,
//! for type inference, the CPU evaluator and the CUDA lowering alike. Per spatial axis: the
//! output size, the resolved pads, and for every (output index, kernel tap) where it reads.
//!
//! Output sizes: with explicit pads `floor_or_ceil((in + pb + pe − d·(k−1) − 1) / s) + 1`, a
//! ceil-mode window that would start past the input and its left padding being dropped
//! ([`conv_out_dim`]); `same_upper` / `same_lower` give `ceil(in / s)` with the total padding
//! split evenly, the odd element at the end (upper) or the beginning (lower); `valid` uses no
//! padding.

use crate::AutoPad;
use std::fmt;

/// Why a window cannot be resolved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WindowError {
    /// An attribute out of its domain (wrong length, zero stride, kernel size 0).
    Attribute(String),
    /// The window does not fit the input.
    Shape(String),
    /// The tap table would exceed `MAX_ELEMENTS`.
    TooLarge(String),
}

impl fmt::Display for WindowError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WindowError::Attribute(m) | WindowError::Shape(m) | WindowError::TooLarge(m) => {
                f.write_str(m)
            }
        }
    }
}

type KResult<T> = Result<T, WindowError>;

macro_rules! attr_err {
    ($($t:tt)*) => { Err(WindowError::Attribute(format!($($t)*))) };
}

/// Output size of one spatial axis: `floor((in + pb + pe − d·(k−1) − 1) / s) + 1`; with
/// `ceil_mode` the division rounds up, but the last window must start inside the input or
/// the left padding (ONNX and PyTorch drop it otherwise).
pub fn conv_out_dim(
    input: u64,
    kernel: u64,
    stride: u64,
    dilation: u64,
    pads: (u64, u64),
    ceil_mode: bool,
) -> Result<u64, String> {
    let overflow = || "window arithmetic overflows u64".to_string();
    if kernel == 0 || stride == 0 || dilation == 0 {
        return Err(format!(
            "kernel ({kernel}), stride ({stride}) and dilation ({dilation}) must be ≥ 1"
        ));
    }
    let (pb, pe) = pads;
    let window = dilation
        .checked_mul(kernel - 1)
        .and_then(|w| w.checked_add(1))
        .ok_or_else(overflow)?;
    let begin = input.checked_add(pb).ok_or_else(overflow)?;
    let padded = begin.checked_add(pe).ok_or_else(overflow)?;
    let span = padded.checked_sub(window).ok_or_else(|| {
        format!(
            "the window (kernel {kernel}, dilation {dilation}: {window} wide) is larger than the padded input ({input} + {pb} + {pe} = {padded})"
        )
    })?;
    if !ceil_mode {
        return Ok(span / stride + 1);
    }
    let mut out = span.div_ceil(stride).checked_add(1).ok_or_else(overflow)?;
    if (out - 1).saturating_mul(stride) >= begin {
        out -= 1;
    }
    Ok(out)
}

/// Where one kernel tap of one output position reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tap {
    /// An input element, by offset within the (N, C) plane.
    In(usize),
    /// The padding inside the declared pads.
    Pad,
    /// Beyond the declared end padding (only ceil_mode windows reach there).
    Out,
}

/// One spatial axis of a window op.
#[derive(Clone, Debug)]
pub struct Axis {
    /// Input size.
    pub input: usize,
    /// Kernel size.
    pub kernel: usize,
    /// Stride.
    pub stride: usize,
    /// Dilation.
    pub dilation: usize,
    /// Resolved padding before the input.
    pub pad_begin: usize,
    /// Resolved padding after the input.
    pub pad_end: usize,
    /// Output size.
    pub out: usize,
}

impl Axis {
    /// Where output index `o` reads at kernel tap `k` along this axis (an index, not offset).
    pub fn tap(&self, o: usize, k: usize) -> Tap {
        let wide = |v: usize| v as i128;
        let pos =
            wide(o) * wide(self.stride) + wide(k) * wide(self.dilation) - wide(self.pad_begin);
        if pos < 0 {
            Tap::Pad
        } else if pos < wide(self.input) {
            Tap::In(pos as usize)
        } else if pos < wide(self.input) + wide(self.pad_end) {
            Tap::Pad
        } else {
            Tap::Out
        }
    }
}

/// The window attributes of a conv or pool node.
pub struct WindowAttrs<'a> {
    /// Strides (`[]`: 1 everywhere).
    pub strides: &'a [i64],
    /// Pads, begin values then end values (`[]`: 0 everywhere).
    pub pads: &'a [i64],
    /// Dilations (`[]`: 1 everywhere).
    pub dilations: &'a [i64],
    /// ONNX auto_pad.
    pub auto_pad: AutoPad,
    /// Round output sizes up (pools).
    pub ceil_mode: bool,
}

/// The window of an op of the conv family: its kernel shape, window attributes and group
/// count (a conv's gradients carry the forward's).
pub struct ConvWindow<'a> {
    /// The kernel's spatial shape.
    pub kernel_shape: &'a [i64],
    /// Strides, pads, dilations and auto_pad (`ceil_mode` false).
    pub window: WindowAttrs<'a>,
    /// Channel groups.
    pub group: i64,
}

impl<'a> crate::ConvOp<'a> {
    /// The window every op of the family carries: one destructuring for the evaluator and
    /// the CUDA lowering alike.
    pub fn conv_window(self) -> ConvWindow<'a> {
        use crate::ConvOp;
        let (kernel_shape, strides, pads, dilations, group, auto_pad) = match self {
            ConvOp::Conv {
                kernel_shape,
                strides,
                pads,
                dilations,
                group,
                auto_pad,
            }
            | ConvOp::ConvGradInput {
                kernel_shape,
                strides,
                pads,
                dilations,
                group,
                auto_pad,
                ..
            }
            | ConvOp::ConvGradWeight {
                kernel_shape,
                strides,
                pads,
                dilations,
                group,
                auto_pad,
            } => (kernel_shape, strides, pads, dilations, group, auto_pad),
            ConvOp::__Lifetime(never, _) => match never {},
        };
        ConvWindow {
            kernel_shape,
            window: WindowAttrs {
                strides,
                pads,
                dilations,
                auto_pad: *auto_pad,
                ceil_mode: false,
            },
            group: *group,
        }
    }
}

fn per_axis(name: &str, vals: &[i64], n: usize, default: usize, min: i64) -> KResult<Vec<usize>> {
    if vals.is_empty() {
        return Ok(vec![default; n]);
    }
    if vals.len() != n {
        return attr_err!("{name} {vals:?} has {} values, expected {n}", vals.len());
    }
    vals.iter()
        .map(|&v| {
            if v < min || v > i64::from(u32::MAX) {
                attr_err!("{name} {vals:?}: values must be in {min}..=2^32-1")
            } else {
                Ok(v as usize)
            }
        })
        .collect()
}

/// Resolves the geometry of every spatial axis.
pub fn axes(spatial: &[usize], kernel: &[usize], w: &WindowAttrs<'_>) -> KResult<Vec<Axis>> {
    let n = spatial.len();
    if kernel.len() != n {
        return attr_err!(
            "kernel_shape {kernel:?} has {} values for {n} spatial axes",
            kernel.len()
        );
    }
    let strides = per_axis("strides", w.strides, n, 1, 1)?;
    let dilations = per_axis("dilations", w.dilations, n, 1, 1)?;
    let pads = per_axis("pads", w.pads, 2 * n, 0, 0)?;
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let (input, k, s, d) = (spatial[i], kernel[i], strides[i], dilations[i]);
        if k == 0 || k > u32::MAX as usize {
            return attr_err!("kernel size {k} on spatial axis {i} must be in 1..=2^32-1");
        }
        let (pb, pe, o) = match w.auto_pad {
            AutoPad::SameUpper | AutoPad::SameLower => {
                let o = input.div_ceil(s);
                let window = (k - 1).saturating_mul(d).saturating_add(1);
                let total = (o.saturating_sub(1) * s)
                    .saturating_add(window)
                    .saturating_sub(input);
                let small = total / 2;
                if w.auto_pad == AutoPad::SameUpper {
                    (small, total - small, o)
                } else {
                    (total - small, small, o)
                }
            }
            AutoPad::Valid | AutoPad::NotSet => {
                let (pb, pe) = if w.auto_pad == AutoPad::Valid {
                    (0, 0)
                } else {
                    (pads[i], pads[n + i])
                };
                let o = conv_out_dim(
                    input as u64,
                    k as u64,
                    s as u64,
                    d as u64,
                    (pb as u64, pe as u64),
                    w.ceil_mode,
                )
                .map_err(|m| WindowError::Shape(format!("spatial axis {i}: {m}")))?;
                (pb, pe, o as usize)
            }
        };
        out.push(Axis {
            input,
            kernel: k,
            stride: s,
            dilation: d,
            pad_begin: pb,
            pad_end: pe,
            out: o,
        });
    }
    Ok(out)
}

/// For every output position `p` (row-major over the output spatial dims) and kernel tap
/// `t` (row-major over the kernel dims), where it reads: `taps[p * kernel_size + t]`.
/// Offsets are within one (N, C) plane of the input.
pub fn taps(axes: &[Axis]) -> KResult<Vec<Tap>> {
    let product = |f: fn(&Axis) -> usize| axes.iter().try_fold(1usize, |p, a| p.checked_mul(f(a)));
    let sizes = (product(|a| a.out), product(|a| a.kernel));
    let total = match sizes {
        (Some(out), Some(k)) => out
            .checked_mul(k)
            .filter(|&t| t as u64 <= crate::MAX_ELEMENTS),
        _ => None,
    };
    let (Some(total), (Some(out), Some(ksize))) = (total, sizes) else {
        return Err(WindowError::TooLarge(format!(
            "{:?} output positions × {:?} kernel taps exceed the limit of {} elements",
            sizes.0,
            sizes.1,
            crate::MAX_ELEMENTS
        )));
    };
    // Per axis: for each (o, k), the tap along that axis.
    let per_axis: Vec<Vec<Tap>> = axes
        .iter()
        .map(|a| {
            (0..a.out)
                .flat_map(|o| (0..a.kernel).map(move |k| a.tap(o, k)))
                .collect()
        })
        .collect();
    let dims: Vec<usize> = axes.iter().map(|a| a.input).collect();
    let mut plane_strides = vec![1usize; dims.len()];
    for d in (0..dims.len().saturating_sub(1)).rev() {
        plane_strides[d] = plane_strides[d + 1] * dims[d + 1];
    }
    let mut taps = Vec::with_capacity(total);
    let rank = axes.len();
    let mut o_idx = vec![0usize; rank];
    // A full cycle of `increment` brings k_idx back to all zeros for the next position.
    let mut k_idx = vec![0usize; rank];
    for _ in 0..out {
        for _ in 0..ksize {
            let mut tap = Tap::In(0);
            for d in 0..rank {
                let t = per_axis[d][o_idx[d] * axes[d].kernel + k_idx[d]];
                tap = match (tap, t) {
                    (Tap::Out, _) | (_, Tap::Out) => Tap::Out,
                    (Tap::Pad, _) | (_, Tap::Pad) => Tap::Pad,
                    (Tap::In(a), Tap::In(i)) => Tap::In(a + i * plane_strides[d]),
                };
            }
            taps.push(tap);
            increment(&mut k_idx, axes.iter().map(|a| a.kernel));
        }
        increment(&mut o_idx, axes.iter().map(|a| a.out));
    }
    Ok(taps)
}

/// Advances a row-major multi-index over `dims` by one, wrapping to all zeros after the last.
pub fn increment(
    idx: &mut [usize],
    dims: impl DoubleEndedIterator<Item = usize> + ExactSizeIterator,
) {
    for (i, d) in dims.enumerate().rev() {
        idx[i] += 1;
        if idx[i] < d {
            return;
        }
        idx[i] = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attrs<'a>(
        pads: &'a [i64],
        strides: &'a [i64],
        auto_pad: AutoPad,
        ceil_mode: bool,
    ) -> WindowAttrs<'a> {
        WindowAttrs {
            strides,
            pads,
            dilations: &[],
            auto_pad,
            ceil_mode,
        }
    }

    #[test]
    fn same_padding_puts_the_odd_element_at_the_right_end() {
        // in 5, k 2, s 1 → out 5, total pad (5−1)·1 + 2 − 5 = 1.
        let up = axes(&[5], &[2], &attrs(&[], &[], AutoPad::SameUpper, false)).unwrap();
        assert_eq!((up[0].pad_begin, up[0].pad_end, up[0].out), (0, 1, 5));
        let low = axes(&[5], &[2], &attrs(&[], &[], AutoPad::SameLower, false)).unwrap();
        assert_eq!((low[0].pad_begin, low[0].pad_end, low[0].out), (1, 0, 5));
        // in 7, k 3, s 2 → out 4, total (4−1)·2 + 3 − 7 = 2 → 1 and 1.
        let s2 = axes(&[7], &[3], &attrs(&[], &[2], AutoPad::SameUpper, false)).unwrap();
        assert_eq!((s2[0].pad_begin, s2[0].pad_end, s2[0].out), (1, 1, 4));
    }

    #[test]
    fn taps_mark_padding_and_overhang() {
        // in 3, k 2, s 2, pads (1, 0), ceil_mode: span (3+1−2)=2 → ceil(2/2)+1 = 2 windows,
        // starting at −1 and 1: window 0 reads pad, x[0]; window 1 reads x[1], x[2].
        let ax = axes(&[3], &[2], &attrs(&[1, 0], &[2], AutoPad::NotSet, true)).unwrap();
        assert_eq!(
            taps(&ax).unwrap(),
            vec![Tap::Pad, Tap::In(0), Tap::In(1), Tap::In(2)]
        );
        // in 4, k 3, s 2, no pads, ceil: span 1 → ceil(1/2)+1 = 2; window 1 starts at 2,
        // reads x[2], x[3] and one element past the end.
        let ax = axes(&[4], &[3], &attrs(&[], &[2], AutoPad::NotSet, true)).unwrap();
        let t = taps(&ax).unwrap();
        assert_eq!(t[3..], [Tap::In(2), Tap::In(3), Tap::Out]);
    }
}
