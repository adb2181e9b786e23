//! fp8c-session: the library front door. Load a model, compile it through the pass pipeline,
//! run it on a backend, calibrate its scaling state, train it; read and write `.npz` arrays,
//! checkpoints and loss plots. The `fp8c` CLI and the examples are thin users of this crate.
//!
//! Load an ONNX model, compile it to FP8 for a batch of 16, print the IR, run it on the CPU
//! reference backend:
//!
//! ```
//! use fp8c_session::{CompileOptions, Device, Model, Tensor};
//! use std::collections::BTreeMap;
//! # fn main() -> fp8c_session::Result<()> {
//! # let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/models/mlp_digits.onnx");
//!
//! let model = Model::load(path)?; // examples/models/mlp_digits.onnx: x f32[batch,64]
//! let opts = CompileOptions::fp8().input_shape("x", &[16, 64]).min_fp8_flops(0);
//! let compiled = model.compile(&opts)?;
//! println!("{}", compiled.ir_text());
//!
//! let mut runner = compiled.prepare(Device::Cpu)?;
//! let x = Tensor::from_f32(vec![16, 64], &[0.5; 1024]);
//! let outputs = runner.run(&BTreeMap::from([("x".to_string(), x)]))?;
//! assert_eq!(outputs["logits"].shape(), [16, 10]);
//! # assert!(compiled.ir_text().contains("f8e4m3"));
//! # Ok(())
//! # }
//! ```
//!
//! The modules, one per purpose:
//! - [`Model`] (`model`): loading (ONNX, or `.fp8ir` IR text with its `.safetensors` weights sidecar),
//!   the declared inputs and the checks inputs must pass, [`Model::compile`].
//! - [`CompileOptions`], [`RecipeOptions`] (`options`): shapes, policy, recipe, pipeline
//!   switches; a `[recipe]` TOML file with flag overrides.
//! - [`Compiled`] (`compiled`): the compiled graph, its IR text / JSON, the explain report,
//!   [`Compiled::prepare`].
//! - [`Device`], [`Runner`] (`runner`): a program loaded on the CPU reference or a GPU.
//! - [`calibrate`]: delayed-scaling state filled from calibration inputs.
//! - [`train`]: the [`Trainer`], datasets, training options, accuracy, checkpoints.
//! - [`export`]: trained weights written back into the source ONNX model.
//! - [`npy`]: `.npy` / `.npz` arrays; [`plot`]: loss curves; [`files`]: atomic writes.
//!
//! Every error is an [`Error`] whose message is complete on its own, prefixed with the file,
//! flag or input at fault.

#![warn(missing_docs)]

pub mod calibrate;
mod compiled;
mod config;
mod error;
pub mod export;
pub mod files;
mod memory;
mod model;
pub mod npy;
mod onnx_out;
mod options;
pub mod plot;
mod run_io;
mod run_job;
mod runner;
pub mod safetensors_io;
mod session;
mod settings;
pub mod train;

pub use compiled::{Compiled, weights_path};
pub use config::{ConfigFile, parse_recipe_config};
pub use error::{Context, Error, PassFailure, Result};
pub use memory::memory_report;
pub use model::{LoadOptions, Model, ModelInput};
pub use onnx_out::{EmittedOnnx, emit_fp8_onnx};
pub use options::{
    CompileOptions, Purpose, RecipeOptions, default_recipe, parse_granularity, parse_input_shapes,
    precision_name, validate_policy,
};
pub use run_io::{InputSources, read_inputs, write_outputs};
pub use run_job::{RunConfig, RunJob, RunOutcome, recipe_word};
pub use runner::{Device, HostAccum, Runner};
pub use session::Session;
pub use settings::CompileSettings;
pub use train::{StepReport, Trainer};

pub use fp8c_core::{Granularity, Recipe};
/// The collective layer of data-parallel training (`init` picks MPI under `mpirun`).
pub use fp8c_dist as dist;
pub use fp8c_ir::{DType, Dim, Graph, Storage, Tensor, TensorType};

/// The GPU micro-benchmarks `fp8c bench` prints (cuBLASLt GEMMs, quantize kernels, a layer
/// step), on the CUDA backend.
pub mod bench {
    pub use fp8c_runtime::cuda::bench::*;
}
pub use fp8c_passes::pass_names;
pub use fp8c_passes::report::{Memory, Report, human_bytes};
pub use fp8c_runtime::profile::ProfileRow;
pub use fp8c_runtime::stats::what_if_tilings;
pub use fp8c_runtime::{Comparison, Fp8TensorStats, Profile, describe_plan};

/// Summarises an ONNX file: opset, op histogram, parameters, inputs and outputs (`fp8c
/// inspect`); the summary prints as a table and serialises to JSON.
pub fn inspect(path: &std::path::Path) -> Result<fp8c_onnx::ModelInfo> {
    Ok(fp8c_onnx::inspect(path)?)
}
pub use fp8c_passes::precision::{PolicyOptions, PrecisionMode};
