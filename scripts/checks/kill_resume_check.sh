#!/usr/bin/env bash
# Interrupts `fp8c train --checkpoint` at random points (kill -9 and SIGTERM, N each), resumes
# each run from its checkpoint until it finishes, and checks that every final checkpoint is
# bit-identical to an uninterrupted run's (the SHA-256 of state.safetensors), or that the
# resume failed with a message (counted and printed). Issue #13's crash-safety check.
#
# Usage: scripts/checks/kill_resume_check.sh [FP8C_BINARY] [N]   (default target/release/fp8c, 20)
# Needs python3 with numpy (PY=$(scripts/env/python-env.sh) is used) for the dataset.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${1:-$root/target/release/fp8c}
n=${2:-20}
py=$("$root/scripts/env/python-env.sh")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$py" -c "
import numpy as np
r = np.random.default_rng(0)
np.savez('$work/d.npz', x=r.standard_normal((1024, 64)).astype(np.float32),
         y=r.integers(0, 10, 1024).astype(np.int64))"
train=("$bin" train "$root/examples/models/mlp_digits.onnx" --data "$work/d.npz" --labels y
       --batch 256 --steps 300 --checkpoint-every 10 --quiet --min-fp8-flops 0)
"${train[@]}" --checkpoint "$work/base" >/dev/null 2>&1
want=$(sha256sum "$work/base/state.safetensors" | cut -d' ' -f1)
same=0; failed=0; runs=0
for sig in KILL TERM; do
  for i in $(seq 1 "$n"); do
    ck="$work/ck-$sig-$i"
    "${train[@]}" --checkpoint "$ck" >/dev/null 2>"$work/err" &
    pid=$!
    # A random point in the ~1.5 s run (10 ms .. 1.4 s).
    sleep "0.$(printf '%02d' $((RANDOM % 140 + 1)))" 2>/dev/null || sleep 0.1
    kill -s "$sig" "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    # Resume until it finishes (a resume of a finished run is a no-op that succeeds).
    ok=1
    if [ -f "$ck/meta.json" ]; then
      "${train[@]}" --checkpoint "$ck" --resume "$ck" >/dev/null 2>"$work/err" || ok=0
    else
      "${train[@]}" --checkpoint "$ck" >/dev/null 2>"$work/err" || ok=0
    fi
    runs=$((runs + 1))
    if [ $ok = 1 ] && [ "$(sha256sum "$ck/state.safetensors" | cut -d' ' -f1)" = "$want" ]; then
      same=$((same + 1))
    else
      failed=$((failed + 1))
      echo "run $sig #$i: not bit-identical or failed: $(head -c 300 "$work/err")"
    fi
  done
done
echo "kill_resume_check: $runs interrupted runs, $same bit-identical to the uninterrupted run, $failed not"
[ "$failed" = 0 ]
