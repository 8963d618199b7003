"""HCQ on CUDA streams: `CUDASignal` (a timeline value in pinned host memory that streams write and wait on with
stream memory operations, or ride on events where the driver has none, with timestamps from timing events),
`CUDAComputeQueue` / `CUDACopyQueue` (enqueue recorded commands on the device's compute or copy stream) and
`CUDAGraph` (a jit's kernels as one CUDA graph: a replay patches the changed launches and is one graph launch)."""

from __future__ import annotations

import ctypes
import threading
import time
from collections import deque
from dataclasses import replace
from typing import TYPE_CHECKING, Any, cast

from cuda.bindings import driver

from lazy.device import DeviceError
from lazy.hcq import Barrier, Command, Copy, Exec, HostSignal, HWQueue, SetSignal, Signal, Timestamp, Wait, poll

if TYPE_CHECKING:
    from lazy_cuda.device import CUDADevice, CUDAProgram

SUCCESS, NOT_READY = driver.CUresult.CUDA_SUCCESS, driver.CUresult.CUDA_ERROR_NOT_READY


def _cu(what: str, result: tuple[Any, ...]) -> Any:
    from lazy_cuda.device import cu  # the device module imports this one

    return cu(what, result)


def wait_event(dev: CUDADevice, event: Any) -> None:
    """Wait for `event` of `dev` (recorded, or never recorded: then it counts as done)."""

    def done() -> bool:
        (err,) = driver.cuEventQuery(event)
        if err not in (SUCCESS, NOT_READY):
            dev.check_faults()
            _cu("cuEventQuery", (err,))
        return bool(err == SUCCESS)

    poll(done, dev.check_faults)


def check_all_faults() -> None:
    from lazy_cuda.device import open_devices

    for dev in list(open_devices):
        dev.check_faults()


class SignalMemory:
    """8-byte slots of pinned host memory, mapped into every context (portable, device-mapped): the memory a signal's
    value lives in, which streams write and wait on and the host reads directly. Slots are never given back: a stream
    may still wait on a slot whose signal Python has dropped, and 8 bytes a signal is little (signals are made per
    device, per timed run and per test, not per kernel)."""

    PAGE = 4096

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.free: list[int] = []
        self.pages: list[int] = []

    def ensure(self, dev: CUDADevice) -> None:
        """Make the first page with `dev`'s context (any context will do: the memory is portable)."""
        with self.lock:
            if not self.free:
                self._new_page(dev)

    def _new_page(self, dev: CUDADevice | None) -> None:
        if dev is not None:
            dev.make_current()
        flags = driver.CU_MEMHOSTALLOC_PORTABLE | driver.CU_MEMHOSTALLOC_DEVICEMAP
        page = int(_cu("cuMemHostAlloc", driver.cuMemHostAlloc(self.PAGE, flags)))
        ctypes.memset(page, 0, self.PAGE)
        self.pages.append(page)
        self.free += range(page + self.PAGE - 8, page - 1, -8)

    def take(self) -> int:
        from lazy_cuda.device import open_devices

        with self.lock:
            if not self.free:
                if not open_devices:
                    raise DeviceError("a CUDA signal needs an open CUDA device: open one first (Device['CUDA'])")
                self._new_page(open_devices[0])
            return self.free.pop()


signal_memory = SignalMemory()


class CUDASignal(Signal):
    """A timeline value in pinned host memory. A stream sets it with cuStreamWriteValue64 and waits for it with
    cuStreamWaitValue64 (>=); the host reads and writes the memory itself, so a queue can wait for a value the host
    sets later. Where the driver has no stream memory operations, a set records an event, reading the value retires
    the completed ones, and a queue's wait waits for the first event of a value >= it (or on the host, for a value
    only the host will set). Writes from two streams are ordered (the later one waits for the earlier value first),
    and a write below a value already on its way is dropped: the value never goes back. A timestamp is a timing event,
    read as host perf_counter seconds through its device's epoch."""

    def __init__(self, value: int = 0):
        super().__init__(value)
        self.addr = signal_memory.take()  # the host address is the device address too (unified addressing)
        self.memory = ctypes.c_uint64.from_address(self.addr)
        self.memory.value = value
        self.enqueued = value  # the highest value a stream will write
        self.writer: Any = None  # the stream that enqueued it
        self.pending: deque[tuple[int, Any, CUDADevice]] = deque()  # (value, event, device) without memory ops
        self.stamp_event: tuple[Any, CUDADevice] | None = None
        self._lock = threading.RLock()

    # --- the host's view --------------------------------------------------------------------------------------------
    def _retire(self) -> None:
        """Apply the pending (event) sets whose events have completed, in order (lock held)."""
        while self.pending:
            value, event, dev = self.pending[0]
            (err,) = driver.cuEventQuery(event)
            if err == NOT_READY:
                return
            if err != SUCCESS:
                dev.check_faults()
            self.pending.popleft()
            driver.cuEventDestroy(event)
            self.memory.value = max(self.memory.value, value)

    @property
    def value(self) -> int:
        with self._lock:
            self._retire()
            return int(self.memory.value)

    @value.setter
    def value(self, new: int) -> None:  # set by the host; never back
        with self._lock:
            self.memory.value = max(int(self.memory.value), new)
            self._timestamp = time.perf_counter()

    def wait(self, value: int, timeout: float | None = None, gate: bool = False) -> None:
        if self.value >= value:
            return
        if value > self.enqueued and not gate:
            raise DeviceError(f"signal wait for {value} would deadlock: value is {self.value} and nothing queued "
                              "sets it (submit the queue that sets it first, or set it by hand)")  # fmt: skip
        poll(lambda: self.value >= value, check_all_faults, timeout, f"signal value {value} of a CUDA signal")

    @property
    def timestamp(self) -> float:
        if self.stamp_event is not None:
            event, dev = self.stamp_event
            wait_event(dev, event)
            self._timestamp = dev.event_time(event)
            driver.cuEventDestroy(event)
            self.stamp_event = None
        return self._timestamp

    # --- a stream's view (called while a queue is submitted, with the device's submit lock held) ---------------------
    def set_on(self, dev: CUDADevice, stream: Any, value: int) -> None:
        """Enqueue "set to `value`" on `stream`."""
        with self._lock:
            if value <= max(self.enqueued, self.value):
                return  # there already, or a later value is on its way: the value never goes back
            if self.writer is not None and self.writer is not stream and self.enqueued > self.value:
                self.wait_on(dev, stream, self.enqueued)  # the other stream's write must land first
            if dev.stream_memops:
                _cu("cuStreamWriteValue64", driver.cuStreamWriteValue64(stream, driver.CUdeviceptr(self.addr),
                                                                        driver.cuuint64_t(value), 0))  # fmt: skip
            else:
                event = _cu("cuEventCreate", driver.cuEventCreate(driver.CUevent_flags.CU_EVENT_DISABLE_TIMING))
                _cu("cuEventRecord", driver.cuEventRecord(event, stream))
                self.pending.append((value, event, dev))
            self.enqueued, self.writer = value, stream

    def wait_on(self, dev: CUDADevice, stream: Any, value: int) -> None:
        """Enqueue "wait until >= `value`" on `stream`."""
        if self.value >= value:
            return
        if dev.stream_memops:
            flags = driver.CUstreamWaitValue_flags.CU_STREAM_WAIT_VALUE_GEQ
            _cu("cuStreamWaitValue64", driver.cuStreamWaitValue64(stream, driver.CUdeviceptr(self.addr),
                                                                  driver.cuuint64_t(value), flags))  # fmt: skip
            return
        with self._lock:
            found = next(((event, src) for v, event, src in self.pending if v >= value), None)
        if found is not None and found[1].context == dev.context:
            _cu("cuStreamWaitEvent", driver.cuStreamWaitEvent(stream, found[0], 0))
        else:  # only the host (or another GPU's event) will set it: wait here before enqueuing what follows
            self.wait(value, gate=True)

    def stamp_on(self, dev: CUDADevice, stream: Any) -> None:
        """The timestamp is when `stream` reaches this point."""
        event = dev.timing_event()
        _cu("cuEventRecord", driver.cuEventRecord(event, stream))
        if self.stamp_event is not None:
            driver.cuEventDestroy(self.stamp_event[0])
        self.stamp_event = (event, dev)


class _CUDAQueue(HWQueue["CUDADevice"]):
    """Commands every CUDA queue runs, enqueued in order on the stream `stream_of(dev)` (an in-order stream: each
    command sees what the ones before it wrote)."""

    def stream_of(self, dev: CUDADevice) -> Any:
        raise NotImplementedError

    def _submit(self, dev: CUDADevice, cmds: list[Command]) -> None:
        dev.make_current()
        for cmd in cmds:
            self.dispatch(dev, cmd)

    def on_copy(self, dev: CUDADevice, cmd: Copy) -> None:
        dev.allocator.enqueue_copy(cmd.dest, cmd.src, cmd.nbytes, self.stream_of(dev))

    def on_signal(self, dev: CUDADevice, cmd: SetSignal) -> None:
        if isinstance(cmd.signal, CUDASignal):
            cmd.signal.set_on(dev, self.stream_of(dev), cmd.value)
        else:  # another device's host signal: set it once the stream gets here
            dev.wait_stream(self.stream_of(dev))
            cmd.signal.value = cmd.value

    def on_wait(self, dev: CUDADevice, cmd: Wait) -> None:
        if isinstance(cmd.signal, CUDASignal):
            cmd.signal.wait_on(dev, self.stream_of(dev), cmd.value)
        elif isinstance(cmd.signal, HostSignal):
            cmd.signal.wait(cmd.value, gate=True)  # the host may open the gate by hand later
        else:
            cmd.signal.wait(cmd.value)

    def on_timestamp(self, dev: CUDADevice, cmd: Timestamp) -> None:
        if isinstance(cmd.signal, CUDASignal):
            cmd.signal.stamp_on(dev, self.stream_of(dev))
        else:
            dev.wait_stream(self.stream_of(dev))
            cmd.signal.stamp()

    def on_barrier(self, dev: CUDADevice, cmd: Barrier) -> None:
        pass  # an in-order stream: every command already sees the memory of the ones before


class CUDAComputeQueue(_CUDAQueue):
    """Kernels (cuLaunchKernel), copies, signals, waits and timestamps on the device's compute stream."""

    def stream_of(self, dev: CUDADevice) -> Any:
        return dev.compute_stream

    def on_exec(self, dev: CUDADevice, cmd: Exec) -> None:
        program = cast("CUDAProgram", cmd.program)
        program.launch(dev.compute_stream, cmd.bufs, cmd.vals, cmd.global_size, cmd.local_size)


class CUDACopyQueue(_CUDAQueue):
    """Copies (cuMemcpyDtoDAsync) and the synchronisation commands on the device's copy stream: the GPU's copy engine
    runs them while kernels run on the compute stream."""

    def stream_of(self, dev: CUDADevice) -> Any:
        return dev.copy_stream


class CUDAGraph:
    """A jit's kernels as one CUDA graph (kernel nodes in a chain, instantiated once). A replay sets the parameters of
    the launches whose buffers or variables changed (cuGraphExecKernelNodeSetParams), launches the graph with one
    call and signals the timeline after it; the same contract as `lazy.hcq.HCQGraph`."""

    def __init__(self, dev: CUDADevice, launches: list[Exec]):
        self.dev, self.launches = dev, list(launches)
        self.keep: list[Any] = []  # parameter arrays a node's params point to while they are being set
        dev.make_current()
        self.graph = _cu("cuGraphCreate", driver.cuGraphCreate(0))
        self.nodes: list[Any] = []
        for launch in self.launches:
            deps = self.nodes[-1:]
            params = self.node_params(launch)
            self.nodes.append(_cu("cuGraphAddKernelNode", driver.cuGraphAddKernelNode(self.graph, deps, len(deps),
                                                                                      params)))  # fmt: skip
        self.exec = _cu("cuGraphInstantiate", driver.cuGraphInstantiate(self.graph, 0))
        self.keep = []  # instantiation copied the parameters

    def node_params(self, launch: Exec) -> Any:
        program = cast("CUDAProgram", launch.program)
        gs = (*(launch.global_size or ()), 1, 1, 1)[:3]
        ls = (*(launch.local_size or ()), 1, 1, 1)[:3]
        program.check(gs, ls)
        values = (*launch.bufs, *(v & 0xFFFFFFFFFFFFFFFF for v in launch.vals))
        args = (ctypes.c_uint64 * max(len(values), 1))(*values)
        pointers = (ctypes.c_void_p * max(len(values), 1))(
            *(ctypes.addressof(args) + 8 * i for i in range(len(values)))
        )
        self.keep += [args, pointers]
        params = driver.CUDA_KERNEL_NODE_PARAMS()
        params.func = program.function
        params.gridDimX, params.gridDimY, params.gridDimZ = gs
        params.blockDimX, params.blockDimY, params.blockDimZ = ls
        params.sharedMemBytes = 0
        params.kernelParams = ctypes.addressof(pointers) if values else 0
        return params

    def replay(self, updates: dict[int, Exec] | None = None, buffers: dict[tuple[int, int], Any] | None = None) -> None:
        dev = self.dev
        with dev.submit_lock:
            changed = set()
            for idx, launch in (updates or {}).items():
                self.launches[idx] = launch
                changed.add(idx)
            for (idx, pos), opaque in (buffers or {}).items():
                launch = self.launches[idx]
                self.launches[idx] = replace(launch, bufs=(*launch.bufs[:pos], opaque, *launch.bufs[pos + 1 :]))
                changed.add(idx)
            dev.make_current()
            for idx in sorted(changed):
                params = self.node_params(self.launches[idx])
                _cu("cuGraphExecKernelNodeSetParams", driver.cuGraphExecKernelNodeSetParams(self.exec, self.nodes[idx],
                                                                                            params))  # fmt: skip
            self.keep = []
            _cu("cuGraphLaunch", driver.cuGraphLaunch(self.exec, dev.compute_stream))
            dev.launched.extend(cast("CUDAProgram", launch.program).name for launch in self.launches[-8:])
            dev.compute_queue_t().signal(dev.timeline_signal, dev.next_value()).submit(dev)

    def __del__(self) -> None:
        try:
            driver.cuGraphExecDestroy(self.exec)
            driver.cuGraphDestroy(self.graph)
        except Exception:  # interpreter shutdown, or the graph was never built
            pass
