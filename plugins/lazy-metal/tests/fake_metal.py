"""A stand-in for pyobjc's `Metal` module, just enough of it for `lazy_metal.device` and `lazy_metal.queues` to run on
a machine without Metal. Buffers are bytearrays; command buffers run in commit order when committed, and a wait on a
shared event holds its command buffer and those after it until the event reaches the value; a library maps kernel
names to Python functions the test registers (no MSL is compiled). It enforces the framework rules the plugin must
follow (one open encoder per command buffer, no event commands or commit while an encoder is open).

Method names are pyobjc's spelling of the framework's selectors (`newBufferWithLength:options:` is
`newBufferWithLength_options_`). What it checks is the plugin's own logic (argument binding, encoding, ordering,
signals, errors, limits), not how Metal behaves: that needs a Mac."""

from __future__ import annotations

import importlib.machinery
import struct
import time
import types
import weakref
from collections import deque
from collections.abc import Callable
from typing import Any, cast

GPU_CLOCK_SKEW = -1000.0  # GPU times are host-clock seconds since boot, not perf_counter's: a constant apart


class Error:
    def __init__(self, text: str):
        self.text = text

    def localizedDescription(self) -> str:
        return self.text


class Size:
    def __init__(self, width: int, height: int, depth: int):
        self.width, self.height, self.depth = width, height, depth


class Contents:
    def __init__(self, data: bytearray):
        self.data = data

    def as_buffer(self, count: int) -> memoryview:
        return memoryview(self.data)[:count]


class Buffer:
    def __init__(self, length: int):
        self.data = bytearray(length)

    def contents(self) -> Contents:
        return Contents(self.data)

    def length(self) -> int:
        return len(self.data)


class SharedEvent:
    def __init__(self, framework: FakeMetal):
        self.framework, self.value = framework, 0

    def signaledValue(self) -> int:
        return self.value

    def setSignaledValue_(self, value: int) -> None:
        self.value = value
        self.framework.run_queues()


class Function:
    def __init__(self, name: str, run: Callable[..., None]):
        self.name, self.run = name, run


class Library:
    def __init__(self, kernels: dict[str, Callable[..., None]]):
        self.kernels = kernels

    def newFunctionWithName_(self, name: str) -> Function | None:
        return Function(name, self.kernels[name]) if name in self.kernels else None


class Pipeline:
    def __init__(self, function: Function):
        self.function = function

    def maxTotalThreadsPerThreadgroup(self) -> int:
        return getattr(self.function.run, "max_threads", 1024)

    def staticThreadgroupMemoryLength(self) -> int:
        return getattr(self.function.run, "threadgroup_memory", 0)


class ComputeEncoder:
    def __init__(self, cb: CommandBuffer):
        self.cb = cb
        self.pipeline: Pipeline | None = None
        self.args: dict[int, Any] = {}

    def setComputePipelineState_(self, pipeline: Pipeline) -> None:
        self.pipeline = pipeline

    def setBuffer_offset_atIndex_(self, buf: Buffer, offset: int, index: int) -> None:
        self.args[index] = memoryview(buf.data)[offset:]

    def setBytes_length_atIndex_(self, data: bytes, length: int, index: int) -> None:
        assert len(data) == length == 8, "int parameters are 8 bytes (constant long&)"
        self.args[index] = struct.unpack("<q", data)[0]

    def dispatchThreadgroups_threadsPerThreadgroup_(self, groups: Size, threads: Size) -> None:
        assert self.pipeline is not None and self.cb.encoder is self, "dispatch on an open compute encoder"
        run, args = self.pipeline.function.run, [self.args[i] for i in sorted(self.args)]
        sizes = ((groups.width, groups.height, groups.depth), (threads.width, threads.height, threads.depth))
        self.cb.ops.append(("dispatch", self.pipeline.function.name, lambda: run(*args, sizes=sizes)))

    def endEncoding(self) -> None:
        assert self.cb.encoder is self, "endEncoding of an encoder that is not open"
        self.cb.encoder = None


class BlitEncoder(ComputeEncoder):
    def copyFromBuffer_sourceOffset_toBuffer_destinationOffset_size_(
        self, src: Buffer, src_offset: int, dest: Buffer, dest_offset: int, size: int
    ) -> None:
        assert self.cb.encoder is self and size > 0

        def copy() -> None:
            dest.data[dest_offset : dest_offset + size] = src.data[src_offset : src_offset + size]

        self.cb.ops.append(("copy", "", copy))


class CommandBuffer:
    """Runs its commands when its queue reaches it (at commit), stopping at a wait whose value is not reached yet."""

    def __init__(self, queue: CommandQueue):
        self.queue = queue
        self.ops: list[tuple[str, str, Callable[[], Any]]] = []  # (kind, kernel name, what runs)
        self.encoder: ComputeEncoder | None = None
        self._status, self._error, self.next_op = 0, cast(Error | None, None), 0
        self.start = self.end = 0.0

    def computeCommandEncoder(self) -> ComputeEncoder:
        assert self.encoder is None, "another encoder is still open: end it first"
        encoder = self.encoder = ComputeEncoder(self)
        return encoder

    def blitCommandEncoder(self) -> BlitEncoder:
        assert self.encoder is None, "another encoder is still open: end it first"
        encoder = self.encoder = BlitEncoder(self)
        return encoder

    def encodeSignalEvent_value_(self, event: SharedEvent, value: int) -> None:
        assert self.encoder is None and self._status == 0, "event commands go between encoders, before commit"
        self.ops.append(("signal", "", lambda: setattr(event, "value", max(event.value, value))))

    def encodeWaitForEvent_value_(self, event: SharedEvent, value: int) -> None:
        assert self.encoder is None and self._status == 0, "event commands go between encoders, before commit"
        self.ops.append(("wait", "", lambda: event.value >= value))

    def commit(self) -> None:
        assert self.encoder is None, "commit with an encoder still open"
        assert self._status == 0, "committed twice"
        self._status = 2
        self.queue.committed.append(self)
        self.queue.pending.append(self)
        self.queue.framework.run_queues()

    def run(self) -> bool:
        """Run what can run; True when this command buffer is done (completed or failed)."""
        if self.next_op == 0:
            self.start = time.perf_counter() + GPU_CLOCK_SKEW
        while self.next_op < len(self.ops):
            kind, _, op = self.ops[self.next_op]
            if kind == "wait":
                if not op():
                    return False
            else:
                try:
                    op()
                except Exception as e:  # a fault: the rest of the command buffer (its signals too) never runs
                    self._status, self._error = 5, Error(f"kernel fault: {e}")
                    self.end = time.perf_counter() + GPU_CLOCK_SKEW
                    return True
            self.next_op += 1
        self._status, self.end = 4, time.perf_counter() + GPU_CLOCK_SKEW
        return True

    def status(self) -> int:
        return self._status

    def error(self) -> Error | None:
        return self._error

    def GPUStartTime(self) -> float:
        return self.start

    def GPUEndTime(self) -> float:
        return self.end

    def waitUntilCompleted(self) -> None:
        assert self._status >= 4, "the stand-in cannot block: this command buffer waits for something never set"

    @property
    def dispatches(self) -> list[str]:
        return [name for kind, name, _ in self.ops if kind == "dispatch"]


class CommandQueue:
    def __init__(self, framework: FakeMetal):
        self.framework = framework
        self.pending: deque[CommandBuffer] = deque()  # committed, not done
        self.committed: list[CommandBuffer] = []

    def commandBuffer(self) -> CommandBuffer:
        return CommandBuffer(self)

    def run(self) -> None:
        while self.pending:
            cb = self.pending[0]
            if not cb.run():
                return
            self.pending.popleft()


class Device:
    def __init__(self, framework: FakeMetal, name: str, registry_id: int, memory: int):
        self.framework, self._name, self.registry_id, self.memory = framework, name, registry_id, memory
        self.allocated = 0
        self.queues: list[CommandQueue] = []

    def name(self) -> str:
        return self._name

    def registryID(self) -> int:
        return self.registry_id

    def maxThreadsPerThreadgroup(self) -> Size:
        return Size(1024, 1024, 1024)

    def maxThreadgroupMemoryLength(self) -> int:
        return 32 * 1024

    def supportsFamily_(self, family: int) -> bool:
        return family == 1007

    def newCommandQueueWithMaxCommandBufferCount_(self, count: int) -> CommandQueue:
        queue = CommandQueue(self.framework)
        self.queues.append(queue)
        return queue

    def newBufferWithLength_options_(self, length: int, options: int) -> Buffer | None:
        assert options == 0, "shared storage"
        if self.allocated + length > self.memory:
            return None
        self.allocated += length
        buf = Buffer(length)
        weakref.finalize(buf, self.release, length)  # pyobjc releases an MTLBuffer with its last reference
        return buf

    def release(self, length: int) -> None:
        self.allocated -= length

    def currentAllocatedSize(self) -> int:
        return self.allocated

    def recommendedMaxWorkingSetSize(self) -> int:
        return self.memory

    def newSharedEvent(self) -> SharedEvent:
        return SharedEvent(self.framework)

    def newLibraryWithSource_options_error_(self, src: str, options: Any, error: None) -> tuple[Any, Any]:
        assert options.math_mode == 0, "compiled with safe math"
        bad = [i + 1 for i, line in enumerate(src.splitlines()) if "#error" in line]
        if bad:
            return None, Error(f"program_source:{bad[0]}:1: error: {self.framework.compile_error}")
        return Library(self.framework.kernels), None

    def newComputePipelineStateWithFunction_error_(self, function: Function, error: None) -> tuple[Any, Any]:
        return Pipeline(function), None


class CompileOptions:
    def __init__(self) -> None:
        self.math_mode: int | None = None

    @classmethod
    def new(cls) -> CompileOptions:
        return cls()

    def respondsToSelector_(self, selector: str) -> bool:
        return selector == "setMathMode:"

    def setMathMode_(self, mode: int) -> None:
        self.math_mode = mode


class FakeMetal(types.ModuleType):
    """The module: `MTLCreateSystemDefaultDevice`, `MTLCopyAllDevices`, `MTLSize`, `MTLCompileOptions`, plus what a
    test sets up (`kernels`: name -> Python function run for a dispatch, `devices`, `compile_error`)."""

    def __init__(self, devices: int = 2, memory: int = 1 << 20):
        super().__init__("Metal")
        self.__spec__ = importlib.machinery.ModuleSpec("Metal", None)
        self.kernels: dict[str, Callable[..., None]] = {}
        self.compile_error = "use of undeclared identifier"
        self.devices = [Device(self, f"Fake GPU {i}", 100 + i, memory) for i in range(devices)]
        self.MTLSize = Size
        self.MTLCompileOptions = CompileOptions

    def MTLCreateSystemDefaultDevice(self) -> Device | None:
        return self.devices[0] if self.devices else None

    def MTLCopyAllDevices(self) -> list[Device]:
        return list(reversed(self.devices))  # not the default first: open_metal must put it first

    def run_queues(self) -> None:
        progress = True
        while progress:  # an event set by one queue may let another go on
            before = [(q, len(q.pending)) for d in self.devices for q in d.queues]
            for device in self.devices:
                for queue in device.queues:
                    queue.run()
            progress = before != [(q, len(q.pending)) for d in self.devices for q in d.queues]

    def command_buffers(self, device: int = 0) -> list[CommandBuffer]:
        """Every command buffer committed to the device's queues, in order."""
        return [cb for q in self.devices[device].queues for cb in q.committed]
