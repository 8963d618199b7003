"""HCQ on Metal: `MetalSignal` (a timeline value on an `MTLSharedEvent`, which command buffers signal and wait on,
with timestamps from the command buffers' GPU times), `CommandBatch` (one submission's command buffer and its open
encoder) and `MetalComputeQueue` / `MetalCopyQueue`, which encode recorded commands into it. Untested here (no Mac):
written against pyobjc's Metal names, and exercised with a stand-in framework by the plugin's tests."""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import TYPE_CHECKING, Any, cast

from lazy.device import DeviceError
from lazy.hcq import Barrier, Command, Copy, Exec, HWQueue, SetSignal, Signal, Timestamp, Wait, poll

if TYPE_CHECKING:
    from lazy_metal.device import MetalDevice, MetalProgram

# MTLCommandBufferStatus: NotEnqueued, Enqueued, Committed, Scheduled, Completed, Error
STATUS_COMPLETED, STATUS_ERROR = 4, 5


def failure_message(device: str, cb: Any, kernels: list[str]) -> str:
    error = cb.error()
    why = str(error.localizedDescription()) if error is not None else "no reason given"
    ran = ", ".join(kernels) if kernels else "copies and signals only"
    return (f"{device}: a command buffer failed on the GPU ({why}); it ran: {ran}. A kernel that reads or writes "
            "out of its buffers, or runs past the GPU's watchdog, does this; later work still runs")  # fmt: skip


class InFlight:
    """A committed command buffer, the kernels it runs and the signal values it sets. `finished()` says whether it is
    done; when it failed, it raises (once, to whoever sees it first) after setting its signals on the host, so no
    waiter hangs and the device goes on with later work."""

    def __init__(self, device: str, cb: Any, kernels: list[str], signals: list[tuple[MetalSignal, int]]):
        self.device, self.cb, self.kernels, self.signals = device, cb, kernels, signals
        self.reported = False

    def finished(self) -> bool:
        status = int(self.cb.status())
        if status == STATUS_ERROR and not self.reported:
            self.reported = True
            for sig, value in self.signals:
                sig.value = value
            raise DeviceError(failure_message(self.device, self.cb, self.kernels))
        return status >= STATUS_COMPLETED

    def wait(self, timeout: float | None = None) -> None:
        poll(self.finished, timeout=timeout, what=f"a command buffer on {self.device}")


class MetalSignal(Signal):
    """A timeline value held by an `MTLSharedEvent`: command buffers set it (`encodeSignalEvent:value:`) and wait for
    it (`encodeWaitForEvent:value:`, which also waits for a value the host sets later), the host reads and sets
    `signaledValue`. `signal_t(0)` is made without a device (core makes the timeline signal so), so the event is made
    by the first queue of a device that uses the signal (`event_on`); a signal of one device used by another device's
    queue is waited for on the host. A timestamp is the GPU start or end time of a command buffer, read when asked."""

    def __init__(self, value: int = 0):
        super().__init__(value)
        self.event: Any = None  # the MTLSharedEvent, once a queue used the signal
        self.mtl_device: Any = None  # the MTLDevice that made it
        self.pending: deque[tuple[int, InFlight]] = deque()  # (value, the command buffer that sets it), in order
        self.promised = value  # the highest value a submission will set
        self.stamp_on: tuple[InFlight, str, float] | None = None  # (command buffer, "start" | "end", clock offset)
        self._lock = threading.RLock()

    def event_on(self, mtl_device: Any) -> Any:
        """The signal's event if it belongs to `mtl_device` (made now if the signal has none yet), else None."""
        with self._lock:
            if self.event is None:
                self.event, self.mtl_device = mtl_device.newSharedEvent(), mtl_device
                self.event.setSignaledValue_(self._value)
            return self.event if self.mtl_device is mtl_device else None

    @property
    def value(self) -> int:
        with self._lock:
            if self.event is not None:
                self._value = max(self._value, int(self.event.signaledValue()))
            while self.pending and self.pending[0][0] <= self._value:
                self.pending.popleft()
            return self._value

    @value.setter
    def value(self, new: int) -> None:  # set by the host; never back
        with self._lock:
            if new > self.value:
                self._value = new
                if self.event is not None:
                    self.event.setSignaledValue_(new)
            self._timestamp = time.perf_counter()

    def promise(self, value: int, setter: threading.Thread) -> None:
        with self._lock:
            self.promised = max(self.promised, value)

    def withdraw(self, value: int, setter: threading.Thread) -> None:
        with self._lock:  # the submission failed before committing: only what is queued still sets values
            self.promised = max([self._value, *(v for v, _ in self.pending)])

    def set_by(self, value: int, batch: InFlight) -> None:
        """The committed command buffer `batch` sets `value` (encoded with `encodeSignalEvent:value:`)."""
        with self._lock:
            self.pending.append((value, batch))

    def wait(self, value: int, timeout: float | None = None) -> None:
        if self.value >= value:
            return
        with self._lock:
            if value > self.promised:
                raise DeviceError(f"signal wait for {value} would deadlock: value is {self._value} and nothing "
                                  "submitted sets it (submit the queue that sets it first, or set it)")  # fmt: skip

        def reached() -> bool:
            with self._lock:
                setters = [batch for _, batch in self.pending]
            for batch in setters:  # a failed command buffer never signals: it raises instead
                batch.finished()
            return self.value >= value

        poll(reached, timeout=timeout, what=f"signal value {value} of a Metal signal")

    @property
    def timestamp(self) -> float:
        if self.stamp_on is not None:
            batch, which, offset = self.stamp_on
            batch.wait()
            gpu_time = batch.cb.GPUStartTime() if which == "start" else batch.cb.GPUEndTime()
            self._timestamp, self.stamp_on = float(gpu_time) + offset, None
        return self._timestamp


class CommandBatch:
    """One submission's current command buffer, created when first needed, with at most one open encoder (compute
    or blit). Consecutive kernels share a compute encoder (serial dispatch: each kernel sees the memory of the ones
    before), so a `jit` replay is one command buffer. It gathers what the buffer's `InFlight` needs at commit: the
    kernels, the signal values it sets, the timestamps that take its start time."""

    def __init__(self, dev: MetalDevice):
        self.dev = dev
        self.cb: Any = None
        self.encoder: Any = None
        self.encoder_kind = ""
        self.kernels: list[str] = []
        self.signals: list[tuple[MetalSignal, int]] = []
        self.start_stamps: list[MetalSignal] = []

    def command_buffer(self) -> Any:
        if self.cb is None:
            self.cb = self.dev.queue.commandBuffer()
        return self.cb

    def encoder_for(self, kind: str) -> Any:
        """The open encoder of `kind` ("compute" or "blit"), ending one of the other kind first."""
        if self.encoder_kind != kind:
            self.end_encoder()
            cb = self.command_buffer()
            self.encoder = cb.computeCommandEncoder() if kind == "compute" else cb.blitCommandEncoder()
            self.encoder_kind = kind
        return self.encoder

    def end_encoder(self) -> None:
        if self.encoder is not None:
            self.encoder.endEncoding()
        self.encoder, self.encoder_kind = None, ""

    def commit(self) -> InFlight | None:
        """Commit the command buffer (if there is one): its commands start; the next command opens a new one."""
        if self.cb is None:
            return None
        self.end_encoder()
        self.cb.commit()
        batch = InFlight(self.dev.device, self.cb, self.kernels, self.signals)
        self.dev.committed(batch)
        for sig, value in self.signals:
            sig.set_by(value, batch)
        for sig in self.start_stamps:
            sig.stamp_on = (batch, "start", self.dev.clock_offset)
        self.cb, self.kernels, self.signals, self.start_stamps = None, [], [], []
        return batch


class MetalComputeQueue(HWQueue["MetalDevice"]):
    """Encodes its recorded commands, in order, into command buffers of the device's `MTLCommandQueue`.

    Exec -> a dispatch on the compute encoder; Copy -> a blit; SetSignal -> `encodeSignalEvent:value:` (a signal of
    another device, or a host signal, is set on the host once the command buffer completed); Wait ->
    `encodeWaitForEvent:value:` (another device's or a host signal: waited for on the host, after committing what is
    encoded); Timestamp -> the end time of the command buffer holding the commands before it (or the start of the
    next one, when there are none); Barrier -> nothing (hazard tracking orders memory between kernels and command
    buffers). A submission commits its command buffer at the end."""

    def __init__(self) -> None:
        super().__init__()
        self.batch: CommandBatch | None = None
        self.stamps: list[MetalSignal] = []  # timestamps waiting for the next command

    def _submit(self, dev: MetalDevice, cmds: list[Command]) -> None:
        self.batch, self.stamps = CommandBatch(dev), []
        try:
            for cmd in cmds:
                self.dispatch(dev, cmd)
        finally:
            last = self.batch.commit() or dev.last_batch
            for sig in self.stamps:  # nothing came after them: the end of all the work before
                if last is None:
                    sig.stamp()  # the device never ran anything: it is idle now
                else:
                    sig.stamp_on = (last, "end", dev.clock_offset)
            self.batch, self.stamps = None, []

    @property
    def current(self) -> CommandBatch:
        assert self.batch is not None, "commands are encoded only inside a submission"
        return self.batch

    def _encoded(self) -> None:
        """A command was encoded: the timestamps waiting for one take its command buffer's start time."""
        self.current.start_stamps += self.stamps
        self.stamps = []

    def on_exec(self, dev: MetalDevice, cmd: Exec) -> None:
        program = cast("MetalProgram", cmd.program)
        program.encode(self.current.encoder_for("compute"), cmd.bufs, cmd.vals, cmd.global_size, cmd.local_size)
        self.current.kernels.append(program.name)
        self._encoded()

    def on_copy(self, dev: MetalDevice, cmd: Copy) -> None:
        if cmd.nbytes:
            blit = self.current.encoder_for("blit")
            blit.copyFromBuffer_sourceOffset_toBuffer_destinationOffset_size_(cmd.src.buf, cmd.src.offset,
                                                                              cmd.dest.buf, cmd.dest.offset,
                                                                              cmd.nbytes)  # fmt: skip
            self._encoded()

    def on_signal(self, dev: MetalDevice, cmd: SetSignal) -> None:
        sig = cmd.signal
        if isinstance(sig, MetalSignal) and (event := sig.event_on(dev.mtl)) is not None:
            self.current.end_encoder()
            self.current.command_buffer().encodeSignalEvent_value_(event, cmd.value)
            self.current.signals.append((sig, cmd.value))
            return
        batch = self.current.commit() or dev.last_batch  # another device's or a host signal: set once done
        if batch is not None:
            batch.wait()
        sig.value = cmd.value

    def on_wait(self, dev: MetalDevice, cmd: Wait) -> None:
        sig = cmd.signal
        if isinstance(sig, MetalSignal) and (event := sig.event_on(dev.mtl)) is not None:
            self.current.end_encoder()
            self.current.command_buffer().encodeWaitForEvent_value_(event, cmd.value)
            return
        self.current.commit()  # what is encoded may be what the other side waits for
        sig.wait(cmd.value)

    def on_timestamp(self, dev: MetalDevice, cmd: Timestamp) -> None:
        sig = cmd.signal
        if not isinstance(sig, MetalSignal):
            sig.stamp()
        elif (batch := self.current.commit()) is not None:  # the end of the commands before it
            sig.stamp_on = (batch, "end", dev.clock_offset)
        else:
            self.stamps.append(sig)

    def on_barrier(self, dev: MetalDevice, cmd: Barrier) -> None:
        pass  # buffers are hazard-tracked: Metal orders a kernel's or blit's reads after the writes before it


class MetalCopyQueue(MetalComputeQueue):
    """Buffer copies on the same command queue as the kernels (blit encoders in the same command buffers)."""
