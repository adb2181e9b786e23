#!/usr/bin/env bash
# Peak resident memory of `fp8c compile` on a BERT-base-sized export (110M parameters,
# 436 MB of f32 weights), for BENCHMARKS.md ("Compile memory").
#
# Usage: scripts/bench/measure_compile_rss.sh [FP8C_BINARY ...]   (default: target/release/fp8c)
#
# The model is bert-base-rand from scripts/fixtures/export_llms.py --bert-base (random weights from
# a transformers config; needs the export venv, scripts/env/export-env.sh). Binaries built before
# GatherND was supported cannot import its attention-mask lookup, so the script also writes a
# copy with that one node replaced by the equivalent Unsqueeze(mask, axes=[1, 2]) (exact in
# onnxruntime), and measures every binary on that copy, so old and new compare alike.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
model="$root/.cache/models/bert-base-rand.onnx"
plain="$root/.cache/models/bert-base-rand.no-gathernd.onnx"
if [ ! -f "$model" ]; then
  PY=$("$root/scripts/env/export-env.sh")
  "$PY" "$root/scripts/fixtures/export_llms.py" --bert-base >&2
fi
if [ ! -f "$plain" ]; then
  PY=$("$root/scripts/env/python-env.sh")
  "$PY" - "$model" "$plain" <<'PYEOF'
import sys
import onnx
from onnx import helper, numpy_helper
import numpy as np
m = onnx.load(sys.argv[1])
g = m.graph
for i, n in enumerate(g.node):
    if n.op_type == "GatherND":
        axes = helper.make_node("Constant", [], [n.output[0] + "_axes"],
                                value=numpy_helper.from_array(np.array([1, 2], np.int64)))
        un = helper.make_node("Unsqueeze", [n.input[0], n.output[0] + "_axes"], [n.output[0]],
                              name=n.name + "_as_unsqueeze")
        g.node.remove(n)
        g.node.insert(i, un)
        g.node.insert(i, axes)
        break
onnx.save(m, sys.argv[2])
PYEOF
fi
bins=("$@")
[ ${#bins[@]} -eq 0 ] && bins=("$root/target/release/fp8c")
weights=$(stat -c %s "$model")
echo "model: $plain (file $weights bytes)"
for b in "${bins[@]}"; do
  out=$( { /usr/bin/time -v "$b" compile "$plain" --input-shape input_ids=2x128 \
      --input-shape attention_mask=2x128 --input-shape token_type_ids=2x128 -o /tmp/fp8c-rss.fp8ir; } 2>&1 )
  rss=$(echo "$out" | awk -F': ' '/Maximum resident set size/ {print $2}')
  secs=$(echo "$out" | awk -F': ' '/Elapsed \(wall clock\)/ {print $2}')
  echo "$b: peak RSS $rss KiB ($(awk -v r="$rss" -v w="$weights" 'BEGIN {printf "%.2f", r*1024/w}')x the file), wall $secs"
done
rm -f /tmp/fp8c-rss.fp8ir /tmp/fp8c-rss.fp8ir.safetensors
