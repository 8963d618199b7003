"""lazy.symbolic: each simplification rule, then random expressions checked against brute-force evaluation."""

from __future__ import annotations

import itertools
import operator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lazy.symbolic import (
    AndNode,
    DivNode,
    LtNode,
    ModNode,
    MulNode,
    Node,
    NumNode,
    SumNode,
    Variable,
    is_sym,
    sym_infer,
    sym_render,
    to_sint,
)

x, y, z = Variable("x", 0, 10), Variable("y", 0, 3), Variable("z", 0, 5)


def values(node: Node, var_vals: dict) -> int:
    return sym_infer(node, var_vals)


# ---------------------------------------------------------------------------------------------------------------------
# rules


def test_constant_folding():
    assert NumNode(3) + 4 == 7 and NumNode(3) * 4 == 12 and NumNode(7) // 2 == 3 and NumNode(7) % 3 == 1
    assert isinstance(NumNode(3) + NumNode(4), NumNode)
    assert (x + 2) + 3 == x + 5


def test_identities():
    assert x * 0 == 0  # x*0 -> 0
    assert x * 1 is x  # x*1 -> x
    assert x + 0 == x  # x+0 -> x
    assert x - x == 0
    assert x // 1 == x and x % 1 == 0


def test_like_terms_combine():
    assert 2 * x + 3 * x == x * 5
    assert (x + y + 3) + (x * 2 + 4) == Node.sum([x * 3, y, 7])
    assert (x * 2 + y) - (y + x * 2) == 0
    assert isinstance(x * 2 + y * 3 + 1, SumNode) and (x * 2 + y * 3 + 1).nodes[-1] == 1  # constant last


def test_sum_is_canonical():
    assert x + y == y + x and hash(x + y) == hash(y + x)
    assert (x + 1) * 3 == x * 3 + 3  # (x+y)*c -> x*c + y*c


def test_div_rules():
    assert (x * 4) // 4 == x  # (x*a)//a -> x
    assert (x * 4 + y) // 4 == x  # (x*4 + y)//4 -> x + y//4, y in [0, 4)
    assert (x * 4 + z) // 4 == x + z // 4  # y in [0, 6): the remainder stays
    assert y // 4 == 0  # x//a -> 0 for 0 <= x < a
    assert (x // 2) // 3 == x // 6  # (x//a)//b -> x//(a*b)
    assert (x * 6) // 4 == (x * 3) // 2  # gcd
    assert (x * 2) // 4 == x // 2
    assert (x + 4) // 2 == x // 2 + 2


def test_mod_rules():
    assert (x * 4) % 4 == 0  # (x*a)%a -> 0
    assert (x * 4 + y) % 4 == y  # (x*4+y)%4 -> y%4 -> y
    assert (x * 4 + z) % 4 == z % 4
    assert y % 4 == y  # x%a -> x for 0 <= x < a
    assert (x % 6) % 3 == x % 3  # (x%(a*b))%a -> x%a
    assert (y + 4) % 4 == y  # one period: x%b -> x - k*b
    assert (x % 8 + y) % 4 == (x + y) % 4


def test_bounds():
    assert (x * 3 + y).min == 0 and (x * 3 + y).max == 33
    assert (x * -2).min == -20 and (x * -2).max == 0
    assert (x // 3).max == 3 and (x % 4).max == 3 and (y % 8).max == 3
    assert isinstance(x // 3, DivNode) and isinstance(x % 4, ModNode) and isinstance(x * 3, MulNode)


def test_lt_decided_by_bounds():
    assert (y < 4) == 1 and (y < 0) == 0 and (y >= 0) == 1 and (y > 3) == 0 and (y <= 3) == 1
    assert isinstance(x < 5, LtNode)
    assert bool(y < 4) and not bool(y < 0)
    with pytest.raises(TypeError):
        bool(x < 5)


def test_lt_simplifies_linear_forms():
    assert ((x * 4 + y) < 8) == (x < 2)  # (x*a + b) < c exact: 0 <= y < 4, 8 = 2*4
    assert ((x * 3) < 7) == (x < 3)  # x*3 < 7 <=> x < ceil(7/3)
    assert ((x + 3) < 7) == (x < 4)
    assert ((x * 2 + z * 2) < 5) == ((x + z) < 3)


def test_lt_between_nodes():
    assert (y < x + 4) == 1
    assert isinstance(x < z, LtNode)
    assert sym_infer(x < z, {x: 1, z: 2}) == 1 and sym_infer(x < z, {x: 2, z: 2}) == 0


def test_ands():
    a, b = x < 5, z < 3
    assert Node.ands([a, NumNode(1)]) == a  # true parts dropped
    assert Node.ands([a, NumNode(0)]) == 0  # false if any part is false
    assert Node.ands([]) == 1
    both = Node.ands([a, b, a])
    assert isinstance(both, AndNode) and len(both.nodes) == 2 and Node.ands([b, a]) == both
    with pytest.raises(ValueError):
        Node.ands([x])


def test_variable_binding():
    bound = x.bind(4)
    assert bound == x and hash(bound) == hash(x) and bound.val == 4
    assert bound.unbind() == (x, 4) and {bound: 1}[x] == 1
    with pytest.raises(ValueError):
        _ = x.val
    with pytest.raises(ValueError):
        x.bind(11)
    with pytest.raises(ValueError):
        Variable("bad", 3, 2)
    assert sym_infer(bound * 2 + 1, {}) == 9


def test_substitute():
    expr = (x * 4 + y) // 3
    assert expr.substitute({x: NumNode(2), y: NumNode(1)}) == 3
    assert (x + y).substitute({y: z}) == x + z
    assert (x < 5).substitute({x: 7}) == 0


def test_vars_in_order():
    expr = z * 2 + x * 3 + y
    rendered = expr.render()
    assert expr.variables() == sorted([x, y, z], key=lambda v: rendered.index(v.expr))  # order of first appearance
    assert ((x // 2) < z + y).variables() == [x, y, z]
    assert ((x // 2) % 3 < z).vars() == {x, z}


def test_render():
    assert (x * 4 + y).render() == "((x*4)+y)"
    assert (x // 3).render() == "(x//3)" and (x % 3).render() == "(x%3)"
    assert Node.ands([x < 5, z < 3]).render() == "((x<5)&(z<3))"
    assert sym_render(5) == "5" and sym_render(x + 1) == "(x+1)"


def test_render_dispatches_on_ops():
    ops = {Variable: lambda n, ops, ctx: ctx[n.expr], NumNode: lambda n, ops, ctx: n.b}
    ops |= {MulNode: lambda n, ops, ctx: n.a.render(ops, ctx) * n.b}
    ops |= {SumNode: lambda n, ops, ctx: sum(m.render(ops, ctx) for m in n.nodes)}
    assert (x * 3 + y + 2).render(ops, {"x": 2, "y": 1}) == 9


def test_errors_and_helpers():
    with pytest.raises(ValueError):
        _ = x // 0
    with pytest.raises(ValueError):
        _ = x % -2
    with pytest.raises(ValueError):
        _ = x // z
    n = Variable("n", 1, 8)
    assert y // (y + 1) == 0 and n // n == 1 and n % n == 0 and y % (y + 1) == y
    assert is_sym(x) and not is_sym(NumNode(3)) and not is_sym(3)
    assert to_sint(NumNode(3)) == 3 and type(to_sint(NumNode(3))) is int and to_sint(x) is x
    assert 10 - x == -x + 10 and 3 * x == x * 3


def test_symbolic_product():
    n = Variable("n", 1, 8)
    assert (x * n).min == 0 and (x * n).max == 80 and x * n == n * x
    assert sym_infer(x * n + 2, {x: 3, n: 4}) == 14


# ---------------------------------------------------------------------------------------------------------------------
# property tests: simplified nodes evaluate like the unsimplified expression, inside their bounds

BIN_OPS = {"add": operator.add, "sub": operator.sub, "mul": operator.mul}
INT_OPS = {"mulc": operator.mul, "div": operator.floordiv, "mod": operator.mod, "addc": operator.add}


def exprs(nvars: int) -> st.SearchStrategy:
    leaves = st.one_of(
        st.tuples(st.just("var"), st.integers(0, nvars - 1)), st.tuples(st.just("num"), st.integers(-4, 9))
    )

    def extend(children: st.SearchStrategy) -> st.SearchStrategy:
        return st.one_of(
            st.tuples(st.sampled_from(sorted(BIN_OPS)), children, children),
            st.tuples(st.sampled_from(["mulc", "addc"]), children, st.integers(-4, 6)),
            st.tuples(st.sampled_from(["div", "mod"]), children, st.integers(1, 7)),
        )

    return st.recursive(leaves, extend, max_leaves=8)


def build(tree: tuple, nodes: list[Node], values: list[int] | None) -> Node | int:
    """The tree as a Node (values None) or as a Python int at `values`."""
    kind = tree[0]
    if kind == "var":
        return nodes[tree[1]] if values is None else values[tree[1]]
    if kind == "num":
        return NumNode(tree[1]) if values is None else tree[1]
    if kind in BIN_OPS:
        return BIN_OPS[kind](build(tree[1], nodes, values), build(tree[2], nodes, values))
    return INT_OPS[kind](build(tree[1], nodes, values), tree[2])


def variables(draw: st.DrawFn, nonneg: bool) -> list[Variable]:
    nvars = draw(st.integers(1, 3))
    out = []
    for i in range(nvars):
        lo = draw(st.integers(0 if nonneg else -4, 4))
        out.append(Variable(f"v{i}", lo, lo + draw(st.integers(0, 5))))
    return out


def assignments(nodes: list[Variable]):
    return itertools.product(*(range(v.min, v.max + 1) for v in nodes))


def walk(node: Node):
    yield node
    for src in node.srcs:
        yield from walk(src)


def check_against_brute_force(node: Node, tree: tuple, nodes: list[Variable], compare=None) -> None:
    # devices divide with C's truncation, which is floor division only for numerators that are never negative
    for sub in walk(node):
        if isinstance(sub, (DivNode, ModNode)):
            assert sub.a.min >= 0, f"{sub.key}: numerator can be negative ({sub.a.min}) inside {node.key}"
    rendered = eval(f"lambda {','.join(v.expr for v in nodes)}: {node.render()}")
    for vals in assignments(nodes):
        expected = compare(vals) if compare else build(tree, nodes, list(vals))
        got = sym_infer(node, dict(zip(nodes, vals)))
        assert got == expected, f"{node.key} at {vals}: {got} != {expected}"
        assert node.min <= got <= node.max, f"{node.key} at {vals}: {got} outside [{node.min}, {node.max}]"
        assert int(rendered(*vals)) == expected, f"render {node.render()} at {vals}"


@st.composite
def expression_cases(draw: st.DrawFn, nonneg: bool):
    nodes = variables(draw, nonneg)
    return nodes, draw(exprs(len(nodes)))


@settings(max_examples=400, deadline=None)
@given(expression_cases(nonneg=True))
def test_random_nonnegative_expressions(case):
    nodes, tree = case
    node = build(tree, nodes, None)
    check_against_brute_force(node, tree, nodes)


@settings(max_examples=400, deadline=None)
@given(expression_cases(nonneg=False))
def test_random_expressions_floor_semantics(case):
    nodes, tree = case
    node = build(tree, nodes, None)
    check_against_brute_force(node, tree, nodes)


@settings(max_examples=300, deadline=None)
@given(expression_cases(nonneg=False), st.integers(-10, 20), st.sampled_from(["lt", "ge", "le", "gt"]))
def test_random_comparisons(case, bound, op):
    nodes, tree = case
    node = build(tree, nodes, None)
    cmp = {"lt": operator.lt, "ge": operator.ge, "le": operator.le, "gt": operator.gt}[op]
    result = cmp(node, bound)
    check_against_brute_force(result, tree, nodes, lambda vals: int(cmp(build(tree, nodes, list(vals)), bound)))


@settings(max_examples=200, deadline=None)
@given(expression_cases(nonneg=True), st.integers(0, 12), st.integers(-3, 8))
def test_random_conjunctions(case, upper, lower):
    nodes, tree = case
    node = build(tree, nodes, None)
    both = Node.ands([node < upper, node.ge(lower), nodes[0] < upper])

    def expected(vals):
        value = build(tree, nodes, list(vals))
        return int(value < upper and value >= lower and vals[0] < upper)

    check_against_brute_force(both, tree, nodes, expected)


@settings(max_examples=200, deadline=None)
@given(expression_cases(nonneg=True), st.data())
def test_substitute_matches_infer(case, data):
    nodes, tree = case
    node = build(tree, nodes, None)
    vals = [data.draw(st.integers(v.min, v.max)) for v in nodes]
    substituted = node.substitute({v: NumNode(val) for v, val in zip(nodes, vals)})
    assert isinstance(substituted, NumNode) and substituted.b == build(tree, nodes, vals)
