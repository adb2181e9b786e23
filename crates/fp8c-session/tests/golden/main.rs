//! The golden cases on every device, through one driver (`driver.rs`; the per-device rules are
//! in `devices.rs`). Two case files in `fp8c_eval::golden`'s format, both from independent
//! references by committed scripts:
//! - the op cases (`crates/fp8c-eval/tests/golden/op_cases.json`, `gen/gen_op_cases.py`):
//!   onnxruntime cross-checked against onnx's reference evaluator, numpy and ml_dtypes for the
//!   FP8 and bf16 ones;
//! - the block-scaling cases (`block_cases.json`, `gen/gen_block_cases.py`): tile amaxes and
//!   scales, TE's power-of-two scales, OCP MX's E8M0 rule with subnormal and clamped amaxes,
//!   DeepSeek-V3's per-block promotion, numpy and ml_dtypes from the published formulas; bit
//!   for bit.
//!
//! Devices: the CPU, the CUDA backend on the emulated device (always: it needs a C++ compiler,
//! no GPU), a real GPU when there is one (`FP8C_REQUIRE_GPU=1` makes its absence a failure;
//! without a GPU that test returns early, the emulated twin having run the same cases through
//! the same lowering), and MLIR's JIT in a build with the `mlir` feature
//! (`scripts/env/mlir-env.sh cargo test --release -p fp8c-session --features mlir --test
//! golden`). Each test prints how many cases ran and why the others did not (`-- --nocapture`
//! is not needed: the counts go straight to stderr).

mod devices;
mod driver;

use driver::{CaseSet, Tally, assert_no_failures, run};
use fp8c_session::Device;
use std::io::Write;

const OP_CASES: CaseSet = CaseSet {
    what: "op cases",
    json: fp8c_eval::golden::CASES_JSON,
    min_cases: 205,
};

const BLOCK_CASES: CaseSet = CaseSet {
    what: "block-scaling cases",
    json: fp8c_eval::golden::BLOCK_CASES_JSON,
    min_cases: 28,
};

/// Fails unless every case of `set` ran on `device` and matched.
fn all_run(set: &CaseSet, device: Device) -> Tally {
    let t = run(set, device);
    assert_no_failures(&t, set, device);
    assert!(
        t.unsupported.is_empty(),
        "{device} must run every one of the {}: {:?}",
        set.what,
        t.unsupported
    );
    t
}

/// Fails on a failure, or when fewer than `floor` cases ran (a device that starts refusing an
/// op it ran before).
fn at_least(set: &CaseSet, device: Device, floor: usize) -> Tally {
    let t = run(set, device);
    assert_no_failures(&t, set, device);
    assert!(
        t.ran.len() >= floor,
        "only {} of the {} ran on {device}, {floor} did before",
        t.ran.len(),
        set.what
    );
    t
}

#[test]
fn op_cases_on_the_cpu() {
    all_run(&OP_CASES, Device::Cpu);
}

#[test]
fn block_scaling_cases_on_the_cpu() {
    all_run(&BLOCK_CASES, Device::Cpu);
}

#[test]
fn op_cases_on_the_emulated_cuda_device() {
    at_least(&OP_CASES, Device::CudaEmulated, CUDA_OP_CASES);
}

/// Every block-scaling case, bit for bit, as on the CPU. Not run on a GPU here: cuBLASLt's
/// block-scaled GEMMs may sum in another order there; `cuda_vs_cpu/main.rs`
/// (`block_scaled_gemms_match_the_cpu`) states the GPU's tolerances for them.
#[test]
fn block_scaling_cases_on_the_emulated_cuda_device() {
    all_run(&BLOCK_CASES, Device::CudaEmulated);
}

#[test]
fn op_cases_on_a_gpu() {
    if gpu() {
        at_least(&OP_CASES, Device::Cuda, CUDA_OP_CASES);
    }
}

/// The op cases the CUDA backend (either device) runs; the others are ops it has no lowering
/// for (`fp8c_runtime::cuda::support`) or operand types it refuses, printed with the reason.
const CUDA_OP_CASES: usize = 199;

/// Whether a GPU the CUDA backend can use is here; without one, a failure when
/// `FP8C_REQUIRE_GPU` is set (the GPU CI), else a note (the emulated device ran the cases).
fn gpu() -> bool {
    match Device::Cuda.check() {
        Ok(()) => true,
        Err(e) => {
            assert!(
                std::env::var_os("FP8C_REQUIRE_GPU").is_none(),
                "FP8C_REQUIRE_GPU is set but the CUDA backend cannot run: {e}"
            );
            // Past the harness's capture, so the log says the GPU half did not run.
            let _ = writeln!(
                std::io::stderr(),
                "no GPU ({e}): the golden cases ran on the emulated CUDA device only \
                 (op_cases_on_the_emulated_cuda_device)"
            );
            false
        }
    }
}

#[cfg(feature = "mlir")]
mod mlir {
    use super::*;

    /// Every FP8 cast, quantize and dequantize case must run on the JIT (bit for bit).
    #[test]
    fn op_cases_on_mlirs_jit() {
        let t = at_least(&OP_CASES, Device::Mlir, MLIR_OP_CASES);
        for name in [
            "cast_f32_f8e4m3_sat1",
            "cast_f32_f8e4m3_sat0",
            "cast_f8e4m3_f32",
            "cast_f32_f8e5m2_sat1",
            "cast_f32_f8e5m2_sat0",
            "cast_f8e5m2_f32",
            "quantize_f8e4m3_sat1",
            "quantize_f8e4m3_sat0",
            "dequantize_f8e4m3_f32",
            "quantize_f8e5m2_sat1",
            "quantize_f8e5m2_sat0",
            "dequantize_f8e5m2_f32",
        ] {
            assert!(
                t.ran.iter().any(|r| r == name),
                "{name} did not run on MLIR"
            );
        }
    }

    /// The op cases the emitter takes; the others are printed with its reason.
    const MLIR_OP_CASES: usize = 180;

    #[test]
    fn block_scaling_cases_on_mlirs_jit() {
        all_run(&BLOCK_CASES, Device::Mlir);
    }
}
