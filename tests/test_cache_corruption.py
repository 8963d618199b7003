"""A damaged compile cache never crashes the process: each entry carries its key and a checksum, and one that does
not match (truncated, garbled, zero-filled, another kernel's entry) is recompiled and replaced. The runs that read
the damaged cache are subprocesses, so a crash (a segfault in dlopen, llvmlite or the OpenCL driver) fails the test
instead of killing pytest."""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from lazy.diskcache import CACHE_HEADER, cache_entry, read_cache_entry
from lazy.plugins import Device

# three compiling devices, one per kind of damage: CL where it can compile here, else the template plugin's C device
CANDIDATES = ("CPU", "LLVM", "CL", "TMPL")
DEVICES = tuple(d for d in CANDIDATES if d in Device.specs() and Device.probe(d)[0])[:3]
KERNELS = 2  # per device: one gets its bytes damaged, one another device's entry

# Runs two kernels (distinct sources: the constants are in them) on each device; prints the results and, per device,
# the cache entries its kernels wrote.
SCRIPT = f"""
import json, pathlib, sys
import numpy as np
from lazy import Tensor
from lazy.helpers import cache_dir
root = cache_dir() / "compile"
listing = lambda: {{str(p) for p in root.rglob("*") if p.is_file()}}
report = {{}}
for device in {DEVICES!r}:
    before = listing() if root.exists() else set()
    x = Tensor(np.arange(8, dtype=np.float32), device=device)
    results = [(x * k + k).numpy().tolist() for k in range(1, {KERNELS + 1})]
    report[device] = {{"results": results, "entries": sorted(listing() - before)}}
print(json.dumps(report))
"""


def truncate(raw: bytes) -> bytes:
    return raw[: CACHE_HEADER.size + (len(raw) - CACHE_HEADER.size) // 2]


def garble(raw: bytes) -> bytes:
    return bytes(b ^ 0x5A if i >= CACHE_HEADER.size and i % 7 == 0 else b for i, b in enumerate(raw))


def zero_fill(raw: bytes) -> bytes:
    return bytes(len(raw))


def run(cache: pathlib.Path, **settings: str) -> tuple[dict, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAZY_")}
    env.update(LAZY_CACHE_DIR=str(cache), **settings)
    proc = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"exit code {proc.returncode} (negative: killed by that signal)\n{proc.stderr}"
    lines = proc.stdout.strip().splitlines()
    return json.loads(lines[-1]), "\n".join(lines[:-1])


def test_damaged_entries_are_recompiled_and_replaced(tmp_path):
    if len(DEVICES) < 3:
        pytest.skip(f"needs three compiling devices of {CANDIDATES}; usable here: {DEVICES}")
    expected = [(np.arange(8, dtype=np.float32) * k + k).tolist() for k in range(1, KERNELS + 1)]
    first, _ = run(tmp_path)
    entries = {}
    for device in DEVICES:
        assert first[device]["results"] == expected, device
        entries[device] = [pathlib.Path(p) for p in first[device]["entries"]]
        assert len(entries[device]) == KERNELS, f"{device} wrote {len(entries[device])} entries for {KERNELS} kernels"
    originals = {path: path.read_bytes() for paths in entries.values() for path in paths}
    for device, damage in zip(DEVICES, (truncate, garble, zero_fill)):
        entries[device][0].write_bytes(damage(originals[entries[device][0]]))
    for device, other in zip(DEVICES, DEVICES[1:] + DEVICES[:1]):  # a valid entry, for another device's kernel
        entries[device][1].write_bytes(originals[entries[other][1]])
    damaged = {path: path.read_bytes() for path in originals}

    second, notes = run(tmp_path, LAZY_DEBUG="1")  # crashed here before entries were checked
    for device in DEVICES:
        assert second[device]["results"] == expected, device
        assert second[device]["entries"] == [], f"{device}: entries were added instead of replaced"
    assert notes.count("recompiling and replacing it") == len(damaged), notes
    for path, bad in damaged.items():
        raw = path.read_bytes()
        assert raw != bad and read_cache_entry(raw, bytes.fromhex(path.name))[0] is not None, path
    stray = [p for p in (tmp_path / "compile").rglob("*") if p.is_file() and p not in damaged]
    assert not stray, "stray files left behind"
    assert not list(tmp_path.rglob(".tmp-*")), "temporary files left behind"


@pytest.mark.parametrize(
    "damage, problem",
    [
        (truncate, "truncated"),
        (lambda raw: raw[:20], "truncated"),  # inside the header
        (garble, "checksum"),
        (zero_fill, "format"),
        (lambda raw: raw[CACHE_HEADER.size :], "format"),  # the layout before checksums: the bare binary
        (lambda raw: cache_entry(hashlib.sha256(b"another kernel").digest(), raw[CACHE_HEADER.size :]), "another"),
    ],
    ids=["truncated", "header-cut", "garbled", "zero-filled", "old-layout", "other-key"],
)
def test_every_kind_of_damage_is_refused(damage, problem):
    key, lib = hashlib.sha256(b"cc 1.0\0kernel source").digest(), bytes(range(256)) * 4
    entry = cache_entry(key, lib)
    assert read_cache_entry(entry, key) == (lib, "")
    got, why = read_cache_entry(damage(entry), key)
    assert got is None and problem in why, why
