"""Autograd: each `Function` computes forward on LazyBuffers and says how to push a gradient back.
Every Tensor method is built from these, and these only use the primitive ops."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from lazy.dtype import DType, dtypes
from lazy.helpers import argsort
from lazy.lazy import LazyBuffer
from lazy.ops import Ops
from lazy.symbolic import sint

if TYPE_CHECKING:
    from lazy.tensor import Tensor


class Function:
    """One differentiable op. `apply` runs forward and records the context when a gradient may be needed."""

    # False: the result does not require a gradient (comparisons, bitwise ops), as in PyTorch. The op is still
    # recorded when its inputs need gradients, and passes them zeros: an input used only through it gets a zero
    # gradient rather than none (PyTorch's copysign, sign, ...)
    differentiable = True

    def __init__(self, device: str, *tensors: Tensor):
        self.device = device
        flags = [t.requires_grad for t in tensors]
        if any(flags):
            self.requires_grad: bool | None = True
        elif None in flags:
            self.requires_grad = None
        else:
            self.requires_grad = False
        # an input with a recorded history that does not itself require a gradient (a comparison's result) is
        # followed too, so that what it came from gets its zero gradient
        tracked = [f is not False or t._ctx is not None for f, t in zip(flags, tensors)]
        self.needs_input_grad = tracked  # undecided inputs may be asked for by gradient()
        # ops on tensors that may need a gradient (True, or None: undecided) are recorded; False opts out
        self.recorded = any(tracked)
        self.parents: tuple[Tensor, ...] = tensors if self.recorded else ()

    def forward(self, *args: Any, **kwargs: Any) -> LazyBuffer:
        raise NotImplementedError(f"forward not implemented for {type(self).__name__}")

    def backward(self, grad_output: LazyBuffer) -> LazyBuffer | None | tuple[LazyBuffer | None, ...]:
        raise NotImplementedError(f"backward not implemented for {type(self).__name__}")

    @classmethod
    def apply(cls, *x: Tensor, **kwargs: Any) -> Tensor:
        from lazy.tensor import Tensor

        ctx = cls(x[0].device, *x)
        ret = Tensor.__new__(Tensor)
        ret.lazydata, ret.requires_grad, ret.grad = (
            ctx.forward(*[t.lazydata for t in x], **kwargs),
            ctx.requires_grad,
            None,
        )
        ret._ctx = ctx if ctx.recorded and not Tensor.no_grad else None
        if not cls.differentiable:
            ret.requires_grad = False
        return ret


# -- unary ------------------------------------------------------------------------------------------------------------


class Contiguous(Function):
    def forward(self, x: LazyBuffer, copy: bool = False) -> LazyBuffer:
        return x.clone() if copy else x.contiguous()

    def backward(self, grad_output: LazyBuffer) -> LazyBuffer:
        return grad_output


class ContiguousBackward(Function):
    def forward(self, x: LazyBuffer) -> LazyBuffer:
        return x

    def backward(self, grad_output: LazyBuffer) -> LazyBuffer:
        return grad_output.contiguous()


class Cast(Function):
    def forward(self, x: LazyBuffer, dtype: DType, bitcast: bool = False) -> LazyBuffer:
        self.input_dtype, self.bitcast = x.dtype, bitcast
        return x.cast(dtype, bitcast)

    def backward(self, grad_output: LazyBuffer) -> LazyBuffer | None:
        return None if self.bitcast else grad_output.cast(self.input_dtype)  # a bitcast has no gradient


class Neg(Function):
    def forward(self, x: LazyBuffer) -> LazyBuffer:
        return x.e(Ops.NEG)

    def backward(self, grad_output: LazyBuffer) -> LazyBuffer:
        return grad_output.e(Ops.NEG)


class Reciprocal(Function):
    def forward(self, x: LazyBuffer) -> LazyBuffer:
        self.ret = x.e(Ops.RECIP)
        return self.ret

    def backward(self, grad_output: LazyBuffer) -> LazyBuffer:
        return grad_output.e(Ops.NEG).e(Ops.MUL, self.ret).e(Ops.MUL, self.ret)  # d(1/x) = -1/x^2


class Sin(Function):
    def forward(self, x: LazyBuffer) -> LazyBuffer:
        self.x = x
        return x.e(Ops.SIN)

    def backward(self, grad_output: LazyBuffer) -> LazyBuffer:
        # cos(x) = 1 - 2 sin(x/2)^2: x/2 is exact, where pi/2 - x would round away cos's precision for large x
        half = self.x.e(Ops.MUL, self.x.const(0.5)).e(Ops.SIN)
        cos = self.x.const(1).e(Ops.ADD, half.e(Ops.MUL, half).e(Ops.MUL, self.x.const(-2)))
        return cos.e(Ops.MUL, grad_output)


class Relu(Function):
    def forward(self, x: LazyBuffer) -> LazyBuffer:
        self.ret = x.e(Ops.MAX, x.const(0))
        return self.ret

    def backward(self, grad_output: LazyBuffer) -> LazyBuffer:
        return self.ret.const(0).e(Ops.CMPLT, self.ret).cast(grad_output.dtype).e(Ops.MUL, grad_output)


class Log(Function):
    def forward(self, x: LazyBuffer) -> LazyBuffer:
        self.x = x
        return x.e(Ops.LOG2).e(Ops.MUL, x.const(math.log(2)))

    def backward(self, grad_output: LazyBuffer) -> LazyBuffer:
        return grad_output.e(Ops.MUL, self.x.e(Ops.RECIP))


class Exp(Function):
    def forward(self, x: LazyBuffer) -> LazyBuffer:
        self.ret = x.e(Ops.MUL, x.const(1 / math.log(2))).e(Ops.EXP2)
        return self.ret

    def backward(self, grad_output: LazyBuffer) -> LazyBuffer:
        return self.ret.e(Ops.MUL, grad_output)


class Sqrt(Function):
    def forward(self, x: LazyBuffer) -> LazyBuffer:
        self.ret = x.e(Ops.SQRT)
        return self.ret

    def backward(self, grad_output: LazyBuffer) -> LazyBuffer:
        return grad_output.e(Ops.MUL, self.ret.e(Ops.MUL, self.ret.const(2)).e(Ops.RECIP))


class Sigmoid(Function):
    def forward(self, x: LazyBuffer) -> LazyBuffer:
        # 1 / (1 + 2^(-x/ln2))
        self.ret = x.const(1).e(Ops.ADD, x.e(Ops.MUL, x.const(-1 / math.log(2))).e(Ops.EXP2)).e(Ops.RECIP)
        return self.ret

    def backward(self, grad_output: LazyBuffer) -> LazyBuffer:
        return self.ret.e(Ops.MUL, self.ret.const(1).e(Ops.ADD, self.ret.e(Ops.NEG))).e(Ops.MUL, grad_output)


class Sign(Function):
    """-1, 0 or 1 (0 for NaN); its gradient is zero everywhere (PyTorch's convention at 0 too)."""

    def forward(self, x: LazyBuffer) -> LazyBuffer:
        positive = x.const(0).e(Ops.CMPLT, x).cast(x.dtype)
        negative = x.e(Ops.CMPLT, x.const(0)).cast(x.dtype)
        return positive.e(Ops.ADD, negative.e(Ops.NEG))

    def backward(self, grad_output: LazyBuffer) -> LazyBuffer:
        return grad_output.const(0)


class Trunc(Function):
    """Rounding toward zero: floats below `exact` in magnitude round-trip through int64, larger ones (and inf, NaN)
    are integers already. Its gradient is zero, as are floor's, ceil's and round's built on it (PyTorch's)."""

    def forward(self, x: LazyBuffer, exact: float) -> LazyBuffer:
        magnitude = x.e(Ops.MAX, x.e(Ops.NEG))
        small = magnitude.e(Ops.CMPLT, x.const(exact))
        return small.e(Ops.WHERE, x.cast(dtypes.int64).cast(x.dtype), x)

    def backward(self, grad_output: LazyBuffer) -> LazyBuffer:
        return grad_output.const(0)


# -- binary -----------------------------------------------------------------------------------------------------------


class _ZeroGradBinary(Function):
    """A comparison or bitwise op: not differentiable, both inputs get zeros. (The zeros are made only when a
    gradient is asked for: random number generation runs about a hundred of these ops per call.)"""

    differentiable = False
    x: LazyBuffer  # the first input, set by forward

    def backward(self, grad_output: LazyBuffer) -> tuple[LazyBuffer, LazyBuffer]:
        zero = self.x.const(0)
        return zero, zero


class Less(_ZeroGradBinary):
    def forward(self, x: LazyBuffer, y: LazyBuffer) -> LazyBuffer:
        self.x = x
        return x.e(Ops.CMPLT, y)


class Neq(_ZeroGradBinary):
    def forward(self, x: LazyBuffer, y: LazyBuffer) -> LazyBuffer:
        self.x = x
        return x.e(Ops.CMPNE, y)


class BitwiseBinary(_ZeroGradBinary):
    def forward(self, x: LazyBuffer, y: LazyBuffer, op: Ops) -> LazyBuffer:
        self.x = x
        return x.e(op, y)


class IDiv(Function):
    def forward(self, x: LazyBuffer, y: LazyBuffer) -> LazyBuffer:
        return x.e(Ops.IDIV, y)

    def backward(self, grad_output: LazyBuffer) -> tuple[None, None]:
        return None, None


class Mod(Function):
    def forward(self, x: LazyBuffer, y: LazyBuffer) -> LazyBuffer:
        return x.e(Ops.MOD, y)

    def backward(self, grad_output: LazyBuffer) -> tuple[None, None]:
        return None, None


class Add(Function):
    def forward(self, x: LazyBuffer, y: LazyBuffer) -> LazyBuffer:
        return x.e(Ops.ADD, y)

    def backward(self, grad_output: LazyBuffer) -> tuple[LazyBuffer | None, LazyBuffer | None]:
        return (grad_output if self.needs_input_grad[0] else None, grad_output if self.needs_input_grad[1] else None)


class Mul(Function):
    def forward(self, x: LazyBuffer, y: LazyBuffer) -> LazyBuffer:
        self.x, self.y = x, y
        return x.e(Ops.MUL, y)

    def backward(self, grad_output: LazyBuffer) -> tuple[LazyBuffer | None, LazyBuffer | None]:
        return (self.y.e(Ops.MUL, grad_output) if self.needs_input_grad[0] else None,
                self.x.e(Ops.MUL, grad_output) if self.needs_input_grad[1] else None)  # fmt: skip


class Maximum(Function):
    def forward(self, x: LazyBuffer, y: LazyBuffer) -> LazyBuffer:
        self.x, self.y = x, y
        self.ret = x.e(Ops.MAX, y)
        return self.ret

    def backward(self, grad_output: LazyBuffer) -> tuple[LazyBuffer | None, LazyBuffer | None]:
        # ties share the gradient equally, like PyTorch
        x_hit = (
            self.x.e(Ops.CMPNE, self.ret)
            .e(Ops.CMPNE, self.x.const(True, self.x.shape).cast(dtypes.bool))
            .cast(grad_output.dtype)
        )
        y_hit = (
            self.y.e(Ops.CMPNE, self.ret)
            .e(Ops.CMPNE, self.y.const(True, self.y.shape).cast(dtypes.bool))
            .cast(grad_output.dtype)
        )
        total = x_hit.e(Ops.ADD, y_hit)
        share = grad_output.e(Ops.MUL, total.e(Ops.RECIP))
        return (x_hit.e(Ops.MUL, share) if self.needs_input_grad[0] else None,
                y_hit.e(Ops.MUL, share) if self.needs_input_grad[1] else None)  # fmt: skip


class Where(Function):
    def forward(self, cond: LazyBuffer, x: LazyBuffer, y: LazyBuffer) -> LazyBuffer:
        self.cond = cond
        return cond.e(Ops.WHERE, x, y)

    def backward(self, grad_output: LazyBuffer) -> tuple[LazyBuffer | None, LazyBuffer | None, LazyBuffer | None]:
        zero = grad_output.const(0)
        # the condition gets zeros (when it was computed from something that needs a gradient): what it came from
        # gets a zero gradient, not none
        return (self.cond.const(False) if self.needs_input_grad[0] else None,
                self.cond.e(Ops.WHERE, grad_output, zero) if self.needs_input_grad[1] else None,
                self.cond.e(Ops.WHERE, zero, grad_output) if self.needs_input_grad[2] else None)  # fmt: skip


# -- reductions -------------------------------------------------------------------------------------------------------


class Sum(Function):
    def forward(self, x: LazyBuffer, axis: tuple[int, ...]) -> LazyBuffer:
        self.input_shape = x.shape
        return x.r(Ops.SUM, axis)

    def backward(self, grad_output: LazyBuffer) -> LazyBuffer:
        return grad_output.expand(self.input_shape)


class Max(Function):
    def forward(self, x: LazyBuffer, axis: tuple[int, ...]) -> LazyBuffer:
        self.x, self.ret, self.axis = x, x.r(Ops.RMAX, axis), axis
        return self.ret

    def backward(self, grad_output: LazyBuffer) -> LazyBuffer:
        # the gradient is split between all elements equal to the max
        hit = self.x.e(Ops.CMPNE, self.ret.expand(self.x.shape)).e(Ops.CMPNE, self.x.const(True).cast(dtypes.bool))
        hit_f = hit.cast(grad_output.dtype)
        count = hit_f.r(Ops.SUM, self.axis).expand(self.x.shape)
        return hit_f.e(Ops.MUL, count.e(Ops.RECIP)).e(Ops.MUL, grad_output.expand(self.x.shape))


# -- movement ---------------------------------------------------------------------------------------------------------


class Expand(Function):
    def forward(self, x: LazyBuffer, shape: tuple[sint, ...]) -> LazyBuffer:
        self.expanded_axis = tuple(i for i, (si, so) in enumerate(zip(x.shape, shape)) if si != so)
        return x.expand(shape)

    def backward(self, grad_output: LazyBuffer) -> LazyBuffer:
        return grad_output.r(Ops.SUM, self.expanded_axis)


class Reshape(Function):
    def forward(self, x: LazyBuffer, shape: tuple[sint, ...]) -> LazyBuffer:
        self.input_shape = x.shape
        return x.reshape(shape)

    def backward(self, grad_output: LazyBuffer) -> LazyBuffer:
        return grad_output.reshape(self.input_shape)


class Permute(Function):
    def forward(self, x: LazyBuffer, order: tuple[int, ...]) -> LazyBuffer:
        self.input_order = order
        return x.permute(order)

    def backward(self, grad_output: LazyBuffer) -> LazyBuffer:
        return grad_output.permute(tuple(argsort(self.input_order)))


class Pad(Function):
    def forward(self, x: LazyBuffer, arg: tuple[tuple[sint, sint], ...]) -> LazyBuffer:
        self.narg = tuple((p[0], s + p[0]) for s, p in zip(x.shape, arg))
        return x.pad(arg)

    def backward(self, grad_output: LazyBuffer) -> LazyBuffer:
        return grad_output.shrink(self.narg)


class Shrink(Function):
    def forward(self, x: LazyBuffer, arg: tuple[tuple[sint, sint], ...]) -> LazyBuffer:
        self.narg = tuple((p[0], s - p[1]) for s, p in zip(x.shape, arg))
        return x.shrink(arg)

    def backward(self, grad_output: LazyBuffer) -> LazyBuffer:
        return grad_output.pad(self.narg)


class Flip(Function):
    def forward(self, x: LazyBuffer, axis: tuple[int, ...]) -> LazyBuffer:
        self.arg = tuple(-1 if i in axis else 1 for i in range(len(x.shape)))
        return x.stride(self.arg)

    def backward(self, grad_output: LazyBuffer) -> LazyBuffer:
        return grad_output.stride(self.arg)
