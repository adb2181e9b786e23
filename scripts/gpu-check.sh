#!/usr/bin/env bash
# The whole GPU check of fp8c's CUDA backend, in one script with two halves.
#
# 1. Here, on a machine with cargo (no GPU needed):
#
#      scripts/gpu-check.sh --build
#
#    builds release binaries and copies them, stripped of debug info, into .gpu-carry/
#    (git-ignored, well under the device tool's 64 MiB carry limit):
#      fp8c           cargo build --release -p fp8c
#      cuda_vs_cpu    the CPU-vs-CUDA backend tests   (cargo test --release -p fp8c-runtime --test cuda_vs_cpu --no-run)
#      nvrtc_kernels  the NVRTC compile test          (cargo test --release -p fp8c-runtime --test nvrtc_kernels --no-run)
#
# 2. On the GPU machine (it has no Rust toolchain), from the repository root, e.g. with the
#    device tool: run(command="scripts/gpu-check.sh", carry=[".gpu-carry"]). It
#      - finds the driver, NVRTC and cuBLASLt (CUDA toolkit, pip wheels) and exports
#        FP8C_CUDA_LIB_DIRS / LD_LIBRARY_PATH;
#      - runs every CPU-vs-CUDA test with FP8C_REQUIRE_GPU=1 (a skip is a failure there): casts,
#        quantization, amax and scaling updates bit-exact with the CPU reference; GEMMs, norms,
#        softmax within the tolerances stated in crates/fp8c-runtime/tests/cuda_vs_cpu.rs;
#      - runs the NVRTC kernel test with the machine's NVRTC;
#      - runs `fp8c run --device cuda` on every example model (f32 and fp8) and compares the
#        outputs with `--device cpu` (relative L2 error printed, 1e-3 / 5e-2 allowed);
#      - a short `fp8c train --device cuda` when this build has a train subcommand
#        (arguments from FP8C_TRAIN_ARGS);
#      - `fp8c bench` (tables) and `fp8c bench --json`.
#    Everything is written to .gpu-check-logs/; when $OUT is set (the device tool brings back
#    at most 8 files from it) the script leaves there: summary.txt, environment.txt,
#    cuda_vs_cpu.log, run_models.log, bench.txt, bench.json and logs.tar.gz (every log).
#    The last lines are a PASS/FAIL table; the exit code is the number of failed parts.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
carry="$root/.gpu-carry"

if [ "${1:-}" = "--build" ]; then
  set -e
  mkdir -p "$carry"
  cargo build --release -p fp8c
  cp target/release/fp8c "$carry/fp8c"
  for t in cuda_vs_cpu nvrtc_kernels; do
    exe=$(cargo test --release -p fp8c-runtime --test "$t" --no-run --message-format=json 2>/dev/null |
      python3 -c 'import json,sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["kind"] == ["test"]:
        print(m["executable"])' | tail -1)
    [ -n "$exe" ] || { echo "gpu-check: could not build the $t test binary" >&2; exit 1; }
    cp "$exe" "$carry/$t"
  done
  strip --strip-debug "$carry"/* 2>/dev/null || true
  du -ch "$carry"/* | tail -1
  echo "carry .gpu-carry and run: scripts/gpu-check.sh"
  exit 0
fi

logs=$root/.gpu-check-logs
rm -rf "$logs"
mkdir -p "$logs"
declare -a summary=()
failed=0
record() { # name status
  summary+=("$(printf '%-44s %s' "$1" "$2")")
  if [ "$2" != PASS ] && [ "${2%% *}" != SKIP ]; then failed=$((failed + 1)); fi
}
step() { # name logfile command...
  local name=$1 log=$2
  shift 2
  echo "== $name"
  if "$@" >"$logs/$log" 2>&1; then record "$name" PASS; else record "$name" "FAIL (see $log)"; fi
  tail -n 15 "$logs/$log"
}

[ -x "$carry/fp8c" ] || { echo "gpu-check: $carry/fp8c is missing; run scripts/gpu-check.sh --build on a machine with cargo first" >&2; exit 1; }
fp8c="$carry/fp8c"

# ---------------------------------------------------------------- libraries
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
{
  echo "date: $(date -u)"; nvidia-smi -L 2>&1; nvidia-smi --query-gpu=driver_version,memory.total --format=csv 2>&1
  echo "FP8C_CUDA_LIB_DIRS=$FP8C_CUDA_LIB_DIRS"; echo "NVRTC folder: ${nvrtc_dir:-none found}"
} | tee "$logs/environment.txt"

# ---------------------------------------------------------------- tests
export FP8C_REQUIRE_GPU=1 FP8C_REPO_ROOT="$root" FP8C_KERNEL_CACHE="$root/.gpu-check-kernel-cache"
step "CPU-vs-CUDA backend tests" cuda_vs_cpu.log "$carry/cuda_vs_cpu" --test-threads=1 --nocapture
if [ -n "$nvrtc_dir" ]; then
  step "NVRTC kernel compile test" nvrtc_kernels.log env FP8C_NVRTC_DIR="$nvrtc_dir" "$carry/nvrtc_kernels" --nocapture
else
  record "NVRTC kernel compile test" "SKIP (no libnvrtc.so.13 found)"
fi

# ---------------------------------------------------------------- fp8c run on the example models
run_models() {
  [ -n "$py" ] || { echo "python3 with numpy is needed to make inputs"; return 1; }
  local ok=0 m name
  for m in examples/models/*.onnx; do
    name=$(basename "$m" .onnx)
    "$fp8c" inspect "$m" --json >"$logs/$name.inspect.json" || { ok=1; continue; }
    "$py" - "$logs/$name.inspect.json" "$logs/$name.inputs.npz" <<'PY' || { ok=1; continue; }
import json, sys
import numpy as np
info = json.load(open(sys.argv[1]))
rng = np.random.default_rng(0)
arrays = {}
for i in info["inputs"]:
    # Symbolic dims: batch 1, spatial dims as PaddleOCR's classifier expects (48 × 192).
    dims = [int(d) if d.isdigit() else (1 if k == 0 else (48 if k == 2 else 192)) for k, d in enumerate(i["shape"])]
    arrays[i["name"]] = rng.standard_normal(dims).astype({"f32": np.float32}.get(i["dtype"], np.float32))
np.savez(sys.argv[2], **arrays)
PY
    for prec in f32 fp8; do
      for dev in cpu cuda; do
        if ! "$fp8c" run "$m" --inputs "$logs/$name.inputs.npz" --precision "$prec" --device "$dev" \
          --outputs "$logs/$name.$prec.$dev.npz" >"$logs/$name.$prec.$dev.log" 2>&1; then
          echo "$name $prec $dev: FAILED"; tail -n 5 "$logs/$name.$prec.$dev.log"; ok=1
        fi
      done
      "$py" - "$logs/$name.$prec.cpu.npz" "$logs/$name.$prec.cuda.npz" "$name $prec" "$prec" <<'PY' || ok=1
import sys
import numpy as np
a, b = np.load(sys.argv[1]), np.load(sys.argv[2])
tol = 1e-3 if sys.argv[4] == "f32" else 5e-2
worst = 0.0
for k in a.files:
    x, y = a[k].astype(np.float64), b[k].astype(np.float64)
    rel = np.linalg.norm(y - x) / max(np.linalg.norm(x), 1e-30)
    worst = max(worst, rel)
    print(f"{sys.argv[3]} output {k}: rel L2 cuda vs cpu = {rel:.3e}")
sys.exit(0 if worst <= tol else 1)
PY
    done
  done
  return $ok
}
step "fp8c run --device cuda (example models)" run_models.log run_models

# ---------------------------------------------------------------- a short training run
if "$fp8c" train --help >"$logs/train_help.txt" 2>&1 && grep -q -- "--device" "$logs/train_help.txt"; then
  if [ -n "${FP8C_TRAIN_ARGS:-}" ]; then
    # shellcheck disable=SC2086
    step "fp8c train --device cuda" train.log "$fp8c" train $FP8C_TRAIN_ARGS --device cuda
  else
    record "fp8c train --device cuda" "SKIP (set FP8C_TRAIN_ARGS)"
  fi
else
  record "fp8c train --device cuda" "SKIP (no train subcommand with --device)"
fi

# ---------------------------------------------------------------- benchmarks
step "fp8c bench" bench.txt "$fp8c" bench
step "fp8c bench --json" bench.json "$fp8c" bench --json

printf '%s\n' "${summary[@]}" >"$logs/summary.txt"
if [ -n "${OUT:-}" ]; then
  mkdir -p "$OUT"
  for f in summary.txt environment.txt cuda_vs_cpu.log run_models.log bench.txt bench.json; do
    [ -f "$logs/$f" ] && cp "$logs/$f" "$OUT/"
  done
  tar -czf "$OUT/logs.tar.gz" -C "$logs" --exclude='*.npz' . 2>/dev/null || true
fi
echo
echo "== summary (logs in $logs${OUT:+, copied to $OUT})"
cat "$logs/summary.txt"
exit "$failed"
