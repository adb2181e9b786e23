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
missing=()
for p in "${pkgs[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "mlir-env: installing ${missing[*]} (Debian bookworm's LLVM 22)" >&2
  if [ "$(id -u)" = 0 ]; then
    sudo=()
  elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
    sudo=(sudo)
  else
    echo "mlir-env: cannot install ${missing[*]}: run as root, or install them yourself" >&2
    exit 1
  fi
  # One install at a time (parallel callers wait).
  exec 9>"${TMPDIR:-/tmp}/fp8c-mlir-apt.lock"
  flock 9
  "${sudo[@]}" apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
  exec 9>&-
fi
export MLIR_SYS_220_PREFIX=$prefix TABLEGEN_220_PREFIX=$prefix LLVM_SYS_220_PREFIX=$prefix
export PATH="$prefix/bin:$PATH"
exec "$@"
