"""The kernel graph viewer without a browser: what a trace records for known programs (graph, why each buffer got
memory, which nodes fused into which kernel, each kernel's program and time), the server (page, JSON, a port in
use), `python -m lazy viz` on bad trace files, and LAZY_VIZ at exit. PYTHON reference device."""

from __future__ import annotations

import json
import os
import pty
import signal
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator

import numpy as np
import pytest

import lazy.viz.capture as capture
from lazy import Context, Device, Tensor
from lazy.__main__ import main
from lazy.codegen.program import build_kernel, get_program
from lazy.engine import realize
from lazy.viz import TRACE_VERSION, recording
from lazy.viz.page import PAGE
from lazy.viz.server import TraceFileError, load_trace, make_server

D = "PYTHON"


@pytest.fixture
def ab() -> tuple[Tensor, Tensor]:
    rng = np.random.default_rng(0)
    return (Tensor(rng.standard_normal((16, 16), dtype=np.float32), device=D).realize(),
            Tensor(rng.standard_normal((16, 16), dtype=np.float32), device=D).realize())  # fmt: skip


def forget_kernels(*asts) -> None:
    """Drop these kernels from the method cache, as in a fresh process (other kernels stay compiled)."""
    for key in [key for key in realize.method_cache if key[1] in asts]:
        del realize.method_cache[key]


def matmul_relu_sum(a: Tensor, b: Tensor) -> tuple[dict, list]:
    """The trace of `(a @ b).relu().sum()` and its schedule (taken first, so the kernels are known)."""
    schedule = [si for si in (a @ b).relu().sum().schedule() if si.kind == "kernel"]
    forget_kernels(*(si.ast for si in schedule))
    with recording() as trace:
        out = (a @ b).relu().sum()
        out.realize()
    np.testing.assert_allclose(out.numpy(), np.maximum(a.numpy() @ b.numpy(), 0).sum(), rtol=1e-4)
    return trace.data(), schedule


def test_trace_of_a_matmul_relu_sum(ab):
    data, schedule = matmul_relu_sum(*ab)
    assert data["format"] == "lazy-viz-trace" and data["version"] == TRACE_VERSION
    json.dumps(data)  # plain data all through
    (r,) = data["realizes"]
    assert r["callsite"].startswith(os.path.relpath(__file__)) and "matmul_relu_sum" in r["callsite"]
    nodes, items = r["nodes"], r["items"]
    assert [item["kind"] for item in items] == ["kernel", "kernel"]
    renderer = Device[D].renderer
    for item, si in zip(items, schedule):
        assert item["digest"] == si.ast.digest.hex()
        kernel = data["kernels"][item["digest"]]
        program = kernel["programs"][item["program"]]
        spec = get_program(si.ast, renderer)
        assert (program["name"], program["source"]) == (spec.name, spec.src)
        assert program["opts"] == [repr(opt) for opt in build_kernel(si.ast, renderer).applied_opts]
        assert program["opts_from"] == "heuristics" and not program.get("regenerated")
        assert program["uops"].count("\n") > 10 and "DEFINE_GLOBAL" in program["uops"]
        assert "SINK" in kernel["ast"] and "STORE" in kernel["ast"]
        assert len(item["times"]) == 1 and item["times"][0] > 0, "the kernel's time, from lazy.profile"
        assert kernel["times"] == item["times"]
    # the graph: two inputs in memory, the matmul's reduce realized (its sum is of another size), the relu and the
    # second sum fused into the output's kernel
    ops = [(n["op"], n["realized"]) for n in nodes]
    inputs = [i for i, n in enumerate(nodes) if n["realized"]]
    assert len(inputs) == 2 and items[0]["inputs"] == inputs
    (mul,) = [i for i, (op, done) in enumerate(ops) if op == "MUL" and not done]
    sums = [i for i, (op, _) in enumerate(ops) if op == "SUM"]
    (relu,) = [i for i, (op, _) in enumerate(ops) if op == "MAX"]
    assert nodes[mul]["srcs"] == inputs and all(v is not None and "->" in v for v in nodes[mul]["views"])
    assert nodes[sums[0]]["reason"].startswith("reduce not fused: a consumer has another size")
    assert nodes[sums[1]]["reason"] == "output" and r["outputs"] == [sums[1]]
    assert nodes[relu]["reason"] is None and nodes[mul]["reason"] is None
    assert set(items[0]["nodes"]) == {mul, sums[0]} and items[0]["output"] == sums[0]
    assert {relu, sums[1]} <= set(items[1]["nodes"]) and items[1]["inputs"] == [sums[0]]


def test_reasons_a_buffer_gets_memory():
    a = Tensor(np.arange(24, dtype=np.float32).reshape(4, 6), device=D).realize()
    with recording() as trace:
        expanded = (a + 1).reshape(4, 1, 6).expand(4, 3, 6) * 2
        padded = (a * 3).exp().pad(((1, 1), (0, 0))) + 1
        forced = (a - 1).contiguous() * 2
        copied = (a * 5).to(f"{D}:1") + 1
        Tensor.realize(expanded, padded, forced, copied)
    (r,) = trace.data()["realizes"]
    reasons = {n["reason"].split(":")[0] for n in r["nodes"] if n["reason"]}
    assert reasons == {"output", "expanded", "padded", "forced to memory (.contiguous())", "a copy", "source of a copy"}
    (copy,) = [item for item in r["items"] if item["kind"] == "copy"]
    assert (copy["src_device"], copy["device"], copy["bytes"]) == (D, f"{D}:1", 4 * 24)
    assert r["nodes"][copy["output"]]["op"] == "COPY" and len(copy["times"]) == 1
    assert len(r["items"]) == 9 and all(item["times"] for item in r["items"])


def test_the_program_cache_does_not_hide_a_kernel(ab, tmp_path):
    """A kernel in the on-disk program cache (lowered by an earlier process) is lowered again while recording: its
    UOps and optimisations are not in the cache."""
    with Context(CACHE_DIR=str(tmp_path)):
        (ab[0] * 7 - 1).realize()  # writes the program cache entry
        (si,) = (ab[0] * 7 - 1).schedule()
        forget_kernels(si.ast)
        with recording() as trace:
            (ab[0] * 7 - 1).realize()
    (program,) = trace.data()["kernels"][si.ast.digest.hex()]["programs"]
    assert not program.get("regenerated") and "DEFINE_GLOBAL" in program["uops"]


def test_a_kernel_compiled_before_recording_is_lowered_again(ab):
    (ab[1] * 3 + 2).realize()  # compiled: the next run finds it in the method cache
    with recording() as trace:
        (ab[1] * 3 + 2).realize()
    data = trace.data()
    (item,) = data["realizes"][0]["items"]
    program = data["kernels"][item["digest"]]["programs"][item["program"]]
    (si,) = (ab[1] * 3 + 2).schedule()
    assert program["regenerated"] and program["source"] == get_program(si.ast, Device[D].renderer).src


def test_save_writes_what_load_reads(ab, tmp_path):
    with recording() as trace:
        (ab[0] + ab[1]).realize()
    path = trace.save(str(tmp_path / "t.json"))
    assert load_trace(path)["realizes"][0]["items"][0]["kind"] == "kernel"
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]


def test_nothing_is_recorded_when_off(ab, monkeypatch):
    monkeypatch.setattr(capture.ScheduleRecord, "__init__", lambda self: pytest.fail("recorded with LAZY_VIZ off"))
    monkeypatch.setattr(capture, "record_program", lambda *args, **kw: pytest.fail("recorded with LAZY_VIZ off"))
    with Context(VIZ=0):
        (ab[0] * 11).realize()


# -- the server -------------------------------------------------------------------------------------------------------


@pytest.fixture
def served() -> Iterator[tuple[str, dict]]:
    data = {"format": "lazy-viz-trace", "version": TRACE_VERSION, "realizes": [], "kernels": {}}
    server = make_server(data, 0)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield server.url, data
    finally:
        server.shutdown()
        server.server_close()


def test_the_server_serves_the_page_and_the_trace(served):
    url, data = served
    assert url.startswith("http://127.0.0.1:")
    with urllib.request.urlopen(url) as resp:
        page = resp.read().decode()
        assert "script-src 'unsafe-inline'" in resp.headers["Content-Security-Policy"]
        assert "connect-src 'self'" in resp.headers["Content-Security-Policy"]
    assert page == PAGE and "<svg" in page and 'fetch("trace.json")' in page
    assert "http" not in page.replace(url, "").replace("http://www.w3.org/2000/svg", ""), "fetches nothing from outside"
    with urllib.request.urlopen(url + "trace.json") as resp:
        assert json.loads(resp.read()) == data and resp.headers["Content-Type"] == "application/json"
    with pytest.raises(urllib.error.HTTPError, match="404"):
        urllib.request.urlopen(url + "elsewhere")


def test_a_port_in_use_picks_another():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        server = make_server({}, port)
        try:
            assert server.server_port != port and server.url == f"http://127.0.0.1:{server.server_port}/"
        finally:
            server.server_close()


# -- bad input --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "content, message",
    [
        (None, "no such file. Record a trace with `LAZY_VIZ=2"),
        ('{"format": "lazy-viz-trace", "realizes": [', "is not valid JSON (line 1, column"),
        (b"\xff\xfe\x00binary", "is not a text file"),
        ('{"traceEvents": []}', "is not a lazy viz trace"),
        (
            '{"format": "lazy-viz-trace", "version": 99, "realizes": [], "kernels": {}}',
            "is a version 99 trace, this lazy",
        ),
        ('{"format": "lazy-viz-trace", "version": 1, "realizes": {}}', 'is damaged: "realizes" must be a list'),
    ],
)
def test_a_bad_trace_file_is_named_with_the_fix(tmp_path, capsys, content, message):
    path = tmp_path / "trace.json"
    if content is not None:
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(TraceFileError, match="trace.json"):
        load_trace(str(path))
    assert main(["viz", str(path), "--no-browser"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"lazy viz: {path}") and message in err, err


def test_the_cli_exits_2_without_a_traceback(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "lazy", "viz", str(tmp_path / "missing.json"), "--no-browser"],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert proc.returncode == 2 and "no such file" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


# -- LAZY_VIZ at exit -------------------------------------------------------------------------------------------------

PROGRAM = """
import numpy as np
from lazy import Tensor
a = Tensor(np.ones((8, 8), dtype=np.float32), device="PYTHON")
print((a @ a).relu().sum().numpy(), flush=True)
"""


def run_program(tmp_path, viz: str, stdin: int | None = None, sigint: bool = True) -> subprocess.Popen:
    """PROGRAM in a subprocess with `LAZY_VIZ=viz`. `sigint`: with Ctrl-C's default handler whatever this process has
    (a shell's background job ignores SIGINT, and its children inherit that), else ignoring it."""
    env = {**os.environ, "LAZY_VIZ": viz, "TMPDIR": str(tmp_path)}
    handler = "signal.default_int_handler" if sigint else "signal.SIG_IGN"
    program = f"import signal; signal.signal(signal.SIGINT, {handler})\n{PROGRAM}"
    return subprocess.Popen([sys.executable, "-c", program], env=env, stdin=stdin, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip


@pytest.mark.parametrize("viz", ["2", "1"])
def test_lazy_viz_writes_the_trace_at_exit(tmp_path, viz):
    """LAZY_VIZ=2 only writes the trace; so does LAZY_VIZ=1 when standard input is not a terminal (no one could stop
    a server: the run would hang)."""
    proc = run_program(tmp_path, viz, stdin=subprocess.DEVNULL)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0 and out.strip() == "512.0", err
    path = tmp_path / f"lazy-viz-{proc.pid}.json"
    assert f"LAZY_VIZ: trace written to {path}" in err and "serving the trace at" not in err
    assert ("standard input is not a terminal" in err) == (viz == "1")
    (r,) = load_trace(str(path))["realizes"]
    assert [item["kind"] for item in r["items"]].count("kernel") == 2


def test_lazy_viz_1_serves_at_exit_until_ctrl_c(tmp_path):
    terminal, keyboard = pty.openpty()  # its standard input is a terminal: someone can press Ctrl-C
    proc = run_program(tmp_path, "1", stdin=keyboard)
    try:
        assert proc.stderr is not None
        lines: list[str] = []
        while "serving the trace at" not in (line := proc.stderr.readline()):
            assert line, f"exited without serving: {''.join(lines)}"
            lines.append(line)
        url = line.split(" at ", 1)[1].split()[0]
        with urllib.request.urlopen(url + "trace.json", timeout=10) as resp:
            (r,) = json.loads(resp.read())["realizes"]
        assert "<module>" in r["callsite"]
        assert load_trace(str(tmp_path / f"lazy-viz-{proc.pid}.json"))["realizes"][0]["items"] == r["items"]
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
        os.close(terminal)
        os.close(keyboard)
    assert proc.returncode == 0 and "lazy viz: stopped" in err and "Traceback" not in err, err


def test_lazy_viz_1_does_not_serve_where_ctrl_c_is_ignored(tmp_path):
    """A process that ignores SIGINT (a shell's background job) could never stop the server: the trace is written and
    the run ends, saying why."""
    terminal, keyboard = pty.openpty()
    proc = run_program(tmp_path, "1", stdin=keyboard, sigint=False)
    try:
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
        os.close(terminal)
        os.close(keyboard)
    assert proc.returncode == 0 and out.strip() == "512.0", err
    assert "ignores Ctrl-C (SIGINT)" in err and "serving the trace at" not in err and "trace written to" in err
