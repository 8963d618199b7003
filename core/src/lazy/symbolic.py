"""Integer expressions over bounded variables (`Variable`, `+ * // % <`, `and`): the index arithmetic of views.

Every operator returns an already simplified node with inclusive bounds `min`/`max`. `//` and `%` are floor division
and modulo (Python semantics) by positive constants; the index expressions they appear in are non-negative wherever
they address memory, so a C renderer may lower them to `/` and `%`.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from lazy.helpers import cached_property, dedup


class ConcreteValueError(TypeError, ValueError):
    """A symbolic value used where one number is needed (`int()`, an index, a concrete size). Both a TypeError (what
    Python raises for an unusable operand) and a ValueError (what tinygrad raises)."""


class Node:
    """An immutable integer expression with inclusive bounds; compare structurally with `==`, build with operators."""

    min: int
    max: int

    @property
    def srcs(self) -> tuple[Node, ...]:
        return ()

    def render(self, ops: Mapping[type, Callable[..., Any]] | None = None, ctx: Any = None) -> Any:
        """Lower this node with `ops[type(node)](node, ops, ctx)`; the default renders a Python expression string."""
        table = render_python if ops is None else ops
        return table[type(self)](self, table, ctx)

    @cached_property
    def key(self) -> str:
        """A canonical string: equal keys (and classes) mean equal expressions. The `ctx="DEBUG"` rendering, built
        from the sources' own (cached) keys, so a new node costs one string, not a walk of its sources."""
        build = _KEYS.get(type(self))
        return build(self) if build is not None else self.render(ctx="DEBUG")

    def variables(self) -> list[Variable]:
        """The variables this expression uses, in order of first appearance."""
        if isinstance(self, Variable):
            return [self]
        return dedup(v for src in self.srcs for v in src.variables())

    def vars(self) -> set[Variable]:
        return set(self.variables())

    def substitute(self, var_vals: Mapping[Variable, sint]) -> Node:
        """Replace variables by nodes or ints, simplifying the result."""
        raise NotImplementedError(type(self).__name__)

    def __hash__(self) -> int:  # computed once: sums and simplification hash their terms again and again
        try:
            return self.__dict__["_hash"]
        except KeyError:
            h = self.__dict__["_hash"] = hash((type(self).__name__, self.key))
            return h

    def __getstate__(self) -> dict[str, Any]:  # a hash is only valid in the process that computed it
        return {k: v for k, v in self.__dict__.items() if k != "_hash"}

    def __eq__(self, other: object) -> bool:
        if isinstance(other, int):
            other = NumNode(other)
        if not isinstance(other, Node):
            return NotImplemented
        return type(self) is type(other) and self.key == other.key

    def __bool__(self) -> bool:
        raise TypeError(f"{self.key} is not decided by its bounds [{self.min}, {self.max}]; evaluate it with sym_infer")

    # int(), operator.index() (range, numpy shapes) and float() need one number: a symbolic value has a range
    def __int__(self) -> int:
        raise ConcreteValueError(f"int() of {describe(self)}: a symbolic value has no single int value; use "
                                 "sym_infer(x, var_vals) or the bound variable's .val")  # fmt: skip

    def __index__(self) -> int:
        raise ConcreteValueError(f"{describe(self)} used as an index or size: a symbolic value has no single int "
                                 "value; use sym_infer(x, var_vals) or the bound variable's .val")  # fmt: skip

    def __float__(self) -> float:
        raise ConcreteValueError(f"float() of {describe(self)}: a symbolic value has no single value")

    def __repr__(self) -> str:
        return f"<{self.key}>"

    def __neg__(self) -> Node:
        return self * -1

    def __add__(self, other: sint) -> Node:
        if type(other) is int and isinstance(self, SumNode):  # a sum plus a constant: only the constant term changes
            return _shifted(self, other)
        return Node.sum([self, other])

    def __radd__(self, other: sint) -> Node:
        return Node.sum([other, self])

    def __sub__(self, other: sint) -> Node:
        return self + (-other)

    def __rsub__(self, other: sint) -> Node:
        return -self + other

    def __mul__(self, other: sint) -> Node:
        return _mul(self, other)

    def __rmul__(self, other: sint) -> Node:
        return _mul(self, other)

    def __floordiv__(self, other: sint) -> Node:
        return _floordiv(self, other)

    def __rfloordiv__(self, other: int) -> Node:
        return _floordiv(NumNode(other), self)

    def __mod__(self, other: sint) -> Node:
        return _mod(self, other)

    def __rmod__(self, other: int) -> Node:
        return _mod(NumNode(other), self)

    def lt(self, other: sint) -> Node:
        """`self < other` as a node: `NumNode(0|1)` when the bounds decide it, else an `LtNode`."""
        return _lt(self, other)

    def ge(self, other: sint) -> Node:
        return _lt(-self, -other + 1)  # x >= y <=> -x < -y+1

    def __lt__(self, other: sint) -> Node:
        return self.lt(other)

    def __le__(self, other: sint) -> Node:
        return self.lt(other + 1)

    def __gt__(self, other: sint) -> Node:
        return _lt(-self, -other)  # x > y <=> -x < -y

    def __ge__(self, other: sint) -> Node:
        return self.ge(other)

    @staticmethod
    def sum(nodes: Iterable[sint]) -> Node:
        """The simplified sum: nested sums flattened, like terms combined (`2*x + 3*x -> 5*x`), constants merged."""
        coeffs: dict[Node, int] = {}
        const = 0
        for node in _flat_terms(nodes):
            base, coeff = _term_coeff(node)
            if base is None:
                const += coeff
            else:
                coeffs[base] = coeffs.get(base, 0) + coeff
        terms = sorted((_mul_int(base, c) for base, c in coeffs.items() if c != 0), key=lambda n: n.key)
        if const != 0 or not terms:
            terms.append(NumNode(const))
        return terms[0] if len(terms) == 1 else _decided(SumNode(terms))

    @staticmethod
    def ands(nodes: Iterable[sint]) -> Node:
        """The simplified conjunction of 0/1-valued nodes: true parts dropped, false if any part is false."""
        parts: list[Node] = []
        for node in map(_as_node, nodes):
            parts.extend(node.nodes if isinstance(node, AndNode) else [node])
        if bad := [p for p in parts if p.min < 0 or p.max > 1]:
            raise ValueError(f"Node.ands needs 0/1-valued parts (comparisons), got {bad}")
        if any(p.max == 0 for p in parts):
            return NumNode(0)  # x and 0 -> 0
        parts = sorted(dedup(p for p in parts if p.min == 0), key=lambda n: n.key)  # x and 1 -> x
        if not parts:
            return NumNode(1)
        return parts[0] if len(parts) == 1 else AndNode(parts)


sint = int | Node


class NumNode(Node):
    """An integer constant."""

    def __init__(self, b: int):
        if not isinstance(b, int):
            raise TypeError(f"NumNode takes an int, got {b!r} of type {type(b).__name__}")
        self.b = int(b)
        self.min = self.max = self.b

    def substitute(self, var_vals: Mapping[Variable, sint]) -> Node:
        return self

    def __bool__(self) -> bool:
        return self.b != 0

    def __int__(self) -> int:
        return self.b

    def __index__(self) -> int:
        return self.b

    def __hash__(self) -> int:
        return hash(self.b)  # consistent with `NumNode(3) == 3`


class Variable(Node):
    """A named integer in `[nmin, nmax]`, optionally bound to a value; equality and hash ignore the binding."""

    def __init__(self, expr: str, nmin: int, nmax: int):
        if not (isinstance(nmin, int) and isinstance(nmax, int)) or nmin > nmax:
            raise ValueError(f"Variable {expr!r} needs int bounds with min <= max, got [{nmin}, {nmax}]")
        self.expr, self.min, self.max = expr, nmin, nmax
        self._val: int | None = None

    def bind(self, val: int) -> Variable:
        """A copy of this variable bound to `val`."""
        try:  # an int, a NumNode or a numpy integer; not a bool, a float or a symbolic node
            if isinstance(val, bool) or is_sym(val):
                raise TypeError
            val = operator.index(val)
        except TypeError:
            raise TypeError(f"cannot bind {self.expr} (in [{self.min}, {self.max}]) to {val!r} of type "
                            f"{type(val).__name__}: bind an int") from None  # fmt: skip
        if not self.min <= val <= self.max:
            raise ValueError(f"cannot bind {self.expr} to {val}: outside its range [{self.min}, {self.max}]; "
                             f"create the variable with a range that holds every value it takes")  # fmt: skip
        bound = Variable(self.expr, self.min, self.max)
        bound._val = val
        return bound

    def unbind(self) -> tuple[Variable, int]:
        """(the unbound variable, its value); raises if not bound."""
        return Variable(self.expr, self.min, self.max), self.val

    @property
    def val(self) -> int:
        if self._val is None:
            raise ValueError(f"Variable {self.expr} (in [{self.min}, {self.max}]) is not bound; call .bind(value) or "
                             "pass its value in var_vals")  # fmt: skip
        return self._val

    def __repr__(self) -> str:
        return f"<{self.key}>" if self._val is None else f"<{self.key}={self._val}>"

    def substitute(self, var_vals: Mapping[Variable, sint]) -> Node:
        return _as_node(var_vals.get(self, self))


class MulNode(Node):
    """`a * b`: by an int constant, or by another node for symbolic sizes."""

    def __init__(self, a: Node, b: sint):
        self.a, self.b = a, b
        if isinstance(b, int):
            self.min, self.max = sorted((a.min * b, a.max * b))
        else:
            corners = [x * y for x in (a.min, a.max) for y in (b.min, b.max)]
            self.min, self.max = min(corners), max(corners)

    @property
    def srcs(self) -> tuple[Node, ...]:
        return (self.a, self.b) if isinstance(self.b, Node) else (self.a,)

    def substitute(self, var_vals: Mapping[Variable, sint]) -> Node:
        return self.a.substitute(var_vals) * (self.b.substitute(var_vals) if isinstance(self.b, Node) else self.b)


class DivNode(Node):
    """`a // b`, floor division by a positive int."""

    def __init__(self, a: Node, b: int):
        self.a, self.b = a, b
        self.min, self.max = a.min // b, a.max // b

    @property
    def srcs(self) -> tuple[Node, ...]:
        return (self.a,)

    def substitute(self, var_vals: Mapping[Variable, sint]) -> Node:
        return self.a.substitute(var_vals) // self.b


class ModNode(Node):
    """`a % b`, floor modulo by a positive int (always in `[0, b-1]`)."""

    def __init__(self, a: Node, b: int):
        self.a, self.b = a, b
        self.min, self.max = 0, (min(b - 1, a.max) if a.min >= 0 else b - 1)

    @property
    def srcs(self) -> tuple[Node, ...]:
        return (self.a,)

    def substitute(self, var_vals: Mapping[Variable, sint]) -> Node:
        return self.a.substitute(var_vals) % self.b


class SumNode(Node):
    """The sum of `nodes` (canonical: like terms combined, sorted by key, constant last)."""

    def __init__(self, nodes: list[Node]):
        self.nodes = nodes
        self.min, self.max = sum(n.min for n in nodes), sum(n.max for n in nodes)

    @property
    def srcs(self) -> tuple[Node, ...]:
        return tuple(self.nodes)

    def substitute(self, var_vals: Mapping[Variable, sint]) -> Node:
        return Node.sum(n.substitute(var_vals) for n in self.nodes)


class LtNode(Node):
    """`a < b` as 0 or 1."""

    def __init__(self, a: Node, b: sint):
        self.a, self.b = a, b
        self.min, self.max = 0, 1

    @property
    def srcs(self) -> tuple[Node, ...]:
        return (self.a, self.b) if isinstance(self.b, Node) else (self.a,)

    def substitute(self, var_vals: Mapping[Variable, sint]) -> Node:
        return self.a.substitute(var_vals) < (self.b.substitute(var_vals) if isinstance(self.b, Node) else self.b)


class AndNode(Node):
    """The conjunction of 0/1-valued `nodes`, as 0 or 1."""

    def __init__(self, nodes: list[Node]):
        self.nodes = nodes
        self.min, self.max = min(n.min for n in nodes), min(n.max for n in nodes)

    @property
    def srcs(self) -> tuple[Node, ...]:
        return tuple(self.nodes)

    def substitute(self, var_vals: Mapping[Variable, sint]) -> Node:
        return Node.ands(n.substitute(var_vals) for n in self.nodes)


# ---------------------------------------------------------------------------------------------------------------------
# simplifying constructors


def _as_node(x: sint) -> Node:
    if isinstance(x, Node):
        return x
    if isinstance(x, int):
        return NumNode(x)
    raise TypeError(f"symbolic expressions take ints and Nodes, got {x!r} of type {type(x).__name__}")


def _shifted(node: SumNode, k: int) -> Node:
    """`node + k` as `Node.sum` gives it (its terms in key order, the constant last when not 0), without rebuilding
    the terms: code generation adds lane offsets to index sums by the hundred thousand."""
    if k == 0:
        return node
    terms = node.nodes
    if isinstance(terms[-1], NumNode):
        const = terms[-1].b + k
        terms = terms[:-1] + ([NumNode(const)] if const else [])
    else:
        terms = [*terms, NumNode(k)]
    return terms[0] if len(terms) == 1 else _decided(SumNode(terms))


def _decided(node: Node) -> Node:
    return NumNode(node.min) if node.min == node.max else node  # bounds pin the value -> constant


def _flat_terms(nodes: Iterable[sint]) -> Iterable[Node]:
    for node in map(_as_node, nodes):
        yield from node.nodes if isinstance(node, SumNode) else [node]


def _term_coeff(node: Node) -> tuple[Node | None, int]:
    """Split a sum term into (base, int coefficient); the base of a constant is None."""
    if isinstance(node, NumNode):
        return None, node.b
    if isinstance(node, MulNode) and isinstance(node.b, int):
        return node.a, node.b
    return node, 1


def _term(base: Node | None, coeff: int) -> Node:
    return NumNode(coeff) if base is None else _mul_int(base, coeff)


def _mul(a: Node, b: sint) -> Node:
    if isinstance(b, NumNode):
        b = b.b
    if isinstance(b, int):
        return _mul_int(a, b)
    if isinstance(a, NumNode):
        return _mul_int(b, a.b)
    a, b = sorted((a, _as_node(b)), key=lambda n: n.key)
    return _decided(MulNode(a, b))


def _mul_int(a: Node, b: int) -> Node:
    if b == 0:
        return NumNode(0)  # x*0 -> 0
    if b == 1:
        return a  # x*1 -> x
    if isinstance(a, NumNode):
        return NumNode(a.b * b)  # c1*c2 -> c
    if isinstance(a, MulNode) and isinstance(a.b, int):
        return _mul_int(a.a, a.b * b)  # (x*c1)*c2 -> x*(c1*c2)
    if isinstance(a, SumNode):
        return Node.sum(_mul_int(n, b) for n in a.nodes)  # (x+y)*c -> x*c + y*c
    return _decided(MulNode(a, b))


def _positive_divisor(a: Node, b: sint, op: str) -> int | None:
    """The int divisor, None when `b` is a symbolic node; raises for a zero or negative constant."""
    if isinstance(b, NumNode):
        b = b.b
    if isinstance(b, int) and b <= 0:
        raise ValueError(f"symbolic {op} needs a positive divisor, got {a.key} {op} {b}")
    return b if isinstance(b, int) else None


def _floordiv(a: Node, b: sint) -> Node:
    if (divisor := _positive_divisor(a, b, "//")) is not None:
        return _div_int(a, divisor)
    assert isinstance(b, Node)
    if b.min > 0 and a == b:
        return NumNode(1)  # x//x -> 1
    if b.min > 0 and a.min >= 0 and (b - a).min > 0:
        return NumNode(0)  # x//y -> 0 when 0 <= x < y
    raise ValueError(f"cannot divide {a.key} by the symbolic {b.key}: only constant divisors are supported")


def _div_int(a: Node, b: int) -> Node:
    if b == 1:
        return a  # x//1 -> x
    if a.min // b == a.max // b:
        return NumNode(a.min // b)  # x//b -> c when the bounds of x fall in one bucket (x//a -> 0 for 0 <= x < a)
    if isinstance(a, MulNode) and isinstance(a.b, int):
        if a.b % b == 0:
            return _mul_int(a.a, a.b // b)  # (x*(c*b))//b -> x*c
        if (g := math.gcd(a.b, b)) > 1:
            return _div_int(_mul_int(a.a, a.b // g), b // g)  # (x*(g*c))//(g*k) -> (x*c)//k
    if isinstance(a, DivNode):
        return _div_int(a.a, a.b * b)  # (x//c)//b -> x//(c*b)
    if isinstance(a, SumNode):
        return _div_sum(a, b)
    return _div_node(a, b)


def _div_node(a: Node, b: int) -> Node:
    """a//b as a node whose numerator is never negative: devices divide with C's truncation, which agrees with floor
    division only there, so a numerator that can go below 0 is shifted up by whole multiples of b first."""
    if a.min >= 0:
        return DivNode(a, b)
    k = -(a.min // b)
    return Node.sum([DivNode(Node.sum([a, NumNode(k * b)]), b), NumNode(-k)])


def _mod_node(a: Node, b: int) -> Node:
    """a%b with a numerator that is never negative (see _div_node)."""
    return ModNode(a if a.min >= 0 else Node.sum([a, NumNode(-(a.min // b) * b)]), b)


def _div_sum(a: SumNode, b: int) -> Node:
    """(x*(k*b) + y + c)//b -> x*k + (c//b) + (y + c%b)//b, then divide the rest by the gcd of its coefficients."""
    whole: list[Node] = []
    rest: list[tuple[Node | None, int]] = []
    for base, coeff in map(_term_coeff, a.nodes):
        quot, rem = divmod(coeff, b)
        if base is None:
            whole += [NumNode(quot)] if quot else []
            rest += [(None, rem)] if rem else []
        elif rem == 0:
            whole.append(_mul_int(base, quot))
        else:
            rest.append((base, coeff))
    g = math.gcd(b, *(coeff for _, coeff in rest))
    if not whole and g == 1:
        return _div_node(a, b)
    rest_sum = Node.sum(_term(base, coeff // g) for base, coeff in rest)  # (g*y)//(g*k) -> y//k
    return Node.sum([*whole, _div_int(rest_sum, b // g)])


def _mod(a: Node, b: sint) -> Node:
    if (divisor := _positive_divisor(a, b, "%")) is not None:
        return _mod_int(a, divisor)
    assert isinstance(b, Node)
    if b.min > 0 and a == b:
        return NumNode(0)  # x%x -> 0
    if b.min > 0 and a.min >= 0 and (b - a).min > 0:
        return a  # x%y -> x when 0 <= x < y
    raise ValueError(f"cannot take {a.key} modulo the symbolic {b.key}: only constant divisors are supported")


def _mod_int(a: Node, b: int) -> Node:
    if b == 1:
        return NumNode(0)  # x%1 -> 0
    if (period := a.min // b) == a.max // b:
        return a - period * b  # x%b -> x - k*b when x stays in one period (x%a -> x for 0 <= x < a)
    if isinstance(a, MulNode) and isinstance(a.b, int) and a.b % b != a.b:
        return _mod_int(_mul_int(a.a, a.b % b), b)  # (x*c)%b -> (x*(c%b))%b, (x*b)%b -> 0
    if isinstance(a, ModNode) and a.b % b == 0:
        return _mod_int(a.a, b)  # (x%(k*b))%b -> x%b
    if isinstance(a, SumNode):
        return _mod_sum(a, b)
    return _mod_node(a, b)


def _mod_sum(a: SumNode, b: int) -> Node:
    """(x*(k*b+r) + y%(m*b) + c)%b -> (x*r + y + c%b)%b."""
    terms, changed = [], False
    for base, coeff in map(_term_coeff, a.nodes):
        if isinstance(base, ModNode) and base.b % b == 0:
            base, changed = base.a, True
        changed |= coeff % b != coeff
        terms.append(_term(base, coeff % b))
    return _mod_int(Node.sum(terms), b) if changed else _mod_node(a, b)


def _lt(a: Node, b: sint) -> Node:
    if isinstance(b, NumNode):
        b = b.b
    if not isinstance(b, int):
        diff = a - b
        return NumNode(int(diff.max < 0)) if diff.max < 0 or diff.min >= 0 else LtNode(a, b)
    if a.max < b or a.min >= b:
        return NumNode(int(a.max < b))  # decided by bounds
    if isinstance(a, MulNode) and isinstance(a.b, int) and a.b != -1:
        sign, size = (1, a.b) if a.b > 0 else (-1, -a.b)
        return _lt(_mul_int(a.a, sign), -(-b // size))  # x*c < b -> x < ceil(b/c) (x integer), c>0
    if isinstance(a, SumNode):
        return _lt_sum(a, b)
    return LtNode(a, b)


def _lt_sum(a: SumNode, b: int) -> Node:
    terms = [_term_coeff(n) for n in a.nodes]
    if (const := sum(c for base, c in terms if base is None)) != 0:
        return _lt(a - const, b - const)  # x + c < b -> x < b - c
    if (g := math.gcd(*(c for _, c in terms))) > 1:
        return _lt(Node.sum(_term(base, c // g) for base, c in terms), -(-b // g))  # x*g + y*g < b -> x+y < ceil(b/g)
    for m in sorted({abs(c) for _, c in terms if abs(c) > 1 and b % abs(c) == 0}):
        big = [(base, c) for base, c in terms if c % m == 0]
        small = Node.sum(_term(base, c) for base, c in terms if c % m != 0)
        if big and 0 <= small.min and small.max < m:
            return _lt(Node.sum(_term(base, c // m) for base, c in big), b // m)  # x*m + y < c*m -> x < c if 0<=y<m
    return LtNode(a, b)


# ---------------------------------------------------------------------------------------------------------------------
# rendering and evaluation


def sym_render(x: sint, ops: Mapping[type, Callable[..., Any]] | None = None, ctx: Any = None) -> Any:
    """Render an int or a node (see `Node.render`)."""
    return str(x) if isinstance(x, int) else x.render(ops, ctx)


def _render_variable(node: Variable, ops: Any, ctx: Any) -> str:
    return f"{node.expr}[{node.min}..{node.max}]" if ctx == "DEBUG" else node.expr


render_python: dict[type, Callable[..., Any]] = {
    Variable: _render_variable,
    NumNode: lambda node, ops, ctx: str(node.b),
    MulNode: lambda node, ops, ctx: f"({node.a.render(ops, ctx)}*{sym_render(node.b, ops, ctx)})",
    DivNode: lambda node, ops, ctx: f"({node.a.render(ops, ctx)}//{node.b})",
    ModNode: lambda node, ops, ctx: f"({node.a.render(ops, ctx)}%{node.b})",
    SumNode: lambda node, ops, ctx: f"({'+'.join(n.render(ops, ctx) for n in node.nodes)})",
    LtNode: lambda node, ops, ctx: f"({node.a.render(ops, ctx)}<{sym_render(node.b, ops, ctx)})",
    AndNode: lambda node, ops, ctx: f"({'&'.join(n.render(ops, ctx) for n in node.nodes)})",
}


def _key_of(x: sint) -> str:
    return str(x) if isinstance(x, int) else x.key


# `Node.key` per class: `render_python` at ctx="DEBUG", each source by its cached key
_KEYS: dict[type, Callable[[Any], str]] = {
    Variable: lambda node: f"{node.expr}[{node.min}..{node.max}]",
    NumNode: lambda node: str(node.b),
    MulNode: lambda node: f"({node.a.key}*{_key_of(node.b)})",
    DivNode: lambda node: f"({node.a.key}//{node.b})",
    ModNode: lambda node: f"({node.a.key}%{node.b})",
    SumNode: lambda node: f"({'+'.join(n.key for n in node.nodes)})",
    LtNode: lambda node: f"({node.a.key}<{_key_of(node.b)})",
    AndNode: lambda node: f"({'&'.join(n.key for n in node.nodes)})",
}


def _eval(x: sint, ops: Any, ctx: Any) -> int:
    return x if isinstance(x, int) else x.render(ops, ctx)


_eval_ops: dict[type, Callable[..., int]] = {
    Variable: lambda node, ops, ctx: ctx[node] if node in ctx else node.val,
    NumNode: lambda node, ops, ctx: node.b,
    MulNode: lambda node, ops, ctx: _eval(node.a, ops, ctx) * _eval(node.b, ops, ctx),
    DivNode: lambda node, ops, ctx: _eval(node.a, ops, ctx) // node.b,
    ModNode: lambda node, ops, ctx: _eval(node.a, ops, ctx) % node.b,
    SumNode: lambda node, ops, ctx: sum(_eval(n, ops, ctx) for n in node.nodes),
    LtNode: lambda node, ops, ctx: int(_eval(node.a, ops, ctx) < _eval(node.b, ops, ctx)),
    AndNode: lambda node, ops, ctx: int(all(_eval(n, ops, ctx) for n in node.nodes)),
}


def sym_infer(x: sint, var_vals: Mapping[Variable, int]) -> int:
    """The value of `x` with its variables taken from `var_vals` (or their bound values)."""
    return _eval(x, _eval_ops, var_vals)


def concrete(x: sint, what: str) -> int:
    """`x` as an int, or a clear error when it is symbolic and `what` needs a concrete size."""
    if isinstance(x, Node):
        if isinstance(x, NumNode):
            return x.b
        raise ConcreteValueError(f"{what} needs a concrete size, not {describe(x)}")
    return x


def merge_bindings(into: dict[Variable, int], new: Mapping[Variable, int]) -> dict[Variable, int]:
    """Add `new` (unbound variable -> value) to `into` and return it, refusing what `check_variables` refuses."""
    by_name = {v.expr: v for v in into}
    for var, val in new.items():
        seen = by_name.setdefault(var.expr, var)
        if (seen.min, seen.max) != (var.min, var.max):
            raise _range_clash(var.expr, (seen.min, seen.max), (var.min, var.max))
        if into.setdefault(seen, val) != val:
            raise _value_clash(var, into[seen], val)
    return into


def check_variables(xs: Iterable[sint]) -> None:
    """Refuse, among the nodes in `xs`, two variables of one name with different ranges, or one variable bound to two
    values. Kernels, renderers and `var_vals` know a variable by its name, so either would silently become one."""
    ranges: dict[str, tuple[int, int]] = {}
    values: dict[str, int] = {}
    for x in xs:
        for var in x.variables() if isinstance(x, Node) else ():
            if (seen := ranges.setdefault(var.expr, (var.min, var.max))) != (var.min, var.max):
                raise _range_clash(var.expr, seen, (var.min, var.max))
            if var._val is not None and values.setdefault(var.expr, var._val) != var._val:
                raise _value_clash(var, values[var.expr], var._val)


def _range_clash(name: str, one: tuple[int, int], other: tuple[int, int]) -> ValueError:
    return ValueError(f"two variables named {name!r} with different ranges meet: [{one[0]}, {one[1]}] and "
                      f"[{other[0]}, {other[1]}]; a name stands for one variable: create Variable({name!r}, lo, hi) "
                      "once and bind that one")  # fmt: skip


def _value_clash(var: Variable, one: int, other: int) -> ValueError:
    return ValueError(f"variable {var.expr} (in [{var.min}, {var.max}]) is bound to both {one} and {other} in one "
                      "computation; bind it to one value")  # fmt: skip


def describe(x: sint) -> str:
    """`x` for an error message: the expression, then each variable with its range and binding, e.g.
    "the symbolic (i+1), where i is in [1, 10] (bound to 3)"."""
    if not isinstance(x, Node) or isinstance(x, NumNode):
        return str(x)
    found = {v.expr: v for v in x.variables()}
    bound = {v.expr: v._val for v in x.variables() if v._val is not None}
    parts = [
        f"{name} is in [{var.min}, {var.max}]" + (f" (bound to {bound[name]})" if name in bound else " (unbound)")
        for name, var in sorted(found.items())
    ]
    return f"the symbolic {x.render()}, where {', '.join(parts)}"


def is_sym(x: Any) -> bool:
    """True for a node that is not a constant (a symbolic size or index)."""
    return isinstance(x, Node) and not isinstance(x, NumNode)


def to_sint(x: sint) -> sint:
    """A `NumNode` as a plain int; anything else unchanged (sizes, strides and offsets are stored this way)."""
    return x.b if isinstance(x, NumNode) else x


def bound_value(x: sint) -> int | None:
    """`x` with every variable at its bound value, or None when one of them is unbound."""
    if not isinstance(x, Node):
        return x
    if any(v._val is None for v in x.variables()):
        return None
    return sym_infer(x, {})
