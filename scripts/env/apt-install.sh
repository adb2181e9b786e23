#!/usr/bin/env bash
# Installs the Debian packages among PKG... that are missing (as root, or with sudo), one
# install at a time on this machine (parallel callers wait on a lock). Shared by
# scripts/env/mlir-env.sh and scripts/env/mpi-env.sh.
# Usage: scripts/env/apt-install.sh WHO "WHAT" PKG...   (WHO, WHAT: for the messages)
set -euo pipefail
who=$1 what=$2
shift 2
missing=()
for p in "$@"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "$who: installing ${missing[*]} ($what)" >&2
if [ "$(id -u)" = 0 ]; then
  sudo=()
elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
  sudo=(sudo)
else
  echo "$who: cannot install ${missing[*]}: run as root, or install them yourself" >&2
  exit 1
fi
exec 9>"${TMPDIR:-/tmp}/fp8c-mlir-apt.lock"
flock 9
"${sudo[@]}" apt-get update -qq >&2
DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
