#!/usr/bin/env bash
# An f32 GEMM (default 1024³) through `fp8c run` (a one-MatMul ONNX model, the weight an
# initializer) next to numpy's matmul on the same operands and threads (issue #19's "f32 GEMM
# ≥ 80% of numpy's"). Contenders alternate, 3 rounds; each prints its fastest of 7 runs in ms.
# Usage: scripts/bench/bench_gemm_vs_numpy.sh [FP8C_BINARY [M K N]]
#   (default target/release/fp8c, 1024 1024 1024; e.g. `... 32 768 3072` is a BERT-base FFN
#   GEMM at 32 tokens, where the weight is read from memory rather than from cache)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
fp8c=${1:-$root/target/release/fp8c}
shape=("${2:-1024}" "${3:-1024}" "${4:-1024}")
PY=$("$root/scripts/env/python-env.sh")
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$PY" - "$dir" "${shape[@]}" <<'PYEOF'
import sys, numpy as np, onnx
from onnx import helper, TensorProto, numpy_helper
d, (m, k, n) = sys.argv[1], map(int, sys.argv[2:5])
rng = np.random.default_rng(0)
w = rng.standard_normal((k, n)).astype(np.float32)
x = helper.make_tensor_value_info('x', TensorProto.FLOAT, [m, k])
y = helper.make_tensor_value_info('y', TensorProto.FLOAT, [m, n])
g = helper.make_graph([helper.make_node('MatMul', ['x', 'w'], ['y'])], 'gemm', [x], [y],
                      [numpy_helper.from_array(w, 'w')])
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid('', 17)]), f'{d}/mm.onnx')
np.savez(f'{d}/in.npz', x=rng.standard_normal((m, k)).astype(np.float32))
np.save(f'{d}/w.npy', w)
PYEOF
for t in 1 2; do
  for round in 1 2 3; do
    ours=$("$fp8c" --threads "$t" run "$dir/mm.onnx" --inputs "$dir/in.npz" --precision f32 \
      --repeat 7 2>&1 | sed -n 's/.*run \([0-9.]*\) ms (fastest.*/\1/p')
    theirs=$(OPENBLAS_NUM_THREADS=$t OMP_NUM_THREADS=$t MKL_NUM_THREADS=$t "$PY" - "$dir" <<'PYEOF'
import sys, time, numpy as np
d = sys.argv[1]
x, w = np.load(f'{d}/in.npz')['x'], np.load(f'{d}/w.npy')
x @ w
best = min((lambda s: (x @ w, time.perf_counter() - s)[1])(time.perf_counter()) for _ in range(7))
print(f"{best * 1e3:.2f}")
PYEOF
)
    "$PY" -c "print(f'threads={$t} fp8c {$ours:.2f} ms  numpy {$theirs:.2f} ms  fp8c at {100*$theirs/$ours:.0f}% of numpy')"
  done
done
