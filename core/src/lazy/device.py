"""Device-side parts every plugin builds on: `Buffer` (lazy's memory, or foreign memory it wraps), `Allocator`/
`LRUAllocator` (with its declared optional features), `Compiler` (its binaries cached on disk through
`lazy.diskcache`), `Program`, `ProgramSpec` and `Compiled`, the object a plugin's `DeviceSpec.open` returns;
`opened_devices`, the one registry of opened devices."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol, get_args

import lazy.profile as profile
from lazy.diskcache import compile_stats, load_cached, sha256, store_cached
from lazy.dtype import DType, storage_to_values, to_np_dtype
from lazy.helpers import TIERED, GlobalCounters
from lazy.record import field, record
from lazy.renderer import Capabilities, Renderer

if TYPE_CHECKING:
    import numpy as np

    from lazy.codegen.uops import UOp
    from lazy.hcq import HWQueue, Signal


# Buffers name their device; `lazy.plugins` (a higher layer) installs the function that opens a device by name, so
# this module never imports upward. `opened_devices` (canonical name -> device) is the registry's record of what it
# opened, the only one: `lazy.plugins.Device` adds and removes its entries.
_device_opener: Callable[[str], Compiled] | None = None
opened_devices: dict[str, Compiled] = {}


def set_device_opener(opener: Callable[[str], Compiled]) -> None:
    global _device_opener
    _device_opener = opener


# The signal and queue types a simple-tier `Compiled` (built without any) gets: core's synchronous ones, installed by
# `lazy.hcq` (a higher layer) when it is imported. `import lazy` does not import it: `lazy.plugins` installs a loader
# that does, called the first time a simple-tier device is built.
_simple_tier: tuple[type[Signal], type[HWQueue[Any]]] | None = None
_simple_tier_loader: Callable[[], object] | None = None


def install_simple_tier(signal_t: type[Signal], queue_t: type[HWQueue[Any]]) -> None:
    global _simple_tier
    _simple_tier = (signal_t, queue_t)


def set_simple_tier_loader(loader: Callable[[], object]) -> None:
    global _simple_tier_loader
    _simple_tier_loader = loader


# Called with a device's name when that opened device closes, before it does: caches in layers above this one (the
# engine's compiled kernels, the random generators' state) drop or save what belongs to the closing instance, so a
# reopened device never runs a kernel bound to the closed one.
close_callbacks: list[Callable[[str], None]] = []


def get_device(name: str) -> Compiled:
    """The opened device called `name` (canonical, e.g. "CPU:0" is "CPU"), opening it on first use."""
    if (dev := opened_devices.get(name)) is not None:
        return dev
    if _device_opener is None:
        raise DeviceError(
            "no device registry is installed: `import lazy` (it installs lazy.plugins) before using a Buffer"
        )
    return _device_opener(name)


class DeviceError(RuntimeError):
    """A device could not be found, opened or used; the message says why and what to do."""


class CompileError(RuntimeError):
    """A kernel failed to compile: carries the generated source and the compiler's message."""

    def __init__(self, device: str, src: str, message: str):
        self.device, self.src, self.message = device, src, message
        numbered = "\n".join(f"{i + 1:4d}  {line}" for i, line in enumerate(src.splitlines()))
        super().__init__(f"{device}: kernel failed to compile:\n{message}\n--- generated source ---\n{numbered}")


# ---------------------------------------------------------------------------------------------------------------------
# memory


@record(frozen=True)
class BufferSpec:
    """How a buffer is allocated. `host`: page-locked/host memory a copy queue can reach."""

    host: bool = False
    nolru: bool = False

    def __hash__(self) -> int:  # every allocation and free looks its (size, spec) up in an LRU cache
        return self.host + 2 * self.nolru


PLAIN = BufferSpec()  # the spec of most buffers, shared


AllocatorFeature = Literal["as_buffer", "offset", "transfer", "address", "wrap"]
ALLOCATOR_FEATURES: tuple[AllocatorFeature, ...] = get_args(AllocatorFeature)
# what each optional feature's method looks like, for the registry's messages
FEATURE_METHODS: dict[AllocatorFeature, str] = {
    "as_buffer": "_as_buffer(src) -> memoryview",
    "offset": "_offset(buf, size, offset) -> opaque",
    "transfer": "_transfer(dest, src, size, src_dev, dest_dev)",
    "address": "_address(opaque) -> int",
    "wrap": "_wrap(address, size) -> opaque",
}
REQUIRED_METHODS = ("_alloc", "_copyin", "_copyout")


MAX_BUFFER_BYTES = (1 << 62) - 1  # larger sizes are refused before a plugin sees them (room for its own padding)


class BufferTooLarge(MemoryError):
    """A buffer of more than `MAX_BUFFER_BYTES`: no device has that memory (freeing cached buffers cannot help)."""


class Allocator:
    """Device memory. A plugin implements the `_` methods; core calls the public ones.

    Required: `_alloc(size, spec) -> opaque`, `_copyin(dest, src: memoryview)`, `_copyout(dest: memoryview, src)`
    (and `_free(opaque, size, spec)` when memory must be given back). Optional, each declared by name in `features`
    and implemented (the registry refuses a device whose allocator declares one and lacks its method, or the other
    way round):

    - "as_buffer": `_as_buffer(src) -> memoryview`, a zero-copy host view (else reads copy out);
    - "offset": `_offset(buf, size, offset) -> opaque`, a sub-buffer sharing `buf`'s memory (else a view of a buffer
      is read and written through its base, and only a view at offset 0 can be handed to a kernel);
    - "transfer": `_transfer(dest, src, size, src_dev, dest_dev)`, a copy between two devices of this allocator
      class (else copies go through the host);
    - "address": `_address(opaque) -> int`, where the memory is, as a pointer of the device's DLPack device type
      (`DeviceSpec.dlpack_device_types`; host memory for kDLCPU): what `Tensor.__dlpack__` hands out (else exports
      are copied to the host);
    - "wrap": `_wrap(address, size) -> opaque`, a handle of `size` bytes at `address` that another library owns: this
      allocator never frees it (`_free` is not called for it; `Buffer.wrap` keeps the owner alive instead). What
      `Tensor.from_dlpack` imports in place (else imports are copied in).
    """

    features: ClassVar[frozenset[AllocatorFeature]] = frozenset()
    # set when `Device.reset` drops its device: its buffers' memory is gone (the device opened next has an allocator of
    # its own, which must never be handed that memory)
    closed = False

    def supports(self, feature: AllocatorFeature) -> bool:
        return feature in self.features

    def alloc(self, size: int, spec: BufferSpec | None = None) -> Any:
        if size < 0:
            raise ValueError(f"cannot allocate a buffer of {size} bytes")
        if size > MAX_BUFFER_BYTES:  # (a plugin's C size_t would wrap such a size to a small one)
            raise BufferTooLarge(f"cannot allocate a buffer of {size} bytes: more than any device addresses "
                                 f"({MAX_BUFFER_BYTES} at most); make the tensor smaller")  # fmt: skip
        return self._alloc(size, spec or PLAIN)

    def free(self, opaque: Any, size: int, spec: BufferSpec | None = None) -> None:
        self._free(opaque, size, spec or PLAIN)

    def _alloc(self, size: int, spec: BufferSpec) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must implement _alloc")

    def _free(self, opaque: Any, size: int, spec: BufferSpec) -> None:
        pass

    def _copyin(self, dest: Any, src: memoryview) -> None:
        raise NotImplementedError(f"{type(self).__name__} must implement _copyin")

    def _copyout(self, dest: memoryview, src: Any) -> None:
        raise NotImplementedError(f"{type(self).__name__} must implement _copyout")

    # optional features: core calls them only when `supports(...)` says so
    def _as_buffer(self, src: Any) -> memoryview:
        raise NotImplementedError(f"{type(self).__name__} does not declare the 'as_buffer' feature")

    def _offset(self, buf: Any, size: int, offset: int) -> Any:
        raise NotImplementedError(f"{type(self).__name__} does not declare the 'offset' feature")

    def _transfer(self, dest: Any, src: Any, size: int, src_dev: Any, dest_dev: Any) -> None:
        raise NotImplementedError(f"{type(self).__name__} does not declare the 'transfer' feature")

    def _address(self, opaque: Any) -> int:
        raise NotImplementedError(f"{type(self).__name__} does not declare the 'address' feature")

    def _wrap(self, address: int, size: int) -> Any:
        raise NotImplementedError(f"{type(self).__name__} does not declare the 'wrap' feature")


def allocator_contract_problems(allocator: Allocator) -> list[str]:
    """What an allocator's class gets wrong about the contract above, each with its fix (checked on open)."""
    cls = type(allocator)
    name = cls.__name__
    problems = [f"allocator {name} does not implement {method}: it is required" for method in REQUIRED_METHODS
                if getattr(cls, method) is getattr(Allocator, method)]  # fmt: skip
    features = cls.features
    if not isinstance(features, (frozenset, set)) or not all(isinstance(f, str) for f in features):
        return [*problems, f"allocator {name}.features is {features!r}: declare a frozenset of feature names, e.g. "
                           "frozenset({'offset'})"]  # fmt: skip
    for feature in sorted(set(features) - set(ALLOCATOR_FEATURES)):
        known = ", ".join(ALLOCATOR_FEATURES)
        problems.append(f"allocator {name} declares the unknown feature {feature!r} (known: {known}): fix the name "
                        f"or remove it from {name}.features")  # fmt: skip
    for feature in ALLOCATOR_FEATURES:
        method = f"_{feature}"
        implemented = getattr(cls, method) is not getattr(Allocator, method)
        if feature in features and not implemented:
            problems.append(f"allocator {name} declares the feature {feature!r} but does not implement "
                            f"{FEATURE_METHODS[feature]}: implement it, or remove {feature!r} from "
                            f"{name}.features")  # fmt: skip
        elif implemented and feature not in features:
            problems.append(f"allocator {name} implements {method} but does not declare the feature {feature!r}, "
                            f"so core never calls it: add {feature!r} to {name}.features (or remove "
                            f"{method})")  # fmt: skip
    return problems


def dlpack_contract_problems(device_types: tuple[int, ...], allocator: Allocator) -> list[str]:
    """What an allocator lacks for the DLPack device types its device declares (`DeviceSpec.dlpack_device_types`),
    each with its fix: such memory is exported through `_address` and imported through `_wrap`."""
    if not device_types:
        return []
    name = type(allocator).__name__
    return [f"the device declares DLPack device types {tuple(int(t) for t in device_types)} but its allocator {name} "
            f"does not declare the feature {feature!r}: implement {FEATURE_METHODS[feature]} and add {feature!r} to "
            f"{name}.features, or declare no dlpack_device_types" for feature in ("address", "wrap")
            if not allocator.supports(feature)]  # fmt: skip


class LRUAllocator(Allocator):
    """Keeps freed buffers by (size, spec) and hands them out again: allocation is the slow part on most devices."""

    def __init__(self) -> None:
        self.cache: dict[tuple[int, bool, bool], list[Any]] = defaultdict(list)  # (size, host, nolru) -> opaques

    def alloc(self, size: int, spec: BufferSpec | None = None) -> Any:
        spec = spec or PLAIN
        # (keyed by the spec's fields, which hash in C: every eager op allocates and frees a buffer)
        if cached := self.cache.get((size, spec.host, spec.nolru)):  # (`get`: a miss adds no empty list)
            return cached.pop()
        try:
            return super().alloc(size, spec)
        except BufferTooLarge:
            raise
        except (MemoryError, DeviceError):
            self.free_cache()  # out of memory: give back what we hold and try once more
            return super().alloc(size, spec)

    def free(self, opaque: Any, size: int, spec: BufferSpec | None = None) -> None:
        spec = spec or PLAIN
        if spec.nolru:
            super().free(opaque, size, spec)
        else:
            self.cache[(size, spec.host, False)].append(opaque)

    def free_cache(self) -> None:
        for (size, host, nolru), opaques in self.cache.items():
            spec = BufferSpec(host, nolru)
            for opaque in opaques:
                super().free(opaque, size, spec)
        self.cache.clear()


HOST_MEMORY = 1  # DLPack's kDLCPU: a device declaring it first in DeviceSpec.dlpack_device_types has host memory


def peers(dest: str, src: str) -> bool:
    """Can `dest`'s kernels read `src`'s memory in place? Where both devices' memory is this process's host memory
    (`Compiled.host_memory`), `src`'s allocator tells addresses ("address") and `dest`'s kernels take memory at any
    address ("wrap"): `CPU:0` and `CPU:1`, or `CPU` and `LLVM`."""
    d, s = get_device(dest), get_device(src)
    return d.host_memory and s.host_memory and s.allocator.supports("address") and d.allocator.supports("wrap")


# The handle of a view whose allocator has no sub-buffers (no "offset" feature): it has none of its own.
THROUGH_BASE = object()


class Buffer:
    """`size` elements of `dtype` on `device`. Allocated on first use; a view (`base` set) shares its base's memory."""

    def __init__(self, device: str, size: int, dtype: DType, opaque: Any = None, spec: BufferSpec | None = None,
                 base: Buffer | None = None, offset: int = 0):  # fmt: skip
        if dtype.count != 1 or dtype.is_ptr:
            raise TypeError(f"a Buffer holds scalar elements, not {dtype}")
        self.device, self.size, self.dtype, self.spec = device, size, dtype, spec or PLAIN
        self.base, self.offset = base, offset  # offset in bytes into base
        self._opaque = opaque
        self._allocator: Allocator | None = None  # what allocated the memory (freed there, never to a reopened device)
        self.allocated_here = False
        # foreign memory (`Buffer.wrap`): what keeps it alive, let go when this buffer is gone; lazy never frees it
        self.owner: Any = None
        self._shared = False

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def __repr__(self) -> str:
        return f"<Buffer {self.device} {self.size} {self.dtype}{' view' if self.base else ''}>"

    @property
    def shared(self) -> bool:
        """Code outside lazy holds a pointer to this memory (a DLPack export or import, `numpy(copy=False)`): it reads
        what lazy writes and may write it itself. Set on a buffer, it holds for every view of its memory."""
        return (self.base if self.base is not None else self)._shared

    @shared.setter
    def shared(self, value: bool) -> None:
        (self.base if self.base is not None else self)._shared = value

    @staticmethod
    def wrap(device: str, size: int, dtype: DType, address: int, owner: Any) -> Buffer:
        """`size` elements of `dtype` at `address` in memory another library owns (a pointer of `device`'s DLPack
        device type), held through `owner` until this buffer is gone (after the device finished the work queued on
        it). The device's allocator must declare the "wrap" feature."""
        buf = Buffer(device, size, dtype)
        allocator = buf.allocator
        if not allocator.supports("wrap"):
            raise DeviceError(f"{device} cannot use memory it did not allocate: its allocator "
                              f"{type(allocator).__name__} does not declare the 'wrap' feature; copy the data in "
                              "instead")  # fmt: skip
        buf._opaque, buf.owner, buf.shared = allocator._wrap(address, buf.nbytes), owner, True
        return buf

    def read_in_place(self, src: Buffer) -> None:
        """Point this buffer at `src`'s memory, which this buffer's device reads in place (another device's: see
        `lazy.device.peers`), holding `src` until this device has finished the work queued on it. Memory it
        had is given back first (a previous source let go once this device's queued work is done)."""
        address = src.allocator._address(src.opaque)
        if self.owner is not None and self._opaque is not None and self.allocator._address(self._opaque) == address:
            return
        self.deallocate()
        self._opaque, self.owner = self.allocator._wrap(address, self.nbytes), src

    @property
    def is_allocated(self) -> bool:
        return self._opaque is not None

    @property
    def allocator(self) -> Allocator:
        return get_device(self.device).allocator

    def ensure_allocated(self) -> Buffer:
        return self if self._opaque is not None else self.allocate()

    def allocate(self, opaque: Any = None) -> Buffer:
        assert self._opaque is None, "buffer already allocated"
        if self.base is not None:
            self.base.ensure_allocated()
            if self.allocator.supports("offset"):
                self._opaque = self.allocator._offset(self.base._opaque, self.nbytes, self.offset)
            else:  # no sub-buffers: copies go through the base, and a view at offset 0 is the base's own memory
                self._opaque = self.base._opaque if self.offset == 0 else THROUGH_BASE
        else:
            nbytes = self.size * self.dtype.itemsize
            allocator = self._allocator = self.allocator
            self._opaque = opaque if opaque is not None else allocator.alloc(nbytes, self.spec)
            self.allocated_here = opaque is None
            GlobalCounters.mem_used += nbytes
        return self

    @property
    def opaque(self) -> Any:
        """The allocator's handle of this memory, for a kernel or a queue command."""
        opaque = self.ensure_allocated()._opaque
        if (made := (self.base or self)._allocator) is not None and made.closed:
            raise DeviceError(f"{self.device} was reset (Device.reset()) after this buffer was made: its "
                              "memory is gone; make the tensor again (and capture jits again) on the reopened "
                              "device")  # fmt: skip
        if opaque is THROUGH_BASE:
            alloc = type(self.allocator).__name__
            raise DeviceError(f"{self.device}: a kernel cannot take a view at byte {self.offset} of a buffer: the "
                              f"allocator {alloc} has no sub-buffers (it does not declare the 'offset' feature); make "
                              f"the tensor contiguous first (.contiguous()), or implement {alloc}._offset and add "
                              "'offset' to its features")  # fmt: skip
        return opaque

    @property
    def through_base(self) -> bool:
        """A view that has no handle of its own (its allocator has no sub-buffers): copies go through its base."""
        return self.base is not None and not self.allocator.supports("offset")

    def deallocate(self) -> None:
        if self._opaque is None:
            return
        if self.owner is not None:  # foreign memory: lazy's queued work must be done before its owner may free it
            self._release_owner()
        elif self.base is None:
            nbytes = self.size * self.dtype.itemsize
            GlobalCounters.mem_used -= nbytes
            if self.allocated_here:
                allocator = self._allocator or self.allocator
                if allocator.closed:  # its device closed: given back for real, not kept for a reopened one
                    Allocator.free(allocator, self._opaque, nbytes, self.spec)
                else:
                    allocator.free(self._opaque, nbytes, self.spec)
        self._opaque = None

    def _release_owner(self) -> None:
        if (dev := opened_devices.get(self.device)) is not None:
            dev.synchronize_if_pending()
        self.owner = None

    def __del__(self) -> None:
        # No sync for LRU-cached memory: it is handed out again only to work on the same in-order queue, and host
        # writes (copyin) synchronize first. Memory given back to the device for real must be idle first, and so
        # must foreign memory before its owner goes (it may be freed then).
        try:
            if self.owner is not None:
                self._release_owner()
            elif self._opaque is not None and self.base is None and self.allocated_here:
                dev = opened_devices.get(self.device)
                if dev is not None:
                    if self.spec.nolru or not isinstance(dev.allocator, LRUAllocator):
                        dev.synchronize_if_pending()
                    self.deallocate()
        except Exception:  # interpreter shutdown: modules may already be gone
            pass

    def view(self, size: int, dtype: DType, offset: int) -> Buffer:
        """A buffer of `size` `dtype` elements starting `offset` bytes into this one, sharing its memory."""
        if offset + size * dtype.itemsize > self.nbytes:
            raise ValueError(f"view of {size} {dtype} at byte {offset} does not fit in {self}")
        base = self.base if self.base is not None else self
        return Buffer(self.device, size, dtype, base=base, offset=self.offset + offset)

    def copyin(self, src: memoryview | bytes) -> Buffer:
        mv = memoryview(src).cast("B")
        if mv.nbytes != self.nbytes:
            raise ValueError(f"copyin of {mv.nbytes} bytes into {self} of {self.nbytes} bytes")
        if self.base is not None and self.through_base:  # read, patch and write back the whole base
            whole = bytearray(self.base.copyout(memoryview(bytearray(self.base.nbytes))))
            whole[self.offset : self.offset + self.nbytes] = mv
            self.base.copyin(memoryview(whole))
            return self
        get_device(self.device).synchronize_if_pending()  # a queued kernel may still read this memory
        if profile.active():
            with self._host_transfer(f"host -> {self.device}", "host"):
                self.allocator._copyin(self.opaque, mv)
        else:
            self.allocator._copyin(self.opaque, mv)
        return self

    def _host_transfer(self, name: str, src: str) -> profile.on_host:
        """A profile event for a copy between host memory and this buffer (on a track of its own: a copy between two
        devices may make one inside its own event)."""
        dest = self.device if src == "host" else "host"
        args = {"bytes": self.nbytes, "src": src, "dest": dest}
        return profile.on_host("transfer", name, self.device, "host transfers", args)

    def copyout(self, dest: memoryview) -> memoryview:
        mv = dest.cast("B") if dest.format != "B" or dest.ndim != 1 else dest
        if mv.nbytes != self.nbytes:
            raise ValueError(f"copyout of {self} ({self.nbytes} bytes) into {mv.nbytes} bytes")
        if self.base is not None and self.through_base:
            mv[:] = self.base.as_buffer()[self.offset : self.offset + self.nbytes]
            return dest
        get_device(self.device).synchronize()
        if profile.active():
            with self._host_transfer(f"{self.device} -> host", self.device):
                self.allocator._copyout(mv, self.opaque)
        else:
            self.allocator._copyout(mv, self.opaque)
        return dest

    def as_buffer(self, allow_zero_copy: bool = True) -> memoryview:
        """The contents as host memory: a zero-copy view where the allocator offers one, else a copy."""
        if allow_zero_copy and self.allocator.supports("as_buffer"):
            if self.base is not None and self.through_base:
                return self.base.as_buffer()[self.offset : self.offset + self.nbytes]
            get_device(self.device).synchronize()
            return self.allocator._as_buffer(self.opaque)
        return self.copyout(memoryview(bytearray(self.nbytes)))

    def numpy(self) -> np.ndarray:
        import numpy as np  # here, not at the top: `import lazy` loads no numpy

        raw = np.frombuffer(self.as_buffer(allow_zero_copy=False), dtype=to_np_dtype(self.dtype))
        return storage_to_values(raw, self.dtype)


# ---------------------------------------------------------------------------------------------------------------------
# compilation


class Compiler:
    """Turns rendered source into a binary. `cachekey` names the compiler and its flags (None: never cache).

    `batch_src_max`: sources up to this many characters are worth compiling several at a time (`compile_batch`,
    which the engine uses for the new small kernels of a schedule); 0, the default, never batches. `batch_chars`:
    a batch is sent to a compile thread once its sources reach this many characters (0: four times
    `batch_src_max`), so a schedule's batches still spread over the cores. `pool_batches`: the compile pool's
    kernels go through `compile_batch` even one at a time (for a compiler whose threads would otherwise take turns:
    LLVM's binding compiles one kernel at a time per process, so its batches go to worker processes)."""

    batch_src_max = 0
    batch_chars = 0
    pool_batches = False

    def __init__(self, cachekey: str | None = None):
        self.cachekey = cachekey

    def compile(self, src: str) -> bytes:
        raise NotImplementedError(f"{type(self).__name__} must implement compile")

    def compile_batch(self, srcs: list[str]) -> list[bytes]:
        """The binaries of several sources, in order, each as `compile` would give it (what the runtime loads): one
        `compile` each by default. A compiler whose fixed cost per run dominates small kernels (a C compiler's
        process start and link) may build them together, each binary then holding the batch."""
        return [self.compile(src) for src in srcs]

    def for_work(self, work: float) -> Compiler:
        """The compiler for a kernel of estimated `work` (`ProgramSpec.estimated_work`): this one, or a cheaper
        configuration a plugin offers for kernels so small that compiling them is most of what they cost."""
        return self

    def for_program(self, spec: ProgramSpec) -> Compiler:
        """The compiler for `spec`'s source: `for_work` of its estimated work by default. A plugin may also look at
        what the code generator did (e.g. `vector_width`: code already vectorized needs no auto-vectorizer)."""
        return self.for_work(spec.estimated_work())

    def quick_for(self, spec: ProgramSpec) -> Compiler | None:
        """A much cheaper configuration to build `spec` with first, slower to run than `for_program(spec)`'s, or None
        (the default: there is none, or the kernel already gets it). See `tiers`."""
        return None

    def tiers(self, spec: ProgramSpec) -> tuple[Compiler, Compiler | None]:
        """(the compiler to build `spec` with now, the one to build it with again once it proves to run on, or None).
        With a quick tier (`quick_for`) and `LAZY_TIERED=1`, a kernel builds quickly first unless its full build is
        in the on-disk cache: one that runs once (a weight's initialisation, a cold process's first step) never
        waits for the full build; one that runs again and does enough work is rebuilt in full in the background
        (`lazy.engine.runners.CompiledRunner`), and a jit builds its kernels in full when it captures them."""
        full = self.for_program(spec)
        quick = self.quick_for(spec) if TIERED else None
        if quick is None or quick is full or full.cached_binary(spec.src) is not None:
            return full, None
        return quick, full

    def compile_timed(self, src: str) -> bytes:
        """`compile(src)`, counted and timed for the LAZY_DEBUG report."""
        start = time.perf_counter()
        lib = self.compile(src)
        compile_stats.add("compiler", time.perf_counter() - start)
        return lib

    def compile_cached(self, src: str) -> bytes:
        """`compile(src)`, through the on-disk cache: each entry is checked (format, key, length, checksum) before
        use; one that fails is recompiled and replaced, with a note at LAZY_DEBUG>=1."""
        if (lib := self.cached_binary(src)) is not None:
            return lib
        lib = self.compile_timed(src)
        if self.cachekey is not None:
            store_cached("compile", self._cache_key(src), lib)
        return lib

    def cached_binary(self, src: str) -> bytes | None:
        """The binary of `src` from the on-disk cache, or None (not there, or this compiler never caches)."""
        return None if self.cachekey is None else load_cached("compile", self._cache_key(src))

    def compile_pooled(self, src: str) -> bytes:
        """`compile_cached(src)` from a compile pool's thread: as one batch (see `pool_batches`)."""
        return self.compile_cached_batch([src])[0]

    def compile_cached_batch(self, srcs: list[str]) -> list[bytes]:
        """`compile_cached` of each source, the ones not in the cache built by one `compile_batch`. When the batch
        fails, each source is compiled alone, so the error names the kernel that does not compile (the ones before
        it are cached)."""
        libs = [self.cached_binary(src) for src in srcs]
        missing = [i for i, lib in enumerate(libs) if lib is None]
        built: list[bytes] = []
        if len(missing) > 1 or (missing and self.pool_batches):
            start = time.perf_counter()
            try:
                built = self.compile_batch([srcs[i] for i in missing])
            except CompileError:
                built = []
            else:
                compile_stats.add("compiler", time.perf_counter() - start, count=len(missing))
        for n, i in enumerate(missing):
            libs[i] = lib = built[n] if built else self.compile_timed(srcs[i])
            if self.cachekey is not None:
                store_cached("compile", self._cache_key(srcs[i]), lib)
        return [lib for lib in libs if lib is not None]

    def _cache_key(self, src: str) -> bytes:
        return sha256(f"{self.cachekey}\0{src}".encode())


@record(frozen=True)
class LaunchLimits:
    """What one kernel launch may ask of a device, each limit with the name the device's own documentation gives it
    (formatted with `dim` and `xyz` for the per-dimension ones), so a refused launch says what to look up. A runtime
    builds one per compiled kernel (its thread limit can depend on the kernel's registers) and calls `check` before
    the first launch of each size: a GPU refuses such launches with a bare error code, or faults."""

    group: str  # what the device calls a group of threads: "work group", "threadgroup", "block"
    local_max: tuple[int, ...]  # threads per group along each dimension
    local_max_name: str
    threads_max: int  # threads per group in all
    threads_max_name: str
    shared_max: int = 0  # bytes of group-shared memory a kernel may use
    shared_max_name: str = ""  # "": not checked
    global_max: tuple[int, ...] = ()  # groups per launch along each dimension (): not checked
    global_max_name: str = ""

    def check(self, device: str, kernel: str, global_size: tuple[int, ...], local_size: tuple[int, ...],
              shared_bytes: int = 0) -> None:  # fmt: skip
        """DeviceError naming the first limit the launch passes (or invalid sizes)."""
        where = f"{device}: kernel {kernel}"
        if any(g < 0 for g in global_size) or any(x < 1 for x in local_size):
            raise DeviceError(f"{where} launched with invalid sizes global={global_size} local={local_size}")
        for dim, (size, most) in enumerate(zip(local_size, self.local_max)):
            if size > most:
                name = self.local_max_name.format(dim=dim, xyz="XYZ"[dim])
                raise DeviceError(f"{where} asks for {self.group}s of {size} threads in dimension {dim}; this device "
                                  f"allows {most} ({name})")  # fmt: skip
        total = 1
        for size in local_size:
            total *= size
        if total > self.threads_max:
            raise DeviceError(f"{where} asks for {self.group}s of {total} threads ({'x'.join(map(str, local_size))}); "
                              f"it can have at most {self.threads_max} ({self.threads_max_name})")  # fmt: skip
        if self.shared_max_name and shared_bytes > self.shared_max:
            raise DeviceError(f"{where} uses {shared_bytes} bytes of {self.group} memory; this device allows "
                              f"{self.shared_max} ({self.shared_max_name})")  # fmt: skip
        for dim, (size, most) in enumerate(zip(global_size, self.global_max)):
            if size > most:
                name = self.global_max_name.format(dim=dim, xyz="XYZ"[dim])
                raise DeviceError(f"{where} is launched with {size} {self.group}s in dimension {dim}; this device "
                                  f"allows {most} ({name})")  # fmt: skip


@record()
class ProgramSpec:
    """A rendered kernel: its source and how to launch it."""

    name: str
    src: str
    device: str
    global_size: list[int] | None = None  # None: the kernel loops over its global range itself
    local_size: list[int] | None = None
    vars: list[Any] = field(default_factory=list)  # symbolic Variables, in parameter order
    outs: list[int] = field(default_factory=list)
    ins: list[int] = field(default_factory=list)
    op_estimate: Any = 0
    mem_estimate: Any = 0
    core_split: int = 0  # >0: last two int params are [lo, hi) of the outermost loop, which has this many iterations
    uops: list[UOp] | None = None
    vector_width: int = 1  # the widest vector its code computes with; 1: scalar code, left to the compiler to vectorize

    def estimated_work(self) -> float:
        """Operations or 4-byte elements moved, whichever is more; infinite when unknown or symbolic."""
        ops, mem = self.op_estimate, self.mem_estimate
        if not isinstance(ops, int) or not isinstance(mem, int) or ops == mem == 0:
            return float("inf")
        return max(ops, mem // 4)

    def launch_dims(self, var_vals: dict[Any, int]) -> tuple[list[int] | None, list[int] | None]:
        from lazy.symbolic import sym_infer

        gs = [sym_infer(g, var_vals) for g in self.global_size] if self.global_size is not None else None
        ls = [sym_infer(x, var_vals) for x in self.local_size] if self.local_size is not None else None
        return gs, ls


class Program(Protocol):
    """A loaded kernel. Simple tier: calling it runs the kernel synchronously.

    `bufs` are allocator opaques, `vals` the int values of the symbolic vars (then lo/hi when core_split).
    With `wait=True` it returns the kernel's run time in seconds.
    """

    def __call__(
        self,
        *bufs: Any,
        global_size: tuple[int, ...] | None = None,
        local_size: tuple[int, ...] | None = None,
        vals: tuple[int, ...] = (),
        wait: bool = False,
    ) -> float | None: ...


class CopyOnlyRenderer(Renderer):
    """The renderer core gives a device that runs no kernels: its capabilities say so (with `reason`), which is what
    the engine, indexing and the conformance suite read; rendering refuses with the same reason."""

    def __init__(self, device: str, reason: str):
        self.device, self.reason = device, reason
        self.caps = Capabilities(unsupported=(("kernels", reason),))  # every dtype can be stored, none computed in

    def render(self, name: str, uops: list[UOp]) -> str:
        raise DeviceError(f"cannot render kernel {name}: {self.reason}")


class CopyOnlyCompiler(Compiler):
    """The compiler core gives a device that runs no kernels."""

    def __init__(self, reason: str):
        super().__init__(cachekey=None)
        self.reason = reason

    def compile(self, src: str) -> bytes:
        raise DeviceError(f"cannot compile a kernel: {self.reason}")


class Compiled:
    """An opened device: the parts a plugin wrote, given all at once.

    A device that runs kernels passes `renderer`, `compiler` and `runtime` (`(name, lib, spec) -> Program`); a
    copy-only device (files, say) passes none of them, and core refuses kernels on it with a message saying to move
    the tensor to a compute device. HCQ tier: `signal_t` and `compute_queue_t` (and `copy_queue_t` where copies have
    a queue of their own). Simple tier: none of them, and the device gets core's synchronous queues
    (`lazy.hcq.SyncQueue`), so the engine drives every device through queues.

    `graph_t` (optional, a class attribute): the device's own replay of a jit's kernels, a class built from
    `(device, launches)` with `lazy.hcq.HCQGraph`'s `replay`, such as one native call for the whole graph; None
    gives core's `HCQGraph` (one recorded queue). `eager_graphs` (a class attribute, default False): recording a
    `graph_t` is cheap enough that a cached eager schedule's consecutive kernels replay as one too, from the
    schedule's second run on (`lazy.engine.realize.StepGraph`)."""

    graph_t: ClassVar[type | None] = None
    eager_graphs: ClassVar[bool] = False

    def __init__(self, device: str, allocator: Allocator, renderer: Renderer | None = None,
                 compiler: Compiler | None = None, runtime: Callable[[str, bytes, ProgramSpec], Any] | None = None,
                 signal_t: type[Signal] | None = None, compute_queue_t: type[HWQueue[Any]] | None = None,
                 copy_queue_t: type[HWQueue[Any]] | None = None):  # fmt: skip
        if (renderer is None) != (compiler is None) or (renderer is None) != (runtime is None):
            raise TypeError(f"{device}: pass renderer, compiler and runtime together (a device that runs kernels), "
                            "or none of them (a copy-only device)")  # fmt: skip
        if (signal_t is None) != (compute_queue_t is None) or (copy_queue_t is not None and compute_queue_t is None):
            raise TypeError(f"{device}: pass signal_t and compute_queue_t together (and copy_queue_t only with them), "
                            "or none of them for core's synchronous queues")  # fmt: skip
        self.device, self.allocator = device, allocator
        # its memory is this process's host memory (kDLCPU first in its DeviceSpec.dlpack_device_types; the registry
        # sets it when the device opens): with the allocator's "address" and "wrap", what makes `peers`
        self.host_memory = False
        # why kernels are refused here, or None on a device that runs them
        self.kernel_refusal: str | None = None
        if renderer is None or compiler is None or runtime is None:
            self.kernel_refusal = (f"{device.partition(':')[0]} is a copy-only device: move the tensor to a compute "
                                   "device first, e.g. .to('CPU')")  # fmt: skip
            renderer, compiler = CopyOnlyRenderer(device, self.kernel_refusal), CopyOnlyCompiler(self.kernel_refusal)
            runtime = self._refuse_program
        self.renderer: Renderer = renderer
        self.compiler: Compiler = compiler
        self.runtime: Callable[[str, bytes, ProgramSpec], Any] = runtime
        self.hcq = compute_queue_t is not None  # False: simple tier, on core's synchronous queues
        if signal_t is None or compute_queue_t is None:
            if _simple_tier is None and _simple_tier_loader is not None:
                _simple_tier_loader()
            if _simple_tier is None:
                raise DeviceError(f"{device}: core's queues are not installed: `import lazy` before opening a device")
            signal_t, compute_queue_t = _simple_tier
        self.signal_t: type[Signal] = signal_t
        self.compute_queue_t: type[HWQueue[Any]] = compute_queue_t
        self.copy_queue_t: type[HWQueue[Any]] | None = copy_queue_t
        self.timeline_signal: Signal = signal_t(0)
        self.timeline_value = 1  # the value `next_value` hands out next
        self.timeline_submitted = 0  # the highest timeline value a finished `submit` will set: what sync waits for
        self.submit_lock = threading.RLock()  # held by `HWQueue.submit`: one submission at a time
        self._timeline_lock = threading.Lock()  # guards the two counters (taken inside submit_lock, never around it)

    def _refuse_program(self, name: str, lib: bytes, spec: ProgramSpec | None = None) -> Any:
        raise DeviceError(f"cannot load kernel {name}: {self.kernel_refusal}")

    def next_value(self) -> int:
        """A fresh timeline value for a piece of work to signal; safe to call from several threads."""
        with self._timeline_lock:
            self.timeline_value += 1
            return self.timeline_value - 1

    def claim_timeline_value(self, value: int) -> int:
        """The timeline value a submission signals (called by `HWQueue.submit`, under `submit_lock`): `value`, or a
        fresh one when another thread has already submitted `value` or a later one."""
        with self._timeline_lock:
            if value > self.timeline_submitted:
                self.timeline_value = max(self.timeline_value, value + 1)
                return value
        return self.next_value()

    def commit_timeline_value(self, value: int) -> None:
        """A submission that sets `value` went through: `synchronize` now waits for it."""
        with self._timeline_lock:
            self.timeline_submitted = max(self.timeline_submitted, value)

    @property
    def pending(self) -> bool:
        return self.timeline_signal.value < self.timeline_submitted

    def launch_now(self, program: Any, bufs: tuple[Any, ...], vals: tuple[int, ...]) -> bool:
        """Run one kernel launch at once on the calling thread, outside the queues, where that is the same as
        submitting it and cheaper (a device whose queue is idle, a kernel too small to be worth handing to another
        thread); returns whether it ran. A failure is kept for `synchronize` to raise, as a queued one is. Core's
        default never does: every launch goes through `compute_queue_t`. (An eager tiny op on the CPU: the queue's
        commands, signals and promises were a quarter of its time.)"""
        return False

    def synchronize(self) -> None:
        """Wait until everything submitted to this device has finished. Values handed out by `next_value` whose
        submission never happened (or failed) are not waited for: nothing would ever set them."""
        self.timeline_signal.wait(self.timeline_submitted)

    def synchronize_if_pending(self) -> None:
        if self.pending:
            self.synchronize()

    def close(self) -> None:
        """Release device resources (called at exit and by tests that reopen a device). First the layers above that
        keep things of this device (compiled kernels, generator state) are told, while the device still works."""
        for callback in list(close_callbacks):
            callback(self.device)
        self.synchronize()
        if isinstance(self.allocator, LRUAllocator):
            self.allocator.free_cache()
