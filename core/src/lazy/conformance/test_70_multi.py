"""Layer multi: two devices of the plugin's kind (`NAME` and `NAME:1`), when the plugin can open two: the copy paths a
ring allreduce takes between them (both ways; 0, 1, odd and large sizes; views at offsets; copies while kernels run;
a copy after work queued behind a signal). Skipped, with the plugin's reason, where a second device cannot be opened."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from lazy.conformance import kernels
from lazy.conformance.support import buffer_from, compile_kernel, empty_buffer
from lazy.device import Buffer, DeviceError
from lazy.dtype import dtypes
from lazy.engine.runners import BufferCopy
from lazy.multi import MultiLazyBuffer
from lazy.tensor import Tensor

SIZES = [0, 1, 7, (1 << 20) + 3]  # elements: empty, one, odd, large (4 MiB of float32, past any inline-copy limit)


@pytest.fixture(scope="module")
def devices(device_name: str) -> tuple[str, str]:
    """(the device under test, a second device of its kind), or a skip saying why there is no second one."""
    from lazy.plugins import Device

    canon = Device.canonicalize(device_name)
    kind = canon.partition(":")[0]
    if Device.specs()[kind].instance_suffix != "ordinal":
        pytest.skip(f"{kind} instances are named by path, not by ordinal: there is no second {kind} device to pair")
    second = kind if canon == f"{kind}:1" else f"{kind}:1"
    try:
        Device[second]
    except DeviceError as e:
        pytest.skip(f"a second {kind} device cannot be opened: {e}")
    return canon, second


def both_ways(pair: tuple[str, str]) -> list[tuple[str, str]]:
    return [pair, (pair[1], pair[0])]


def copy(dest: Buffer, src: Buffer) -> None:
    """The copy runner a schedule's COPY item (so an allreduce's chunk) runs."""
    BufferCopy(dest.nbytes, dest.device, src.device)([dest, src], {})


@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.uint8], ids=str)
@pytest.mark.parametrize("size", SIZES)
def test_tensor_copies_both_ways(devices, size, dtype):
    data = (np.arange(size) % 251).astype(np.float32 if dtype == dtypes.float32 else np.uint8)
    for src, dest in both_ways(devices):
        there = Tensor(data, device=src).to(dest)
        assert there.device == dest
        np.testing.assert_array_equal(there.numpy(), data, err_msg=f"{src} -> {dest}, {size} elements")


# (source element offset, destination element offset, elements): aligned, odd, a large middle part, the last element
VIEWS = [(0, 0, 1), (3, 5, 7), (250, 100, 500), (999, 0, 1), (1, 998, 1)]


@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.uint8], ids=str)
def test_views_at_offsets(devices, dtype):
    """An allreduce copies chunks out of and into the middle of buffers: only the chunk's bytes change."""
    np_dtype = np.float32 if dtype == dtypes.float32 else np.uint8
    data = (np.arange(1000) % 199).astype(np_dtype)
    for src_name, dest_name in both_ways(devices):
        src = buffer_from(src_name, data, dtype)
        for src_at, dest_at, count in VIEWS:
            dest = empty_buffer(dest_name, 1000, dtype, fill=200)
            want = np.full(1000, 200, np_dtype)
            want[dest_at : dest_at + count] = data[src_at : src_at + count]
            size = dtype.itemsize
            copy(dest.view(count, dtype, dest_at * size), src.view(count, dtype, src_at * size))
            np.testing.assert_array_equal(dest.numpy(), want, err_msg=f"{src_name}[{src_at}:+{count}] -> "
                                          f"{dest_name}[{dest_at}:+{count}]")  # fmt: skip


@pytest.mark.requires("kernels")
def test_ring_allreduce_by_hand(devices):
    """Reduce-scatter then all-gather over the two devices, uneven chunks, every step a kernel or a copy."""
    first, second = devices
    a_np, b_np = np.arange(1001, dtype=np.float32), np.arange(1001, dtype=np.float32)[::-1] * 0.5
    parts = {first: Tensor(a_np, device=first), second: Tensor(b_np, device=second)}
    bounds = [(0, 501), (501, 1001)]  # chunk k is reduced on device k
    owner = [first, second]
    reduced = []
    for k, (lo, hi) in enumerate(bounds):
        here, other = owner[k], owner[1 - k]
        reduced.append((parts[here][lo:hi] + parts[other][lo:hi].to(here)).realize())
    for dev in (first, second):
        gathered = [chunk if chunk.device == dev else chunk.to(dev) for chunk in reduced]
        np.testing.assert_allclose(Tensor.cat(*gathered).numpy(), a_np + b_np, err_msg=f"allreduce result on {dev}")


@pytest.mark.requires("kernels")
def test_copies_while_kernels_run(devices):
    """Two threads copy both ways while kernels are queued on both devices; every value arrives."""
    first, second = devices
    data = np.arange(1024, dtype=np.float32)
    errors: list[BaseException] = []

    def shuttle(src: str, dest: str, scale: float) -> None:
        try:
            for step in range(4):
                result = (Tensor(data, device=src) * scale + step).realize()  # queued, not waited for
                np.testing.assert_array_equal(result.to(dest).numpy(), data * scale + step)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=shuttle, args=(s, d, k + 2.0)) for k, (s, d) in enumerate(both_ways(devices))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(thread.is_alive() for thread in threads), "copies between the two devices did not finish"
    if errors:
        raise errors[0]


def queue_gated_add_one(device, out: Buffer, src: Buffer) -> threading.Thread:
    """Submit `out = src + 1` on `device` behind a Wait on a signal the host sets 0.2 s later (from a thread: a
    simple-tier queue waits on the submitting thread, and its work counts as submitted only once it ran). Returns once
    it is submitted, with the thread that opens the gate."""
    program, spec = compile_kernel(device, kernels.add_one(device.renderer.caps))
    gs, ls = (tuple(s) if s else None for s in (spec.global_size, spec.local_size))
    gate = device.signal_t(0)
    queue = device.compute_queue_t().wait(gate, 1).exec(program, (out.opaque, src.opaque), (), gs, ls)
    queue.signal(device.timeline_signal, device.next_value())
    submitter = threading.Thread(target=queue.submit, args=(device,), name="conformance-submitter", daemon=True)
    submitter.start()

    def open_gate() -> None:
        time.sleep(0.2)  # long enough that a copy ignoring the queued kernel reads or writes before it runs
        gate.value = 1

    opener = threading.Thread(target=open_gate, name="conformance-gate", daemon=True)
    opener.start()
    submitter.join(timeout=60)
    assert not submitter.is_alive(), f"{device.device}: submitting a queue held by a Wait did not return"
    return opener


@pytest.mark.requires("kernels")
def test_copy_waits_for_work_queued_on_either_device(devices):
    """A copy reads its source after the kernels queued there (still held by a signal) and overwrites its destination
    after the kernels queued there that read it: what lets an allreduce chain kernels and copies without a sync."""
    from lazy.plugins import Device

    n = kernels.HCQ_N
    for src_name, dest_name in both_ways(devices):
        # the source: a kernel writes what is copied
        src_dev = Device[src_name]
        out, a = empty_buffer(src_name, n, dtypes.float32), buffer_from(src_name, np.arange(n, dtype=np.float32),
                                                                        dtypes.float32)  # fmt: skip
        opener = queue_gated_add_one(src_dev, out, a)
        dest = empty_buffer(dest_name, n, dtypes.float32)
        copy(dest, out)
        np.testing.assert_array_equal(dest.numpy(), np.arange(n) + 1, err_msg=f"{src_name} -> {dest_name}: the copy "
                                      "read its source before the kernel queued there wrote it")  # fmt: skip
        # the destination: a kernel reads what the copy overwrites
        dest_dev = Device[dest_name]
        read_out = empty_buffer(dest_name, n, dtypes.float32)
        opener2 = queue_gated_add_one(dest_dev, read_out, dest)
        copy(dest, buffer_from(src_name, np.full(n, -5.0, np.float32), dtypes.float32))
        overwrote = (
            f"{src_name} -> {dest_name}: the copy overwrote its destination before a kernel queued there read it"
        )
        np.testing.assert_array_equal(read_out.numpy(), np.arange(n) + 2, err_msg=overwrote)
        np.testing.assert_array_equal(dest.numpy(), np.full(n, -5.0))
        for thread in (opener, opener2):
            thread.join(timeout=60)


@pytest.mark.requires("kernels")
def test_allreduce_of_a_sharded_sum(devices):
    """The sum over the sharded axis (an allreduce: peer reads where the devices read each other's memory in place,
    `lazy.device.peers`, else a ring of copies) leaves the whole sum, bit for bit the same, on both devices."""
    data = (np.arange(2 * 3001, dtype=np.float32).reshape(2, 3001) % 97) * 0.25
    held = Tensor(data).shard(devices, axis=0)
    total = held.sum(0)
    multi = total.realize().lazydata
    assert isinstance(multi, MultiLazyBuffer) and multi.axis is None, "a sum over the sharded axis is replicated"
    replicas = [lb.base.buffer for lb in multi.lbs]
    values = [np.frombuffer(bytes(buf.as_buffer(allow_zero_copy=False)), np.float32) for buf in replicas]
    for device, value in zip(devices, values):
        np.testing.assert_allclose(value, data.sum(0), rtol=1e-6, err_msg=f"allreduce result on {device}")
    np.testing.assert_array_equal(values[0], values[1], err_msg="the replicas differ")


@pytest.mark.requires("kernels")
def test_peer_read_waits_for_work_queued_on_the_source(devices):
    """Where the devices are peers, a peer read lends the source's memory only after the kernels queued on the source
    (here held back by a signal) wrote it, and a kernel on the reader then reads those values in place."""
    from lazy.device import peers
    from lazy.engine.runners import PeerRead, settle_peer_reads
    from lazy.plugins import Device

    n = kernels.HCQ_N
    for src_name, dest_name in both_ways(devices):
        if not peers(dest_name, src_name):
            pytest.skip(f"{dest_name} does not read {src_name}'s memory in place (not peers: the allreduce copies)")
        src_dev, dest_dev = Device[src_name], Device[dest_name]
        out = empty_buffer(src_name, n, dtypes.float32)
        opener = queue_gated_add_one(src_dev, out, buffer_from(src_name, np.arange(n, dtype=np.float32),
                                                               dtypes.float32))  # fmt: skip
        lent = Buffer(dest_name, n, dtypes.float32)
        PeerRead(lent.nbytes, dest_name, src_name)([lent, out], {})
        read_out = empty_buffer(dest_name, n, dtypes.float32)
        program, spec = compile_kernel(dest_dev, kernels.add_one(dest_dev.renderer.caps))
        gs, ls = (tuple(s) if s else None for s in (spec.global_size, spec.local_size))
        queue = dest_dev.compute_queue_t().exec(program, (read_out.opaque, lent.opaque), (), gs, ls)
        queue.signal(dest_dev.timeline_signal, dest_dev.next_value()).submit(dest_dev)
        settle_peer_reads()
        np.testing.assert_array_equal(read_out.numpy(), np.arange(n) + 2, err_msg=f"{dest_name} read {src_name}'s "
                                      "memory in place before the kernel queued there wrote it")  # fmt: skip
        opener.join(timeout=60)
