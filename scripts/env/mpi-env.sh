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
if ! compgen -G "/usr/lib/llvm-*/lib/libclang.so*" >/dev/null &&
  ! compgen -G "/usr/lib/*/libclang*.so*" >/dev/null; then
  pkgs+=(libclang-dev)
fi
"$(dirname "$0")/apt-install.sh" mpi-env "Debian's OpenMPI" "${pkgs[@]}"
exec "$@"
