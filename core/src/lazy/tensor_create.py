"""`Tensor` creation: constants, ramps (`arange`, `eye`, `linspace`) and the counter-based random numbers. A mixin
of `Tensor`; every creator builds its result from constants and movement ops, so nothing is copied from the host
(except `Tensor(data)` itself) and every device makes the same numbers."""

# mypy: disable-error-code="misc"
# (methods annotate `self: Tensor` / `cls: type[Tensor]`, the class they are mixed into; see lazy.tensor_nn)

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from lazy.dtype import ConstType, DType, dtypes, to_dtype
from lazy.helpers import ShapeError, argfix, prod
from lazy.lazy import LazyBuffer
from lazy.ops import Ops
from lazy.plugins import Device
from lazy.symbolic import Node, sint

if TYPE_CHECKING:
    from lazy.tensor import Tensor


def _check_sizes(shape: tuple[Any, ...], what: str, keep: tuple[Any, ...] = ()) -> tuple[Any, ...]:
    """`shape` with numpy ints as ints; refuses, naming `what`, a size that is not an int >= 0 (or symbolic), except
    the markers in `keep` (-1 or None: reshape and expand infer or keep those sizes)."""
    out = []
    for i, size in enumerate(shape):
        size = int(size) if isinstance(size, np.integer) else size
        if any(size is k or (type(size) is int and size == k) for k in keep) or isinstance(size, Node):
            out.append(size)
            continue
        if type(size) is not int:
            raise TypeError(f"{what}: size {size!r} (position {i} of {shape}) is a {type(size).__name__}; "
                            "sizes are ints")  # fmt: skip
        if size < 0:
            raise ShapeError(f"{what}: size {size} (position {i} of {shape}) is negative; sizes are >= 0")
        out.append(size)
    return tuple(out)


class CreationMixin:
    """Creation methods of `Tensor` and the state of its random number generator."""

    __slots__ = ()
    _seed: ClassVar[int] = 0
    _rng_state: ClassVar[dict[str, Tensor]] = {}  # device -> its generator's (seed, counter) as a uint32 buffer

    @classmethod
    def empty(
        cls: type[Tensor], *shape: Any, device: str | None = None, dtype: DType | str | None = None, **kwargs: Any
    ) -> Tensor:
        dtype = to_dtype(dtype) if dtype is not None else dtypes.default_float
        dev = Device.canonicalize(device) if device is not None else Device.DEFAULT
        shape = _check_sizes(argfix(*shape), "empty")
        return cls(LazyBuffer.metaop(Ops.EMPTY, shape, dtype, dev), dev, dtype, **kwargs)

    @classmethod
    def full(cls: type[Tensor], shape: tuple[sint, ...] | sint, fill_value: ConstType, device: str | None = None,
             dtype: DType | str | None = None, **kwargs: Any) -> Tensor:  # fmt: skip
        shape = _check_sizes(argfix(shape) if not isinstance(shape, tuple) else shape, "full")
        dt = to_dtype(dtype) if dtype is not None else dtypes.from_py(fill_value)
        return cls(fill_value, device=device, dtype=dt, **kwargs).reshape((1,) * len(shape)).expand(shape)

    @classmethod
    def zeros(cls: type[Tensor], *shape: Any, **kwargs: Any) -> Tensor:
        return cls.full(
            _check_sizes(argfix(*shape), "zeros"), 0.0, dtype=kwargs.pop("dtype", dtypes.default_float), **kwargs
        )

    @classmethod
    def ones(cls: type[Tensor], *shape: Any, **kwargs: Any) -> Tensor:
        return cls.full(
            _check_sizes(argfix(*shape), "ones"), 1.0, dtype=kwargs.pop("dtype", dtypes.default_float), **kwargs
        )

    def full_like(self: Tensor, fill_value: ConstType, **kwargs: Any) -> Tensor:
        return self.full(
            self.shape,
            fill_value,
            dtype=kwargs.pop("dtype", self.dtype),
            device=kwargs.pop("device", self.device),
            **kwargs,
        )

    def zeros_like(self: Tensor, **kwargs: Any) -> Tensor:
        return self.full_like(0, **kwargs)

    def ones_like(self: Tensor, **kwargs: Any) -> Tensor:
        return self.full_like(1, **kwargs)

    def empty_like(self: Tensor, dtype: DType | str | None = None, device: str | None = None) -> Tensor:
        return self.empty(self.shape, dtype=dtype or self.dtype, device=device or self.device)

    def rand_like(self: Tensor, **kwargs: Any) -> Tensor:
        dt = kwargs.pop("dtype", self.dtype if dtypes.is_float(self.dtype) else None)
        return self.rand(*self.shape, device=kwargs.pop("device", self.device), dtype=dt, **kwargs)

    def randn_like(self: Tensor, dtype: DType | str | None = None, **kwargs: Any) -> Tensor:
        dt = dtype or (self.dtype if dtypes.is_float(self.dtype) else None)
        return self.randn(*self.shape, device=kwargs.pop("device", self.device), dtype=dt, **kwargs)

    def const_like(self: Tensor, b: ConstType, dtype: DType | None = None) -> Tensor:
        return self.full_like(b, dtype=dtype or self.dtype)

    @classmethod
    def arange(
        cls: type[Tensor], start: int | float, stop: int | float | None = None, step: int | float = 1, **kwargs: Any
    ) -> Tensor:
        if stop is None:
            start, stop = 0, start
        start, stop, step = (v.item() if isinstance(v, np.generic) else v for v in (start, stop, step))
        for name, v in (("start", start), ("stop", stop), ("step", step)):
            if type(v) not in (int, float) or not math.isfinite(v):
                raise TypeError(f"arange: {name}={v!r} is not a finite int or float")
        if step == 0:
            raise ValueError("arange: step must not be 0")
        count = max(math.ceil((stop - start) / step), 0)
        low, high = sorted((start, start + (count - 1) * step if count else start))

        def holds(dt: DType) -> bool:
            return not dtypes.is_int(dt) or dtypes.min(dt) <= low and high <= dtypes.max(dt)

        if any(isinstance(v, float) for v in (start, stop, step)):
            dtype = to_dtype(kwargs.pop("dtype", dtypes.default_float))
        else:  # the default int, or int64 when the values need it (PyTorch's arange is int64)
            dtype = to_dtype(kwargs.pop("dtype", dtypes.default_int if holds(dtypes.default_int) else dtypes.int64))
        if not holds(dtype):
            raise ValueError(f"arange({start}, {stop}, {step}) does not fit in {dtype}; pick a wider dtype")
        idx = cls._index_ramp(count, kwargs.pop("device", None))
        return (idx.cast(dtype) * step + start).cast(dtype).requires_grad_(kwargs.get("requires_grad"))

    @classmethod
    def _index_ramp(cls: type[Tensor], count: int, device: str | None) -> Tensor:
        """0, 1, ..., count-1 (int32, int64 past 2**31) from masked constants (one per bit): no host data needed."""
        dtype = dtypes.int32 if count <= 2**31 else dtypes.int64
        if count <= 1:
            return cls.zeros(count, dtype=dtype, device=device)
        bits = max(1, (count - 1).bit_length())
        total: Tensor | None = None
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
    def eye(cls: type[Tensor], n: int, m: int | None = None, **kwargs: Any) -> Tensor:
        n, m = _check_sizes((n, n if m is None else m), f"eye(n={n!r}, m={m!r})")
        dtype = kwargs.pop("dtype", dtypes.default_float)
        device = kwargs.pop("device", None)
        rows = cls._index_ramp(n, device).reshape(n, 1)
        cols = cls._index_ramp(m, device).reshape(1, m)
        return (rows == cols).cast(dtype).requires_grad_(kwargs.get("requires_grad"))

    @classmethod
    def manual_seed(cls: type[Tensor], seed: int = 0) -> None:
        """Restart the random numbers from `seed` on every device (each device then draws the same numbers)."""
        CreationMixin._seed = seed
        for device, state in CreationMixin._rng_state.items():
            state.assign(cls._rng_start(device)).realize()  # in place: a jit that captured the state sees it too

    @classmethod
    def _rng_start(cls: type[Tensor], device: str) -> Tensor:
        return cls([CreationMixin._seed & 0xFFFFFFFF, 0], device=device, dtype=dtypes.uint32, requires_grad=False)

    @classmethod
    def _rng_key(cls: type[Tensor], device: str | None) -> Tensor:
        """This call's Threefry key (seed, counter) as a realized uint32 pair. Each device keeps (seed, counter) in a
        buffer that every call advances in place (an `assign` kernel), so the counter is a kernel input: one shape of
        random call compiles once, and a `jit` replays the advance and so draws new numbers each time. The key is
        copied out at creation, so a random tensor realized after a later one still gets the numbers of its call."""
        dev = Device.canonicalize(device) if device is not None else Device.DEFAULT
        if (state := CreationMixin._rng_state.get(dev)) is None:
            state = CreationMixin._rng_state[dev] = cls._rng_start(dev)
        step = cls.full((1,), 1, dtype=dtypes.uint32, device=dev, requires_grad=False).pad(((1, 0),))  # [0, 1]
        key = (state + step).contiguous()
        state.assign(key)
        return key.realize(state)

    @classmethod
    def _threefry_bits(cls: type[Tensor], count: int, device: str | None) -> Tensor:
        """`count` random uint32 from Threefry-2x32 (20 rounds) over a counter: the same bits on every device. No op
        is recorded for autograd (no input requires a gradient), so a random tensor does not keep this graph alive."""
        key = cls._rng_key(device)
        ctr = cls._index_ramp(count, key.device).cast(dtypes.uint32).detach()
        # each key word is broadcast to the counter's shape before any arithmetic, so all of it fuses in one kernel
        k0, k1 = (key.shrink(((i, i + 1),)).expand(count) for i in (0, 1))
        ks = (k0, k1, k0 ^ k1 ^ 0x1BD11BDA)
        x0, x1 = ctr + ks[0], ks[1]
        rotations = ((13, 15, 26, 6), (17, 29, 16, 24))
        for i in range(5):
            for r in rotations[i % 2]:
                x0 = x0 + x1
                x1 = (x1 << r) | (x1 >> (32 - r))
                x1 = x1 ^ x0
            x0 = x0 + ks[(i + 1) % 3]
            x1 = x1 + ks[(i + 2) % 3] + (i + 1)
        return x0

    @classmethod
    def rand(
        cls: type[Tensor], *shape: Any, device: str | None = None, dtype: DType | str | None = None, **kwargs: Any
    ) -> Tensor:
        """Uniform in [0, 1)."""
        shape = _check_sizes(argfix(*shape), "rand")
        dt = to_dtype(dtype) if dtype is not None else dtypes.default_float
        bits = cls._threefry_bits(prod(shape), device)
        # 23 random mantissa bits under exponent 0 give a float in [1, 2)
        one_to_two = ((bits >> 9) | 0x3F800000).bitcast(dtypes.float32)
        return (one_to_two - 1.0).cast(dt).reshape(shape).requires_grad_(kwargs.get("requires_grad"))

    @classmethod
    def randn(cls: type[Tensor], *shape: Any, dtype: DType | str | None = None, **kwargs: Any) -> Tensor:
        """Standard normal (Box-Muller)."""
        shape = _check_sizes(argfix(*shape), "randn")
        dt = to_dtype(dtype) if dtype is not None else dtypes.default_float
        src = cls.rand((2, *shape), **{k: v for k, v in kwargs.items() if k != "requires_grad"})
        out = src[0].mul(2 * math.pi).cos().mul((1 - src[1]).log().mul(-2).sqrt())
        return out.cast(dt).requires_grad_(kwargs.get("requires_grad"))

    @classmethod
    def uniform(cls: type[Tensor], *shape: Any, low: float = 0.0, high: float = 1.0, **kwargs: Any) -> Tensor:
        dtype = kwargs.pop("dtype", dtypes.default_float)
        rg = kwargs.pop("requires_grad", None)
        return ((high - low) * cls.rand(*shape, **kwargs) + low).cast(dtype).requires_grad_(rg)

    @classmethod
    def scaled_uniform(cls: type[Tensor], *shape: Any, **kwargs: Any) -> Tensor:
        return cls.uniform(*shape, low=-1.0, high=1.0, **kwargs).mul(prod(argfix(*shape)) ** -0.5)

    @classmethod
    def glorot_uniform(cls: type[Tensor], *shape: Any, **kwargs: Any) -> Tensor:
        shape = argfix(*shape)
        bound = (6 / (shape[0] + prod(shape[1:]))) ** 0.5
        return cls.uniform(*shape, low=-bound, high=bound, **kwargs)

    @classmethod
    def kaiming_uniform(cls: type[Tensor], *shape: Any, a: float = 0.01, **kwargs: Any) -> Tensor:
        shape = argfix(*shape)
        bound = math.sqrt(3.0) * math.sqrt(2.0 / (1 + a**2)) / math.sqrt(prod(shape[1:]))
        return cls.uniform(*shape, low=-bound, high=bound, **kwargs)

    @classmethod
    def kaiming_normal(cls: type[Tensor], *shape: Any, a: float = 0.01, **kwargs: Any) -> Tensor:
        shape = argfix(*shape)
        std = math.sqrt(2.0 / (1 + a**2)) / math.sqrt(prod(shape[1:]))
        return cls.normal(*shape, mean=0.0, std=std, **kwargs)

    @classmethod
    def normal(cls: type[Tensor], *shape: Any, mean: float = 0.0, std: float = 1.0, **kwargs: Any) -> Tensor:
        if std < 0:
            raise ValueError(f"normal needs std >= 0, got {std}")
        rg = kwargs.pop("requires_grad", None)
        return (std * cls.randn(*shape, **kwargs) + mean).requires_grad_(rg)

    @classmethod
    def randint(
        cls: type[Tensor], *shape: Any, low: int = 0, high: int = 10, dtype: DType | str = dtypes.int32, **kwargs: Any
    ) -> Tensor:
        """Uniform integers in [low, high)."""
        dt = to_dtype(dtype)
        if not isinstance(low, int) or not isinstance(high, int):
            raise TypeError(f"randint needs integer bounds, got low={low!r} high={high!r}")
        if not dtypes.is_int(dt):
            raise TypeError(f"randint needs an integer dtype, not {dt}")
        if low >= high:
            raise ValueError(f"randint needs low < high, got low={low} high={high}")
        rg = kwargs.pop("requires_grad", None)
        # scale first and add low after the cast, so truncation never rounds a negative value toward zero
        offset = ((high - low) * cls.rand(*shape, dtype=dtypes.float32, **kwargs)).cast(dt)
        return (offset.minimum(high - low - 1) + low).cast(dt).requires_grad_(rg)

    @classmethod
    def linspace(cls: type[Tensor], start: int | float, stop: int | float, steps: int, dtype: DType | str | None = None,
                 **kwargs: Any) -> Tensor:  # fmt: skip
        """`steps` evenly spaced values from `start` to `stop`, both included."""
        (steps,) = _check_sizes((steps,), "linspace")
        dt = to_dtype(dtype) if dtype is not None else dtypes.default_float
        if dt == dtypes.bool:
            raise ValueError("linspace cannot make a bool tensor; pick a numeric dtype")
        device = kwargs.pop("device", None)
        if steps == 1:
            return cls.full((1,), start, device=device, dtype=dt, **kwargs)
        ramp = cls.arange(steps, device=device, dtype=dtypes.default_float)
        return (start + ramp * ((stop - start) / (steps - 1))).cast(dt).requires_grad_(kwargs.get("requires_grad"))

    @classmethod
    def randperm(
        cls: type[Tensor], n: int, device: str | None = None, dtype: DType | str = dtypes.int32, **kwargs: Any
    ) -> Tensor:
        """A random permutation of 0..n-1 (the order that sorts n uniform draws)."""
        return cls.rand(n, device=device).argsort().cast(dtype).requires_grad_(kwargs.get("requires_grad"))

    def multinomial(self: Tensor, num_samples: int = 1, replacement: bool = False) -> Tensor:
        """`num_samples` indices per row drawn with probability proportional to the (non-negative) weights in self."""
        if not 1 <= self.ndim <= 2 or num_samples < 1:
            raise ValueError(
                f"multinomial needs 1 or 2 dimensions and num_samples >= 1, got {self.shape}, {num_samples}"
            )
        weight = (self.unsqueeze(0) if self.ndim == 1 else self).detach().float()  # (rows, n)
        rows, n = weight.shape
        assert isinstance(n, int), "multinomial needs a concrete number of categories"
        if not replacement and num_samples > n:
            raise ValueError(f"multinomial without replacement cannot draw {num_samples} of {n} categories")
        if replacement or num_samples == 1:
            cdf = weight.cumsum(1)
            cdf = cdf / cdf[:, -1:]  # (rows, n)
            draws = self.rand(num_samples, rows, 1, device=self.device)
            indices = (draws >= cdf).sum(2).minimum(n - 1).permute(1, 0)  # (rows, num_samples)
        else:
            # Efraimidis-Spirakis: the largest keys log(u)/w, picked one at a time
            keys = self.rand(rows, n, device=self.device).log() / weight
            picks = []
            for _ in range(num_samples):
                pick = keys.argmax(1, keepdim=True)  # (rows, 1)
                picks.append(pick)
                keys = (pick == self.arange(n, device=self.device)).where(-math.inf, keys)
            indices = picks[0].cat(*picks[1:], dim=1)
        return (indices.squeeze(0) if self.ndim == 1 else indices).cast(dtypes.int32)
