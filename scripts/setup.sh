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
