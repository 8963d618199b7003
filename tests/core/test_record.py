"""`lazy.record`: dataclass declarations whose methods compile on first use, behaving as `dataclasses`' do."""

from __future__ import annotations

import dataclasses
import pickle
import subprocess
import sys
import threading

import pytest

from lazy.record import field, fields, record, replace


@record(frozen=True, order=True)
class Point:
    x: int
    y: int = 0
    tags: tuple[str, ...] = field(default_factory=tuple)
    note: str = field(default="", compare=False, repr=False)


@record(frozen=True, order=True)
class Point3(Point):
    z: int = 0


@record()
class Box:
    items: list[int] = field(default_factory=list)
    checked: bool = False

    def __post_init__(self) -> None:
        self.checked = True


@record(frozen=True)
class Cached:
    value: int

    def __hash__(self) -> int:
        return 12345


@dataclasses.dataclass(frozen=True, order=True)
class PointDC:
    x: int
    y: int = 0
    tags: tuple[str, ...] = dataclasses.field(default_factory=tuple)
    note: str = dataclasses.field(default="", compare=False, repr=False)


def test_methods_match_dataclasses():
    p, q = Point(1, 2, ("a",), "n"), PointDC(1, 2, ("a",), "n")
    assert repr(p) == repr(q).replace("PointDC", "Point") == "Point(x=1, y=2, tags=('a',))"
    assert p == Point(1, 2, ("a",), "other note")  # `note` is not compared
    assert p != Point(1, 3) and p != q  # equality needs the same class
    assert hash(p) == hash(Point(1, 2, ("a",))) and hash(p) == hash(q)
    assert Point(1, 2) < Point(1, 3) < Point(2, 0) and Point(2) >= Point(1, 9)
    assert sorted([Point(3), Point(1, 5), Point(1, 2)]) == [Point(1, 2), Point(1, 5), Point(3)]
    assert Point(7).tags == () and Point(7).tags is not None
    with pytest.raises(TypeError):
        Point()  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        Point(1, 2, (), "", 5)  # type: ignore[call-arg]


def test_frozen_records_refuse_assignment_as_dataclasses_do():
    p = Point(1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.x = 5  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        del p.y  # type: ignore[misc]
    assert p.x == 1


def test_inherited_fields_post_init_mutable_and_explicit_hash():
    p3 = Point3(1, 2, z=3)
    assert [f.name for f in fields(p3)] == ["x", "y", "tags", "note", "z"]
    assert repr(p3) == "Point3(x=1, y=2, tags=(), z=3)" and p3 != Point(1, 2)
    box = Box()
    assert box.checked and box.items == [] and Box().items is not box.items  # a fresh list each time
    box.items.append(1)
    assert box == Box([1]) and box != Box()
    with pytest.raises(TypeError):
        hash(box)  # eq and mutable: unhashable, as dataclasses make it
    assert hash(Cached(1)) == 12345 and Cached(1) == Cached(1) != Cached(2)


def test_replace_and_the_dataclasses_api():
    p = Point(1, 2, ("t",), "n")
    assert replace(p, y=5) == Point(1, 5, ("t",)) and replace(p, y=5).note == "n"
    with pytest.raises(TypeError, match="no field"):
        replace(p, w=1)
    assert dataclasses.is_dataclass(p) and [f.name for f in dataclasses.fields(Point)] == ["x", "y", "tags", "note"]
    assert dataclasses.replace(p, x=9) == Point(9, 2, ("t",))
    assert dataclasses.asdict(p) == {"x": 1, "y": 2, "tags": ("t",), "note": "n"}
    assert Point.__match_args__ == ("x", "y", "tags", "note")
    match p:
        case Point(1, y):
            assert y == 2
        case _:
            raise AssertionError("a record matches positionally by its fields")


def test_methods_compile_once_on_first_use_from_any_path(run_interleaved):
    """Before any instance exists the class holds stand-ins; the first use (here: an instance made without `__init__`,
    as unpickling makes one, compared and hashed) compiles them all, once, also when threads race to it."""

    @record(frozen=True)
    class Fresh:
        a: int
        b: str = "b"

    assert "__record_pending__" in Fresh.__dict__
    made = Fresh.__new__(Fresh)
    object.__setattr__(made, "a", 1)
    object.__setattr__(made, "b", "x")
    results = []
    start = threading.Barrier(8)

    def use() -> None:
        start.wait()
        results.append((hash(made), made == made))

    threads = [threading.Thread(target=use) for _ in range(8)]
    run_interleaved(threads)  # they race into the compile
    assert len(results) == 8 and len(set(results)) == 1 and results[0][1] and "__record_pending__" not in Fresh.__dict__
    assert Fresh.__init__.__qualname__.endswith("Fresh.__init__")
    assert Fresh(1, "x") == made and hash(Fresh(1, "x")) == hash(made)


def test_pickle_round_trip():
    p = Point3(1, 2, ("a",), "n", 4)
    back = pickle.loads(pickle.dumps(p))
    assert back == p and hash(back) == hash(p) and back.note == "n" and type(back) is Point3


def test_import_lazy_does_not_load_dataclasses_or_hcq():
    code = "import sys, lazy; print(sorted(m for m in ('dataclasses', 'inspect', 'lazy.hcq') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", f"`import lazy` loaded {out.strip()}"


def test_a_field_without_default_after_one_with_is_refused():
    with pytest.raises(TypeError, match="without a default"):

        @record()
        class Bad:
            a: int = 0
            b: int  # type: ignore[misc]


def test_cached_property_computes_once_per_instance_and_keeps_the_value_in_its_dict():
    """`lazy.helpers.cached_property` (the lock-free stand-in for functools'): on a frozen record too, as the shape
    trackers use it."""
    from lazy.helpers import cached_property

    calls: list[int] = []

    @record(frozen=True)
    class Box:
        x: int

        @cached_property
        def doubled(self) -> int:
            """twice x"""
            calls.append(self.x)
            return 2 * self.x

    a, b = Box(1), Box(2)
    assert (a.doubled, a.doubled, b.doubled) == (2, 2, 4) and calls == [1, 2]
    assert a.__dict__["doubled"] == 2 and isinstance(Box.doubled, cached_property) and Box.doubled.__doc__ == "twice x"


def test_equality_compares_field_by_field_as_the_dataclass_tuples_do():
    """`__eq__` stops at the first field that differs instead of building tuples, with the tuples' rule for each
    element (the same object is equal, so a NaN field equals itself; two distinct NaNs do not)."""
    nan, other_nan = float("nan"), float("-nan")
    for kind in (Point, PointDC):
        a = kind(1, 2, (nan,))  # type: ignore[arg-type]
        assert a == a and a == kind(1, 2, (nan,)) and a != kind(1, 2, (other_nan,))  # type: ignore[arg-type]
        assert kind(1, 2) != kind(1, 3) and kind(1, 2) != kind(2, 2) and kind(1, 2) == kind(1, 2, (), "x")
    assert (Point(1) == 1) is False and Point(1).__eq__(1) is NotImplemented
