//! CUDA graph capture and the backend's failure paths on the emulated device (issue #15).
//!
//! The emulated device records stream work while a capture is open and replays the record on
//! a graph launch, as CUDA does, and fails on request ([`EmuFaults`]): a capture the driver
//! rejects, device-to-host copies after a device error. These tests hold the fixes those
//! paths needed: a failed capture is remembered (runs stay eager, no capture per run), and a
//! failed download is an error from `try_state`, not a missing state entry.

use fp8c_ir::{AmaxSource, DType, Graph, Op, Tensor, TensorType, Value};
use fp8c_runtime::{Backend, CpuBackend, CudaBackend, CudaOptions, EmuFaults, Executable, lower};
use std::collections::BTreeMap;

fn node(g: &mut Graph, name: &str, op: Op, ins: &[Value]) -> Vec<Value> {
    g.add_node(name, op, ins).unwrap()
}

/// A training-like step: x [16,32] · w [32,16] (a cuBLASLt call), the product quantized to
/// E4M3 with a state scale, its amax rolled into a state history and the scale recomputed.
fn stateful_gemm() -> Graph {
    let mut g = Graph::new("step");
    let x = g
        .add_input("x", TensorType::fixed(DType::F32, &[16, 32]))
        .unwrap();
    let wv: Vec<f32> = (0..32 * 16)
        .map(|i| ((i * 7) % 13) as f32 / 13.0 - 0.5)
        .collect();
    let w = g
        .add_param(
            "w",
            TensorType::fixed(DType::F32, &[32, 16]),
            Some(Tensor::from_f32(vec![32, 16], &wv)),
        )
        .unwrap();
    let h = g
        .add_state("h", TensorType::fixed(DType::F32, &[4]), 0.0)
        .unwrap();
    let s = g
        .add_state("s", TensorType::fixed(DType::F32, &[]), 1.0)
        .unwrap();
    let y = node(&mut g, "mm", Op::MatMul, &[x, w])[0];
    let q = node(
        &mut g,
        "q",
        Op::QuantizeAmax {
            to: DType::F8E4M3,
            saturate: true,
        },
        &[y, s],
    );
    let hist = node(&mut g, "hist", Op::AmaxHistoryUpdate, &[h, q[1]]);
    let cs = Op::ComputeScale {
        fmt: DType::F8E4M3,
        margin: 0.0,
        source: AmaxSource::HistoryMax,
        epsilon: 0.0,
        power_2: false,
    };
    let sc = node(&mut g, "scale", cs, &[hist[0], s]);
    g.set_state_update("h", hist[1]).unwrap();
    g.set_state_update("s", sc[0]).unwrap();
    g.set_output("q", q[0]).unwrap();
    g.set_output("y", y).unwrap();
    g
}

/// Step `i`'s input: different every step, growing, so the scale changes each time.
fn input(i: usize) -> BTreeMap<String, Tensor> {
    let v: Vec<f32> = (0..16 * 32)
        .map(|k| ((k * 31 + i * 17) % 97) as f32 / 97.0 * (1.0 + i as f32) - 0.3)
        .collect();
    BTreeMap::from([("x".to_string(), Tensor::from_f32(vec![16, 32], &v))])
}

fn emulated(graph: bool, faults: &EmuFaults) -> CudaBackend {
    CudaBackend::new(CudaOptions {
        cuda_graph: graph,
        emulated: true,
        emulated_faults: faults.clone(),
        ..Default::default()
    })
}

/// Runs `runs` steps on the CPU and on `gpu`, asserting equal outputs and state each step.
fn same_as_cpu(g: &Graph, gpu: &mut dyn Executable, runs: usize) {
    let p = lower(g).unwrap();
    let mut cpu = CpuBackend.prepare(&p, g.weights()).unwrap();
    for i in 0..runs {
        let want = cpu.run(&input(i)).unwrap();
        let got = gpu
            .run(&input(i))
            .unwrap_or_else(|e| panic!("run {i}: {e}"));
        // The GEMM goes through the reference kernels on both sides: equal bit for bit.
        for (k, w) in &want {
            assert_eq!(w.bytes(), got[k].bytes(), "run {i}: output {k} differs");
        }
        let (cs, gs) = (cpu.state(), gpu.try_state().unwrap());
        for (k, w) in &cs {
            assert_eq!(w.bytes(), gs[k].bytes(), "run {i}: state {k} differs");
        }
    }
}

/// With `cuda_graph`, the second run is captured (recorded, not executed: had the capture run
/// the work, the state would roll twice that step) and every later run replays the record
/// with its own inputs, exactly as the eager CPU runs.
#[test]
fn a_captured_run_replays_with_new_inputs_and_state() {
    let g = stateful_gemm();
    let faults = EmuFaults::default();
    let mut gpu = emulated(true, &faults)
        .prepare(&lower(&g).unwrap(), g.weights())
        .unwrap();
    same_as_cpu(&g, gpu.as_mut(), 6);
    assert_eq!(faults.captures(), 1, "one capture, then replays");
}

/// A capture the driver rejects is remembered: the runs go on eagerly with the right results
/// and the capture is not attempted again every run (the old code retried it each time).
#[test]
fn a_failed_capture_is_not_retried() {
    let g = stateful_gemm();
    let faults = EmuFaults::default();
    faults.fail_captures(true);
    let mut gpu = emulated(true, &faults)
        .prepare(&lower(&g).unwrap(), g.weights())
        .unwrap();
    same_as_cpu(&g, gpu.as_mut(), 5);
    assert_eq!(
        faults.captures(),
        1,
        "the failed capture must not be retried"
    );
}

/// Without `cuda_graph` nothing is captured.
#[test]
fn eager_runs_capture_nothing() {
    let g = stateful_gemm();
    let faults = EmuFaults::default();
    let mut gpu = emulated(false, &faults)
        .prepare(&lower(&g).unwrap(), g.weights())
        .unwrap();
    same_as_cpu(&g, gpu.as_mut(), 3);
    assert_eq!(faults.captures(), 0);
}

/// A device-to-host copy that fails is an error naming the state entry from `try_state` (what
/// checkpoints call), and an error from `run`; once the device answers again, both work.
#[test]
fn a_failed_download_is_an_error_not_a_missing_entry() {
    let g = stateful_gemm();
    let faults = EmuFaults::default();
    let mut gpu = emulated(false, &faults)
        .prepare(&lower(&g).unwrap(), g.weights())
        .unwrap();
    gpu.run(&input(0)).unwrap();
    faults.fail_downloads(true);
    let e = gpu.try_state().unwrap_err().to_string();
    assert!(
        e.contains("cannot read it from the device") && e.contains("cuMemcpyDtoHAsync"),
        "{e}"
    );
    assert!(gpu.run(&input(1)).is_err());
    faults.fail_downloads(false);
    assert_eq!(gpu.try_state().unwrap().len(), 2);
}
