"""The profiler (`lazy.profile`): events of a known program (kernels, a copy, compiles, jit replays) on the right
device tracks with plausible times and the test's own call sites, the Chrome trace file (`Profile`, and
`LAZY_PROFILE` at exit), the `LAZY_DEBUG=2` summary, and listeners called safely from the thread that finished the
work. Durations are checked for order and sign only: timing belongs in bench/."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from lazy import Context, Tensor, TinyJit, profile
from lazy.plugins import Device

HERE = os.path.basename(__file__)


def kernels_on(events: list[profile.Event], device: str) -> list[profile.Event]:
    return [e for e in events if e.kind == "kernel" and e.device == device]


def assert_in_order(events: list[profile.Event]) -> None:
    """Work of one in-order queue: each starts after the previous one ended, none takes negative time."""
    for e in events:
        assert e.duration > 0, e
    for before, after in zip(events, events[1:]):
        assert before.start + before.duration <= after.start, (before, after)


def test_trace_of_a_matmul_an_add_a_copy_and_a_jit_replay(tmp_path):
    a, b = np.arange(12, dtype=np.float32).reshape(3, 4), np.ones((4, 2), dtype=np.float32)
    x, y = Tensor(a, device="PYTHON").realize(), Tensor(b, device="PYTHON").realize()
    jf = TinyJit(lambda t: ((t + 1) * 2).contiguous().sum(0).realize())
    for _ in range(2):  # run, capture
        jf(x)
    path = tmp_path / "trace.json"
    with profile.Profile(str(path)) as prof:
        out = (x @ y).realize()
        bumped = (out + 1).realize()
        moved = bumped.to("PYTHON:1").realize()
        jf(x)
    np.testing.assert_allclose(moved.numpy(), a @ b + 1)
    events = prof.events

    eager = kernels_on(events, "PYTHON")
    assert [e.name[0] for e in eager[:2]] == ["r", "E"]  # the matmul (a reduce), then the add
    assert len({e.args["realize"] for e in eager[:2]}) == 2 and all(HERE in e.args["callsite"] for e in eager)
    assert eager[0].args["flops"] > 0 and eager[0].args["bytes"] > 0 and len(eager[0].args["digest"]) == 64
    replayed = eager[2:]  # PYTHON replays a jit through core's HCQGraph: one event per kernel, as captured
    assert [e.name for e in replayed] == [ei.runner.name for ei in jf.jit_cache]
    assert len(jf.graph_batches) == 1 and len({e.args["realize"] for e in replayed}) == 1
    assert_in_order(eager)

    copies = [e for e in events if e.kind == "copy"]
    assert [(c.device, c.queue, c.args["bytes"], c.args["src"]) for c in copies] == [("PYTHON:1", "copy", 24, "PYTHON")]
    compiles = [e for e in events if e.kind == "compile"]
    assert {e.name for e in compiles} >= {eager[0].name, eager[1].name} and all(e.queue == "compiler" for e in compiles)

    trace = json.loads(path.read_text())
    processes = {e["pid"]: e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "process_name"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"}
    complete = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert all(e["ph"] in ("X", "M") for e in trace["traceEvents"]) and len(complete) == len(events)
    track = {(processes[e["pid"]], threads[(e["pid"], e["tid"])]) for e in complete if e["cat"] == "kernel"}
    assert track == {("PYTHON", "compute")}
    copy = next(e for e in complete if e["cat"] == "copy")
    assert (processes[copy["pid"]], threads[(copy["pid"], copy["tid"])]) == ("PYTHON:1", "copy")
    matmul = next(e for e in complete if e["name"] == eager[0].name and e["cat"] == "kernel")
    assert matmul["dur"] > 0 and matmul["args"]["GFLOP/s"] >= 0 and "GB/s" in matmul["args"]
    assert matmul["args"]["global_size"] is not None and HERE in matmul["args"]["callsite"]


def test_realize_numbers_and_the_origin_of_helper_threads():
    x = Tensor([1.0, 2.0], device="PYTHON").realize()
    with profile.Profile() as prof:
        (x * 3).realize()
        first = profile.realize_id()
        (x * 4).realize()
    assert profile.realize_id() == first + 1
    assert [e.args["realize"] for e in kernels_on(prof.events, "PYTHON")] == [first, first + 1]
    where = profile.origin()
    assert HERE in where.callsite
    with profile.adopt(profile.Origin(99, "elsewhere:1 f")):
        assert profile.origin() == profile.Origin(99, "elsewhere:1 f")
    assert profile.origin() == where


def test_cpu_kernels_are_timed_on_the_queue_and_reported_by_the_thread_that_ran_them():
    x = Tensor.ones(512, 512, device="CPU").contiguous().realize()  # big enough for the queue worker
    seen: list[tuple[profile.Event, str]] = []
    stop = profile.subscribe(lambda e: seen.append((e, threading.current_thread().name)))
    try:
        outs = [(x + i).realize() for i in range(1, 4)]  # submitted back to back, no wait between
        Device["CPU"].synchronize()
        kernels = [e for e, _ in seen if e.kind == "kernel"]
        assert len(kernels) == 3  # delivered by the time the device is idle, without a flush
    finally:
        stop()
    assert_in_order(kernels)
    assert all(HERE in e.args["callsite"] for e in kernels)
    assert float(outs[2][0, 0].item()) == 4.0


def test_cpu_jit_replay_is_one_graph_event_naming_its_kernels():
    jf = TinyJit(lambda t: ((t + 1) * 2).contiguous().sum(0).realize())
    x = Tensor.ones(8, 8, device="CPU").contiguous().realize()
    for _ in range(2):
        jf(x)
    with profile.Profile() as prof:
        jf(x)
    graphs = [e for e in prof.events if e.kind == "graph"]
    # the host devices replay a graph in one native call: one event with the kernels' names and digests
    assert [e.args["kernels"] for e in graphs] == [[ei.runner.name for ei in jf.jit_cache]]
    assert graphs[0].duration > 0 and graphs[0].device == "CPU" and HERE in graphs[0].args["callsite"]
    assert len(graphs[0].args["digests"]) == len(jf.jit_cache)


def test_host_transfers_in_and_out_are_events_of_their_own_track():
    data = np.arange(1000, dtype=np.float32)
    with profile.Profile() as prof:
        t = Tensor(data, device="CPU").realize()
        back = (t + 1).numpy()
    transfers = [e for e in prof.events if e.kind == "transfer"]
    assert [(e.name, e.args["bytes"]) for e in transfers] == [("host -> CPU", 4000), ("CPU -> host", 4000)], transfers
    assert all(e.queue == "host transfers" and e.duration > 0 and HERE in e.args["callsite"] for e in transfers)
    np.testing.assert_array_equal(back, data + 1)


def test_a_failing_listener_is_reported_once_and_the_work_goes_on(capsys):
    x = Tensor([1.0, 2.0], device="PYTHON").realize()

    def broken(event: profile.Event) -> None:
        raise ValueError("listener bug")

    stop = profile.subscribe(broken)
    try:
        with profile.Profile() as prof:
            assert (x + 5).tolist() == [6.0, 7.0]
            assert (x + 6).tolist() == [7.0, 8.0]
    finally:
        stop()
    assert len(kernels_on(prof.events, "PYTHON")) == 2  # the other listener still gets everything
    assert capsys.readouterr().err.count("listener bug") == 1


def test_off_when_nobody_listens():
    with Context(PROFILE="", DEBUG=0, VIZ=0):
        if profile._listeners:
            pytest.skip("a listener from elsewhere in this process is subscribed")
        assert not profile.active()
        (Tensor([1.0], device="PYTHON") + 1).realize()
        assert not profile.pending


PROGRAM = """
from lazy import Tensor
a = Tensor.ones(4, 4).contiguous().realize()
print((a @ a + 1).tolist()[0][0])
"""


@pytest.fixture(scope="module")
def at_exit(tmp_path_factory):
    """One process run with LAZY_PROFILE and LAZY_DEBUG=2: its trace file and what it printed at exit."""
    path = tmp_path_factory.mktemp("profile") / "exit.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAZY_")}
    env |= {"LAZY_DEVICE": "PYTHON", "LAZY_PROFILE": str(path), "LAZY_DEBUG": "2"}
    proc = subprocess.run([sys.executable, "-c", PROGRAM], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return path, proc


def test_lazy_profile_writes_the_trace_at_exit(at_exit):
    path, proc = at_exit
    trace = json.loads(path.read_text())
    kernels = [e for e in trace["traceEvents"] if e["ph"] == "X" and e["cat"] == "kernel"]
    assert any(e["name"].startswith("r_") for e in kernels), kernels
    # the lines of the `python -c` program that realized them
    assert {e["args"]["callsite"] for e in kernels} == {"<string>:3 <module>", "<string>:4 <module>"}
    assert f"profile written to {path}" in proc.stderr


def test_debug_2_prints_a_line_per_kernel_and_a_summary_at_exit(at_exit):
    path, proc = at_exit
    names = {e["name"] for e in json.loads(path.read_text())["traceEvents"] if e["ph"] == "X" and e["cat"] == "kernel"}
    summary = proc.stderr[proc.stderr.index("profile summary") :]
    assert "GFLOP/s" in summary and "cache" in summary
    assert all(name in summary for name in names)
    assert all(name in proc.stdout for name in names)  # the per-run lines, as before
    assert proc.stdout.splitlines()[-1] == "5.0"


def test_trace_lanes_keep_overlapping_work_apart():
    events = [profile.Event("compile", f"k{i}", "CPU", "compiler", start, 1.0) for i, start in enumerate((0, 0.5, 2))]
    trace = profile.trace(events)
    lanes = {e["tid"] for e in trace["traceEvents"] if e["ph"] == "X"}
    names = {e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"}
    assert len(lanes) == 2 and names == {"compiler", "compiler 2"}


def test_a_kernel_queued_behind_a_wait_starts_when_the_queue_gets_to_it():
    # the time on the queue, not the host's submit time: held behind a gate, the kernel cannot start before it opens
    x = Tensor.ones(4, device="CPU").contiguous().realize()
    (x + 1).realize()  # compiled beforehand
    dev = Device["CPU"]
    gate = dev.signal_t(0)
    dev.compute_queue_t().wait(gate, 1).signal(dev.timeline_signal, dev.next_value()).submit(dev)
    with profile.Profile() as prof:
        (x + 1).realize()
        opened = time.perf_counter()
        gate.value = 1
    (kernel,) = kernels_on(prof.events, "CPU")
    assert kernel.start >= opened
