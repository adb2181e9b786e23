//! Throughput of the CPU cast kernels (elements per second), recorded in BENCHMARKS.md.
//!
//! Run: `cargo bench -p fp8c-core --bench casts`. Kept short (small sample sizes) so a full run
//! takes well under two minutes.

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use fp8c_core::{
    Fp8Format, amax_f32, decode_slice, dequantize_slice, encode_f32_slice, float8_ref,
    quantize_slice,
};

const N: usize = 1 << 20;

/// Deterministic activations-like data: mostly in FP8 range, a few outliers and subnormals.
fn input() -> Vec<f32> {
    let mut state = 0x1234_5678_9ABC_DEF0u64;
    (0..N)
        .map(|_| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let u = (state >> 40) as f32 / (1u64 << 24) as f32; // [0, 1)
            (u - 0.5) * 2.0f32.powi(((state >> 20) % 24) as i32 - 12)
        })
        .collect()
}

fn casts(c: &mut Criterion) {
    let src = input();
    let mut codes = vec![0u8; N];
    let mut out = vec![0f32; N];
    let mut g = c.benchmark_group("casts");
    g.throughput(Throughput::Elements(N as u64))
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));

    for fmt in Fp8Format::ALL {
        g.bench_function(format!("encode_f32_{fmt}_sat"), |b| {
            b.iter(|| encode_f32_slice(fmt, black_box(&src), &mut codes, true))
        });
    }
    // For comparison: the float8 crate's scalar conversion (via f64, branchy), wrapped.
    g.bench_function("float8_ref_encode_f32_e4m3_sat", |b| {
        b.iter(|| {
            for (d, &x) in codes.iter_mut().zip(black_box(&src)) {
                *d = float8_ref::encode_f32(Fp8Format::E4M3, x, true);
            }
        })
    });
    g.bench_function("encode_f32_e4m3_nosat", |b| {
        b.iter(|| encode_f32_slice(Fp8Format::E4M3, black_box(&src), &mut codes, false))
    });
    g.bench_function("quantize_slice_e4m3_sat", |b| {
        b.iter(|| quantize_slice(Fp8Format::E4M3, black_box(&src), 3.5, &mut codes, true))
    });
    encode_f32_slice(Fp8Format::E4M3, &src, &mut codes, true);
    g.bench_function("decode_e4m3", |b| {
        b.iter(|| decode_slice(Fp8Format::E4M3, black_box(&codes), &mut out))
    });
    g.bench_function("dequantize_slice_e4m3", |b| {
        b.iter(|| dequantize_slice(Fp8Format::E4M3, black_box(&codes), 0.25, &mut out))
    });
    g.bench_function("amax_f32", |b| b.iter(|| amax_f32(black_box(&src))));
    g.finish();
}

criterion_group!(benches, casts);
criterion_main!(benches);
