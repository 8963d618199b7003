"""What an ONNX operator handler is given (`Node`) and how it is declared (`OpSpec`): which inputs it reads on the
host, whether it can run on numpy when every input is there, and what it refuses at load."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from lazy.record import field, record


class UnsupportedModelError(NotImplementedError, ValueError):
    """The model uses operators, opsets, dtypes or attribute values lazy.onnx cannot run; the message lists all of
    them."""


class InvalidModelError(ValueError):
    """A node breaks the ONNX specification (an axis out of range, sizes that do not add up); the message names
    it."""


@record(frozen=True)
class Node:
    """One graph node as its handler sees it: attributes decoded (strings as str, tensors as numpy arrays)."""

    op: str
    name: str
    attrs: dict[str, Any]
    opset: int  # the model's default-domain opset
    n_outputs: int  # outputs asked for (an omitted trailing optional output is not asked for)
    device: str

    def attr(self, key: str, default: Any = None) -> Any:
        return self.attrs.get(key, default)

    def ints(self, key: str, default: Sequence[int] = ()) -> list[int]:
        return [int(v) for v in self.attrs.get(key, default)]

    @property
    def label(self) -> str:
        return f"{self.op} node {self.name!r}"

    def refuse(self, what: str) -> UnsupportedModelError:
        """The error for a feature of this node that lazy.onnx does not implement."""
        return UnsupportedModelError(f"lazy.onnx: {self.label}: {what}")

    def invalid(self, what: str) -> InvalidModelError:
        """The error for a node that breaks the ONNX specification."""
        return InvalidModelError(f"lazy.onnx: {self.label}: {what}")


@record(frozen=True)
class OpSpec:
    """An operator's handler `run(node, xp, *inputs)` (absent optional inputs are None) returning one value or a tuple.

    `static`: input positions read as numpy arrays on the host (shapes, axes, pads, k...): a value computed on the
    device is copied out (a sync), as its data decides shapes. `either`: positions passed as numpy when known on the
    host, else as Tensors (Gather's indices: a host index is a view, not a kernel). `meta`: positions passed as they
    are, only their shape and dtype read (Shape, CastLike). Every other input arrives as a Tensor on the model's
    device, unless `host`: the handler is written against `xp` and runs on numpy (`xp` = HOST) when every input that
    is neither static nor meta is known on the host. `check(node)` names an attribute value the handler cannot run,
    at load."""

    run: Callable[..., Any]
    static: tuple[int, ...] = ()
    either: tuple[int, ...] = ()
    meta: tuple[int, ...] = ()
    host: bool = False
    check: Callable[[Node], str | None] | None = field(default=None)


def axis_of(node: Node, axis: int, ndim: int) -> int:
    """An axis attribute in [-ndim, ndim) as an index in [0, ndim), or the error naming the node."""
    if not -ndim <= axis < max(ndim, 1):
        raise node.invalid(f"axis {axis} is out of range for a {ndim}-d input")
    return axis % max(ndim, 1)


def ints(values: Any) -> list[int]:
    """A host array of integers (a shape, axes, pads) as a list."""
    return [int(v) for v in values.reshape(-1)]


def axes_input(node: Node, axes: Any) -> list[int] | None:
    """Axes from the input (opset 13+ for Squeeze/Unsqueeze/ReduceSum, 18+ for the other reductions and Pad) or
    from the attribute of older opsets; None when neither is given."""
    if axes is not None:
        return ints(axes)
    return node.ints("axes") if "axes" in node.attrs else None
