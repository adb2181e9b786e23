//! Finding the CUDA libraries before cudarc touches them.
//!
//! cudarc (with `dynamic-loading`) opens `libcuda`, `libnvrtc` and `libcublasLt` by name on
//! first use and panics when one is missing. Every entry point of the backend calls one of the
//! `require_*` functions first, which check with cudarc's own `is_culib_present()` and turn a
//! missing library into an `Unavailable` error.
//!
//! Libraries outside the loader's search path (NVRTC and cuBLASLt from pip wheels, say) are
//! found by preloading them by absolute path from the folders in `FP8C_CUDA_LIB_DIRS`
//! (`:`-separated): once a library is loaded, the dynamic loader answers a later `dlopen` of
//! its soname (what cudarc asks for) with the loaded copy. NVRTC also opens its builtins
//! library by name, so that one is preloaded too. `LD_LIBRARY_PATH` works as well, but is read
//! once at process start.

use crate::backend::RuntimeError;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

/// The environment variable naming extra folders to load CUDA libraries from.
pub const LIB_DIRS_ENV: &str = "FP8C_CUDA_LIB_DIRS";

/// Library file name prefixes preloaded from a folder, in load order (NVRTC's builtins before
/// NVRTC, which opens them).
const PRELOAD_PREFIXES: &[&str] = &["libnvrtc-builtins.so", "libnvrtc.so", "libcublasLt.so"];

/// Preloaded libraries stay loaded for the life of the process.
static PRELOADED: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// Loads NVRTC (with its builtins) and cuBLASLt from `dir` by absolute path, if they are there,
/// and keeps them loaded. Returns the files loaded now; loading twice is harmless.
pub fn preload_dir(dir: &Path) -> Result<Vec<PathBuf>, String> {
    let entries =
        std::fs::read_dir(dir).map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
    let mut files: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    files.sort();
    let mut loaded = Vec::new();
    let mut done = PRELOADED.lock().unwrap_or_else(|e| e.into_inner());
    for prefix in PRELOAD_PREFIXES {
        // The versioned names (libnvrtc.so.13, libnvrtc-builtins.so.13.0), not the `.alt`
        // variants some wheels ship beside them.
        let pick = files.iter().find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(prefix) && !n.contains(".alt."))
        });
        let Some(path) = pick else { continue };
        if done.contains(path) {
            continue;
        }
        open_global(path).map_err(|e| format!("cannot load {}: {e}", path.display()))?;
        done.push(path.clone());
        loaded.push(path.clone());
    }
    Ok(loaded)
}

/// Opens a library for the whole process (global symbols, never closed).
fn open_global(path: &Path) -> Result<(), libloading::Error> {
    // SAFETY: loading a CUDA library runs its initialisers, which have no preconditions.
    #[cfg(unix)]
    let lib = unsafe {
        libloading::os::unix::Library::open(
            Some(path),
            libloading::os::unix::RTLD_NOW | libloading::os::unix::RTLD_GLOBAL,
        )
    }?;
    // SAFETY: as above.
    #[cfg(not(unix))]
    let lib = unsafe { libloading::Library::new(path) }?;
    std::mem::forget(lib);
    Ok(())
}

/// Preloads from every folder of `FP8C_CUDA_LIB_DIRS`, once per process. Folders that do not
/// exist are skipped; a library that fails to load is reported by the `require_*` that needs it.
pub fn preload_from_env() {
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| {
        if let Some(dirs) = std::env::var_os(LIB_DIRS_ENV) {
            for dir in std::env::split_paths(&dirs) {
                if dir.is_dir() {
                    let _ = preload_dir(&dir);
                }
            }
        }
    });
}

/// Which CUDA libraries can be opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Presence {
    /// The driver (`libcuda.so`).
    pub driver: bool,
    /// NVRTC (`libnvrtc.so.13`).
    pub nvrtc: bool,
    /// cuBLASLt (`libcublasLt.so.13`).
    pub cublaslt: bool,
}

/// Probes every library (after preloading from `FP8C_CUDA_LIB_DIRS`); never panics.
pub fn presence() -> Presence {
    preload_from_env();
    // SAFETY: these only try to dlopen candidate names and close them again.
    unsafe {
        Presence {
            driver: cudarc::driver::sys::is_culib_present(),
            nvrtc: cudarc::nvrtc::sys::is_culib_present(),
            cublaslt: cudarc::cublaslt::sys::is_culib_present(),
        }
    }
}

/// `Ok` when the CUDA driver library can be opened.
pub fn require_driver() -> Result<(), RuntimeError> {
    if presence().driver {
        // The version before any cudarc call: its CUDA 13 bindings panic on an older driver.
        if let Some(v) = driver_version() {
            super::device::check_driver_version(v).map_err(super::unavailable)?;
        }
        return Ok(());
    }
    Err(super::unavailable(
        "the NVIDIA driver library (libcuda.so) was not found, so this machine has no usable \
         GPU; run on a machine with an NVIDIA GPU and driver, or use the CPU backend",
    ))
}

/// `Ok` when NVRTC can be opened.
pub fn require_nvrtc() -> Result<(), RuntimeError> {
    if presence().nvrtc {
        return Ok(());
    }
    Err(super::unavailable(format!(
        "NVRTC (libnvrtc.so.13), which compiles fp8c's kernels, was not found; install the \
         nvidia-cuda-nvrtc wheel (scripts/env/nvrtc-env.sh prints its folder) and point {LIB_DIRS_ENV} \
         or LD_LIBRARY_PATH at it"
    )))
}

/// `Ok` when cuBLASLt can be opened.
pub fn require_cublaslt() -> Result<(), RuntimeError> {
    if presence().cublaslt {
        return Ok(());
    }
    Err(super::unavailable(format!(
        "cuBLASLt (libcublasLt.so.13), which runs fp8c's GEMMs, was not found; install the \
         nvidia-cublas wheel or the CUDA toolkit and point {LIB_DIRS_ENV} or LD_LIBRARY_PATH at \
         its lib folder"
    )))
}

/// `cuDriverGetVersion` through the driver library itself, without cudarc (whose loader
/// panics on a driver older than its bindings). None when the library or symbol is missing.
pub fn driver_version() -> Option<i32> {
    type GetVersion = unsafe extern "C" fn(*mut i32) -> i32;
    // SAFETY: loading the system's CUDA driver library; it stays loaded (cudarc opens it too).
    let lib = unsafe { libloading::Library::new("libcuda.so.1") }.ok()?;
    // SAFETY: cuDriverGetVersion(int*) -> CUresult, a stable driver entry point since CUDA 2.2.
    let f = unsafe { lib.get::<GetVersion>(b"cuDriverGetVersion\0") }.ok()?;
    let mut v = 0;
    // SAFETY: a valid out-pointer; 0 is CUDA_SUCCESS.
    let ok = unsafe { f(&mut v) } == 0;
    std::mem::forget(lib);
    ok.then_some(v)
}
