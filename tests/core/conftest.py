"""Fixtures shared by the core tests."""

from __future__ import annotations

from collections.abc import Iterator

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
