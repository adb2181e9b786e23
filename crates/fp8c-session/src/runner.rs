//! Running a compiled model: the [`Device`] to run on and the [`Runner`], a lowered program
//! loaded on a backend together with its scaling state.
//!
//! Run errors name the input or the node, not the model's file: the caller knows which run
//! failed (`fp8c run` prefixes the model, or `(f32 path)` for its reference run).

use crate::error::Result;
use fp8c_ir::{Graph, Op, Tensor};
use fp8c_runtime::{Backend, CpuBackend, CudaBackend, Executable, Observer, Program};
use std::collections::BTreeMap;
use std::fmt;

/// Where a program runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Device {
    /// The CPU reference backend (bit-exact FP8 emulation, f32 accumulation).
    #[default]
    Cpu,
    /// An NVIDIA GPU (the CUDA backend; needs the driver at run time).
    Cuda,
    /// The CUDA backend on the emulated device: kernels compiled for the host, cuBLASLt
    /// requests checked and computed by the reference (needs a C++ compiler, no GPU). For
    /// checking the CUDA path where there is no GPU, not for speed.
    CudaEmulated,
    /// MLIR's own JIT (`fp8c-mlir`: linalg lowered by MLIR's passes, compiled by LLVM): a
    /// second, independent execution of the graph; needs a build with the `mlir` feature and
    /// static shapes.
    Mlir,
}

impl Device {
    /// The short name (`cpu`, `cuda`).
    pub fn name(self) -> &'static str {
        match self {
            Device::Cpu => "cpu",
            Device::Cuda => "cuda",
            Device::CudaEmulated => "cuda-emulated",
            Device::Mlir => "mlir",
        }
    }

    /// The runtime backend of this device.
    pub fn backend(self) -> Box<dyn Backend> {
        match self {
            Device::Cpu => Box::new(CpuBackend),
            Device::Cuda => Box::new(CudaBackend::default()),
            Device::CudaEmulated => Box::new(CudaBackend::new(fp8c_runtime::CudaOptions {
                emulated: true,
                ..Default::default()
            })),
            Device::Mlir => Box::new(MlirBackend),
        }
    }

    /// Checks that the device can run here (for CUDA: driver and GPU present).
    pub fn check(self) -> Result<()> {
        self.backend().check()?;
        Ok(())
    }
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Device {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "cpu" => Ok(Device::Cpu),
            "cuda" => Ok(Device::Cuda),
            "cuda-emulated" => Ok(Device::CudaEmulated),
            "mlir" => Ok(Device::Mlir),
            _ => Err(format!(
                "unknown device `{s}`; expected cpu, cuda, cuda-emulated or mlir"
            )),
        }
    }
}

/// How the host devices (the CPU, MLIR's JIT and the emulated CUDA device) compute the FP8
/// GEMMs a recipe lets use fast accumulation (`scaled_matmul { fast_accum: true }`, TE's
/// forward GEMMs). A CUDA device always uses its tensor cores' own accumulator.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum HostAccum {
    /// In f32, like every other GEMM. Fast accumulation lets Hopper's tensor cores keep
    /// fewer bits for speed; a CPU gains nothing from it, so it sums in f32, as PyTorch's
    /// CPU `_scaled_mm` ignores `use_fast_accum`. Against an H100's fast accumulation these
    /// sums are about 1e-3 off at K = 4096 (its split accumulation: 1.3e-4).
    #[default]
    F32,
    /// As Hopper's narrow accumulator does: fp8c-eval's model (14 bits per 32-product block,
    /// within 4e-5 of an H100), the host reference of a `--device cuda` run. It costs about
    /// seven vector operations per product where an f32 GEMM costs one.
    Hopper,
}

impl HostAccum {
    /// The graph `device` runs for `graph`: unchanged on a CUDA device or with
    /// [`HostAccum::Hopper`], else with every GEMM's `fast_accum` cleared; and with each
    /// `attention` node the device has no kernel for spelled out in the unfused ops
    /// (`fp8c_passes::attention::decompose_if`).
    pub fn graph_for(self, graph: &Graph, device: Device) -> std::borrow::Cow<'_, Graph> {
        let clear = self.clears(device) && has_fast_accum(graph);
        let unfuse = needs_decomposed_attention(graph, device);
        if !clear && !unfuse {
            return std::borrow::Cow::Borrowed(graph);
        }
        let mut g = graph.clone();
        self.apply(&mut g, device);
        std::borrow::Cow::Owned(g)
    }

    /// [`HostAccum::graph_for`] in place.
    pub(crate) fn apply(self, graph: &mut Graph, device: Device) {
        if self.clears(device) {
            clear_fast_accum(graph);
        }
        if needs_decomposed_attention(graph, device) {
            // A graph it cannot spell out (symbolic dims) keeps its attention nodes: the
            // backend then refuses them, naming each.
            let mut g = graph.clone();
            if fp8c_passes::attention::decompose_if(&mut g, |g, n| !runs_attention(g, n, device))
                .is_ok()
            {
                *graph = g;
            }
        }
    }

    /// Whether `device` sums fast-accumulation GEMMs in f32 under this choice.
    fn clears(self, device: Device) -> bool {
        self == HostAccum::F32 && device != Device::Cuda
    }
}

/// Whether `graph` has attention nodes `device` has no kernel for.
fn needs_decomposed_attention(graph: &Graph, device: Device) -> bool {
    graph.node_ids().into_iter().any(|id| {
        let n = graph.node(id);
        matches!(n.op, Op::Attention { .. } | Op::AttentionGrad { .. })
            && !runs_attention(graph, n, device)
    })
}

/// Whether `device` runs attention node `n` of `graph` with its own kernel: the CPU always,
/// MLIR never, CUDA for the dtypes and head sizes its kernels take
/// (`fp8c_runtime::cuda::attention_fits`).
fn runs_attention(graph: &Graph, n: &fp8c_ir::Node, device: Device) -> bool {
    match device {
        Device::Cpu => true,
        Device::Cuda | Device::CudaEmulated => {
            let types: Vec<&fp8c_ir::TensorType> =
                n.inputs().iter().map(|&v| graph.value_type(v)).collect();
            fp8c_runtime::cuda::support(&n.op) == fp8c_ir::Support::Yes
                && fp8c_runtime::cuda::attention_fits(&types) == fp8c_ir::Support::Yes
        }
        Device::Mlir => false,
    }
}

/// Whether any node of `graph` asks for fast accumulation.
fn has_fast_accum(graph: &Graph) -> bool {
    graph.node_ids().into_iter().any(|id| {
        matches!(
            graph.node(id).op,
            Op::ScaledMatMul {
                fast_accum: true,
                ..
            } | Op::ScaledMatMulEpilogue {
                fast_accum: true,
                ..
            }
        )
    })
}

/// Sets `fast_accum: false` on every GEMM of `graph` (the host's f32 sums, [`HostAccum::F32`]).
fn clear_fast_accum(graph: &mut Graph) {
    for id in graph.node_ids() {
        let node = graph.node(id);
        let mut op = node.op.clone();
        match &mut op {
            Op::ScaledMatMul { fast_accum, .. } | Op::ScaledMatMulEpilogue { fast_accum, .. }
                if *fast_accum =>
            {
                *fast_accum = false
            }
            _ => continue,
        }
        let outputs = node.outputs.clone();
        graph.set_op(id, op, outputs);
    }
}

/// A compiled model loaded on a device: runs it and keeps its state (amax histories, scales)
/// between runs.
pub struct Runner {
    graph: Graph,
    program: Program,
    exe: Box<dyn Executable>,
    device: Device,
}

impl Runner {
    pub(crate) fn new(
        graph: Graph,
        program: Program,
        exe: Box<dyn Executable>,
        device: Device,
    ) -> Self {
        Runner {
            graph,
            program,
            exe,
            device,
        }
    }

    /// Runs the program on `inputs` (by graph input name; every input, exact types) and
    /// returns the outputs by name. State updates persist to the next run.
    pub fn run(&mut self, inputs: &BTreeMap<String, Tensor>) -> Result<BTreeMap<String, Tensor>> {
        Ok(self.exe.run(inputs)?)
    }

    /// [`Runner::run`], calling `observe` after every step with the step, its inputs and its
    /// outputs (statistics, calibration, debugging).
    pub fn run_observed(
        &mut self,
        inputs: &BTreeMap<String, Tensor>,
        observe: &mut Observer<'_>,
    ) -> Result<BTreeMap<String, Tensor>> {
        Ok(self.exe.run_observed(inputs, observe)?)
    }

    /// [`Runner::run`], timing every step into `profile` (`fp8c run --profile`): steps the
    /// backend computed once when it prepared the program count with no time.
    pub fn run_profiled(
        &mut self,
        inputs: &BTreeMap<String, Tensor>,
        profile: &mut fp8c_runtime::Profile,
    ) -> Result<BTreeMap<String, Tensor>> {
        let mut timer = profile.start_skipping(self.exe.precomputed_steps());
        let out = self
            .exe
            .run_observed(inputs, &mut |s, i, o| timer.observe(s, i, o));
        timer.finish();
        Ok(out?)
    }

    /// The node names of the steps the backend computed once when it prepared the program
    /// ([`fp8c_runtime::Executable::precomputed_steps`]): a profile counts them with no time.
    pub fn precomputed_steps(&self) -> std::collections::BTreeSet<String> {
        self.exe.precomputed_steps()
    }

    /// Every state entry by name (amax histories, scales; for training, weights and moments).
    pub fn state(&self) -> BTreeMap<String, Tensor> {
        self.exe.state()
    }

    /// Replaces a state entry (same dtype and shape as declared).
    pub fn set_state(&mut self, name: &str, value: Tensor) -> Result<()> {
        Ok(self.exe.set_state(name, value)?)
    }

    /// The lowered program (steps, buffers, memory plan).
    pub fn program(&self) -> &Program {
        &self.program
    }

    /// The compiled graph the program was lowered from.
    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// The device it runs on.
    pub fn device(&self) -> Device {
        self.device
    }
}

/// The MLIR device as a [`Backend`]: MLIR compiles the graph, not the lowered program, so
/// [`Backend::prepare_graph`] hands it the graph (`fp8c_mlir::prepare`), for `fp8c run` and
/// the trainer alike; a program alone is refused with the reason.
struct MlirBackend;

impl Backend for MlirBackend {
    fn name(&self) -> &'static str {
        "mlir"
    }

    fn check(&self) -> std::result::Result<(), fp8c_runtime::RuntimeError> {
        if fp8c_mlir::available() {
            Ok(())
        } else {
            Err(fp8c_runtime::RuntimeError::Unavailable {
                backend: "mlir",
                message: fp8c_mlir::Error::Unavailable.to_string(),
            })
        }
    }

    fn prepare(
        &self,
        _p: &Program,
        _weights: &BTreeMap<String, Tensor>,
    ) -> std::result::Result<Box<dyn Executable>, fp8c_runtime::RuntimeError> {
        Err(fp8c_runtime::RuntimeError::Unavailable {
            backend: "mlir",
            message: "the MLIR JIT compiles graphs, not lowered programs".into(),
        })
    }

    fn prepare_graph(
        &self,
        graph: &Graph,
        _p: &Program,
        weights: &BTreeMap<String, Tensor>,
    ) -> std::result::Result<Box<dyn Executable>, fp8c_runtime::RuntimeError> {
        fp8c_mlir::prepare(graph, weights)
    }
}
