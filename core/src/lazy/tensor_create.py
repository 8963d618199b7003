"""`Tensor` creation: constants, ramps (`arange`, `eye`, `linspace`), host memory (`from_blob`) and tinygrad's
counter-based random numbers. A mixin of `Tensor`; every creator builds its result from constants and movement ops,
so nothing is copied from the host (except `Tensor(data)`, `from_blob` and a seed) and every device makes the same
numbers."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, ClassVar, cast

from lazy.device import close_callbacks
from lazy.dtype import ConstType, DType, dtypes, is_numpy, loaded_numpy, to_dtype
from lazy.helpers import ArgumentError, ShapeError, argfix, check_int, prod
from lazy.lazy import LazyBuffer
from lazy.multi import MultiLazyBuffer
from lazy.ops import THREEFRY_PARITY, THREEFRY_ROTATIONS, Ops
from lazy.plugins import Device
from lazy.symbolic import Node, Variable, sint
from lazy.tensor_base import TensorBase, TensorT

if TYPE_CHECKING:
    from typing_extensions import Self


class ValueRangeError(OverflowError, ValueError):
    """Values a dtype cannot hold (an `arange` whose values overflow the dtype asked for): an OverflowError, what
    tinygrad raises, and a ValueError, what Python code expects of a bad argument."""


def _device_has(device: str | tuple[str, ...], dtype: DType) -> bool:
    """Whether `device` (every device of a tuple) computes in `dtype`."""
    return all(Device[d].renderer.caps.supports(dtype) for d in ((device,) if isinstance(device, str) else device))


def _check_sizes(shape: tuple[Any, ...], what: str, keep: tuple[Any, ...] = ()) -> tuple[Any, ...]:
    """`shape` with numpy ints as ints; refuses, naming `what`, a size that is not an int >= 0 (or symbolic), except
    the markers in `keep` (-1 or None: reshape and expand infer or keep those sizes)."""
    out = []
    for i, size in enumerate(shape):
        if type(size) is not int and is_numpy(size, "integer"):
            size = int(size)
        if any(size is k or (type(size) is int and size == k) for k in keep) or isinstance(size, Node):
            out.append(size)
            continue
        if type(size) is not int:
            raise ArgumentError(f"{what}: size {size!r} (position {i} of {shape}) is a {type(size).__name__}; "
                                "sizes are ints")  # fmt: skip
        if size < 0:
            raise ShapeError(f"{what}: size {size} (position {i} of {shape}) is negative; sizes are >= 0")
        out.append(size)
    return tuple(out)


_CHUNK = 2**32 - 1  # the most words one Threefry key serves (the counter within a draw is a uint32)
_MANTISSA_BITS = {dtypes.float16: 10, dtypes.bfloat16: 7, dtypes.float32: 23, dtypes.float64: 52}


def _threefry2x32(x0: TensorT, x1: TensorT, k0: TensorT, k1: TensorT) -> tuple[TensorT, TensorT]:
    """Threefry-2x32 with 20 rounds (`lazy.ops.threefry2x32`): the two output words for the counter (x0, x1) under
    the key (k0, k1); uint32 tensors of one shape."""
    words = [t.lazydata for t in (x0, x1, k0, k1)]
    if not all(isinstance(w, LazyBuffer) and w.shape == words[0].shape for w in words):
        ks = (k0, k1, k0 ^ k1 ^ THREEFRY_PARITY)  # sharded words: through the Tensor ops
        x0, x1 = x0 + ks[0], x1 + ks[1]
        for i in range(5):
            for r in THREEFRY_ROTATIONS[i % 2]:
                x0 = x0 + x1
                x1 = ((x1 << r) | (x1 >> (32 - r))) ^ x0
            x0 = x0 + ks[(i + 1) % 3]
            x1 = x1 + ks[(i + 2) % 3] + (i + 1)
        return x0, x1
    # one THREEFRY node per word (the code generator lowers its rounds), not the ~120 nodes of the rounds: scheduling
    # a random draw costs a few nodes, and model initialisation draws once per parameter
    a, b, c, d = cast("list[LazyBuffer]", words)
    kind = type(x0)
    return cast("tuple[TensorT, TensorT]", tuple(
        kind(a.e(Ops.THREEFRY, b, c, d, arg=word), device=a.device, requires_grad=False) for word in (0, 1)
    ))  # fmt: skip


def _threefry_select(key: TensorT, x0: TensorT, x1: TensorT, first: TensorT) -> TensorT:
    """Per element, the first output word of Threefry-2x32 of (x0, x1) under `key` (two uint32 words) where `first`,
    else the second; 1-d tensors of one size. Each key word is broadcast from its buffer before any arithmetic, so
    all of it fuses into one kernel."""
    n = x0.shape[0]
    k0, k1 = (key.cast(dtypes.uint32).shrink(((i, i + 1),)).expand(n) for i in (0, 1))
    out0, out1 = _threefry2x32(x0, x1, k0, k1)
    return first.where(out0, out1)


def _add64(low: TensorT, high: TensorT, n: int) -> tuple[TensorT, TensorT]:
    """(low, high) + n for a 64-bit number kept as two uint32 words: the low word wraps and carries. An n below 2**31
    is a kernel parameter (the bound variable `rng_count`), not a constant: a draw of any size advances the counter
    with one kernel, compiled once."""
    if 0 < n < 2**31:
        bound: Any = _RNG_COUNT.bind(n)  # (`full` takes a bound variable as its value, as a const node does)
        step = type(low).full(low.shape, bound, dtype=dtypes.uint32, device=low.device)
        new_low = low + step
        return new_low, high + (new_low < low).cast(dtypes.uint32)
    new_low = low + (n & 0xFFFFFFFF)
    return new_low, high + (n >> 32) + (new_low < low).cast(dtypes.uint32)


_RNG_COUNT = Variable("rng_count", 1, 2**31 - 1)


def _bits_to_unit_float(bits: TensorT, n: int, dtype: DType) -> TensorT:
    """The first `n` floats in [0, 1) of `dtype` from random uint32 words, as tinygrad makes them: the words' bytes
    read as unsigned ints of the float's size (little-endian), their top bits as the mantissa under exponent 0 (a
    float in [1, 2)), minus 1."""
    if dtype not in _MANTISSA_BITS:
        raise ValueError(f"rand cannot make {dtype}; make float32 and cast")
    size = dtype.itemsize
    uint = {1: dtypes.uint8, 2: dtypes.uint16, 4: dtypes.uint32, 8: dtypes.uint64}[size]
    words = bits.shape[0]
    assert isinstance(words, int)
    if size < 4:  # each word holds 4 // size values, the lowest bytes first
        parts = 4 // size
        wide = bits.reshape(words, 1).expand(words, parts)
        position = type(bits)._index_ramp(parts, bits.device).reshape(1, parts).expand(words, parts)
        pieces = wide & (256**size - 1)
        for p in range(1, parts):
            pieces = (position == p).where((wide >> (8 * size * p)) & (256**size - 1), pieces)
        raw = pieces.reshape(words * parts).cast(uint)
    elif size == 8:  # two words per value, the low one first
        pairs = bits.reshape(words // 2, 2).cast(dtypes.uint64)
        raw = pairs[:, 0] | (pairs[:, 1] << 32)
    else:
        raw = bits
    mantissa_bits = _MANTISSA_BITS[dtype]
    exponent_bits = 8 * size - 1 - mantissa_bits
    one_bits = (2 ** (exponent_bits - 1) - 1) << mantissa_bits  # 1.0: the exponent bias, a zero mantissa
    return ((raw >> (exponent_bits + 1)) | one_bits).bitcast(dtype).shrink(((0, n),)) - 1


class CreationMixin(TensorBase):
    """Creation methods of `Tensor` and the state of its random number generator."""

    __slots__ = ()
    _seed: ClassVar[int] = 0
    # tinygrad's generator state, per device: the key (device key, seed) and the 64-bit counter, uint32 pairs
    _device_seeds: ClassVar[dict[str, TensorBase]] = {}
    _device_rng_counters: ClassVar[dict[str, TensorBase]] = {}
    _rng_order: ClassVar[list[str]] = []  # the devices that drew since the last seed, in order: their key index
    _rng_index: ClassVar[dict[str, int]] = {}  # the key index each device's state holds now
    _rng_saved: ClassVar[dict[str, tuple[Any, Any]]] = {}  # the state of a closed device, kept on the host

    @classmethod
    def empty(cls, *shape: Any, device: str | None = None, dtype: DType | str | None = None, **kwargs: Any) -> Self:
        """A tensor of `shape` whose memory is allocated but not set (its values are whatever is there); the dtype
        defaults to the default float. Other keyword arguments go to Tensor (requires_grad)."""
        dtype = to_dtype(dtype) if dtype is not None else dtypes.default_float
        dev = Device.canonicalize(device) if device is not None else Device.DEFAULT
        shape = _check_sizes(argfix(*shape), "empty")
        return cls(LazyBuffer.metaop(Ops.EMPTY, shape, dtype, dev), dev, dtype, **kwargs)

    @classmethod
    def full(cls, shape: tuple[sint, ...] | sint, fill_value: ConstType, device: str | None = None,
             dtype: DType | str | None = None, **kwargs: Any) -> Self:  # fmt: skip
        """A tensor of `shape` filled with `fill_value`: one constant broadcast, no memory until it is realized. The
        dtype defaults to the value's kind (bool, the default int or the default float)."""
        shape = _check_sizes(argfix(shape) if not isinstance(shape, tuple) else shape, "full")
        dt = to_dtype(dtype) if dtype is not None else dtypes.from_py(fill_value)
        return cls(fill_value, device=device, dtype=dt, **kwargs).reshape((1,) * len(shape)).expand(shape)

    @classmethod
    def zeros(cls, *shape: Any, **kwargs: Any) -> Self:
        """A tensor of `shape` (ints or one tuple) filled with 0, by default in the default float; other keyword
        arguments (device, dtype, requires_grad) as `full`'s."""
        return cls.full(
            _check_sizes(argfix(*shape), "zeros"), 0.0, dtype=kwargs.pop("dtype", dtypes.default_float), **kwargs
        )

    @classmethod
    def ones(cls, *shape: Any, **kwargs: Any) -> Self:
        """A tensor of `shape` (ints or one tuple) filled with 1, by default in the default float; other keyword
        arguments (device, dtype, requires_grad) as `full`'s."""
        return cls.full(
            _check_sizes(argfix(*shape), "ones"), 1.0, dtype=kwargs.pop("dtype", dtypes.default_float), **kwargs
        )

    @classmethod
    def from_blob(cls, ptr: int, shape: Any, dtype: DType | str | None = None,
                  device: str | None = None, requires_grad: bool | None = None) -> Self:  # fmt: skip
        """A tensor of `shape` and `dtype` (default: the default float) from the bytes at host address `ptr` (an
        `ndarray.ctypes.data`, a ctypes buffer's address), on `device`. tinygrad wraps that memory without copying,
        so the caller must keep it alive and unchanged for the tensor's life; lazy copies the bytes now instead: the
        memory may be freed or reused as soon as this returns, and later writes to it do not reach the tensor."""
        dt = to_dtype(dtype) if dtype is not None else dtypes.default_float
        shape = _check_sizes(argfix(shape), "from_blob")
        nbytes = prod(shape) * dt.itemsize
        if isinstance(ptr, bool) or not isinstance(ptr, int) or ptr < 0 or (ptr == 0 and nbytes):
            raise ValueError(f"from_blob: ptr={ptr!r} is not the address of host memory (an int > 0, such as "
                             "ndarray.ctypes.data)")  # fmt: skip
        if nbytes == 0:
            return cls.zeros(*shape, dtype=dt, device=device, requires_grad=requires_grad)
        import ctypes

        raw = cls(ctypes.string_at(ptr, nbytes), device=device, requires_grad=False)  # (nbytes,) uint8, a copy
        return raw.bitcast(dt).reshape(shape).requires_grad_(requires_grad)

    def full_like(self, fill_value: ConstType, **kwargs: Any) -> Self:
        """A tensor of self's shape filled with `fill_value`, with self's dtype and device unless given as keywords. A
        sharded tensor's is sharded the same way (an optimizer's state for a sharded weight holds one slice per
        device, not a whole copy on each)."""
        multi = self.lazydata
        if isinstance(multi, MultiLazyBuffer) and kwargs.get("device", self.device) == self.device:
            dt = to_dtype(kwargs.pop("dtype", self.dtype))
            kwargs.pop("device", None)
            shards = [LazyBuffer.const_like(fill_value, dt, lb.device, lb.shape) for lb in multi.lbs]
            return type(self)(multi._new(shards), dtype=dt, **kwargs)
        return self.full(
            self.shape,
            fill_value,
            dtype=kwargs.pop("dtype", self.dtype),
            device=kwargs.pop("device", self.device),
            **kwargs,
        )

    def zeros_like(self, **kwargs: Any) -> Self:
        """Zeros of self's shape, with self's dtype and device unless given as keywords."""
        return self.full_like(0, **kwargs)

    def ones_like(self, **kwargs: Any) -> Self:
        """Ones of self's shape, with self's dtype and device unless given as keywords."""
        return self.full_like(1, **kwargs)

    def empty_like(self, dtype: DType | str | None = None, device: str | None = None) -> Self:
        """A tensor of self's shape whose memory is not set, with self's dtype and device unless given."""
        return self.empty(self.shape, dtype=dtype or self.dtype, device=device or self.device)

    def rand_like(self, **kwargs: Any) -> Self:
        """Uniform numbers in [0, 1) of self's shape on its device, in its dtype when that is a float (else the default
        float); keywords as `rand`'s."""
        dt = kwargs.pop("dtype", self.dtype if dtypes.is_float(self.dtype) else None)
        return self._split_like(self.rand(*self.shape, device=kwargs.pop("device", self.device), dtype=dt, **kwargs))

    def randn_like(self, dtype: DType | str | None = None, **kwargs: Any) -> Self:
        """Standard normal numbers of self's shape on its device, in its dtype when that is a float (else the default
        float); keywords as `randn`'s."""
        dt = dtype or (self.dtype if dtypes.is_float(self.dtype) else None)
        return self._split_like(self.randn(*self.shape, device=kwargs.pop("device", self.device), dtype=dt, **kwargs))

    def _split_like(self, x: Self) -> Self:
        """`x` (made replicated on self's devices) split as self is, where self is sharded on an axis."""
        axis, devices = getattr(self.lazydata, "axis", None), self.device
        return x.shard(devices, axis) if axis is not None and isinstance(devices, tuple) and x.device == devices else x

    def const_like(self, b: ConstType, dtype: DType | None = None) -> Self:
        """A tensor of self's shape and device filled with `b`, in `dtype` (default: self's)."""
        return self.full_like(b, dtype=dtype or self.dtype)

    @classmethod
    def arange(cls, start: int | float, stop: int | float | None = None, step: int | float = 1,
               dtype: DType | str | None = None, device: str | None = None,
               requires_grad: bool | None = None) -> Self:  # fmt: skip
        """start, start + step, ... up to `stop` (excluded). The default dtype is the default float when any argument
        is a float, else the default int, or int64 when the values need it (tinygrad's rule, taken on the values
        themselves: a long step past 2**31 gets int64 too, where tinygrad would wrap)."""
        if stop is None:
            start, stop = 0, start
        if (np := loaded_numpy()) is not None:
            start, stop, step = (v.item() if isinstance(v, np.generic) else v for v in (start, stop, step))
        start, stop, step = (int(v) if type(v) is bool else v for v in (start, stop, step))
        for name, v in (("start", start), ("stop", stop), ("step", step)):
            if type(v) not in (int, float) or not math.isfinite(v):
                raise TypeError(f"arange: {name}={v!r} is not a finite int or float")
        if step == 0:
            raise ValueError("arange: step must not be 0")
        count = max(math.ceil((stop - start) / step), 0)
        low, high = sorted((start, start + (count - 1) * step if count else start))

        def holds(dt: DType) -> bool:
            return not dtypes.is_int(dt) or dtypes.min(dt) <= low and high <= dtypes.max(dt)

        if dtype is not None:
            dt = to_dtype(dtype)
        elif any(isinstance(v, float) for v in (start, stop, step)):
            dt = dtypes.default_float
        else:
            dt = dtypes.default_int if holds(dtypes.default_int) else dtypes.int64
        if count == 0:  # an empty range holds no value a dtype must fit
            return cls.zeros((0,), dtype=dt, device=device).requires_grad_(requires_grad)
        if not holds(dt):
            raise ValueRangeError(f"arange({start}, {stop}, {step}) does not fit in {dt}; pick a wider dtype")
        idx = cls._index_ramp(count, device).cast(dt)
        if step != 1:
            idx = idx * step
        if start != 0:
            idx = idx + start
        return idx.cast(dt).requires_grad_(requires_grad)

    @classmethod
    def _index_ramp(cls, count: int, device: str | None) -> Self:
        """0, 1, ..., count-1 (int32, int64 past 2**31) without host data: an `Ops.RAMP` node, which a kernel reading
        it computes from its index (one node, where a sum of masked constants per bit was two dozen; identical nodes
        are shared, so every arange, one-hot and random draw of one count reads the same one). Sharded devices
        build it from masked constants, one per bit."""
        dtype = dtypes.int32 if count <= 2**31 else dtypes.int64
        if count <= 1 or not (device is None or isinstance(device, str)):
            return cls._build_index_ramp(count, device, dtype)
        dev = Device.canonicalize(device) if device is not None else Device.DEFAULT
        return cls(LazyBuffer.metaop(Ops.RAMP, (count,), dtype, dev), device=dev, requires_grad=False)

    @classmethod
    def _build_index_ramp(cls, count: int, device: Any, dtype: DType) -> Self:
        if count <= 1:
            return cls.zeros(count, dtype=dtype, device=device)
        bits = max(1, (count - 1).bit_length())
        total: Self | None = None
        for axis in range(bits):
            weight = 1 << (bits - 1 - axis)
            bit = cls.full((1,), weight, dtype=dtype, device=device).pad(((1, 0),))  # [0, weight]
            shape = [1] * bits
            shape[axis] = 2
            term = bit.reshape(tuple(shape)).expand((2,) * bits)
            total = term if total is None else total + term
        assert total is not None
        return total.reshape(1 << bits).shrink(((0, count),))

    @classmethod
    def eye(cls, n: int, m: int | None = None, dtype: DType | str | None = None,
            device: str | None = None, requires_grad: bool | None = None) -> Self:  # fmt: skip
        """The n x m identity matrix (m defaults to n): ones on the diagonal, zeros elsewhere, in the default float
        unless `dtype` is given."""
        n, m = _check_sizes((n, n if m is None else m), f"eye(n={n!r}, m={m!r})")
        rows = cls._index_ramp(n, device).reshape(n, 1)
        cols = cls._index_ramp(m, device).reshape(1, m)
        return (rows == cols).cast(dtype or dtypes.default_float).requires_grad_(requires_grad)

    @classmethod
    def manual_seed(cls, seed: int = 0) -> None:
        """Restart the random numbers from `seed` (tinygrad's generator: the same seed gives tinygrad 0.14's numbers).
        Each device's key mixes the seed with the order in which devices first draw after this call, as in tinygrad;
        the state of a device that drew before is reset in place, so a `jit` that captured it restarts too."""
        CreationMixin._seed = seed
        CreationMixin._rng_order.clear()
        for device, index in CreationMixin._rng_index.items():  # until a device draws again, guess its old position
            cls._rng_reset(device, index)

    @staticmethod
    def _rng_device_closed(device: str) -> None:
        """`device` is closing: its generator's state moves to the host, and its next draw (on the reopened device)
        rebuilds the buffers from there, so the stream goes on where it was."""
        if device in CreationMixin._device_seeds:
            CreationMixin._rng_saved[device] = (
                CreationMixin._device_seeds.pop(device).numpy(),
                CreationMixin._device_rng_counters.pop(device).numpy(),
            )

    @staticmethod
    def _device_key(index: int) -> int:
        """The key word of the index-th device to draw after a seed: the low 32 bits of sha256(index) (tinygrad's)."""
        import hashlib  # on first use: it costs milliseconds at `import lazy`

        return int.from_bytes(hashlib.sha256(index.to_bytes(4, "big")).digest(), "big") & 0xFFFFFFFF

    @classmethod
    def _rng_reset(cls, device: str, index: int) -> None:
        """Start `device`'s generator: key (device key, seed) and a 64-bit counter of 0 (two uint32 words, low first),
        each a uint32 buffer that later draws read and advance in place."""
        key = [cls._device_key(index), CreationMixin._seed & 0xFFFFFFFF]
        for states, words in ((CreationMixin._device_seeds, key), (CreationMixin._device_rng_counters, [0, 0])):
            value = cls(words, device=device, dtype=dtypes.uint32, requires_grad=False)
            CreationMixin._rng_saved.pop(device, None)
            if device in states:
                states[device].assign(value).realize()
            else:
                states[device] = value.realize()
        CreationMixin._rng_index[device] = index

    @classmethod
    def _rng_keys(cls, device: str | None, count: int) -> Self:
        """The Threefry keys of a draw of `count` uint32 words on `device` (two words per chunk of up to 2**32 - 1
        words: the hash of the counter at the chunk's start under the device's key), as a realized buffer; the
        counter advances by `count`. The counter is a kernel input, so one shape of draw compiles once and a `jit`
        replays the advance (new numbers each time). The keys are copied out now: a random tensor realized after a
        later one still gets the numbers of its own call."""
        dev = Device.canonicalize(device) if device is not None else Device.DEFAULT
        if dev not in CreationMixin._rng_order:  # the device's first draw since the seed: its position picks its key
            CreationMixin._rng_order.append(dev)
            if CreationMixin._rng_index.get(dev) != (index := len(CreationMixin._rng_order) - 1):
                cls._rng_reset(dev, index)
        if (saved := CreationMixin._rng_saved.pop(dev, None)) is not None:  # the device was closed and reopened
            for states, host in zip((CreationMixin._device_seeds, CreationMixin._device_rng_counters), saved):
                states[dev] = cls(host, device=dev, dtype=dtypes.uint32, requires_grad=False).realize()
        chunks = max(1, -(-count // _CHUNK))
        # (the state is shared by the class and typed as the base, but `cls` made it: a Self)
        key, counter = cast(
            "tuple[Self, Self]", (CreationMixin._device_seeds[dev], CreationMixin._device_rng_counters[dev])
        )
        k0, k1, low, high = (t.shrink(((i, i + 1),)) for t in (key, counter) for i in (0, 1))
        # one kernel computes every word from the old state: the chunks' keys, then the advanced counter
        words: list[Self] = []
        for chunk in range(chunks):
            chunk_low, chunk_high = _add64(low, high, chunk * _CHUNK)
            words.extend(_threefry2x32(chunk_low, chunk_high, k0, k1))
        words.extend(_add64(low, high, count))
        position = cls._index_ramp(len(words), dev)
        state = words[-1].expand(len(words))
        for i, word in reversed(list(enumerate(words[:-1]))):
            state = (position == i).where(word.expand(len(words)), state)
        # the state first, then the counter's update from it: neither realize has to keep the counter's old value
        # alive for a reader, and the first (the Threefry graph) has no assign, so its schedule is cached by shape
        state = state.contiguous().realize()
        counter.assign(state.shrink(((2 * chunks, 2 * chunks + 2),))).realize()
        return state.shrink(((0, 2 * chunks),))

    @staticmethod
    def _threefry_random_bits(key: TensorT, counts0: TensorT, counts1: TensorT) -> TensorT:
        """Threefry-2x32 of the counters (counts0[i], counts1[i]) under `key` (two uint32 words): all first output
        words, then all second ones (tinygrad's layout and name)."""
        n = counts0.shape[0]
        assert isinstance(n, int) and counts1.shape == (n,), "counts0 and counts1 are 1-d and of the same size"
        x0, x1 = (c.cast(dtypes.uint32).reshape(1, n).expand(2, n).reshape(2 * n) for c in (counts0, counts1))
        first = type(key).full((1, 1), True, device=key.device).pad(((0, 1), None)).expand(2, n).reshape(2 * n)
        return _threefry_select(key, x0, x1, first)

    @classmethod
    def _random_bits(cls, count: int, device: str | None) -> Self:
        """`count` random uint32 words from the device's generator: the same words as tinygrad 0.14 on every device.
        Chunk c (of up to 2**32 - 1 words, m of them) is `_threefry_random_bits` of the counters j and j + ceil(m/2)
        under the chunk's key, built here from one ramp so that the whole chunk is one kernel. No op is recorded for
        autograd, so a random tensor does not keep this graph alive."""
        keys = cls._rng_keys(device, count)
        parts = []
        for start in range(0, count, _CHUNK):
            size, chunk = min(count - start, _CHUNK), start // _CHUNK
            half = -(-size // 2)
            position = cls._index_ramp(2 * half, keys.device).cast(dtypes.uint32)
            first = position < half
            x0 = first.where(position, position - half)  # the counter pair (j, j + half) of word j and of word j + half
            key = keys.shrink(((2 * chunk, 2 * chunk + 2),))
            parts.append(_threefry_select(key, x0, x0 + half, first).shrink(((0, size),)))
        if not parts:
            return cls.empty(0, dtype=dtypes.uint32, device=keys.device)
        return parts[0].cat(*parts[1:]).detach() if len(parts) > 1 else parts[0].detach()

    @classmethod
    def rand(cls, *shape: Any, device: str | None = None, dtype: DType | str | None = None,
             requires_grad: bool | None = None, contiguous: bool = False) -> Self:  # fmt: skip
        """Uniform in [0, 1), a float dtype (default: the default float). The mantissa of each element comes from
        the generator's words (one word per float32, half a word per half, two per double: tinygrad's numbers).
        `contiguous=True` realizes them in a buffer of their own (tinygrad's default); without it they fuse into the
        kernel that uses them: the same numbers either way. Like every random creator here it returns a leaf (no
        recorded graph): a parameter made by one is where backward stops, not a node whose making is differentiated
        again at every step (the Embedding table's gradient was scaled into a fresh 147 MB buffer per step)."""
        dt = to_dtype(dtype) if dtype is not None else dtypes.default_float
        if not dtypes.is_float(dt):
            raise ValueError(f"rand makes floats in [0, 1), not {dt}; use randint for integers, or cast the result")
        shape = _check_sizes(argfix(*shape), "rand")
        if isinstance(device, (tuple, list)):  # made on the first device, replicated (a replica's numbers are the same)
            made = cls.rand(*shape, device=device[0], dtype=dt, contiguous=contiguous)
            return made.to(tuple(device)).requires_grad_(requires_grad)
        n = prod(shape)
        bits = cls._random_bits(-(-n * dt.itemsize // 4), device)
        out = _bits_to_unit_float(bits, n, dt).reshape(shape)
        return (out.contiguous() if contiguous else out).detach().requires_grad_(requires_grad)

    @classmethod
    def randn(cls, *shape: Any, device: str | None = None, dtype: DType | str | None = None,
              requires_grad: bool | None = None) -> Self:  # fmt: skip
        """Standard normal (Box-Muller over two float32 uniform draws, as tinygrad)."""
        shape = _check_sizes(argfix(*shape), "randn")
        dt = to_dtype(dtype) if dtype is not None else dtypes.default_float
        src = cls.rand((2, *shape), device=device, dtype=dtypes.float32)
        out = src[0].mul(2 * math.pi).cos().mul((1 - src[1]).log().mul(-2).sqrt())
        return out.cast(dt).detach().requires_grad_(requires_grad)

    @classmethod
    def uniform(cls, *shape: Any, low: float = 0.0, high: float = 1.0, dtype: DType | str | None = None,
                **kwargs: Any) -> Self:  # fmt: skip
        """Uniform in [low, high); `kwargs` are rand's (device, requires_grad)."""
        if not low < high:
            raise ValueError(f"uniform needs low < high, got low={low} high={high}")
        requires_grad = kwargs.pop("requires_grad", None)
        dt = to_dtype(dtype) if dtype is not None else dtypes.default_float
        return (((high - low) * cls.rand(*shape, **kwargs)).cast(dt) + low).detach().requires_grad_(requires_grad)

    @classmethod
    def scaled_uniform(cls, *shape: Any, **kwargs: Any) -> Self:
        """Uniform in [-1, 1) times prod(shape) ** -0.5 (tinygrad's); keywords as `uniform`'s."""
        requires_grad = kwargs.pop("requires_grad", None)
        out = cls.uniform(*shape, low=-1.0, high=1.0, **kwargs).mul(prod(argfix(*shape)) ** -0.5)
        return out.detach().requires_grad_(requires_grad)

    @classmethod
    def glorot_uniform(cls, *shape: Any, **kwargs: Any) -> Self:
        """Uniform in [-b, b) with b = sqrt(6 / (shape[0] + prod(shape[1:]))), Xavier/Glorot initialization with
        tinygrad's fans; keywords as `uniform`'s."""
        shape = _check_sizes(argfix(*shape), "glorot_uniform")  # before the bound: a negative size made it complex
        bound = (6 / (shape[0] + prod(shape[1:]))) ** 0.5
        return cls.uniform(*shape, low=-bound, high=bound, **kwargs)

    @classmethod
    def kaiming_uniform(cls, *shape: Any, a: float = 0.01, **kwargs: Any) -> Self:
        """Uniform in [-b, b) with b = sqrt(6 / ((1 + a^2) * prod(shape[1:]))), He initialization for a leaky ReLU of
        slope `a`; keywords as `uniform`'s."""
        shape = _check_sizes(argfix(*shape), "kaiming_uniform")  # before the bound: a negative size made it complex
        bound = (6 / (1 + a**2) / prod(shape[1:])) ** 0.5  # (written as tinygrad does, so the last bit agrees)
        return cls.uniform(*shape, low=-bound, high=bound, **kwargs)

    @classmethod
    def kaiming_normal(cls, *shape: Any, a: float = 0.01, **kwargs: Any) -> Self:
        """Normal with std sqrt(2 / ((1 + a^2) * prod(shape[1:]))), He initialization for a leaky ReLU of slope `a`;
        keywords as `normal`'s."""
        shape = _check_sizes(argfix(*shape), "kaiming_normal")  # before the bound: a negative size made it complex
        std = (2 / (1 + a**2) / prod(shape[1:])) ** 0.5
        return cls.normal(*shape, mean=0.0, std=std, **kwargs)

    @classmethod
    def normal(cls, *shape: Any, mean: float = 0.0, std: float = 1.0, **kwargs: Any) -> Self:
        """Normal with `mean` and `std`; `kwargs` are randn's (device, dtype, requires_grad)."""
        if std < 0:
            raise ValueError(f"normal needs std >= 0, got {std}")
        requires_grad = kwargs.pop("requires_grad", None)
        return (std * cls.randn(*shape, **kwargs) + mean).detach().requires_grad_(requires_grad)

    @classmethod
    def randint(cls, *shape: Any, low: int = 0, high: int = 10, dtype: DType | str = dtypes.int32,
                **kwargs: Any) -> Self:  # fmt: skip
        """Uniform integers in [low, high): floor((high - low) * rand) + low, as tinygrad; `kwargs` are rand's."""
        dt = to_dtype(dtype)
        if not isinstance(low, int) or not isinstance(high, int):
            raise TypeError(f"randint needs integer bounds, got low={low!r} high={high!r}")
        if not dtypes.is_int(dt):
            raise TypeError(f"randint needs an integer dtype, not {dt}")
        if low >= high:
            raise ValueError(f"randint needs low < high, got low={low} high={high}")
        requires_grad = kwargs.pop("requires_grad", None)
        # scale first and add low after the cast, so truncation never rounds a negative value toward zero; the
        # minimum keeps a float product that rounded up to high - low inside the range
        offset = ((high - low) * cls.rand(*shape, **kwargs)).cast(dt)
        return (offset.minimum(high - low - 1) + low).cast(dt).detach().requires_grad_(requires_grad)

    @classmethod
    def linspace(cls, start: int | float, stop: int | float, steps: int, dtype: DType | str | None = None,
                 device: str | None = None, requires_grad: bool | None = None) -> Self:  # fmt: skip
        """`steps` evenly spaced values from `start` to `stop`, both included."""
        (steps,) = _check_sizes((steps,), "linspace")
        dt = to_dtype(dtype) if dtype is not None else dtypes.default_float
        if dt == dtypes.bool:
            raise ValueError("linspace cannot make a bool tensor; pick a numeric dtype")
        if steps == 1:
            return cls.full((1,), start, device=device, dtype=dt, requires_grad=requires_grad)
        # computed in float64 for float64 and for ints (as numpy: exact to 2**53) where the device has it, else in
        # float32 (half types rounded once, from float32)
        work = dtypes.float64 if dt == dtypes.float64 or dtypes.is_int(dt) else dtypes.default_float
        ramp = cls.arange(steps, device=device, dtype=dtypes.int32 if steps <= 2**31 else dtypes.int64)
        if work == dtypes.float64 and dt != dtypes.float64 and not _device_has(ramp.device, work):
            work = dtypes.default_float
        ramp = ramp.cast(work)
        step = (stop - start) / (steps - 1)
        # the first half counted up from start, the rest down from stop (PyTorch's way): both ends exact
        values = (ramp < steps // 2).where(start + ramp * step, stop - (steps - 1 - ramp) * step)
        return values.cast(dt).requires_grad_(requires_grad)

    @classmethod
    def randperm(cls, n: int, device: str | None = None, dtype: DType | str = dtypes.int32,
                 requires_grad: bool | None = None) -> Self:  # fmt: skip
        """A random permutation of 0..n-1 (the order that sorts n uniform draws); a leaf, as the other random
        creators. A dtype that cannot hold n - 1 is refused (its values would wrap)."""
        dt, n = to_dtype(dtype), check_int("randperm", "n", n)
        if dtypes.is_int(dt) and n > 0 and n - 1 > dtypes.max(dt):
            raise ValueRangeError(f"randperm({n}): {dt} cannot hold {n - 1}; pick a wider dtype")
        return cls.rand(n, device=device).argsort().cast(dt).detach().requires_grad_(requires_grad)

    def multinomial(self, num_samples: int = 1, replacement: bool = False) -> Self:
        """`num_samples` indices per row drawn with probability proportional to the (non-negative) weights in self."""
        num_samples = check_int("multinomial", "num_samples", num_samples)
        if not 1 <= self.ndim <= 2 or num_samples < 1:
            raise ArgumentError(
                f"multinomial needs 1 or 2 dimensions and num_samples >= 1, got {self.shape}, {num_samples}"
            )
        weight = (self.unsqueeze(0) if self.ndim == 1 else self).detach().float()  # (rows, n)
        rows, n = weight.shape
        assert isinstance(n, int), "multinomial needs a concrete number of categories"
        if not replacement and num_samples > n:
            raise ArgumentError(f"multinomial without replacement cannot draw {num_samples} of {n} categories")
        if replacement or num_samples == 1:
            cdf = weight.cumsum(1)
            cdf = cdf / cdf[:, -1:]  # (rows, n)
            draws = self.rand(num_samples, rows, 1, device=self.device)
            indices = (draws >= cdf).sum(2).minimum(n - 1).permute(1, 0)  # (rows, num_samples)
        else:
            # Efraimidis-Spirakis: the largest keys log2(u)/w, picked one at a time
            keys = self.rand(rows, n, device=self.device).log2() / weight  # (log2 as tinygrad: the same ties)
            picks = []
            for _ in range(num_samples):
                pick = keys.argmax(1, keepdim=True)  # (rows, 1)
                picks.append(pick)
                keys = (pick == self.arange(n, device=self.device)).where(-math.inf, keys)
            indices = picks[0].cat(*picks[1:], dim=1)
        return (indices.squeeze(0) if self.ndim == 1 else indices).cast(dtypes.int32)


close_callbacks.append(CreationMixin._rng_device_closed)
