//! Every f32 through `fmath::exp_f32` and `tanh_f32` (Estrin's scheme) against the same
//! functions with Horner's rule (the order the MLIR emitter builds): prints the mismatches,
//! exits non-zero if there is any. `cargo run -p fp8c-ir --release --example exhaustive_fmath`
//! (a few minutes on two cores).

use fp8c_ir::fmath::{exp_f32, exp_tanh_with, expm1_horner, tanh_f32};
use rayon::prelude::*;

fn main() {
    let same = |a: f32, b: f32| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan());
    let bad: u64 = (0u32..1 << 16)
        .into_par_iter()
        .map(|hi| {
            let mut bad = 0;
            for lo in 0u32..1 << 16 {
                let x = f32::from_bits(hi << 16 | lo);
                let (e, t) = exp_tanh_with(x, expm1_horner);
                for (what, got, want) in [("exp", exp_f32(x), e), ("tanh", tanh_f32(x), t)] {
                    if !same(got, want) {
                        bad += 1;
                        if bad <= 5 {
                            eprintln!("{what}({x:e}): {got:e} vs {want:e}");
                        }
                    }
                }
            }
            bad
        })
        .sum();
    println!("exp_f32, tanh_f32: {bad} mismatches over all 2^32 f32 inputs");
    if bad > 0 {
        std::process::exit(1);
    }
}
