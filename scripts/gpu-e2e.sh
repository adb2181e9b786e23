#!/usr/bin/env bash
# End-to-end training benchmark on a GPU (issue #48): Llama-style models of about 125 M, 350 M
# and 1.3 B parameters (seq 2048; GQA, SwiGLU, RMSNorm, RoPE; random init from transformers
# configs, nothing downloaded) trained for a fixed number of steps on the same token stream
# from the same init by PyTorch bf16 eager (SDPA), PyTorch bf16 torch.compile, torchao float8
# tensorwise (when its wheel is carried) and `fp8c train --device cuda` in bf16, FP8 delayed
# and FP8 current scaling. Records tokens/s, model TFLOP/s, MFU, peak GPU memory, compile
# time and loss curves (a 200-step parity run at 125 M), fp8c's `--profile` of a step and,
# where the machine has ncu, per-kernel times. What is measured and how: scripts/bench/e2e_spec.py.
#
# Three ways to call it:
#
#   scripts/gpu-e2e.sh --build      here, with cargo: release fp8c, stripped, into .gpu-carry/
#                                   (the folder scripts/gpu-check.sh --build fills too)
#   scripts/gpu-e2e.sh              on the GPU machine (no Rust there), from the repository
#                                   root; with the device tool:
#                                     run(command="scripts/gpu-e2e.sh", carry=[".gpu-carry"], timeout_s=600)
#                                   torchao: carry its wheel as well (carry=[".gpu-carry", ".whl"]),
#                                   fetched here once with
#                                     echo /.whl/ >> .git/info/exclude
#                                     python3 -m pip download --no-deps --only-binary=:all: \
#                                       --python-version 3.12 --implementation cp \
#                                       --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 \
#                                       -d .whl torchao==0.17.0      (0.17 wants torch >= 2.11, the H200's)
#                                   the script installs .whl/torchao-*.whl into /tmp by itself.
#   scripts/gpu-e2e.sh --dry-run    here, on the CPU (CI runs it from scripts/test.sh): tiny
#                                   models, fp8c on --device cuda-emulated, PyTorch on the CPU
#                                   when .venv-export (or FP8C_E2E_TORCH_PY) has torch, else
#                                   the committed examples/models/llama-tiny.onnx and fp8c only.
#                                   It checks that the script works, not speed.
#
# Results: .gpu-e2e/ (dry run: .gpu-e2e-dry/, or FP8C_E2E_WORK): e2e.json, e2e.md (the
# table) and logs.tar.gz (every command's output and per-step CSV), rewritten after every
# run and copied to $OUT when it is set (the device tool brings back at most 8 files). The
# parts run in order of need, each under its own budget, the whole under FP8C_E2E_BUDGET
# seconds (540 on the GPU: the device tool's 10-minute command limit less the start);
# FP8C_E2E_PARTS (e.g. "350m") runs only those parts: env text 1.3b 125m profile ncu
# attention 350m same-start (the last, in the dry run by default: fp8c and PyTorch f32 losses
# equal over 3 steps). One call of 540 s fills with the first five; a second call right after
# it (the machine still warm, device time permitting) with FP8C_E2E_PARTS=350m
# FP8C_E2E_BUDGET=170 does the rest. Exit code 0 when every run that ran finished and the
# results are whole (scripts/bench/e2e_check.py: every finished run's fields and table row,
# the copies in $OUT); 1 when a run failed (its row says why) or the check found a problem
# (printed last).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
carry="$root/.gpu-carry"
mode=gpu
case "${1:-}" in
  --build)
    set -e
    mkdir -p "$carry"
    cargo build --release -p fp8c
    cp target/release/fp8c "$carry/fp8c"
    strip --strip-debug "$carry/fp8c"
    # The GPU machine's copy of the tree has no git: the tables name the binary's commit.
    git rev-parse --short HEAD >"$carry/commit.txt" 2>/dev/null || true
    du -h "$carry/fp8c"
    echo "carry .gpu-carry and run: scripts/gpu-e2e.sh"
    exit 0 ;;
  --dry-run) mode=dry ;;
  "") ;;
  -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d'; exit 0 ;;
  *) echo "gpu-e2e: unknown argument $1 (--build, --dry-run or none)" >&2; exit 2 ;;
esac

parts=${FP8C_E2E_PARTS:-env,text,1.3b,125m,profile,ncu,attention,350m}
if [ "$mode" = dry ]; then
  fp8c=${FP8C_BIN:-$root/target/release/fp8c}
  if [ ! -x "$fp8c" ]; then
    echo "gpu-e2e: building fp8c (cargo build --release -p fp8c)"
    cargo build --release -p fp8c || exit 1
  fi
  tpy=${FP8C_E2E_TORCH_PY:-$root/.venv-export/bin/python}
  [ "$tpy" = none ] || [ -x "$tpy" ] || tpy=none
  work=${FP8C_E2E_WORK:-$root/.gpu-e2e-dry}
  budget=${FP8C_E2E_BUDGET:-3000}
  # The dry run leaves out ncu (it needs the GPU) and adds same-start: fp8c and PyTorch in
  # f32 on the CPU, 3 steps, equal losses (the proof of same init, same data order).
  parts=${FP8C_E2E_PARTS:-env,text,1.3b,125m,profile,attention,350m,same-start}
  dry=(--dry-run)
else
  fp8c=$carry/fp8c
  [ -x "$fp8c" ] || { echo "gpu-e2e: $fp8c is missing; run scripts/gpu-e2e.sh --build on a machine with cargo first" >&2; exit 1; }
  # shellcheck source=bench/cuda_env.sh
  source "$root/scripts/bench/cuda_env.sh"
  [ -f "$carry/commit.txt" ] && FP8C_E2E_COMMIT=$(cat "$carry/commit.txt") && export FP8C_E2E_COMMIT
  tpy=${FP8C_E2E_TORCH_PY:-$(command -v python3 || echo none)}
  if compgen -G "$root/.whl/torchao-*.whl" >/dev/null; then
    "$tpy" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/fp8c-e2e-site "$root"/.whl/torchao-*.whl &&
      export PYTHONPATH=/tmp/fp8c-e2e-site${PYTHONPATH:+:$PYTHONPATH}
  fi
  work=$root/.gpu-e2e
  budget=${FP8C_E2E_BUDGET:-540}
  dry=()
fi
command -v python3 >/dev/null || { echo "gpu-e2e: python3 is needed (standard library only)" >&2; exit 1; }
rm -rf "$work"
mkdir -p "$work"
exec python3 "$root/scripts/bench/e2e_run.py" --fp8c "$fp8c" --work "$work" --torch-python "$tpy" \
  --parts "$parts" --budget "$budget" ${dry[@]+"${dry[@]}"}
