#!/usr/bin/env bash
# Runs a command with OpenMPI available to fp8c's `mpi` feature (the `mpi` crate builds
# against Debian's OpenMPI, and `mpirun` launches the ranks): installs Debian's packages
# when they are missing (as root, or with sudo), then runs the command.
# Usage: scripts/env/mpi-env.sh cargo test --release -p fp8c --features mpi --test distributed
#        scripts/env/mpi-env.sh cargo build --release -p fp8c --features mpi
# (MPICH's Debian build uses UCX, which breaks in containers; OpenMPI's does not.) The `mpi`
# crate's bindings are made by bindgen, which needs a libclang: any installed LLVM's will do
# (scripts/env/mlir-env.sh installs LLVM 22's), else Debian's default one is installed.
set -euo pipefail
pkgs=(libopenmpi-dev openmpi-bin)
missing=()
for p in "${pkgs[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ! compgen -G "/usr/lib/llvm-*/lib/libclang.so*" >/dev/null &&
  ! compgen -G "/usr/lib/*/libclang*.so*" >/dev/null; then
  missing+=(libclang-dev)
fi
if [ ${#missing[@]} -gt 0 ]; then
  echo "mpi-env: installing ${missing[*]} (Debian's OpenMPI)" >&2
  if [ "$(id -u)" = 0 ]; then
    sudo=()
  elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
    sudo=(sudo)
  else
    echo "mpi-env: cannot install ${missing[*]}: run as root, or install them yourself" >&2
    exit 1
  fi
  # One install at a time (parallel callers wait; the same lock as scripts/env/mlir-env.sh).
  exec 9>"${TMPDIR:-/tmp}/fp8c-mlir-apt.lock"
  flock 9
  "${sudo[@]}" apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
  exec 9>&-
fi
exec "$@"
