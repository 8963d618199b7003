"""The DISK device on real files: allocation (creating, growing, refusing), copies, sub-buffers, the zero-copy view,
the plain-I/O fallback, scratch space, queues, kernels refused, and the entry point."""

from __future__ import annotations

import errno
import os
import pathlib
import signal
import subprocess
import sys

import numpy as np
import pytest

import lazy_disk
from lazy.device import Buffer, DeviceError
from lazy.dtype import dtypes
from lazy.engine.schedule import create_schedule
from lazy.helpers import ArgumentError
from lazy.plugins import Device
from lazy.tensor import Tensor
from lazy_disk.device import DiskAllocator, DiskDevice, open_disk


@pytest.fixture
def file(tmp_path: pathlib.Path) -> pathlib.Path:
    return tmp_path / "data.bin"


def buffer_on(device: str, values: np.ndarray) -> Buffer:
    return Buffer(device, values.size, dtypes.from_np(values.dtype)).allocate().copyin(memoryview(values).cast("B"))


# --- registration -----------------------------------------------------------------------------------------------------


def test_entry_point_registers_disk(file):
    assert "DISK" in Device.specs()
    assert Device.probe("DISK")[0]
    assert isinstance(Device[f"DISK:{file}"], DiskDevice)
    assert not Device.specs()["DISK"].default_ok, "DISK must never become the default device"
    assert lazy_disk.disk_versions()


def test_entry_module_imports_nothing_heavy():
    code = "import sys, lazy_disk; lazy_disk.lazy_devices(); print('lazy_disk.device' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


# --- allocation -------------------------------------------------------------------------------------------------------


def test_new_file_is_created_with_the_buffer_size(file):
    buf = buffer_on(f"DISK:{file}", np.arange(10, dtype=np.int32))
    assert file.stat().st_size == 40
    Device[f"DISK:{file}"].synchronize()
    assert np.array_equal(np.fromfile(file, dtype=np.int32), np.arange(10))
    assert np.array_equal(buf.numpy(), np.arange(10))


def test_tensor_empty_creates_the_file(file):
    Tensor.empty(3, 5, dtype=dtypes.float16, device=f"DISK:{file}").realize()
    assert file.stat().st_size == 3 * 5 * 2


def test_a_file_the_device_made_grows(file):
    dev = open_disk(f"DISK:{file}")
    dev.allocator.free(dev.allocator.alloc(10), 10)
    dev.allocator.free(dev.allocator.alloc(100), 100)
    assert file.stat().st_size == 100


def test_existing_file_too_small_is_refused_with_both_sizes(file):
    file.write_bytes(b"x" * 10)
    dev = open_disk(f"DISK:{file}")
    with pytest.raises(DeviceError, match=rf"{file}.* 10 bytes, too small for a buffer of 11 bytes"):
        dev.allocator.alloc(11)
    assert file.read_bytes() == b"x" * 10, "a refused allocation must not change the file"


def test_missing_directory_is_refused_naming_it(tmp_path):
    path = tmp_path / "no" / "such" / "file.bin"
    with pytest.raises(DeviceError, match=rf"{path.parent} does not exist"):
        Tensor.empty(4, dtype=dtypes.uint8, device=f"DISK:{path}").realize()


def test_a_directory_is_refused(tmp_path):
    with pytest.raises(DeviceError, match="not a regular file"):
        open_disk(f"DISK:{tmp_path}").allocator.alloc(1)


def _deny_writes(monkeypatch):
    """Permission checks do not apply to root, so fake what a read-only file (or directory) does to os.open."""
    real_open = os.open

    def fake_open(path, flags, *args):
        if flags & os.O_CREAT or (flags & (os.O_RDWR | os.O_WRONLY) and os.path.exists(path)):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
        return real_open(path, flags, *args)

    monkeypatch.setattr("lazy_disk.device.os.open", fake_open)


def test_read_only_file_reads_but_refuses_writes(file, monkeypatch):
    file.write_bytes(bytes(range(8)))
    _deny_writes(monkeypatch)
    dev = open_disk(f"DISK:{file}")
    opaque = dev.allocator.alloc(8)
    out = bytearray(8)
    dev.allocator._copyout(memoryview(out), opaque)
    assert bytes(out) == bytes(range(8))
    with pytest.raises(DeviceError, match=rf"cannot write to {file}: it is open read-only \(Permission denied\)"):
        dev.allocator._copyin(opaque, memoryview(b"\0" * 8))
    assert file.read_bytes() == bytes(range(8))


def test_unwritable_directory_is_refused(file, monkeypatch):
    _deny_writes(monkeypatch)
    with pytest.raises(DeviceError, match=rf"cannot create {file}: Permission denied"):
        open_disk(f"DISK:{file}").allocator.alloc(4)


def test_relative_path_is_resolved_when_opened(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    dev = open_disk("DISK:rel.bin")
    assert dev.path == str(tmp_path / "rel.bin")


# --- copies and views -------------------------------------------------------------------------------------------------


def test_every_buffer_of_a_file_starts_at_its_first_byte(file):
    a = buffer_on(f"DISK:{file}", np.arange(8, dtype=np.uint8))
    b = Buffer(f"DISK:{file}", 8, dtypes.uint8).allocate()
    assert np.array_equal(b.numpy(), np.arange(8)), "two buffers of one file are the same bytes"
    del a


def test_sub_buffers_and_zero_copy_view(file):
    base = buffer_on(f"DISK:{file}", np.arange(64, dtype=np.uint8))
    view = base.view(8, dtypes.uint8, 16).ensure_allocated()
    assert bytes(view.as_buffer()) == bytes(range(16, 24))
    with open(file, "r+b") as f:  # the host view is the file's pages: a write through the OS shows up in it
        f.seek(16)
        f.write(b"\xff")
        f.flush()
    assert view.as_buffer()[0] == 0xFF


def test_plain_reads_and_writes_without_mmap(file):
    dev = open_disk(f"DISK:{file}")
    allocator = DiskAllocator(dev, use_mmap=False)
    opaque = allocator.alloc(4096 + 7)
    data = np.random.default_rng(0).integers(0, 256, 4096 + 7, dtype=np.uint8)
    allocator._copyin(opaque, memoryview(data))
    sub = allocator._offset(opaque, 100, 4000)
    out = np.empty(100, np.uint8)
    allocator._copyout(memoryview(out), sub)
    assert np.array_equal(out, data[4000:4100])
    assert bytes(allocator._as_buffer(sub)) == data[4000:4100].tobytes()
    assert file.read_bytes() == data.tobytes()
    allocator.free(opaque, 4096 + 7)


def test_tensor_of_a_path_slices_and_bitcasts_without_kernels(file):
    values = np.arange(16, dtype=np.float32)
    file.write_bytes(b"head" + values.tobytes())
    t = Tensor(file)[4:].bitcast(dtypes.float32).reshape(4, 4)
    schedule = create_schedule([t.to("CPU").lazydata])
    assert [si.kind for si in schedule if si.kind in ("kernel", "copy")] == ["copy"], "one copy, no kernel"
    assert np.array_equal(t.to("CPU").numpy(), values.reshape(4, 4))


def test_copy_from_a_compute_device_and_back(file):
    t = Tensor(np.arange(12, dtype=np.int64), device="CPU").to(f"DISK:{file}").realize()
    assert np.array_equal(np.fromfile(file, dtype=np.int64), np.arange(12))
    assert np.array_equal(t.to("CPU").numpy(), np.arange(12))


def test_assign_writes_where_the_view_is_and_nowhere_else(file):
    """assign into a slice of a file's tensor writes those bytes (it used to copy the value into a new DISK buffer,
    which is the file's start, and then fail); a whole-tensor assign writes it all; a strided view is refused,
    leaving the file as it was."""
    np.arange(12, dtype=np.float32).tofile(file)
    t = Tensor.empty(3, 4, dtype=dtypes.float32, device=f"DISK:{file}")
    t[1].assign(Tensor([-1.0, -2.0, -3.0, -4.0], device="CPU"))
    t[2, 1:3].assign(Tensor([7, 8], device="CPU"))  # (an int value, cast)
    want = np.arange(12, dtype=np.float32)
    want[4:8], want[9:11] = [-1, -2, -3, -4], [7, 8]
    assert np.array_equal(np.fromfile(file, dtype=np.float32), want)
    with pytest.raises(ArgumentError, match="not one consecutive range"):
        t.T.assign(Tensor.zeros(4, 3))
    assert np.array_equal(np.fromfile(file, dtype=np.float32), want)
    t.assign(Tensor.full((3, 4), 2.0))
    assert np.array_equal(np.fromfile(file, dtype=np.float32), np.full(12, 2.0, np.float32))


def test_views_that_are_not_one_range_are_read_through_a_copy_of_the_buffer(file):
    """A transpose, a column or a padded view of a file's tensor: the file's buffer is copied and the view taken on
    the destination (it failed, telling the user to call the .to() they had called)."""
    values = np.arange(12, dtype=np.float32)
    values.tofile(file)
    t = Tensor.empty(3, 4, dtype=dtypes.float32, device=f"DISK:{file}")
    grid = values.reshape(3, 4)
    assert np.array_equal(t.T.to("CPU").numpy(), grid.T)
    assert np.array_equal(t[:, 1].to("CPU").numpy(), grid[:, 1])
    assert np.array_equal(t[::2, ::-1].to("CPU").numpy(), grid[::2, ::-1])
    assert np.array_equal(t.pad(((1, 0), None)).to("CPU").numpy(), np.pad(grid, ((1, 0), (0, 0))))


def test_kernels_are_refused_by_name(file):
    file.write_bytes(b"\0" * 16)
    with pytest.raises(DeviceError, match="copy-only device"):
        (Tensor(file) + 1).realize()


def test_dirty_maps_are_flushed_on_synchronize(file):
    dev = Device[f"DISK:{file}"]
    buf = buffer_on(f"DISK:{file}", np.ones(4, np.float32))
    assert dev.dirty
    dev.synchronize()
    assert not dev.dirty
    buf.deallocate()


# --- scratch space (bare DISK) ----------------------------------------------------------------------------------------


def test_bare_disk_gives_each_buffer_its_own_space():
    dev = open_disk("DISK")
    try:
        a, b = dev.allocator.alloc(100), dev.allocator.alloc(100)
        dev.allocator._copyin(a, memoryview(b"a" * 100))
        dev.allocator._copyin(b, memoryview(b"b" * 100))
        assert bytes(dev.allocator._as_buffer(a)) == b"a" * 100
        dev.allocator.free(a, 100)
        c = dev.allocator.alloc(100)
        assert c.mapping.offset == a.mapping.offset, "freed scratch space is used again"
        assert not os.path.exists(dev.scratch.path), "scratch space is an unlinked file"
    finally:
        dev.close()


# --- queues -----------------------------------------------------------------------------------------------------------


def test_copy_queue_signals_and_waits(file):
    dev = open_disk(f"DISK:{file}")
    src, dest = dev.allocator.alloc(64), dev.allocator.alloc(64)  # aliased: both are the file from byte 0
    dev.allocator._copyin(src, memoryview(bytes(range(64))))
    scratch = open_disk("DISK")
    try:
        other = scratch.allocator.alloc(64)
        signal = dev.signal_t(0)
        value = dev.next_value()
        dev.copy_queue_t().copy(other, src, 64).signal(signal, 1).wait(signal, 1).timestamp(signal).signal(
            dev.timeline_signal, value
        ).submit(scratch)
        dev.synchronize()
        assert bytes(scratch.allocator._as_buffer(other)) == bytes(range(64))
        assert signal.value == 1 and not dev.pending
    finally:
        scratch.close()
    del dest


def test_a_queue_with_a_kernel_is_refused_before_running(file):
    dev = open_disk(f"DISK:{file}")
    signal = dev.signal_t(0)
    with pytest.raises(DeviceError, match="copy-only"):
        dev.compute_queue_t().signal(signal, 1).exec(object(), ()).submit(dev)
    assert signal.value == 0
    with pytest.raises(DeviceError, match="copy-only"):
        dev.compiler.compile("")
    with pytest.raises(DeviceError, match="copy-only"):
        dev.renderer.render("k", [])


# --- files changed by another program ---------------------------------------------------------------------------------

TRUNCATED_WHILE_MAPPED = """
import os, pathlib, sys
import numpy as np
from lazy.device import DeviceError
from lazy.tensor import Tensor

path, other = map(pathlib.Path, sys.argv[1:3])
np.arange(1 << 16, dtype=np.uint8).tofile(path)  # 16 pages, so a cut leaves whole pages past the end
whole = Tensor(path).realize()  # (65536,) uint8, mapped
head, tail = whole[:100], whole[60000:]
buf = whole.lazydata.base.buffer
os.truncate(path, 4096)  # what another program rewriting the file does first
errors = []
for what, action in [
    ("to", lambda: tail.to("CPU").realize()),
    ("numpy", lambda: buf.numpy()),
    ("copyin", lambda: buf.copyin(bytes(1 << 16))),
]:
    try:
        action()
        errors.append(f"{what}: no error")
    except DeviceError as e:
        assert f"{path} changed after it was opened: it is 4096 bytes long now" in str(e), str(e)
        assert "at least 65536" in str(e), str(e)
assert not errors, errors
assert np.array_equal(head.to("CPU").numpy(), np.arange(100, dtype=np.uint8)), "what the file still holds reads"
np.arange(10, dtype=np.uint8).tofile(other)
assert np.array_equal(Tensor(other).to("CPU").numpy(), np.arange(10)), "other files still work"
print("survived")
"""


def test_a_file_truncated_while_mapped_raises_instead_of_killing_the_process(tmp_path):
    """Touching a mapped page past a file's end is SIGBUS: run in a child so a regression fails here, not pytest."""

    args = [str(tmp_path / "data.bin"), str(tmp_path / "other.bin")]
    proc = subprocess.run([sys.executable, "-c", TRUNCATED_WHILE_MAPPED, *args], capture_output=True, text=True)
    died = (
        " (killed by SIGBUS: a mapped page past the file's end was touched)"
        if proc.returncode == -signal.SIGBUS
        else ""
    )
    assert proc.returncode == 0 and "survived" in proc.stdout, f"exit {proc.returncode}{died}: {proc.stderr[-2000:]}"


def test_plain_io_refuses_a_truncated_file_too(file):
    """Without a map, a write would silently grow the file back and a read would come up short."""
    file.write_bytes(bytes(8192))
    dev = open_disk(f"DISK:{file}")
    allocator = DiskAllocator(dev, use_mmap=False)
    opaque = allocator.alloc(8192)
    os.truncate(file, 100)
    with pytest.raises(DeviceError, match=rf"{file} changed after it was opened: it is 100 bytes long now"):
        allocator._copyin(opaque, memoryview(bytes(8192)))
    with pytest.raises(DeviceError, match="at least 8192"):
        allocator._copyout(memoryview(bytearray(8192)), opaque)
    assert file.stat().st_size == 100, "a refused write must not grow the file"
    allocator.free(opaque, 8192)
