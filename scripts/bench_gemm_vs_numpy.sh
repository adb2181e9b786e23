#!/usr/bin/env bash
# f32 GEMM 1024³ through `fp8c run` (a one-MatMul ONNX model, the weight an initializer)
# next to numpy's matmul on the same operands and threads (issue #19's "f32 GEMM ≥ 80% of
# numpy's"). Contenders alternate, 3 rounds; each prints its fastest of 7 runs in ms.
# Usage: scripts/bench_gemm_vs_numpy.sh [FP8C_BINARY] (default target/release/fp8c)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
fp8c=${1:-$root/target/release/fp8c}
PY=$("$root/scripts/python-env.sh")
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$PY" - "$dir" <<'PYEOF'
import sys, numpy as np, onnx
from onnx import helper, TensorProto, numpy_helper
d, n = sys.argv[1], 1024
rng = np.random.default_rng(0)
w = rng.standard_normal((n, n)).astype(np.float32)
x = helper.make_tensor_value_info('x', TensorProto.FLOAT, [n, n])
y = helper.make_tensor_value_info('y', TensorProto.FLOAT, [n, n])
g = helper.make_graph([helper.make_node('MatMul', ['x', 'w'], ['y'])], 'gemm', [x], [y],
                      [numpy_helper.from_array(w, 'w')])
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid('', 17)]), f'{d}/mm.onnx')
np.savez(f'{d}/in.npz', x=rng.standard_normal((n, n)).astype(np.float32))
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
