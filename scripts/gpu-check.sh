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
#      golden         the golden cases on every device (cargo test --release -p fp8c-session --test golden --no-run;
#                     its `op_cases_on_a_gpu` runs there)
#      llm_exports    the PyTorch-export tests (`test_backends!`; their `cuda` variants run there)
#
# 2. On the GPU machine (it has no Rust toolchain), from the repository root, e.g. with the
#    device tool: run(command="scripts/gpu-check.sh", carry=[".gpu-carry"]). It
#      - finds the driver, NVRTC and cuBLASLt (CUDA toolkit, pip wheels) and exports
#        FP8C_CUDA_LIB_DIRS / LD_LIBRARY_PATH;
#      - runs every CPU-vs-CUDA test, the golden op cases and the export tests' `cuda` variants
#        with FP8C_REQUIRE_GPU=1 (a skip is a failure there): casts,
#        quantization, amax and scaling updates bit-exact with the CPU reference; GEMMs, norms,
#        softmax within the tolerances stated in crates/fp8c-runtime/tests/cuda_vs_cpu/main.rs;
#      - runs the NVRTC kernel test with the machine's NVRTC;
#      - runs `fp8c run --device cuda` on every example model (f32 and fp8) and compares the
#        outputs with `--device cpu --hopper-accum` (relative L2 error printed, 1e-3 / 5e-2
#        allowed; the CPU models the GPU's fast accumulation only when asked);
#      - FP8 training steps of three example models on `--device cpu` and `--device cuda`, the
#        losses compared (FP8C_TRAIN_ARGS adds one run of its own);
#      - `fp8c bench` (tables);
#      - quantbw: issue #48's bandwidth goal, the bf16-input quantize(+amax, +transpose) kernels
#        at >= 85% of a device copy (`fp8c bench --json` at 2^26 and 2^28 elements, read by
#        scripts/bench/quant_bw_check.py, which says what the figures count);
#      - attention: issue #48's slot for fused attention forward + backward next to PyTorch SDPA
#        (scripts/bench/attention_vs_sdpa.py; it says so and times nothing while this fp8c
#        has no fused attention op);
#      - scripts/bench/fp8_accum_probe.py: cuBLASLt's FP8 accumulation measured through PyTorch.
#    FP8C_GPU_PARTS (e.g. "models,probe") runs only the parts named: tests nvrtc models train
#    bench quantbw attention probe. The quantbw and attention logs are appended to bench.txt. Each step runs under a time limit (FP8C_GPU_STEP_TIMEOUT, 150 s). Everything is written
#    to .gpu-check-logs/; when $OUT is set (the device tool brings back at most 8 files from
#    it) the script copies there after every step: summary.txt, cuda_vs_cpu.log, golden.log,
#    run_models.log, train.log, bench.txt, fp8_accum.npz and logs.tar.gz (every log,
#    environment.txt, llm_exports.log and probe.log among them).
#    The last lines are a PASS/FAIL table; the exit code is the number of failed parts.
#    The end-to-end training benchmark against PyTorch is a call of its own (it fills the
#    10-minute limit): run(command="scripts/gpu-e2e.sh", carry=[".gpu-carry"], timeout_s=600).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
carry="$root/.gpu-carry"

if [ "${1:-}" = "--build" ]; then
  set -e
  mkdir -p "$carry"
  cargo build --release -p fp8c
  cp target/release/fp8c "$carry/fp8c"
  git rev-parse --short HEAD >"$carry/commit.txt" 2>/dev/null || true  # read by gpu-e2e.sh
  for pt in fp8c-runtime:cuda_vs_cpu fp8c-runtime:nvrtc_kernels fp8c-session:golden fp8c:llm_exports; do
    p=${pt%%:*} t=${pt#*:}
    exe=$(cargo test --release -p "$p" --test "$t" --no-run --message-format=json 2>/dev/null |
      python3 -c 'import json,sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["kind"] == ["test"]:
        print(m["executable"])' | tail -1)
    [ -n "$exe" ] || { echo "gpu-check: could not build the $t test binary" >&2; exit 1; }
    cp "$exe" "$carry/$t"
  done
  # One file at a time: a failure on one must not leave the others (the 100+ MiB fp8c binary
  # among them) unstripped and the carry over the device tool's 64 MiB.
  for f in "$carry"/*; do
    [ "${f%.txt}" = "$f" ] || continue
    strip --strip-debug "$f" || echo "gpu-check: could not strip $f" >&2
  done
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
  printf '%s\n' "${summary[@]}" >"$logs/summary.txt"
}
# Copies what is there so far to $OUT after every step, so that a call cut off at its time
# limit still brings back the logs of the steps that finished.
publish() {
  [ -n "${OUT:-}" ] || return 0
  mkdir -p "$OUT"
  for f in summary.txt cuda_vs_cpu.log golden.log run_models.log train.log bench.txt; do
    [ -f "$logs/$f" ] && cp "$logs/$f" "$OUT/"
  done
  tar -czf "$OUT/logs.tar.gz" -C "$logs" --exclude='*.npz' . 2>/dev/null || true
}
# Every step runs under a time limit (FP8C_GPU_STEP_TIMEOUT seconds, 150 by default): a hang
# in one part must not eat the device lease of the others.
step_timeout=${FP8C_GPU_STEP_TIMEOUT:-150}
# FP8C_GPU_PARTS picks parts for a rerun inside one lease (default: all of them):
# tests nvrtc models train bench quantbw attention probe.
want() { [ -z "${FP8C_GPU_PARTS:-}" ] || [[ " ${FP8C_GPU_PARTS//,/ } " == *" $1 "* ]]; }
step() { # name logfile command...
  local name=$1 log=$2 t0 rc
  shift 2
  echo "== $name"
  t0=$(date +%s)
  # `timeout` runs programs, not shell functions: functions go through `bash -c` (exported).
  if [ "$(type -t "$1")" = function ]; then
    timeout -k 5 "$step_timeout" bash -c '"$@"' step "$@" >"$logs/$log" 2>&1
  else
    timeout -k 5 "$step_timeout" "$@" >"$logs/$log" 2>&1
  fi
  rc=$?
  if [ "$rc" = 0 ]; then
    record "$name" "PASS"
  elif [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
    record "$name" "FAIL (timed out after ${step_timeout} s; see $log)"
  else
    record "$name" "FAIL (exit $rc; see $log)"
  fi
  echo "   $(( $(date +%s) - t0 )) s" >>"$logs/$log"
  tail -n 15 "$logs/$log"
  publish
}

[ -x "$carry/fp8c" ] || { echo "gpu-check: $carry/fp8c is missing; run scripts/gpu-check.sh --build on a machine with cargo first" >&2; exit 1; }
fp8c="$carry/fp8c"

# ---------------------------------------------------------------- libraries
# shellcheck source=bench/cuda_env.sh
source "$root/scripts/bench/cuda_env.sh"
{
  echo "date: $(date -u)"; nvidia-smi -L 2>&1; nvidia-smi --query-gpu=driver_version,memory.total --format=csv 2>&1
  echo "FP8C_CUDA_LIB_DIRS=$FP8C_CUDA_LIB_DIRS"; echo "NVRTC folder: ${nvrtc_dir:-none found}"
} | tee "$logs/environment.txt"

# ---------------------------------------------------------------- tests
export FP8C_REQUIRE_GPU=1 FP8C_REPO_ROOT="$root" FP8C_KERNEL_CACHE="$root/.gpu-check-kernel-cache"
want tests && step "CPU-vs-CUDA backend tests" cuda_vs_cpu.log "$carry/cuda_vs_cpu" --test-threads="${FP8C_GPU_TEST_THREADS:-4}" --nocapture
want tests && step "Golden op cases on CUDA" golden.log "$carry/golden" op_cases_on_a_gpu --exact --nocapture
want tests && step "PyTorch exports on CUDA (llm_exports)" llm_exports.log env FP8C_BIN="$fp8c" \
  "$carry/llm_exports" ::cuda --skip cuda_emulated --test-threads=4 --nocapture
if ! want nvrtc; then
  :
elif [ -n "$nvrtc_dir" ]; then
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
    "$py" - "$logs/$name.inspect.json" "$logs/$name.inputs.npz" "${m%.onnx}.ref.npz" <<'PY' || { ok=1; continue; }
import json, os, sys
import numpy as np
info = json.load(open(sys.argv[1]))
ref = np.load(sys.argv[3]) if os.path.exists(sys.argv[3]) else None
rng = np.random.default_rng(0)
arrays = {}
for i in info["inputs"]:
    if ref is not None and i["name"] in ref.files:  # the export's own inputs
        arrays[i["name"]] = ref[i["name"]]
        continue
    # Symbolic dims: batch 1, sequence 16, spatial dims as PaddleOCR's classifier expects (48 x 192).
    shape = i["shape"] or []
    dims = [int(d) if d.isdigit() else (1 if k == 0 else (16 if len(shape) == 2 else (48 if k == 2 else 192)))
            for k, d in enumerate(shape)]
    dt = i["dtype"]
    if "mask" in i["name"]:
        arrays[i["name"]] = np.ones(dims, dtype=np.int64 if dt.startswith("i") else np.float32)
    elif dt.startswith("i") or dt.startswith("u"):
        arrays[i["name"]] = rng.integers(0, 8, dims).astype({"i32": np.int32}.get(dt, np.int64))
    elif dt == "bool":
        arrays[i["name"]] = np.ones(dims, dtype=bool)
    else:
        arrays[i["name"]] = rng.standard_normal(dims).astype(np.float32)
np.savez(sys.argv[2], **arrays)
PY
    # f32, FP8 with the default recipe, and FP8 with the per-tile recipes (issue #16).
    for prec in f32 fp8 fp8-rowwise fp8-block fp8-mxfp8; do
      local recipe=()
      case $prec in fp8-*) recipe=(--recipe "${prec#fp8-}") ;; esac
      for dev in cpu cuda; do
        # The CPU models the GPU's fast accumulation (--hopper-accum; its default sums in f32).
        local host=()
        if [ "$dev" = cpu ]; then host=(--hopper-accum); fi
        # --min-fp8-flops 0: the example models are small, and every GEMM must run in FP8 here.
        if ! "$fp8c" run "$m" --inputs "$logs/$name.inputs.npz" --precision "${prec%%-*}" ${recipe[@]+"${recipe[@]}"} ${host[@]+"${host[@]}"} --device "$dev" --min-fp8-flops 0 \
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
export -f run_models
export fp8c logs py
want models && step "fp8c run --device cuda (example models)" run_models.log run_models

# ---------------------------------------------------------------- short training runs
# FP8 training steps of the digits MLP, the Llama-style decoder export and the small CNN (and
# the Llama export under the block recipe, the MLP under MXFP8), on the CPU and on the GPU: the losses must agree (the GPU's FP8 GEMMs accumulate in another
# order, so 2e-2 relative rather than the emulated device's 1e-5). FP8C_TRAIN_ARGS, when set,
# adds one more run of its own.
train_compare() {
  local ok=0 name dev
  local -a mlp=(examples/models/mlp_digits.onnx --data examples/data/digits_train.npz --labels y --batch 32 --steps 5)
  local -a llama=(examples/models/llama-tiny.onnx --text README.md --seq-len 16 --batch 4 --steps 3)
  local -a cnn=(examples/models/cnn_digits.onnx --data examples/data/digits_train.npz --labels y --batch 16 --steps 3)
  # Per-tile recipes (issue #16): block-scaled forward, dgrad and wgrad GEMMs.
  local -a llama_block=("${llama[@]}" --recipe block)
  local -a mlp_mxfp8=("${mlp[@]}" --recipe mxfp8)
  for name in mlp llama cnn llama_block mlp_mxfp8; do
    local -n args=$name
    for dev in cpu cuda; do
      local host=()
      if [ "$dev" = cpu ]; then host=(--hopper-accum); fi
      if ! "$fp8c" train "${args[@]}" ${host[@]+"${host[@]}"} --min-fp8-flops 0 --device "$dev" --log "$logs/train_$name.$dev.csv" --quiet \
        >"$logs/train_$name.$dev.log" 2>&1; then
        echo "train $name on $dev: FAILED"; tail -n 8 "$logs/train_$name.$dev.log"; ok=1
      fi
    done
    "$py" - "$logs/train_$name.cpu.csv" "$logs/train_$name.cuda.csv" "$name" <<'PY' || ok=1
import sys
def losses(p):
    return [float(l.split(",")[1]) for l in open(p).read().splitlines()[1:]]
c, g = losses(sys.argv[1]), losses(sys.argv[2])
bad = len(c) != len(g) or not c
for k, (a, b) in enumerate(zip(c, g)):
    rel = abs(a - b) / max(abs(a), 1e-30)
    print(f"{sys.argv[3]} step {k}: cpu {a:.6f} cuda {b:.6f} rel {rel:.2e}")
    bad |= not rel <= 2e-2
sys.exit(1 if bad else 0)
PY
  done
  if [ -n "${FP8C_TRAIN_ARGS:-}" ]; then
    # shellcheck disable=SC2086
    "$fp8c" train $FP8C_TRAIN_ARGS --device cuda || ok=1
  fi
  return $ok
}
export -f train_compare
if ! want train; then
  :
elif [ -n "$py" ]; then
  step "fp8c train, CPU vs CUDA losses" train.log train_compare
else
  record "fp8c train, CPU vs CUDA losses" "SKIP (no python3)"
fi

# ---------------------------------------------------------------- benchmarks
want bench && step "fp8c bench" bench.txt "$fp8c" bench

# ---------------------------------------------------------------- issue #48's GPU must-show lines
# quantbw: the bf16-input quantize kernels against a device copy, at two sizes.
quant_bw() {
  "$fp8c" bench --json --sizes 2048 --layer 2048,2048 --elements 67108864 >"$logs/bench_2e26.json" &&
    "$fp8c" bench --json --sizes 2048 --layer 2048,2048 --elements 268435456 >"$logs/bench_2e28.json" &&
    python3 "$root/scripts/bench/quant_bw_check.py" "$logs/bench_2e26.json" "$logs/bench_2e28.json"
}
export -f quant_bw
export root
if want quantbw; then
  step "quantize from bf16 vs device copy (goal >= 85%)" quantbw.log quant_bw
  { echo; echo "== quantbw"; cat "$logs/quantbw.log"; } >>"$logs/bench.txt"
  publish
fi
# attention: fused attention forward + backward next to PyTorch SDPA, once fp8c has the op.
if ! want attention; then
  :
elif [ -n "$py" ] && "$py" -c "import torch, transformers, onnxscript; assert torch.cuda.is_available()" 2>/dev/null; then
  # Its models stay out of logs/ (and so out of logs.tar.gz); its JSON is copied in.
  step "fused attention vs PyTorch SDPA" attention.log "$py" scripts/bench/attention_vs_sdpa.py "$fp8c" "$root/.gpu-e2e/attention"
  cp "$root/.gpu-e2e/attention/attention.json" "$logs/" 2>/dev/null
  { echo; echo "== attention"; cat "$logs/attention.log"; } >>"$logs/bench.txt"
  publish
else
  record "fused attention vs PyTorch SDPA" "SKIP (no python3 with CUDA PyTorch, transformers and onnxscript)"
fi

# ---------------------------------------------------------------- FP8 accumulation probe
# cuBLASLt's FP8 GEMM through PyTorch, with and without fast accumulation, against the exact
# product: golden data for fp8c-eval's fast-accumulation model (scripts/bench/fp8_accum_probe.py).
if want probe && [ -n "$py" ] && "$py" -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then
  step "FP8 accumulation probe (PyTorch)" probe.log "$py" scripts/bench/fp8_accum_probe.py "$logs/fp8_accum.npz"
  [ -n "${OUT:-}" ] && [ -f "$logs/fp8_accum.npz" ] && cp "$logs/fp8_accum.npz" "$OUT/"
elif want probe; then
  record "FP8 accumulation probe (PyTorch)" "SKIP (no python3 with CUDA PyTorch)"
fi
publish
echo
echo "== summary (logs in $logs${OUT:+, copied to $OUT})"
cat "$logs/summary.txt"
exit "$failed"
