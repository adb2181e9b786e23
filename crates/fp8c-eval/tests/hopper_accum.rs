//! fp8c-eval's FP8 GEMM accumulation against a real H100.
//!
//! `tests/golden/hw/h100_fp8_accum.npz` was written on an NVIDIA H100 80GB HBM3 (driver
//! 580.159.04, torch 2.11) by `scripts/bench/fp8_accum_probe.py`, run by `scripts/gpu-check.sh`:
//! E4M3 operands (64×K and K×64, unit scales) multiplied by cuBLASLt's FP8 GEMM
//! (`torch._scaled_mm`) with and without fast accumulation, for K = 64, 512 and 4096. The
//! hardware is the independent reference here; the test states how close each CPU model is:
//! - `scaled_matmul { fast_accum: true }` (fp8c-eval's `fast_accum.rs`, 14 bits per 32-product
//!   block) must be far closer to the hardware's fast accumulation than exact f32 summation is;
//! - `fast_accum: false` (f32 summation) must be within 2^-12 of the hardware's split
//!   accumulation, which itself truncates inside each block (about 1.3e-4 at every K).
//!
//! `cargo test --release -p fp8c-eval --test hopper_accum -- --nocapture` prints the table.

use fp8c_eval::eval_op;
use fp8c_ir::{DType, Op, Tensor};
use std::collections::BTreeMap;
use std::io::Read;

const NPZ: &[u8] = include_bytes!("golden/hw/h100_fp8_accum.npz");

/// Every array of the archive as (shape, little-endian bytes, numpy type string).
fn arrays() -> BTreeMap<String, (Vec<u64>, Vec<u8>, String)> {
    let mut zip = zip::ZipArchive::new(std::io::Cursor::new(NPZ)).expect("the npz opens");
    let mut out = BTreeMap::new();
    for i in 0..zip.len() {
        let mut f = zip.by_index(i).unwrap();
        let name = f.name().trim_end_matches(".npy").to_string();
        let mut bytes = Vec::new();
        f.read_to_end(&mut bytes).unwrap();
        let npy = npyz::NpyFile::new(&bytes[..]).unwrap();
        let shape = npy.shape().to_vec();
        let ty = npy.dtype().descr().trim_matches('\'').to_string();
        assert_eq!(npy.order(), npyz::Order::C, "{name}");
        let header = bytes.len() - npy.len() as usize * npy.dtype().num_bytes().unwrap_or(0);
        out.insert(name, (shape, bytes[header..].to_vec(), ty));
    }
    out
}

fn rel_l2(a: &[f64], b: &[f64]) -> f64 {
    let num: f64 = a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum();
    let den: f64 = b.iter().map(|y| y * y).sum();
    (num / den).sqrt()
}

#[test]
fn cpu_accumulation_models_against_the_h100() {
    let z = arrays();
    let codes = |key: &str| {
        let (shape, bytes, ty) = &z[key];
        assert_eq!(ty, "|u1", "{key}");
        Tensor::from_bytes(DType::F8E4M3, shape.clone(), bytes.clone()).unwrap()
    };
    let f32s = |key: &str| -> Vec<f64> {
        let (_, bytes, ty) = &z[key];
        assert_eq!(ty, "<f4", "{key}");
        bytes
            .chunks_exact(4)
            .map(|b| f64::from(f32::from_le_bytes(b.try_into().unwrap())))
            .collect()
    };
    let one = Tensor::from_f32(vec![], &[1.0]);
    let mut ks: Vec<u64> = z
        .keys()
        .filter_map(|k| k.strip_prefix("a_k").and_then(|v| v.parse().ok()))
        .collect();
    ks.sort();
    assert_eq!(ks, [64, 512, 4096], "the probe's K values");
    println!(
        "{:>6} {:>26} {:>26} {:>24}",
        "K", "fast model vs H100 fast", "f32 sum vs H100 fast", "f32 sum vs H100 split"
    );
    for k in ks {
        let a = codes(&format!("a_k{k}"));
        // The probe multiplied a @ b.T with b as [n, k]: transpose the codes to [k, n].
        let bt = codes(&format!("b_k{k}"));
        let (n, kk) = (bt.shape()[0] as usize, bt.shape()[1] as usize);
        let mut b = vec![0u8; n * kk];
        for (r, row) in bt.bytes().chunks_exact(kk).enumerate() {
            for (c, &v) in row.iter().enumerate() {
                b[c * n + r] = v;
            }
        }
        let b = Tensor::from_bytes(DType::F8E4M3, vec![kk as u64, n as u64], b).unwrap();
        let run = |fast_accum| -> Vec<f64> {
            let op = Op::ScaledMatMul {
                out: DType::F32,
                fast_accum,
            };
            eval_op(&op, &[&a, &b, &one, &one]).unwrap()[0]
                .to_f64_vec()
                .unwrap()
        };
        let (model, exact) = (run(true), run(false));
        let (hw_fast, hw_split) = (
            f32s(&format!("y_k{k}_fast")),
            f32s(&format!("y_k{k}_split")),
        );
        let model_fast = rel_l2(&model, &hw_fast);
        let exact_fast = rel_l2(&exact, &hw_fast);
        let exact_split = rel_l2(&exact, &hw_split);
        println!("{k:>6} {model_fast:>26.3e} {exact_fast:>26.3e} {exact_split:>24.3e}");
        // Split accumulation: the hardware truncates inside each block, then adds in f32.
        assert!(exact_split <= 2f64.powi(-12), "K={k}: {exact_split:.3e}");
        // Fast accumulation: the model tracks the hardware's truncation. At K = 64 (two
        // blocks) both modes are the same on the H100, and so within the split bound.
        assert!(model_fast <= 2f64.powi(-12), "K={k}: {model_fast:.3e}");
        if k >= 512 {
            assert!(
                model_fast * 4.0 <= exact_fast,
                "K={k}: the fast-accumulation model ({model_fast:.3e}) is not much closer to the H100 than f32 summation ({exact_fast:.3e})"
            );
        }
    }
}
