#!/usr/bin/env bash
# compile -> run scaling on chain models (issue #46, case 8): for each N, a chain of N Neg
# nodes (scripts/bench/chain_models.py) is compiled (`fp8c compile -o`) and run (`fp8c run`,
# which compiles again), each timed with /usr/bin/time: wall seconds and CPU seconds
# (user + system; on a shared machine the CPU time is the figure to compare, wall time
# depends on the load). With a second binary (PEER) the two alternate, run by run.
# Usage: scripts/bench/chain_scaling.sh FP8C [PEER] [N ...]   (default N: 10000 100000 1000000)
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=$1
shift
peer=""
if [ $# -gt 0 ] && [ -x "$1" ]; then
  peer=$1
  shift
fi
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(10000 100000 1000000)
py=$(scripts/env/python-env.sh)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$py" -c "import numpy as np; np.savez('$work/x.npz', x=np.arange(16, dtype=np.float32).reshape(1, 16))"
echo "| N | binary | compile wall s | compile cpu s | run wall s | run cpu s | run peak RSS MiB |"
echo "|---:|---|---:|---:|---:|---:|---:|"
for n in "${sizes[@]}"; do
  "$py" scripts/bench/chain_models.py "$n" "$work/chain.onnx"
  for b in "$bin" $peer; do
    /usr/bin/time -o "$work/t" -f "%e %U %S" "$b" compile "$work/chain.onnx" -o "$work/c.fp8ir" >/dev/null 2>&1
    read -r cw cu cs <"$work/t"
    /usr/bin/time -o "$work/t" -f "%e %U %S %M" "$b" run "$work/chain.onnx" --inputs "$work/x.npz" -o "$work/o.npz" >/dev/null 2>&1
    read -r rw ru rs rm <"$work/t"
    printf "| %s | %s | %s | %.2f | %s | %.2f | %d |\n" "$n" "$b" "$cw" "$(awk "BEGIN{print $cu + $cs}")" \
      "$rw" "$(awk "BEGIN{print $ru + $rs}")" "$((rm / 1024))"
  done
done
