"""The METAL device: `MTLBuffer`s in shared storage (a zero-copy host view, sub-buffers as offsets, blit copies),
programs as compute pipelines checked against the device's limits, and `open_metal`. macOS only: this module imports
pyobjc's Metal framework. Never run here (no Mac): written against pyobjc's names and the framework's documented
behaviour, and exercised with a stand-in framework by the plugin's tests."""

from __future__ import annotations

import platform
import struct
import threading
import time
from dataclasses import dataclass
from typing import Any

import Metal

from lazy.device import BufferSpec, Compiled, DeviceError, LaunchLimits, LRUAllocator, ProgramSpec
from lazy_metal.compiler import MetalCompiler
from lazy_metal.queues import CommandBatch, InFlight, MetalComputeQueue, MetalCopyQueue, MetalSignal
from lazy_metal.renderer import MetalRenderer, MetalTarget

MTL_STORAGE_SHARED = 0  # MTLResourceStorageModeShared: one memory the CPU and the GPU both address (Apple silicon)
MTL_GPU_FAMILY_APPLE7 = 1007  # MTLGPUFamilyApple7 (M1, A14) and later: simdgroup_matrix
MAX_COMMAND_BUFFERS = 1024  # command buffers in flight per queue before `commandBuffer` blocks


def target_of(mtl_device: Any) -> MetalTarget:
    """The renderer's view of one device: its threadgroup limits, threadgroup memory, tensor core and MSL version."""
    size = mtl_device.maxThreadsPerThreadgroup()
    local_max = (int(size.width), int(size.height), int(size.depth))
    macos = tuple(int(x) for x in (platform.mac_ver()[0] or "0").split(".")[:1])
    return MetalTarget(local_max=local_max, local_size_max=min(1024, max(local_max)),
                       shared_max=int(mtl_device.maxThreadgroupMemoryLength()), bfloat16=macos >= (14,),
                       simdgroup_matrix=bool(mtl_device.supportsFamily_(MTL_GPU_FAMILY_APPLE7)))  # fmt: skip


# --------------------------------------------------------------------------------------------------------------------
# memory


@dataclass(frozen=True)
class MetalBuffer:
    """An allocator opaque: an MTLBuffer and the bytes of it this buffer is (a sub-buffer names its base's)."""

    buf: Any
    offset: int
    nbytes: int


class MetalAllocator(LRUAllocator):
    """`MTLBuffer`s in shared storage: the host reads and writes their memory directly (`contents()`), so copies in
    and out are plain memory copies after the device is idle, and `as_buffer` is zero-copy. Copies between buffers of
    one device are blits; between two devices, memory copies between their host views."""

    features = frozenset({"as_buffer", "offset", "transfer"})

    def __init__(self, dev: MetalDevice):
        super().__init__()
        self.dev = dev

    def _alloc(self, size: int, spec: BufferSpec) -> MetalBuffer:
        buf = self.dev.mtl.newBufferWithLength_options_(max(size, 1), MTL_STORAGE_SHARED)  # no empty MTLBuffer
        if buf is None:
            used, most = int(self.dev.mtl.currentAllocatedSize()), int(self.dev.mtl.recommendedMaxWorkingSetSize())
            raise MemoryError(f"{self.dev.device}: out of GPU memory allocating {size} bytes ({used} bytes in use of "
                              f"the {most} recommended for this GPU): free tensors, or use smaller ones")  # fmt: skip
        return MetalBuffer(buf, 0, size)

    def _free(self, opaque: MetalBuffer, size: int, spec: BufferSpec) -> None:
        pass  # the MTLBuffer is released with its last reference (a sub-buffer keeps its base's)

    def _as_buffer(self, src: MetalBuffer) -> memoryview:
        return src.buf.contents().as_buffer(src.offset + src.nbytes)[src.offset :]

    def _offset(self, buf: MetalBuffer, size: int, offset: int) -> MetalBuffer:
        return MetalBuffer(buf.buf, buf.offset + offset, size)

    def _copyin(self, dest: MetalBuffer, src: memoryview) -> None:
        self._as_buffer(dest)[:] = src  # core synchronized the device first: no kernel reads it now

    def _copyout(self, dest: memoryview, src: MetalBuffer) -> None:
        dest[:] = self._as_buffer(src)

    def _transfer(self, dest: MetalBuffer, src: MetalBuffer, size: int, src_dev: Any, dest_dev: Any) -> None:
        # core synchronized both devices first
        if src_dev.mtl.registryID() != dest_dev.mtl.registryID():  # two GPUs: both memories are host-visible
            dest_dev.allocator._as_buffer(dest)[:size] = src_dev.allocator._as_buffer(src)[:size]
            return
        if size:
            with dest_dev.submit_lock:
                batch = CommandBatch(dest_dev)
                blit = batch.encoder_for("blit")
                blit.copyFromBuffer_sourceOffset_toBuffer_destinationOffset_size_(src.buf, src.offset, dest.buf,
                                                                                  dest.offset, size)  # fmt: skip
                committed = batch.commit()
            assert committed is not None
            committed.wait()


# --------------------------------------------------------------------------------------------------------------------
# programs


class MetalProgram:
    """A kernel as a compute pipeline. `encode` adds one launch to a compute encoder (global_size counts threadgroups,
    as `dispatchThreadgroups`), after checking the sizes against the pipeline; calling it runs it to the end."""

    def __init__(self, dev: MetalDevice, name: str, library: Any):
        self.dev, self.name = dev, name
        function = library.newFunctionWithName_(name)
        if function is None:
            raise DeviceError(f"{dev.device}: the compiled library has no kernel named {name}")
        pipeline, error = dev.mtl.newComputePipelineStateWithFunction_error_(function, None)
        if pipeline is None:
            why = str(error.localizedDescription()) if error is not None else "no reason given"
            raise DeviceError(f"{dev.device}: kernel {name} cannot be made into a compute pipeline: {why}")
        self.pipeline = pipeline
        self.max_threads = int(pipeline.maxTotalThreadsPerThreadgroup())  # fewer than 1024 for a heavy kernel
        self.threadgroup_memory = int(pipeline.staticThreadgroupMemoryLength())
        self.checked: set[tuple[tuple[int, ...], tuple[int, ...]]] = set()

    def check(self, global_size: tuple[int, ...], local_size: tuple[int, ...]) -> None:
        """Refuse, naming the limit, a launch the device cannot run."""
        limits = self.dev.target
        LaunchLimits("threadgroup", limits.local_max, "maxThreadsPerThreadgroup", self.max_threads,
                     "the pipeline's maxTotalThreadsPerThreadgroup", limits.shared_max, "maxThreadgroupMemoryLength"
                     ).check(self.dev.device, self.name, global_size, local_size, self.threadgroup_memory)  # fmt: skip
        self.checked.add((global_size, local_size))

    def encode(self, encoder: Any, bufs: tuple[MetalBuffer, ...], vals: tuple[int, ...],
               global_size: tuple[int, ...] | None, local_size: tuple[int, ...] | None) -> None:  # fmt: skip
        gs = (*(global_size or (1,)), 1, 1)[:3]
        ls = (*(local_size or (1,)), 1, 1)[:3]
        if (gs, ls) not in self.checked:
            self.check(gs, ls)
        encoder.setComputePipelineState_(self.pipeline)
        for i, buf in enumerate(bufs):  # argument i is [[buffer(i)]] (`MetalRenderer.render_kernel`)
            encoder.setBuffer_offset_atIndex_(buf.buf, buf.offset, i)
        for i, val in enumerate(vals, len(bufs)):  # int parameters are `constant long&`
            encoder.setBytes_length_atIndex_(struct.pack("<q", val), 8, i)
        if 0 not in gs:
            encoder.dispatchThreadgroups_threadsPerThreadgroup_(Metal.MTLSize(*gs), Metal.MTLSize(*ls))

    def __call__(self, *bufs: MetalBuffer, global_size: tuple[int, ...] | None = None,
                 local_size: tuple[int, ...] | None = None, vals: tuple[int, ...] = (),
                 wait: bool = False) -> float | None:  # fmt: skip
        with self.dev.submit_lock:
            batch = CommandBatch(self.dev)
            self.encode(batch.encoder_for("compute"), bufs, vals, global_size, local_size)
            batch.kernels.append(self.name)
            committed = batch.commit()
        assert committed is not None
        committed.wait()
        return float(committed.cb.GPUEndTime() - committed.cb.GPUStartTime()) if wait else None


# --------------------------------------------------------------------------------------------------------------------
# the device


class MetalDevice(Compiled):
    """One Metal GPU with one command queue: kernels, copies and signals run in the order they are committed."""

    allocator: MetalAllocator
    compiler: MetalCompiler

    def __init__(self, device: str, mtl_device: Any):
        self.mtl = mtl_device
        self.queue = mtl_device.newCommandQueueWithMaxCommandBufferCount_(MAX_COMMAND_BUFFERS)
        self.target = target_of(mtl_device)
        self.last_batch: InFlight | None = None  # the last command buffer committed to `queue`
        self.clock_offset = measure_clock_offset(self)
        super().__init__(device, MetalAllocator(self), MetalRenderer(self.target), MetalCompiler(mtl_device, device),
                         self.load_program, signal_t=MetalSignal, compute_queue_t=MetalComputeQueue,
                         copy_queue_t=MetalCopyQueue)  # fmt: skip

    def load_program(self, name: str, lib: bytes, spec: ProgramSpec | None = None) -> MetalProgram:
        """`Compiled.runtime`: `lib` is the kernel's MSL (`MetalCompiler`), whose library was built by the compile."""
        return MetalProgram(self, name, self.compiler.library(lib))

    def committed(self, batch: InFlight) -> None:
        """A command buffer was committed to the queue (called by `CommandBatch.commit`)."""
        self.last_batch = batch

    def synchronize(self) -> None:
        super().synchronize()
        if self.last_batch is not None:  # the queue's last command buffer: also work no timeline value covers
            self.last_batch.wait()


def measure_clock_offset(dev: MetalDevice, tries: int = 5) -> float:
    """Seconds to add to a command buffer's GPU times (host-clock seconds since boot) to get perf_counter seconds, so
    timestamps compare with the host's (`lazy.hcq.Signal.timestamp`). An empty command buffer ends between two host
    readings around it; of a few tries, the narrowest window gives the offset, its midpoint."""
    best: tuple[float, float] | None = None
    for _ in range(tries):
        before = time.perf_counter()
        cb = dev.queue.commandBuffer()
        cb.commit()
        cb.waitUntilCompleted()
        after = time.perf_counter()
        window, offset = after - before, (before + after) / 2 - float(cb.GPUEndTime())
        if best is None or window < best[0]:
            best = (window, offset)
    assert best is not None
    return best[1]


_open_lock = threading.Lock()


def open_metal(name: str = "METAL") -> MetalDevice:
    """`METAL` is the system's default GPU (first in MTLCopyAllDevices' order after it), `METAL:n` the n-th."""
    ordinal = int(name.split(":")[1]) if ":" in name else 0
    with _open_lock:
        default = Metal.MTLCreateSystemDefaultDevice()
        others = [
            d for d in Metal.MTLCopyAllDevices() or [] if default is None or d.registryID() != default.registryID()
        ]
        devices = ([default] if default is not None else []) + others
    if not devices:
        raise DeviceError(f"{name}: no Metal device found (a virtual machine without a GPU?): run on a Mac with a "
                          "Metal GPU")  # fmt: skip
    if ordinal >= len(devices):
        found = ", ".join(f"METAL:{i} ({d.name()})" for i, d in enumerate(devices))
        raise DeviceError(f"{name}: there are only {len(devices)} Metal devices here: {found}")
    return MetalDevice(name, devices[ordinal])
