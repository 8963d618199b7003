"""Progress lines on stderr for long work (BEAM search, compiling, large files, training): one line redrawn in place,
shown only once the work has run for `DELAY_S`, and only where `LAZY_PROGRESS` says (by default on an interactive
terminal; elsewhere nothing at all is written). No dependencies; a bar may be updated from several threads."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from typing import IO

from lazy.helpers import PROGRESS

DELAY_S = 0.5  # a bar appears once its work has run this long: quick calls never flash one
REDRAW_S = 0.1  # and is redrawn at most this often
BAR_CELLS = 20  # width of the bar drawn for work with a known total
RATE_SMOOTHING = 0.3  # weight of the latest redraw interval in the shown rate: a slow start (compiling) fades out

# One terminal line is shared by every bar of every thread. Bars open at the same time (a compile inside a training
# step) nest: the newest one that has run past its delay owns the line (the inner one wins); when it closes, the
# line goes back to the bar that had it before.
_lock = threading.RLock()
_open: list[Bar] = []  # bars that draw and are not closed yet, oldest first
_line = ""  # the text a bar left on the line ("" when the line is clean)
_line_stream: IO[str] | None = None  # the stream that line is on


def enabled(stream: IO[str]) -> bool:
    """Whether bars draw on `stream`: `LAZY_PROGRESS` above 0 always, 0 never, below 0 when it is a terminal."""
    setting = int(PROGRESS.value)
    if setting == 0:
        return False
    if setting > 0:
        return True
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # not a file, or a closed one
        return False


class Bar:
    """One piece of long work, drawn on stderr: `with Bar("compiling", total=n, unit="kernels") as bar: bar.update()`.

    The line reads `desc: count[/total percent [bar]], rate/s, time so far[, eta], postfix`, e.g.
    `saving model.safetensors: 120.0/512.0 MB  23% [####................], 95.3 MB/s, 1.3 s, eta 4.1 s`.
    `unit="B"` counts bytes and shows them in kB, MB or GB. `delay` (default `DELAY_S`) is how long the work runs
    before the line appears; `leave` keeps the final line when the bar closes (else it is cleared); `show=False` gives
    a bar that counts but never draws (work too small to be worth a line); `clock` is the time source (tests fake it).
    Every method may be called from any thread."""

    def __init__(self, desc: str, total: float | None = None, unit: str = "", *, delay: float | None = None,
                 leave: bool = True, show: bool = True, clock: Callable[[], float] | None = None):  # fmt: skip
        self.desc, self.total, self.unit = desc, total, unit
        self.delay = DELAY_S if delay is None else delay
        self.leave, self.clock = leave, clock or time.perf_counter
        self.stream: IO[str] = sys.stderr
        self.n: float = 0
        self.postfix = ""
        self.start = self.clock()
        self.drawn_at: float | None = None  # when it last drew
        self.rate: float | None = None  # units a second, smoothed over the redraws (None: the average so far)
        self.sampled = (self.start, 0.0)  # (time, count) when the rate was last measured
        self.closed = False
        self.draws = show and enabled(self.stream)
        if self.draws:
            with _lock:
                _open.append(self)

    def __enter__(self) -> Bar:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def update(self, n: float = 1, postfix: str | None = None) -> None:
        """Count `n` more units done (0: only set the postfix) and redraw if the last redraw is `REDRAW_S` old."""
        with _lock:
            self.n += n
            if postfix is not None:
                self.postfix = postfix
            if self.draws and not self.closed:
                self._draw(final=False)

    def refresh(self) -> None:
        """Redraw if due, counting nothing: keeps the time moving while one long unit of work runs."""
        self.update(0)

    def close(self, postfix: str | None = None) -> None:
        """End the bar, with a last `postfix` if given. If it is on the line, the line is finished with a newline
        (`leave`) or cleared; the bar it took the line from draws again."""
        with _lock:
            if self.closed:
                return
            if postfix is not None:
                self.postfix = postfix
            if self.draws:
                self._draw(final=True)
                _open.remove(self)
            self.closed = True
            if (previous := _owner()) is not None and previous.drawn_at is not None:
                previous._draw(final=False, force=True)

    def due(self) -> bool:
        """Whether the work has run long enough to be shown."""
        return self.clock() - self.start >= self.delay

    def _draw(self, final: bool, force: bool = False) -> None:
        """Write the line (holding `_lock`) if this bar owns it and it is time to."""
        if _owner() is not self:
            return
        now = self.clock()
        if not (final or force) and self.drawn_at is not None and now - self.drawn_at < REDRAW_S:
            return
        self.drawn_at = now
        self._measure_rate(now, final)
        if final and not self.leave:
            _clear_line()
            return
        text = _fit(self.render(now), self.stream)
        if not final:
            _put("\r" + text + " " * max(0, len(_line) - len(text)), text, self.stream)
            return
        if len(text) < len(_line):  # the line that stays gets no trailing blanks
            _clear_line()
        _put("\r" + text + "\n", "", self.stream)

    def _measure_rate(self, now: float, final: bool) -> None:
        then, count = self.sampled
        if final or now <= then:  # the final line shows the average of the whole run
            self.rate = None if final else self.rate
            return
        latest = (self.n - count) / (now - then)
        self.rate = latest if self.rate is None else RATE_SMOOTHING * latest + (1 - RATE_SMOOTHING) * self.rate
        self.sampled = (now, self.n)

    def render(self, now: float) -> str:
        """The line's text at time `now` (of `clock`)."""
        elapsed = now - self.start
        rate = self.rate if self.rate is not None else self.n / elapsed if elapsed > 0 else None
        rate = rate if rate and self.n else None
        if self.total:
            fraction = min(max(self.n / self.total, 0.0), 1.0)
            cells = int(fraction * BAR_CELLS)
            count = f"{_number(self.n, self.unit, self.total)}/{_number(self.total, self.unit, self.total)}"
            shown = f"{count}{_unit(self.unit, self.total)} {fraction * 100:3.0f}% [{'#' * cells:.<{BAR_CELLS}}]"
        else:
            shown = _number(self.n, self.unit, self.n) + _unit(self.unit, self.n)
        parts = [f"{self.desc}: {shown}"]
        if rate is not None:
            parts.append(f"{_number(rate, self.unit, rate)}{_unit(self.unit, rate)}/s")
        parts.append(_duration(elapsed))
        if self.total and rate is not None and self.n < self.total:
            parts.append(f"eta {_duration((self.total - self.n) / rate)}")
        if self.postfix:
            parts.append(self.postfix)
        return ", ".join(parts)


progress = Bar  # reads well where it is used: `with progress("saving", total=nbytes, unit="B") as bar:`


def write(text: str, file: IO[str] | None = None, flush: bool = False) -> None:
    """`print(text, file=file, flush=flush)` that leaves a bar's line intact: the line is cleared first and drawn
    again after. With no bar on the line it is exactly that `print`."""
    with _lock:
        drawn = _line != ""
        _clear_line()
        print(text, file=file if file is not None else sys.stdout, flush=flush)
        if drawn and (owner := _owner()) is not None:
            owner._draw(final=False, force=True)


def _owner() -> Bar | None:
    """The bar that draws on the line: the newest open one that has run past its delay."""
    return next((bar for bar in reversed(_open) if bar.due()), None)


def _put(data: str, line: str, stream: IO[str]) -> None:
    global _line, _line_stream
    try:
        stream.write(data)
        stream.flush()
    except (OSError, ValueError):  # a closed or broken stderr must not break the work it reports on
        pass
    _line, _line_stream = line, stream


def _clear_line() -> None:
    if _line and _line_stream is not None:
        _put("\r" + " " * len(_line) + "\r", "", _line_stream)


def _fit(text: str, stream: IO[str]) -> str:
    """`text` cut to the terminal's width less one column: a line that wraps cannot be redrawn in place."""
    try:
        columns = os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, ValueError, OSError):  # no terminal (a pipe or a file under LAZY_PROGRESS=1)
        return text
    if columns <= 0:  # a terminal that does not know its size (a new pseudo-terminal reports 0)
        return text
    return text if len(text) < columns else text[: columns - 1]


_BYTE_UNITS = ((1e9, "GB"), (1e6, "MB"), (1e3, "kB"), (1.0, "B"))


def _byte_unit(scale: float) -> tuple[float, str]:
    return next(((factor, name) for factor, name in _BYTE_UNITS if scale >= factor), _BYTE_UNITS[-1])


def _number(value: float, unit: str, scale: float) -> str:
    """`value` as shown: bytes in the decimal unit `scale` calls for, other counts with k or M past 10000."""
    if unit == "B":
        factor, _ = _byte_unit(scale)
        return f"{value:.0f}" if factor == 1 else f"{value / factor:.1f}"
    if value >= 1e6:
        return f"{value / 1e6:.1f}M"
    if value >= 1e4:
        return f"{value / 1e3:.1f}k"
    return f"{value:.0f}" if value == int(value) or value >= 100 else f"{value:.1f}"


def _unit(unit: str, scale: float) -> str:
    name = _byte_unit(scale)[1] if unit == "B" else unit
    return f" {name}" if name else ""


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}:{secs:02d}" if minutes < 60 else f"{minutes // 60}:{minutes % 60:02d}:{secs:02d}"
