"""HCQ for DISK: `DiskSignal` and `DiskQueue`. File copies are memmoves on mapped pages (or plain reads and writes),
so a queue runs its commands right away, in order, on the submitting thread; `exec` is refused."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lazy.device import DeviceError
from lazy.hcq import HostSignal, HWQueue, run_command
from lazy_disk.renderer import NO_KERNELS

if TYPE_CHECKING:
    from lazy.device import Compiled


class DiskSignal(HostSignal):
    """A timeline value set by the submitting thread; its timestamp is the host's perf_counter clock."""


class DiskQueue(HWQueue):
    """Both the compute and the copy queue of DISK: copies, signals, waits, timestamps and barriers, run on submit.
    A queue holding an `exec` is refused as a whole, before any of its commands runs."""

    def _submit(self, dev: Compiled) -> None:
        if any(cmd[0] == "exec" for cmd in self.cmds):
            raise DeviceError(f"{dev.device}: a queue with a kernel launch was submitted: {NO_KERNELS}")
        for cmd in self.cmds:
            run_command(dev, cmd)
