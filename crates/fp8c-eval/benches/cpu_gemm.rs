//! CPU reference kernels that matter for speed: the FP8-emulated GEMM (`scaled_matmul`:
//! decode both operands to f32, f32 GEMM or the fast-accumulation model, scale) against the plain f32 GEMM at 512³ and
//! 1024³, and the quantize + amax pair every FP8 tensor goes through.
//!
//! `cargo bench -p fp8c-eval --bench cpu_gemm`; results are recorded in BENCHMARKS.md
//! ("CPU runtime").

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use fp8c_eval::eval_op;
use fp8c_ir::{DType, Op, Tensor};
use std::hint::black_box;
use std::time::Duration;

/// Deterministic values in [-1, 1) (a 64-bit LCG; no dependence on a rand crate).
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

fn f32_matrix(rows: u64, cols: u64, seed: u64) -> Tensor {
    Tensor::from_f32(vec![rows, cols], &values((rows * cols) as usize, seed))
}

fn run(op: &Op, inputs: &[&Tensor]) -> Vec<Tensor> {
    eval_op(op, inputs).expect("benchmark op evaluates")
}

/// E4M3 operand: `x` quantized with the scale current scaling would pick.
fn quantized(x: &Tensor) -> (Tensor, Tensor) {
    let amax = run(&Op::Amax, &[x]).remove(0);
    let a = amax.to_f32_vec().unwrap()[0];
    let scale = Tensor::scalar_f32(448.0 / a);
    let q = run(
        &Op::Quantize {
            to: DType::F8E4M3,
            saturate: true,
        },
        &[x, &scale],
    )
    .remove(0);
    (q, Tensor::scalar_f32(a / 448.0))
}

fn gemm(c: &mut Criterion) {
    let mut group = c.benchmark_group("cpu_gemm");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    for n in [512u64, 1024] {
        let (a, b) = (f32_matrix(n, n, 1), f32_matrix(n, n, 2));
        let ((qa, sa), (qb, sb)) = (quantized(&a), quantized(&b));
        group.throughput(Throughput::Elements(2 * n * n * n));
        group.bench_with_input(BenchmarkId::new("f32", n), &n, |bench, _| {
            bench.iter(|| black_box(run(&Op::MatMul, &[&a, &b])))
        });
        for (name, fast_accum) in [("fp8_e4m3", false), ("fp8_e4m3_fast_accum", true)] {
            let op = Op::ScaledMatMul {
                out: DType::F32,
                fast_accum,
            };
            group.bench_with_input(BenchmarkId::new(name, n), &n, |bench, _| {
                bench.iter(|| black_box(run(&op, &[&qa, &qb, &sa, &sb])))
            });
        }
    }
    group.finish();
}

fn quantize_amax(c: &mut Criterion) {
    let mut group = c.benchmark_group("cpu_quantize");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    let n: u64 = 1 << 22; // 4 Mi elements, 16 MiB of f32
    let x = Tensor::from_f32(vec![n], &values(n as usize, 3));
    let scale = Tensor::scalar_f32(100.0);
    let q = Op::Quantize {
        to: DType::F8E4M3,
        saturate: true,
    };
    group.throughput(Throughput::Bytes(4 * n));
    group.bench_function("amax_4Mi", |bench| {
        bench.iter(|| black_box(run(&Op::Amax, &[&x])))
    });
    group.bench_function("quantize_4Mi", |bench| {
        bench.iter(|| black_box(run(&q, &[&x, &scale])))
    });
    group.bench_function("amax+quantize_4Mi", |bench| {
        bench.iter(|| {
            let a = run(&Op::Amax, &[&x]);
            black_box(run(&q, &[&x, &scale]));
            black_box(a)
        })
    });
    // The fusion pass's single-read form (the CPU evaluates it as the two ops above).
    let fused = Op::QuantizeAmax {
        to: DType::F8E4M3,
        saturate: true,
    };
    group.bench_function("quantize_amax_fused_4Mi", |bench| {
        bench.iter(|| black_box(run(&fused, &[&x, &scale])))
    });
    group.finish();
}

criterion_group!(benches, gemm, quantize_amax);
criterion_main!(benches);
