"""A stand-in for `cuda.bindings.driver` that runs the CUDA device's Python on a machine without a GPU: "device" memory
is host memory, each stream is a queue of operations a background thread (the "GPU") runs in order, a wait on a value
holds its stream until the memory reaches it, and kernels are Python functions registered by name (the cubin NVRTC
made is accepted and ignored). It checks the runtime's logic (queues, signals, copies, graphs, errors), not the
driver's behaviour; every name it answers is the real binding's (test_cuda_driver_api checks the calls' shapes)."""

from __future__ import annotations

import ctypes
import threading
import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from cuda.bindings import driver as real

OK = real.CUresult.CUDA_SUCCESS
ATTRIBUTES = {"MAX_BLOCK_DIM_X": 1024, "MAX_BLOCK_DIM_Y": 1024, "MAX_BLOCK_DIM_Z": 64, "MAX_GRID_DIM_X": 2**31 - 1,
              "MAX_GRID_DIM_Y": 65535, "MAX_GRID_DIM_Z": 65535, "CAN_USE_64_BIT_STREAM_MEM_OPS": 1,
              "COMPUTE_CAPABILITY_MAJOR": 9, "COMPUTE_CAPABILITY_MINOR": 0}  # fmt: skip


class Stream:
    def __init__(self) -> None:
        self.ops: list[Callable[[], bool]] = []  # each returns False while it cannot run yet (a wait)


class FakeDriver:
    """The module object: real enums and types, fake functions."""

    def __init__(self, kernels: dict[str, Callable[..., None]], memory_bytes: int = 1 << 20):
        self.kernels, self.lock, self.stop = kernels, threading.RLock(), False
        self.buffers: dict[int, Any] = {}
        self.functions: list[str] = []
        self.free_bytes, self.streams, self.launches = memory_bytes, [Stream()], 0
        self.gpu = threading.Thread(target=self.run, name="fake-gpu", daemon=True)
        self.gpu.start()

    def __getattr__(self, name: str) -> Any:  # enums, flags and struct types come from the real binding
        return getattr(real, name)

    def run(self) -> None:
        while not self.stop:
            with self.lock:
                for stream in self.streams:
                    while stream.ops and stream.ops[0]():
                        stream.ops.pop(0)
            time.sleep(1e-5)

    def enqueue(self, stream: Any, op: Callable[[], bool]) -> tuple[Any]:
        with self.lock:
            self.streams[int(stream)].ops.append(op)
        return (OK,)

    def memory(self, size: int) -> int:
        buf = ctypes.create_string_buffer(max(size, 1))
        self.buffers[ctypes.addressof(buf)] = buf
        return ctypes.addressof(buf)

    # --- device, context, errors ---
    def cuInit(self, flags):  # noqa: N802
        return (OK,)

    def cuDriverGetVersion(self):  # noqa: N802
        return (OK, 13000)

    def cuDeviceGetCount(self):  # noqa: N802
        return (OK, 1)

    def cuDeviceGet(self, ordinal):  # noqa: N802
        return (OK, real.CUdevice(ordinal))

    def cuDeviceGetName(self, length, dev):  # noqa: N802
        return (OK, b"Fake GPU\0\0")

    def cuDeviceGetAttribute(self, attr, dev):  # noqa: N802
        return (OK, ATTRIBUTES[attr.name.removeprefix("CU_DEVICE_ATTRIBUTE_")])

    def cuDevicePrimaryCtxRetain(self, dev):  # noqa: N802
        return (OK, real.CUcontext(1))

    def cuDevicePrimaryCtxRelease(self, dev):  # noqa: N802
        self.stop = True
        return (OK,)

    def cuCtxSetCurrent(self, ctx):  # noqa: N802
        return (OK,)

    def cuGetErrorName(self, err):  # noqa: N802
        return (OK, err.name.encode())

    def cuGetErrorString(self, err):  # noqa: N802
        return (OK, b"fake")

    def cuMemGetInfo(self):  # noqa: N802
        return (OK, self.free_bytes, 1 << 20)

    # --- memory ---
    def cuMemAlloc(self, size):  # noqa: N802
        if size > self.free_bytes:
            return (real.CUresult.CUDA_ERROR_OUT_OF_MEMORY, real.CUdeviceptr(0))
        self.free_bytes -= size
        return (OK, real.CUdeviceptr(self.memory(size)))

    def cuMemFree(self, ptr):  # noqa: N802
        self.free_bytes += len(self.buffers.pop(int(ptr)))
        return (OK,)

    def cuMemHostAlloc(self, size, flags):  # noqa: N802
        return (OK, self.memory(size))

    def cuMemFreeHost(self, ptr):  # noqa: N802
        self.buffers.pop(int(ptr))
        return (OK,)

    def copy(self, dest: Any, src: Any, size: int, stream: Any) -> tuple[Any]:
        return self.enqueue(stream, lambda: ctypes.memmove(int(dest), int(src), size) is not None)

    def cuMemcpyHtoDAsync(self, dest, src, size, stream):  # noqa: N802
        return self.copy(dest, src, size, stream)

    def cuMemcpyDtoHAsync(self, dest, src, size, stream):  # noqa: N802
        return self.copy(dest, src, size, stream)

    def cuMemcpyDtoDAsync(self, dest, src, size, stream):  # noqa: N802
        return self.copy(dest, src, size, stream)

    # --- streams, events, memory operations ---
    def cuStreamCreate(self, flags):  # noqa: N802
        with self.lock:
            self.streams.append(Stream())
            return (OK, real.CUstream(len(self.streams) - 1))

    def cuStreamDestroy(self, stream):  # noqa: N802
        return (OK,)

    def cuStreamQuery(self, stream):  # noqa: N802
        with self.lock:
            return (real.CUresult.CUDA_ERROR_NOT_READY if self.streams[int(stream)].ops else OK,)

    def cuStreamWriteValue64(self, stream, addr, value, flags):  # noqa: N802
        def write() -> bool:
            ctypes.c_uint64.from_address(int(addr)).value = int(value)
            return True

        return self.enqueue(stream, write)

    def cuStreamWaitValue64(self, stream, addr, value, flags):  # noqa: N802
        return self.enqueue(stream, lambda: ctypes.c_uint64.from_address(int(addr)).value >= int(value))

    def cuEventCreate(self, flags):  # noqa: N802
        return (OK, SimpleNamespace(done=True, time=time.perf_counter()))

    def cuEventRecord(self, event, stream):  # noqa: N802
        event.done = False

        def reach() -> bool:
            event.done, event.time = True, time.perf_counter()
            return True

        return self.enqueue(stream, reach)

    def cuEventQuery(self, event):  # noqa: N802
        return (OK if event.done else real.CUresult.CUDA_ERROR_NOT_READY,)

    def cuEventSynchronize(self, event):  # noqa: N802
        while not event.done:
            time.sleep(1e-5)
        return (OK,)

    def cuEventElapsedTime(self, start, end):  # noqa: N802
        return (OK, (end.time - start.time) * 1e3)

    def cuEventDestroy(self, event):  # noqa: N802
        return (OK,)

    # --- modules and kernels ---
    def cuModuleLoadData(self, image):  # noqa: N802
        assert bytes(image[:4]) == b"\x7fELF", "not a cubin"
        return (OK, SimpleNamespace())

    def cuModuleGetFunction(self, module, name):  # noqa: N802
        self.functions.append(name.decode())  # a real CUfunction (graph node params take no other), by index
        return (OK, real.CUfunction(len(self.functions) - 1))

    def cuFuncGetAttribute(self, attr, function):  # noqa: N802
        return (OK, 1024)

    def kernel_op(self, function: Any, grid: tuple[int, ...], args: list[int]) -> Callable[[], bool]:
        kernel = self.kernels[self.functions[int(function)]]  # now: a struct's field may not outlive the struct

        def run() -> bool:
            kernel(grid, *args)
            self.launches += 1
            return True

        return run

    def read_params(self, function: Any, params: int) -> list[int]:
        count = self.kernels[self.functions[int(function)]].__code__.co_argcount - 1
        pointers = (ctypes.c_void_p * count).from_address(params)
        return [ctypes.c_uint64.from_address(p or 0).value for p in pointers]

    def cuLaunchKernel(self, f, gx, gy, gz, bx, by, bz, shared, stream, params, extra):  # noqa: N802
        return self.enqueue(stream, self.kernel_op(f, (gx, gy, gz), self.read_params(f, params)))

    # --- graphs ---
    def cuGraphCreate(self, flags):  # noqa: N802
        return (OK, SimpleNamespace(nodes=[]))

    def cuGraphAddKernelNode(self, graph, deps, count, params):  # noqa: N802
        node = SimpleNamespace(op=self.node_op(params))
        graph.nodes.append(node)
        return (OK, node)

    def node_op(self, params: Any) -> Callable[[], bool]:
        grid = (params.gridDimX, params.gridDimY, params.gridDimZ)
        return self.kernel_op(params.func, grid, self.read_params(params.func, int(params.kernelParams)))

    def cuGraphInstantiate(self, graph, flags):  # noqa: N802
        return (OK, SimpleNamespace(ops={id(n): n.op for n in graph.nodes}, nodes=list(graph.nodes)))

    def cuGraphExecKernelNodeSetParams(self, exe, node, params):  # noqa: N802
        exe.ops[id(node)] = self.node_op(params)
        return (OK,)

    def cuGraphLaunch(self, exe, stream):  # noqa: N802
        for node in exe.nodes:
            self.enqueue(stream, exe.ops[id(node)])
        return (OK,)

    def cuGraphExecDestroy(self, exe):  # noqa: N802
        return (OK,)

    def cuGraphDestroy(self, graph):  # noqa: N802
        return (OK,)
