#!/usr/bin/env bash
# The CUDA device end to end on a machine with an NVIDIA GPU, offline: installs lazy-core, lazy-cpu and lazy-cuda from
# this checkout (no dependencies fetched: the machine's numpy, pluggy, pytest, cuda-bindings and nvidia-cuda-nvrtc are
# used), then runs a smoke test, the conformance suite on CUDA (three processes, one per part of the suite), the
# plugin's tests, the digits example and the benchmark rows beside PyTorch on the same GPU.
# Logs and reports go to $OUT (default reports/cuda): log.txt, conformance-{a,b,c}.json, bench.txt.
#   usage: scripts/cuda_check.sh [stage ...]   stages: env install smoke conformance tests example bench profile (default: all but profile)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-reports/cuda}
PY=${PY:-python3}
SITE=${LAZY_CHECK_SITE:-/tmp/lazy-site}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}" LAZY_CACHE_DIR=${LAZY_CACHE_DIR:-/tmp/lazy-cache}
stages=${*:-env install smoke conformance tests example bench}
LOG="$OUT/log.txt"

run() {  # run <name> <seconds> <command...>: logged, time-limited, its status reported
  local name=$1 limit=$2 t0=$SECONDS
  shift 2
  echo "== $name" | tee -a "$LOG"
  timeout -k 10 "$limit" "$@" >>"$LOG" 2>&1
  echo "== $name: rc=$? in $((SECONDS - t0)) s" | tee -a "$LOG"
}

for stage in $stages; do
  case $stage in
    env) run env 60 bash -c "nvidia-smi -L; nvidia-smi --query-gpu=driver_version,memory.total --format=csv; \
      $PY -V; nproc; (gcc --version || clang --version) | head -1; \
      $PY -m pip list 2>/dev/null | grep -iE '^(numpy|pluggy|pytest|pytest-xdist|pytest-timeout|cuda-bindings|nvidia-cuda-nvrtc|llvmlite|torch|setuptools) '" ;;
    install) run install 180 $PY -m pip install -q --no-deps --no-build-isolation --no-index --no-compile \
      --upgrade --target "$SITE" ./core ./plugins/lazy-cpu ./plugins/lazy-cuda ;;
    smoke) run smoke 120 env LAZY_DEBUG=1 $PY - <<'EOF'
import numpy as np
from lazy import Device, Tensor
from lazy.dtype import dtypes
print("default device:", Device.DEFAULT)
dev = Device["CUDA"]
print(dev.gpu_name, dev.arch, "memops:", dev.stream_memops)
print((Tensor([1.0, 2.0, 3.0], device="CUDA") + 1).numpy())
a, b = np.random.rand(300, 200).astype(np.float32), np.random.rand(200, 100).astype(np.float32)
print("matmul max error:", np.abs((Tensor(a, device="CUDA") @ Tensor(b, device="CUDA")).numpy() - a @ b).max())
h = (Tensor(a, device="CUDA").half()[:256, :192] @ Tensor(b, device="CUDA").half()[:192, :96]).float().numpy()
print("half matmul max error:", np.abs(h - a[:256, :192] @ b[:192, :96]).max())
print("sum:", Tensor(np.ones(1 << 24, np.float32), device="CUDA").sum().item())
print("softmax row sums:", Tensor(a, device="CUDA").softmax(-1).sum(-1).numpy()[:4])
EOF
    ;;
    conformance)
      # the suite in three parts at once (NVRTC compiles on the CPU; the GPU runs each kernel in microseconds)
      parts=("test_45_ops" "test_40_tensor or test_50_end_to_end or test_47_dlpack"
             "not (test_45_ops or test_40_tensor or test_50_end_to_end or test_47_dlpack)")
      pids=()
      tags=(a b c)
      for i in 0 1 2; do
        tag=${tags[$i]}
        (timeout -k 10 240 $PY -m lazy.conformance --device CUDA -k "${parts[$i]}" --json "$OUT/conformance-$tag.json" \
          > "$OUT/conformance-$tag.log" 2>&1; echo "rc=$?" >>"$OUT/conformance-$tag.log") &
        pids+=($!)
      done
      t0=$SECONDS
      wait "${pids[@]}"
      for tag in a b c; do
        { echo "== conformance part $tag ($((SECONDS - t0)) s)"; grep -vE '^(\.|s|F|x)+ *(\[|$)' "$OUT/conformance-$tag.log" | tail -n 150; } | tee -a "$LOG" | tail -n 15
        rm -f "$OUT/conformance-$tag.log"
      done ;;
    tests) run tests 120 $PY -m pytest -q -p no:cacheprovider --timeout=120 -rs plugins/lazy-cuda/tests ;;
    example) run example 120 $PY examples/digits.py --epochs 5 ;;
    bench) run bench 300 $PY bench/run.py --devices CUDA --torch-device cuda --budget 1 --out '' \
      --rows tiny,tiny_sync,jit,jit_sync,elementwise,exp,softmax,sum,matmul,conv2d,conv2d_backward,cnn,mlp
      grep -E '^\|' "$LOG" | tail -n 20 >"$OUT/bench.txt" ;;
    profile)  # each workload in its own process with LAZY_DEBUG=2: the kernels that take the time, with their sizes
      for work in "matmul 2048" "sum" "softmax" "conv2d" "conv2d_backward" "cnn"; do
        run "profile $work" 120 env LAZY_DEBUG=2 $PY bench/profile_workload.py --device CUDA $work
      done ;;
    *) echo "unknown stage $stage (env install smoke conformance tests example bench profile)"; exit 2 ;;
  esac
done
