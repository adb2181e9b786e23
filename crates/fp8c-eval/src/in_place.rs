//! Elementwise f32 steps evaluated in place: a unary op, or a binary op whose other operand
//! is the same shape, one value or a row repeated along the leading dims, overwrites the
//! tensor it consumes instead of writing a fresh one.
//!
//! The scalar functions are the elementwise table's (`fp8c_ir::elementwise`), the same the
//! out-of-place kernels in `elementwise.rs` call, each result rounded to f32 as the unfused
//! op's output is: the bits are those of `eval_op`. A fused op's elementwise program
//! (`fused.rs`) uses it for every instruction that is the only reader of the value before it
//! (a GEMM epilogue's bias and activation then update the accumulator), and the CPU runtime
//! for a step whose input dies there. Whatever this does not handle (other dtypes,
//! broadcasting that is not a row, ops with kernels of their own) answers `false` and
//! leaves the tensor as it was, for the caller's out-of-place path.

use crate::data::PAR_MIN;
use fp8c_ir::elementwise::{self as table, BinaryKernel, Kind, UnaryKernel};
use fp8c_ir::{DType, ElementwiseOp as E, Op, OpView, Tensor};

/// Evaluates the elementwise `op` with `acc` as its input number `pos` (0 or 1), writing the
/// result over `acc`; `other` is the op's other input for a binary op (None for a unary op).
/// Returns false, with `acc` unchanged, where the op, the dtypes or the shapes are not a
/// case this handles.
pub fn eval_in_place(op: &Op, acc: &mut Tensor, pos: usize, other: Option<&Tensor>) -> bool {
    let Some((e, arity)) = run_op(op) else {
        return false;
    };
    // An empty tensor has nothing to write (and no row to repeat).
    if acc.dtype() != DType::F32 || pos > 1 || acc.is_empty() {
        return false;
    }
    match (arity, other) {
        (1, None) if pos == 0 => {
            let Ok(v) = bytemuck::try_cast_slice_mut::<u8, f32>(acc.bytes_mut()) else {
                return false;
            };
            table::dispatch_unary(e, Unary(v)).is_some()
        }
        (2, Some(b)) if b.dtype() == DType::F32 => {
            let Some(layout) = layout(acc.shape(), b.shape()) else {
                return false;
            };
            let Ok(bv) = b.as_slice::<f32>() else {
                return false;
            };
            let Ok(v) = bytemuck::try_cast_slice_mut::<u8, f32>(acc.bytes_mut()) else {
                return false;
            };
            let other = match layout {
                Layout::Same => Other::Same(bv),
                Layout::Scalar => Other::Scalar(bv[0]),
                Layout::Rows => Other::Rows(bv),
            };
            table::dispatch_binary(
                e,
                Binary {
                    acc: v,
                    other,
                    acc_left: pos == 0,
                },
            )
            .is_some()
        }
        _ => false,
    }
}

/// The elementwise op `op` when it can update a run of an f32 tensor in place
/// ([`apply_run`]), with its input count (1 or 2); None otherwise. The same ops
/// [`eval_in_place`] handles.
pub(crate) fn run_op(op: &Op) -> Option<(E<'_>, usize)> {
    let OpView::Elementwise(e) = op.view() else {
        return None;
    };
    // These have f32 kernels of their own (`erf.rs`, `gelu_tanh`) or no table function.
    if matches!(e, E::Erf | E::Gelu { .. } | E::Mod { .. } | E::Identity) {
        return None;
    }
    match table::row(e).kind {
        Kind::Unary => Some((e, 1)),
        Kind::Binary | Kind::Variadic => Some((e, 2)),
        _ => None,
    }
}

/// `acc = op(acc[, other])` over one run of an f32 tensor, on the calling thread: `other` is
/// the same run of the op's other operand (a tensor of the same shape), `acc_left` whether
/// `acc` is the op's first input. The scalar functions and SIMD paths are
/// [`eval_in_place`]'s, so the bits are `eval_op`'s. False, with `acc` unchanged, where
/// [`run_op`] refuses the op or the operand count does not fit it.
pub(crate) fn apply_run(op: &Op, acc: &mut [f32], other: Option<&[f32]>, acc_left: bool) -> bool {
    match (run_op(op), other) {
        (Some((e, 1)), None) => table::dispatch_unary(e, RunUnary(acc)).is_some(),
        (Some((e, 2)), Some(o)) if o.len() == acc.len() => table::dispatch_binary(
            e,
            RunBinary {
                acc,
                other: o,
                acc_left,
            },
        )
        .is_some(),
        _ => false,
    }
}

/// [`apply_run`]'s unary kernel.
struct RunUnary<'a>(&'a mut [f32]);

impl UnaryKernel<f32> for RunUnary<'_> {
    type Out = ();
    fn run(self, f: impl Fn(f32) -> f32 + Send + Sync + Copy) {
        map_avx2_or_plain(self.0, f);
    }
}

/// [`apply_run`]'s binary kernel.
struct RunBinary<'a> {
    acc: &'a mut [f32],
    other: &'a [f32],
    acc_left: bool,
}

impl BinaryKernel<f32> for RunBinary<'_> {
    type Out = ();
    fn run(self, f: impl Fn(f32, f32) -> f32 + Send + Sync + Copy) {
        let o = Other::Same(self.other);
        if self.acc_left {
            zip_avx2_or_plain(self.acc, o, f);
        } else {
            zip_avx2_or_plain(self.acc, o, move |x, y| f(y, x));
        }
    }
}

/// How the other operand lines up with the updated tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Layout {
    Same,
    Scalar,
    Rows,
}

/// The layout of `b` broadcast against `a` when the result has `a`'s shape; None otherwise.
fn layout(a: &[u64], b: &[u64]) -> Option<Layout> {
    if b.len() > a.len() {
        return None;
    }
    if a == b {
        return Some(Layout::Same);
    }
    if b.iter().all(|&d| d == 1) {
        return Some(Layout::Scalar);
    }
    // `b` without its leading ones must equal `a`'s trailing dims.
    let lead = b.iter().take_while(|&&d| d == 1).count();
    let tail = &b[lead..];
    (a[a.len() - tail.len()..] == *tail).then_some(Layout::Rows)
}

/// The other operand's values.
#[derive(Clone, Copy)]
enum Other<'a> {
    Same(&'a [f32]),
    Scalar(f32),
    /// One row, repeated: its length divides the tensor's.
    Rows(&'a [f32]),
}

struct Unary<'a>(&'a mut [f32]);

impl UnaryKernel<f32> for Unary<'_> {
    type Out = ();
    fn run(self, f: impl Fn(f32) -> f32 + Send + Sync + Copy) {
        chunked(self.0, 1, |c, _| map_avx2_or_plain(c, f));
    }
}

struct Binary<'a> {
    acc: &'a mut [f32],
    other: Other<'a>,
    acc_left: bool,
}

impl BinaryKernel<f32> for Binary<'_> {
    type Out = ();
    fn run(self, f: impl Fn(f32, f32) -> f32 + Send + Sync + Copy) {
        let period = match self.other {
            Other::Rows(r) => r.len(),
            _ => 1,
        };
        let other = self.other;
        let go = |c: &mut [f32], start: usize| {
            let o = match other {
                Other::Same(v) => Other::Same(&v[start..start + c.len()]),
                o => o,
            };
            if self.acc_left {
                zip_avx2_or_plain(c, o, f);
            } else {
                zip_avx2_or_plain(c, o, move |x, y| f(y, x));
            }
        };
        chunked(self.acc, period, go);
    }
}

/// Runs `f(chunk, start)` over `v`, on rayon's pool in chunks of a multiple of `period`
/// elements when `v` is large.
fn chunked(v: &mut [f32], period: usize, f: impl Fn(&mut [f32], usize) + Send + Sync) {
    use rayon::prelude::*;
    let threads = rayon::current_num_threads();
    if v.len() < PAR_MIN || threads < 2 || period == 0 {
        return f(v, 0);
    }
    let chunk = v
        .len()
        .div_ceil(threads * 4)
        .max(PAR_MIN / 4)
        .next_multiple_of(period);
    v.par_chunks_mut(chunk)
        .enumerate()
        .for_each(|(i, c)| f(c, i * chunk));
}

/// `x = f(x)` over the slice, compiled for AVX2 where the CPU has it (the same IEEE
/// operations either way, as `data::map_into`).
#[inline(always)]
fn map_avx2_or_plain(v: &mut [f32], f: impl Fn(f32) -> f32 + Copy) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2 (checked just above).
        return unsafe { map_avx2(v, f) };
    }
    map(v, f)
}

/// Values [`blocks`] copies out at a time (1 KiB, in L1).
const BLOCK: usize = 256;

/// Runs `g(block, copy, start)` over `v` in blocks of [`BLOCK`], `copy` holding the block's
/// values as they were. The kernels below read the copy and write every lane: updating a
/// value through the same slice, LLVM turns a select such as ReLU's
/// `if x < 0 { 0 } else { x }` into a store of the changed lanes only (`vmaskmovps`),
/// microcoded on AMD: ResNet-50's ReLUs ran at two cycles a value.
#[inline(always)]
fn blocks(v: &mut [f32], mut g: impl FnMut(&mut [f32], &[f32], usize)) {
    let mut copy = [0f32; BLOCK];
    for (i, block) in v.chunks_mut(BLOCK).enumerate() {
        let src = &mut copy[..block.len()];
        src.copy_from_slice(block);
        g(block, src, i * BLOCK);
    }
}

#[inline(always)]
fn map(v: &mut [f32], f: impl Fn(f32) -> f32 + Copy) {
    blocks(v, |block, src, _| {
        for (x, &s) in block.iter_mut().zip(src) {
            *x = f(s);
        }
    });
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn map_avx2(v: &mut [f32], f: impl Fn(f32) -> f32 + Copy) {
    map(v, f)
}

/// `x = f(x, y)` with `y` from `o`, compiled for AVX2 where the CPU has it.
#[inline(always)]
fn zip_avx2_or_plain(v: &mut [f32], o: Other<'_>, f: impl Fn(f32, f32) -> f32 + Copy) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2 (checked just above).
        return unsafe { zip_avx2(v, o, f) };
    }
    zip(v, o, f)
}

#[inline(always)]
fn zip(v: &mut [f32], o: Other<'_>, f: impl Fn(f32, f32) -> f32 + Copy) {
    match o {
        Other::Same(b) => blocks(v, |block, src, at| {
            for ((x, &s), &y) in block.iter_mut().zip(src).zip(&b[at..]) {
                *x = f(s, y);
            }
        }),
        Other::Scalar(y) => blocks(v, |block, src, _| {
            for (x, &s) in block.iter_mut().zip(src) {
                *x = f(s, y);
            }
        }),
        Other::Rows(r) => {
            for row in v.chunks_exact_mut(r.len()) {
                blocks(row, |block, src, at| {
                    for ((x, &s), &y) in block.iter_mut().zip(src).zip(&r[at..]) {
                        *x = f(s, y);
                    }
                });
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn zip_avx2(v: &mut [f32], o: Other<'_>, f: impl Fn(f32, f32) -> f32 + Copy) {
    zip(v, o, f)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Same bits as `eval_op` for every layout, both operand orders, and rejected cases
    /// leave the tensor unchanged.
    #[test]
    fn matches_eval_op() {
        let vals: Vec<f32> = (0..21)
            .map(|i| (i as f32 - 11.5) * 0.37)
            .chain([f32::NAN, -0.0, f32::INFINITY])
            .collect();
        let a = Tensor::from_f32(vec![2, 3, 4], &vals);
        let others = [
            Tensor::from_f32(
                vec![2, 3, 4],
                &vals.iter().map(|v| v * 0.5 - 1.0).collect::<Vec<_>>(),
            ),
            Tensor::from_f32(vec![4], &[1.5, -2.0, 0.0, f32::NAN]),
            Tensor::from_f32(vec![1, 3, 4], &vals[..12]),
            Tensor::from_f32(vec![1], &[0.25]),
            Tensor::from_f32(vec![], &[-3.0]),
        ];
        for op in [Op::Add, Op::Sub, Op::Mul, Op::Div, Op::Max, Op::Min] {
            for b in &others {
                for pos in 0..2 {
                    let ins = if pos == 0 { [&a, b] } else { [b, &a] };
                    let want = crate::eval_op(&op, &ins).unwrap().remove(0);
                    let mut got = a.clone();
                    assert!(
                        eval_in_place(&op, &mut got, pos, Some(b)),
                        "{op:?} {:?}",
                        b.shape()
                    );
                    assert_eq!(
                        got.bytes(),
                        want.bytes(),
                        "{op:?} {:?} pos {pos}",
                        b.shape()
                    );
                    assert_eq!(got.shape(), want.shape());
                }
            }
        }
        for op in [Op::Relu, Op::Neg, Op::Exp, Op::Tanh, Op::Sigmoid, Op::Sqrt] {
            let want = crate::eval_op(&op, &[&a]).unwrap().remove(0);
            let mut got = a.clone();
            assert!(eval_in_place(&op, &mut got, 0, None), "{op:?}");
            assert_eq!(got.bytes(), want.bytes(), "{op:?}");
        }
        // Not handled: a result of another shape, another dtype, ops with their own kernels.
        let col = Tensor::from_f32(vec![2, 3, 1], &[1.0; 6]);
        let wider = Tensor::from_f32(vec![1, 2, 3, 4], &vals);
        let ints = Tensor::from_i64(vec![4], &[1, 2, 3, 4]);
        let mut empty = Tensor::from_f32(vec![3, 0], &[]);
        let no_row = Tensor::from_f32(vec![0], &[]);
        assert!(!eval_in_place(&Op::Add, &mut empty, 0, Some(&no_row)));
        assert!(!eval_in_place(&Op::Relu, &mut empty, 0, None));
        for (op, b) in [
            (Op::Add, Some(&col)),
            (Op::Add, Some(&wider)),
            (Op::Add, Some(&ints)),
            (Op::Erf, None),
            (Op::Add, None),
            (Op::Relu, Some(&col)),
        ] {
            let mut got = a.clone();
            assert!(!eval_in_place(&op, &mut got, 0, b), "{op:?}");
            assert_eq!(got.bytes(), a.bytes());
        }
    }

    /// Large tensors split over the pool on row boundaries.
    #[test]
    fn parallel_rows_match() {
        let cols = 40;
        let n = (PAR_MIN * 3).next_multiple_of(cols) + cols;
        let vals: Vec<f32> = (0..n)
            .map(|i| ((i * 7919) % 1000) as f32 * 0.01 - 5.0)
            .collect();
        let a = Tensor::from_f32(vec![(n / cols) as u64, cols as u64], &vals);
        let row = Tensor::from_f32(
            vec![cols as u64],
            &(0..cols).map(|i| i as f32).collect::<Vec<_>>(),
        );
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(3)
            .build()
            .unwrap();
        let op = Op::Sub;
        let want = crate::eval_op(&op, &[&row, &a]).unwrap().remove(0);
        let mut got = a.clone();
        assert!(pool.install(|| eval_in_place(&op, &mut got, 1, Some(&row))));
        assert_eq!(got.bytes(), want.bytes());
    }
}
