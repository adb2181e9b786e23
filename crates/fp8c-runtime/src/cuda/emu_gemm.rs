//! The emulated device's cuBLASLt (issue #15): a [`GemmSpec`] whose pointers are host
//! addresses is checked against cuBLASLt's FP8 rules (`gemm_rules.rs`), then computed by the
//! CPU reference's kernels: FP8 operands through `scaled_matmul` (with the fast-accumulation
//! model when the spec asks for it), 16-bit and f32 operands through an f32 `matmul`; then
//! α, β·D, the bias and tanh-GELU epilogues in f32, and for an FP8 D the amax of D (before
//! the D scale, as cuBLASLt reports it) and the scaled, saturating cast; other D types get
//! one rounding. Batches walk the spec's strides. Block-scaled modes read the scale tensors in
//! cuBLASLt's layouts ([`ScaleMode`]) back into the IR's tile grids and run the CPU's
//! `block_scaled_matmul`.
//!
//! It is a reference, not cuBLASLt's bits: cuBLASLt's summation order and its FP8 epilogue's
//! internal precision are not specified, so tests compare with a tolerance derived from K
//! (and from the accumulator width with fast accumulation).

use crate::cuda::gemm::{Epilogue, GemmSpec, ScaleMode};
use crate::cuda::gemm_rules;
use fp8c_ir::{DType, GeluApprox, Op, Tensor};

fn eval(op: &Op, inputs: &[&Tensor]) -> Result<Tensor, String> {
    fp8c_eval::eval_op(op, inputs)
        .map(|mut v| v.remove(0))
        .map_err(|e| format!("{} in the emulated GEMM: {e}", op.name()))
}

/// `count` elements of `t` at host address `p`.
///
/// # Safety
/// `p` must be valid for reading `count` elements of `t`.
unsafe fn read(p: u64, t: DType, shape: Vec<u64>) -> Result<Tensor, String> {
    let bytes = shape.iter().product::<u64>() as usize * t.size();
    // SAFETY: the caller guarantees the range.
    let data = unsafe { std::slice::from_raw_parts(p as *const u8, bytes) }.to_vec();
    Tensor::from_bytes(t, shape, data)
}

/// Reads the f32 at host address `p`.
///
/// # Safety
/// `p` must be valid for reading an f32.
unsafe fn read_f32(p: u64) -> f32 {
    // SAFETY: the caller guarantees the pointer (4-byte alignment is checked by the rules).
    unsafe { std::ptr::read_unaligned(p as *const f32) }
}

/// Runs `s` on host memory.
///
/// # Safety
/// Every pointer of `s` must be a host address valid for what the GEMM reads and writes
/// (A, B, bias, scales, α; D for `m·n` elements per batch entry at its stride).
pub unsafe fn run(s: &GemmSpec) -> Result<(), String> {
    gemm_rules::check(s)?;
    let (m, n, k) = (s.m, s.n, s.k);
    let fp8 = s.a_type.is_fp8();
    // SAFETY (every read below): the caller guarantees the spec's pointers.
    let alpha = match s.alpha_ptr {
        Some(p) => unsafe { read_f32(p) },
        None => s.alpha,
    };
    let scalar = |p: Option<u64>| Tensor::scalar_f32(p.map_or(1.0, |p| unsafe { read_f32(p) }));
    let t = |x: Tensor| eval(&Op::Transpose { perm: vec![1, 0] }, &[&x]);
    for b in 0..s.batch.max(1) {
        let (a_shape, b_shape) = (
            if s.trans_a { vec![k, m] } else { vec![m, k] },
            if s.trans_b { vec![n, k] } else { vec![k, n] },
        );
        let es = |t: DType| t.size() as u64;
        let a = unsafe { read(s.a + b * s.stride_a * es(s.a_type), s.a_type, a_shape)? };
        let bm = unsafe { read(s.b + b * s.stride_b * es(s.b_type), s.b_type, b_shape)? };
        let a = if s.trans_a { t(a)? } else { a };
        let bm = if s.trans_b { t(bm)? } else { bm };
        let mut p = if s.a_scale_mode != ScaleMode::Scalar {
            // SAFETY: the caller guarantees the scale pointers for the spec's modes.
            unsafe { block_scaled(s, &a, &bm)? }
        } else if fp8 {
            eval(
                &Op::ScaledMatMul {
                    out: DType::F32,
                    fast_accum: s.fast_accum,
                },
                &[&a, &bm, &scalar(s.a_scale), &scalar(s.b_scale)],
            )?
        } else {
            let f = |x: &Tensor| {
                eval(
                    &Op::Cast {
                        to: DType::F32,
                        saturate: false,
                    },
                    &[x],
                )
            };
            eval(&Op::MatMul, &[&f(&a)?, &f(&bm)?])?
        };
        if alpha != 1.0 {
            p = eval(&Op::Mul, &[&p, &Tensor::scalar_f32(alpha)])?;
        }
        let d_addr = s.d + b * s.stride_d * es(s.d_type);
        if s.beta != 0.0 {
            let old = unsafe { read(d_addr, s.d_type, vec![m, n])? };
            let old = eval(
                &Op::Cast {
                    to: DType::F32,
                    saturate: false,
                },
                &[&old],
            )?;
            let old = eval(&Op::Mul, &[&old, &Tensor::scalar_f32(s.beta)])?;
            p = eval(&Op::Add, &[&p, &old])?;
        }
        if let (Epilogue::Bias | Epilogue::GeluBias, Some((bp, bt))) = (s.epilogue, s.bias) {
            let bias = unsafe { read(bp, bt, vec![n])? };
            let bias = eval(
                &Op::Cast {
                    to: DType::F32,
                    saturate: false,
                },
                &[&bias],
            )?;
            p = eval(&Op::Add, &[&p, &bias])?;
        }
        if matches!(s.epilogue, Epilogue::Gelu | Epilogue::GeluBias) {
            p = eval(
                &Op::Gelu {
                    approximate: GeluApprox::Tanh,
                },
                &[&p],
            )?;
        }
        let d = if s.d_type.is_fp8() {
            if let Some(ap) = s.amax_d {
                let amax = eval(&Op::Amax, &[&p])?.to_f32_vec()?[0];
                // SAFETY: the caller guarantees the amax pointer; cuBLASLt writes it.
                unsafe { std::ptr::write_unaligned(ap as *mut f32, amax) };
            }
            eval(
                &Op::Quantize {
                    to: s.d_type,
                    saturate: true,
                },
                &[&p, &scalar(s.d_scale)],
            )?
        } else {
            eval(
                &Op::Cast {
                    to: s.d_type,
                    saturate: false,
                },
                &[&p],
            )?
        };
        let bytes = d.bytes();
        // SAFETY: the caller guarantees D's range for this batch entry.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), d_addr as *mut u8, bytes.len()) };
    }
    Ok(())
}

/// The block-scaled product of `a` `[m, k]` and `b` `[k, n]` (both FP8) under the spec's
/// scale modes: the scale tensors are read in cuBLASLt's layouts into the IR's grids
/// (`block_scaled_matmul`'s `scale_inv_a [ceil(m/a_rows), KB]`, `scale_inv_b [KB,
/// ceil(n/b_cols)]`), then the CPU reference computes it.
///
/// # Safety
/// `s.a_scale` and `s.b_scale` must be host addresses valid for their modes' sizes.
unsafe fn block_scaled(s: &GemmSpec, a: &Tensor, b: &Tensor) -> Result<Tensor, String> {
    let (m, n, k) = (s.m as usize, s.n as usize, s.k as usize);
    let (Some(pa), Some(pb)) = (s.a_scale, s.b_scale) else {
        return Err("a block-scaled GEMM needs both scale pointers".into());
    };
    let floats = |p: u64, count: usize| -> Vec<f32> {
        // SAFETY: the caller guarantees the range.
        unsafe { std::slice::from_raw_parts(p as *const f32, count) }.to_vec()
    };
    let (k_block, kb) = match s.a_scale_mode {
        ScaleMode::OuterVec => (0i64, 1usize),
        _ => (128, k.div_ceil(128)),
    };
    // A's grid [m, KB]: per row (OuterVec, KB = 1) or (row, kb) at kb·m + row (Vec128).
    let raw_a = floats(pa, m * kb);
    let mut grid_a = vec![0f32; m * kb];
    for row in 0..m {
        for blk in 0..kb {
            grid_a[row * kb + blk] = raw_a[blk * m + row];
        }
    }
    // B's grid [KB, NB] from B stored [n, k]: per column (OuterVec), (col, kb) at kb·n + col
    // (Vec128), or (nb, kb) at nb·KB + kb (Blk128).
    let (b_cols, nb) = match s.b_scale_mode {
        ScaleMode::Blk128 => (128i64, n.div_ceil(128)),
        _ => (1, n),
    };
    let raw_b = floats(pb, kb * nb);
    let mut grid_b = vec![0f32; kb * nb];
    for blk in 0..kb {
        for col in 0..nb {
            grid_b[blk * nb + col] = match s.b_scale_mode {
                ScaleMode::Blk128 => raw_b[col * kb + blk],
                _ => raw_b[blk * nb + col],
            };
        }
    }
    let ta = Tensor::from_f32(vec![m as u64, kb as u64], &grid_a);
    let tb = Tensor::from_f32(vec![kb as u64, nb as u64], &grid_b);
    eval(
        &Op::BlockScaledMatMul {
            out: DType::F32,
            k_block,
            a_rows: 1,
            b_cols,
        },
        &[a, b, &ta, &tb],
    )
}
