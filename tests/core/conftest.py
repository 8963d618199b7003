"""Fixtures shared by the core tests."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator

import pytest

from lazy.helpers import Context
from lazy.plugins import Device


@pytest.fixture
def clean_registry() -> Iterator[None]:
    """Hermetic: no installed entry points, no LAZY_DEVICE/LAZY_PLUGINS from the environment, nothing leaks (the
    registry is rebuilt with discovery afterwards). Used by a test module with `pytest.mark.usefixtures`."""
    Device.reset(discover=False)
    with Context(DEVICE="", PLUGINS=""):
        yield
    Device.reset()


@pytest.fixture
def fresh_search() -> Iterator[None]:
    """BEAM finds nothing in memory or on disk, so every call searches (no time budget, nothing printed)."""
    from lazy.codegen import search  # the code generator loads with the first kernel, not with the fixtures
    from lazy.engine.realize import method_cache

    search._results.clear()
    method_cache.clear()
    with Context(CACHE_DIR="off", BEAM_BUDGET=0, DEBUG=0):
        yield
    search._results.clear()


@pytest.fixture
def run_interleaved() -> Callable[[list[threading.Thread]], None]:
    """Start the threads and wait for them, switching between threads as often as the interpreter can (races show)."""

    def run(threads: list[threading.Thread]) -> None:
        interval = sys.getswitchinterval()
        sys.setswitchinterval(1e-6)
        try:
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        finally:
            sys.setswitchinterval(interval)

    return run
