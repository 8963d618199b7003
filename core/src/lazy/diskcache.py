"""The on-disk caches of compiled binaries (`compile/`) and lowered programs (`program/`): one checked entry format,
atomic writes, and `compile_stats`, what code generation, the compilers and the caches did in this process (the
`LAZY_DEBUG=1` report at exit). A damaged, foreign or unwritable entry is rebuilt or skipped with a note, never
loaded and never fatal."""

from __future__ import annotations

import atexit
import contextlib
import errno
import os
import struct
import sys
import threading
from collections import defaultdict
from typing import TYPE_CHECKING

from lazy.helpers import DEBUG, cache_dir

if TYPE_CHECKING:
    import pathlib

# An on-disk cache entry (compiled binaries under `compile/`, lowered programs under `program/`) is a header and a
# payload. The header names the format, the entry's key (hashed) and the payload's length and sha256, so a truncated,
# garbled, zero-filled or swapped file, or one from another key or an older format, is rebuilt instead of being
# loaded (a bad binary handed to dlopen, llvmlite or an OpenCL driver crashes the process: it cannot be caught).
CACHE_MAGIC = b"lazycc\x00\x01"  # format name and version: bump the version when the layout changes
CACHE_HEADER = struct.Struct("<8s32s32sQ")  # magic, sha256 of the key, sha256 of the payload, payload length


def cache_entry(key_digest: bytes, payload: bytes) -> bytes:
    """A cache file: header + payload."""
    return CACHE_HEADER.pack(CACHE_MAGIC, key_digest, sha256(payload), len(payload)) + payload


def read_cache_entry(raw: bytes, key_digest: bytes) -> tuple[bytes | None, str]:
    """(the payload, "") from a cache file written for `key_digest`, or (None, why it cannot be used)."""
    if len(raw) < CACHE_HEADER.size:
        return None, f"truncated ({len(raw)} bytes, shorter than its header)"
    magic, key, digest, length = CACHE_HEADER.unpack_from(raw)
    payload = raw[CACHE_HEADER.size :]
    if magic != CACHE_MAGIC:
        return None, "not in this version's format"
    if key != key_digest:
        return None, "for another key (another compiler, source or kernel)"
    if len(payload) < length:
        return None, f"truncated ({len(payload)} of {length} bytes)"
    if len(payload) > length:
        return None, f"longer than its header says ({len(payload)} bytes, {length} expected)"
    if sha256(payload) != digest:
        return None, "corrupt (checksum mismatch)"
    return payload, ""


class CompileStats:
    """What code generation, the compilers and the on-disk caches did in this process (all threads), reported at exit
    at `LAZY_DEBUG>=1`: where a cold start's time went, and why a cache did not help."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seconds: dict[str, float] = defaultdict(float)  # "codegen", "compiler": summed over threads
        self.counts: dict[str, int] = defaultdict(int)  # "codegen", "compiler", "<kind> hit", "<kind> miss"
        self.problems: dict[str, int] = defaultdict(int)  # why an entry was not used or not written -> how often
        self.reporting = False

    def add(self, what: str, seconds: float | None = None, count: int = 1) -> None:
        with self.lock:
            self.counts[what] += count
            if seconds is not None:
                self.seconds[what] += seconds
            self._report_at_exit()

    def problem(self, note: str) -> None:
        """A cache entry was not used or not written: printed at LAZY_DEBUG>=1 the first time, counted always."""
        with self.lock:
            self.problems[note] += 1
            first = self.problems[note] == 1
            self._report_at_exit()
        if first and DEBUG >= 1:
            print(note)

    def _report_at_exit(self) -> None:
        if not self.reporting:  # registered on first use, not at import
            self.reporting = True
            # to stderr: it comes after the program's own output, which may be data on stdout
            atexit.register(lambda: print(self.report(), file=sys.stderr) if DEBUG >= 1 else None)

    def report(self) -> str:
        with self.lock:
            counts, seconds = dict(self.counts), dict(self.seconds)
            problems = dict(self.problems)
        lines = [
            f"lazy: {counts.get('codegen', 0)} kernels generated in {seconds.get('codegen', 0.0):.2f} s, "
            f"{counts.get('compiler', 0)} compiled in {seconds.get('compiler', 0.0):.2f} s (summed over threads)"
        ]
        for kind in CACHE_KINDS:
            hits, misses = counts.get(f"{kind} hit", 0), counts.get(f"{kind} miss", 0)
            lines.append(f"lazy: {kind} cache: {hits} hits, {misses} misses")
        lines += [f"lazy: {note}" + (f" ({n} times)" if n > 1 else "") for note, n in problems.items()]
        return "\n".join(lines)


compile_stats = CompileStats()
CACHE_KINDS = ("program", "compile")  # the on-disk caches: lowered programs (skip code generation), binaries


def sha256(data: bytes) -> bytes:
    """The SHA-256 digest of `data` (hashlib is imported on first use: it costs milliseconds at `import lazy`)."""
    import hashlib

    return hashlib.sha256(data).digest()


def cache_path(kind: str, key_digest: bytes) -> pathlib.Path | None:
    """Where the `kind` cache keeps the entry for `key_digest`, or None when caching is off (`LAZY_CACHE_DIR=off`)."""
    if (root := cache_dir()) is None:
        return None
    return root / kind / key_digest.hex()[:2] / key_digest.hex()


def load_cached(kind: str, key_digest: bytes) -> bytes | None:
    """The payload the `kind` cache holds for `key_digest`, or None (a miss). An entry that is unreadable or fails
    its checks is a miss, with a note saying why: the caller rebuilds it and `store_cached` replaces it."""
    if (path := cache_path(kind, key_digest)) is None:
        return None
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raw = None
    except IsADirectoryError:
        compile_stats.problem(f"{kind} cache: {path} is a directory, not a cache entry; recompiling and replacing it")
        raw = None
    except OSError as e:
        compile_stats.problem(f"{kind} cache: {path} is unreadable ({e}); recompiling")
        raw = None
    payload = None
    if raw is not None:
        payload, problem = read_cache_entry(raw, key_digest)
        if payload is None:
            compile_stats.problem(f"{kind} cache: {path} is {problem}; recompiling and replacing it")
    compile_stats.add(f"{kind} {'hit' if payload is not None else 'miss'}")
    return payload


def store_cached(kind: str, key_digest: bytes, payload: bytes) -> None:
    """Write the entry atomically (a temporary file renamed into place): a crash, a full disk or another process
    filling the same cache never leaves a half-written entry. A cache that cannot be written is noted, not fatal."""
    if (path := cache_path(kind, key_digest)) is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.is_dir() and not path.is_symlink():  # (no entry is a directory: one here would block every write)
            import shutil

            shutil.rmtree(path)
        import tempfile  # on first use, as `import lazy` need not load it

        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        try:
            with open(fd, "wb") as f:
                f.write(cache_entry(key_digest, payload))
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
    except OSError as e:
        fix = "free disk space" if e.errno in (errno.ENOSPC, errno.EDQUOT) else "make it writable"
        compile_stats.problem(f"{kind} cache not written ({e.strerror or e}: {path.parents[1]}): {fix}, or set "
                              "LAZY_CACHE_DIR to a writable directory (or 'off')")  # fmt: skip
