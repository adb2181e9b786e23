//! Golden cases: every case in tests/golden/op_cases.json gives input tensors, an fp8c op and
//! the outputs onnxruntime (cross-checked against onnx.reference) or a numpy/ml_dtypes formula
//! produced for it (see tests/gen/gen_op_cases.py, which says how to regenerate it). All
//! failures are reported together. The file format and comparison live in
//! `fp8c_eval::golden`, shared with the backends' run of the same cases.

use fp8c_eval::eval_op;
use fp8c_eval::golden::{self, mismatch};
use fp8c_ir::Tensor;

#[test]
fn golden_cases_match_onnxruntime_and_numpy() {
    let cases = golden::cases(golden::CASES_JSON).expect("the case file parses");
    let n = cases.len();
    assert!(n >= 150, "expected the full case list, got {n}");
    let mut failures = Vec::new();
    for case in &cases {
        let op = match case.op() {
            Ok(op) => op,
            Err(e) => {
                failures.push(format!("{}: {e}", case.name));
                continue;
            }
        };
        let inputs = case.inputs();
        let refs: Vec<&Tensor> = inputs.iter().collect();
        let outs = match eval_op(&op, &refs) {
            Ok(o) => o,
            Err(e) => {
                failures.push(format!("{}: {e}", case.name));
                continue;
            }
        };
        let want = case.outputs();
        if outs.len() < want.len() {
            failures.push(format!(
                "{}: {} outputs, want {}",
                case.name,
                outs.len(),
                want.len()
            ));
            continue;
        }
        for (k, (got, want)) in outs.iter().zip(&want).enumerate() {
            if let Some(why) = mismatch(got, want, case.atol, case.rtol) {
                failures.push(format!(
                    "{} (output {k}, from {}): {why}",
                    case.name, case.source
                ));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {n} golden cases failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
