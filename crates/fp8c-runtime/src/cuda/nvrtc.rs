//! Compiling kernel sources with NVRTC, and the compiled-kernel cache.
//!
//! Sources compile straight to a cubin for the device's architecture (`sm_90` on Hopper): no
//! PTX is JIT-compiled by the driver, so an NVRTC newer than the driver still works within a
//! CUDA major version. Headers (`common.cuh`, the generated `ew_expr.cuh`) are handed to NVRTC
//! by name; no CUDA header is needed.
//!
//! Every compile uses [`OPTIONS`]: IEEE division and square root, no FMA contraction and no
//! flush to zero, so that `a * b` in a kernel is the CPU's `a * b` and the FP8 encoders are
//! bit-exact; and ptxas warnings for register spills and local memory, which the CI test
//! treats as failures.
//!
//! Cache: compiled cubins are kept in memory for the process and on disk (one file per key in
//! `$FP8C_KERNEL_CACHE`, else `$XDG_CACHE_HOME/fp8c/kernels`, else `~/.cache/fp8c/kernels`;
//! `FP8C_KERNEL_CACHE=off` disables it). The key hashes the source, every header, the options,
//! the architecture and NVRTC's version, so an edited kernel never meets a stale binary.

use crate::backend::RuntimeError;
use cudarc::nvrtc::sys;
use std::collections::HashMap;
use std::ffi::{CStr, CString, c_char, c_int};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// Options every kernel is compiled with (the architecture is added per device).
pub const OPTIONS: &[&str] = &[
    "--std=c++17",
    "--fmad=false",
    "--ftz=false",
    "--prec-div=true",
    "--prec-sqrt=true",
    "--display-error-number",
    "--ptxas-options=--warn-on-spills",
    "--ptxas-options=--warn-on-local-memory-usage",
];

/// The result of one compilation: the cubin and NVRTC's log (warnings and ptxas reports).
#[derive(Clone, Debug)]
pub struct Compiled {
    /// The cubin image.
    pub cubin: Arc<Vec<u8>>,
    /// NVRTC's log, empty when it had nothing to say.
    pub log: String,
}

fn check(r: sys::nvrtcResult, what: &str) -> Result<(), RuntimeError> {
    if r == sys::nvrtcResult::NVRTC_SUCCESS {
        return Ok(());
    }
    // SAFETY: nvrtcGetErrorString returns a static NUL-terminated string for any code.
    let msg = unsafe { CStr::from_ptr(sys::nvrtcGetErrorString(r)) };
    Err(RuntimeError::Other(format!(
        "NVRTC {what}: {}",
        msg.to_string_lossy()
    )))
}

/// NVRTC's version (major, minor).
pub fn version() -> Result<(i32, i32), RuntimeError> {
    super::libs::require_nvrtc()?;
    let (mut major, mut minor) = (0 as c_int, 0 as c_int);
    // SAFETY: two valid out-pointers.
    check(
        unsafe { sys::nvrtcVersion(&mut major, &mut minor) },
        "version",
    )?;
    Ok((major, minor))
}

/// The lines of an NVRTC log that are warnings or errors (ptxas reports are neither).
pub fn problems(log: &str) -> Vec<String> {
    log.lines()
        .filter(|l| {
            let l = l.to_ascii_lowercase();
            l.contains("warning") || l.contains("error")
        })
        .map(str::to_string)
        .collect()
}

fn c_string(s: &str, what: &str) -> Result<CString, RuntimeError> {
    CString::new(s).map_err(|_| RuntimeError::Other(format!("{what} contains a NUL byte")))
}

/// A program being compiled; destroyed on drop.
struct Prog(sys::nvrtcProgram);

impl Drop for Prog {
    fn drop(&mut self) {
        // SAFETY: created by nvrtcCreateProgram and destroyed once.
        unsafe {
            sys::nvrtcDestroyProgram(&mut self.0);
        }
    }
}

/// Compiles `source` (named `name` in messages) with `headers` (include name, text) for `arch`
/// (`sm_90`) with [`OPTIONS`] and `extra` options. A compile error is an `Err` carrying the
/// log; warnings come back in [`Compiled::log`] (see [`problems`]). No caching.
pub fn compile(
    name: &str,
    source: &str,
    headers: &[(&str, &str)],
    arch: &str,
    extra: &[&str],
) -> Result<Compiled, RuntimeError> {
    super::libs::require_nvrtc()?;
    let src = c_string(source, name)?;
    let cname = c_string(name, "a kernel file name")?;
    let header_texts: Vec<CString> = headers
        .iter()
        .map(|(n, t)| c_string(t, n))
        .collect::<Result<_, _>>()?;
    let header_names: Vec<CString> = headers
        .iter()
        .map(|(n, _)| c_string(n, "a header name"))
        .collect::<Result<_, _>>()?;
    let text_ptrs: Vec<*const c_char> = header_texts.iter().map(|c| c.as_ptr()).collect();
    let name_ptrs: Vec<*const c_char> = header_names.iter().map(|c| c.as_ptr()).collect();
    let mut opts: Vec<CString> = vec![c_string(&format!("--gpu-architecture={arch}"), "arch")?];
    for o in OPTIONS.iter().chain(extra) {
        opts.push(c_string(o, "an option")?);
    }
    let opt_ptrs: Vec<*const c_char> = opts.iter().map(|c| c.as_ptr()).collect();

    let mut raw: sys::nvrtcProgram = std::ptr::null_mut();
    // SAFETY: every pointer is a live NUL-terminated string; the arrays have `len` entries.
    check(
        unsafe {
            sys::nvrtcCreateProgram(
                &mut raw,
                src.as_ptr(),
                cname.as_ptr(),
                headers.len() as c_int,
                if headers.is_empty() {
                    std::ptr::null()
                } else {
                    text_ptrs.as_ptr()
                },
                if headers.is_empty() {
                    std::ptr::null()
                } else {
                    name_ptrs.as_ptr()
                },
            )
        },
        "create program",
    )?;
    let prog = Prog(raw);
    // SAFETY: a valid program and option array.
    let compiled =
        unsafe { sys::nvrtcCompileProgram(prog.0, opt_ptrs.len() as c_int, opt_ptrs.as_ptr()) };
    let log = program_log(&prog)?;
    if compiled != sys::nvrtcResult::NVRTC_SUCCESS {
        let status = check(compiled, "compile")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        return Err(RuntimeError::Other(format!(
            "kernel file {name} does not compile for {arch} ({status}):\n{log}"
        )));
    }
    let mut size = 0usize;
    // SAFETY: a compiled program and a valid out-pointer.
    check(
        unsafe { sys::nvrtcGetCUBINSize(prog.0, &mut size) },
        "cubin size",
    )?;
    let mut cubin = vec![0u8; size];
    // SAFETY: the buffer holds `size` bytes, as NVRTC asked for.
    check(
        unsafe { sys::nvrtcGetCUBIN(prog.0, cubin.as_mut_ptr().cast::<c_char>()) },
        "cubin",
    )?;
    Ok(Compiled {
        cubin: Arc::new(cubin),
        log,
    })
}

fn program_log(prog: &Prog) -> Result<String, RuntimeError> {
    let mut size = 0usize;
    // SAFETY: a valid program and out-pointer.
    check(
        unsafe { sys::nvrtcGetProgramLogSize(prog.0, &mut size) },
        "log size",
    )?;
    let mut buf = vec![0u8; size.max(1)];
    // SAFETY: the buffer holds the `size` bytes NVRTC asked for.
    check(
        unsafe { sys::nvrtcGetProgramLog(prog.0, buf.as_mut_ptr().cast::<c_char>()) },
        "log",
    )?;
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    Ok(String::from_utf8_lossy(&buf[..end]).trim_end().to_string())
}

/// 64-bit FNV-1a over length-prefixed parts: stable across Rust releases and machines, so it
/// can name files of the disk cache.
pub fn stable_hash(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |bytes: &[u8]| {
        for &b in bytes {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    };
    for p in parts {
        eat(&(p.len() as u64).to_le_bytes());
        eat(p);
    }
    h
}

fn cache_dir() -> Option<PathBuf> {
    match std::env::var_os("FP8C_KERNEL_CACHE") {
        Some(v) if v == "off" => None,
        Some(v) => Some(PathBuf::from(v)),
        None => std::env::var_os("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
            .map(|d| d.join("fp8c").join("kernels")),
    }
}

static MEMORY: Mutex<Option<HashMap<u64, Arc<Vec<u8>>>>> = Mutex::new(None);

/// [`compile`] through the memory and disk caches; returns the cubin. A compile error is an
/// `Err`; warnings are ignored here (the CI test fails on them).
pub fn compile_cached(
    name: &str,
    source: &str,
    headers: &[(&str, &str)],
    arch: &str,
) -> Result<Arc<Vec<u8>>, RuntimeError> {
    let (major, minor) = version()?;
    let nv = format!("nvrtc {major}.{minor}");
    let mut parts: Vec<&[u8]> = vec![source.as_bytes(), arch.as_bytes(), nv.as_bytes()];
    for (n, t) in headers {
        parts.push(n.as_bytes());
        parts.push(t.as_bytes());
    }
    for o in OPTIONS {
        parts.push(o.as_bytes());
    }
    let key = stable_hash(&parts);
    if let Some(hit) = MEMORY
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get_or_insert_with(HashMap::new)
        .get(&key)
    {
        return Ok(hit.clone());
    }
    let file = cache_dir().map(|d| d.join(format!("{key:016x}-{arch}.cubin")));
    let cubin = match file.as_ref().and_then(|f| std::fs::read(f).ok()) {
        Some(bytes) if !bytes.is_empty() => Arc::new(bytes),
        _ => {
            let c = compile(name, source, headers, arch, &[])?;
            if let Some(f) = &file {
                // Best effort: a read-only cache folder only costs a recompile next time.
                if let Some(dir) = f.parent()
                    && std::fs::create_dir_all(dir).is_ok()
                {
                    let tmp = f.with_extension(format!("tmp{}", std::process::id()));
                    if std::fs::write(&tmp, c.cubin.as_slice()).is_ok() {
                        let _ = std::fs::rename(&tmp, f);
                    }
                }
            }
            c.cubin
        }
    };
    MEMORY
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get_or_insert_with(HashMap::new)
        .insert(key, cubin.clone());
    Ok(cubin)
}
