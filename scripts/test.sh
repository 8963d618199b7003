#!/usr/bin/env bash
# Everything CI checks, from a clean clone: install, lint, types, all tests, and the conformance suite on every
# device this machine can run (printed as one device x layer matrix).
set -euo pipefail
cd "$(dirname "$0")/.."
# the C compiler the CPU device takes here (gcc, else clang), pinned for the whole run: the other one installs in the
# background beside the viewer's browser (the viewer's test drives the system's Chromium through Playwright, no
# browser download), and the conformance suite runs once more on CPU with it at the end
export LAZY_CC="${LAZY_CC:-$(command -v gcc || command -v clang || true)}"
other_cc=gcc
case "$(basename "${LAZY_CC:-none}")" in gcc* | cc) other_cc=clang ;; esac
packages=()
command -v chromium >/dev/null || command -v chromium-browser >/dev/null || packages+=(chromium)
command -v "$other_cc" >/dev/null || packages+=("$other_cc")
installing=""
if [ ${#packages[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    # one package at a time: one that cannot be installed leaves the other installed
    (apt-get update -qq && for p in "${packages[@]}"; do DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$p" || true;
      done) >/dev/null 2>&1 &
    installing=$!
  else
    echo "no root or apt-get to install ${packages[*]}: tests/viz or the second compiler's conformance run will skip, saying why"
  fi
fi
scripts/setup.sh
PY=.venv/bin/python
# the tests compare against PyTorch (CPU build, pinned: pip takes the local wheel where one is provided)
$PY -m pip install -q torch==2.13.0
echo "== ruff"; $PY -m ruff check conftest.py core plugins tests examples bench
echo "== ruff format"; $PY -m ruff format --check conftest.py core plugins tests examples bench
echo "== mypy"; $PY -m mypy core/src/lazy plugins/lazy-cpu/src/lazy_cpu plugins/lazy-opencl/src/lazy_opencl plugins/lazy-disk/src/lazy_disk plugins/lazy-cuda/src/lazy_cuda plugins/lazy-metal/src/lazy_metal plugins/_template/src/lazy_template
if [ -n "$installing" ]; then
  wait "$installing" || true
  for p in "${packages[@]}"; do command -v "$p" >/dev/null || echo "$p did not install: what needs it skips, saying why"; done
fi
# index tensors are range-checked in the tests (LAZY_CHECK_INDEX: off by default for speed); a hung test fails
echo "== tests"; LAZY_CHECK_INDEX=1 $PY -m pytest -q -n 2 --timeout=300 tests plugins
# every usable device, plus the GPU plugins checked without a GPU: PYTHON emulating CUDA and METAL, every kernel of
# the suite compiled by NVRTC for each CUDA target (first run ~2 min of NVRTC on 2 cores, then the compile cache) and
# rendered as MSL
echo "== conformance"
# PoCL exposes one CPU device per POCL_DEVICES entry: two give CL:0 and CL:1, for the multi-device layer
POCL_DEVICES="pthread pthread" $PY -m lazy.conformance --all --emulate CUDA,METAL --compile-only-for CUDA,METAL --out reports/conformance
echo "== main job"; $PY examples/digits.py --epochs 30
echo "== CNN example"; $PY examples/digits_cnn.py --epochs 15
echo "== char transformer example"; $PY examples/char_transformer.py --steps 300
# the CPU device with the other C compiler (C kernels are the compiler's to vectorize and schedule: both must pass)
if command -v "$other_cc" >/dev/null; then
  echo "== conformance, CPU with $other_cc"
  LAZY_CC="$other_cc" $PY -m lazy.conformance --device CPU --out "reports/conformance-$other_cc"
else
  echo "== conformance, CPU with $other_cc: skipped, $other_cc is not installed (apt-get install $other_cc)"
fi
# on an AVX-512 machine, the CPU device once more as an AVX2-only machine runs it (8 lanes, -mno-avx512f)
echo "== conformance, CPU as an AVX2 machine"
$PY scripts/conformance_avx2.py --device CPU --out reports/conformance-avx2
