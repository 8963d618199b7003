"""Where a `Tensor` lives: `to` another device, `shard` over several (a `MultiLazyBuffer`, one shard per device), their
in-place forms, and `clone`. A mixin of `Tensor`, built only from its basic methods."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lazy import function as F
from lazy.helpers import ArgumentError
from lazy.lazy import LazyBuffer
from lazy.multi import MultiLazyBuffer, _own_copy
from lazy.plugins import Device
from lazy.tensor_base import TensorBase

if TYPE_CHECKING:
    from typing_extensions import Self


def check_devices(devices: Any) -> tuple[str, ...]:
    """Canonical names of the devices a tensor is sharded over, refusing an empty list and a device named twice."""
    if isinstance(devices, str) or not isinstance(devices, (tuple, list)):
        raise TypeError(f"shard: devices must be a tuple or list of device names, got {devices!r}")
    if not devices:
        raise ArgumentError("shard: the device list is empty; name at least one device, e.g. ('CPU:0', 'CPU:1')")
    names = tuple(Device.canonicalize(d) for d in devices)
    for name in names:
        Device[name]  # an unknown or unusable device is refused now, by name, not at the first kernel on it
    if len(set(names)) != len(names):
        twice = sorted({n for n in names if names.count(n) > 1})
        raise ArgumentError(f"shard: {', '.join(twice)} is listed more than once in {tuple(devices)} (CPU and CPU:0 "
                            "are the same device); list each device once")  # fmt: skip
    return names


class PlacementMixin(TensorBase):
    """Moving, replicating and sharding `Tensor`s across devices."""

    __slots__ = ()  # Tensor keeps its slots: no per-instance __dict__

    def to(self, device: str | tuple[str, ...] | list[str] | None) -> Self:
        """The tensor on `device` (the default device for None): self when it is already there, else a copy that keeps
        requires_grad and a copy of `.grad`. The copy of a tensor that requires a gradient is part of the graph: the
        gradient flows back through it to self (PyTorch's `.to`). A tuple or list of devices replicates it on each;
        a sharded tensor moved to one device is gathered there (a new leaf)."""
        if isinstance(device, (tuple, list)):
            return self.shard(device) if check_devices(device) != self.device else self
        device = Device.canonicalize(device) if device is not None else Device.DEFAULT
        if device == self.device:
            return self
        if self.requires_grad and isinstance(self.lazydata, LazyBuffer):
            ret = self._apply(F.ToDevice, device=device)
        else:
            ret = type(self)(self.lazydata.copy_to_device(device), device, requires_grad=self.requires_grad)
        if self.grad is not None:
            ret.grad = self.grad.to(device)
        return ret

    def shard(self, devices: tuple[str, ...] | list[str], axis: int | None = None) -> Self:
        """The tensor split along `axis` over `devices` (None: a whole copy on each), one shard per device: equal
        shards of ceil(size / len(devices)), the last smaller. Ops on it run per shard; a reduction over the split
        axis combines the shards' partial results by a ring allreduce. A sharded tensor is resharded by copies.
        The result is a new leaf (gradients do not flow back through `shard`) that keeps requires_grad."""
        names = check_devices(devices)
        if axis is not None and self.ndim == 0:
            raise ArgumentError(f"shard: a 0-d tensor has no axis {axis} to split; replicate it with axis=None")
        ax = None if axis is None else self._resolve_axis(axis)
        if isinstance(self.lazydata, MultiLazyBuffer):
            if names != self.device:  # other devices: gathered on the first of them, split from there
                return self.to(names[0]).shard(names, axis)
            # in memory of their own, as a first split's shards are: resharded ones are views of the gathered value
            # (or the very shards, for the same layout), and a write into them (an optimizer's step) was refused or
            # went into the tensor they were split from
            moved = self.lazydata.resharded(ax)
            multi = MultiLazyBuffer([_own_copy(lb, lb.device) for lb in moved.lbs], moved.axis, moved.bounds)
        else:
            multi = MultiLazyBuffer.from_lazybuffer(self.lazydata, names, ax)
        return type(self)(multi, requires_grad=self.requires_grad)

    def shard_(self, devices: tuple[str, ...] | list[str], axis: int | None = None) -> Self:
        """`shard` in place: self's data becomes the sharded value; returns self."""
        self.lazydata = self.shard(devices, axis).lazydata
        return self

    def to_(self, device: str | tuple[str, ...] | list[str] | None) -> Self:
        """Move self's data (and `.grad`) to `device` in place; returns self."""
        moved = self.to(device)
        self.lazydata, self.grad = moved.lazydata, moved.grad
        return self

    def clone(self, device: str | None = None) -> Self:
        """A copy in memory of its own (later writes into self do not show in it); gradients flow through it."""
        if device is not None and Device.canonicalize(device) != self.device:
            return self.to(device).clone()
        return self._apply(F.Contiguous, copy=True)
