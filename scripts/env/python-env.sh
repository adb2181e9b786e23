#!/usr/bin/env bash
# Creates (or reuses) the project's Python virtual environment in .venv with the pinned
# packages of scripts/env/requirements.txt, and prints the path of its python on stdout.
# Usage: PY=$(scripts/env/python-env.sh)   — safe to call repeatedly; it installs only once.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
venv="$root/.venv"
req="$root/scripts/env/requirements.txt"
stamp="$venv/.requirements.sha"
want=$(sha256sum "$req" | cut -d' ' -f1)
# Test binaries run in parallel and each may call this script: one creates and installs, the
# others wait on the lock (a half-made venv is never used).
exec 9>"$root/.venv.lock"
flock 9
# A venv left without pip (a run killed while `python3 -m venv` was bootstrapping it) is made
# again rather than used.
if [ -x "$venv/bin/python" ] && ! "$venv/bin/python" -m pip --version >/dev/null 2>&1; then
  rm -rf "$venv"
fi
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv" >&2
fi
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$req" >&2
  echo "$want" > "$stamp"
fi
echo "$venv/bin/python"
