//! The evaluator's golden op cases (`fp8c_eval::golden`: onnxruntime, onnx's reference
//! evaluator and ml_dtypes outputs) on the CUDA backend, written once for every backend: each
//! case becomes a one-node program (its inputs as graph inputs) that runs on the GPU when there
//! is one, else on the emulated device (issue #15). Ops the CUDA backend does not support are
//! counted with their stated reason, not failed; every supported case must match the
//! reference within the case's own tolerance, as the CPU does (`fp8c-eval/tests/golden.rs`).
//! Preparing resolves every kernel the lowering asks for by name in its module, so a name the
//! module lacks fails here too.

use fp8c_eval::golden::{self, mismatch};
use fp8c_ir::Support;
use fp8c_runtime::{Backend, CudaBackend, CudaOptions, lower};
use std::collections::BTreeMap;

fn cuda() -> (CudaBackend, &'static str) {
    let real = CudaBackend::new(CudaOptions::default());
    if real.check().is_ok() {
        return (real, "the GPU");
    }
    assert!(
        std::env::var_os("FP8C_REQUIRE_GPU").is_none(),
        "FP8C_REQUIRE_GPU is set but the CUDA backend cannot run"
    );
    let emulated = CudaBackend::new(CudaOptions {
        emulated: true,
        ..Default::default()
    });
    (emulated, "the emulated device")
}

#[test]
fn golden_op_cases_on_the_cuda_backend() {
    let (backend, place) = cuda();
    let cases = golden::cases(golden::CASES_JSON).unwrap();
    let (mut ran, mut failures) = (0usize, Vec::new());
    let mut unsupported: BTreeMap<String, usize> = BTreeMap::new();
    for case in &cases {
        let op = case.op().unwrap();
        if let Support::No(why) = fp8c_runtime::cuda::support(&op) {
            *unsupported
                .entry(format!("{}: {why}", op.name()))
                .or_default() += 1;
            continue;
        }
        let (g, feed) = match case.program() {
            Ok(p) => p,
            Err(e) => {
                failures.push(format!("{}: {e}", case.name));
                continue;
            }
        };
        // Lowering and preparing say which ops or operand types the backend does not take
        // (with the reason); anything failing later is a failure.
        let prepared = lower(&g)
            .map_err(|e| e.to_string())
            .and_then(|p| backend.prepare(&p, g.weights()).map_err(|e| e.to_string()));
        let mut exe = match prepared {
            Ok(exe) => exe,
            // A kernel the lowering asks for that its module lacks is a bug, not a limit.
            Err(e) if e.contains(" is not in ") => {
                failures.push(format!("{}: {e}", case.name));
                continue;
            }
            Err(e) => {
                let why = e.rsplit(": ").next().unwrap_or(&e).to_string();
                *unsupported
                    .entry(format!("{} ({why})", op.name()))
                    .or_default() += 1;
                continue;
            }
        };
        let got = match exe.run(&feed) {
            Ok(r) => r,
            Err(e) => {
                failures.push(format!("{}: {e}", case.name));
                continue;
            }
        };
        ran += 1;
        for (k, want) in case.outputs().iter().enumerate() {
            let Some(got) = got.get(&format!("out{k}")) else {
                failures.push(format!("{}: no output {k}", case.name));
                continue;
            };
            if let Some(why) = mismatch(got, want, case.atol, case.rtol) {
                failures.push(format!(
                    "{} (output {k}, from {}): {why}",
                    case.name, case.source
                ));
            }
        }
    }
    let skipped: usize = unsupported.values().sum();
    // Straight to stderr, past the test harness's capture: CI's log shows the counts.
    use std::io::Write;
    let mut err = std::io::stderr();
    let _ = writeln!(
        err,
        "{ran} of {} golden cases ran on {place}; {skipped} use ops or operand types the CUDA backend does not support (refused when the program is prepared):",
        cases.len()
    );
    for (why, n) in &unsupported {
        let _ = writeln!(err, "  {n} x {why}");
    }
    assert!(
        failures.is_empty(),
        "{} golden cases differ on {place}:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(ran >= 100, "only {ran} cases ran");
}
