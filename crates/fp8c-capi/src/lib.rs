//! fp8c's C API (`include/fp8c.h`, generated from this crate by cbindgen): opaque handles for
//! a model, compile options, a compiled model and a runner; load, compile with the CLI's
//! options (`fp8c_options_set(opts, "recipe", "delayed")`), run on caller-owned buffers
//! with dtype and shape, read the outputs, free. A thin layer over `fp8c-session`: every
//! behaviour is the library's, and the outputs are `fp8c run`'s bit for bit.
//!
//! Every call returns an [`Fp8cStatus`]; on failure [`fp8c_last_error`] gives the library's
//! message (file, node, value at fault). No panic crosses the boundary ([`status`]).
//! Handles are used from one thread at a time; each is freed by its own `_free` function
//! (NULL is accepted and ignored).

use fp8c_session::{CompileSettings, Compiled, DType, Device, Model, Purpose, Runner, Tensor};
use std::ffi::{CStr, CString, c_char, c_void};

mod status;

use status::{Failure, guard, invalid, null};
pub use status::{Fp8cStatus, fp8c_last_error};

/// An element type: the `dtype` field of an [`Fp8cTensor`] holds one of these values.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fp8cDtype {
    /// IEEE single precision.
    F32 = 0,
    /// IEEE double precision.
    F64 = 1,
    /// IEEE half precision.
    F16 = 2,
    /// bfloat16.
    Bf16 = 3,
    /// FP8 E4M3 (the "FN" variant: max 448, no infinities).
    F8e4m3 = 4,
    /// FP8 E5M2.
    F8e5m2 = 5,
    /// 64-bit signed integer.
    I64 = 6,
    /// 32-bit signed integer.
    I32 = 7,
    /// 16-bit signed integer.
    I16 = 8,
    /// 8-bit signed integer.
    I8 = 9,
    /// 8-bit unsigned integer.
    U8 = 10,
    /// 16-bit unsigned integer.
    U16 = 11,
    /// 32-bit unsigned integer.
    U32 = 12,
    /// 64-bit unsigned integer.
    U64 = 13,
    /// A byte, 0 or 1.
    Bool = 14,
}

/// fp8c's dtype ↔ the C enum.
const DTYPES: [(Fp8cDtype, DType); 15] = [
    (Fp8cDtype::F32, DType::F32),
    (Fp8cDtype::F64, DType::F64),
    (Fp8cDtype::F16, DType::F16),
    (Fp8cDtype::Bf16, DType::BF16),
    (Fp8cDtype::F8e4m3, DType::F8E4M3),
    (Fp8cDtype::F8e5m2, DType::F8E5M2),
    (Fp8cDtype::I64, DType::I64),
    (Fp8cDtype::I32, DType::I32),
    (Fp8cDtype::I16, DType::I16),
    (Fp8cDtype::I8, DType::I8),
    (Fp8cDtype::U8, DType::U8),
    (Fp8cDtype::U16, DType::U16),
    (Fp8cDtype::U32, DType::U32),
    (Fp8cDtype::U64, DType::U64),
    (Fp8cDtype::Bool, DType::Bool),
];

/// A tensor passed in or read out: a name, a dtype, a shape and the bytes (C order, little
/// endian). For an input every field is the caller's and is read during the call only; an
/// output's fields point into the runner, valid until its next run or free.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Fp8cTensor {
    /// The graph input's or output's name (NUL-terminated UTF-8).
    pub name: *const c_char,
    /// An [`Fp8cDtype`] value.
    pub dtype: u32,
    /// Number of dims.
    pub rank: usize,
    /// `rank` dims.
    pub shape: *const i64,
    /// The elements.
    pub data: *const c_void,
    /// Bytes at `data` (elements × element size).
    pub nbytes: usize,
}

/// A loaded model.
pub struct Fp8cModel {
    model: Model,
}

/// Compile options: the CLI's compile flags by name, and the device.
pub struct Fp8cOptions {
    settings: CompileSettings,
}

/// A compiled model.
pub struct Fp8cCompiled {
    compiled: Compiled,
    model: Model,
}

/// A compiled model loaded on a device, with the outputs of its last run.
pub struct Fp8cRunner {
    runner: Runner,
    model: Model,
    /// The last run's outputs in program order: name, shape, tensor.
    outputs: Vec<(CString, Vec<i64>, Tensor)>,
}

/// A NUL-terminated string argument as UTF-8.
///
/// # Safety
/// `s` is NULL or a valid NUL-terminated string.
unsafe fn text<'a>(s: *const c_char, what: &str) -> Result<&'a str, Failure> {
    if s.is_null() {
        return Err(null(what));
    }
    // SAFETY: non-null, NUL-terminated by the caller's contract.
    unsafe { CStr::from_ptr(s) }
        .to_str()
        .map_err(|_| invalid(format!("{what}: not UTF-8")))
}

/// Drops a handle made by [`put`] (NULL: nothing); a panic in a destructor is caught.
///
/// # Safety
/// `p` is NULL or came from [`put`] and was not freed before.
unsafe fn free_handle<T>(p: *mut T) {
    if !p.is_null() {
        // SAFETY: made by Box::into_raw in `put`, freed once (the caller's contract).
        let b = unsafe { Box::from_raw(p) };
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(b)));
    }
}

/// Writes `value` through the out-pointer `out` (checked non-NULL first).
///
/// # Safety
/// `out` is NULL or valid for a write of a `*mut T`.
unsafe fn put<T>(out: *mut *mut T, value: T) -> Result<(), Failure> {
    // SAFETY: checked non-null; valid for writes by the caller's contract.
    unsafe { *out = Box::into_raw(Box::new(value)) };
    Ok(())
}

/// Loads an ONNX model or fp8c IR text from `path` into `*out`.
///
/// # Safety
/// `path` is a NUL-terminated string; `out` is valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fp8c_model_load(
    path: *const c_char,
    out: *mut *mut Fp8cModel,
) -> Fp8cStatus {
    guard(|| {
        if out.is_null() {
            return Err(null("out"));
        }
        // SAFETY: the caller's contract.
        let path = unsafe { text(path, "path") }?;
        let model = Model::load(path)?;
        // SAFETY: checked non-null above.
        unsafe { put(out, Fp8cModel { model }) }
    })
}

/// Frees a model (NULL: nothing).
///
/// # Safety
/// `model` is NULL or a handle from [`fp8c_model_load`], not freed before.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fp8c_model_free(model: *mut Fp8cModel) {
    // SAFETY: the caller's contract: made by fp8c_model_load, freed once.
    unsafe { free_handle(model) }
}

/// New compile options: `fp8c compile`'s defaults (FP8, current scaling).
#[unsafe(no_mangle)]
pub extern "C" fn fp8c_options_new() -> *mut Fp8cOptions {
    Box::into_raw(Box::new(Fp8cOptions {
        settings: CompileSettings::default(),
    }))
}

/// Sets a compile option by its `fp8c compile` flag name (`precision`, `recipe`, `format`,
/// `amax-history`, `amax-algo`, `margin`, `amax-epsilon`, `fast-accum`, `config`,
/// `min-fp8-flops`, `stop-after`; repeatable: `input-shape` (`x=16x64`), `keep-high`,
/// `force-fp8`, `granularity`, `print-after`; switches take "true" or "false":
/// `power-2-scale`, `keep-first-last`, `fp8-attention`, `pad-to-16`, `no-fuse`,
/// `hopper-accum`, `no-verify`). Values are checked when compiling, as the CLI checks them.
///
/// # Safety
/// `options` is a handle from [`fp8c_options_new`]; `key` and `value` are NUL-terminated.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fp8c_options_set(
    options: *mut Fp8cOptions,
    key: *const c_char,
    value: *const c_char,
) -> Fp8cStatus {
    guard(|| {
        // SAFETY: the caller's contract (a live handle, used from one thread).
        let Some(o) = (unsafe { options.as_mut() }) else {
            return Err(null("options"));
        };
        // SAFETY: the caller's contract.
        let (key, value) = unsafe { (text(key, "key")?, text(value, "value")?) };
        set_option(&mut o.settings, key, value)
    })
}

/// One option into the settings (see [`fp8c_options_set`]).
fn set_option(s: &mut CompileSettings, key: &str, value: &str) -> Result<(), Failure> {
    let flag = key.trim_start_matches("--").replace('_', "-");
    let v = value.to_string();
    let number = |what: &str| invalid(format!("--{flag} {value}: {what}"));
    let switch = || match value {
        "true" | "1" => Ok(true),
        "false" | "0" => Ok(false),
        _ => Err(invalid(format!("--{flag} {value}: expected true or false"))),
    };
    match flag.as_str() {
        "precision" => {
            s.precision = value
                .parse()
                .map_err(|e: String| invalid(format!("--precision {value}: {e}")))?
        }
        "recipe" => s.recipe.kind = Some(v),
        "format" => s.recipe.format = Some(v),
        "amax-history" => {
            s.recipe.amax_history = Some(value.parse().map_err(|_| number("not a count"))?)
        }
        "amax-algo" => s.recipe.amax_algo = Some(v),
        "margin" => s.recipe.margin = Some(value.parse().map_err(|_| number("not a number"))?),
        "amax-epsilon" => {
            s.recipe.amax_epsilon = Some(value.parse().map_err(|_| number("not a number"))?)
        }
        "power-2-scale" => s.recipe.power_2_scale = switch()?,
        "fast-accum" => s.recipe.fast_accum = Some(v),
        "config" => s.config = Some(v.into()),
        "keep-high" => s.keep_high.push(v),
        "force-fp8" => s.force_fp8.push(v),
        "granularity" => s.granularity.push(v),
        "input-shape" => s.input_shapes.push(v),
        "print-after" => s.print_after.push(v),
        "stop-after" => s.stop_after = Some(v),
        "min-fp8-flops" => {
            s.min_fp8_flops = Some(value.parse().map_err(|_| number("not a count"))?)
        }
        "keep-first-last" => s.keep_first_last = switch()?,
        "fp8-attention" => s.fp8_attention = switch()?,
        "pad-to-16" => s.pad_to_16 = switch()?,
        "no-fuse" => s.no_fuse = switch()?,
        "hopper-accum" => s.hopper_accum = switch()?,
        "no-verify" => s.no_verify = switch()?,
        _ => return Err(invalid(format!("unknown compile option \"{key}\""))),
    }
    Ok(())
}

/// Frees compile options (NULL: nothing).
///
/// # Safety
/// `options` is NULL or a handle from [`fp8c_options_new`], not freed before.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fp8c_options_free(options: *mut Fp8cOptions) {
    // SAFETY: the caller's contract: made by fp8c_options_new, freed once.
    unsafe { free_handle(options) }
}

/// Compiles `model` with `options` (NULL: the defaults) into `*out`, as `fp8c run` compiles
/// it for inference.
///
/// # Safety
/// `model` is a live model handle, `options` NULL or a live options handle, `out` valid for a
/// write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fp8c_compile(
    model: *const Fp8cModel,
    options: *const Fp8cOptions,
    out: *mut *mut Fp8cCompiled,
) -> Fp8cStatus {
    guard(|| {
        // SAFETY: the caller's contract.
        let Some(m) = (unsafe { model.as_ref() }) else {
            return Err(null("model"));
        };
        if out.is_null() {
            return Err(null("out"));
        }
        let defaults = CompileSettings::default();
        // SAFETY: the caller's contract.
        let settings = unsafe { options.as_ref() }.map_or(&defaults, |o| &o.settings);
        let opts = settings.options(Purpose::Inference { calibrated: false })?;
        let compiled = m.model.compile(&opts)?;
        let model = m.model.clone();
        // SAFETY: checked non-null above.
        unsafe { put(out, Fp8cCompiled { compiled, model }) }
    })
}

/// The compiled model's IR text into `*out` (free it with [`fp8c_string_free`]).
///
/// # Safety
/// `compiled` is a live handle; `out` is valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fp8c_compiled_ir_text(
    compiled: *const Fp8cCompiled,
    out: *mut *mut c_char,
) -> Fp8cStatus {
    guard(|| {
        // SAFETY: the caller's contract.
        let Some(c) = (unsafe { compiled.as_ref() }) else {
            return Err(null("compiled"));
        };
        if out.is_null() {
            return Err(null("out"));
        }
        let s = CString::new(c.compiled.ir_text()).map_err(|_| invalid("IR text holds a NUL"))?;
        // SAFETY: checked non-null above.
        unsafe { *out = s.into_raw() };
        Ok(())
    })
}

/// Frees a string returned by the API (NULL: nothing).
///
/// # Safety
/// `s` is NULL or a string from this API, not freed before.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fp8c_string_free(s: *mut c_char) {
    if !s.is_null() {
        // SAFETY: made by CString::into_raw here, freed once.
        drop(unsafe { CString::from_raw(s) });
    }
}

/// Frees a compiled model (NULL: nothing).
///
/// # Safety
/// `compiled` is NULL or a handle from [`fp8c_compile`], not freed before.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fp8c_compiled_free(compiled: *mut Fp8cCompiled) {
    // SAFETY: the caller's contract: made by fp8c_compile, freed once.
    unsafe { free_handle(compiled) }
}

/// Loads the compiled model on `device` (`cpu`, `cuda`, `cuda-emulated`, `mlir`; NULL:
/// `cpu`) into `*out`.
///
/// # Safety
/// `compiled` is a live handle; `device` NULL or NUL-terminated; `out` valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fp8c_runner_new(
    compiled: *const Fp8cCompiled,
    device: *const c_char,
    out: *mut *mut Fp8cRunner,
) -> Fp8cStatus {
    guard(|| {
        // SAFETY: the caller's contract.
        let Some(c) = (unsafe { compiled.as_ref() }) else {
            return Err(null("compiled"));
        };
        if out.is_null() {
            return Err(null("out"));
        }
        let device: Device = if device.is_null() {
            Device::Cpu
        } else {
            // SAFETY: the caller's contract.
            let name = unsafe { text(device, "device") }?;
            name.parse()
                .map_err(|e: String| invalid(format!("device {name}: {e}")))?
        };
        let runner = c.compiled.prepare(device)?;
        let r = Fp8cRunner {
            runner,
            model: c.model.clone(),
            outputs: Vec::new(),
        };
        // SAFETY: checked non-null above.
        unsafe { put(out, r) }
    })
}

/// One input tensor from the caller's description (its bytes copied).
///
/// # Safety
/// `t`'s pointers are valid as [`Fp8cTensor`] describes.
unsafe fn input(t: &Fp8cTensor) -> Result<(String, Tensor), Failure> {
    // SAFETY: the caller's contract.
    let name = unsafe { text(t.name, "input name") }?.to_string();
    let what = format!("input \"{name}\"");
    let Some(&(_, dtype)) = DTYPES.iter().find(|(c, _)| *c as u32 == t.dtype) else {
        return Err(invalid(format!(
            "{what}: dtype {} is no Fp8cDtype",
            t.dtype
        )));
    };
    let shape: Vec<u64> = if t.rank == 0 {
        Vec::new()
    } else if t.shape.is_null() {
        return Err(null(&format!("{what}: shape")));
    } else {
        // SAFETY: `rank` dims at `shape` by the caller's contract.
        let dims = unsafe { std::slice::from_raw_parts(t.shape, t.rank) };
        dims.iter()
            .map(|&d| u64::try_from(d).map_err(|_| invalid(format!("{what}: dim {d} is negative"))))
            .collect::<Result<_, _>>()?
    };
    let bytes: &[u8] = if t.nbytes == 0 {
        &[]
    } else if t.data.is_null() {
        return Err(null(&format!("{what}: data")));
    } else {
        // SAFETY: `nbytes` readable bytes at `data` by the caller's contract.
        unsafe { std::slice::from_raw_parts(t.data.cast::<u8>(), t.nbytes) }
    };
    let tensor = Tensor::from_storage(dtype, shape, fp8c_session::Storage::from_slice(bytes))
        .map_err(|e| invalid(format!("{what}: {e}")))?;
    Ok((name, tensor))
}

/// Runs on `n_inputs` tensors at `inputs` (every graph input, by name; an f32 array for a
/// bf16 input is rounded, as `fp8c run` does). The outputs are then read with
/// [`fp8c_output_count`] and [`fp8c_output`].
///
/// # Safety
/// `runner` is a live handle; `inputs` points to `n_inputs` valid [`Fp8cTensor`]s.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fp8c_run(
    runner: *mut Fp8cRunner,
    inputs: *const Fp8cTensor,
    n_inputs: usize,
) -> Fp8cStatus {
    guard(|| {
        // SAFETY: the caller's contract.
        let Some(r) = (unsafe { runner.as_mut() }) else {
            return Err(null("runner"));
        };
        r.outputs.clear();
        let given: &[Fp8cTensor] = if n_inputs == 0 {
            &[]
        } else if inputs.is_null() {
            return Err(null("inputs"));
        } else {
            // SAFETY: `n_inputs` tensors at `inputs` by the caller's contract.
            unsafe { std::slice::from_raw_parts(inputs, n_inputs) }
        };
        let mut feed = std::collections::BTreeMap::new();
        for t in given {
            // SAFETY: the caller's contract.
            let (name, tensor) = unsafe { input(t) }?;
            let tensor = r.model.conform_input(&name, tensor)?;
            if feed.insert(name.clone(), tensor).is_some() {
                return Err(invalid(format!("input \"{name}\" is given twice")));
            }
        }
        let mut outs = r.runner.run(&feed)?;
        for (name, _) in r.runner.program().outputs() {
            if let Some(t) = outs.remove(name) {
                let shape = t.shape().iter().map(|&d| d as i64).collect();
                let c = CString::new(name.as_str())
                    .map_err(|_| invalid("an output name holds a NUL"))?;
                r.outputs.push((c, shape, t));
            }
        }
        Ok(())
    })
}

/// The number of outputs of the last run (0 before the first).
///
/// # Safety
/// `runner` is NULL or a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fp8c_output_count(runner: *const Fp8cRunner) -> usize {
    // SAFETY: the caller's contract.
    unsafe { runner.as_ref() }.map_or(0, |r| r.outputs.len())
}

/// Output `index` of the last run (program order) into `*out`; its pointers stay valid until
/// the runner's next run or free.
///
/// # Safety
/// `runner` is a live handle; `out` is valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fp8c_output(
    runner: *const Fp8cRunner,
    index: usize,
    out: *mut Fp8cTensor,
) -> Fp8cStatus {
    guard(|| {
        // SAFETY: the caller's contract.
        let Some(r) = (unsafe { runner.as_ref() }) else {
            return Err(null("runner"));
        };
        if out.is_null() {
            return Err(null("out"));
        }
        let Some((name, shape, t)) = r.outputs.get(index) else {
            return Err(invalid(format!(
                "output {index}: the last run has {} outputs",
                r.outputs.len()
            )));
        };
        let dtype = DTYPES
            .iter()
            .find(|(_, d)| *d == t.dtype())
            .map(|(c, _)| *c as u32)
            .ok_or_else(|| {
                invalid(format!(
                    "output {index}: dtype {} has no Fp8cDtype",
                    t.dtype()
                ))
            })?;
        let view = Fp8cTensor {
            name: name.as_ptr(),
            dtype,
            rank: shape.len(),
            shape: shape.as_ptr(),
            data: t.bytes().as_ptr().cast(),
            nbytes: t.bytes().len(),
        };
        // SAFETY: checked non-null above.
        unsafe { *out = view };
        Ok(())
    })
}

/// Frees a runner and its outputs (NULL: nothing).
///
/// # Safety
/// `runner` is NULL or a handle from [`fp8c_runner_new`], not freed before.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fp8c_runner_free(runner: *mut Fp8cRunner) {
    // SAFETY: the caller's contract: made by fp8c_runner_new, freed once.
    unsafe { free_handle(runner) }
}

/// The library's version (`0.1.0`), a static string.
#[unsafe(no_mangle)]
pub extern "C" fn fp8c_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}
