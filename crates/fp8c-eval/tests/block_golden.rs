//! Fine-grained FP8 scaling (issue #16) bit for bit against an independent reference:
//! `tests/golden/block_cases.json`, made by `tests/gen/gen_block_cases.py` with numpy and
//! ml_dtypes from the published formulas (tile amax and scale, TE's power-of-two scales, the
//! OCP MX v1.0 E8M0 rule, DeepSeek-V3's per-block promotion), never from fp8c's output. Every
//! element of every output is compared (any NaN equals any NaN) and the mismatch count of each
//! case is printed: `cargo test --release -p fp8c-eval --test block_golden -- --nocapture`.

use fp8c_eval::eval_op;
use fp8c_eval::golden;
use fp8c_ir::{DType, Tensor};

const CASES: &str = include_str!("golden/block_cases.json");

/// Elements of `got` that differ from `want` (bits, NaN matching NaN), and the element count.
fn mismatches(got: &Tensor, want: &Tensor) -> (usize, usize) {
    assert_eq!(got.ty(), want.ty(), "types differ");
    let es = want.dtype().size();
    let is_nan = |b: &[u8]| -> bool {
        match want.dtype() {
            DType::F32 => f32::from_le_bytes(b.try_into().unwrap()).is_nan(),
            DType::F8E4M3 => b[0] & 0x7F == 0x7F,
            DType::F8E5M2 => b[0] & 0x7F > 0x7C,
            _ => false,
        }
    };
    let bad = got
        .bytes()
        .chunks_exact(es)
        .zip(want.bytes().chunks_exact(es))
        .filter(|(g, w)| g != w && !(is_nan(g) && is_nan(w)))
        .count();
    (bad, want.bytes().len() / es)
}

#[test]
fn block_scaling_matches_the_numpy_reference_bit_for_bit() {
    let cases = golden::cases(CASES).expect("block_cases.json parses");
    assert!(
        cases.len() >= 20,
        "expected the full case list, got {}",
        cases.len()
    );
    let (mut total, mut bad_total) = (0usize, 0usize);
    let mut failures = Vec::new();
    for case in &cases {
        let op = case.op().unwrap_or_else(|e| panic!("{}: {e}", case.name));
        let inputs = case.inputs();
        let refs: Vec<&Tensor> = inputs.iter().collect();
        let outs = eval_op(&op, &refs).unwrap_or_else(|e| panic!("{}: {e}", case.name));
        let want = case.outputs();
        assert_eq!(outs.len(), want.len(), "{}", case.name);
        let (mut bad, mut n) = (0, 0);
        for (g, w) in outs.iter().zip(&want) {
            let (b, c) = mismatches(g, w);
            bad += b;
            n += c;
        }
        eprintln!("{:52} {n:6} elements, {bad} mismatches", case.name);
        if bad > 0 {
            failures.push(case.name.clone());
        }
        total += n;
        bad_total += bad;
    }
    eprintln!(
        "{} block-scaling cases, {total} elements, {bad_total} mismatches",
        cases.len()
    );
    assert!(failures.is_empty(), "cases with mismatches: {failures:?}");
}
