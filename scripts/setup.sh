#!/usr/bin/env bash
# Creates .venv (if missing) and installs rlkit into it. Installs the CPU build of torch 2.13.0
# first where no torch is present, so that no CUDA build is pulled in by the dependency range.
# Usage: scripts/setup.sh [extra ...]   (e.g. "test" installs the test extras and the example plugin)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
VPY=.venv/bin/python
# Skip the installs when nothing they depend on changed since the last set-up (the edit-test loop:
# rlkit and the example plugins are editable installs, so code edits need no reinstall).
stamp=.venv/.rlkit-setup-${1:-base}
want=$(cat pyproject.toml docs/example_plugin/pyproject.toml docs/example_plugin_localsgd/pyproject.toml \
  scripts/setup.sh | cksum)
mods="rlkit torch"; if [ "${1:-}" = "test" ]; then mods="$mods pytest rlkit_lookahead rlkit_localsgd"; fi
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && "$VPY" -c "import importlib.util as u, sys
sys.exit(not all(u.find_spec(m) for m in sys.argv[1:]))" $mods >/dev/null 2>&1; then
  exit 0
fi
rm -f "$stamp"
"$VPY" -m pip install -q --upgrade pip >/dev/null
if ! "$VPY" -c "import torch" >/dev/null 2>&1; then
  echo "setup: installing torch 2.13.0 (CPU build)"
  "$VPY" -m pip install -q "torch==2.13.0"
fi
extras=""
if [ "${1:-}" = "test" ]; then extras="[test]"; fi
echo "setup: installing rlkit${extras}"
"$VPY" -m pip install -q -e ".${extras}"
if [ "${1:-}" = "test" ]; then
  echo "setup: installing the example third-party plugin (docs/example_plugin)"
  "$VPY" -m pip install -q -e docs/example_plugin
  "$VPY" -m pip install -q -e docs/example_plugin_localsgd
fi
echo "$want" > "$stamp"
