//! What differs between devices for the golden cases, each rule stated once: how a case is
//! prepared on the device, which refusals count as "not supported here" rather than as
//! failures, and the tolerance a device is held to.

use fp8c_eval::golden::Case;
use fp8c_ir::{Graph, Op, Support, Tensor};
use fp8c_runtime::Executable;
use fp8c_session::Device;

/// Why a case did not run on a device.
pub enum Refusal {
    /// The device does not take the op or its operand types; counted under this reason.
    Unsupported(String),
    /// A bug: the device should have run the case.
    Failed(String),
}

/// The case's outputs on `device`.
///
/// - CPU: the reference evaluator itself (`fp8c_eval::eval_op`, whose kernels the CPU
///   backend runs), every input given as a value, integer ones too: the evaluator takes
///   shapes that depend on values (`range` over input bounds), which a backend's static
///   program does not. It takes every op, so any error is a failure.
/// - The other devices run the case as a one-node program (`Case::program`: float inputs
///   fed, integer ones constants), loaded by [`prepare`]; an error after that is a failure.
pub fn outputs(device: Device, case: &Case) -> Result<Vec<Tensor>, Refusal> {
    let op = case.op().map_err(Refusal::Failed)?;
    if device == Device::Cpu {
        let inputs = case.inputs();
        let refs: Vec<&Tensor> = inputs.iter().collect();
        return fp8c_eval::eval_op(&op, &refs).map_err(|e| Refusal::Failed(e.to_string()));
    }
    let (g, feed) = case.program().map_err(Refusal::Failed)?;
    let mut exe = prepare(device, &op, &g)?;
    let mut got = exe.run(&feed).map_err(|e| Refusal::Failed(e.to_string()))?;
    (0..g.outputs().len())
        .map(|k| {
            got.remove(&format!("out{k}"))
                .ok_or_else(|| Refusal::Failed(format!("no output out{k}")))
        })
        .collect()
}

/// Loads the one-node program `g` of `op` on a device that runs programs.
///
/// - CUDA, emulated or real: an op `fp8c_runtime::cuda::support` answers `No` for is skipped
///   with that reason, before lowering; lowering or preparing may refuse an operand type or a
///   shape (the error's last clause is the reason), except that a kernel the lowering asks
///   for and its module lacks (`... is not in ...`) is a bug.
/// - MLIR's JIT: `fp8c_mlir::prepare` compiles the graph itself (no lowered program); an op the
///   emitter does not take is skipped with the emitter's reason, but a module that MLIR's
///   verifier rejects (`does not verify`) is a bug: refusing is for ops it does not emit.
/// - The CPU backend (not used here: the CPU case runs the evaluator) takes every op.
fn prepare(device: Device, op: &Op, g: &Graph) -> Result<Box<dyn Executable>, Refusal> {
    match device {
        Device::Cpu => {
            let p = fp8c_runtime::lower(g).map_err(|e| Refusal::Failed(e.to_string()))?;
            device
                .backend()
                .prepare(&p, g.weights())
                .map_err(|e| Refusal::Failed(e.to_string()))
        }
        Device::Cuda | Device::CudaEmulated => {
            if let Support::No(why) = fp8c_runtime::cuda::support(op) {
                return Err(Refusal::Unsupported(format!("{}: {why}", op.name())));
            }
            let prepared = fp8c_runtime::lower(g)
                .map_err(|e| e.to_string())
                .and_then(|p| {
                    device
                        .backend()
                        .prepare(&p, g.weights())
                        .map_err(|e| e.to_string())
                });
            prepared.map_err(|e| {
                if e.contains(" is not in ") {
                    Refusal::Failed(e)
                } else {
                    Refusal::Unsupported(format!("{} ({})", op.name(), last_clause(&e)))
                }
            })
        }
        Device::Mlir => fp8c_mlir::prepare(g, g.weights()).map_err(|e| {
            let e = e.to_string();
            if e.contains("does not verify") {
                Refusal::Failed(e)
            } else {
                Refusal::Unsupported(format!("{}: {}", op.name(), last_clause(&e)))
            }
        }),
    }
}

/// The tolerance `device` is held to on `case`: on every device the case's own (`atol`,
/// `rtol`), which the generator chose for the reference (0 and 0 for the casts, quantizers
/// and block-scaling cases: bit for bit, any NaN matching any NaN). No device gets a looser
/// one: the CUDA kernels (real and emulated) and MLIR's JIT compute in f32 and round once, as
/// the CPU evaluator does, and the references' own spread (onnxruntime against onnx's
/// reference evaluator) is what the case's tolerance already covers.
pub fn tolerance(device: Device, case: &Case) -> (f64, f64) {
    match device {
        Device::Cpu | Device::CudaEmulated | Device::Cuda | Device::Mlir => (case.atol, case.rtol),
    }
}

/// The text after the last `": "` of an error: the reason, without the node and op prefixes.
fn last_clause(e: &str) -> String {
    e.rsplit(": ").next().unwrap_or(e).to_string()
}
