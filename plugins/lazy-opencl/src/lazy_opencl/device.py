"""The CL device: OpenCL buffers (with sub-buffers and device-to-device copies), the OpenCL C compiler (binaries
cached through core's cache), loaded programs that check launch sizes against the device, and `open_cl`."""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyopencl as cl

from lazy.device import (
    BufferSpec,
    Compiled,
    CompileError,
    Compiler,
    DeviceError,
    LaunchLimits,
    LRUAllocator,
    ProgramSpec,
)
from lazy.helpers import DEBUG
from lazy_opencl import NO_PLATFORM_FIX, cannot_compile
from lazy_opencl.queues import CLComputeQueue, CLCopyQueue, CLSignal, wait_event
from lazy_opencl.renderer import DeviceLimits, OpenCLRenderer

# --------------------------------------------------------------------------------------------------------------------
# finding devices


def all_devices() -> list[Any]:
    """Every OpenCL device of every platform, GPUs and accelerators first: `CL` is the first, `CL:1` the second."""
    try:
        platforms = cl.get_platforms()
    except cl.Error as e:  # pyopencl raises (PLATFORM_NOT_FOUND_KHR) when the ICD loader finds no driver
        raise DeviceError(f"CL: no OpenCL platform found ({e}): {NO_PLATFORM_FIX}") from None
    devices = [d for p in platforms for d in p.get_devices()]
    return sorted(devices, key=lambda d: 0 if d.type & (cl.device_type.GPU | cl.device_type.ACCELERATOR) else 1)


CANARY = "__kernel void canary(__global float* out) { out[get_global_id(0)] = 1.0f; }"


def build_failure(cl_device: Any) -> str | None:
    """None when `cl_device` builds a one-line kernel, else its build log (the probe's compile check)."""
    program = cl._cl._Program(cl.Context([cl_device]), CANARY)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            program.build(b"", [cl_device])
    except cl.Error as e:
        try:
            log = program.get_build_info(cl_device, cl.program_build_info.LOG)
        except cl.Error:
            log = ""
        return str(log).strip() or str(e)  # (the build log: the exception's text repeats it, with an address)
    return None


# LLVM's names of the x86 CPUs with AVX-512, as PoCL ends its device's HSTR with the one it compiles kernels for
AVX512_LLVM_CPUS = ("knl", "knm", "skx", "skylake-avx512", "cascadelake", "cooperlake", "cannonlake", "icelake-client",
                    "icelake-server", "tigerlake", "rocketlake", "sapphirerapids", "emeraldrapids", "graniterapids",
                    "graniterapids-d", "diamondrapids", "znver4", "znver5", "x86-64-v4")  # fmt: skip


def float_vector_width(cl_device: Any) -> int:
    """The float lanes to render vectors with: what the device prefers, except that a PoCL CPU device reports its
    host's lanes (16 with AVX-512) while compiling for the CPU its LLVM knows. An LLVM older than the CPU (PoCL 3.0
    with LLVM 14 on AMD Zen 4 compiles for znver3) has no AVX-512 there: float16 code then computes wrong sums and
    can abort the process in LLVM's instruction selection. Such a device gets 8 lanes (AVX2)."""
    width = int(cl_device.preferred_vector_width_float)
    version = str(cl_device.version)
    if width > 8 and cl_device.type & cl.device_type.CPU and "HSTR: pthread-x86_64" in version:
        if not version.rstrip().endswith(tuple(f"-{cpu}" for cpu in AVX512_LLVM_CPUS)):
            if DEBUG >= 1:
                print(f"CL: {cl_device.name} reports {width} float lanes but PoCL compiles for "
                      f"{version.rsplit('-', 1)[-1]}, without AVX-512: rendering 8")  # fmt: skip
            return 8
    return width


def device_limits(cl_device: Any) -> DeviceLimits:
    extensions = cl_device.extensions.split()
    sizes = (list(cl_device.max_work_item_sizes) + [1, 1, 1])[:3]
    return DeviceLimits(local_max=(sizes[0], sizes[1], sizes[2]), local_size_max=cl_device.max_work_group_size,
                        shared_max=cl_device.local_mem_size, fp16="cl_khr_fp16" in extensions,
                        fp64="cl_khr_fp64" in extensions or bool(cl_device.double_fp_config),
                        float_vector_width=float_vector_width(cl_device),
                        cpu=bool(cl_device.type & cl.device_type.CPU))  # fmt: skip


# --------------------------------------------------------------------------------------------------------------------
# memory


@dataclass(frozen=True)
class CLView:
    """A sub-buffer at an offset OpenCL cannot make a sub-buffer at (not a multiple of CL_DEVICE_MEM_BASE_ADDR_ALIGN):
    copies reach it through offsets; a kernel cannot take it as an argument."""

    base: Any  # cl.Buffer
    offset: int
    nbytes: int


def region(opaque: Any) -> tuple[Any, int]:
    """(cl.Buffer, byte offset) of an allocator opaque."""
    return (opaque.base, opaque.offset) if isinstance(opaque, CLView) else (opaque, 0)


class CLAllocator(LRUAllocator):
    """`cl.Buffer`s in the device's context. Host copies go straight between numpy memory and the buffer (no staging
    buffer); copies between two buffers of one context stay on the device."""

    features = frozenset({"offset", "transfer"})

    def __init__(self, dev: CLDevice):
        super().__init__()
        self.dev = dev
        self.align = max(1, dev.cl_device.mem_base_addr_align // 8)  # the device reports bits

    def _alloc(self, size: int, spec: BufferSpec) -> Any:
        try:  # OpenCL has no empty buffers: a 0-byte Buffer holds one byte nobody reads
            return cl.Buffer(self.dev.context, cl.mem_flags.READ_WRITE, max(size, 1))
        except cl.MemoryError as e:
            raise MemoryError(f"{self.dev.device}: out of device memory allocating {size} bytes ({e})") from None

    def _free(self, opaque: Any, size: int, spec: BufferSpec) -> None:
        if not isinstance(opaque, CLView):
            opaque.release()

    def _offset(self, buf: Any, size: int, offset: int) -> Any:
        base, base_offset = region(buf)
        offset += base_offset
        if offset % self.align == 0 and size > 0 and not isinstance(buf, CLView):
            return buf.get_sub_region(offset, size)
        return CLView(base, offset, size)

    def _copyin(self, dest: Any, src: memoryview) -> None:
        if src.nbytes:
            buf, offset = region(dest)
            host = np.frombuffer(src, dtype=np.uint8)
            cl.enqueue_copy(self.dev.queue, buf, host, dst_offset=offset, is_blocking=True)

    def _copyout(self, dest: memoryview, src: Any) -> None:
        if dest.nbytes:
            buf, offset = region(src)
            host = np.frombuffer(dest, dtype=np.uint8)
            cl.enqueue_copy(self.dev.queue, host, buf, src_offset=offset, is_blocking=True)

    def enqueue_copy(self, dest: Any, src: Any, nbytes: int, wait_for: list[Any] | None = None) -> Any:
        (dbuf, doff), (sbuf, soff) = region(dest), region(src)
        if nbytes == 0:
            return self.dev.marker(wait_for or [])
        return cl.enqueue_copy(self.dev.queue, dbuf, sbuf, byte_count=nbytes, src_offset=soff, dst_offset=doff,
                               wait_for=wait_for)  # fmt: skip

    def _transfer(self, dest: Any, src: Any, size: int, src_dev: Any, dest_dev: Any) -> None:
        if src_dev.context.int_ptr == dest_dev.context.int_ptr:
            with dest_dev.submit_lock:  # enqueue and name it `last_event` in one step, as a submission does
                event = dest_dev.last_event = dest_dev.allocator.enqueue_copy(dest, src, size, None)
            wait_event(event)
            return
        if size == 0:
            return
        # two contexts (each device has its own, PoCL's CL:0 and CL:1 too): through the host, one copy. The source is
        # mapped (PoCL's CPU devices map without copying) and written from there into the destination.
        sbuf, soffset = region(src)  # the map is ordered after the work queued on the in-order queue before it
        mapping: Any = cl.enqueue_map_buffer(src_dev.queue, sbuf, cl.map_flags.READ, soffset, (size,),
                                             np.dtype(np.uint8), is_blocking=True)  # fmt: skip
        mapped = mapping[0]
        try:
            dest_dev.allocator._copyin(dest, memoryview(mapped))
        finally:
            mapped.base.release()  # unmaps (pyopencl's MemoryMap)


# --------------------------------------------------------------------------------------------------------------------
# compiling and running


class CLCompiler(Compiler):
    """OpenCL C -> the device's program binary. Cached on disk by platform, device, driver version and options."""

    def __init__(self, dev: CLDevice):
        self.dev = dev
        options = ["-cl-std=CL1.2"]
        if dev.cl_device.single_fp_config & cl.device_fp_config.CORRECTLY_ROUNDED_DIVIDE_SQRT:
            options.append("-cl-fp32-correctly-rounded-divide-sqrt")  # 1/x and sqrt exactly as the reference
        self.options = " ".join(options)
        d, p = dev.cl_device, dev.cl_device.platform
        super().__init__(f"opencl {p.name} {p.version} {d.name} {d.version} {d.driver_version} {self.options}")

    def compile(self, src: str) -> bytes:
        program = cl._cl._Program(self.dev.context, src)  # the raw program: no pyopencl source cache
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                program.build(self.options.encode(), [self.dev.cl_device])
        except cl.Error as e:
            try:
                log = program.get_build_info(self.dev.cl_device, cl.program_build_info.LOG)
            except cl.Error:
                log = ""
            raise CompileError(self.dev.device, src, f"{e}\n{log}".strip()) from None
        return bytes(program.get_info(cl.program_info.BINARIES)[0])  # type: ignore[index]


class CLProgram:
    """A kernel loaded from a program binary. `launch` enqueues it (global_size is in work groups, CUDA-style, so the
    NDRange is global_size*local_size) after checking the sizes against the device; calling it runs it to the end."""

    def __init__(self, dev: CLDevice, name: str, lib: bytes, spec: ProgramSpec | None = None):
        self.dev, self.name = dev, name
        self.program = cl._cl._Program(dev.context, [dev.cl_device], [lib])
        self.program.build(b"", [dev.cl_device])
        self.kernel = cl.Kernel(self.program, name)
        self.wg_max = min(self.kernel.get_work_group_info(cl.kernel_work_group_info.WORK_GROUP_SIZE, dev.cl_device),
                          dev.limits.local_size_max)  # fmt: skip
        self.local_mem = self.kernel.get_work_group_info(cl.kernel_work_group_info.LOCAL_MEM_SIZE, dev.cl_device)
        self.checked: set[tuple[Any, Any]] = set()

    def check(self, global_size: tuple[int, ...], local_size: tuple[int, ...]) -> None:
        """Refuse, naming the limit, a launch the device cannot run."""
        limits = self.dev.limits
        LaunchLimits("work group", limits.local_max, "CL_DEVICE_MAX_WORK_ITEM_SIZES[{dim}]", self.wg_max,
                     "CL_KERNEL_WORK_GROUP_SIZE / CL_DEVICE_MAX_WORK_GROUP_SIZE", limits.shared_max,
                     "CL_DEVICE_LOCAL_MEM_SIZE").check(self.dev.device, self.name, global_size, local_size,
                                                       self.local_mem)  # fmt: skip
        self.checked.add((global_size, local_size))

    def launch(self, bufs: tuple[Any, ...], vals: tuple[int, ...], global_size: Any, local_size: Any,
               wait_for: list[Any] | None = None) -> Any:  # fmt: skip
        gs = tuple(global_size) if global_size else (1,)
        ls = tuple(local_size) if local_size else (1,) * len(gs)
        if (gs, ls) not in self.checked:
            self.check(gs, ls)
        for i, buf in enumerate(bufs):
            if isinstance(buf, CLView):
                align = self.dev.cl_device.mem_base_addr_align // 8
                raise DeviceError(f"{self.dev.device}: kernel {self.name} was given a sub-buffer at byte offset "
                                  f"{buf.offset}, not a multiple of CL_DEVICE_MEM_BASE_ADDR_ALIGN ({align} bytes); "
                                  "copy it to a buffer of its own first")  # fmt: skip
            self.kernel.set_arg(i, buf)
        for i, val in enumerate(vals, len(bufs)):
            self.kernel.set_arg(i, np.int64(val))  # int parameters are 64-bit (CStyleLanguage.int_param_dtype)
        if 0 in gs:
            return self.dev.marker(wait_for or [])
        ndrange = tuple(g * x for g, x in zip(gs, ls))
        return cl.enqueue_nd_range_kernel(self.dev.queue, self.kernel, ndrange, ls, wait_for=wait_for)

    def __call__(self, *bufs: Any, global_size: tuple[int, ...] | None = None,
                 local_size: tuple[int, ...] | None = None, vals: tuple[int, ...] = (),
                 wait: bool = False) -> float | None:  # fmt: skip
        with self.dev.submit_lock:  # set_arg then enqueue: another thread's launch of this kernel must not interleave
            event = self.dev.last_event = self.launch(bufs, vals, global_size, local_size)
        wait_event(event)
        return (event.profile.end - event.profile.start) * 1e-9 if wait else None


# --------------------------------------------------------------------------------------------------------------------
# the device


class CLDevice(Compiled):
    """One OpenCL device with its own context and in-order, profiling command queue."""

    allocator: CLAllocator

    def __init__(self, device: str, cl_device: Any):
        self.cl_device = cl_device
        self.context = cl.Context([cl_device])
        self.queue = cl.CommandQueue(self.context, cl_device, cl.command_queue_properties.PROFILING_ENABLE)
        self.limits = device_limits(cl_device)
        self.last_event: Any = None  # the last command enqueued on `queue`
        self.clock_offset = measure_clock_offset(self.queue)
        super().__init__(device, CLAllocator(self), OpenCLRenderer(self.limits), CLCompiler(self), self.load_program,
                         signal_t=CLSignal, compute_queue_t=CLComputeQueue, copy_queue_t=CLCopyQueue)  # fmt: skip

    def load_program(self, name: str, lib: bytes, spec: ProgramSpec | None = None) -> CLProgram:
        """`Compiled.runtime`: a compiled kernel as a callable program."""
        return CLProgram(self, name, lib, spec)

    def marker(self, wait_for: list[Any]) -> Any:
        """An event that completes when everything enqueued so far (and `wait_for`) has."""
        event = cl.enqueue_marker(self.queue, wait_for=wait_for or None)
        self.last_event = event
        return event

    def synchronize(self) -> None:
        super().synchronize()
        if self.last_event is not None:  # the in-order queue's last command: also work no timeline value covers
            wait_event(self.last_event)  # not queue.finish(), which Ctrl-C cannot interrupt


def measure_clock_offset(queue: Any, tries: int = 5) -> float:
    """Seconds to add to the device's profiling clock (read in seconds) to get the host's perf_counter clock, so
    timestamps compare with the host's (`lazy.hcq.Signal.timestamp`). A marker ends between two host readings around
    it; of a few tries, the one with the narrowest window gives the offset, its midpoint (off by at most half of it)."""
    best: tuple[float, float] | None = None
    for _ in range(tries):
        before = time.perf_counter()
        marker = cl.enqueue_marker(queue)
        marker.wait()
        after = time.perf_counter()
        window, offset = after - before, (before + after) / 2 - marker.profile.end * 1e-9
        if best is None or window < best[0]:
            best = (window, offset)
    assert best is not None
    return best[1]


# PoCL reads POCL_DEVICES once, when the platform loads: it cannot be changed from inside a running process.
MORE_DEVICES_HINT = ("On PoCL (a CPU OpenCL platform), each entry of the POCL_DEVICES environment variable is a "
                     "device: start Python with POCL_DEVICES='pthread pthread' for CL:0 and CL:1 (one more "
                     "'pthread' per further device)")  # fmt: skip


def open_cl(name: str = "CL") -> CLDevice:
    """`CL` is the first OpenCL device (GPUs first), `CL:n` the n-th."""
    ordinal = int(name.split(":")[1]) if ":" in name else 0
    devices = all_devices()
    if not devices:
        raise DeviceError(f"{name}: no OpenCL device found: {NO_PLATFORM_FIX}")
    if ordinal >= len(devices):
        found = ", ".join(f"CL:{i} ({d.name.strip()})" for i, d in enumerate(devices))
        raise DeviceError(f"{name}: this machine has {len(devices)} OpenCL device(s): {found}. {MORE_DEVICES_HINT}")
    if (why := cannot_compile(ordinal)) is not None:  # (CL itself: the probe said so before it was opened)
        raise DeviceError(why)
    return CLDevice(name, devices[ordinal])
