#!/usr/bin/env bash
# Create .venv (if missing) and install lazy-core, the plugins, the example's and the dev tools' dependencies.
# Idempotent. Usage: scripts/setup.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip
fi
.venv/bin/python -m pip install -q -e "./core[conformance,mpi,onnx,onnx-test]" -e ./plugins/lazy-cpu -e "./plugins/lazy-opencl[pocl]" \
  -e ./plugins/lazy-disk -e ./plugins/lazy-cuda -e ./plugins/lazy-metal -e ./plugins/_template \
  scikit-learn safetensors pytest pytest-xdist pytest-timeout hypothesis ruff mypy playwright
# bytecode now, as a regular `pip install` does: editable installs have none, and PYTHONDONTWRITEBYTECODE would
# otherwise make every `import lazy` compile from source
.venv/bin/python -m compileall -q core/src plugins/*/src
