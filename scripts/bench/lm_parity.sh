#!/usr/bin/env bash
# Loss parity of language-model training from a PyTorch export (issue #14): trains MODEL.onnx
# (input_ids [B,T] -> logits [B,T,V], byte-level vocabulary of 256) on byte windows of real
# text (this repo's README.md and ARCHITECTURE.md) in f32, bf16 and FP8 from the same
# initialisation and data order, and prints a Markdown table of the final losses (mean of the
# last 50 steps) and their gaps to f32. Extra arguments go to every `fp8c train`.
#
# Usage: scripts/bench/lm_parity.sh FP8C_BINARY MODEL.onnx STEPS [EXTRA ARGS..]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=$1 model=$2 steps=$3
shift 3
py=$("$root/scripts/env/python-env.sh")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$py" -c "
import numpy as np
text = open('$root/README.md', 'rb').read() + open('$root/ARCHITECTURE.md', 'rb').read()
b = np.frombuffer(text, dtype=np.uint8).astype(np.int64)
T = 16
n = (len(b) - 1) // T
np.savez('$work/lm.npz', input_ids=b[:n * T].reshape(n, T), labels=b[1:n * T + 1].reshape(n, T))"
echo "| precision | final loss (mean of last 50) | gap to f32 | steps/s |"
echo "|---|---:|---:|---:|"
base=""
for p in f32 bf16 fp8; do
  line=$("$bin" train "$model" --data "$work/lm.npz" --labels labels --batch 16 --steps "$steps" \
    --lr 0.003 --min-fp8-flops 0 --precision "$p" "$@" 2>&1 | grep 'final loss')
  loss=$(echo "$line" | sed -E 's/.*final loss ([0-9.]+).*/\1/')
  rate=$(echo "$line" | sed -E 's/.*\(([0-9.]+) steps\/s.*/\1/')
  [ -z "$base" ] && base=$loss
  gap=$(python3 -c "print(f'{($loss - $base) / $base * 100:+.2f}%')")
  echo "| $p | $loss | $gap | $rate |"
done
