//! Every one of the 2^32 f32 bit patterns through the fast encoder and the float8-crate
//! wrapper, both formats, both saturate modes; and through the slice kernels
//! (`encode_f32_slice`, `quantize_slice` at scale 1.5, their SIMD copies where the CPU has
//! AVX2) against the one-value functions. Too slow for the test suite (a few minutes on 2
//! cores in release; the golden tables cover the rounding rules there); run it after touching
//! an encoder or the slice loops:
//!
//! `cargo run -p fp8c-core --release --example exhaustive_f32`

use fp8c_core::{Fp8Format, encode_f32, encode_f32_slice, float8_ref, quantize, quantize_slice};

/// Patterns per slice call.
const BLOCK: u64 = 1 << 16;

fn main() {
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get()) as u64;
    let chunk = (1u64 << 32).div_ceil(threads).next_multiple_of(BLOCK);
    let mismatches: u64 = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                scope.spawn(move || {
                    let mut bad = 0u64;
                    let mut report = |what: &str, fmt: Fp8Format, sat: bool, bits: u64| {
                        if bad < 10 {
                            eprintln!("{what}: {fmt} saturate={sat} input {bits:#010x}");
                        }
                        bad += 1;
                    };
                    let mut codes = vec![0u8; BLOCK as usize];
                    let end = ((t + 1) * chunk).min(1 << 32);
                    for start in ((t * chunk)..end).step_by(BLOCK as usize) {
                        let xs: Vec<f32> = (start..start + BLOCK)
                            .map(|b| f32::from_bits(b as u32))
                            .collect();
                        for fmt in Fp8Format::ALL {
                            for sat in [true, false] {
                                encode_f32_slice(fmt, &xs, &mut codes, sat);
                                for (i, (&x, &c)) in xs.iter().zip(&codes).enumerate() {
                                    let one = encode_f32(fmt, x, sat);
                                    if one != float8_ref::encode_f32(fmt, x, sat) {
                                        report("encode_f32", fmt, sat, start + i as u64);
                                    }
                                    if c != one {
                                        report("encode_f32_slice", fmt, sat, start + i as u64);
                                    }
                                }
                                quantize_slice(fmt, &xs, 1.5, &mut codes, sat);
                                for (i, (&x, &c)) in xs.iter().zip(&codes).enumerate() {
                                    if c != quantize(fmt, x, 1.5, sat) {
                                        report("quantize_slice", fmt, sat, start + i as u64);
                                    }
                                }
                            }
                        }
                    }
                    bad
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).sum()
    });
    println!(
        "all 2^32 f32 patterns x 2 formats x 2 modes (scalar, slice, quantize): {mismatches} mismatches"
    );
    if mismatches != 0 {
        std::process::exit(1);
    }
}
