//! The emulated device's kernel compiler (issue #15): the kernel sources NVRTC compiles for
//! the GPU (`kernels/*.cu`, with the same headers, generated ones included) are compiled by
//! the host's C++ compiler against `kernels/emu/cuda_host.h`, which gives them CUDA's
//! execution model on the CPU (blocks, threads as fibers, `__syncthreads`, warp shuffles and
//! votes, shared memory, atomics; see its header comment for the model and its blind spots),
//! and loaded as a shared library whose kernels launch by name with CUDA's `kernelParams`
//! layout.
//!
//! This is the emulated device's NVRTC and `cuModuleGetFunction`/`cuLaunchKernel`; the
//! device seam that lets the backend run on it, and the cuBLASLt checker, come next (see
//! ARCHITECTURE.md, "Emulated device").
//!
//! The compiler is `$CXX`, else g++, c++ or clang++ (C++17). Libraries are cached by the hash of everything
//! compiled into them under the system temp folder (`fp8c-emu/`), written to a temporary name
//! and renamed, so concurrent tests share them safely.

use std::collections::hash_map::DefaultHasher;
use std::ffi::{CStr, CString, c_char, c_void};
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The shim header every kernel file is compiled with.
pub const SHIM: &str = include_str!("../../../../kernels/emu/cuda_host.h");

type LaunchFn = unsafe extern "C" fn(
    name: *const c_char,
    grid: *const u32,
    block: *const u32,
    args: *mut *mut c_void,
) -> *const c_char;

/// A kernel file compiled for the host.
pub struct HostModule {
    // Keeps the library mapped while `launch` may be called.
    _lib: libloading::Library,
    launch: LaunchFn,
    names: Vec<String>,
}

impl std::fmt::Debug for HostModule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostModule")
            .field("kernels", &self.names.len())
            .finish()
    }
}

/// Compiles kernel file `file` (`quantize.cu`) with `source` and its `headers` (name, text)
/// for the host.
pub fn compile(file: &str, source: &str, headers: &[(&str, &str)]) -> Result<HostModule, String> {
    let cxx = compiler()?;
    let mut h = DefaultHasher::new();
    (SHIM, file, source, headers, &cxx, REGISTRY_VERSION).hash(&mut h);
    let dir = std::env::temp_dir()
        .join("fp8c-emu")
        .join(format!("{:016x}", h.finish()));
    let lib = dir.join("kernels.so");
    let names_file = dir.join("kernels.txt");
    if !lib.exists() || !names_file.exists() {
        build(&dir, &cxx, file, source, headers)?;
    }
    let names: Vec<String> = std::fs::read_to_string(&names_file)
        .map_err(|e| format!("{}: {e}", names_file.display()))?
        .lines()
        .map(str::to_string)
        .collect();
    // SAFETY: the library was built from our own sources above; loading runs no constructors
    // beyond the C++ runtime's.
    let lib_handle = unsafe { libloading::Library::new(&lib) }
        .map_err(|e| format!("{}: cannot load: {e}", lib.display()))?;
    // SAFETY: the symbol is defined by the registry `build` appends, with this signature.
    let launch = unsafe { lib_handle.get::<LaunchFn>(b"fp8c_emu_launch\0") }
        .map_err(|e| format!("{}: {e}", lib.display()))?;
    let launch = *launch;
    Ok(HostModule {
        _lib: lib_handle,
        launch,
        names,
    })
}

/// The C++ compiler: `$CXX`, else the first of g++, c++ and clang++ that runs.
fn compiler() -> Result<String, String> {
    if let Ok(c) = std::env::var("CXX") {
        return Ok(c);
    }
    ["g++", "c++", "clang++"]
        .into_iter()
        .find(|c| {
            Command::new(c)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        })
        .map(str::to_string)
        .ok_or_else(|| {
            "the emulated device compiles kernels with a C++17 compiler: none of $CXX, g++, c++, clang++ runs (install g++)".to_string()
        })
}

/// Changes when the generated registry's code changes (part of the cache key).
const REGISTRY_VERSION: u32 = 1;

fn build(
    dir: &Path,
    cxx: &str,
    file: &str,
    source: &str,
    headers: &[(&str, &str)],
) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    // A private work folder: concurrent builds of the same module do not collide.
    let work = tempfile_dir(dir)?;
    let write = |name: &str, text: &str| -> Result<PathBuf, String> {
        let p = work.join(name);
        std::fs::write(&p, text).map_err(|e| format!("{}: {e}", p.display()))?;
        Ok(p)
    };
    write("cuda_host.h", SHIM)?;
    for (name, text) in headers {
        write(name, text)?;
    }
    write(file, source)?;
    let unit = write(
        "unit.cpp",
        &format!("#include \"cuda_host.h\"\n#include \"{file}\"\n"),
    )?;
    // The entry points: `extern "C" void fp8c_...(` once the macros are expanded.
    let pre = run(Command::new(cxx)
        .args(["-std=c++17", "-E", "-P"])
        .arg(&unit)
        .current_dir(&work))?;
    let mut names: Vec<String> = Vec::new();
    for part in pre.split("extern \"C\"").skip(1) {
        let rest = part.trim_start();
        let Some(rest) = rest.strip_prefix("void") else {
            continue;
        };
        let name: String = rest
            .trim_start()
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if name.starts_with("fp8c_") && !names.contains(&name) {
            names.push(name);
        }
    }
    let mut registry = format!("#include \"cuda_host.h\"\n#include \"{file}\"\n");
    registry.push_str("static const fp8c_emu::Named fp8c_emu_entries[] = {\n");
    for n in &names {
        registry.push_str(&format!("  {{\"{n}\", &fp8c_emu::Entry<&{n}>::run}},\n"));
    }
    registry.push_str(
        "};\n\
         extern \"C\" const char* fp8c_emu_launch(const char* name, const unsigned* g, const unsigned* b, void** args) {\n\
         \x20 for (const auto& e : fp8c_emu_entries)\n\
         \x20   if (std::strcmp(e.name, name) == 0) return fp8c_emu::launch(e.run, dim3{g[0], g[1], g[2]}, dim3{b[0], b[1], b[2]}, args);\n\
         \x20 return \"no kernel of that name in this module\";\n\
         }\n",
    );
    let unit = write("unit.cpp", &registry)?;
    let out = work.join("kernels.so");
    run(Command::new(cxx)
        .args([
            "-std=c++17",
            "-O1",
            "-fPIC",
            "-shared",
            "-ffp-contract=off",
            "-fno-fast-math",
            "-o",
        ])
        .arg(&out)
        .arg(&unit)
        .current_dir(&work))?;
    let names_tmp = write("kernels.txt", &names.join("\n"))?;
    // The names first: a library is only used once both are in place.
    std::fs::rename(&names_tmp, dir.join("kernels.txt")).map_err(|e| e.to_string())?;
    std::fs::rename(&out, dir.join("kernels.so")).map_err(|e| e.to_string())?;
    let _ = std::fs::remove_dir_all(&work);
    Ok(())
}

fn tempfile_dir(parent: &Path) -> Result<PathBuf, String> {
    for i in 0..1000u32 {
        let p = parent.join(format!("work-{}-{i}", std::process::id()));
        if std::fs::create_dir(&p).is_ok() {
            return Ok(p);
        }
    }
    Err(format!("{}: cannot create a work folder", parent.display()))
}

fn run(cmd: &mut Command) -> Result<String, String> {
    let shown = format!("{cmd:?}");
    let out = cmd.output().map_err(|e| {
        format!("the emulated device compiles kernels with a C++ compiler ($CXX or c++; install g++): {shown}: {e}")
    })?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let first: Vec<&str> = err
            .lines()
            .filter(|l| l.contains("error"))
            .take(5)
            .collect();
        return Err(format!("{shown} failed:\n{}", first.join("\n")));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

impl HostModule {
    /// The kernel entry points the module defines.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// Runs kernel `name` over `grid` blocks of `block` threads; `args[i]` points at the i-th
    /// kernel parameter's value (CUDA's `kernelParams`).
    ///
    /// # Safety
    /// `args` must match the kernel's parameters in number and types, and every pointer the
    /// kernel dereferences (through its parameters) must be valid for what it reads and
    /// writes, as for `cuLaunchKernel`.
    pub unsafe fn launch(
        &self,
        name: &str,
        grid: [u32; 3],
        block: [u32; 3],
        args: &mut [*mut c_void],
    ) -> Result<(), String> {
        if !self.names.iter().any(|n| n == name) {
            return Err(format!("no kernel `{name}` in this module"));
        }
        if block.iter().product::<u32>() == 0 || block.iter().product::<u32>() > 1024 {
            return Err(format!(
                "block {block:?}: 1 to 1024 threads, as CUDA allows"
            ));
        }
        let c = CString::new(name).map_err(|e| e.to_string())?;
        // SAFETY: the caller guarantees the arguments; the module defines `name`.
        let err =
            unsafe { (self.launch)(c.as_ptr(), grid.as_ptr(), block.as_ptr(), args.as_mut_ptr()) };
        if err.is_null() {
            Ok(())
        } else {
            // SAFETY: the shim returns static NUL-terminated strings.
            Err(unsafe { CStr::from_ptr(err) }
                .to_string_lossy()
                .into_owned())
        }
    }
}
