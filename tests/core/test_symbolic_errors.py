"""Bad input with symbolic shapes: each mistake is a clear error naming the variable and its range. PYTHON device."""

from __future__ import annotations

import operator

import numpy as np
import pytest

from lazy import Context, Tensor, Variable
from lazy.symbolic import ConcreteValueError, NumNode, check_variables, concrete, describe, merge_bindings


@pytest.fixture(autouse=True)
def python_device():
    with Context(DEVICE="PYTHON"):
        yield


def rows(var: Variable | int) -> Tensor:
    return Tensor(np.arange(12, dtype=np.float32).reshape(4, 3)).shrink(((0, var), (0, 3)))


def test_a_value_outside_the_range():
    with pytest.raises(ValueError, match=r"cannot bind i to 11: outside its range \[1, 10\]"):
        Variable("i", 1, 10).bind(11)
    with pytest.raises(ValueError, match=r"cannot bind i to 0: outside its range \[1, 10\]"):
        Variable("i", 1, 10).bind(0)


@pytest.mark.parametrize("value", [2.5, True, "3", Variable("j", 1, 3)])
def test_a_value_that_is_not_an_int(value):
    with pytest.raises(TypeError, match=r"cannot bind i \(in \[1, 10\]\) to .* bind an int"):
        Variable("i", 1, 10).bind(value)


def test_ints_of_any_kind_bind():
    assert Variable("i", 1, 10).bind(np.int64(4)).val == 4 and Variable("i", 1, 10).bind(NumNode(5)).val == 5


@pytest.mark.parametrize("use", [int, float, operator.index, range, lambda d: np.zeros((3, d))])
def test_a_symbolic_dimension_where_a_number_is_needed(use):
    dim = rows(Variable("i", 1, 4)).shape[0]
    with pytest.raises(ConcreteValueError, match=r"i is in \[1, 4\] \(unbound\)"):
        use(dim)
    with pytest.raises(ConcreteValueError, match=r"i is in \[1, 4\] \(bound to 2\)"):
        use(rows(Variable("i", 1, 4).bind(2)).shape[0] * 2)
    assert issubclass(ConcreteValueError, TypeError) and issubclass(ConcreteValueError, ValueError)


def test_numpy_of_an_unbound_shape():
    with pytest.raises(ValueError, match=r"i\[1\.\.4\]"):
        rows(Variable("i", 1, 4)).numpy()


def test_an_unbound_variable_has_no_value():
    with pytest.raises(ValueError, match=r"Variable i \(in \[1, 4\]\) is not bound"):
        _ = Variable("i", 1, 4).val


def test_concrete_names_the_variable():
    with pytest.raises(ConcreteValueError, match=r"reshape needs a concrete size, not the symbolic \(i\*2\), where "
                                                 r"i is in \[1, 4\] \(unbound\)"):  # fmt: skip
        concrete(Variable("i", 1, 4) * 2, "reshape")
    assert concrete(NumNode(3), "x") == 3 and describe(5) == "5"


def test_two_variables_of_one_name_with_different_ranges():
    small, large = Variable("i", 1, 4).bind(2), Variable("i", 1, 8).bind(2)
    match = r"two variables named 'i' with different ranges meet: \[1, 4\] and \[1, 8\]"
    with pytest.raises(ValueError, match=match):
        rows(small).cat(Tensor.ones(8, 3).shrink(((0, large), (0, 3))))  # one shape holds both
    with pytest.raises(ValueError, match=match):
        (Tensor(small) + Tensor(large)).realize()  # one kernel reads both
    with pytest.raises(ValueError, match=match):
        check_variables([small * 3, large + 1])
    with pytest.raises(ValueError, match=match):
        merge_bindings({Variable("i", 1, 4): 2}, {Variable("i", 1, 8): 2})


def test_one_variable_bound_to_two_values():
    var = Variable("i", 1, 4)
    match = r"variable i \(in \[1, 4\]\) is bound to both 3 and 2"
    with pytest.raises(ValueError, match=match):
        (Tensor(var.bind(3)) + Tensor(var.bind(2))).realize()
    with pytest.raises(ValueError, match=match):
        Tensor.ones(var.bind(3), var.bind(2))
    with pytest.raises(ValueError, match=match):
        merge_bindings({var: 3}, {var: 2})


def test_a_bound_variable_reads_as_itself():
    assert repr(Variable("i", 1, 4).bind(3)) == "<i[1..4]=3>" and repr(Variable("i", 1, 4)) == "<i[1..4]>"


def test_ops_that_need_a_concrete_axis_name_the_variable():
    """argmax, cumsum, sort, topk, split, chunk, triu and causal attention over a symbolic axis raised a bare
    AssertionError (no message at all under `python -O`)."""
    v = Variable("n", 1, 6).bind(3)
    x = Tensor(np.ones((6, 4), np.float32))[:v]
    q = Tensor(np.ones((1, 6, 4), np.float32))[:, :v]
    cases = {
        "argmax": lambda: x.argmax(0),
        "cumsum": lambda: x.cumsum(0),
        "sort": lambda: x.sort(0),
        "topk": lambda: x.topk(2, 0),
        "split": lambda: x.split(2, 0),
        "chunk": lambda: x.chunk(2, 0),
        "triu": lambda: x.triu(),
        "attention": lambda: q.scaled_dot_product_attention(q, q, is_causal=True),
    }
    for op in cases.values():
        with pytest.raises(
            ConcreteValueError, match=r"needs a concrete size, not the symbolic n, where n is in \[1, 6\]"
        ):
            op()
