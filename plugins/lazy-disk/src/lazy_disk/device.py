"""The DISK device: buffers backed by a file, memory-mapped where the file allows it (plain `pread`/`pwrite`
otherwise). `DISK:<path>` is one file, and every buffer on it starts at the file's first byte; a bare `DISK` is
anonymous scratch space (an unlinked temporary file) where each buffer gets its own region."""

from __future__ import annotations

import mmap
import os
import stat
import tempfile
import threading
from typing import Any

from lazy.device import Allocator, BufferSpec, Compiled, DeviceError
from lazy_disk.queues import DiskQueue, DiskSignal

GRANULARITY = mmap.ALLOCATIONGRANULARITY  # mmap offsets must be multiples of this


class DiskFile:
    """An open file descriptor. `durable`: writes are flushed to stable storage on `synchronize` (not for scratch).
    `shared`: several allocations use it (the scratch file), so the device closes it, not an allocation."""

    def __init__(self, path: str, fd: int, writable: bool, read_only_reason: str = "", shared: bool = False):
        self.path, self.fd, self.writable, self.read_only_reason = path, fd, writable, read_only_reason
        self.durable, self.shared = not shared, shared

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown
            pass


class DiskMapping:
    """One allocation: `size` bytes at `offset` of a file, memory-mapped when possible (`view` is then the map)."""

    def __init__(self, file: DiskFile, offset: int, size: int, use_mmap: bool):
        self.file, self.offset, self.size = file, offset, size
        self.mm: mmap.mmap | None = None
        self.view: memoryview | None = memoryview(bytearray(0)) if size == 0 else None
        if use_mmap and size > 0:
            access = mmap.ACCESS_WRITE if file.writable else mmap.ACCESS_READ
            try:
                self.mm = mmap.mmap(file.fd, size, offset=offset, access=access)
                self.view = memoryview(self.mm)
            except (OSError, ValueError):  # a file (system) that cannot be mapped: plain reads and writes instead
                self.mm = None

    def flush(self) -> None:
        """Write changed pages to stable storage (msync + fsync)."""
        if self.file.fd < 0 or not self.file.durable:
            return
        if self.mm is not None and not self.mm.closed:
            self.mm.flush()
        os.fsync(self.file.fd)

    def close(self) -> None:
        try:
            if self.view is not None:
                self.view.release()
        except BufferError:  # sub-buffer views of it are still held
            pass
        if self.mm is not None:
            try:
                self.mm.close()
            except BufferError:  # a host view (as_buffer) is still held: the pages stay mapped until it goes
                pass
        if not self.file.shared:
            self.file.close()


class DiskMemory:
    """The allocator opaque: `size` bytes at `offset` inside a mapping (a sub-buffer shares its base's mapping)."""

    __slots__ = ("mapping", "offset", "size", "view")

    def __init__(self, mapping: DiskMapping, offset: int, size: int):
        self.mapping, self.offset, self.size = mapping, offset, size
        self.view = mapping.view[offset : offset + size] if mapping.view is not None else None

    @property
    def file_offset(self) -> int:
        return self.mapping.offset + self.offset


class DiskAllocator(Allocator):
    """File-backed memory. Not LRU-cached: a freed buffer gives its map and file descriptor back at once.
    `use_mmap=False` forces plain reads and writes (what a file that cannot be mapped gets). Every copy first checks
    that the file still holds the bytes it touches (`_check_file_holds`)."""

    features = frozenset({"as_buffer", "offset", "transfer"})

    def __init__(self, dev: DiskDevice, use_mmap: bool = True):
        self.dev, self.use_mmap = dev, use_mmap

    def _alloc(self, size: int, spec: BufferSpec) -> DiskMemory:
        file, offset = self.dev.reserve(size)
        return DiskMemory(DiskMapping(file, offset, size, self.use_mmap), 0, size)

    def _free(self, opaque: DiskMemory, size: int, spec: BufferSpec) -> None:
        mapping = opaque.mapping
        opaque.view = None
        if mapping in self.dev.dirty:
            self.dev.dirty.discard(mapping)
            mapping.flush()
        mapping.close()
        self.dev.release(mapping)

    def _as_buffer(self, src: DiskMemory) -> memoryview:
        """Zero-copy: the mapped pages themselves. Without a map (mmap impossible), a copy read from the file.
        The file is checked to still hold them now; a view kept past a later truncation is the holder's risk."""
        if src.view is not None:
            _check_file_holds(src, src.size)
            return src.view
        out = memoryview(bytearray(src.size))
        self._copyout(out, src)
        return out

    def _offset(self, buf: DiskMemory, size: int, offset: int) -> DiskMemory:
        return DiskMemory(buf.mapping, buf.offset + offset, size)

    def _copyin(self, dest: DiskMemory, src: memoryview) -> None:
        file = dest.mapping.file
        if not file.writable:
            raise DeviceError(f"{self.dev.device}: cannot write to {file.path}: it is open read-only "
                              f"({file.read_only_reason}); make it writable or write to another file")  # fmt: skip
        _check_file_holds(dest, src.nbytes)
        if dest.view is not None:
            dest.view[: src.nbytes] = src
        else:
            _pwrite_all(file, src, dest.file_offset)
        self.dev.dirty.add(dest.mapping)

    def _copyout(self, dest: memoryview, src: DiskMemory) -> None:
        _check_file_holds(src, dest.nbytes)
        if src.view is not None:
            dest[:] = src.view[: dest.nbytes]
        else:
            _pread_all(src.mapping.file, dest, src.file_offset)

    def _transfer(self, dest: DiskMemory, src: DiskMemory, size: int, src_dev: Any, dest_dev: Any) -> None:
        self._copyin(dest, self._as_buffer(src)[:size])


def _check_file_holds(mem: DiskMemory, nbytes: int) -> None:
    """Refuse a copy of `nbytes` at `mem` that reaches past the file's current end. Another program can truncate a
    file while it is mapped, and touching a mapped page past the end raises SIGBUS, which kills the interpreter;
    plain I/O would read short or silently grow the file again. One fstat per copy; the error leaves the device and
    its other buffers usable."""
    file, start = mem.mapping.file, mem.file_offset
    size = os.fstat(file.fd).st_size
    if size < start + nbytes:
        raise DeviceError(f"{file.path} changed after it was opened: it is {size} bytes long now, but this copy "
                          f"needs at least {start + nbytes} (bytes {start} to {start + nbytes}); was it truncated or "
                          "rewritten in place by another program? Load or open it again")  # fmt: skip


def _pwrite_all(file: DiskFile, src: memoryview, offset: int) -> None:
    done = 0
    while done < src.nbytes:
        done += os.pwrite(file.fd, src[done:], offset + done)


def _pread_all(file: DiskFile, dest: memoryview, offset: int) -> None:
    done = 0
    while done < dest.nbytes:
        got = os.preadv(file.fd, [dest[done:]], offset + done)
        if got == 0:
            raise DeviceError(f"{file.path} ended {dest.nbytes - done} bytes early: was it truncated while in use?")
        done += got


class DiskDevice(Compiled):
    """One file (`DISK:<path>`), or anonymous scratch space (bare `DISK`). A copy-only device: it supplies no renderer,
    compiler or runtime, and core refuses kernels on it; copies, signals and waits run on submit. `synchronize()` also
    makes every write so far durable (msync + fsync)."""

    def __init__(self, device: str):
        arg = device.partition(":")[2]
        self.path: str | None = os.path.abspath(arg) if arg else None
        self.lock = threading.Lock()
        self.dirty: set[DiskMapping] = set()
        self.created: set[tuple[int, int]] = set()  # (st_dev, st_ino) of files this device made: it may grow them
        self.scratch: DiskFile | None = None
        self.scratch_end, self.scratch_free = 0, dict[int, list[int]]()
        super().__init__(device, DiskAllocator(self), signal_t=DiskSignal, compute_queue_t=DiskQueue,
                         copy_queue_t=DiskQueue)  # fmt: skip

    # ---- space ---------------------------------------------------------------------------------------------------

    def reserve(self, size: int) -> tuple[DiskFile, int]:
        """Where a new buffer of `size` bytes lives: (file, byte offset). Refuses, naming the path and the reason."""
        with self.lock:
            return self._reserve_scratch(size) if self.path is None else (self._open_file(self.path, size), 0)

    def release(self, mapping: DiskMapping) -> None:
        if mapping.file is self.scratch:
            with self.lock:
                self.scratch_free.setdefault(_round_up(mapping.size), []).append(mapping.offset)

    def _reserve_scratch(self, size: int) -> tuple[DiskFile, int]:
        if self.scratch is None:
            fd, path = tempfile.mkstemp(prefix="lazy-disk-scratch-")
            os.unlink(path)  # anonymous: the space goes back to the file system when the process ends
            self.scratch = DiskFile(path, fd, writable=True, shared=True)
        region = _round_up(size)
        if free := self.scratch_free.get(region):
            return self.scratch, free.pop()
        offset, self.scratch_end = self.scratch_end, self.scratch_end + region
        os.ftruncate(self.scratch.fd, self.scratch_end)
        return self.scratch, offset

    def _open_file(self, path: str, size: int) -> DiskFile:
        parent = os.path.dirname(path)
        if not os.path.isdir(parent):
            raise DeviceError(f"{self.device}: cannot use {path}: directory {parent} does not exist; create it first")
        try:
            fd, writable, reason = os.open(path, os.O_RDWR), True, ""
        except FileNotFoundError:
            return self._create_file(path, size)
        except OSError as e:  # not writable (permissions, read-only file system): reads still work
            try:
                fd, writable, reason = os.open(path, os.O_RDONLY), False, e.strerror or str(e)
            except OSError as e2:
                raise DeviceError(f"{self.device}: cannot open {path}: {e2.strerror or e2}") from None
        file = DiskFile(path, fd, writable, reason)
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            file.close()
            raise DeviceError(f"{self.device}: {path} is not a regular file; DISK needs a file")
        if st.st_size < size:
            if writable and (st.st_dev, st.st_ino) in self.created:
                os.ftruncate(fd, size)  # a file this device made grows on demand
            else:
                file.close()
                raise DeviceError(f"{self.device}: {path} holds {st.st_size} bytes, too small for a buffer of {size} "
                                  "bytes; use a smaller buffer or a bigger file")  # fmt: skip
        return file

    def _create_file(self, path: str, size: int) -> DiskFile:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:  # made by someone else since we looked
            return self._open_file(path, size)
        except OSError as e:
            reason = e.strerror or str(e)
            raise DeviceError(f"{self.device}: cannot create {path}: {reason} (is {os.path.dirname(path)} "
                              "writable?)") from None  # fmt: skip
        try:
            os.ftruncate(fd, size)
        except OSError as e:
            os.close(fd)
            os.unlink(path)
            raise DeviceError(f"{self.device}: cannot make {path} {size} bytes long: {e.strerror or e}") from None
        st = os.fstat(fd)
        self.created.add((st.st_dev, st.st_ino))
        return DiskFile(path, fd, writable=True)

    # ---- synchronization -----------------------------------------------------------------------------------------

    def synchronize(self) -> None:
        super().synchronize()
        self.flush()

    def flush(self) -> None:
        """Make every write so far durable: msync the changed maps and fsync their files."""
        while self.dirty:
            self.dirty.pop().flush()

    def close(self) -> None:
        try:
            super().close()
        finally:
            if self.scratch is not None:
                self.scratch.close()
                self.scratch = None


def _round_up(size: int) -> int:
    return max(GRANULARITY, -(-size // GRANULARITY) * GRANULARITY)


def open_disk(name: str = "DISK") -> DiskDevice:
    """The DISK device: `DISK:<path>` for a file (relative paths are resolved now), bare `DISK` for scratch space."""
    return DiskDevice(name)
