#!/usr/bin/env bash
# The whole test suite (the README's test command; CI's `.ci/run` calls it): the workspace's
# tests in the default build (no LLVM, no GPU), then the optional features' suites, each
# installing what it needs: fp8c-mlir with `--features mlir` and the golden cases on MLIR's
# JIT (LLVM/MLIR 22 from Debian's packages, through scripts/env/mlir-env.sh), the distributed
# suite with `--features mpi` (OpenMPI from Debian's packages, through scripts/env/mpi-env.sh;
# 1, 2 and 4 ranks under mpirun), and the Python package's pytest suite in a fresh venv
# (scripts/test-python.sh, reusing the release build); and, after the workspace's tests, the
# CPU dry run of the GPU end-to-end benchmark (scripts/gpu-e2e.sh --dry-run: the committed
# tiny Llama export trained by fp8c on the emulated CUDA device; no torch; 25-50 s of CPU
# time). Every part runs even when an earlier one failed; the exit code says whether all
# passed.
set -uo pipefail
cd "$(dirname "$0")/.."
status=0
# Each part's wall time, printed with its result at the end (CI's budget is 25 minutes).
times=()
t0=$SECONDS
part() { # RC NAME: records the part that just ended and its exit code
  local rc=$1 name=$2
  times+=("$(printf '%5ds  %-7s %s' $((SECONDS - t0)) "$([ "$rc" = 0 ] && echo ok || echo FAILED)" "$name")")
  [ "$rc" = 0 ] || status=1
  t0=$SECONDS
}
cargo test --workspace --release --no-fail-fast
part $? "the workspace's tests"
echo "== the GPU end-to-end benchmark's CPU dry run (scripts/gpu-e2e.sh --dry-run, without torch)"
# Right after the workspace's tests, whose build of fp8c it uses (the mpi suite's build links
# OpenMPI). It fails when a run fails or its results are incomplete (scripts/bench/e2e_check.py,
# which also checks the copies in $OUT); the self-test then plants faults in copies of those
# results and fails unless the check finds every one.
e2e_out=$(mktemp -d)
# Built by the workspace's tests; `cargo build -p fp8c` would resolve features for that package
# alone and rebuild most dependencies.
{ { [ -x target/release/fp8c ] || cargo build --release -p fp8c; } &&
  OUT=$e2e_out FP8C_E2E_TORCH_PY=none scripts/gpu-e2e.sh --dry-run &&
  python3 scripts/bench/e2e_check.py --self-test .gpu-e2e-dry; }
part $? "the GPU end-to-end dry run"
rm -rf "$e2e_out"
echo "== the mlir feature's suite (fp8c-mlir: MLIR emission, MLIR's JIT against the CPU reference)"
# `--workspace` keeps the workspace's feature resolution (plus `mlir`), as the mpi suite below
# does: `-p fp8c-mlir` would resolve features for that package alone and rebuild most
# dependencies. `--lib` also runs the unit tests of the crates the feature rebuilds (the JIT's);
# `--test golden` is the golden cases' one driver (fp8c-session's tests/golden/) with its MLIR
# JIT variants.
scripts/env/mlir-env.sh cargo test --release --workspace --features fp8c-session/mlir --lib \
  --test mlir --test golden --no-fail-fast
part $? "the mlir feature's suite"
echo "== the mpi feature's suite (fp8c train under mpirun: bit identity for 1, 2 and 4 ranks, sharding, faults)"
# `--workspace` keeps the workspace's feature resolution (plus `mpi`), so the dependencies built
# for the workspace's tests are reused; only the crates the feature touches are built again.
scripts/env/mpi-env.sh cargo test --release --workspace --features fp8c/mpi --test distributed \
  --no-fail-fast
part $? "the mpi feature's suite"
echo "== the Python package (crates/fp8c-py): pip install in a fresh venv, then its pytest suite"
scripts/test-python.sh
part $? "the Python package's suite"
echo "== parts (wall time, result)"
printf '%s\n' "${times[@]}"
exit $status
