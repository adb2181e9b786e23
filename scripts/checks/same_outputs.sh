#!/usr/bin/env bash
# Checks that two fp8c binaries give byte-identical results on the example models: the IR
# text of `compile` (f32 and FP8), the `.npz` outputs of `run` (f32 and FP8, 1 and 2
# threads) and, for `train`, the CSV log (elapsed column removed), the trained ONNX model
# and the checkpoint state (f32 and FP8, 1 and 2 threads). Prints one line per case and
# exits non-zero on the first difference. For refactors that must not change behaviour.
# Usage: scripts/checks/same_outputs.sh OLD_FP8C NEW_FP8C [WORK_DIR]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
old=$(realpath "$1"); new=$(realpath "$2")
work=${3:-$(mktemp -d)}
mkdir -p "$work"
py=$("$root/scripts/env/python-env.sh")
cd "$root"
fail=0
same() { # label file_a file_b
  if cmp -s "$2" "$3"; then echo "same     $1"; else echo "DIFFERS  $1 ($2 vs $3)"; fail=1; fi
}
# Inputs: the inputs of each committed reference archive.
for ref in examples/models/*.ref.npz; do
  m=${ref%.ref.npz}; n=$(basename "$m")
  "$py" - "$ref" "$m.onnx" "$work/$n.in.npz" <<'PY'
import sys, numpy as np, onnx
ref, model, out = sys.argv[1:]
names = {i.name for i in onnx.load(model, load_external_data=False).graph.input}
d = np.load(ref)
np.savez(out, **{k: d[k] for k in d.files if k in names})
PY
done
for ref in examples/models/*.ref.npz; do
  m=${ref%.ref.npz}; n=$(basename "$m")
  for p in f32 fp8; do
    for t in 1 2; do
      for b in old new; do
        bin=$old; [ $b = new ] && bin=$new
        "$bin" --threads $t run "$m.onnx" --inputs "$work/$n.in.npz" --precision $p --min-fp8-flops 0 -o "$work/$n.$p.$t.$b.npz" 2>/dev/null
      done
      same "run $n $p threads=$t" "$work/$n.$p.$t.old.npz" "$work/$n.$p.$t.new.npz"
    done
    for b in old new; do
      bin=$old; [ $b = new ] && bin=$new
      "$bin" compile "$m.onnx" --input-shape input_ids=2x16 --precision $p -o "$work/$n.$p.$b.fp8ir" 2>/dev/null \
        || "$bin" compile "$m.onnx" --precision $p -o "$work/$n.$p.$b.fp8ir" 2>/dev/null || true
    done
    [ -f "$work/$n.$p.old.fp8ir" ] && same "compile $n $p" "$work/$n.$p.old.fp8ir" "$work/$n.$p.new.fp8ir"
  done
done
for m in llama-tiny gpt2-tiny; do
  for p in f32 fp8; do
    for t in 1 2; do
      for b in old new; do
        bin=$old; [ $b = new ] && bin=$new
        d="$work/train.$m.$p.$t.$b"; rm -rf "$d"; mkdir -p "$d"
        "$bin" --threads $t train "examples/models/$m.onnx" --text examples/data/shakespeare.txt --seq-len 16 \
          --batch 4 --steps 12 --accumulate 2 --clip-grad-norm 1.0 --precision $p --min-fp8-flops 0 --quiet \
          --log "$d/log.csv" --checkpoint "$d/ck" --checkpoint-every 5 -o "$d/trained.onnx" 2>"$d/stderr"
        cut -d, -f1-5,7 "$d/log.csv" > "$d/log.nocol6"
      done
      same "train $m $p threads=$t log" "$work/train.$m.$p.$t.old/log.nocol6" "$work/train.$m.$p.$t.new/log.nocol6"
      same "train $m $p threads=$t model" "$work/train.$m.$p.$t.old/trained.onnx" "$work/train.$m.$p.$t.new/trained.onnx"
      same "train $m $p threads=$t state" "$work/train.$m.$p.$t.old/ck/state.safetensors" "$work/train.$m.$p.$t.new/ck/state.safetensors"
    done
  done
done
# Classification training from .npz (accuracy column) and a resume.
for b in old new; do
  bin=$old; [ $b = new ] && bin=$new
  d="$work/train.mlp.$b"; rm -rf "$d"; mkdir -p "$d"
  "$bin" train examples/models/mlp_digits.onnx --data examples/data/digits_train.npz --labels y \
    --batch 32 --steps 6 --quiet --log "$d/log.csv" --checkpoint "$d/ck" 2>"$d/stderr"
  "$bin" train examples/models/mlp_digits.onnx --data examples/data/digits_train.npz --labels y \
    --batch 32 --steps 10 --quiet --log "$d/log.csv" --resume "$d/ck" --checkpoint "$d/ck" 2>>"$d/stderr"
  cut -d, -f1-5,7 "$d/log.csv" > "$d/log.nocol6"
done
same "train mlp + resume log" "$work/train.mlp.old/log.nocol6" "$work/train.mlp.new/log.nocol6"
same "train mlp + resume state" "$work/train.mlp.old/ck/state.safetensors" "$work/train.mlp.new/ck/state.safetensors"
exit $fail
