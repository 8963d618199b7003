"""Autograd: each `Function` computes forward on LazyBuffers and says how to push a gradient back.
Every Tensor method is built from these, and these only use the primitive ops. A backward runs either on LazyBuffers
(a plain gradient) or on `TracedBuffer`s, Tensors behind the same methods, whose ops are Functions again: then the
gradient has a history of its own and can be differentiated (a gradient of a gradient, a Hessian-vector product)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, TypeVar

from lazy.dtype import NARROW_FLOATS, DType, dtypes, sum_acc_dtype
from lazy.helpers import argsort
from lazy.lazy import LazyBuffer
from lazy.ops import Ops
from lazy.symbolic import sint

if TYPE_CHECKING:
    from lazy.tensor import Tensor

# what a backward computes on: LazyBuffers, or Tensors recording every op (see `TracedBuffer`)
B = TypeVar("B", LazyBuffer, "TracedBuffer")


class Function:
    """One differentiable op. `apply` runs forward and records the context when a gradient may be needed.

    `backward(grad_output, ret, *inputs)` gets the gradient of the result, the result and the inputs (all
    LazyBuffers, or all `TracedBuffer`s) and returns the gradient of each input (None: none). It may use nothing
    else that depends on the inputs' values: what it needs it takes from `ret` and `inputs`, so that when it runs on
    Tensors, its ops connect to the forward graph and a gradient of the gradient follows them."""

    # False: the result does not require a gradient (comparisons, bitwise ops), as in PyTorch. The op is still
    # recorded when its inputs need gradients, and passes them zeros: an input used only through it gets a zero
    # gradient rather than none (PyTorch's copysign, sign, ...)
    differentiable = True
    inputs: tuple[LazyBuffer, ...]  # what forward got and gave, kept (by `apply`) when the op is recorded
    output: LazyBuffer

    def __init__(self, device: str, *tensors: Tensor):
        self.device = device
        # True if any input requires a gradient, else None if any is undecided, else False. An input with a recorded
        # history that does not itself require a gradient (a comparison's result) is followed too, so that what it
        # came from gets its zero gradient. (One loop: every eager op runs this.)
        requires_grad: bool | None = False
        tracked = []
        for t in tensors:
            flag = t.requires_grad
            if flag:
                requires_grad = True
            elif flag is None and requires_grad is False:
                requires_grad = None
            tracked.append(flag is not False or t._ctx is not None)
        self.requires_grad = requires_grad
        self.needs_input_grad = tracked  # undecided inputs may be asked for by gradient()
        # ops on tensors that may need a gradient (True, or None: undecided) are recorded; False opts out
        self.recorded = True in tracked
        self.parents: tuple[Tensor, ...] = tensors if self.recorded else ()

    def forward(self, *args: Any, **kwargs: Any) -> LazyBuffer:
        raise NotImplementedError(f"forward not implemented for {type(self).__name__}")

    def backward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"backward not implemented for {type(self).__name__}")

    def input_gradients(self, grad_output: Tensor, output: Tensor, record: bool) -> tuple[Tensor | None, ...]:
        """The gradient of each input, from `grad_output`, the gradient of `output` (the tensor this op made). With
        `record`, backward runs on the input and output tensors themselves, so every op of the gradient is recorded
        and the gradient can be differentiated again; without, on LazyBuffers (cheaper, no history)."""
        if record:
            # a tensor whose value was replaced since (assign) stands for its old value as a constant
            ins = [TracedBuffer(p if p.lazydata is lb else _constant(lb)) for p, lb in zip(self.parents, self.inputs)]
            ret = TracedBuffer(output if output.lazydata is self.output else _constant(self.output))
            traced = self.backward(TracedBuffer(grad_output), ret, *ins)
            return tuple(None if g is None else g.tensor for g in (traced if isinstance(traced, tuple) else (traced,)))
        plain = self.backward(grad_output.lazydata, self.output, *self.inputs)
        return tuple(None if g is None else _constant(g) for g in (plain if isinstance(plain, tuple) else (plain,)))

    @classmethod
    def apply(cls, *x: Tensor, **kwargs: Any) -> Tensor:
        tensor = _tensor_class or _load_tensor_class()
        inputs = tuple([t.lazydata for t in x])
        ctx = cls(inputs[0].device, *x)
        ret = tensor.__new__(tensor)
        ret.lazydata = out = ctx.forward(*inputs, **kwargs)
        ret.requires_grad, ret.grad = ctx.requires_grad if cls.differentiable else False, None
        if ctx.recorded and not tensor.no_grad:
            ret._ctx, ctx.inputs, ctx.output = ctx, inputs, out
        else:
            ret._ctx = None
        return ret


# `lazy.tensor.Tensor`, which imports this module: looked up once, not by an import statement in every eager op's
# `apply` (an import that finds its module still costs ~1 us)
_tensor_class: type[Tensor] | None = None


def _load_tensor_class() -> type[Tensor]:
    global _tensor_class
    from lazy.tensor import Tensor

    _tensor_class = Tensor
    return Tensor


def _constant(lb: LazyBuffer) -> Tensor:
    """A Tensor of `lb` with no history and no gradient."""
    tensor = _tensor_class or _load_tensor_class()
    ret = tensor.__new__(tensor)
    ret.lazydata, ret.requires_grad, ret.grad, ret._ctx = lb, False, None, None
    return ret


class TracedBuffer:
    """A Tensor behind LazyBuffer's methods: a backward written for LazyBuffers runs on it unchanged, and each op it
    uses is applied as the Function of that primitive, so the gradient it builds is recorded like any other op."""

    __slots__ = ("tensor",)

    def __init__(self, tensor: Tensor):
        self.tensor = tensor

    @property
    def shape(self) -> tuple[sint, ...]:
        return self.tensor.lazydata.shape

    @property
    def dtype(self) -> DType:
        return self.tensor.lazydata.dtype

    def e(self, op: Ops, *srcs: TracedBuffer) -> TracedBuffer:
        fn, kwargs = _ALU_FUNCTIONS[op]
        return TracedBuffer(fn.apply(self.tensor, *(s.tensor for s in srcs), **kwargs))

    def r(self, op: Ops, axis: tuple[int, ...]) -> TracedBuffer:
        return TracedBuffer({Ops.SUM: Sum, Ops.RMAX: Max}[op].apply(self.tensor, axis=axis))

    def const(self, val: Any, shape: tuple[sint, ...] | None = None) -> TracedBuffer:
        return TracedBuffer(_constant(self.tensor.lazydata.const(val, shape)))

    def cast(self, dtype: DType, bitcast: bool = False) -> TracedBuffer:
        return TracedBuffer(Cast.apply(self.tensor, dtype=dtype, bitcast=bitcast))

    def contiguous(self) -> TracedBuffer:
        return TracedBuffer(Contiguous.apply(self.tensor))

    def copy_to_device(self, device: str) -> TracedBuffer:
        return TracedBuffer(ToDevice.apply(self.tensor, device=device))

    def reshape(self, shape: tuple[sint, ...]) -> TracedBuffer:
        return TracedBuffer(Reshape.apply(self.tensor, shape=shape))

    def expand(self, shape: tuple[sint, ...]) -> TracedBuffer:
        return TracedBuffer(Expand.apply(self.tensor, shape=shape))

    def permute(self, order: tuple[int, ...]) -> TracedBuffer:
        return TracedBuffer(Permute.apply(self.tensor, order=order))

    def pad(self, arg: tuple[tuple[sint, sint], ...]) -> TracedBuffer:
        return TracedBuffer(Pad.apply(self.tensor, arg=arg))

    def shrink(self, arg: tuple[tuple[sint, sint], ...]) -> TracedBuffer:
        return TracedBuffer(Shrink.apply(self.tensor, arg=arg))

    def stride(self, arg: tuple[int, ...]) -> TracedBuffer:
        assert all(s in (1, -1) for s in arg), f"only flips are differentiable strides, got {arg}"
        return TracedBuffer(Flip.apply(self.tensor, axis=tuple(i for i, s in enumerate(arg) if s == -1)))


# -- unary ------------------------------------------------------------------------------------------------------------


class Contiguous(Function):
    def forward(self, x: LazyBuffer, copy: bool = False) -> LazyBuffer:
        return x.clone() if copy else x.contiguous()

    def backward(self, grad_output: B, ret: B, x: B) -> B:
        return grad_output


class ToDevice(Function):
    """A copy to another device, part of the graph: its gradient is copied back to the source's device (PyTorch's
    `.to`; a copy that dropped the history left the source without a gradient, silently)."""

    def forward(self, x: LazyBuffer, device: str) -> LazyBuffer:
        return x.copy_to_device(device)

    def backward(self, grad_output: B, ret: B, x: B) -> B:
        return grad_output.copy_to_device(self.device)


class ContiguousBackward(Function):
    def forward(self, x: LazyBuffer) -> LazyBuffer:
        return x

    def backward(self, grad_output: B, ret: B, x: B) -> B:
        return grad_output.contiguous()


class Cast(Function):
    def forward(self, x: LazyBuffer, dtype: DType, bitcast: bool = False) -> LazyBuffer:
        self.bitcast = bitcast
        return x.cast(dtype, bitcast)

    def backward(self, grad_output: B, ret: B, x: B) -> B | None:
        return None if self.bitcast else grad_output.cast(x.dtype)  # a bitcast has no gradient


class Neg(Function):
    def forward(self, x: LazyBuffer) -> LazyBuffer:
        return x.e(Ops.NEG)

    def backward(self, grad_output: B, ret: B, x: B) -> B:
        return grad_output.e(Ops.NEG)


class Div(Function):
    """x / y for floats, rounded once (`Ops.FDIV`)."""

    def forward(self, x: LazyBuffer, y: LazyBuffer) -> LazyBuffer:
        return x.e(Ops.FDIV, y)

    def backward(self, grad_output: B, ret: B, x: B, y: B) -> tuple[B | None, B | None]:
        # d(x/y)/dx = 1/y, d(x/y)/dy = -x/y^2 = -(x/y)/y (no y*y to underflow)
        dx = grad_output.e(Ops.FDIV, y) if self.needs_input_grad[0] else None
        dy = grad_output.e(Ops.MUL, ret).e(Ops.NEG).e(Ops.FDIV, y) if self.needs_input_grad[1] else None
        return dx, dy


class Reciprocal(Function):
    def forward(self, x: LazyBuffer) -> LazyBuffer:
        return x.e(Ops.RECIP)

    def backward(self, grad_output: B, ret: B, x: B) -> B:
        return grad_output.e(Ops.NEG).e(Ops.MUL, ret).e(Ops.MUL, ret)  # d(1/x) = -1/x^2


class Sin(Function):
    def forward(self, x: LazyBuffer) -> LazyBuffer:
        return x.e(Ops.SIN)

    def backward(self, grad_output: B, ret: B, x: B) -> B:
        # cos(x) = 1 - 2 sin(x/2)^2: x/2 is exact, where pi/2 - x would round away cos's precision for large x
        half = x.e(Ops.MUL, x.const(0.5)).e(Ops.SIN)
        cos = x.const(1).e(Ops.ADD, half.e(Ops.MUL, half).e(Ops.MUL, x.const(-2)))
        return cos.e(Ops.MUL, grad_output)


class Relu(Function):
    def forward(self, x: LazyBuffer) -> LazyBuffer:
        return x.e(Ops.MAX, x.const(0))

    def backward(self, grad_output: B, ret: B, x: B) -> B:
        # a select, as PyTorch's threshold_backward (a NaN or inf gradient where the input was not positive gives 0,
        # not NaN), and one that vectorizes where a bool-to-float cast would not. Its test, as PyTorch's, is "not
        # ret <= 0": ret = max(x, 0) is 0 there, and a NaN input (ret NaN) passes the gradient
        return ret.e(Ops.CMPNE, ret.const(0)).e(Ops.WHERE, grad_output, grad_output.const(0))


class Log(Function):
    def forward(self, x: LazyBuffer) -> LazyBuffer:
        return x.e(Ops.LOG2).e(Ops.MUL, x.const(math.log(2)))

    def backward(self, grad_output: B, ret: B, x: B) -> B:
        return grad_output.e(Ops.MUL, x.e(Ops.RECIP))


class Log2(Function):
    def forward(self, x: LazyBuffer) -> LazyBuffer:
        return x.e(Ops.LOG2)

    def backward(self, grad_output: B, ret: B, x: B) -> B:
        return grad_output.e(Ops.MUL, x.e(Ops.MUL, x.const(math.log(2))).e(Ops.RECIP))  # d log2(x) = 1/(x ln 2)


class Exp(Function):
    def forward(self, x: LazyBuffer) -> LazyBuffer:
        return x.e(Ops.MUL, x.const(1 / math.log(2))).e(Ops.EXP2)

    def backward(self, grad_output: B, ret: B, x: B) -> B:
        return ret.e(Ops.MUL, grad_output)


class Exp2(Function):
    def forward(self, x: LazyBuffer) -> LazyBuffer:
        return x.e(Ops.EXP2)

    def backward(self, grad_output: B, ret: B, x: B) -> B:
        return ret.e(Ops.MUL, ret.const(math.log(2))).e(Ops.MUL, grad_output)  # d 2^x = 2^x ln 2


class Sqrt(Function):
    def forward(self, x: LazyBuffer) -> LazyBuffer:
        return x.e(Ops.SQRT)

    def backward(self, grad_output: B, ret: B, x: B) -> B:
        return grad_output.e(Ops.MUL, ret.e(Ops.MUL, ret.const(2)).e(Ops.RECIP))


class Sigmoid(Function):
    """1 / (1 + exp(-x)), and exp(x) / (1 + exp(x)) below 0, which underflows gradually (1 / (1 + exp(-x)) is 0 once
    exp(-x) overflows); one exp2 of -|x| either way. The gradient is the output's: s (1 - s)."""

    def forward(self, x: LazyBuffer) -> LazyBuffer:
        negative = x.e(Ops.CMPLT, x.const(0))
        decay = negative.e(Ops.WHERE, x, x.e(Ops.NEG)).e(Ops.MUL, x.const(1 / math.log(2))).e(Ops.EXP2)  # exp(-|x|)
        of_abs = x.const(1).e(Ops.ADD, decay).e(Ops.RECIP)  # sigmoid(|x|)
        return negative.e(Ops.WHERE, decay.e(Ops.MUL, of_abs), of_abs)

    def backward(self, grad_output: B, ret: B, x: B) -> B:
        return ret.e(Ops.MUL, ret.const(1).e(Ops.ADD, ret.e(Ops.NEG))).e(Ops.MUL, grad_output)


class Sign(Function):
    """-1, 0 or 1 (0 for NaN); its gradient is zero everywhere (PyTorch's convention at 0 too)."""

    def forward(self, x: LazyBuffer) -> LazyBuffer:
        positive = x.const(0).e(Ops.CMPLT, x).cast(x.dtype)
        negative = x.e(Ops.CMPLT, x.const(0)).cast(x.dtype)
        return positive.e(Ops.ADD, negative.e(Ops.NEG))

    def backward(self, grad_output: B, ret: B, x: B) -> B:
        return x.const(0)


class Trunc(Function):
    """Rounding toward zero. Its gradient is zero, as are floor's, ceil's and round's built on it (PyTorch's)."""

    def forward(self, x: LazyBuffer) -> LazyBuffer:
        return _truncate(x)

    def backward(self, grad_output: B, ret: B, x: B) -> B:
        return x.const(0)


def _truncate(x: LazyBuffer) -> LazyBuffer:
    """Floats below 2^mantissa in magnitude round-trip through int64; larger ones (and inf, NaN) are integers. A zero
    result keeps x's sign, x * 0 (trunc(-0.5) is -0.0, as C's trunc; the int64 round trip gives +0.0)."""
    exact = {dtypes.float16: 2.0**10, dtypes.bfloat16: 2.0**7, dtypes.float32: 2.0**23}.get(x.dtype, 2.0**52)
    magnitude = x.e(Ops.MAX, x.e(Ops.NEG))
    small = magnitude.e(Ops.CMPLT, x.const(exact))
    whole = x.cast(dtypes.int64).cast(x.dtype)
    whole = whole.e(Ops.CMPNE, x.const(0)).e(Ops.WHERE, whole, x.e(Ops.MUL, x.const(0)))
    return small.e(Ops.WHERE, whole, x)


# -- binary -----------------------------------------------------------------------------------------------------------


class _ZeroGradBinary(Function):
    """A comparison or bitwise op: not differentiable, both inputs get zeros. (The zeros are made only when a
    gradient is asked for: random number generation runs about a hundred of these ops per call.)"""

    differentiable = False

    def backward(self, grad_output: B, ret: B, x: B, y: B) -> tuple[B, B]:
        return x.const(0), y.const(0)


class Less(_ZeroGradBinary):
    def forward(self, x: LazyBuffer, y: LazyBuffer) -> LazyBuffer:
        return x.e(Ops.CMPLT, y)


class Neq(_ZeroGradBinary):
    def forward(self, x: LazyBuffer, y: LazyBuffer) -> LazyBuffer:
        return x.e(Ops.CMPNE, y)


class BitwiseBinary(_ZeroGradBinary):
    def forward(self, x: LazyBuffer, y: LazyBuffer, op: Ops) -> LazyBuffer:
        return x.e(op, y)


class IDiv(Function):
    def forward(self, x: LazyBuffer, y: LazyBuffer) -> LazyBuffer:
        return x.e(Ops.IDIV, y)

    def backward(self, grad_output: B, ret: B, x: B, y: B) -> tuple[None, None]:
        return None, None


class Mod(Function):
    def forward(self, x: LazyBuffer, y: LazyBuffer) -> LazyBuffer:
        return x.e(Ops.MOD, y)

    def backward(self, grad_output: B, ret: B, x: B, y: B) -> tuple[None, None]:
        return None, None


class Add(Function):
    def forward(self, x: LazyBuffer, y: LazyBuffer) -> LazyBuffer:
        return x.e(Ops.ADD, y)

    def backward(self, grad_output: B, ret: B, x: B, y: B) -> tuple[B | None, B | None]:
        return (grad_output if self.needs_input_grad[0] else None, grad_output if self.needs_input_grad[1] else None)


class Sub(Function):
    """x - y as one recorded op; its graph is that of x + (-y) (there is no SUB primitive)."""

    def forward(self, x: LazyBuffer, y: LazyBuffer) -> LazyBuffer:
        return x.e(Ops.ADD, y.e(Ops.NEG))

    def backward(self, grad_output: B, ret: B, x: B, y: B) -> tuple[B | None, B | None]:
        return (grad_output if self.needs_input_grad[0] else None,
                grad_output.e(Ops.NEG) if self.needs_input_grad[1] else None)  # fmt: skip


class Mul(Function):
    def forward(self, x: LazyBuffer, y: LazyBuffer) -> LazyBuffer:
        return x.e(Ops.MUL, y)

    def backward(self, grad_output: B, ret: B, x: B, y: B) -> tuple[B | None, B | None]:
        return (y.e(Ops.MUL, grad_output) if self.needs_input_grad[0] else None,
                x.e(Ops.MUL, grad_output) if self.needs_input_grad[1] else None)  # fmt: skip


class Maximum(Function):
    def forward(self, x: LazyBuffer, y: LazyBuffer) -> LazyBuffer:
        return x.e(Ops.MAX, y)

    def backward(self, grad_output: B, ret: B, x: B, y: B) -> tuple[B | None, B | None]:
        # the larger input gets the gradient and ties share it equally; where either is NaN (which max propagates) both
        # get it, as in PyTorch. Decided by comparing the inputs with each other, not with `ret`: an input recomputed
        # for the backward (a reduction in another kernel, summed in another order) may differ from the forward's by
        # an ulp, and a test against the stored result then matched neither input (0/0: a NaN gradient)
        # Selected, not multiplied by a 0/1 share: the input not taken gets 0 even where the gradient is NaN or inf
        # (0 * NaN was NaN; PyTorch's is 0)
        zero, half = grad_output.const(0, x.shape), grad_output.const(0.5, x.shape)
        nan = x.e(Ops.CMPNE, x).e(Ops.OR, y.e(Ops.CMPNE, y))
        x_less, y_less = x.e(Ops.CMPLT, y), y.e(Ops.CMPLT, x)
        halved = grad_output.e(Ops.MUL, half)
        x_grad = nan.e(Ops.WHERE, grad_output, y_less.e(Ops.WHERE, grad_output, x_less.e(Ops.WHERE, zero, halved)))
        y_grad = nan.e(Ops.WHERE, grad_output, x_less.e(Ops.WHERE, grad_output, y_less.e(Ops.WHERE, zero, halved)))
        return (x_grad if self.needs_input_grad[0] else None, y_grad if self.needs_input_grad[1] else None)


class Where(Function):
    def forward(self, cond: LazyBuffer, x: LazyBuffer, y: LazyBuffer) -> LazyBuffer:
        return cond.e(Ops.WHERE, x, y)

    def backward(self, grad_output: B, ret: B, cond: B, x: B, y: B) -> tuple[B | None, B | None, B | None]:
        zero = grad_output.const(0)
        # the condition gets zeros (when it was computed from something that needs a gradient): what it came from
        # gets a zero gradient, not none
        return (cond.const(False) if self.needs_input_grad[0] else None,
                cond.e(Ops.WHERE, grad_output, zero) if self.needs_input_grad[1] else None,
                cond.e(Ops.WHERE, zero, grad_output) if self.needs_input_grad[2] else None)  # fmt: skip


class Pow(Function):
    """x ** y of floats as C's pow (IEEE 754) and PyTorch give it: 1 for y == 0 and for x == 1, the sign of x for odd
    integer y (-0.0 too), NaN for a finite negative x with a fractional y, the infinities' limits."""

    def forward(self, x: LazyBuffer, y: LazyBuffer) -> LazyBuffer:
        return _power(x, y)

    def backward(self, grad_output: B, ret: B, x: B, y: B) -> tuple[B | None, B | None]:
        zero = grad_output.const(0)
        dx = dy = None
        if self.needs_input_grad[0]:  # y x^(y-1), 0 where y == 0 (PyTorch's)
            nonzero = y.e(Ops.CMPNE, y.const(0))
            # the power taken of 1 where y == 0: x^-1 at x = 0 is inf there, and a second derivative through the
            # branch not taken multiplied its 0 by that (NaN; PyTorch's is 0)
            base = nonzero.e(Ops.WHERE, x, x.const(1))
            slope = y.e(Ops.MUL, _recorded(Pow, base, y.e(Ops.ADD, y.const(-1))))
            dx = nonzero.e(Ops.WHERE, slope, zero).e(Ops.MUL, grad_output)
        if self.needs_input_grad[1]:  # x^y ln x, 0 where x == 0 and y >= 0 (NaN for a negative x, as PyTorch)
            slope = ret.e(Ops.MUL, x.e(Ops.LOG2).e(Ops.MUL, x.const(math.log(2))))
            y_nonnegative = y.const(0).e(Ops.CMPLT, y).e(Ops.OR, _equals(y, 0.0))  # (False for NaN)
            keep = x.e(Ops.CMPNE, x.const(0)).e(Ops.WHERE, slope, y_nonnegative.e(Ops.WHERE, zero, slope))
            dy = keep.e(Ops.MUL, grad_output)
        return dx, dy


class CopySign(Function):
    """|x| with the sign bit of y, bit for bit (so -0.0 and a NaN with its sign bit set count as negative), for
    floats. The gradient is PyTorch's: x's is +-1 (NaN where x is NaN or infinite, 0 where x is 0), y's zeros."""

    def forward(self, x: LazyBuffer, y: LazyBuffer) -> LazyBuffer:
        bits, sign, rest = _sign_bit_masks(x.dtype)
        x_bits, y_bits = x.cast(bits, bitcast=True), y.cast(bits, bitcast=True)
        return (
            x_bits.e(Ops.AND, x_bits.const(rest)).e(Ops.OR, y_bits.e(Ops.AND, y_bits.const(sign))).cast(x.dtype, True)
        )

    def backward(self, grad_output: B, ret: B, x: B, y: B) -> tuple[B, B]:
        bits = _sign_bit_masks(x.dtype)[0]
        flipped = (
            x.cast(bits, bitcast=True).e(Ops.XOR, ret.cast(bits, bitcast=True)).e(Ops.CMPLT, x.const(0).cast(bits))
        )
        unit = flipped.e(Ops.WHERE, x.const(-1), x.const(1)).e(Ops.MUL, x.e(Ops.MUL, x.const(0)).e(Ops.ADD, x.const(1)))
        slope = x.e(Ops.CMPNE, x.const(0)).e(Ops.WHERE, unit, x.const(0))  # (x*0 + 1: NaN for inf and NaN)
        return slope.e(Ops.MUL, grad_output), y.const(0)


def _sign_bit_masks(dtype: DType) -> tuple[DType, int, int]:
    """The signed integer dtype of a float's size, its sign bit and the other bits (as values of that dtype)."""
    bits = {2: dtypes.int16, 4: dtypes.int32, 8: dtypes.int64}[dtype.itemsize]
    top = 8 * dtype.itemsize - 1
    return bits, -(1 << top), (1 << top) - 1


def _power(x: LazyBuffer, y: LazyBuffer) -> LazyBuffer:
    """|x|^y = 2^(y log2|x|), then the cases where that is not the answer (see `Pow`). A constant exponent takes
    PyTorch's shortcuts: integers multiply (exact), 0.5 and -0.5 are a square root (so (-inf)**0.5 is NaN there)."""
    const = y.const_value() if y.is_unrealized_unmasked_const() else None
    if isinstance(const, (int, float)) and math.isfinite(const):
        if const == int(const) and abs(const) <= 64:
            return _integer_power(x, int(const))
        if const in (0.5, -0.5):
            return x.e(Ops.SQRT) if const > 0 else x.e(Ops.SQRT).e(Ops.RECIP)

    magnitude = x.e(Ops.MAX, x.e(Ops.NEG)).e(Ops.LOG2).e(Ops.MUL, y).e(Ops.EXP2)
    infinite_y = _equals(y.e(Ops.MAX, y.e(Ops.NEG)), math.inf)
    is_int = _equals(y.e(Ops.ADD, _truncate(y).e(Ops.NEG)), 0.0).e(Ops.OR, infinite_y)  # (False for NaN)
    half = y.e(Ops.MUL, y.const(0.5))
    odd = is_int.e(Ops.AND, half.e(Ops.CMPNE, _truncate(half)))  # (+-inf and huge floats are even)
    zero = x.const(0)
    sign_bit = x.e(Ops.CMPLT, zero).e(Ops.OR, x.e(Ops.RECIP).e(Ops.CMPLT, zero))  # x < 0, or x is -0.0
    out = sign_bit.e(Ops.AND, odd).e(Ops.WHERE, magnitude.e(Ops.NEG), magnitude)
    # a finite negative base with a fractional exponent has no real power (-inf has: the limit of |x|^y)
    finite_negative = x.e(Ops.CMPLT, zero).e(Ops.AND, _equals(x, -math.inf).e(Ops.XOR, is_int.const(True)))
    fractional = is_int.e(Ops.XOR, is_int.const(True))
    out = finite_negative.e(Ops.AND, fractional).e(Ops.WHERE, out.const(math.nan), out)
    # 1: y == 0 (x NaN too), x == 1 (y NaN too), and (-1)^(+-inf), where 2^(y * 0) is NaN
    one = _equals(y, 0.0).e(Ops.OR, _equals(x, 1.0)).e(Ops.OR, _equals(x, -1.0).e(Ops.AND, infinite_y))
    return one.e(Ops.WHERE, out.const(1), out)


def _equals(a: B, value: float) -> B:
    """a == value from the primitive comparisons (NaN equals nothing)."""
    return a.e(Ops.CMPNE, a.const(value)).e(Ops.CMPNE, a.const(True).cast(dtypes.bool))


def _integer_power(x: LazyBuffer, n: int) -> LazyBuffer:
    """x^n by repeated squaring (a reciprocal for n < 0): exact where the products are, and C's pow at the edges
    (where x^|n| leaves the float range, the power of the reciprocal)."""
    result: LazyBuffer | None = None
    square, k = x, abs(n)
    while k:
        if k & 1:
            result = square if result is None else result.e(Ops.MUL, square)
        k >>= 1
        if k:
            square = square.e(Ops.MUL, square)
    if result is None:
        return x.const(1)
    if n >= -1:
        return result.e(Ops.RECIP) if n < 0 else result
    # 1 / x^|n| (one rounding where x^|n| is exact), but (1/x)^|n| where x^|n| overflowed or underflowed to 0 while
    # the result need not (x ** -3 of 1e13 is a subnormal, not 1 / inf = 0)
    magnitude = result.e(Ops.MAX, result.e(Ops.NEG))
    edge = _equals(magnitude, math.inf).e(Ops.OR, _equals(result, 0.0))
    return edge.e(Ops.WHERE, _integer_power(x.e(Ops.RECIP), -n), result.e(Ops.RECIP))


def _recorded(fn: type[Function], x: B, *srcs: B) -> B:
    """`fn` applied to buffers inside a backward: recorded as that Function on TracedBuffers (so a gradient of the
    gradient uses its own backward), just its forward on LazyBuffers."""
    if isinstance(x, TracedBuffer):
        return TracedBuffer(fn.apply(x.tensor, *(s.tensor for s in srcs)))
    return fn.__new__(fn).forward(x, *srcs)


# -- reductions -------------------------------------------------------------------------------------------------------


class _Reduce(Function):
    """A reduction over `axis`, its result reshaped to `shape` when given (the reduced axes dropped: one Function, not a
    reduction and a reshape, each with its own bookkeeping); the backward sees the result with the axes kept."""

    op: Ops

    def forward(self, x: LazyBuffer, axis: tuple[int, ...], shape: tuple[sint, ...] | None = None) -> LazyBuffer:
        self.axis = axis
        self.kept = kept = tuple([1 if i in axis else s for i, s in enumerate(x.shape)])
        self.dropped = shape is not None and shape != kept
        return x.r(self.op, axis, shape if self.dropped else None)

    def _kept(self, y: B) -> B:
        return y.reshape(self.kept) if self.dropped else y


class Sum(_Reduce):
    op = Ops.SUM

    def backward(self, grad_output: B, ret: B, x: B) -> B:
        return self._kept(grad_output).expand(x.shape)


class Max(_Reduce):
    op = Ops.RMAX

    def backward(self, grad_output: B, ret: B, x: B) -> B:
        # the gradient is split between all elements equal to the max; a NaN max (which max propagates) goes to the
        # NaNs, as in PyTorch (NaN equals nothing: no element matched, and 0 * 1/0 made every gradient NaN)
        best = self._kept(ret).expand(x.shape)
        hit = x.e(Ops.CMPNE, best).e(Ops.CMPNE, x.const(True).cast(dtypes.bool))
        if dtypes.is_float(x.dtype):
            hit = hit.e(Ops.OR, x.e(Ops.CMPNE, x).e(Ops.AND, best.e(Ops.CMPNE, best)))
        # 1.0 / 0.0 by a select rather than a cast of the bool: it vectorizes (pooling backward kernels)
        hit_f = hit.e(Ops.WHERE, grad_output.const(1, x.shape), grad_output.const(0, x.shape))
        count = hit_f.r(Ops.SUM, self.axis).expand(x.shape)
        # the elements not hit selected to 0, not multiplied by it: a NaN or inf gradient stays off them (PyTorch's)
        share = count.e(Ops.RECIP).e(Ops.MUL, self._kept(grad_output).expand(x.shape))
        return hit.e(Ops.WHERE, share, grad_output.const(0, x.shape))


# -- movement ---------------------------------------------------------------------------------------------------------


class Expand(Function):
    def forward(self, x: LazyBuffer, shape: tuple[sint, ...]) -> LazyBuffer:
        self.expanded_axis = tuple(i for i, (si, so) in enumerate(zip(x.shape, shape)) if si != so)
        return x.expand(shape)

    def backward(self, grad_output: B, ret: B, x: B) -> B:
        # half types summed in float32 and rounded once (a bias's gradient over 512 rows was 37 half ulp off)
        acc = sum_acc_dtype(grad_output.dtype) if grad_output.dtype in NARROW_FLOATS else None
        if acc is None:
            return grad_output.r(Ops.SUM, self.expanded_axis)
        return grad_output.cast(acc).r(Ops.SUM, self.expanded_axis).cast(grad_output.dtype)


class Reshape(Function):
    def forward(self, x: LazyBuffer, shape: tuple[sint, ...]) -> LazyBuffer:
        return x.reshape(shape)

    def backward(self, grad_output: B, ret: B, x: B) -> B:
        from lazy.multi import MultiLazyBuffer

        if (
            isinstance(grad_output, MultiLazyBuffer)
            and isinstance(ret, MultiLazyBuffer)
            and ret.axis is not None
            and grad_output.axis in (None, ret.axis)
            and (grad_output.axis, grad_output.bounds) != (ret.axis, ret.bounds)
        ):
            # a gradient split as another operand was (its even halves, where this reshape left uneven ones): back
            # in the layout this reshape gave, which maps onto x's (else the reshape back would cut across shards)
            grad_output = MultiLazyBuffer(grad_output.shards_like(ret), ret.axis, ret.bounds)
        return grad_output.reshape(x.shape)


class Permute(Function):
    def forward(self, x: LazyBuffer, order: tuple[int, ...]) -> LazyBuffer:
        self.input_order = order
        return x.permute(order)

    def backward(self, grad_output: B, ret: B, x: B) -> B:
        return grad_output.permute(tuple(argsort(self.input_order)))


class Pad(Function):
    def forward(self, x: LazyBuffer, arg: tuple[tuple[sint, sint], ...]) -> LazyBuffer:
        self.narg = tuple((p[0], s + p[0]) for s, p in zip(x.shape, arg))
        return x.pad(arg)

    def backward(self, grad_output: B, ret: B, x: B) -> B:
        return grad_output.shrink(self.narg)


class Shrink(Function):
    def forward(self, x: LazyBuffer, arg: tuple[tuple[sint, sint], ...]) -> LazyBuffer:
        self.narg = tuple((p[0], s - p[1]) for s, p in zip(x.shape, arg))
        return x.shrink(arg)

    def backward(self, grad_output: B, ret: B, x: B) -> B:
        return grad_output.pad(self.narg)


class Flip(Function):
    def forward(self, x: LazyBuffer, axis: tuple[int, ...]) -> LazyBuffer:
        self.arg = tuple(-1 if i in axis else 1 for i in range(len(x.shape)))
        return x.stride(self.arg)

    def backward(self, grad_output: B, ret: B, x: B) -> B:
        return grad_output.stride(self.arg)


# each primitive ALU op as the Function that applies it (and its keyword arguments): what `TracedBuffer.e` records
_ALU_FUNCTIONS: dict[Ops, tuple[type[Function], dict[str, Any]]] = {
    Ops.NEG: (Neg, {}), Ops.RECIP: (Reciprocal, {}), Ops.SIN: (Sin, {}), Ops.SQRT: (Sqrt, {}),
    Ops.EXP2: (Exp2, {}), Ops.LOG2: (Log2, {}),
    Ops.ADD: (Add, {}), Ops.MUL: (Mul, {}), Ops.FDIV: (Div, {}), Ops.MAX: (Maximum, {}), Ops.IDIV: (IDiv, {}),
    Ops.MOD: (Mod, {}),
    Ops.CMPLT: (Less, {}), Ops.CMPNE: (Neq, {}), Ops.WHERE: (Where, {}),
    **{op: (BitwiseBinary, {"op": op}) for op in (Ops.AND, Ops.OR, Ops.XOR, Ops.SHL, Ops.SHR)},
}  # fmt: skip
