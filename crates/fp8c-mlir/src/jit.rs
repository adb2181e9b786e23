//! `--device mlir`: the emitted module lowered by MLIR's own passes (bufferization, linalg to
//! loops, to the LLVM dialect) and compiled by MLIR's `ExecutionEngine` (LLVM's ORC JIT): a
//! second execution of the graph, independent of fp8c's CPU kernels.
//!
//! Calling convention: the function carries `llvm.emit_c_interface`, so the JIT exports
//! `_mlir_ciface_<name>(results*, arg0*, …)`, every argument a pointer to a strided memref
//! descriptor `{allocated, aligned, offset, sizes[r], strides[r]}` (all 8-byte fields) and the
//! results one struct of such descriptors. The results are buffers the JIT code allocated
//! with `malloc` (bufferization gives every result its own buffer; the deallocation pipeline
//! frees every intermediate): they are copied out and freed here.
//!
//! State: the executable holds the graph's state entries (amax histories, scales, and in
//! training the weights, optimizer moments and counters), passes them as the arguments after
//! the params and replaces each with its update from the results after the outputs, so state
//! persists across runs as on the other backends (`state` / `set_state` read and write it).

use crate::emit;
use fp8c_ir::{Graph, Tensor, TensorType};
use fp8c_runtime::{Executable, Observer, RuntimeError};
use melior::{
    ExecutionEngine,
    ir::operation::OperationLike,
    pass::PassManager,
    utility::{parse_pass_pipeline, register_all_llvm_translations, register_all_passes},
};
use std::collections::BTreeMap;

/// LLVM's optimisation level for the JIT. 0: the JIT checks fp8c's graphs and its compile
/// time dominates what it is used for (a few runs, a few steps); at -O2 LLVM's time grows
/// steeply with the function's size. Measured on the 2-core VM (BENCHMARKS.md): Llama-style
/// FP8 training graph 81 s to compile at -O2 against 20 s at -O0 (3.1 vs 2.2 steps/s),
/// GPT-2-style f32 20 s against 6 s (11–13 vs 5.5 steps/s), the digits MLP 4 s against 1.2 s
/// (20–25 vs 18 steps/s). -O1 compiles as slowly as -O2. The numerics do not depend on it (no
/// fast-math flags are emitted, so no level contracts or reorders floating-point operations).
const OPT_LEVEL: usize = 0;

fn unavailable(message: String) -> RuntimeError {
    RuntimeError::Unavailable {
        backend: "mlir",
        message,
    }
}

/// One graph compiled by the JIT.
pub(crate) struct MlirExecutable {
    engine: ExecutionEngine,
    symbol: String,
    /// The graph's inputs (name, type), in argument order.
    inputs: Vec<(String, TensorType)>,
    /// The params' data, in argument order after the inputs (f32 bytes as the graph holds them).
    params: Vec<Tensor>,
    /// The state entries (name, value), in argument order after the params: the values the
    /// next run reads.
    state: Vec<(String, Tensor)>,
    /// Every result (name, type): the graph outputs, then the state updates.
    outputs: Vec<(String, TensorType)>,
    /// The results after the outputs: the index in `state` each one updates.
    updates: Vec<usize>,
}

/// Emits `graph`, lowers it with MLIR's passes and JIT-compiles it.
pub(crate) fn prepare(
    graph: &Graph,
    weights: &BTreeMap<String, Tensor>,
) -> Result<Box<dyn Executable>, RuntimeError> {
    let static_type = |name: &str, t: &TensorType| -> Result<TensorType, RuntimeError> {
        if t.is_static() {
            Ok(t.clone())
        } else {
            Err(RuntimeError::input(
                name,
                format!(
                    "type {t} is not static: --device mlir needs every shape (give --input-shape)"
                ),
            ))
        }
    };
    // Every tensor the JIT's code allocates must fit in host memory (a failed malloc in
    // the compiled code would crash).
    for id in graph.node_ids() {
        let n = graph.node(id);
        for t in &n.outputs {
            if let Some(bytes) = t.num_bytes() {
                fp8c_ir::memory::check_tensor_bytes(bytes).map_err(|m| {
                    RuntimeError::node(&n.name, n.op.name(), format!("its output {t}: {m}"))
                })?;
            }
        }
    }
    let inputs = graph
        .inputs()
        .iter()
        .map(|&id| {
            let n = graph.node(id);
            let name = fp8c_ir::interface_name(&n.op);
            Ok((name.to_string(), static_type(name, &n.outputs[0])?))
        })
        .collect::<Result<Vec<_>, RuntimeError>>()?;
    let mut params = Vec::new();
    for &id in graph.params() {
        let n = graph.node(id);
        // Weights are keyed by the param's own name, which a node renamed by a pass (`w1.1`)
        // keeps.
        let name = fp8c_ir::interface_name(&n.op);
        let data = weights.get(name).ok_or_else(|| RuntimeError::Param {
            name: name.to_string(),
            message: "no data".into(),
        })?;
        if data.ty() != n.outputs[0] {
            return Err(RuntimeError::Param {
                name: name.to_string(),
                message: format!(
                    "data has type {}, the graph declares {}",
                    data.ty(),
                    n.outputs[0]
                ),
            });
        }
        params.push(data.clone());
    }
    let mut state = Vec::new();
    for &(id, init) in graph.state() {
        let n = graph.node(id);
        let name = fp8c_ir::interface_name(&n.op);
        let ty = static_type(name, &n.outputs[0])?;
        let t = fp8c_runtime::initial_state(ty.dtype, &ty.known_dims().unwrap_or_default(), init)
            .map_err(|message| RuntimeError::State {
            name: name.to_string(),
            message,
        })?;
        state.push((name.to_string(), t));
    }
    // Results: the outputs, then the state updates (emit::result_values' order).
    let results = emit::result_values(graph);
    let n_outputs = graph.outputs().len();
    let outputs = results
        .iter()
        .map(|&(name, v)| (name.to_string(), graph.value_type(v).clone()))
        .collect();
    let updates = results[n_outputs..]
        .iter()
        .map(|&(name, _)| {
            state
                .iter()
                .position(|(n, _)| n == name)
                .expect("every update names a state entry")
        })
        .collect();

    let ctx = emit::context();
    let (mut module, symbol) =
        emit::build(&ctx, graph).map_err(|e| RuntimeError::Other(e.to_string()))?;
    lower(&ctx, &mut module)?;
    let engine = engine_with_utilities(&module, &runtime_utilities())?;
    let ciface = format!("_mlir_ciface_{symbol}");
    if engine.lookup(&ciface).is_null() {
        return Err(RuntimeError::Other(format!(
            "MLIR's JIT did not produce {ciface}"
        )));
    }
    // The engine owns its compiled code; the module and context are no longer needed.
    drop(module);
    drop(ctx);
    Ok(Box::new(MlirExecutable {
        engine,
        // The C API's invoke prefixes `_mlir_ciface_` itself.
        symbol,
        inputs,
        params,
        state,
        outputs,
        updates,
    }))
}

/// Lowers an emitted module to the LLVM dialect with MLIR's passes ([`crate::LOWERING`]).
fn lower(ctx: &melior::Context, module: &mut melior::ir::Module<'_>) -> Result<(), RuntimeError> {
    register_all_passes();
    register_all_llvm_translations(ctx);
    let pm = PassManager::new(ctx);
    parse_pass_pipeline(pm.as_operation_pass_manager(), crate::LOWERING)
        .map_err(|e| unavailable(format!("MLIR's pass pipeline does not parse: {e}")))?;
    pm.run(module)
        .map_err(|e| RuntimeError::Other(format!("MLIR's lowering failed: {e}")))?;
    if !module.as_operation().verify() {
        return Err(RuntimeError::Other(
            "the lowered module does not verify".into(),
        ));
    }
    Ok(())
}

/// MLIR's C runner utilities (package libmlir-22): they define `memrefCopy`, which strided
/// copies lower to.
fn runtime_utilities() -> String {
    format!("{}/libmlir_c_runner_utils.so", env!("FP8C_MLIR_LIBDIR"))
}

/// The JIT for `module` (lowered to the LLVM dialect), with the shared library `utils` loaded.
///
/// MLIR's C API reads each shared-library path as a C string (`mlirExecutionEngineCreate`
/// passes `sharedLibPaths[i].data` on, ignoring the length), so the path goes as an owned,
/// NUL-terminated copy: a Rust `&str` has no NUL after it, and MLIR would read past it (one CI
/// run printed `Failed to create MemoryBuffer for: …libmlir_c_runner_utils.so<garbage>`). A
/// library the engine did not load is an error: MLIR only prints its failure and goes on.
pub(crate) fn engine_with_utilities(
    module: &melior::ir::Module<'_>,
    utils: &str,
) -> Result<ExecutionEngine, RuntimeError> {
    if !std::path::Path::new(utils).is_file() {
        return Err(unavailable(format!(
            "{utils} (MLIR's runtime utilities, package libmlir-22) is missing"
        )));
    }
    let path = std::ffi::CString::new(utils)
        .map_err(|_| unavailable(format!("{utils:?}: a library path with a NUL byte")))?;
    // The &str melior takes, over the CString's bytes and its NUL.
    let with_nul = std::str::from_utf8(path.as_bytes_with_nul())
        .map_err(|_| unavailable(format!("{utils:?}: a library path that is not UTF-8")))?;
    let engine = ExecutionEngine::new(module, OPT_LEVEL, &[with_nul], false, false);
    if !loaded(&path) {
        return Err(unavailable(format!(
            "MLIR's JIT could not load its runtime utilities {utils} (memrefCopy, which strided copies need)"
        )));
    }
    Ok(engine)
}

/// Whether the shared library at `path` is loaded in this process (`dlopen` with
/// `RTLD_NOLOAD`, which loads nothing).
fn loaded(path: &std::ffi::CStr) -> bool {
    const RTLD_LAZY: std::ffi::c_int = 0x1;
    const RTLD_NOLOAD: std::ffi::c_int = 0x4;
    // SAFETY: `path` is a NUL-terminated string; with RTLD_NOLOAD dlopen only looks the
    // library up, and a handle it returns is closed again at once.
    unsafe {
        let h = dlopen(path.as_ptr(), RTLD_LAZY | RTLD_NOLOAD);
        if h.is_null() {
            return false;
        }
        dlclose(h);
    }
    true
}

/// A strided memref descriptor over `ptr` with `dims` (row-major).
fn descriptor(ptr: *mut u8, dims: &[u64]) -> Vec<i64> {
    let mut d = vec![ptr as i64, ptr as i64, 0];
    d.extend(dims.iter().map(|&x| x as i64));
    let mut strides = vec![1i64; dims.len()];
    for k in (0..dims.len().saturating_sub(1)).rev() {
        strides[k] = strides[k + 1] * dims[k + 1] as i64;
    }
    d.extend(strides);
    d
}

unsafe extern "C" {
    fn free(p: *mut std::ffi::c_void);
    fn dlopen(filename: *const std::ffi::c_char, flag: std::ffi::c_int) -> *mut std::ffi::c_void;
    fn dlclose(handle: *mut std::ffi::c_void) -> std::ffi::c_int;
}

impl Executable for MlirExecutable {
    fn run_observed(
        &mut self,
        inputs: &BTreeMap<String, Tensor>,
        _obs: &mut Observer<'_>,
    ) -> Result<BTreeMap<String, Tensor>, RuntimeError> {
        for name in inputs.keys() {
            if !self.inputs.iter().any(|(n, _)| n == name) {
                return Err(RuntimeError::input(name, "the graph has no such input"));
            }
        }
        // Argument data: copies the JIT code may read (it never writes its arguments).
        let mut data: Vec<Vec<u8>> = Vec::new();
        let mut dims: Vec<Vec<u64>> = Vec::new();
        for (name, ty) in &self.inputs {
            let t = inputs
                .get(name)
                .ok_or_else(|| RuntimeError::input(name, "missing"))?;
            if &t.ty() != ty {
                return Err(RuntimeError::input(
                    name,
                    format!("has type {}, the graph expects {ty}", t.ty()),
                ));
            }
            data.push(t.bytes().to_vec());
            dims.push(ty.known_dims().unwrap_or_default());
        }
        for p in self.params.iter().chain(self.state.iter().map(|(_, t)| t)) {
            data.push(p.bytes().to_vec());
            dims.push(p.shape().to_vec());
        }
        let mut descs: Vec<Vec<i64>> = data
            .iter_mut()
            .zip(&dims)
            .map(|(d, s)| descriptor(d.as_mut_ptr(), s))
            .collect();
        let mut desc_ptrs: Vec<*mut i64> = descs.iter_mut().map(|d| d.as_mut_ptr()).collect();
        let result_len: usize = self.outputs.iter().map(|(_, t)| 3 + 2 * t.rank()).sum();
        let mut results = vec![0i64; result_len.max(1)];
        let mut results_ptr = results.as_mut_ptr();
        let mut args: Vec<*mut ()> = vec![(&mut results_ptr as *mut *mut i64).cast()];
        for p in desc_ptrs.iter_mut() {
            args.push((p as *mut *mut i64).cast());
        }
        // SAFETY: `args` holds one pointer per argument of the `_mlir_ciface_` function
        // (results struct, then one descriptor per input and param), each descriptor over a
        // live buffer of the declared shape; the JIT code reads the arguments and writes the
        // results struct only.
        unsafe { self.engine.invoke_packed(&self.symbol, &mut args) }
            .map_err(|e| RuntimeError::Other(format!("the JIT-compiled function failed: {e}")))?;
        let mut got = Vec::with_capacity(self.outputs.len());
        let mut at = 0;
        for (name, ty) in &self.outputs {
            let r = ty.rank();
            let desc = &results[at..at + 3 + 2 * r];
            at += 3 + 2 * r;
            let (allocated, aligned, offset) = (desc[0] as *mut u8, desc[1] as *const u8, desc[2]);
            let shape: Vec<u64> = desc[3..3 + r].iter().map(|&x| x as u64).collect();
            let strides = &desc[3 + r..3 + 2 * r];
            let es = ty.dtype.size();
            let n: usize = shape.iter().product::<u64>() as usize;
            // Gather in row-major order whatever the strides.
            let mut bytes = vec![0u8; n * es];
            for i in 0..n {
                let (mut rem, mut off) = (i, offset);
                for k in (0..r).rev() {
                    let d = shape[k] as usize;
                    off += (rem % d) as i64 * strides[k];
                    rem /= d;
                }
                // SAFETY: the descriptor comes from the JIT code and covers `shape` with
                // `strides` from `aligned + offset`.
                let src = unsafe { aligned.add(off as usize * es) };
                unsafe { std::ptr::copy_nonoverlapping(src, bytes[i * es..].as_mut_ptr(), es) };
            }
            let owned_by_us = data.iter().any(|d| {
                let range = d.as_ptr_range();
                range.contains(&(allocated as *const u8))
            });
            if !owned_by_us && !allocated.is_null() {
                // SAFETY: a result buffer the JIT code allocated with malloc and returned.
                unsafe { free(allocated.cast()) };
            }
            let t = Tensor::from_bytes(ty.dtype, shape, bytes)
                .map_err(|e| RuntimeError::Other(format!("output \"{name}\": {e}")))?;
            got.push((name.clone(), t));
        }
        // The results after the outputs are the state's new values.
        let updated = got.split_off(got.len() - self.updates.len());
        for ((_, t), &i) in updated.into_iter().zip(&self.updates) {
            self.state[i].1 = t;
        }
        Ok(got.into_iter().collect())
    }

    fn state(&self) -> BTreeMap<String, Tensor> {
        self.state.iter().cloned().collect()
    }

    fn set_state(&mut self, name: &str, value: Tensor) -> Result<(), RuntimeError> {
        let entry = self
            .state
            .iter_mut()
            .find(|(n, _)| n == name)
            .ok_or_else(|| RuntimeError::State {
                name: name.into(),
                message: "no such state entry".into(),
            })?;
        if value.ty() != entry.1.ty() {
            return Err(RuntimeError::State {
                name: name.into(),
                message: format!(
                    "new value has type {}, the state is {}",
                    value.ty(),
                    entry.1.ty()
                ),
            });
        }
        entry.1 = value;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A lowered module of a small graph.
    fn lowered(ctx: &melior::Context) -> melior::ir::Module<'_> {
        let g = fp8c_ir::text::parse(
            "graph @t(%x: f32[2,3]) {\n  %0: f32[3,2] = transpose %x perm=[1,0]  # t\n  return %0 as \"y\"\n}\n",
        )
        .unwrap();
        let (mut module, _) = emit::build(ctx, &g).unwrap();
        lower(ctx, &mut module).unwrap();
        module
    }

    /// Issue #46 case 13: the JIT was handed the runtime utilities' path as a `&str` with no
    /// NUL after it, which MLIR reads as a C string (one CI run read
    /// `…libmlir_c_runner_utils.so<garbage>` and went on without the library). Here the path
    /// is a slice of a longer string, so the bytes after it are not NUL: the library loads
    /// all the same; and a library that does not load is an error, not a message and a JIT
    /// without `memrefCopy`.
    #[test]
    fn the_runtime_utilities_path_is_nul_terminated_and_a_failed_load_is_an_error() {
        let ctx = emit::context();
        let module = lowered(&ctx);
        let utils = runtime_utilities();
        let c = std::ffi::CString::new(utils.clone()).unwrap();
        assert!(!loaded(&c), "nothing loaded the utilities before this test");
        let longer = format!("{utils}.not-this-part");
        let path = &longer[..utils.len()];
        let engine = engine_with_utilities(&module, path).unwrap();
        assert!(loaded(&c), "the JIT loaded {utils}");
        drop(engine);
        let d = tempfile::tempdir().unwrap();
        let fake = d.path().join("libnot_a_library.so");
        std::fs::write(&fake, b"not an ELF file").unwrap();
        let err = engine_with_utilities(&module, fake.to_str().unwrap())
            .err()
            .expect("a file that is no library does not load")
            .to_string();
        assert!(
            err.contains("could not load its runtime utilities"),
            "{err}"
        );
    }
}
