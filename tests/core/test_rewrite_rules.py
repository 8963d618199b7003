"""The rewrite rule table (`lazy.rewrite.RULES`) on both graphs that apply it: every rule folds a lazy graph and a UOp
graph, and the folded graph computes the same values as the unfolded one (its constants read from memory, where no
rule can see them) on the PYTHON reference and on CPU. Then the cases no rule may fold: floats where the algebra is
not exact (x*0 with NaN, x//1 truncating, x//0)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from lazy import Device, Tensor
from lazy.codegen.uops import UOp, UOps
from lazy.conformance.support import KernelBuilder, buffer_from, empty_buffer
from lazy.dtype import DType, dtypes, to_np_dtype
from lazy.lazy import LazyBuffer
from lazy.ops import GroupOp, Ops
from lazy.rewrite import RULES, Const, Rule, fold_value

DEVICES = ["PYTHON", "CPU"]
INF, NAN = math.inf, math.nan
# values a rule must keep, edges included: -0.0, infinities and NaN for floats, the extremes for ints
VALUES: dict[DType, list[Any]] = {
    dtypes.float32: [0.0, -0.0, 1.5, -2.5, 3.0, INF, -INF, NAN],
    dtypes.int32: [0, 1, -1, 7, -8, 2**31 - 1, -(2**31), 5],
    dtypes.bool: [True, False, True, True, False, False, True, False],
}
CONDITION = [True, False, False, True, True, False, True, False]  # a where's condition, the inputs' length


def rule_dtypes(rule: Rule) -> list[DType]:
    """The dtypes each rule is checked in: those its condition allows, of the ones its op is defined on."""
    defined = [dtypes.bool] if rule.op is Ops.AND else [dtypes.float32, dtypes.int32, dtypes.bool]
    if rule.op in (Ops.ADD, Ops.IDIV):
        defined = [dtypes.float32, dtypes.int32]
    return [dtype for dtype in defined if rule.when(dtype)]


CASES = [
    pytest.param(rule, dtype, swapped, id=f"{rule.op.name}{rule.srcs}-{dtype.name}{'-swapped' if swapped else ''}")
    for rule in RULES
    for dtype in rule_dtypes(rule)
    for swapped in ((False, True) if rule.op in GroupOp.Commutative else (False,))
]


def test_every_rule_is_checked():
    assert {id(case.values[0]) for case in CASES} == {id(rule) for rule in RULES}


def operand_dtype(rule: Rule, position: int, dtype: DType) -> DType:
    return dtypes.bool if rule.op is Ops.WHERE and position == 0 else dtype


def data_for(name: str, dtype: DType) -> list[Any]:
    """Distinct data for each name, so a rule that returns the wrong operand gives the wrong values."""
    values = CONDITION if dtype == dtypes.bool and name == "c" else VALUES[dtype]
    return values[::-1] if name == "y" else values


def operands(rule: Rule, swapped: bool) -> list[tuple[int, Any]]:
    """(position in the pattern, operand) in the order the op gets them."""
    order = list(enumerate(rule.srcs))
    return order[::-1] if swapped else order


# ---------------------------------------------------------------------------------------------------------------------
# the lazy graph


def lazy_operand(operand: Any, dtype: DType, device: str, folded: bool, names: dict[str, LazyBuffer]) -> LazyBuffer:
    """A name: a realized buffer (when `folded`, the same node for the same name; else a copy for each use, so that
    where(c, x, x) is computed too). A constant: an unrealized CONST when `folded`, else a realized buffer holding it
    (which no rule can read)."""
    if isinstance(operand, str):
        if operand not in names or not folded:
            names[operand] = (
                Tensor(np.array(data_for(operand, dtype), to_np_dtype(dtype)), device=device).realize().lazydata
            )
        return names[operand]
    n = len(VALUES[dtype])
    if folded:
        return LazyBuffer.const_like(operand.value, dtype, device, (n,))
    return Tensor(np.full(n, operand.value, to_np_dtype(dtype)), device=device).realize().lazydata


def lazy_graph(
    rule: Rule, dtype: DType, swapped: bool, device: str, folded: bool
) -> tuple[LazyBuffer, dict[str, LazyBuffer]]:
    names: dict[str, LazyBuffer] = {}
    srcs = [lazy_operand(op, operand_dtype(rule, i, dtype), device, folded, names) for i, op in operands(rule, swapped)]
    return srcs[0].e(rule.op, *srcs[1:]), names


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("rule,dtype,swapped", CASES)
def test_rule_on_lazy_graph(rule: Rule, dtype: DType, swapped: bool, device: str):
    folded, names = lazy_graph(rule, dtype, swapped, device, folded=True)
    if isinstance(rule.result, str):
        assert folded is names[rule.result]
    else:
        assert folded.is_unrealized_const() and folded.const_value() == rule.result.value
    unfolded, _ = lazy_graph(rule, dtype, swapped, device, folded=False)
    assert unfolded.op is rule.op  # computed by the device: the reference for the folded graph
    np.testing.assert_array_equal(Tensor(folded, device).numpy(), Tensor(unfolded, device).numpy())


# ---------------------------------------------------------------------------------------------------------------------
# the UOp graph


def uop_operand(k: KernelBuilder, operand: Any, dtype: DType, folded: bool, idx: UOp, inputs: dict[Any, Any]) -> UOp:
    """A name: a load of its input buffer (when `folded`, one load per name, else one per use: separate buffers of
    the same values). A constant: a CONST when `folded`, else a load of a buffer holding it."""
    if isinstance(operand, Const) and folded:
        return k.const(operand.value, dtype)
    key = operand if isinstance(operand, str) and folded else len(inputs)
    if key not in inputs:
        values = data_for(operand, dtype) if isinstance(operand, str) else [operand.value] * len(VALUES[dtype])
        buf = k.buffer(dtype)
        inputs[key] = (buf, np.array(values, to_np_dtype(dtype)), dtype, k.load(buf, idx))
    return inputs[key][3]


def run_uop_graph(
    rule: Rule, dtype: DType, swapped: bool, device: str, folded: bool
) -> tuple[UOp, dict[str, UOp], np.ndarray]:
    """The UOp the builder gives for the rule's op, the UOp each name bound, and the values the kernel stores."""
    k = KernelBuilder(Device[device], f"rule_{rule.op.name.lower()}_{int(folded)}")
    n = len(VALUES[dtype])
    out = k.buffer(dtype, written=True)
    idx = k.global_index(n)
    inputs: dict[Any, Any] = {}
    srcs = {
        i: uop_operand(k, op, operand_dtype(rule, i, dtype), folded, idx, inputs) for i, op in operands(rule, swapped)
    }
    result = k.alu(rule.op, *srcs.values())
    k.store(out, idx, result)
    bufs = [empty_buffer(device, n, dtype)] + [buffer_from(device, arr, dt) for _, arr, dt, _ in inputs.values()]
    k.run(*bufs)
    names = {op: srcs[i] for i, op in enumerate(rule.srcs) if isinstance(op, str)}
    return result, names, bufs[0].numpy()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("rule,dtype,swapped", CASES)
def test_rule_on_uop_graph(rule: Rule, dtype: DType, swapped: bool, device: str):
    folded, names, values = run_uop_graph(rule, dtype, swapped, device, folded=True)
    if isinstance(rule.result, str):
        assert folded is names[rule.result]
    else:
        assert folded.op is UOps.CONST and folded.arg == rule.result.value
    unfolded, _, reference = run_uop_graph(rule, dtype, swapped, device, folded=False)
    assert unfolded.op is UOps.ALU and unfolded.arg is rule.op
    np.testing.assert_array_equal(values, reference)


# ---------------------------------------------------------------------------------------------------------------------
# constants: all-constant ops become their value, except a float divided by zero


def lazy_result(op: Ops, dtype: DType, lhs: LazyBuffer | Any, rhs: Any, device: str) -> LazyBuffer:
    n = len(VALUES[dtype])
    left = lhs if isinstance(lhs, LazyBuffer) else LazyBuffer.const_like(lhs, dtype, device, (n,))
    return left.e(op, LazyBuffer.const_like(rhs, dtype, device, (n,)))


def data(dtype: DType, device: str) -> LazyBuffer:
    return Tensor(np.array(VALUES[dtype], to_np_dtype(dtype)), device=device).realize().lazydata


def uop_kernel(op: Ops, dtype: DType, lhs: Any, rhs: Any, device: str) -> tuple[UOp, np.ndarray]:
    """`op(lhs, rhs)` in a kernel: lhs None loads the data of VALUES, else a CONST; rhs is a CONST."""
    k = KernelBuilder(Device[device], f"const_{op.name.lower()}")
    n = len(VALUES[dtype])
    out = k.buffer(dtype, written=True)
    src = k.buffer(dtype) if lhs is None else None
    idx = k.global_index(n)
    left = k.load(src, idx) if src is not None else k.const(lhs, dtype)
    result = k.alu(op, left, k.const(rhs, dtype))
    k.store(out, idx, result)
    bufs = [empty_buffer(device, n, dtype)]
    if src is not None:
        bufs.append(buffer_from(device, np.array(VALUES[dtype], to_np_dtype(dtype)), dtype))
    k.run(*bufs)
    return result, bufs[0].numpy()


CONSTANT_FOLDS = [
    (Ops.ADD, dtypes.int32, 2, 3, 5),
    (Ops.MUL, dtypes.float32, 1.5, -2.0, -3.0),
    (Ops.IDIV, dtypes.int32, 7, 0, 0),  # x // 0 is 0 in the reference and on every device (guarded division)
    (Ops.MOD, dtypes.int32, -7, 0, 0),
    (Ops.MAX, dtypes.float32, NAN, 1.0, NAN),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op,dtype,lhs,rhs,expected", CONSTANT_FOLDS, ids=lambda v: getattr(v, "name", None))
def test_constant_operands_fold_on_both_graphs(op: Ops, dtype: DType, lhs: Any, rhs: Any, expected: Any, device: str):
    assert fold_value(op, dtype, [lhs, rhs]) == (True, expected) or math.isnan(expected)
    lb = lazy_result(op, dtype, lhs, rhs, device)
    assert lb.is_unrealized_const()
    uop, values = uop_kernel(op, dtype, lhs, rhs, device)
    assert uop.op is UOps.CONST
    np.testing.assert_array_equal(Tensor(lb, device).numpy(), values)
    np.testing.assert_array_equal(values, np.full(len(values), expected, to_np_dtype(dtype)))


@pytest.mark.parametrize("op", [Ops.IDIV, Ops.MOD])
def test_float_division_by_zero_is_left_to_the_device(op: Ops):
    """The reference's x // 0 = 0 is the integer convention; C devices compute trunc(x / 0.0) and fmod(x, 0.0), so
    a constant operand must not turn the device's value into the reference's."""
    assert fold_value(op, dtypes.float32, [3.0, 0.0]) == (False, None)
    assert lazy_result(op, dtypes.float32, 3.0, 0.0, "PYTHON").op is op
    assert uop_kernel(op, dtypes.float32, 3.0, 0.0, "PYTHON")[0].op is UOps.ALU


# ---------------------------------------------------------------------------------------------------------------------
# what no rule may fold: each case computes on the device, and the values show why


def numpy_reference(op: Ops, dtype: DType, rhs: Any) -> np.ndarray:
    x = np.array(VALUES[dtype], to_np_dtype(dtype))
    with np.errstate(invalid="ignore"):
        if op is Ops.MUL:
            return x * np.array(rhs, x.dtype)
        if op is Ops.IDIV:
            return np.trunc(x / np.array(rhs, x.dtype))
        assert op is Ops.AND
        return x & np.array(rhs, x.dtype)


NOT_FOLDED = [
    (Ops.MUL, dtypes.float32, 0.0),  # inf * 0 and NaN * 0 are NaN, -2.5 * 0 is -0.0
    (Ops.IDIV, dtypes.float32, 1.0),  # a float's IDIV truncates: 1.5 // 1 is 1.0
    (Ops.AND, dtypes.int32, 1),  # x & 1 keeps only the low bit (the bool rule x & True must not match an int 1)
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op,dtype,rhs", NOT_FOLDED, ids=lambda v: getattr(v, "name", None))
def test_inexact_algebra_is_not_folded(op: Ops, dtype: DType, rhs: Any, device: str):
    lb = lazy_result(op, dtype, data(dtype, device), rhs, device)
    assert lb.op is op
    uop, values = uop_kernel(op, dtype, None, rhs, device)
    assert uop.op is UOps.ALU and uop.arg is op
    reference = numpy_reference(op, dtype, rhs)
    # inf // 1 is NaN in the reference (Python's //) and inf in C's trunc(inf / 1): not what this test is about
    shown = np.isfinite(reference) | (op is not Ops.IDIV)
    np.testing.assert_array_equal(Tensor(lb, device).numpy()[shown], reference[shown])
    np.testing.assert_array_equal(values[shown], reference[shown])


def test_float_idiv_by_one_truncates():
    """Regression: `x // 1` was folded to x for every dtype, so a float's IDIV by 1 returned x untruncated."""
    np.testing.assert_array_equal(Tensor([2.5, -2.5, 7.0], device="PYTHON").idiv(1).numpy(), [2.0, -2.0, 7.0])


def test_float_mul_by_zero_keeps_nan():
    np.testing.assert_array_equal((Tensor([NAN, INF, 2.0], device="PYTHON") * 0).numpy(), [NAN, NAN, 0.0])


def test_adding_zero_keeps_negative_zero():
    """x + 0 -> x is folded for floats too (as tinygrad does): -0.0 + 0 stays -0.0, where IEEE rounds it to +0.0.
    Pinned so that a change to this documented choice is deliberate."""
    x = Tensor([-0.0, 1.0], device="PYTHON").realize()
    out = x + 0
    assert out.lazydata is x.lazydata
    assert math.copysign(1.0, float(out.numpy()[0])) == -1.0
