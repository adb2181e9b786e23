//! Transcendental elementwise ops of the CPU reference (`exp`, `tanh`, `sigmoid`, `gelu`
//! with tanh) on a 64 Ki-element f32 tensor, one call each, throughput in elements: what
//! `fp8c_ir::fmath`'s polynomial costs inside the vectorised unary map (issue #19).
//!
//! `cargo bench -p fp8c-eval --bench unary`

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use fp8c_eval::eval_op;
use fp8c_ir::{DType, Op, Tensor};
use std::hint::black_box;

fn unary(c: &mut Criterion) {
    let n = 1usize << 16;
    // Spread over [-10, 10): both branches of sigmoid, tanh's saturation, exp's range.
    let x: Vec<f32> = (0..n)
        .map(|i| ((i * 7919 % n) as f32 / n as f32 - 0.5) * 20.0)
        .collect();
    let x = Tensor::from_vec(DType::F32, vec![n as u64], x).expect("a tensor");
    let mut group = c.benchmark_group("unary_64Ki");
    group.throughput(Throughput::Elements(n as u64));
    let gelu = Op::Gelu {
        approximate: fp8c_ir::GeluApprox::Tanh,
    };
    for (name, op) in [
        ("exp", Op::Exp),
        ("tanh", Op::Tanh),
        ("sigmoid", Op::Sigmoid),
        ("gelu_tanh", gelu),
    ] {
        group.bench_function(name, |b| {
            b.iter(|| black_box(eval_op(&op, &[&x]).expect("the op runs")))
        });
    }
    group.finish();
}

criterion_group!(benches, unary);
criterion_main!(benches);
