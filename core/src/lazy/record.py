"""Records: dataclasses whose methods are made when first used.

`@dataclass` writes each class's `__init__`, `__repr__`, `__eq__`, `__hash__` (and, frozen, `__setattr__` and
`__delattr__`) as source and compiles each at class creation: about a millisecond a class on a slow core, and it
imports `inspect`. The ~30 classes `import lazy` defines took half its time that way. `@record` takes the same
declarations (annotated fields, `field(default=..., default_factory=..., compare=..., repr=...)`, `frozen`, `eq`,
`order`, `__post_init__`, fields inherited from a record base, methods the class defines itself kept) and installs
stand-ins that compile all of a class's methods in one go the first time any of them runs, so a class no program
instantiates costs nothing. The methods behave as `dataclasses`' do (same `repr`, equality by class and fields,
`dataclasses.FrozenInstanceError`).

`dataclasses.fields`, `replace`, `asdict` and `is_dataclass` work on records too: `__dataclass_fields__` is made,
with `dataclasses` imported, when first asked for. Inside lazy, `replace` and `fields` here do the same without it.
Records are for lazy's own classes; the HCQ commands stay `dataclasses` (plugins build and replace them)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from typing_extensions import dataclass_transform  # typing's from Python 3.11; only type checkers read it
else:

    def dataclass_transform(**_: Any) -> Callable[[Any], Any]:
        return lambda decorator: decorator


_T = TypeVar("_T")


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()


class Field:
    """One field of a record: its name, default (or factory), and whether it takes part in equality and repr."""

    __slots__ = ("name", "default", "default_factory", "compare", "repr")

    def __init__(self, default: Any = MISSING, default_factory: Any = MISSING, compare: bool = True, repr: bool = True):
        if default is not MISSING and default_factory is not MISSING:
            raise ValueError("a field takes a default or a default_factory, not both")
        self.name = ""
        self.default, self.default_factory, self.compare, self.repr = default, default_factory, compare, repr


def field(*, default: Any = MISSING, default_factory: Callable[[], Any] | Any = MISSING, compare: bool = True,
          repr: bool = True) -> Any:  # fmt: skip
    """A field's options, as `dataclasses.field`'s (the subset records support)."""
    return Field(default, default_factory, compare, repr)


@dataclass_transform(field_specifiers=(field,))
def record(*, frozen: bool = False, eq: bool = True, order: bool = False) -> Callable[[_T], _T]:
    """The class decorator (always called: `@record()`, `@record(frozen=True)`), with `dataclass`'s meaning of
    `frozen`, `eq` and `order`."""

    def make(cls: _T) -> _T:
        assert isinstance(cls, type), "@record() decorates a class"
        _declare(cls, frozen, eq, order)
        return cls

    return make


def fields(obj: Any) -> tuple[Field, ...]:
    """The fields of a record (class or instance), in declaration order, inherited ones first."""
    return tuple(_fields_of(obj if isinstance(obj, type) else type(obj)).values())


def replace(obj: _T, /, **changes: Any) -> _T:
    """A new record like `obj` with `changes` (field name -> value), made through `__init__` (so `__post_init__`
    checks it again)."""
    values = {name: getattr(obj, name) for name in _fields_of(type(obj))}
    unknown = set(changes) - set(values)
    if unknown:
        raise TypeError(f"replace: {type(obj).__qualname__} has no field {', '.join(sorted(unknown))}")
    values.update(changes)
    return type(obj)(**values)


def is_record(obj: Any) -> bool:
    return hasattr(obj if isinstance(obj, type) else type(obj), "__record_fields__")


# -- declaring -------------------------------------------------------------------------------------------------------


def _fields_of(cls: type) -> dict[str, Field]:
    found: dict[str, Field] | None = getattr(cls, "__record_fields__", None)
    if found is None:
        raise TypeError(f"{cls.__qualname__} is not a record")
    return found


def _declare(cls: type, frozen: bool, eq: bool, order: bool) -> None:
    own = cls.__dict__
    found: dict[str, Field] = {}
    for base in reversed(cls.__mro__[1:]):
        found.update(base.__dict__.get("__record_fields__", {}))
    for name, annotation in own.get("__annotations__", {}).items():
        if "ClassVar" in str(annotation):
            continue
        value = own.get(name, MISSING)
        spec = value if isinstance(value, Field) else Field(default=value)
        spec.name = name
        found.pop(name, None)  # a redeclared field moves to the end, as in dataclasses
        found[name] = spec
        if isinstance(value, Field):  # the class attribute is the plain default, or nothing
            if spec.default is MISSING:
                delattr(cls, name)
            else:
                setattr(cls, name, spec.default)
    defaults_seen = False
    for spec in found.values():
        if spec.default is not MISSING or spec.default_factory is not MISSING:
            defaults_seen = True
        elif defaults_seen:
            raise TypeError(f"{cls.__qualname__}: field {spec.name!r} without a default follows one with a default")
    cls.__record_fields__ = found  # type: ignore[attr-defined]
    cls.__match_args__ = tuple(found)  # type: ignore[attr-defined, misc]
    cls.__dataclass_fields__ = _DataclassFields()  # type: ignore[attr-defined]

    wanted = ["__init__", "__repr__"]
    if eq:
        wanted.append("__eq__")
    if order:
        wanted += ["__lt__", "__le__", "__gt__", "__ge__"]
    if frozen:
        wanted += ["__setattr__", "__delattr__"]
    # __hash__ as dataclass decides it (unsafe_hash=False): kept when the class defines it, from the compared fields
    # when eq and frozen, None (unhashable) when eq and mutable
    explicit_hash = "__hash__" in own and not (own["__hash__"] is None and "__eq__" in own)
    if eq and not explicit_hash:
        if frozen:
            wanted.append("__hash__")
        else:
            cls.__hash__ = None  # type: ignore[assignment]
    stubs = {name: _stand_in(cls, name, frozen, order) for name in wanted if name not in own or name == "__hash__"}
    for name, stub in stubs.items():
        setattr(cls, name, stub)
    cls.__record_pending__ = (frozen, tuple(stubs))  # type: ignore[attr-defined]


def _stand_in(cls: type, name: str, frozen: bool, order: bool) -> Callable[..., Any]:
    """A method that compiles the class's methods, then calls the real one in its place."""

    def stand_in(self: Any, *args: Any, **kwargs: Any) -> Any:
        _compile(cls)
        return getattr(cls, name)(self, *args, **kwargs)

    stand_in.__name__ = stand_in.__qualname__ = name
    return stand_in


# -- compiling -------------------------------------------------------------------------------------------------------


def _compile(cls: type) -> None:
    """Replace `cls`'s stand-ins by the methods they stand for, all from one piece of source (once: threads that
    get here together wait for the first)."""
    with _COMPILING:
        if (pending := cls.__dict__.get("__record_pending__")) is not None:
            _compile_now(cls, *pending)
            del cls.__record_pending__  # type: ignore[attr-defined]


_COMPILING = threading.Lock()


def _compile_now(cls: type, frozen: bool, names: tuple[str, ...]) -> None:
    found = _fields_of(cls)
    env: dict[str, Any] = {"__cls": cls, "__missing": MISSING, "__object_setattr": object.__setattr__}
    lines: list[str] = []
    if "__init__" in names:
        params, body = [], []
        for n, spec in found.items():
            if spec.default_factory is not MISSING:
                env[f"__factory_{n}"] = spec.default_factory
                params.append(f"{n}=__missing")
                value = f"__factory_{n}() if {n} is __missing else {n}"
            else:
                if spec.default is not MISSING:
                    env[f"__default_{n}"] = spec.default
                params.append(f"{n}=__default_{n}" if spec.default is not MISSING else n)
                value = n
            body.append(f"    __object_setattr(self, {n!r}, {value})" if frozen else f"    self.{n} = {value}")
        if hasattr(cls, "__post_init__"):
            body.append("    self.__post_init__()")
        lines += [f"def __init__(self{''.join(', ' + p for p in params)}):", *(body or ["    pass"])]
    if "__repr__" in names:
        parts = ", ".join(f"{n}={{self.{n}!r}}" for n, spec in found.items() if spec.repr)
        lines += ["def __repr__(self):", f"    return f'{{type(self).__qualname__}}({parts})'"]
    compared = [n for n, spec in found.items() if spec.compare]
    mine, theirs = _tuple("self", compared), _tuple("other", compared)
    if "__eq__" in names:  # field by field, stopping at the first that differs: as the tuples compare (an element is
        # equal to itself first, so a NaN field equals itself), without building them; the same object at once
        same = " and ".join(f"(self.{n} is other.{n} or self.{n} == other.{n})" for n in compared) or "True"
        lines += ["def __eq__(self, other):", "    if self is other:", "        return True",
                  "    if other.__class__ is self.__class__:", f"        return bool({same})",
                  "    return NotImplemented"]  # fmt: skip
    for method, op in (("__lt__", "<"), ("__le__", "<="), ("__gt__", ">"), ("__ge__", ">=")):
        if method in names:
            lines += [f"def {method}(self, other):", "    if other.__class__ is self.__class__:",
                      f"        return {mine} {op} {theirs}", "    return NotImplemented"]  # fmt: skip
    if "__hash__" in names:
        lines += ["def __hash__(self):", f"    return hash({mine})"]
    if "__setattr__" in names:
        env["__names"] = frozenset(found)
        for method, args in (("__setattr__", "name, value"), ("__delattr__", "name")):
            lines += [f"def {method}(self, {args}):", "    if type(self) is __cls or name in __names:",
                      "        import dataclasses", "        raise dataclasses.FrozenInstanceError(f'cannot assign to "
                      "field {name!r}')", f"    super(__cls, self).{method}({args})"]  # fmt: skip
    made: dict[str, Any] = {}
    exec("\n".join(lines), env, made)  # noqa: S102 (source built above from the class's own field names)
    for name in names:
        method = made[name]
        method.__qualname__ = f"{cls.__qualname__}.{name}"
        setattr(cls, name, method)


def _tuple(who: str, names: list[str]) -> str:
    return "(" + "".join(f"{who}.{n}," for n in names) + ")"


class _DataclassFields:
    """`__dataclass_fields__` of a record, made on first access with real `dataclasses.Field`s, so that
    `dataclasses.fields`, `replace`, `asdict` and `is_dataclass` work on it."""

    def __get__(self, obj: Any, owner: type) -> dict[str, Any]:
        import dataclasses

        made: dict[str, Any] = {}
        for name, spec in _fields_of(owner).items():
            f: Any = dataclasses.field(default=spec.default if spec.default is not MISSING else dataclasses.MISSING,
                                  default_factory=spec.default_factory if spec.default_factory is not MISSING
                                  else dataclasses.MISSING, compare=spec.compare, repr=spec.repr)  # fmt: skip
            f.name, f.type = name, owner.__dict__.get("__annotations__", {}).get(name, Any)
            f._field_type = dataclasses._FIELD  # type: ignore[attr-defined]
            made[name] = f
        return made
