//! Every one of the 2^32 f32 bit patterns through the fast encoder and the float8-crate
//! wrapper, both formats, both saturate modes. Too slow for the test suite (about 2 minutes
//! on 2 cores in release; the golden tables cover the rounding rules there); run it after
//! touching either encoder:
//!
//! `cargo run -p fp8c-core --release --example exhaustive_f32`

use fp8c_core::{Fp8Format, encode_f32, float8_ref};

fn main() {
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get()) as u64;
    let chunk = (1u64 << 32).div_ceil(threads);
    let mismatches: u64 = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                scope.spawn(move || {
                    let mut bad = 0u64;
                    for bits in (t * chunk)..((t + 1) * chunk).min(1 << 32) {
                        let x = f32::from_bits(bits as u32);
                        for fmt in Fp8Format::ALL {
                            for sat in [true, false] {
                                if encode_f32(fmt, x, sat) != float8_ref::encode_f32(fmt, x, sat) {
                                    if bad < 10 {
                                        eprintln!("{fmt} saturate={sat} input {bits:#010x}");
                                    }
                                    bad += 1;
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
    println!("all 2^32 f32 patterns x 2 formats x 2 modes: {mismatches} mismatches");
    if mismatches != 0 {
        std::process::exit(1);
    }
}
