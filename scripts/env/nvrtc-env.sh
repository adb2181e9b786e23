#!/usr/bin/env bash
# Installs NVRTC, the CUDA runtime compiler fp8c's kernels are built with, from PyPI's
# nvidia-cuda-nvrtc wheel, and prints the folder holding libnvrtc.so.13 and
# libnvrtc-builtins.so.13.0 on stdout. No GPU and no CUDA toolkit are needed.
#
# The wheel is pinned to CUDA 13.0, the version of the GPU machines' driver (580.x), and goes
# into .cache/nvrtc/<version>/ with `pip install --target` (no virtual environment: it is a
# folder of shared libraries). Safe to call repeatedly and concurrently: it installs once
# (a stamp file), under a lock.
#
# Usage:
#   DIR=$(scripts/env/nvrtc-env.sh)
#   FP8C_CUDA_LIB_DIRS=$DIR cargo test -p fp8c-runtime --test nvrtc_kernels
# (the test calls this script itself; fp8c also honours FP8C_CUDA_LIB_DIRS at run time).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
version=13.0.88
base="$root/.cache/nvrtc"
dest="$base/$version"
stamp="$dest/.installed"
mkdir -p "$base"

find_lib_dir() {
  local f
  f=$(find "$dest" -name 'libnvrtc.so.13*' ! -name '*.alt.*' -print -quit 2>/dev/null || true)
  [ -n "$f" ] && dirname "$f"
}

if [ ! -f "$stamp" ] || [ -z "$(find_lib_dir)" ]; then
  exec 9>"$base/.lock"
  if command -v flock >/dev/null; then flock 9; fi
  if [ ! -f "$stamp" ] || [ -z "$(find_lib_dir)" ]; then
    py=$(command -v python3 || command -v python || true)
    if [ -z "$py" ]; then
      echo "nvrtc-env.sh: python3 is needed to install the nvidia-cuda-nvrtc wheel" >&2
      exit 1
    fi
    rm -rf "$dest.tmp" "$dest"
    "$py" -m pip install -q --disable-pip-version-check --root-user-action=ignore --no-deps --target "$dest.tmp" \
      "nvidia-cuda-nvrtc==$version" >&2
    mv "$dest.tmp" "$dest"
    touch "$stamp"
  fi
fi

dir=$(find_lib_dir)
if [ -z "$dir" ] || [ ! -e "$dir/libnvrtc-builtins.so.13.0" ]; then
  echo "nvrtc-env.sh: the nvidia-cuda-nvrtc $version wheel has no libnvrtc.so.13 / libnvrtc-builtins.so.13.0 under $dest" >&2
  exit 1
fi
echo "$dir"
