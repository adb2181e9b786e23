# Sourced (not run) by scripts/gpu-check.sh and scripts/gpu-e2e.sh on the GPU machine: finds
# the driver, NVRTC and cuBLASLt (the CUDA toolkit's folders, NVIDIA's pip wheels beside
# python3) and exports FP8C_CUDA_LIB_DIRS and LD_LIBRARY_PATH for fp8c. Sets `py` (python3,
# or empty) and `nvrtc_dir` (the folder holding libnvrtc.so.13 and its builtins, or empty).
libdirs=()
for d in /usr/local/nvidia/lib64 /usr/local/nvidia/lib /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
  [ -d "$d" ] && libdirs+=("$d")
done
py=$(command -v python3 || true)
if [ -n "$py" ]; then
  while IFS= read -r d; do libdirs+=("$d"); done < <("$py" - <<'PY' 2>/dev/null
import glob, os, site, sys
roots = set(site.getsitepackages() + [site.getusersitepackages()])
for r in sorted(roots):
    for lib in glob.glob(os.path.join(r, "nvidia", "*", "lib")) + glob.glob(os.path.join(r, "nvidia", "*", "*", "lib")):
        if glob.glob(os.path.join(lib, "libnvrtc.so*")) or glob.glob(os.path.join(lib, "libcublasLt.so*")):
            print(lib)
PY
)
fi
FP8C_CUDA_LIB_DIRS=$(IFS=:; echo "${libdirs[*]:-}")
export FP8C_CUDA_LIB_DIRS
export LD_LIBRARY_PATH="${FP8C_CUDA_LIB_DIRS}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
nvrtc_dir=""
for d in "${libdirs[@]:-}"; do
  if [ -n "$d" ] && ls "$d"/libnvrtc.so.13* >/dev/null 2>&1 && ls "$d"/libnvrtc-builtins.so.13* >/dev/null 2>&1; then nvrtc_dir=$d; break; fi
done
