#!/usr/bin/env bash
# Runs a command with LLVM/MLIR 22 available to fp8c-mlir's `mlir` feature (melior 0.27,
# mlir-sys 220): installs Debian's packages when they are missing (as root, or with sudo),
# then sets the variables mlir-sys and tblgen read.
# Usage: scripts/env/mlir-env.sh cargo test --release -p fp8c-mlir --features mlir
#        scripts/env/mlir-env.sh cargo build --release -p fp8c --features mlir
set -euo pipefail
prefix=/usr/lib/llvm-22
# MLIR (C API, libs, mlir-opt-22 for the tests), LLVM, libclang for bindgen, Polly and the
# compression/XML libraries LLVM's static libraries link against (tblgen needs them).
pkgs=(libmlir-22-dev mlir-22-tools llvm-22-dev libclang-22-dev libpolly-22-dev
  libzstd-dev libz3-dev libxml2-dev zlib1g-dev)
"$(dirname "$0")/apt-install.sh" mlir-env "Debian bookworm's LLVM 22" "${pkgs[@]}"
export MLIR_SYS_220_PREFIX=$prefix TABLEGEN_220_PREFIX=$prefix LLVM_SYS_220_PREFIX=$prefix
export PATH="$prefix/bin:$PATH"
exec "$@"
