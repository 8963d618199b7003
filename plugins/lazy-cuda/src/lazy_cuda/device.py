"""The CUDA device on the driver API (`cuda.bindings.driver`): one GPU's primary context with a compute and a copy
stream, device memory with pinned host staging, device-to-device and peer copies, programs loaded from cubins (launch
sizes checked against the kernel and the GPU), and `open_cuda`. Imported only when a device opens."""

from __future__ import annotations

import ctypes
import threading
import time
from collections import deque
from typing import Any, ClassVar, cast

import numpy as np
from cuda.bindings import driver

from lazy.device import BufferSpec, Compiled, DeviceError, LaunchLimits, LRUAllocator, ProgramSpec
from lazy_cuda import NO_DRIVER_FIX, required_driver
from lazy_cuda.compiler import NVRTCCompiler, nvrtc_version, supported_archs
from lazy_cuda.queues import CUDAComputeQueue, CUDACopyQueue, CUDAGraph, CUDASignal, signal_memory, wait_event
from lazy_cuda.renderer import CUDARenderer

SUCCESS = driver.CUresult.CUDA_SUCCESS
STAGING_BYTES = 16 << 20  # each of the two pinned buffers host copies are staged through (one fills, one moves)
# errors after which the context is unusable (a fault inside a kernel): every later call fails with the same error
STICKY = frozenset({driver.CUresult.CUDA_ERROR_ILLEGAL_ADDRESS, driver.CUresult.CUDA_ERROR_LAUNCH_FAILED,
                    driver.CUresult.CUDA_ERROR_MISALIGNED_ADDRESS, driver.CUresult.CUDA_ERROR_ILLEGAL_INSTRUCTION,
                    driver.CUresult.CUDA_ERROR_HARDWARE_STACK_ERROR, driver.CUresult.CUDA_ERROR_INVALID_PC,
                    driver.CUresult.CUDA_ERROR_ASSERT, driver.CUresult.CUDA_ERROR_LAUNCH_TIMEOUT})  # fmt: skip


def error_text(err: Any) -> str:
    """`CUDA_ERROR_OUT_OF_MEMORY (out of memory)` for a CUresult."""
    _, name = driver.cuGetErrorName(err)
    _, text = driver.cuGetErrorString(err)
    decode = lambda b, default: b.decode(errors="replace") if isinstance(b, bytes) else default  # noqa: E731
    return f"{decode(name, str(err))} ({decode(text, 'no description')})"


def cu(what: str, result: tuple[Any, ...]) -> Any:
    """The values a driver call returned after its CUresult (None, one value or a tuple), or a DeviceError."""
    err, *values = result
    if err != SUCCESS:
        raise DeviceError(f"CUDA: {what} failed: {error_text(err)}")
    return None if not values else values[0] if len(values) == 1 else tuple(values)


def host_address(mv: memoryview) -> int:
    """The address of a contiguous host buffer, read-only ones included (ctypes' from_buffer wants a writable one)."""
    return int(np.frombuffer(mv, dtype=np.uint8).ctypes.data) if mv.nbytes else 0


# --------------------------------------------------------------------------------------------------------------------
# finding devices


def init_driver() -> None:
    """cuInit, or a DeviceError saying what is missing (the same words as the probe)."""
    try:
        err, = driver.cuInit(0)  # fmt: skip
    except RuntimeError as e:  # cuda.pathfinder's DynamicLibNotFoundError: no libcuda
        raise DeviceError(f"CUDA: no NVIDIA driver ({e}): {NO_DRIVER_FIX}") from None
    if err == driver.CUresult.CUDA_ERROR_NO_DEVICE:
        raise DeviceError(f"CUDA: the NVIDIA driver finds no CUDA device ({error_text(err)}); check nvidia-smi and "
                          "CUDA_VISIBLE_DEVICES")  # fmt: skip
    cu("cuInit", (err,))


ATTR = driver.CUdevice_attribute


def attribute(cu_device: Any, which: Any) -> int:
    """A `CUdevice_attribute` of the GPU."""
    return int(cu(f"cuDeviceGetAttribute({which.name})", driver.cuDeviceGetAttribute(which, cu_device)))


def device_name(cu_device: Any) -> str:
    raw = cu("cuDeviceGetName", driver.cuDeviceGetName(256, cu_device))
    return raw.split(b"\0", 1)[0].decode(errors="replace").strip()


def check_driver_version() -> None:
    """The driver must run cubins from this NVRTC (same major CUDA version or newer)."""
    have = int(cu("cuDriverGetVersion", driver.cuDriverGetVersion()))
    need = required_driver(nvrtc_version()[0])
    if have < need:
        nvrtc = ".".join(map(str, nvrtc_version()))
        raise DeviceError(f"CUDA: the NVIDIA driver supports CUDA {have // 1000}.{have % 1000 // 10}, older than the "
                          f"CUDA {need // 1000}.0 that cubins from NVRTC {nvrtc} need: upgrade the driver, or install "
                          "the cuda-bindings and nvidia-cuda-nvrtc release matching it")  # fmt: skip


# --------------------------------------------------------------------------------------------------------------------
# memory


class CUDAAllocator(LRUAllocator):
    """Device memory from cuMemAlloc (opaques are device addresses, ints: a view is base + offset), pinned host memory
    for `BufferSpec(host=True)`. Host copies go through two pinned staging buffers in turns, so copying one chunk
    into pinned memory overlaps the DMA of the last; copies between buffers stay on the GPU (peer copies between two
    GPUs). Out of memory: the LRU cache is flushed and the allocation tried once more (`LRUAllocator.alloc`); a second
    failure names the size asked for and the free memory. DLPack: device addresses are kDLCUDA pointers, handed out
    and taken in as they are ("address", "wrap")."""

    features = frozenset({"offset", "transfer", "address", "wrap"})

    def __init__(self, dev: CUDADevice):
        super().__init__()
        self.dev = dev
        self.staging: list[tuple[int, Any]] = []  # (pinned address, event of its last DMA), made on first use

    def _alloc(self, size: int, spec: BufferSpec) -> int:
        self.dev.make_current()
        if spec.host:
            flags = driver.CU_MEMHOSTALLOC_PORTABLE
            err, ptr = driver.cuMemHostAlloc(max(size, 1), flags)
        else:
            err, ptr = driver.cuMemAlloc(max(size, 1))  # cuMemAlloc(0) is an error: an empty buffer has one byte
        if err == driver.CUresult.CUDA_ERROR_OUT_OF_MEMORY:
            free, total = cu("cuMemGetInfo", driver.cuMemGetInfo())
            where = "pinned host" if spec.host else "device"
            raise MemoryError(f"{self.dev.device}: out of {where} memory allocating {size} bytes ({free} of {total} "
                              "bytes of the GPU free after flushing lazy's buffer cache): free tensors you no longer "
                              "need, or work in smaller pieces")  # fmt: skip
        return int(cu("cuMemHostAlloc" if spec.host else "cuMemAlloc", (err, ptr)))

    def _free(self, opaque: int, size: int, spec: BufferSpec) -> None:
        self.dev.make_current()
        if spec.host:
            cu("cuMemFreeHost", driver.cuMemFreeHost(opaque))
        else:
            cu("cuMemFree", driver.cuMemFree(driver.CUdeviceptr(opaque)))

    def free_cache(self) -> None:
        self.dev.synchronize()  # a queued kernel may still use a cached buffer: give memory back only when idle
        super().free_cache()

    def _offset(self, buf: int, size: int, offset: int) -> int:
        return buf + offset

    def _address(self, opaque: int) -> int:
        return opaque

    def _wrap(self, address: int, size: int) -> int:
        # Another library's memory, never freed here. Its producer made the data ready on the stream lazy named (none:
        # the legacy default stream), which lazy's non-blocking streams do not wait for: wait for the context's work
        # (the primary context, shared with the runtime API that PyTorch and CuPy use) before any kernel reads it.
        self.dev.make_current()
        cu("cuCtxSynchronize", driver.cuCtxSynchronize())
        return address

    def _chunks(self, nbytes: int) -> list[tuple[int, int, int]]:
        """(offset, size, staging address) of each chunk of a host copy, the staging buffers taken in turns."""
        if not self.staging:
            self.dev.make_current()
            for _ in range(2):
                addr = int(cu("cuMemHostAlloc", driver.cuMemHostAlloc(STAGING_BYTES, driver.CU_MEMHOSTALLOC_PORTABLE)))
                self.staging.append((addr, cu("cuEventCreate", driver.cuEventCreate(
                    driver.CUevent_flags.CU_EVENT_DISABLE_TIMING))))  # fmt: skip
        return [(off, min(STAGING_BYTES, nbytes - off), self.staging[i % 2][0])
                for i, off in enumerate(range(0, nbytes, STAGING_BYTES))]  # fmt: skip

    def _copyin(self, dest: int, src: memoryview) -> None:
        if not src.nbytes:
            return
        dev, host = self.dev, host_address(src)
        with dev.submit_lock:  # the staging buffers are shared by every copy of this device
            dev.make_current()
            for i, (off, size, staging) in enumerate(self._chunks(src.nbytes)):
                event = self.staging[i % 2][1]
                wait_event(dev, event)  # the DMA that last read this staging buffer is done
                ctypes.memmove(staging, host + off, size)
                cu("cuMemcpyHtoDAsync", driver.cuMemcpyHtoDAsync(driver.CUdeviceptr(dest + off), staging, size,
                                                                  dev.copy_stream))  # fmt: skip
                cu("cuEventRecord", driver.cuEventRecord(event, dev.copy_stream))
            dev.wait_stream(dev.copy_stream)

    def _copyout(self, dest: memoryview, src: int) -> None:
        if not dest.nbytes:
            return
        dev, host = self.dev, host_address(dest)
        with dev.submit_lock:
            dev.make_current()
            chunks = self._chunks(dest.nbytes)
            for i, (off, size, staging) in enumerate(chunks):
                cu("cuMemcpyDtoHAsync", driver.cuMemcpyDtoHAsync(staging, driver.CUdeviceptr(src + off), size,
                                                                  dev.copy_stream))  # fmt: skip
                cu("cuEventRecord", driver.cuEventRecord(self.staging[i % 2][1], dev.copy_stream))
                if i > 0:  # the chunk before this one has landed while this one moves: copy it out
                    self._drain(host, chunks[i - 1], i - 1)
            self._drain(host, chunks[-1], len(chunks) - 1)

    def _drain(self, host: int, chunk: tuple[int, int, int], index: int) -> None:
        off, size, staging = chunk
        wait_event(self.dev, self.staging[index % 2][1])
        ctypes.memmove(host + off, staging, size)

    def enqueue_copy(self, dest: int, src: int, nbytes: int, stream: Any) -> None:
        """A copy between two buffers of this device, on `stream` (a queue's `Copy`)."""
        if nbytes:
            cu("cuMemcpyDtoDAsync", driver.cuMemcpyDtoDAsync(driver.CUdeviceptr(dest), driver.CUdeviceptr(src),
                                                              nbytes, stream))  # fmt: skip

    def _transfer(self, dest: int, src: int, size: int, src_dev: Any, dest_dev: Any) -> None:
        # core synchronized both devices; the copy runs on the destination's copy stream and is waited for
        with dest_dev.submit_lock:
            dest_dev.make_current()
            if src_dev is dest_dev:
                self.enqueue_copy(dest, src, size, dest_dev.copy_stream)
            elif size:  # between two GPUs: over NVLink/PCIe peer to peer where possible, else the driver stages it
                cu("cuMemcpyPeerAsync", driver.cuMemcpyPeerAsync(driver.CUdeviceptr(dest), dest_dev.context,
                                                                  driver.CUdeviceptr(src), src_dev.context, size,
                                                                  dest_dev.copy_stream))  # fmt: skip
            dest_dev.wait_stream(dest_dev.copy_stream)


# --------------------------------------------------------------------------------------------------------------------
# programs


class CUDAProgram:
    """A kernel loaded from a cubin. `launch` enqueues it on a stream after checking the launch against the kernel
    (threads per block its registers allow) and the GPU (block and grid dimensions); calling it runs it to the end.
    Parameters are 8 bytes each (device pointers, then the int64 variables), written into one reused array."""

    def __init__(self, dev: CUDADevice, name: str, lib: bytes, spec: ProgramSpec | None = None):
        self.dev, self.name = dev, name
        dev.make_current()
        err, self.module = driver.cuModuleLoadData(lib)
        if err in (driver.CUresult.CUDA_ERROR_NO_BINARY_FOR_GPU, driver.CUresult.CUDA_ERROR_INVALID_IMAGE,
                   driver.CUresult.CUDA_ERROR_UNSUPPORTED_PTX_VERSION):  # fmt: skip
            raise DeviceError(f"{dev.device}: kernel {name}'s cubin does not load on this {dev.gpu_name} "
                              f"({dev.arch}): {error_text(err)}; the driver may be older than the NVRTC that "
                              "compiled it, or the compile cache holds a cubin for another GPU (LAZY_CACHE_DIR=off "
                              "to check)")  # fmt: skip
        cu(f"cuModuleLoadData({name})", (err, self.module))
        self.function = cu(f"cuModuleGetFunction({name})", driver.cuModuleGetFunction(self.module, name.encode()))
        self.max_threads = int(cu("cuFuncGetAttribute", driver.cuFuncGetAttribute(
            driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, self.function)))  # fmt: skip
        # (grid, block) when they do not depend on variables: an eager launch then needs no queue (`launch_now`)
        self.static_dims = spec.launch_dims({}) if spec is not None and not spec.vars else None
        self.args: Any = None  # (c_uint64 * n) parameter values and (c_void_p * n) pointers to them, made on use
        self.pointers: Any = None
        self.checked: set[tuple[tuple[int, ...], tuple[int, ...]]] = set()

    def check(self, global_size: tuple[int, ...], local_size: tuple[int, ...]) -> None:
        """Refuse, naming the limit, a launch the GPU cannot run."""
        dev = self.dev
        LaunchLimits("block", dev.block_max, "CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_{xyz}", self.max_threads,
                     "CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: the kernel's registers", global_max=dev.grid_max,
                     global_max_name="CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_{xyz}").check(
            dev.device, self.name, global_size, local_size)  # fmt: skip
        self.checked.add((global_size, local_size))

    def launch(self, stream: Any, bufs: tuple[Any, ...], vals: tuple[int, ...], global_size: Any,
               local_size: Any) -> None:  # fmt: skip
        """Enqueue the kernel on `stream` (the caller holds the device's submit lock: the parameter array is shared)."""
        gs = (*(global_size or ()), 1, 1, 1)[:3]
        ls = (*(local_size or ()), 1, 1, 1)[:3]
        if (gs, ls) not in self.checked:
            self.check(gs, ls)
        if 0 in gs:
            return
        params = self.params(bufs, vals)
        err, = driver.cuLaunchKernel(self.function, *gs, *ls, 0, stream, params, 0)  # fmt: skip
        if err != SUCCESS:
            raise DeviceError(f"{self.dev.device}: kernel {self.name} failed to launch with {gs} blocks of {ls} "
                              f"threads: {error_text(err)}")  # fmt: skip
        self.dev.launched.append(self.name)

    def params(self, bufs: tuple[Any, ...], vals: tuple[int, ...]) -> int:
        """The address of the kernel's parameter pointer array, filled with `bufs` and `vals` (copied at launch)."""
        values = (*bufs, *(v & 0xFFFFFFFFFFFFFFFF for v in vals))  # int64 parameters, two's complement
        if self.args is None or len(self.args) != len(values):
            self.args = (ctypes.c_uint64 * len(values))()
            base = ctypes.addressof(self.args)
            self.pointers = (ctypes.c_void_p * len(values))(*(base + 8 * i for i in range(len(values))))
        self.args[:] = values
        return ctypes.addressof(self.pointers) if values else 0

    def __call__(self, *bufs: Any, global_size: tuple[int, ...] | None = None,
                 local_size: tuple[int, ...] | None = None, vals: tuple[int, ...] = (),
                 wait: bool = False) -> float | None:  # fmt: skip
        dev = self.dev
        with dev.submit_lock:
            dev.make_current()
            start, end = dev.timing_event(), dev.timing_event()
            cu("cuEventRecord", driver.cuEventRecord(start, dev.compute_stream))
            self.launch(dev.compute_stream, bufs, vals, global_size, local_size)
            cu("cuEventRecord", driver.cuEventRecord(end, dev.compute_stream))
        try:
            wait_event(dev, end)
            return float(cu("cuEventElapsedTime", driver.cuEventElapsedTime(start, end))) * 1e-3 if wait else None
        finally:
            for event in (start, end):
                driver.cuEventDestroy(event)


# --------------------------------------------------------------------------------------------------------------------
# the device


class CUDADevice(Compiled):
    """One GPU: its primary context (shared with any other library in the process that uses the runtime API), a
    compute stream and a copy stream (so copies overlap kernels), neither synchronizing with the legacy default
    stream."""

    allocator: CUDAAllocator
    graph_t: ClassVar[type | None] = CUDAGraph
    _current = threading.local()  # the context current on each thread, to skip cuCtxSetCurrent when it already is

    def __init__(self, device: str, cu_device: Any, arch: str):
        self.cu_device, self.arch, self.gpu_name = cu_device, arch, device_name(cu_device)
        self.context = cu("cuDevicePrimaryCtxRetain", driver.cuDevicePrimaryCtxRetain(cu_device))
        self.make_current()
        flags = driver.CUstream_flags.CU_STREAM_NON_BLOCKING
        self.compute_stream = cu("cuStreamCreate", driver.cuStreamCreate(flags))
        self.copy_stream = cu("cuStreamCreate", driver.cuStreamCreate(flags))
        block = (ATTR.CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X, ATTR.CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y,
                 ATTR.CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z)  # fmt: skip
        grid = (ATTR.CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X, ATTR.CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y,
                ATTR.CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z)  # fmt: skip
        self.block_max = tuple(attribute(cu_device, which) for which in block)
        self.grid_max = tuple(attribute(cu_device, which) for which in grid)
        # stream memory operations (cuStreamWriteValue64 / WaitValue64) carry the signals; where the driver has none
        # (Windows WDDM), signals ride on events
        self.stream_memops = attribute(cu_device, ATTR.CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS) != 0
        self.launched: deque[str] = deque(maxlen=8)  # the last kernels launched: named when a fault is found
        signal_memory.ensure(self)
        self.epoch_event, self.epoch_host = self.measure_epoch()
        super().__init__(device, CUDAAllocator(self), CUDARenderer(arch), NVRTCCompiler(arch), self.load_program,
                         signal_t=CUDASignal, compute_queue_t=CUDAComputeQueue, copy_queue_t=CUDACopyQueue)  # fmt: skip
        open_devices.append(self)

    def make_current(self) -> None:
        """Make this GPU's context current on the calling thread (the driver keeps one per thread)."""
        if getattr(self._current, "context", None) is not self.context:
            cu("cuCtxSetCurrent", driver.cuCtxSetCurrent(self.context))
            self._current.context = self.context

    def load_program(self, name: str, lib: bytes, spec: ProgramSpec | None = None) -> CUDAProgram:
        """`Compiled.runtime`: a compiled kernel as a callable program."""
        return CUDAProgram(self, name, lib, spec)

    def launch_now(self, program: Any, bufs: tuple[Any, ...], vals: tuple[int, ...]) -> bool:
        """An eager launch goes on the compute stream at once, the timeline write after it: what the compute queue
        does with a one-kernel submission, without recording, submitting and dispatching its two commands (a third of
        a cached tiny op's host time on an H200's host). A launch whose grid depends on variables takes the queue. A
        launch the driver refuses raises here, as it does from the queue (its timeline value is never waited for)."""
        if (dims := getattr(program, "static_dims", None)) is None:
            return False
        with self.submit_lock:
            value = self.claim_timeline_value(self.next_value())
            self.make_current()
            program.launch(self.compute_stream, bufs, vals, dims[0], dims[1])
            cast("CUDASignal", self.timeline_signal).set_on(self, self.compute_stream, value)
            self.commit_timeline_value(value)
        return True

    def timing_event(self) -> Any:
        return cu("cuEventCreate", driver.cuEventCreate(driver.CUevent_flags.CU_EVENT_DEFAULT))

    def measure_epoch(self, tries: int = 5) -> tuple[Any, float]:
        """An event on the compute stream and the host perf_counter time it completed at, so event times convert to
        the host's clock (`lazy.hcq.Signal.timestamp`): the event ends between two host readings around it; of a few
        tries the narrowest window's midpoint is kept (off by at most half of it)."""
        best: tuple[float, Any, float] | None = None
        for _ in range(tries):
            event = self.timing_event()
            before = time.perf_counter()
            cu("cuEventRecord", driver.cuEventRecord(event, self.compute_stream))
            cu("cuEventSynchronize", driver.cuEventSynchronize(event))
            after = time.perf_counter()
            if best is None or after - before < best[0]:
                if best is not None:
                    driver.cuEventDestroy(best[1])
                best = (after - before, event, (before + after) / 2)
            else:
                driver.cuEventDestroy(event)
        assert best is not None
        return best[1], best[2]

    def event_time(self, event: Any) -> float:
        """The host perf_counter time a completed timing event of this device was reached."""
        ms = float(cu("cuEventElapsedTime", driver.cuEventElapsedTime(self.epoch_event, event)))
        return self.epoch_host + ms * 1e-3

    def check_faults(self) -> None:
        """Raise when a kernel faulted on this GPU (a sticky error: the context cannot run anything after it)."""
        for stream in (self.compute_stream, self.copy_stream):
            err, = driver.cuStreamQuery(stream)  # fmt: skip
            if err not in (SUCCESS, driver.CUresult.CUDA_ERROR_NOT_READY):
                kernels = ", ".join(self.launched) or "none"
                fatal = ("the CUDA context cannot be used after this: restart the process" if err in STICKY else
                         "the device may still be usable")  # fmt: skip
                raise DeviceError(f"{self.device}: the GPU reported {error_text(err)} for work submitted before "
                                  f"this point (the last kernels launched: {kernels}); {fatal}. To find the "
                                  "kernel, run with CUDA_LAUNCH_BLOCKING=1 (launches then wait)")  # fmt: skip

    def wait_stream(self, stream: Any) -> None:
        """Wait until `stream` has run everything enqueued on it (polling: Ctrl-C stays possible). An idle stream (as
        both are after a timeline wait, usually) is one query, not an event recorded, polled and destroyed."""
        err, = driver.cuStreamQuery(stream)  # fmt: skip
        if err == SUCCESS:
            return
        event = cu("cuEventCreate", driver.cuEventCreate(driver.CUevent_flags.CU_EVENT_DISABLE_TIMING))
        try:
            cu("cuEventRecord", driver.cuEventRecord(event, stream))
            wait_event(self, event)
        finally:
            driver.cuEventDestroy(event)

    def synchronize(self) -> None:
        super().synchronize()
        self.make_current()
        for stream in (self.compute_stream, self.copy_stream):  # also work no timeline value covers
            self.wait_stream(stream)
        self.launched.clear()

    def close(self) -> None:
        super().close()
        self.make_current()
        for addr, event in self.allocator.staging:
            driver.cuEventDestroy(event)
            driver.cuMemFreeHost(addr)
        self.allocator.staging = []
        for stream in (self.compute_stream, self.copy_stream):
            driver.cuStreamDestroy(stream)
        driver.cuEventDestroy(self.epoch_event)
        if self in open_devices:
            open_devices.remove(self)
        driver.cuDevicePrimaryCtxRelease(self.cu_device)
        self._current.context = None


open_devices: list[CUDADevice] = []  # the CUDA devices open in this process: a signal wait checks them for faults


def open_cuda(name: str = "CUDA") -> CUDADevice:
    """`CUDA` is the GPU of ordinal 0 (in CUDA_VISIBLE_DEVICES order), `CUDA:n` the n-th; compiled for its own sm_XY."""
    ordinal = int(name.split(":")[1]) if ":" in name else 0
    init_driver()
    count = int(cu("cuDeviceGetCount", driver.cuDeviceGetCount()))
    if count == 0:
        raise DeviceError(f"{name}: the NVIDIA driver finds no CUDA device; check nvidia-smi and CUDA_VISIBLE_DEVICES")
    if ordinal >= count:
        gpus = [device_name(cu("cuDeviceGet", driver.cuDeviceGet(i))) for i in range(count)]
        found = ", ".join(f"CUDA:{i} ({gpu})" for i, gpu in enumerate(gpus))
        raise DeviceError(f"{name}: there are only {count} CUDA devices here: {found}")
    cu_device = cu("cuDeviceGet", driver.cuDeviceGet(ordinal))
    major = attribute(cu_device, ATTR.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)
    minor = attribute(cu_device, ATTR.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)
    if major * 10 + minor not in (archs := supported_archs()):
        nvrtc, known = ".".join(map(str, nvrtc_version())), ", ".join(f"sm_{a}" for a in archs)
        raise DeviceError(f"{name}: {device_name(cu_device)} is sm_{major}{minor}, which this NVRTC {nvrtc} does not "
                          f"compile for (it supports {known}): install an NVRTC release that supports it")  # fmt: skip
    check_driver_version()
    return CUDADevice(name, cu_device, f"sm_{major}{minor}")
