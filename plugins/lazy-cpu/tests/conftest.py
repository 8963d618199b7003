"""Fixtures for the lazy-cpu tests (the helpers live in cpu_testing.py, importable by name)."""

from cpu_testing import dev  # noqa: F401  (the device fixture, parametrized over CPU and LLVM)
