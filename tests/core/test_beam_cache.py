"""The BEAM search cache on disk: an entry is keyed by the kernel's digest and the device, renderer and compiler it
was searched for, carries a checksum, and is verified before use. A corrupt, truncated, wrong-typed, stale or
foreign entry is noted (`LAZY_DEBUG>=1`), searched again and replaced; it never breaks a kernel. PYTHON device."""

import json
from types import SimpleNamespace

import numpy as np
import pytest

from lazy import Context, Device, Tensor
from lazy.codegen import search
from lazy.codegen.kernel import Kernel, Opt, OptOps
from lazy.engine.realize import method_cache
from lazy.ops import Ops
from lazy.renderer import Capabilities

D = "PYTHON"
A = np.arange(64, dtype=np.float32).reshape(8, 8)


def kernel_ast(t: Tensor):
    (ast,) = [si.ast for si in t.schedule() if si.ast.op is Ops.SINK]
    return ast


@pytest.fixture(autouse=True)
def fresh_process_state():
    """Each test starts as a new process would: nothing searched or compiled in memory, only what is on disk."""
    search._results.clear()
    method_cache.clear()
    yield
    search._results.clear()


def one_step_timer(dev, cand, program, bufs, first) -> float:
    """Stands in for timing on the device (which the cache logic does not depend on): one option is best."""
    return float(len(cand.opts) != 1)


@pytest.fixture
def searched(tmp_path, monkeypatch):
    """A reduce kernel searched once: (its AST, the device, the options found, the cache entry's path)."""
    monkeypatch.setattr(search, "_time_program", one_step_timer)
    ast = kernel_ast((Tensor(A, device=D).realize() * 2).sum(axis=1))
    dev = Device[D]
    with Context(CACHE_DIR=str(tmp_path)):
        opts = search.beam_search(ast, dev, 1)
    (path,) = (tmp_path / "beam").iterdir()
    assert len(opts) == 1
    search._results.clear()  # as a new process would start: only the disk entry is left
    return ast, dev, opts, path


def with_checksum(identity: dict, opts: list) -> str:
    return json.dumps({"identity": identity, "opts": opts, "checksum": search._entry_checksum(identity, opts)})


def garble(kind: str, text: str) -> str | bytes:
    """`text` (a valid entry) broken in one way."""
    entry = json.loads(text)
    identity = entry["identity"]
    variants: dict[str, str | bytes] = {
        "truncated": text[: len(text) // 2],
        "empty": "",
        "binary": b"\xff\xfe\x00garbage",
        "old format": json.dumps([["UPCAST", 9, 4]]),  # a bare list of options, as entries once were
        "checksum": text.replace('"checksum":"', '"checksum":"0'),
        "edited": text.replace(json.dumps(entry["opts"], separators=(",", ":")), "[]"),  # checksum not updated
        "wrong types": with_checksum(identity, [["UPCAST", "0", 2.5], None]),
        "unknown op": with_checksum(identity, [["TILE", 0, 2]]),
        "missing axis": with_checksum(identity, [["UPCAST", 7, 2]]),
        "negative axis": with_checksum(identity, [["UNROLL", -1, 2]]),  # Python would take the last axis
        "stale": with_checksum(identity, [["UNROLL", 0, 3]]),  # a kernel axis, but not one this option applies to
        "foreign": with_checksum({**identity, "kernel": "0" * 64}, entry["opts"]),
    }
    return variants[kind]


KINDS = ["truncated", "empty", "binary", "old format", "checksum", "edited", "wrong types", "unknown op",
         "missing axis", "negative axis", "stale", "foreign"]  # fmt: skip


@pytest.mark.parametrize("kind", KINDS)
def test_a_bad_entry_is_noted_searched_again_and_replaced(searched, capsys, kind):
    ast, dev, opts, path = searched
    bad = garble(kind, path.read_text())
    path.write_bytes(bad if isinstance(bad, bytes) else bad.encode())
    with Context(CACHE_DIR=str(path.parent.parent), DEBUG=1):
        again = search.beam_search(ast, dev, 1)
    assert f"beam cache: ignoring {path}" in capsys.readouterr().out
    k = Kernel(ast, dev.renderer.caps)
    for opt in again:
        k.apply_opt(opt)  # whatever was found applies to the kernel
    search._results.clear()
    with Context(CACHE_DIR=str(path.parent.parent), DEBUG=1):
        assert search.beam_search(ast, dev, 1) == again  # the replacement is read back, with no note
    assert "beam cache" not in capsys.readouterr().out


def test_an_intact_entry_is_used_without_searching(searched, monkeypatch):
    ast, dev, opts, path = searched
    monkeypatch.setattr(search, "_time_program", lambda *args: pytest.fail("searched again"))
    with Context(CACHE_DIR=str(path.parent.parent)):
        assert search.beam_search(ast, dev, 1) == opts
    identity = json.loads(path.read_text())["identity"]
    assert identity["kernel"] == ast.digest.hex() and identity["device"] == D and identity["width"] == 1


def test_garbling_every_entry_still_gives_correct_results(tmp_path, capsys):
    a = A[:4, :4]  # small kernels: this one times real candidates on the device
    x, y = Tensor(a, device=D).realize(), Tensor(a.T.copy(), device=D).realize()

    def compute() -> list[np.ndarray]:
        with Context(BEAM=1, CACHE_DIR=str(tmp_path), DEBUG=1):
            return [(x * 2).sum(axis=1).numpy(), (x.exp() - y).numpy(), (x - y).max(axis=0).numpy()]

    expected = [(a * 2).sum(1), np.exp(a) - a.T, (a - a.T).max(0)]
    for got, want in zip(compute(), expected):
        np.testing.assert_allclose(got, want, rtol=1e-5)
    entries = list((tmp_path / "beam").iterdir())
    assert len(entries) >= 3
    for n, path in enumerate(entries):  # broken entries of several kinds; old-format ones used to raise forever
        path.write_text(json.dumps([["UPCAST", 9, 4]]) if n % 2 else path.read_text()[:-7])
    search._results.clear()  # as a new process would start: only the (broken) disk entries are left
    method_cache.clear()
    capsys.readouterr()
    for got, want in zip(compute(), expected):
        np.testing.assert_allclose(got, want, rtol=1e-5)
    assert capsys.readouterr().out.count("beam cache: ignoring") == len(entries)
    for path in entries:  # every entry was replaced by an intact one
        assert set(json.loads(path.read_text())) == {"identity", "opts", "checksum"}


def test_an_entry_whose_option_names_a_buffer_is_read_back():
    """PACK's `axis` is an input buffer's index, which may exceed the kernel's axis count: such entries were refused as
    naming a missing axis (and searched again on every run)."""
    a, b = Tensor(A, device=D).realize(), Tensor(A[0], device=D).realize()
    ast = kernel_ast((a * b).sum(axis=1))  # (8 rows, 8 reduce): 2 axes; b (buffer 2) is reused by every row
    dev = SimpleNamespace(renderer=SimpleNamespace(caps=Capabilities(vector_widths=(4,), pack_max=1 << 16)))
    identity = {"kernel": ast.digest.hex()}
    assert Kernel(ast, dev.renderer.caps).shape_len == 2
    text = with_checksum(identity, [["PACK", 2, 0]]).encode()
    assert search._parse_entry(text, identity, ast, dev) == [Opt(OptOps.PACK, 2, 0)]
