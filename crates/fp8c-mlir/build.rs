//! With the `mlir` feature: records where LLVM's libraries are (`llvm-config --libdir`, the
//! same LLVM mlir-sys links), so that MLIR's JIT can load `libmlir_c_runner_utils` (it
//! defines `memrefCopy`, which lowered strided copies call).
fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=MLIR_SYS_220_PREFIX");
    if std::env::var_os("CARGO_FEATURE_MLIR").is_none() {
        return;
    }
    let config = std::env::var_os("MLIR_SYS_220_PREFIX")
        .map(|p| std::path::PathBuf::from(p).join("bin/llvm-config"))
        .unwrap_or_else(|| "llvm-config".into());
    let libdir = std::process::Command::new(&config)
        .arg("--libdir")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    println!("cargo:rustc-env=FP8C_MLIR_LIBDIR={libdir}");
}
