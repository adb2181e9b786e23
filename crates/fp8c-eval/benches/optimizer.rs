//! The AdamW step of the CPU reference (`adamw_update` on FP32 master weights, issue #19)
//! next to a peer: a plain in-place f32 loop over the same four arrays (what PyTorch's
//! single-tensor AdamW does per parameter), one thread. The ratio is what BENCHMARKS.md
//! records; the reference also allocates its three outputs and may use both threads.
//!
//! `cargo bench -p fp8c-eval --bench optimizer`

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use fp8c_eval::eval_op;
use fp8c_ir::{Op, Tensor};
use std::hint::black_box;
use std::time::Duration;

fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(6364136223846793005) | 1;
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

fn adamw(c: &mut Criterion) {
    let mut group = c.benchmark_group("adamw");
    group.measurement_time(Duration::from_secs(4));
    for n in [1usize << 16, 1 << 22] {
        group.throughput(Throughput::Elements(n as u64));
        let (p, g, m) = (values(n, 1), values(n, 2), values(n, 3));
        let v: Vec<f32> = values(n, 4).iter().map(|x| x * x).collect();
        let t = |x: &[f32]| Tensor::from_f32(vec![n as u64], x);
        let (tp, tg, tm, tv) = (t(&p), t(&g), t(&m), t(&v));
        let (lr, step) = (Tensor::scalar_f32(1e-3), Tensor::scalar_f32(3.0));
        let op = Op::AdamwUpdate {
            beta1: 0.9,
            beta2: 0.999,
            epsilon: 1e-8,
            weight_decay: 0.01,
        };
        group.bench_with_input(BenchmarkId::new("fp8c adamw_update", n), &n, |b, _| {
            b.iter(|| eval_op(&op, black_box(&[&tp, &tg, &tm, &tv, &lr, &step])).unwrap())
        });
        let (mut pp, mut mm, mut vv) = (p.clone(), m.clone(), v.clone());
        group.bench_with_input(BenchmarkId::new("peer in-place f32 loop", n), &n, |b, _| {
            b.iter(|| {
                let (lr, b1, b2, eps, wd) = (1e-3f32, 0.9f32, 0.999f32, 1e-8f32, 0.01f32);
                let (bc1, bc2) = (1.0 - b1.powf(3.0), 1.0 - b2.powf(3.0));
                for i in 0..n {
                    let gi = g[i];
                    pp[i] -= lr * wd * pp[i];
                    mm[i] = b1 * mm[i] + (1.0 - b1) * gi;
                    vv[i] = b2 * vv[i] + (1.0 - b2) * gi * gi;
                    pp[i] -= lr * (mm[i] / bc1) / ((vv[i] / bc2).sqrt() + eps);
                }
                black_box(&pp);
            })
        });
    }
    group.finish();
}

criterion_group!(benches, adamw);
criterion_main!(benches);
