"""Registration, opening (and the errors when there is no OpenCL platform), the allocator, the compiler, launch
limits and the HCQ queues of the CL device."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from cl_testing import from_device, load_program, to_device
from test_cl_renderer import add_one, group_sum

import lazy_opencl
from lazy.device import CompileError, DeviceError
from lazy.dtype import dtypes
from lazy.hcq import Exec, HCQGraph


def test_entry_point_registers_cl():
    from lazy.plugins import Device

    specs = Device.specs()
    assert "CL" in specs and specs["CL"].priority == 80  # below CPU (100): PoCL on a CPU is slower than CPU


def test_device_opens_through_registry(dev):
    from lazy import Tensor

    out = (Tensor([1.0, 2.0, 3.0], device="CL") * 2 + 1).numpy()
    np.testing.assert_array_equal(out, [3, 5, 7])
    back = Tensor([4.0, 5.0], device="CL").to("PYTHON").numpy()  # PYTHON ships with core: always there
    np.testing.assert_array_equal(back, [4.0, 5.0])


def test_probe_names_the_fix_without_a_driver(monkeypatch):
    monkeypatch.setattr(lazy_opencl, "find_icds", lambda: [])
    usable, reason = lazy_opencl.probe_cl()
    assert not usable and "pip install pocl-binary-distribution" in reason and "vendor" in reason


def test_open_without_platform_names_the_fix(monkeypatch):
    import pyopencl as cl

    from lazy_opencl import device as cl_device

    def no_platform():
        raise cl.LogicError("clGetPlatformIDs failed: PLATFORM_NOT_FOUND_KHR")

    monkeypatch.setattr(cl, "get_platforms", no_platform)
    with pytest.raises(DeviceError, match="pip install pocl-binary-distribution"):
        cl_device.open_cl("CL")
    monkeypatch.setattr(cl, "get_platforms", lambda: [])
    with pytest.raises(DeviceError, match="no OpenCL device found.*pocl-binary-distribution"):
        cl_device.open_cl("CL")


def test_missing_ordinal_lists_devices(dev):
    from lazy_opencl.device import open_cl

    with pytest.raises(DeviceError, match=r"CL:99: this machine has \d+ OpenCL device\(s\): CL:0.*POCL_DEVICES"):
        open_cl("CL:99")


# --- allocator ---------------------------------------------------------------------------------------------------


def test_sub_buffers_aligned_and_not(dev):
    alloc = dev.allocator
    base = to_device(dev, np.arange(1024, dtype=np.float32))
    aligned = alloc._offset(base, 64 * 4, alloc.align)
    odd = alloc._offset(base, 8 * 4, 4)  # element 1: below the device's base address alignment
    np.testing.assert_array_equal(from_device(dev, aligned, np.empty(64, np.float32)), np.arange(64) + alloc.align // 4)
    np.testing.assert_array_equal(from_device(dev, odd, np.empty(8, np.float32)), np.arange(1, 9))
    dest = to_device(dev, np.zeros(8, np.float32))
    dev.allocator._transfer(dest, odd, 32, dev, dev)
    np.testing.assert_array_equal(from_device(dev, dest, np.empty(8, np.float32)), np.arange(1, 9))
    if alloc.align > 4:
        prg = load_program(dev, add_one())
        with pytest.raises(DeviceError, match="CL_DEVICE_MEM_BASE_ADDR_ALIGN"):
            prg(dest, odd, global_size=(8, 1, 1), local_size=(1, 1, 1))


# --- compiler and programs -----------------------------------------------------------------------------------------


def test_compile_error_shows_source_and_log(dev):
    src = "__kernel void broken(__global float* data0) { data0[0] = undefined_name; }\n"
    with pytest.raises(CompileError) as info:
        dev.compiler.compile(src)
    text = str(info.value)
    assert "undefined_name" in info.value.message and "broken" in text and "generated source" in text


def test_compiled_binary_is_cached_by_device_identity(dev):
    key = dev.compiler.cachekey
    assert dev.cl_device.name in key and dev.cl_device.driver_version in key and dev.compiler.options in key


def test_launch_over_the_limits_is_refused(dev):
    prg = load_program(dev, add_one())
    out, a = to_device(dev, np.zeros(8, np.float32)), to_device(dev, np.zeros(8, np.float32))
    wide = min(dev.limits.local_max[0], dev.limits.local_size_max)  # each dimension fits, the product does not
    with pytest.raises(DeviceError, match=f"at most {prg.wg_max}"):
        prg(out, a, global_size=(1, 1, 1), local_size=(wide, 2, 1))
    with pytest.raises(DeviceError, match=r"CL_DEVICE_MAX_WORK_ITEM_SIZES\[2\]"):
        prg(out, a, global_size=(1, 1, 1), local_size=(1, 1, dev.limits.local_max[2] + 1))


# --- queues ------------------------------------------------------------------------------------------------------


def test_queue_order_wait_and_timestamps(dev):
    prg = load_program(dev, add_one())
    a = to_device(dev, np.arange(8, dtype=np.float32))
    b, c = to_device(dev, np.zeros(8, np.float32)), to_device(dev, np.zeros(8, np.float32))
    first, start, end = dev.signal_t(0), dev.signal_t(0), dev.signal_t(0)
    dev.compute_queue_t().exec(prg, (b, a), (), (8, 1, 1), (1, 1, 1)).signal(first, 1).submit(dev)
    value = dev.next_value()
    queue = dev.compute_queue_t().wait(first, 1).timestamp(start).exec(prg, (c, b), (), (8, 1, 1), (1, 1, 1))
    queue.timestamp(end).signal(dev.timeline_signal, value).submit(dev)
    dev.timeline_signal.wait(value)
    assert first.value == 1 and dev.timeline_signal.value >= value
    np.testing.assert_array_equal(from_device(dev, c, np.empty(8, np.float32)), np.arange(8) + 2)
    assert 0 <= end.timestamp - start.timestamp < 10


def test_wait_on_a_value_nothing_sets_is_refused(dev):
    with pytest.raises(DeviceError, match="deadlock"):
        dev.signal_t(0).wait(1)


def test_graph_replay_runs_group_sum_with_new_buffers(dev):
    prg = load_program(dev, group_sum())
    data = [np.random.default_rng(i).random(64, dtype=np.float32) for i in range(2)]
    ins = [to_device(dev, x) for x in data]
    outs = [to_device(dev, np.zeros(4, np.float32)) for _ in data]
    launch = Exec(prg, (outs[0], ins[0]), (), (4, 1, 1), (16, 1, 1))
    graph = HCQGraph(dev, [launch])
    graph.replay({})
    graph.replay({0: replace(launch, bufs=(outs[1], ins[1]))})
    dev.synchronize()
    for out, x in zip(outs, data):
        np.testing.assert_allclose(from_device(dev, out, np.empty(4, np.float32)), x.reshape(4, 16).sum(1), rtol=1e-6)
    assert dtypes.float32 in dev.renderer.caps.dtypes
