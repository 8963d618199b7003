"""The on-disk caches of lowered programs (keyed by the kernel's structure: a hit skips code generation) and of
compiled binaries: a hit gives the same results, and bad input (a damaged entry, a cache that cannot be written, a
full disk, two processes filling one cache at once) never breaks a run: the kernel is generated or compiled again,
and `LAZY_DEBUG=1` says why. PYTHON device (its compiler has no binary cache; a tiny `Compiler` covers that one)."""

from __future__ import annotations

import errno
import os
import pickle
import subprocess
import sys

import numpy as np
import pytest

from lazy import Context, Device, Tensor
from lazy.codegen import program
from lazy.device import Compiler
from lazy.diskcache import CACHE_HEADER, cache_entry, compile_stats, read_cache_entry
from lazy.engine import realize

D = "PYTHON"
A = np.arange(12, dtype=np.float32).reshape(3, 4)
EXPECTED = (A * 3 + 1).sum(axis=1)


def run_kernels() -> np.ndarray:
    """Two kernels (an elementwise one feeding a reduce) on the reference device, as a fresh process would: nothing
    compiled or scheduled in memory."""
    realize.method_cache.clear()
    realize.schedule_cache.clear()
    return ((Tensor(A, device=D) * 3 + 1).contiguous().sum(axis=1)).numpy()


def entries(root, kind: str) -> list:
    return sorted(p for p in (root / kind).rglob("*") if p.is_file()) if (root / kind).exists() else []


@pytest.fixture
def cache(tmp_path):
    with Context(CACHE_DIR=str(tmp_path)):
        yield tmp_path
    realize.method_cache.clear()
    realize.schedule_cache.clear()


def test_a_hit_skips_code_generation(cache, monkeypatch):
    np.testing.assert_allclose(run_kernels(), EXPECTED)
    written = entries(cache, "program")
    assert len(written) >= 2, written
    monkeypatch.setattr(program, "get_program", lambda *args: pytest.fail("code generation ran on a cache hit"))
    np.testing.assert_allclose(run_kernels(), EXPECTED)
    assert entries(cache, "program") == written


def test_the_key_follows_what_the_program_depends_on():
    ast = next(si.ast for si in (Tensor(A, device=D) * 3).schedule() if si.ast.op.name == "SINK")
    renderer = Device[D].renderer
    key = program.program_key(ast, renderer, None, None)
    assert program.program_key(ast, renderer, None, None) == key
    with Context(NOOPT=1):
        assert program.program_key(ast, renderer, None, None) != key
    assert program.program_key(ast, renderer, "cc 2.0", None) != key
    assert program.program_key(ast, renderer, None, []) != key
    other = next(si.ast for si in (Tensor(A, device=D) * 4).schedule() if si.ast.op.name == "SINK")
    assert program.program_key(other, renderer, None, None) != key


def truncated(raw: bytes) -> bytes:
    return raw[: len(raw) - 5]


def garbled(raw: bytes) -> bytes:
    return raw[:-3] + bytes(b ^ 0x5A for b in raw[-3:])


def unloadable(raw: bytes) -> bytes:
    """A valid entry for its key whose payload is not a pickled program: the checksum cannot catch this one."""
    return cache_entry(raw[8:40], b"not a pickle")


def wrong_type(raw: bytes) -> bytes:
    return cache_entry(raw[8:40], pickle.dumps({"name": "E_3"}))


@pytest.mark.parametrize(
    "damage, why",
    [
        (truncated, "truncated"),
        (garbled, "checksum"),
        (lambda raw: b"", "truncated"),
        (unloadable, "does not load"),
        (wrong_type, "holds a dict"),
        (lambda raw: raw + b"tail", "longer than its header says"),
    ],  # fmt: skip
    ids=["truncated", "garbled", "empty", "unloadable", "wrong-type", "appended"],
)
def test_a_damaged_program_entry_is_generated_again_and_replaced(cache, capsys, damage, why):
    np.testing.assert_allclose(run_kernels(), EXPECTED)
    victim = entries(cache, "program")[0]
    good = victim.read_bytes()
    victim.write_bytes(damage(good))
    with Context(DEBUG=1):
        np.testing.assert_allclose(run_kernels(), EXPECTED)
    assert why in capsys.readouterr().out
    assert read_cache_entry(victim.read_bytes(), bytes.fromhex(victim.name))[0] is not None, "not replaced"


def test_a_directory_where_an_entry_belongs_is_replaced_once(cache, capsys):
    """A directory at an entry's path blocked every write of it, so each run noted it again (as unwritable)."""
    np.testing.assert_allclose(run_kernels(), EXPECTED)
    victim = entries(cache, "program")[0]
    victim.unlink()
    (victim / "inside").mkdir(parents=True)
    with Context(DEBUG=1):
        np.testing.assert_allclose(run_kernels(), EXPECTED)
    assert "is a directory, not a cache entry" in capsys.readouterr().out
    assert victim.is_file() and read_cache_entry(victim.read_bytes(), bytes.fromhex(victim.name))[0] is not None
    with Context(DEBUG=1):
        np.testing.assert_allclose(run_kernels(), EXPECTED)
    assert "directory" not in capsys.readouterr().out


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EROFS, errno.EACCES], ids=["full-disk", "read-only", "denied"])
def test_a_cache_that_cannot_be_written_is_noted_and_the_run_goes_on(cache, capsys, monkeypatch, code):
    """A write that fails half way (a full disk) or at once: no entry and no temporary file is left behind."""
    import lazy.diskcache

    class FailingFile:
        def __init__(self, fd: int, mode: str):
            self.file = os.fdopen(fd, mode)

        def __enter__(self) -> FailingFile:
            return self

        def __exit__(self, *exc: object) -> None:
            self.file.close()

        def write(self, data: bytes) -> int:
            self.file.write(data[: len(data) // 2])
            raise OSError(code, os.strerror(code))

    monkeypatch.setattr(lazy.diskcache, "open", FailingFile, raising=False)  # this module's file writes only
    with Context(DEBUG=1):
        np.testing.assert_allclose(run_kernels(), EXPECTED)
    out = capsys.readouterr().out
    assert f"program cache not written ({os.strerror(code)}" in out, out
    assert ("free disk space" in out) == (code == errno.ENOSPC), out
    assert out.count("program cache not written") == 1, "noted once, not per kernel"
    assert not [p for p in cache.rglob("*") if p.is_file()], "a partial entry or temporary file was left behind"


def test_a_cache_directory_that_is_a_file_is_noted_and_the_run_goes_on(tmp_path, capsys):
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    with Context(CACHE_DIR=str(blocker), DEBUG=1):
        np.testing.assert_allclose(run_kernels(), EXPECTED)
    assert "program cache not written" in capsys.readouterr().out


class CountingCompiler(Compiler):
    """A compiler whose binary is the source's bytes: what the binary cache does is all there is to see."""

    def __init__(self) -> None:
        super().__init__(cachekey="counting 1.0")
        self.compiled = 0

    def compile(self, src: str) -> bytes:
        self.compiled += 1
        return src.encode()


def test_the_binary_cache_checks_entries_and_replaces_bad_ones(cache, capsys):
    compiler = CountingCompiler()
    assert compiler.compile_cached("kernel a") == b"kernel a" and compiler.compiled == 1
    assert compiler.compile_cached("kernel a") == b"kernel a" and compiler.compiled == 1  # a hit
    (entry,) = entries(cache, "compile")
    entry.write_bytes(entry.read_bytes()[: CACHE_HEADER.size + 2])
    with Context(DEBUG=1):
        assert compiler.compile_cached("kernel a") == b"kernel a" and compiler.compiled == 2
    assert "truncated" in capsys.readouterr().out
    assert read_cache_entry(entry.read_bytes(), bytes.fromhex(entry.name)) == (b"kernel a", "")


def test_the_report_counts_generation_compiles_and_cache_use(cache):
    before = dict(compile_stats.counts)
    run_kernels()
    run_kernels()
    grew = {k: compile_stats.counts[k] - before.get(k, 0) for k in compile_stats.counts}
    assert grew["codegen"] >= 2 and grew["program miss"] == grew["codegen"] and grew["program hit"] == grew["codegen"]
    report = compile_stats.report()
    assert "kernels generated in" in report and "program cache:" in report and "compile cache:" in report


# Two processes started together fill one empty cache with the same kernels: both run correctly, and every entry
# left is whole (each is written to a temporary file and renamed into place).
RACE = f"""
import numpy as np
from lazy import Tensor
a = np.arange(12, dtype=np.float32).reshape(3, 4)
for k in range(6):
    got = ((Tensor(a, device={D!r}) * k + 1).contiguous().sum(axis=1)).numpy()
    assert np.allclose(got, (a * k + 1).sum(axis=1)), (k, got)
print("ok")
"""


def test_two_processes_filling_one_cache_at_once(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAZY_")}
    env.update(LAZY_CACHE_DIR=str(tmp_path), LAZY_DEBUG="1")
    procs = [subprocess.Popen([sys.executable, "-c", RACE], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(2)]  # fmt: skip
    results = [proc.communicate(timeout=120) for proc in procs]
    for proc, (out, err) in zip(procs, results):
        assert proc.returncode == 0 and out.strip().endswith("ok"), err
        assert "program cache:" in err, err  # the LAZY_DEBUG report at exit
    written = entries(tmp_path, "program")
    assert len(written) >= 6
    for path in written:
        payload, why = read_cache_entry(path.read_bytes(), bytes.fromhex(path.name))
        assert payload is not None, f"{path}: {why}"
    assert not list(tmp_path.rglob(".tmp-*")), "temporary files left behind"
