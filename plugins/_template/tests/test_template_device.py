"""Smoke tests of the TMPL device: its entry point registered it, `Device["TMPL"]` opens it with this plugin's parts,
and tensors computed on it are right."""

from __future__ import annotations

import numpy as np

from lazy import Tensor
from lazy.plugins import Device
from lazy_template.allocator import TemplateAllocator
from lazy_template.renderer import TemplateRenderer


def test_entry_point_registers_the_device() -> None:
    assert "TMPL" in Device.specs(), f"TMPL not found; plugin problems: {Device.problems()}"
    [info] = [p for p in Device.plugins() if p.name == "tmpl"]
    assert (info.distribution, info.status) == ("lazy-template", "ok"), info
    assert Device.probe("TMPL")[0], Device.probe("TMPL")


def test_device_opens_with_its_parts() -> None:
    dev = Device["TMPL"]
    assert isinstance(dev.allocator, TemplateAllocator) and isinstance(dev.renderer, TemplateRenderer)
    assert not dev.hcq  # the simple tier: core's synchronous queues


def test_add_two_tensors() -> None:
    a, b = np.arange(6, dtype=np.float32).reshape(2, 3), np.full((2, 3), 0.5, np.float32)
    out = Tensor(a, device="TMPL") + Tensor(b, device="TMPL")
    assert out.device == "TMPL"
    np.testing.assert_array_equal(out.numpy(), a + b)


def test_integer_division_truncates_and_division_by_zero_gives_zero() -> None:
    x, y = Tensor([7, -7, 7, 5], device="TMPL"), Tensor([2, 2, -2, 0], device="TMPL")
    np.testing.assert_array_equal((x // y).numpy(), [3, -4, -4, 0])  # Tensor // is Python's floor division
    np.testing.assert_array_equal(x.idiv(y).numpy(), [3, -3, -3, 0])  # the IDIV op truncates; x/0 is 0
