#!/usr/bin/env bash
# Data-parallel training throughput (issue #44): samples per second of `fp8c train` on one
# process with one thread against `mpirun -np 2` with one thread per rank, the same per-rank
# batch (the global batch doubles), contenders alternating ROUNDS times; prints each run's
# samples/s and the ratio. Needs an fp8c built with `--features mpi` and two idle cores.
#
# Usage: scripts/bench/dist_throughput.sh FP8C_BINARY [STEPS [ROUNDS [PRECISION]]]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=$1 steps=${2:-40} rounds=${3:-3} precision=${4:-fp8}
model=$root/examples/models/llama-tiny.onnx
text=$root/examples/data/shakespeare.txt
batch=8 seq=64
args=(train "$model" --text "$text" --seq-len $seq --batch $batch --steps "$steps"
  --precision "$precision" --quiet)
# steps/s from the end-of-run line ("N steps in S s (X steps/s, ...").
rate() { sed -n 's/.*(\([0-9.]*\) steps\/s.*/\1/p' | tail -1; }
echo "llama-tiny, seq $seq, batch $batch per rank, $steps steps, $precision; samples/s"
for r in $(seq "$rounds"); do
  one=$("$bin" --threads 1 "${args[@]}" 2>&1 | rate)
  two=$(mpirun --allow-run-as-root --oversubscribe -np 2 "$bin" --threads 1 "${args[@]}" 2>&1 | rate)
  python3 -c "
one, two = $one * $batch, $two * 2 * $batch
print(f'round $r: 1 rank {one:.1f}  2 ranks {two:.1f}  ratio {two / one:.2f}')"
done
