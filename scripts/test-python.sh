#!/usr/bin/env bash
# The Python package's tests, as a user would install it: a fresh virtual environment
# (target/py-test-venv), the README's install command (`pip install ./crates/fp8c-py`: maturin
# builds the abi3 module with cargo into target/, reusing the release build of the Rust
# suite), the test requirements (scripts/env/requirements.txt and pytest), then pytest on
# crates/fp8c-py/tests, with FP8C_BIN naming the `fp8c` binary the results are compared
# with bit for bit. scripts/test.sh runs it after the Rust suite.
# Usage: scripts/test-python.sh [PYTEST ARGS...]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
venv="$root/target/py-test-venv"
rm -rf "$venv"
python3 -m venv "$venv"
py="$venv/bin/python"
pip=("$py" -m pip install -q --disable-pip-version-check)
"${pip[@]}" -r scripts/env/requirements.txt pytest==9.2.0
"${pip[@]}" ./crates/fp8c-py
[ -x target/release/fp8c ] || cargo build --release -p fp8c
FP8C_BIN="$root/target/release/fp8c" "$py" -m pytest -q -rs crates/fp8c-py/tests "$@"
