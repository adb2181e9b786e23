//! fp8c graphs as MLIR modules (issue #18): one `func.func` per graph whose arguments are the
//! graph's inputs, params and state entries (in that order) and whose results are its outputs
//! then the state's updates, each op as
//! `linalg.generic` over `tensor` values with an `arith`/`math` body, every operation located
//! at the fp8c node it comes from (`loc("node name")`). Built with melior's builders and
//! checked by MLIR's verifier before it is printed.
//!
//! melior needs a system LLVM/MLIR 22 (`scripts/env/mlir-env.sh` installs Debian's packages and
//! prints the variables `mlir-sys` reads), so the builder is behind the `mlir` cargo feature;
//! without it [`emit`] returns [`Error::Unavailable`] saying how to build it.
//!
//! What is covered so far (static shapes; GEMMs, convolutions, pooling, broadcasting
//! elementwise ops, reductions and normalisations, arg_max / top_k / cum_sum, integer and f64
//! GEMMs, integer Q/DQ; FP8 of f32, f16 and bf16 with current and delayed scaling:
//! amax, scales, history updates, quantize / dequantize as exact bit arithmetic, the scaled
//! GEMMs with their epilogues and the CPU's fast-accumulation model; a training step's loss,
//! optimizer and guard) and what is left: ARCHITECTURE.md, "MLIR out". Any other node is an
//! error naming the node and its op.

#[cfg(feature = "mlir")]
mod emit;
#[cfg(feature = "mlir")]
mod jit;
#[cfg(feature = "mlir")]
mod scalar;

use fp8c_ir::{Graph, Tensor};
use fp8c_runtime::{Executable, RuntimeError};
use std::collections::BTreeMap;

/// MLIR's lowering of an emitted module, from tensors on linalg to the LLVM dialect: the pass
/// pipeline `--device mlir` runs before the JIT, and what MLIR's own tools take to lower
/// [`emit`]'s text (`mlir-opt --pass-pipeline=<this>`, then `mlir-translate --mlir-to-llvmir`).
pub const LOWERING: &str = "builtin.module(\
    one-shot-bufferize{bufferize-function-boundaries function-boundary-type-conversion=identity-layout-map},\
    buffer-deallocation-pipeline,\
    convert-bufferization-to-memref,\
    convert-linalg-to-loops,\
    lower-affine,\
    convert-scf-to-cf,\
    expand-strided-metadata,\
    finalize-memref-to-llvm,\
    convert-math-to-llvm,\
    convert-math-to-libm,\
    convert-arith-to-llvm,\
    convert-index-to-llvm,\
    convert-cf-to-llvm,\
    convert-func-to-llvm,\
    convert-ub-to-llvm,\
    reconcile-unrealized-casts)";

/// Why a graph cannot be emitted.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// This build has no MLIR.
    #[error(
        "this fp8c was built without MLIR: build it with `--features mlir` (needs LLVM/MLIR 22: scripts/env/mlir-env.sh installs it)"
    )]
    Unavailable,
    /// A node the emitter does not cover.
    #[error("node \"{node}\" ({op}): {why}")]
    Unsupported {
        /// The node's name.
        node: String,
        /// Its op's name.
        op: String,
        /// What is missing.
        why: String,
    },
    /// MLIR rejected what was built (an emitter bug).
    #[error("MLIR's verifier rejected the module: {0}")]
    Invalid(String),
}

/// Whether this build can emit MLIR.
pub fn available() -> bool {
    cfg!(feature = "mlir")
}

/// `graph` as MLIR text, verified by MLIR.
pub fn emit(graph: &Graph) -> Result<String, Error> {
    #[cfg(feature = "mlir")]
    {
        emit::module_text(graph)
    }
    #[cfg(not(feature = "mlir"))]
    {
        let _ = graph;
        Err(Error::Unavailable)
    }
}

/// `graph` (static shapes) compiled by MLIR's JIT, as an executable like the runtime's
/// backends give: `fp8c run --device mlir`. `weights` holds the params' data by name.
pub fn prepare(
    graph: &Graph,
    weights: &BTreeMap<String, Tensor>,
) -> Result<Box<dyn Executable>, RuntimeError> {
    #[cfg(feature = "mlir")]
    {
        jit::prepare(graph, weights)
    }
    #[cfg(not(feature = "mlir"))]
    {
        let _ = (graph, weights);
        Err(RuntimeError::Unavailable {
            backend: "mlir",
            message: Error::Unavailable.to_string(),
        })
    }
}
