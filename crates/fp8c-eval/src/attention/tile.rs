//! What both attention kernels do per tile: the element type ([`Real`]: f32 or f64), the tile
//! products on the `gemm` crate ([`gemm`], any strides, accumulating or not), and the row
//! loops over a tile's scores, compiled for AVX2 where the CPU has it (the same IEEE
//! operations either way, so the same bits).

use crate::linalg::GemmElem;

/// An element type the attention kernels compute in.
pub(crate) trait Real:
    GemmElem
    + PartialOrd
    + std::ops::Sub<Output = Self>
    + std::ops::Div<Output = Self>
    + std::ops::AddAssign
    + std::ops::MulAssign
{
    /// −∞.
    const NEG_INF: Self;
    /// `e^(a − b)`, the difference taken exactly (f32: in f64; both rounded once).
    fn exp_diff(a: Self, b: Self) -> Self;
    /// From f64 (rounded).
    fn from_f64(x: f64) -> Self;
    /// To f64 (exact).
    fn to_f64(self) -> f64;
    /// True for NaN.
    fn is_nan(self) -> bool;
}

impl Real for f32 {
    const NEG_INF: f32 = f32::NEG_INFINITY;
    #[inline(always)]
    fn exp_diff(a: f32, b: f32) -> f32 {
        fp8c_ir::fmath::exp_diff_f32(a, b)
    }
    fn from_f64(x: f64) -> f32 {
        x as f32
    }
    #[inline(always)]
    fn to_f64(self) -> f64 {
        f64::from(self)
    }
    #[inline(always)]
    fn is_nan(self) -> bool {
        self.is_nan()
    }
}

impl Real for f64 {
    const NEG_INF: f64 = f64::NEG_INFINITY;
    #[inline(always)]
    fn exp_diff(a: f64, b: f64) -> f64 {
        (a - b).exp()
    }
    fn from_f64(x: f64) -> f64 {
        x
    }
    #[inline(always)]
    fn to_f64(self) -> f64 {
        self
    }
    #[inline(always)]
    fn is_nan(self) -> bool {
        self.is_nan()
    }
}

/// A matrix operand: its slice, and the strides of its rows and columns (in elements).
#[derive(Clone, Copy)]
pub(crate) struct View<'a, T> {
    pub data: &'a [T],
    pub rs: usize,
    pub cs: usize,
}

impl<'a, T> View<'a, T> {
    /// A row-major matrix with rows `ld` apart.
    pub fn rows(data: &'a [T], ld: usize) -> Self {
        View {
            data,
            rs: ld,
            cs: 1,
        }
    }

    /// The transpose of a row-major matrix with rows `ld` apart.
    pub fn trans(data: &'a [T], ld: usize) -> Self {
        View {
            data,
            rs: 1,
            cs: ld,
        }
    }
}

/// `dst[m×n]` (row-major, rows `ld` apart) `= A·B`, or `+= A·B` when `accumulate`, with A
/// `m×k` and B `k×n`; single-threaded (the kernels parallelise over tiles).
///
/// Panics (an internal error) when an operand is too short for its shape and strides: the
/// bounds make the `gemm` crate's raw-pointer call sound.
#[allow(clippy::too_many_arguments)]
pub(crate) fn gemm<T: Real>(
    m: usize,
    n: usize,
    k: usize,
    dst: &mut [T],
    ld: usize,
    accumulate: bool,
    a: View<'_, T>,
    b: View<'_, T>,
) {
    if m == 0 || n == 0 {
        return;
    }
    assert!(
        ld >= n && dst.len() >= (m - 1) * ld + n,
        "attention tile output bounds"
    );
    if k == 0 {
        if !accumulate {
            for r in 0..m {
                dst[r * ld..r * ld + n].fill(T::ZERO);
            }
        }
        return;
    }
    assert!(
        (m - 1) * a.rs + (k - 1) * a.cs < a.data.len()
            && (k - 1) * b.rs + (n - 1) * b.cs < b.data.len(),
        "attention tile operand bounds"
    );
    // SAFETY: dst holds m rows of n elements `ld` apart, borrowed mutably; every element of A
    // (i·rs + p·cs) and B (p·rs + j·cs) read is in bounds (asserted above). dst := alpha·dst
    // + beta·A·B, dst read only when accumulating.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst.as_mut_ptr(),
            1,
            ld as isize,
            accumulate,
            a.data.as_ptr(),
            a.cs as isize,
            a.rs as isize,
            b.data.as_ptr(),
            b.cs as isize,
            b.rs as isize,
            T::ONE,
            T::ONE,
            false,
            false,
            false,
            gemm::Parallelism::None,
        );
    }
}

/// Where one score row's mask values are: the mask, the element of key 0 of the tile, and the
/// stride along the keys (0 when the mask broadcasts over them).
#[derive(Clone, Copy)]
pub(crate) struct MaskRow<'a, T> {
    pub data: &'a [T],
    pub start: usize,
    pub step: usize,
}

impl<T: Real> MaskRow<'_, T> {
    #[inline(always)]
    fn at(&self, c: usize) -> T {
        self.data[self.start + c * self.step]
    }
}

/// A row loop compiled twice: as is, and for AVX2 (chosen at run time; the same IEEE
/// operations either way, so the same bits). The body is the `*_any` function.
macro_rules! simd_fn {
    ($(#[$m:meta])* fn $name:ident / $avx:ident / $any:ident ($($a:ident : $t:ty),*) $(-> $r:ty)?) => {
        $(#[$m])*
        pub(crate) fn $name<T: Real>($($a: $t),*) $(-> $r)? {
            #[cfg(target_arch = "x86_64")]
            if std::arch::is_x86_feature_detected!("avx2") {
                // SAFETY: the CPU has AVX2 (checked just above).
                return unsafe { $avx($($a),*) };
            }
            $any($($a),*)
        }

        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "avx2")]
        unsafe fn $avx<T: Real>($($a: $t),*) $(-> $r)? {
            $any($($a),*)
        }
    };
}

simd_fn!(
    /// `row[c] = row[c]·scale + mask[c]` for the `vis` visible keys; the others are −∞.
    fn scale_mask / scale_mask_avx2 / scale_mask_any(
        row: &mut [T], vis: usize, scale: T, mask: Option<MaskRow<'_, T>>
    )
);
simd_fn!(
    /// The maximum of `xs` (−∞ when empty), NaN if any is NaN.
    fn max_nan / max_nan_avx2 / max_nan_any(xs: &[T]) -> T
);
simd_fn!(
    /// `row[c] = e^(row[c] − m)` in place; returns `Σ row[c]` in f64 (eight partial sums in
    /// f64, a fixed order). `m` must not be −∞ (a row with every key hidden is zeroed instead).
    fn exp_sub_sum / exp_sub_sum_avx2 / exp_sub_sum_any(row: &mut [T], m: T) -> f64
);
simd_fn!(
    /// `row[c] = e^(row[c] − l)` in place (the backward's probabilities from the lse).
    fn exp_sub / exp_sub_avx2 / exp_sub_any(row: &mut [T], l: T)
);
simd_fn!(
    /// `ds[c] = p[c]·(ds[c] − d)·scale` (dS from dP, the probabilities and D = Σ dO·O).
    fn softmax_back / softmax_back_avx2 / softmax_back_any(ds: &mut [T], p: &[T], d: T, scale: T)
);

#[inline(always)]
fn scale_mask_any<T: Real>(row: &mut [T], vis: usize, scale: T, mask: Option<MaskRow<'_, T>>) {
    let (seen, hidden) = row.split_at_mut(vis.min(row.len()));
    match mask {
        None => seen.iter_mut().for_each(|x| *x *= scale),
        Some(m) if m.step == 0 => {
            let add = m.at(0);
            seen.iter_mut().for_each(|x| *x = *x * scale + add);
        }
        Some(m) => {
            let ms = &m.data[m.start..m.start + seen.len()];
            seen.iter_mut()
                .zip(ms)
                .for_each(|(x, &a)| *x = *x * scale + a);
        }
    }
    hidden.fill(T::NEG_INF);
}

#[inline(always)]
fn max_nan_any<T: Real>(xs: &[T]) -> T {
    let mut lanes = [T::NEG_INF; 8];
    let mut nan = false;
    let chunks = xs.chunks_exact(8);
    let rest = chunks.remainder();
    for c in chunks {
        for l in 0..8 {
            nan |= c[l].is_nan();
            if c[l] > lanes[l] {
                lanes[l] = c[l];
            }
        }
    }
    for &x in rest {
        nan |= x.is_nan();
        if x > lanes[0] {
            lanes[0] = x;
        }
    }
    if nan {
        return T::from_f64(f64::NAN);
    }
    lanes
        .into_iter()
        .fold(T::NEG_INF, |a, b| if b > a { b } else { a })
}

#[inline(always)]
fn exp_sub_sum_any<T: Real>(row: &mut [T], m: T) -> f64 {
    let mut acc = [0f64; 8];
    let mut chunks = row.chunks_exact_mut(8);
    for c in chunks.by_ref() {
        for l in 0..8 {
            c[l] = T::exp_diff(c[l], m);
            acc[l] += c[l].to_f64();
        }
    }
    for (l, x) in chunks.into_remainder().iter_mut().enumerate() {
        *x = T::exp_diff(*x, m);
        acc[l] += x.to_f64();
    }
    ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]))
}

#[inline(always)]
fn exp_sub_any<T: Real>(row: &mut [T], l: T) {
    row.iter_mut().for_each(|x| *x = T::exp_diff(*x, l));
}

#[inline(always)]
fn softmax_back_any<T: Real>(ds: &mut [T], p: &[T], d: T, scale: T) {
    ds.iter_mut()
        .zip(p)
        .for_each(|(s, &pv)| *s = pv * (*s - d) * scale);
}
