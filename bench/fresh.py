"""Measurements in a fresh interpreter (cold starts): the parent runs a benchmark script again as a child that shares
nothing with it but the environment, with every compile cache (lazy's, PoCL's, tinygrad's) in a directory of the
parent's choosing; the child runs one named function and prints its result on one marked line.

    parent: in_fresh_process(script, "first_cnn_step", {...}, device="CPU", cache_dir=...)
    child:  if is_child(sys.argv): child_main(sys.argv, {"first_cnn_step": first_cnn_step})
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

FLAG = "--fresh-process"
RESULT_PREFIX = "bench result: "  # marks the child's result line (LAZY_DEBUG prints to stdout too)


def is_child(argv: list[str]) -> bool:
    return argv[1:2] == [FLAG]


def child_main(argv: list[str], runs: dict[str, Callable[..., dict[str, float]]]) -> None:
    """The child's side: run the function the request names, print its result on one marked line."""
    spec = json.loads(argv[2])
    result = runs[spec["run"]](**spec["kwargs"])
    print(RESULT_PREFIX + json.dumps(result), flush=True)


def in_fresh_process(script: str, run: str, kwargs: dict[str, Any], device: str, cache_dir: str) -> dict[str, float]:
    """`run(**kwargs)` of `script` in a new interpreter, with `device` as lazy's default device and every compile cache
    under `cache_dir`. The function's result must hold `done_at` (the wall clock when it finished); the returned
    result adds `to_result`: the seconds from starting the process to then, imports included."""
    caches = {"LAZY_CACHE_DIR": cache_dir, "POCL_CACHE_DIR": os.path.join(cache_dir, "pocl"),
              "CACHEDB": os.path.join(cache_dir, "tinygrad.db")}  # fmt: skip
    env = {**os.environ, "LAZY_DEVICE": device, **caches}
    command = [sys.executable, os.path.abspath(script), FLAG, json.dumps({"run": run, "kwargs": kwargs})]
    started = time.time()
    proc = subprocess.run(command, env=env, capture_output=True, text=True)
    results = [line for line in proc.stdout.splitlines() if line.startswith(RESULT_PREFIX)]
    if proc.returncode != 0 or not results:
        raise RuntimeError(f"{run}(**{kwargs}) in a fresh process exited with status {proc.returncode}:\n"
                           f"{proc.stderr.strip()[-3000:]}")  # fmt: skip
    result = json.loads(results[-1].removeprefix(RESULT_PREFIX))
    return {**result, "to_result": result["done_at"] - started}


def filled_cache(script: str, run: str, kwargs: dict[str, Any], device: str) -> tempfile.TemporaryDirectory[str]:
    """A compile cache directory filled by one untimed fresh-process `run`, kept until the caller drops it."""
    cache = tempfile.TemporaryDirectory(prefix="lazy-bench-warm-")
    in_fresh_process(script, run, kwargs, device, cache.name)
    return cache
