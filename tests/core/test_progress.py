"""Progress lines (`lazy.progress`): drawn after a delay, throttled, ended cleanly, silent where `LAZY_PROGRESS` says,
one line shared by threads and nested bars; and the work that uses them: BEAM search, safetensors saves and loads,
PyTorch checkpoint loads, a training example under a pseudo-terminal. Clocks are faked; nothing is timed."""

from __future__ import annotations

import fcntl
import io
import os
import pathlib
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import threading
import time

import numpy as np
import pytest

import lazy.progress
from lazy import Context, Device, Tensor
from lazy.codegen import search
from lazy.nn import state
from lazy.ops import Ops
from lazy.progress import progress, write

ROOT = pathlib.Path(__file__).resolve().parents[2]


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class Clock:
    """A clock the test sets (`clock.now = 0.6`), which also moves on by `step` seconds at every reading."""

    def __init__(self, step: float = 0.0) -> None:
        self.now, self.step = 0.0, step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


def capture_stderr(monkeypatch) -> io.StringIO:
    """Replace stderr by a stream that is not a terminal and return it. (Called in the test itself: pytest puts its
    own capture back into `sys.stderr` between a fixture's setup and the test.)"""
    stream = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stream)
    return stream


def redraws(text: str) -> list[str]:
    return [part for part in text.split("\r") if part.strip()]


# -- the bar -----------------------------------------------------------------------------------------------------------


def test_a_bar_appears_after_its_delay_redraws_at_most_ten_times_a_second_and_ends_with_a_newline(monkeypatch):
    stderr = capture_stderr(monkeypatch)
    clock = Clock()
    with Context(PROGRESS=1), progress("compiling", total=10, unit="kernels", clock=clock) as bar:
        for now in (0.1, 0.2, 0.3, 0.4):  # quick work never shows a bar
            clock.now = now
            bar.update()
        assert stderr.getvalue() == ""
        for now in (0.5, 0.55, 0.58, 0.625, 0.65, 0.75):
            clock.now = now
            bar.update()
        clock.now = 0.8
    lines = redraws(stderr.getvalue())
    assert [line.split(",")[0] for line in lines] == [
        "compiling: 5/10 kernels  50% [##########..........]",  # 0.5
        "compiling: 8/10 kernels  80% [################....]",  # 0.625: 0.55 and 0.58 were too soon
        "compiling: 10/10 kernels 100% [####################]",  # 0.75
        "compiling: 10/10 kernels 100% [####################]",  # closed at 0.8: the final line stays
    ]
    assert "eta 0.1 s" in lines[1] and "kernels/s" in lines[1]
    assert stderr.getvalue().endswith("\n") and stderr.getvalue().count("\n") == 1


def test_the_postfix_and_bytes_in_megabytes(monkeypatch):
    stderr = capture_stderr(monkeypatch)
    clock = Clock()
    with Context(PROGRESS=1), progress("saving model.safetensors", total=512e6, unit="B", clock=clock) as bar:
        clock.now = 2.0
        bar.update(128e6, postfix="syncing to disk")
    drawn, final = redraws(stderr.getvalue())
    assert (
        drawn == "saving model.safetensors: 128.0/512.0 MB  25% [#####...............], 64.0 MB/s, 2.0 s, eta 6.0 s, "
        "syncing to disk"
    )
    assert final == drawn + "\n"  # closed at the same moment


def test_a_bar_without_a_total_counts(monkeypatch):
    stderr = capture_stderr(monkeypatch)
    clock = Clock()
    with Context(PROGRESS=1), progress("BEAM kernel 1 (r_8_8)", unit="candidates", clock=clock) as bar:
        clock.now = 1.0
        bar.update(12, postfix="best 3.1 us")
        bar.close("best 3.1 us, done")
    assert (
        redraws(stderr.getvalue())[-1]
        == "BEAM kernel 1 (r_8_8): 12 candidates, 12 candidates/s, 1.0 s, best 3.1 us, done\n"
    )


@pytest.mark.parametrize("setting", [0, -1])
def test_off_or_not_a_terminal_nothing_at_all_is_written(monkeypatch, setting):
    stream = Terminal() if setting == 0 else io.StringIO()  # 0: not even on a terminal; -1: not on a file
    monkeypatch.setattr(sys, "stderr", stream)
    with Context(PROGRESS=setting), progress("saving", total=100, unit="B", delay=0) as bar:
        for _ in range(100):
            bar.update(1, postfix="x")
        bar.refresh()
    assert stream.getvalue() == "" and bar.n == 100


def test_the_default_draws_on_a_terminal_and_show_false_never_draws(monkeypatch):
    monkeypatch.setattr(sys, "stderr", Terminal())
    with progress("loading", total=4, delay=0) as bar, progress("small", delay=0, show=False) as quiet:
        quiet.update(3)  # (the bar that draws is the one that is not quiet, although older)
        bar.update(4)
    out = sys.stderr.getvalue()
    assert out.startswith("\rloading: 4/4 100%") and out.endswith("\n") and "small" not in out


def read_line(fd: int) -> str:
    """What the terminal got, up to the final newline: a read may return the first write alone."""
    data = b""
    while not data.endswith(b"\n") and select.select([fd], [], [], 5)[0]:
        data += os.read(fd, 4096)
    return data.decode()


def test_a_line_is_cut_to_the_terminal_width_and_one_without_a_known_width_is_not_cut(monkeypatch):
    controller, terminal = pty.openpty()
    stream = os.fdopen(terminal, "w")
    monkeypatch.setattr(sys, "stderr", stream)
    clock = Clock()
    try:
        drawn = {}
        for columns in (40, 0):  # a new pseudo-terminal reports 0 columns until someone sets its size
            fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
            with Context(PROGRESS=-1), progress("x" * 60, total=2, clock=clock) as bar:
                clock.now += 1.0
                bar.update(1)
            drawn[columns] = redraws(read_line(controller).replace("\n", ""))
    finally:
        stream.close()
        os.close(controller)
    line = "x" * 60 + ": 1/2  50% [##########..........], 1/s, 1.0 s, eta 1.0 s"
    assert drawn == {
        40: [line[:39]] * 2,
        0: [line] * 2,
    }  # (drawn, then the final line) a wrapped line cannot be redrawn


def test_write_keeps_the_line_and_is_print_without_a_bar(monkeypatch, capsys):
    write("plain", flush=True)
    assert capsys.readouterr() == ("plain\n", "")
    err = Terminal()
    monkeypatch.setattr(sys, "stderr", err)
    clock = Clock()
    with progress("training", total=10, delay=0, clock=clock) as bar:
        clock.now = 1.0
        bar.update(5)
        line = err.getvalue()[1:]
        write("epoch 1")
        assert capsys.readouterr().out == "epoch 1\n"
        assert err.getvalue() == "\r" + line + "\r" + " " * len(line) + "\r" + "\r" + line  # cleared, drawn again


def test_nested_bars_the_inner_one_wins_then_gives_the_line_back(monkeypatch):
    stderr = capture_stderr(monkeypatch)
    outer_clock, inner_clock = Clock(), Clock()
    with Context(PROGRESS=1), progress("training", total=100, clock=outer_clock) as outer:
        outer_clock.now = 1.0
        outer.update(10)
        inner = progress("compiling", total=3, clock=inner_clock, leave=False)
        outer_clock.now = 2.0
        outer.update(10)  # the inner bar has not run past its delay: the outer one still draws
        inner_clock.now = 1.0
        inner.update(1)  # now it has: the line is the inner one's
        outer_clock.now = 3.0
        outer.update(10)  # (no redraw: the line is taken)
        inner_clock.now = 1.2
        inner.update(2)
        before_close = stderr.getvalue()
        inner.close()  # cleared, and the outer bar draws again at once
        after_close = stderr.getvalue()[len(before_close) :]
    assert [line.split(":")[0] for line in redraws(before_close)] == ["training", "training", "compiling", "compiling"]
    assert re.match(r"\r +\r\rtraining: 30/100 ", after_close), after_close


class SlowStream(io.StringIO):
    """A stream that lets other threads run between the characters it writes."""

    def write(self, text: str) -> int:
        for char in text:
            super().write(char)
            time.sleep(0)
        return len(text)


def test_threads_share_one_bar_and_never_tear_the_line(monkeypatch):
    stream = SlowStream()
    monkeypatch.setattr(sys, "stderr", stream)
    monkeypatch.setattr(lazy.progress, "REDRAW_S", 0.0)  # every update draws
    threads, each = 4, 50
    with Context(PROGRESS=1), progress("compiling", total=threads * each, unit="kernels", delay=0) as bar:

        def work() -> None:
            for _ in range(each):
                bar.update()

        workers = [threading.Thread(target=work) for _ in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
    assert bar.n == threads * each
    lines = redraws(stream.getvalue())
    assert all(re.fullmatch(r"compiling: \d+/200 kernels +\d+% \[[#.]{20}\].*s *\n?", line) for line in lines), lines
    assert lines[-1].startswith("compiling: 200/200 kernels 100%") and lines[-1].endswith("\n")


# -- BEAM search -------------------------------------------------------------------------------------------------------


def row_sum_ast():
    x = Tensor(np.arange(64, dtype=np.float32).reshape(8, 8) / 64, device="PYTHON").realize()
    (ast,) = [si.ast for si in (x * 2).sum(axis=1).schedule() if si.ast.op is Ops.SINK]
    return ast


@pytest.mark.usefixtures("fresh_search")
def test_a_beam_search_shows_candidates_tried_and_the_best_time(monkeypatch):
    stderr = capture_stderr(monkeypatch)
    monkeypatch.setattr(search, "_clock", Clock(step=0.05))
    with Context(PROGRESS=1):
        search.beam_search(row_sum_ast(), Device["PYTHON"], 2)
    lines = redraws(stderr.getvalue())
    assert len(lines) > 1, lines
    pattern = r"BEAM kernel \d+ \(\w+\): \d+ candidates, [\d.k]+ candidates/s, [\d.]+ s, best [\d.]+ us"
    assert all(re.match(pattern, line) for line in lines), lines
    assert lines[-1].endswith(", done\n") and stderr.getvalue().count("\n") == 1
    search._results.clear()
    with Context(PROGRESS=0):  # off: the same slow search writes nothing
        before = stderr.getvalue()
        search.beam_search(row_sum_ast(), Device["PYTHON"], 2)
    assert stderr.getvalue() == before


# -- files -------------------------------------------------------------------------------------------------------------


class Model:
    def __init__(self) -> None:
        self.weights = [Tensor(np.zeros((256, 1024), np.float32), device="PYTHON").realize() for _ in range(3)]  # 1 MB


def test_safetensors_saves_and_loads_over_the_threshold_show_megabytes(monkeypatch, tmp_path):
    stderr = capture_stderr(monkeypatch)
    monkeypatch.setattr(lazy.progress, "DELAY_S", 0.0)
    monkeypatch.setattr(lazy.progress, "REDRAW_S", 0.0)  # every step drawn
    path = tmp_path / "model.safetensors"
    tensors = {f"weights.{i}": Tensor(np.full((256, 1024), i, np.float32), device="PYTHON") for i in range(3)}
    with Context(PROGRESS=1):
        state.safe_save(tensors, path)  # 3 MB, under the default threshold: no line
        model = Model()
        state.load_state_dict(model, state.safe_load(path))
        assert stderr.getvalue() == ""
        monkeypatch.setattr(state, "PROGRESS_MIN_BYTES", 1 << 20)
        state.safe_save(tensors, path)
        saved = stderr.getvalue()
        state.load_state_dict(model, state.safe_load(path))
        loaded = stderr.getvalue()[len(saved) :]
        state.load_state_dict(model, state.safe_load(path), verbose=False)  # tinygrad's switch for its bar
        assert stderr.getvalue() == saved + loaded
    assert redraws(saved)[-1].startswith("saving model.safetensors: 3.1/3.1 MB 100% [") and saved.endswith(", saved\n")
    assert "syncing to disk" in saved
    assert redraws(loaded)[-1].startswith("loading 3 tensors: 3.1/3.1 MB 100% [") and loaded.endswith("\n")
    assert [w.numpy()[0, 0] for w in model.weights] == [0, 1, 2]


def test_a_torch_checkpoint_load_shows_the_bytes_read(monkeypatch):
    stderr = capture_stderr(monkeypatch)
    monkeypatch.setattr(lazy.progress, "DELAY_S", 0.0)
    monkeypatch.setattr(state, "PROGRESS_MIN_BYTES", 0)
    with Context(PROGRESS=1):
        state.torch_load(ROOT / "tests" / "data" / "tiny_checkpoint.pt", device="PYTHON")
    assert re.match(r"loading tiny_checkpoint\.pt: \d+/\d+ B 100% \[#+\]", redraws(stderr.getvalue())[-1])


# -- a training example on a terminal ----------------------------------------------------------------------------------

# runs examples/digits.py as its own process would, with bars drawn at once (the run may take under DELAY_S)
RUN_EXAMPLE = (
    "import runpy, sys; sys.path.insert(0, 'examples'); import lazy.progress; lazy.progress.DELAY_S = 0.0; "
    "sys.argv = ['digits.py', '--epochs', '2', '--batch', '256', '--device', 'CPU']; "
    "runpy.run_path('examples/digits.py', run_name='__main__')"
)


def run_on_a_terminal(code: str, timeout: float = 120) -> str:
    """Everything a Python process running `code` writes to its terminal (stdout and stderr: one pseudo-terminal)."""
    controller, terminal = pty.openpty()
    env = {k: v for k, v in os.environ.items() if k != "LAZY_PROGRESS"}
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=terminal, stdout=terminal, stderr=terminal, cwd=ROOT,
                            env=env)  # fmt: skip
    os.close(terminal)
    chunks = []
    try:
        while select.select([controller], [], [], timeout)[0]:
            try:
                data = os.read(controller, 65536)
            except OSError:  # EIO: the process has closed the terminal
                break
            if not data:
                break
            chunks.append(data)
    finally:
        os.close(controller)
    out = b"".join(chunks).decode(errors="replace")
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise AssertionError(f"still running after {timeout} s; its output:\n{out}") from None
    assert proc.returncode == 0, out
    return out


def test_a_training_example_on_a_terminal_shows_epochs_loss_and_samples_per_second():
    out = run_on_a_terminal(RUN_EXAMPLE)
    bars = [line for line in redraws(out.replace("\n", "\r")) if line.startswith("training:")]
    assert any("epoch 1/2, loss " in line for line in bars) and "epoch 2/2, loss " in bars[-1], out
    assert re.search(r"training: 2560/2560 samples 100% \[#+\], [\d.k]+ samples/s", bars[-1]), out
    assert re.search(r"\repoch   1  loss [\d.]+  \([\d.]+ s\)\r\n", out), out  # the printed lines are kept whole
    assert re.search(r"\repoch   2  loss [\d.]+  \([\d.]+ s\)\r\n", out), out
