"""The runtime (allocator, programs, queues, graphs) cannot run without a GPU, so its use of the driver API is checked
against the installed cuda-bindings instead: every `driver.X` it names exists, every call passes as many positional
arguments as the binding's signature takes, and every enum member it names is one. A renamed or re-shaped function in
a new cuda-bindings release fails here, not on a user's GPU."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

driver = pytest.importorskip("cuda.bindings.driver", reason="cuda-bindings is not installed (pip install lazy-cuda)")
import lazy_cuda  # noqa: E402

RUNTIME = [Path(lazy_cuda.__file__).parent / name for name in ("device.py", "queues.py")]
SIGNATURE = re.compile(r"^(\w+)\((.*)\)$")


def driver_names(tree: ast.AST) -> list[tuple[ast.Attribute, list[str]]]:
    """Each `driver.A.B...` expression (the outermost attribute node) and its dotted parts after `driver`."""
    found = []
    parents = {id(child): node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in ("driver", "ATTR"):
            outer: ast.expr
            parts, outer = ([] if node.id == "driver" else ["CUdevice_attribute"]), node
            assert isinstance(outer, ast.expr)
            while isinstance(parent := parents.get(id(outer)), ast.Attribute):
                parts.append(parent.attr)
                outer = parent
            if parts and isinstance(outer, ast.Attribute):
                found.append((outer, parts))
    return found


def parameters(function: object) -> tuple[int, int]:
    """(required, most) positional parameters, read from the binding's docstring signature line."""
    first = (function.__doc__ or "").strip().splitlines()[0]
    match = SIGNATURE.match(first)
    assert match, f"no signature line in {function}'s docstring: {first!r}"
    params = [p for p in match.group(2).split(",") if p.strip()]
    return sum("=" not in p for p in params), len(params)


@pytest.mark.parametrize("path", RUNTIME, ids=lambda p: p.name)
def test_every_driver_name_exists_and_calls_match_signatures(path):
    tree = ast.parse(path.read_text())
    calls = {id(node.func): node for node in ast.walk(tree) if isinstance(node, ast.Call)}
    checked = 0
    for node, parts in driver_names(tree):
        target: object = driver
        for i, part in enumerate(parts):
            assert hasattr(target, part), f"{path.name}:{node.lineno}: driver.{'.'.join(parts[: i + 1])} does not exist"
            target = getattr(target, part)
        call = calls.get(id(node))
        if call is None or not parts[0].startswith("cu") or not callable(target) or isinstance(target, type):
            continue
        if any(isinstance(a, ast.Starred) for a in call.args):
            continue  # counted below for the one call that spreads tuples (cuLaunchKernel)
        required, most = parameters(target)
        shape = f"driver.{parts[0]} takes {required}..{most} arguments, the call passes {len(call.args)}"
        assert required <= len(call.args) <= most, f"{path.name}:{call.lineno}: {shape}"
        checked += 1
    assert checked >= 10


def test_launch_passes_all_eleven_arguments():
    """cuLaunchKernel(f, grid x3, block x3, shared bytes, stream, params, extra): the call spreads two 3-tuples."""
    required, most = parameters(driver.cuLaunchKernel)
    assert required == most == 11
    source = (Path(lazy_cuda.__file__).parent / "device.py").read_text()
    assert "driver.cuLaunchKernel(self.function, *gs, *ls, 0, stream, params, 0)" in source
