//! Times the CPU attention kernels (forward, then backward) on one causal grouped-query
//! attention the size of a Llama layer's: `cargo run --release -p fp8c-eval --example
//! attention_timing -- [T] [B] [reps]` (default T 4096, B 1, 3 repetitions; 8 heads of 64,
//! 4 KV heads). Prints wall time and GFLOP/s (the FLOPs of the causal products: 2 in the
//! forward, 5 in the backward, half the T² of each); run under `/usr/bin/time` for CPU time.

use fp8c_ir::{DType, Op, Tensor};
use std::time::Instant;

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse().unwrap())
        .collect();
    let t = args.first().copied().unwrap_or(4096);
    let b = args.get(1).copied().unwrap_or(1);
    let reps = args.get(2).copied().unwrap_or(3);
    let (h, hkv, d) = (8usize, 4usize, 64usize);
    let mut state = 1u64;
    let mut vals = |n: usize| -> Vec<f32> {
        (0..n)
            .map(|_| {
                state = state.wrapping_mul(6364136223846793005).wrapping_add(1);
                ((state >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
            })
            .collect()
    };
    let shape = |heads: usize| vec![b as u64, heads as u64, t as u64, d as u64];
    let q = Tensor::from_f32(shape(h), &vals(b * h * t * d));
    let k = Tensor::from_f32(shape(hkv), &vals(b * hkv * t * d));
    let v = Tensor::from_f32(shape(hkv), &vals(b * hkv * t * d));
    let d_o = Tensor::from_f32(shape(h), &vals(b * h * t * d));
    let scale = 1.0 / (d as f64).sqrt();
    let fwd = Op::Attention {
        scale,
        causal: true,
    };
    let bwd = Op::AttentionGrad {
        scale,
        causal: true,
    };
    let flop = 2.0 * (b * h) as f64 * (t * t) as f64 / 2.0 * d as f64;
    for _ in 0..reps {
        let t0 = Instant::now();
        let out = fp8c_eval::eval_op(&fwd, &[&q, &k, &v]).unwrap();
        let tf = t0.elapsed().as_secs_f64();
        let t1 = Instant::now();
        let g = fp8c_eval::eval_op(&bwd, &[&q, &k, &v, &out[0], &out[1], &d_o]).unwrap();
        let tb = t1.elapsed().as_secs_f64();
        assert_eq!(g.len(), 3);
        assert_eq!(out[0].dtype(), DType::F32);
        println!(
            "T {t} B {b}: forward {:.3} s ({:.1} GFLOP/s), backward {:.3} s ({:.1} GFLOP/s)",
            tf,
            2.0 * flop / tf / 1e9,
            tb,
            5.0 * flop / tb / 1e9
        );
    }
}
