"""Fixtures for the lazy-opencl tests (the helpers live in cl_testing.py, importable by name)."""

from cl_testing import dev  # noqa: F401  (the CL device fixture)
