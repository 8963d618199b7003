"""Algebraic rewrite rules as data: one table serves both graphs that simplify as they are built, the lazy graph
(`LazyBuffer.e`) and the UOp IR (`UOpBuilder.add`). Each graph shows its nodes to the rules through a `Graph`
adapter: which constant a node is, and how to make a constant node."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

from lazy.dtype import DType, dtypes
from lazy.ops import PYTHON_ALU, GroupOp, Ops, exec_alu
from lazy.record import record

NodeT = TypeVar("NodeT")


class Graph(Protocol[NodeT]):
    """How the rules read one graph's nodes and make new ones."""

    def const_value(self, node: NodeT) -> Any:
        """The Python value of `node` when it is one known constant in every element, else None."""
        ...

    def make_const(self, value: Any, dtype: DType, like: NodeT) -> NodeT:
        """A constant node of `dtype` holding `value`, of `like`'s shape (and device)."""
        ...


@record(frozen=True)
class Const:
    """In a pattern: an operand that is a constant equal to `value` (0 matches 0, 0.0, -0.0 and False; 1 matches 1,
    1.0 and True). As a result: a new constant `value` of the node's dtype."""

    value: Any


# a pattern operand: a name binds any node (a name used twice must bind the same node both times), or a `Const`
Operand = str | Const


def any_dtype(dtype: DType) -> bool:
    return True


def is_int(dtype: DType) -> bool:
    return dtypes.is_int(dtype)


def is_int_or_bool(dtype: DType) -> bool:
    return dtypes.is_int(dtype) or dtype.scalar() == dtypes.bool


def is_bool(dtype: DType) -> bool:
    return dtype.scalar() == dtypes.bool


@record(frozen=True)
class Rule:
    """`op(*srcs)` is `result` when `when(dtype)` holds for the node's dtype. Operands of a commutative binary op
    (`GroupOp.Commutative`) are matched in both orders, so `x + 0` also covers `0 + x`."""

    op: Ops
    srcs: tuple[Operand, ...]
    result: Operand
    when: Callable[[DType], bool] = any_dtype


# Both graphs apply every rule (none needs more than an operand's constant value and node identity, which both can
# tell). Before them, an op whose operands are all constants becomes its value (`fold_value`).
RULES: tuple[Rule, ...] = (
    # x + 0 -> x. Exact for ints, bools (x | False) and floats, except -0.0 + +0.0, which IEEE rounds to +0.0 and the
    # fold leaves -0.0. Fine: the two are equal (==, <, max and sums agree; only copysign, signbit and 1/x tell them
    # apart), and tinygrad folds the same (the project follows tinygrad where it and PyTorch differ).
    Rule(Ops.ADD, ("x", Const(0)), "x"),
    # x * 1 -> x: exact for every value, NaN, inf and -0.0 included (on bools MUL is AND: x & True)
    Rule(Ops.MUL, ("x", Const(1)), "x"),
    # x * 0 -> 0 for ints and bools only: a float x may be NaN or inf (x * 0 is NaN) or negative (x * 0 is -0.0)
    Rule(Ops.MUL, ("x", Const(0)), Const(0), is_int_or_bool),
    # x / 1 -> x: exact for every float (NaN, inf and -0.0 included)
    Rule(Ops.FDIV, ("x", Const(1)), "x"),
    # x // 1 -> x for ints only: a float's IDIV truncates (2.5 // 1 is 2.0)
    Rule(Ops.IDIV, ("x", Const(1)), "x", is_int),
    # where(True, x, y) -> x and where(False, x, y) -> y (the condition is a bool, so True means exactly 1)
    Rule(Ops.WHERE, (Const(True), "x", "y"), "x"),
    Rule(Ops.WHERE, (Const(False), "x", "y"), "y"),
    # where(c, x, x) -> x: the same node either way, NaN included
    Rule(Ops.WHERE, ("c", "x", "x"), "x"),
    # x & True -> x for bools only: for ints the pattern's True matches 1, and x & 1 is not x
    Rule(Ops.AND, ("x", Const(True)), "x", is_bool),
)

_RULES_BY_OP: dict[Ops, list[Rule]] = {}
for _rule in RULES:
    _RULES_BY_OP.setdefault(_rule.op, []).append(_rule)
# per op, the constants its rules look for, or None when one of its rules can match operands that are no constant (a
# name used twice): a node none of whose constant operands is among them matches no rule (the eager path's shortcut,
# `x + 1`). Equal numbers hash equal (0 == 0.0 == -0.0 == False), as the patterns' comparison treats them.
_RULE_CONSTS: dict[Ops, frozenset[Any] | None] = {
    op: None
    if any(len(names := [p for p in rule.srcs if not isinstance(p, Const)]) != len(set(names)) for rule in rules)
    else frozenset(p.value for rule in rules for p in rule.srcs if isinstance(p, Const))
    for op, rules in _RULES_BY_OP.items()
}


def fold_value(op: Ops, dtype: DType, values: Sequence[Any]) -> tuple[bool, Any]:
    """(True, the value) of `op` over constant operands as the reference computes it (`exec_alu`), or (False, None)
    where it is left to the device: a float divided by zero (`IDIV`, `MOD`), which the reference calls 0 but C
    devices compute as trunc(x/0) (+-inf, NaN) and fmod(x, 0) (NaN), so a constant input must not change it. Vector
    dtypes (UOps only) do not fold: `exec_alu` computes one scalar."""
    if dtype.count != 1 or op not in PYTHON_ALU:  # (THREEFRY: one word of two, which exec_alu cannot name)
        return False, None
    if op in (Ops.IDIV, Ops.MOD) and dtypes.is_float(dtype) and values[1] == 0:
        return False, None
    return True, exec_alu(op, dtype, list(values))


def _orders(op: Ops, count: int) -> tuple[tuple[int, ...], ...]:
    return ((0, 1), (1, 0)) if op in GroupOp.Commutative and count == 2 else (tuple(range(count)),)


def _match(pattern: tuple[Operand, ...], nodes: list[NodeT], values: list[Any]) -> dict[str, NodeT] | None:
    """The names `pattern` binds in `nodes` (`values`: their constants), or None when it does not match."""
    if len(pattern) != len(nodes):
        return None
    bound: dict[str, NodeT] = {}
    for pat, node, value in zip(pattern, nodes, values):
        if isinstance(pat, Const):
            if value is None or value != pat.value:
                return None
        elif bound.setdefault(pat, node) is not node:
            return None
    return bound


def rewrite(graph: Graph[NodeT], op: Ops, dtype: DType, srcs: Sequence[NodeT]) -> NodeT | None:
    """A simpler node equal to `op(*srcs)` of `dtype` in `graph`, or None when no rule applies."""
    values = [graph.const_value(src) for src in srcs]
    for value in values:  # (loops, not all()/any() of generators: every op of the lazy graph comes here)
        if value is None:
            break
    else:
        folds, value = fold_value(op, dtype, values)
        if folds:
            return graph.make_const(value, dtype, srcs[0])
    if (rules := _RULES_BY_OP.get(op)) is None:
        return None
    if (wanted := _RULE_CONSTS[op]) is not None:
        try:
            for value in values:
                if value is not None and value in wanted:
                    break
            else:
                return None
        except TypeError:  # an unhashable constant (a vector's): the rules decide
            pass
    for rule in rules:
        if not rule.when(dtype):
            continue
        for order in _orders(op, len(srcs)):
            bound = _match(rule.srcs, [srcs[i] for i in order], [values[i] for i in order])
            if bound is None:
                continue
            if isinstance(rule.result, Const):
                return graph.make_const(rule.result.value, dtype, srcs[0])
            return bound[rule.result]
    return None
