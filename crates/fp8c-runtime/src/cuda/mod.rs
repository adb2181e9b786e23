//! The CUDA backend: the same [`Backend`](crate::Backend) contract as the CPU reference, on an
//! NVIDIA GPU.
//!
//! Always compiled, whatever the machine: cudarc opens the driver, NVRTC and cuBLASLt at run
//! time (`dynamic-loading`), and every entry point probes for them first ([`libs`]), so a
//! machine without a GPU gets a clean [`RuntimeError::Unavailable`](crate::RuntimeError)
//! instead of cudarc's panic.
//!
//! How a program runs:
//! - `prepare` opens the device, compiles the kernels it needs from `kernels/*.cu` with NVRTC
//!   for the device's architecture (cached in memory and on disk by the hash of source,
//!   headers, options and NVRTC version: [`nvrtc`]), allocates one arena for the program's
//!   memory plan plus the resident buffers (params, state, constants), and turns every step
//!   into device actions: kernel launches, memsets, copies and cuBLASLt matmuls ([`lower`],
//!   one module per op family). An op the backend cannot run is reported there, all of them
//!   at once, never half-way through a step; [`support`] tells which ops it has no lowering
//!   for, without a GPU.
//! - `run` copies the inputs in, replays the actions on one stream (or a captured CUDA graph of
//!   them with [`CudaOptions::cuda_graph`]), copies the state updates into the state buffers
//!   on the device, and copies the outputs out: one host synchronisation per run.
//!
//! Elementwise programs are generated CUDA ([`codegen`]) compiled on first use; everything
//! else is a fixed kernel of `kernels/`. GEMMs go through cuBLASLt's raw API ([`gemm`]): FP8
//! with A/B scale pointers, D scale and amax of D, bias and GELU epilogues, TN layout.

pub mod bench;
pub mod codegen;
mod device;
pub mod emu;
pub mod emu_gemm;
mod exec;
pub mod gemm;
pub mod gemm_rules;
pub mod kernels;
pub mod libs;
mod lower;
pub mod nvrtc;

pub use device::{
    DeviceInfo, EmuFaults, MIN_COMPUTE_CAPABILITY, MIN_DRIVER_VERSION, check_driver_version,
};
pub use exec::CudaExecutable;
pub use lower::{MAX_ATTENTION_HEAD_DIM, attention_fits, support};

use crate::backend::{Backend, Executable, RuntimeError};
use crate::program::Program;
use fp8c_ir::Tensor;
use std::collections::BTreeMap;

/// The backend's name in errors and on the command line.
pub const NAME: &str = "cuda";

/// Options of the CUDA backend.
#[derive(Clone, Debug, Default)]
pub struct CudaOptions {
    /// Device ordinal.
    pub device: usize,
    /// Capture a whole run as a CUDA graph on the second run and replay it from then on (for
    /// training loops: one launch per step instead of one per kernel).
    pub cuda_graph: bool,
    /// Run on the emulated device (issue #15; ARCHITECTURE.md): the same lowering and run
    /// loop, kernels compiled for the host by its C++ compiler, cuBLASLt requests checked and
    /// computed by the reference. Needs no GPU and no CUDA library; CI's CUDA tests use it.
    pub emulated: bool,
    /// Faults the emulated device injects on request (tests of the failure paths); ignored on
    /// a real GPU.
    pub emulated_faults: EmuFaults,
}

/// The CUDA backend.
#[derive(Clone, Debug, Default)]
pub struct CudaBackend {
    /// Its options.
    pub options: CudaOptions,
}

impl CudaBackend {
    /// A backend with the given options.
    pub fn new(options: CudaOptions) -> Self {
        CudaBackend { options }
    }
}

/// An `Unavailable` error of this backend.
pub(crate) fn unavailable(message: impl Into<String>) -> RuntimeError {
    RuntimeError::Unavailable {
        backend: NAME,
        message: message.into(),
    }
}

impl Backend for CudaBackend {
    fn name(&self) -> &'static str {
        NAME
    }

    fn check(&self) -> Result<(), RuntimeError> {
        if self.options.emulated {
            return Ok(());
        }
        libs::require_driver()?;
        let info = device::probe_device(self.options.device)?;
        libs::require_nvrtc()?;
        info.check_supported().map_err(unavailable)?;
        Ok(())
    }

    fn prepare(
        &self,
        p: &Program,
        weights: &BTreeMap<String, Tensor>,
    ) -> Result<Box<dyn Executable>, RuntimeError> {
        self.check()?;
        Ok(Box::new(CudaExecutable::new(p, weights, &self.options)?))
    }
}

/// Describes the device `ordinal` (name, compute capability, memory), or says why there is none.
pub fn device_info(ordinal: usize) -> Result<DeviceInfo, RuntimeError> {
    libs::require_driver()?;
    device::probe_device(ordinal)
}
