"""`Tensor`'s public API documents itself: every public method, property and data slot (its own and its mixins') has
a docstring, and every method `TensorBase` declares for the mixins is one that Tensor has."""

import ast
import inspect
import pathlib

from lazy import Tensor
from lazy.tensor_base import TensorBase


def _docstring(name: str) -> str | None:
    """The docstring of Tensor's attribute `name`: a function's, a property's getter's, or a slot's (the value in
    the `__slots__` dict of the class that defines it)."""
    for klass in Tensor.__mro__:
        if name not in vars(klass):
            continue
        slots = vars(klass).get("__slots__")
        if isinstance(slots, dict) and name in slots:
            return slots[name]
        attr = vars(klass)[name]
        attr = attr.fget if isinstance(attr, property) else getattr(attr, "__func__", attr)
        return attr.__doc__
    return None


def _public_names() -> list[str]:
    """Tensor's public methods, properties, slots and nested classes (not plain class-level settings such as
    `Tensor.training`)."""
    names = []
    for name in dir(Tensor):
        if name.startswith("_"):
            continue
        if isinstance(inspect.getattr_static(Tensor, name), (bool, int, float, str)):
            continue
        names.append(name)
    return names


def test_every_public_tensor_attribute_has_a_docstring():
    names = _public_names()
    assert len(names) > 200, "the walk over Tensor's attributes found too few to be the real API"
    missing = [name for name in names if not (_docstring(name) or "").strip()]
    assert not missing, f"public Tensor attributes without a docstring: {', '.join(missing)}"


def test_what_the_base_declares_tensor_has():
    # the declarations are for mypy only (inside `if TYPE_CHECKING`), so nothing at run time would notice a method
    # the mixins are typed against but Tensor lacks
    tree = ast.parse(pathlib.Path(inspect.getfile(TensorBase)).read_text())
    base = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "TensorBase")
    declared = {n.name for n in ast.walk(base) if isinstance(n, ast.FunctionDef)} - {"__init__"}
    assert len(declared) > 50
    missing = sorted(name for name in declared if not hasattr(Tensor, name))
    assert not missing, f"TensorBase declares what Tensor does not have: {', '.join(missing)}"
