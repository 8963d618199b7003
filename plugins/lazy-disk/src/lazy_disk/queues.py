"""HCQ for DISK: `DiskSignal` and `DiskQueue`. File copies are memmoves on mapped pages (or plain reads and writes),
so a queue runs its commands right away, in order, on the submitting thread, with core's host handlers. DISK runs no
kernels: core refuses a submission holding an `Exec` before any of its commands runs."""

from __future__ import annotations

from lazy.device import Compiled
from lazy.hcq import HostQueue, HostSignal


class DiskSignal(HostSignal):
    """A timeline value set by the submitting thread; its timestamp is the host's perf_counter clock."""


class DiskQueue(HostQueue[Compiled]):
    """Both the compute and the copy queue of DISK: copies, signals, waits, timestamps and barriers, run on submit."""
