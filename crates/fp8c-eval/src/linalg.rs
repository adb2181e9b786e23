//! The linalg family: `matmul`, `gemm` and `scaled_matmul`, on the `gemm` crate; also the GEMM
//! kernel the conv family's im2col GEMMs share ([`gemm_into`]).
//!
//! Floats (f32, f16, bf16, and decoded FP8) multiply in f32 with f32 accumulation; f64 in f64.
//! FP8 GEMMs with `fast_accum` use the narrow-accumulator model of `fast_accum.rs`, the others
//! `fp8_gemm.rs` (B decoded into panels as it is packed).
//! Integers accumulate with wrapping arithmetic in i64 and wrap to their type.
//!
//! Determinism: the `gemm` crate splits work over threads by output blocks, never along K,
//! and picks its K blocking from the cache sizes, not the thread count, so a result does not
//! depend on the size of rayon's pool (a test checks it). It does depend on the CPU's SIMD
//! width and cache sizes in the last bits: the oracle is exact per machine, and GPU results
//! are compared with a tolerance anyway.

use crate::args;
use crate::broadcast::broadcast_shapes;
use crate::cast::cast;
use crate::data::{Data, numel};
use crate::error::{ErrorKind, Fail, KResult, dtype_err, shape_err};
use crate::fp8_codes as fp8;
use fp8c_ir::{DType, LinalgOp, Support, Tensor};
use rayon::prelude::*;
use std::borrow::Cow;
use std::mem::MaybeUninit;

/// Evaluates an op of the linalg family.
pub(crate) fn eval(op: LinalgOp<'_>, inputs: &[&Tensor]) -> KResult<Vec<Tensor>> {
    let out = match op {
        LinalgOp::MatMul => {
            let [a, b] = args(inputs)?;
            matmul(a, b)?
        }
        LinalgOp::Gemm {
            alpha,
            beta,
            trans_a,
            trans_b,
        } => gemm_op(inputs, *alpha, *beta, *trans_a, *trans_b)?,
        LinalgOp::ScaledMatMul { out, fast_accum } => scaled_matmul(inputs, *out, *fast_accum)?,
        LinalgOp::BlockScaledMatMul {
            out,
            k_block,
            a_rows,
            b_cols,
        } => crate::block::block_scaled_matmul(inputs, *out, *k_block, *a_rows, *b_cols)?,
        LinalgOp::__Lifetime(never, _) => match never {},
    };
    Ok(vec![out])
}

/// Every op of the family is evaluated.
pub(crate) fn support(op: LinalgOp<'_>) -> Support {
    match op {
        LinalgOp::MatMul
        | LinalgOp::Gemm { .. }
        | LinalgOp::ScaledMatMul { .. }
        | LinalgOp::BlockScaledMatMul { .. } => Support::Yes,
        LinalgOp::__Lifetime(never, _) => match never {},
    }
}

/// Work (m·n·k) from which one GEMM uses rayon's pool inside the `gemm` crate.
const PAR_GEMM_WORK: usize = 1 << 18;

/// A matrix operand: data, element offset of its first element, row and column strides.
#[derive(Clone, Copy)]
pub(crate) struct Mat<'a, T> {
    pub data: &'a [T],
    pub offset: usize,
    pub rs: usize,
    pub cs: usize,
}

/// Element types the `gemm` crate multiplies.
pub(crate) trait GemmElem:
    Copy + Send + Sync + Default + std::ops::Add<Output = Self> + std::ops::Mul<Output = Self> + 'static
{
    const ZERO: Self;
    const ONE: Self;
}
impl GemmElem for f32 {
    const ZERO: f32 = 0.0;
    const ONE: f32 = 1.0;
}
impl GemmElem for f64 {
    const ZERO: f64 = 0.0;
    const ONE: f64 = 1.0;
}

/// `out[m×n] (row-major, contiguous) = A[m×k] · B[k×n]`, accumulating in `T`.
/// `parallel` lets the `gemm` crate use rayon's pool (same result either way).
pub(crate) fn gemm_into<T: GemmElem>(
    m: usize,
    n: usize,
    k: usize,
    a: Mat<'_, T>,
    b: Mat<'_, T>,
    out: &mut [T],
    parallel: bool,
) {
    // SAFETY: `MaybeUninit<T>` has `T`'s layout, and `gemm_into_uninit` only writes
    // initialised values, so `out` stays initialised.
    let out = unsafe { &mut *(out as *mut [T] as *mut [MaybeUninit<T>]) };
    gemm_into_uninit(m, n, k, a, b, out, parallel);
}

/// [`gemm_into`] into memory that need not be initialised (a result `Vec`'s spare
/// capacity): every element of `out` is written.
pub(crate) fn gemm_into_uninit<T: GemmElem>(
    m: usize,
    n: usize,
    k: usize,
    a: Mat<'_, T>,
    b: Mat<'_, T>,
    out: &mut [MaybeUninit<T>],
    parallel: bool,
) {
    assert_eq!(out.len(), m * n, "gemm output buffer size");
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        out.iter_mut().for_each(|o| {
            o.write(T::ZERO);
        });
        return;
    }
    // The last element each operand reads must be in bounds: this makes the raw-pointer call
    // below sound.
    let a_last = a.offset + (m - 1) * a.rs + (k - 1) * a.cs;
    let b_last = b.offset + (k - 1) * b.rs + (n - 1) * b.cs;
    assert!(
        a_last < a.data.len() && b_last < b.data.len(),
        "gemm operand out of bounds"
    );
    let threads = rayon::current_num_threads();
    let big = parallel && threads > 1 && m.saturating_mul(n).saturating_mul(k) >= PAR_GEMM_WORK;
    // Wide products go to the threads as column blocks, each a single-threaded GEMM over the
    // whole of k: every output element is still one call's sum, in the same order, and the
    // threads share no packing work (the `gemm` crate's own split scales 1.5-1.7× on two
    // threads here, the blocks ~1.9×).
    let width = n.div_ceil(threads).next_multiple_of(16);
    // Narrow products (a conv's 7×7 = 49 positions, n = 49: blocks of 32 and 17 columns) go
    // as row blocks instead, balanced, each thread packing its own rows of A; the same
    // one-call sums per element (the crate's K blocking depends on k alone).
    let height = m.div_ceil(threads).next_multiple_of(8);
    if big && width < 64 && n >= 16 && height < m {
        let dst = SendPtr(out.as_mut_ptr().cast::<T>());
        (0..m.div_ceil(height)).into_par_iter().for_each(|i| {
            let (r0, r1) = (i * height, ((i + 1) * height).min(m));
            let a = Mat {
                offset: a.offset + r0 * a.rs,
                ..a
            };
            // SAFETY: rows r0..r1 of `out` belong to this block alone (the blocks are
            // disjoint), and every operand element read is in bounds (asserted above).
            unsafe {
                raw_gemm(
                    r1 - r0,
                    n,
                    k,
                    dst.at(r0 * n),
                    n,
                    a,
                    b,
                    0,
                    gemm::Parallelism::None,
                )
            }
        });
        return;
    }
    if big && width < n && width >= 64 {
        let dst = SendPtr(out.as_mut_ptr().cast::<T>());
        (0..n.div_ceil(width)).into_par_iter().for_each(|j| {
            let (c0, c1) = (j * width, ((j + 1) * width).min(n));
            // SAFETY: columns c0..c1 of `out` belong to this block alone (the blocks are
            // disjoint), and every operand element read is in bounds (asserted above).
            unsafe {
                raw_gemm(
                    m,
                    c1 - c0,
                    k,
                    dst.at(c0),
                    n,
                    a,
                    b,
                    c0,
                    gemm::Parallelism::None,
                )
            }
        });
        return;
    }
    let par = if big {
        gemm::Parallelism::Rayon(threads)
    } else {
        gemm::Parallelism::None
    };
    // SAFETY: `out` is m×n with row stride n and column stride 1, borrowed mutably; operands
    // are in bounds as asserted above.
    unsafe { raw_gemm(m, n, k, out.as_mut_ptr().cast::<T>(), n, a, b, 0, par) }
}

/// A pointer handed to the threads of one GEMM, each writing its own block of the output.
#[derive(Clone, Copy)]
pub(crate) struct SendPtr<T>(pub(crate) *mut T);
// SAFETY: only used for disjoint blocks of one output (`gemm_into`, `fp8_gemm`).
unsafe impl<T> Send for SendPtr<T> {}
unsafe impl<T> Sync for SendPtr<T> {}

impl<T> SendPtr<T> {
    /// The pointer `i` elements on.
    ///
    /// # Safety
    /// As `pointer::add`.
    pub(crate) unsafe fn at(self, i: usize) -> *mut T {
        // SAFETY: the caller's contract.
        unsafe { self.0.add(i) }
    }
}

/// B's row stride (bytes) from which the `gemm` crate is told to pack B even for a few rows of
/// A.
const WIDE_B_BYTES: usize = 8 << 10;

/// The `gemm` crate's lhs packing thresholds (its lhs is our B, the product being computed
/// transposed): its defaults, and ours for B rows at least [`WIDE_B_BYTES`] apart.
const LHS_PACKING_DEFAULT: (usize, usize) = (8, 16);
const LHS_PACKING_WIDE: (usize, usize) = (2, 2);

/// Sets the `gemm` crate's packing of B for the next product: with fewer than 8·6 rows of A
/// (16·6 on threads) the crate reads B in place, one row per k step; rows 8 KiB or more apart
/// (BERT's FFN weights, 3072 floats wide) defeat the prefetchers, and packing B first is
/// faster (32×768×3072: 27 → 51 GFLOP/s; 32×2048×8192: 17 → 37), while narrower B is faster
/// in place (32×768×768: 60 against 49). Packing moves data only: the bits are the same
/// either way. The thresholds are the crate's globals; a product running on another thread
/// at the same time may see the other setting, which changes its speed, never its result.
fn pack_strided_b(b_row_bytes: usize) {
    let (single, multi) = if b_row_bytes >= WIDE_B_BYTES {
        LHS_PACKING_WIDE
    } else {
        LHS_PACKING_DEFAULT
    };
    if gemm::get_lhs_packing_threshold_single_thread() != single {
        gemm::set_lhs_packing_threshold_single_thread(single);
    }
    if gemm::get_lhs_packing_threshold_multi_thread() != multi {
        gemm::set_lhs_packing_threshold_multi_thread(multi);
    }
}

/// `dst[m×n] (row stride dst_rs) = A[m×k] · B[k×(col0..col0+n)]` through the `gemm` crate.
///
/// # Safety
/// `dst` must be valid for writes of m rows of n elements at row stride `dst_rs`, touched by
/// no one else during the call; every element of A (offset + i·rs + p·cs, i < m, p < k) and
/// of B (offset + p·rs + (col0 + j)·cs, j < n) must be in bounds.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn raw_gemm<T: GemmElem>(
    m: usize,
    n: usize,
    k: usize,
    dst: *mut T,
    dst_rs: usize,
    a: Mat<'_, T>,
    b: Mat<'_, T>,
    col0: usize,
    par: gemm::Parallelism,
) {
    pack_strided_b(b.rs * size_of::<T>());
    // SAFETY: the caller's contract; with read_dst = false, dst := 1·(A·B) (alpha, the dst
    // factor, is unused).
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst,
            1,
            dst_rs as isize,
            false,
            a.data.as_ptr().add(a.offset),
            a.cs as isize,
            a.rs as isize,
            b.data.as_ptr().add(b.offset + col0 * b.cs),
            b.cs as isize,
            b.rs as isize,
            T::ZERO,
            T::ONE,
            false,
            false,
            false,
            par,
        );
    }
}

/// The numpy matmul shapes of `a` and `b`: (batch dims, m, k, n, output shape), with 1-D
/// operands promoted (a: `[k]` → `[1, k]`, b: `[k]` → `[k, 1]`) and the added axes dropped.
pub(crate) struct MatmulShape {
    pub(crate) batch: Vec<u64>,
    pub(crate) a_batch: Vec<u64>,
    pub(crate) b_batch: Vec<u64>,
    pub(crate) m: usize,
    pub(crate) k: usize,
    pub(crate) n: usize,
    pub(crate) out: Vec<u64>,
}

pub(crate) fn matmul_shape(a: &[u64], b: &[u64]) -> KResult<MatmulShape> {
    let (a_batch, m, ka, a_vec) = match a {
        [] => return shape_err!("matmul does not take scalars (input 0 has rank 0)"),
        [k] => (&[][..], 1, *k, true),
        [batch @ .., m, k] => (batch, *m, *k, false),
    };
    let (b_batch, kb, n, b_vec) = match b {
        [] => return shape_err!("matmul does not take scalars (input 1 has rank 0)"),
        [k] => (&[][..], *k, 1, true),
        [batch @ .., k, n] => (batch, *k, *n, false),
    };
    if ka != kb {
        return shape_err!("inner dims differ: {a:?} · {b:?} ({ka} vs {kb})");
    }
    let batch = broadcast_shapes(&[a_batch, b_batch])?;
    let mut out = batch.clone();
    if !a_vec {
        out.push(m);
    }
    if !b_vec {
        out.push(n);
    }
    numel(&out)?;
    Ok(MatmulShape {
        batch,
        a_batch: a_batch.to_vec(),
        b_batch: b_batch.to_vec(),
        m: m as usize,
        k: ka as usize,
        n: n as usize,
        out,
    })
}

/// For each output batch index, the matrix index it reads in an operand with `batch` dims.
/// [`matmul_shape`] with each output batch entry's A and B matrix index ([`batch_map`]).
pub(crate) fn batched_shape(
    a_shape: &[u64],
    b_shape: &[u64],
) -> KResult<(MatmulShape, Vec<usize>, Vec<usize>)> {
    let s = matmul_shape(a_shape, b_shape)?;
    let (a_idx, b_idx) = (
        batch_map(&s.batch, &s.a_batch),
        batch_map(&s.batch, &s.b_batch),
    );
    Ok((s, a_idx, b_idx))
}

pub(crate) fn batch_map(out_batch: &[u64], batch: &[u64]) -> Vec<usize> {
    let total: usize = out_batch.iter().map(|&d| d as usize).product();
    let off = out_batch.len() - batch.len();
    (0..total)
        .map(|mut i| {
            let (mut idx, mut stride) = (0usize, 1usize);
            for d in (0..out_batch.len()).rev() {
                let coord = i % out_batch[d] as usize;
                i /= out_batch[d] as usize;
                if d >= off {
                    let bd = batch[d - off] as usize;
                    if bd != 1 {
                        idx += coord * stride;
                    }
                    stride *= bd;
                }
            }
            idx
        })
        .collect()
}

/// Batched float matmul (numpy rules) accumulating in `T`.
fn matmul_float<T: GemmElem>(
    a: &[T],
    a_shape: &[u64],
    b: &[T],
    b_shape: &[u64],
) -> KResult<(Vec<T>, Vec<u64>)> {
    let (s, a_idx, b_idx) = batched_shape(a_shape, b_shape)?;
    let (m, k, n) = (s.m, s.k, s.n);
    let mut out = vec![T::ZERO; a_idx.len() * m * n];
    if m * n == 0 {
        return Ok((out, s.out));
    }
    // One shared B (a weight) under A's batch dims, A's matrices in order: a single GEMM
    // over all rows of A, [batch·m, k]·[k, n], the same sums (each output element is still
    // one row of A times one column of B) with one call instead of one per matrix.
    let b0 = b_idx.first().copied().unwrap_or(0);
    if a_idx.len() > 1
        && b_idx.iter().all(|&j| j == b0)
        && a_idx.iter().enumerate().all(|(i, &j)| i == j)
    {
        let rows = a_idx.len() * m;
        let am = Mat {
            data: a,
            offset: 0,
            rs: k,
            cs: 1,
        };
        let bm = Mat {
            data: b,
            offset: b0 * k * n,
            rs: n,
            cs: 1,
        };
        gemm_into(rows, n, k, am, bm, &mut out, true);
        return Ok((out, s.out));
    }
    let work = m.saturating_mul(n).saturating_mul(k);
    let one = |(bi, chunk): (usize, &mut [T]), parallel: bool| {
        let am = Mat {
            data: a,
            offset: a_idx[bi] * m * k,
            rs: k,
            cs: 1,
        };
        let bm = Mat {
            data: b,
            offset: b_idx[bi] * k * n,
            rs: n,
            cs: 1,
        };
        gemm_into(m, n, k, am, bm, chunk, parallel);
    };
    if a_idx.len() > 1 && work < PAR_GEMM_WORK {
        // Many small products: one per task.
        out.par_chunks_mut(m * n)
            .enumerate()
            .for_each(|c| one(c, false));
    } else {
        out.chunks_mut(m * n).enumerate().for_each(|c| one(c, true));
    }
    Ok((out, s.out))
}

/// Batched integer matmul with wrapping i64 accumulation.
fn matmul_int(
    a: &[i64],
    a_shape: &[u64],
    b: &[i64],
    b_shape: &[u64],
) -> KResult<(Vec<i64>, Vec<u64>)> {
    let (s, a_idx, b_idx) = batched_shape(a_shape, b_shape)?;
    let (m, k, n) = (s.m, s.k, s.n);
    let mut out = vec![0i64; a_idx.len() * m * n];
    if m * n == 0 {
        return Ok((out, s.out));
    }
    out.par_chunks_mut(n).enumerate().for_each(|(row, o)| {
        let (bi, i) = (row / m, row % m);
        let ar = &a[a_idx[bi] * m * k + i * k..][..k];
        let bm = &b[b_idx[bi] * k * n..][..k * n];
        for (j, oj) in o.iter_mut().enumerate() {
            *oj = (0..k).fold(0i64, |acc, p| {
                acc.wrapping_add(ar[p].wrapping_mul(bm[p * n + j]))
            });
        }
    });
    Ok((out, s.out))
}

/// `matmul(a, b)`: numpy semantics for every numeric dtype.
fn matmul(a: &Tensor, b: &Tensor) -> KResult<Tensor> {
    if a.dtype() != b.dtype() {
        return dtype_err!("input dtypes differ: {} and {}", a.dtype(), b.dtype());
    }
    let dtype = a.dtype();
    // f32 operands are read in place (issue #19: no copy of either into a fresh Vec).
    if dtype == DType::F32
        && let (Ok(x), Ok(y)) = (a.as_slice::<f32>(), b.as_slice::<f32>())
    {
        let (v, shape) = matmul_float(x, a.shape(), y, b.shape())?;
        return Data::F32(Cow::from(v)).store(dtype, shape);
    }
    match (Data::load(a)?, Data::load(b)?) {
        (Data::F32(x), Data::F32(y)) => {
            let (v, shape) = matmul_float(&x, a.shape(), &y, b.shape())?;
            Data::F32(Cow::from(v)).store(dtype, shape)
        }
        (Data::F64(x), Data::F64(y)) => {
            let (v, shape) = matmul_float(&x, a.shape(), &y, b.shape())?;
            Data::F64(Cow::from(v)).store(dtype, shape)
        }
        (Data::Bool(_), _) => dtype_err!("expects numeric inputs, got bool"),
        _ => {
            let (x, y) = (ints(a)?, ints(b)?);
            let (v, shape) = matmul_int(&x, a.shape(), &y, b.shape())?;
            cast(&Tensor::from_i64(shape, &v), dtype, false)
        }
    }
}

fn ints(t: &Tensor) -> KResult<Vec<i64>> {
    t.to_i64_vec().map_err(|m| Fail::new(ErrorKind::DType, m))
}

/// `gemm { alpha, beta, trans_a, trans_b }(A, B[, C])`: `alpha·op(A)·op(B) + beta·C`, with C
/// broadcast to `[M, N]`. The product is accumulated first and the epilogue applied per
/// element, `alpha·acc + beta·c` (C is not read when beta is 0, as onnxruntime).
fn gemm_op(
    inputs: &[&Tensor],
    alpha: f32,
    beta: f32,
    trans_a: bool,
    trans_b: bool,
) -> KResult<Tensor> {
    let (a, b, c) = match inputs {
        [a, b] => (*a, *b, None),
        [a, b, c] => (*a, *b, Some(*c)),
        _ => return Fail::arity("2 or 3", inputs.len()),
    };
    let dtype = a.dtype();
    if b.dtype() != dtype || c.is_some_and(|c| c.dtype() != dtype) {
        return dtype_err!("inputs must share a dtype");
    }
    let ([a0, a1], [b0, b1]) = (a.shape(), b.shape()) else {
        return shape_err!(
            "A and B must be 2-D, got {:?} and {:?}",
            a.shape(),
            b.shape()
        );
    };
    let (m, k) = if trans_a { (*a1, *a0) } else { (*a0, *a1) };
    let (kb, n) = if trans_b { (*b1, *b0) } else { (*b0, *b1) };
    if k != kb {
        return shape_err!("op(A) is [{m}, {k}] and op(B) is [{kb}, {n}]: inner dims differ");
    }
    let out_shape = vec![m, n];
    numel(&out_shape)?;
    let c = match c {
        Some(c) if beta != 0.0 => {
            if c.shape().len() > 2 || broadcast_shapes(&[c.shape(), &out_shape])? != out_shape {
                return shape_err!(
                    "C of shape {:?} does not broadcast to [{m}, {n}]",
                    c.shape()
                );
            }
            Some(c)
        }
        _ => None,
    };
    // An f32 bias row ([n] or [1, n]) is read per output row in the epilogue; any other C is
    // broadcast to [m, n] first.
    let c_row = c.filter(|c| {
        dtype == DType::F32 && c.len() > 1 && c.len() as u64 == n && c.shape().last() == Some(&n)
    });
    let c = match c {
        Some(c) if c_row.is_none() => Some(crate::movement::broadcast_to(c, &out_shape)?),
        _ => None,
    };
    let (m, k, n) = (m as usize, k as usize, n as usize);
    // Strides of op(A) and op(B) over the row-major stored matrices.
    let (a_rs, a_cs) = if trans_a { (1, m) } else { (k, 1) };
    let (b_rs, b_cs) = if trans_b { (1, k) } else { (n, 1) };
    match Data::load(a)? {
        Data::F32(x) => {
            let Data::F32(y) = Data::load(b)? else {
                return dtype_err!("B must be f32");
            };
            // A small transposed B (`transB`, as `nn.Linear` exports; at most the weight
            // cache's entry size) is multiplied as the row-major [k, n] it stands for, its
            // transpose kept between calls (`weight_cache.rs`): the `gemm` crate then reads it
            // in place instead of repacking B on every call. Until it is cached (or when the
            // cache is full) it is transposed per call, so every call sums in the same order
            // (the crate may sum a strided B in another one). A larger B stays strided: a
            // per-call transpose of it costs more than the crate's packing.
            // The stored [n, k] as [k, n] (tiled copy).
            let transposed = || crate::movement::transpose_matrix(&y, n, k);
            let product = |b: &[f32], (rs, cs): (usize, usize)| {
                let mut acc = vec![0f32; m * n];
                let b = Mat {
                    data: b,
                    offset: 0,
                    rs,
                    cs,
                };
                let a = Mat {
                    data: &x,
                    offset: 0,
                    rs: a_rs,
                    cs: a_cs,
                };
                gemm_into(m, n, k, a, b, &mut acc, true);
                acc
            };
            let small = k * n > 0 && k * n * 4 <= crate::weight_cache::ENTRY_BYTES;
            let mut acc = if trans_b && small {
                let form = crate::weight_cache::Form::Transposed;
                let fill = |t: &mut [f32]| t.copy_from_slice(&transposed());
                match crate::weight_cache::derived(b.storage(), form, (k, n), k * n, fill) {
                    Some(t) => product(&t, (n, 1)),
                    None => product(&transposed(), (n, 1)),
                }
            } else {
                product(&y, (b_rs, b_cs))
            };
            // The epilogue in place: alpha·acc + beta·c.
            match c.as_ref().map(Data::load).transpose()? {
                Some(Data::F32(cv)) => {
                    for (p, &q) in acc.iter_mut().zip(cv.iter()) {
                        *p = alpha * *p + beta * q;
                    }
                }
                Some(_) => return dtype_err!("C must be f32"),
                None if let Some(row) = c_row => {
                    let Data::F32(cv) = Data::load(row)? else {
                        return dtype_err!("C must be f32");
                    };
                    for out_row in acc.chunks_mut(n.max(1)) {
                        for (p, &q) in out_row.iter_mut().zip(cv.iter()) {
                            *p = alpha * *p + beta * q;
                        }
                    }
                }
                None if alpha != 1.0 => acc.iter_mut().for_each(|p| *p *= alpha),
                None => {}
            }
            Data::F32(Cow::from(acc)).store(dtype, out_shape)
        }
        Data::F64(x) => {
            let Data::F64(y) = Data::load(b)? else {
                return dtype_err!("B must be f64");
            };
            let mut acc = vec![0f64; m * n];
            gemm_into(
                m,
                n,
                k,
                Mat {
                    data: &x,
                    offset: 0,
                    rs: a_rs,
                    cs: a_cs,
                },
                Mat {
                    data: &y,
                    offset: 0,
                    rs: b_rs,
                    cs: b_cs,
                },
                &mut acc,
                true,
            );
            let (al, be) = (f64::from(alpha), f64::from(beta));
            let out: Vec<f64> = match c
                .map(|c| c.to_f64_vec())
                .transpose()
                .map_err(|m| Fail::new(ErrorKind::DType, m))?
            {
                Some(cv) => acc
                    .iter()
                    .zip(&cv)
                    .map(|(&p, &q)| al * p + be * q)
                    .collect(),
                None => acc.iter().map(|&p| al * p).collect(),
            };
            Data::F64(Cow::from(out)).store(dtype, out_shape)
        }
        Data::Bool(_) => dtype_err!("expects numeric inputs, got bool"),
        _ => {
            let (x, y) = (ints(a)?, ints(b)?);
            let mut acc = vec![0i64; m * n];
            for i in 0..m {
                for j in 0..n {
                    acc[i * n + j] = (0..k).fold(0i64, |s, p| {
                        s.wrapping_add(x[i * a_rs + p * a_cs].wrapping_mul(y[p * b_rs + j * b_cs]))
                    });
                }
            }
            let cv = c.map(|c| ints(&c)).transpose()?;
            // Integer alpha/beta of 1 stay exact; others go through f64 and truncate.
            let out: Vec<i64> = if alpha == 1.0 && (beta == 1.0 || cv.is_none()) {
                match cv {
                    Some(cv) => acc
                        .iter()
                        .zip(&cv)
                        .map(|(&p, &q)| p.wrapping_add(q))
                        .collect(),
                    None => acc,
                }
            } else {
                let (al, be) = (f64::from(alpha), f64::from(beta));
                acc.iter()
                    .enumerate()
                    .map(|(i, &p)| {
                        (al * p as f64 + cv.as_ref().map_or(0.0, |c| be * c[i] as f64)) as i64
                    })
                    .collect()
            };
            cast(&Tensor::from_i64(out_shape, &out), dtype, false)
        }
    }
}

/// `scaled_matmul { out, fast_accum }(qa, qb, scale_inv_a, scale_inv_b)`: both FP8 operands
/// decoded exactly to f32, multiplied with f32 accumulation (or, with `fast_accum`, the model
/// of Hopper's narrow accumulator in `fast_accum.rs`), then `acc · (sa·sb)` with the product
/// of the two scale_invs rounded to f32 first, as cuBLASLt applies `alpha = sa·sb` to the
/// accumulator in one multiply. Then rounded once to `out`.
pub(crate) fn scaled_matmul(inputs: &[&Tensor], out: DType, fast_accum: bool) -> KResult<Tensor> {
    let [a, b, sa, sb] = inputs else {
        return Fail::arity("4", inputs.len());
    };
    let (Some(fa), Some(fb)) = (fp8::format_of(a.dtype()), fp8::format_of(b.dtype())) else {
        return dtype_err!("qa and qb must be FP8, got {} and {}", a.dtype(), b.dtype());
    };
    let scalar = |t: &Tensor, what: &str| -> KResult<f32> {
        if t.dtype() != DType::F32 || t.len() != 1 {
            return dtype_err!(
                "{what} must be a one-element f32 tensor, got {} {:?}",
                t.dtype(),
                t.shape()
            );
        }
        crate::data::float_scalar_f32(t, what)
    };
    let alpha = scalar(sa, "scale_inv_a")? * scalar(sb, "scale_inv_b")?;
    let x = fp8::decode(fa, a.bytes());
    // B is decoded as each kernel packs it (no decoded copy of B).
    let table = fp8c_core::decode_table(fb);
    let (acc, shape) = if fast_accum {
        let (mut acc, shape) =
            crate::fast_accum::matmul_with(&x, a.shape(), b.bytes(), b.shape(), |q| {
                table[usize::from(q)]
            })?;
        acc.iter_mut().for_each(|p| *p *= alpha);
        (acc, shape)
    } else {
        crate::fp8_gemm::matmul(
            &x,
            a.shape(),
            (b.bytes(), Some(b.storage())),
            b.shape(),
            fb,
            alpha,
        )?
    };
    fp8::store_f32(acc, out, shape)
}
