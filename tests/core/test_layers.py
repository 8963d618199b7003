"""The import direction of DESIGN.md section 3: a module imports only modules at its own level or below, and core
never imports a plugin. Checked on the source (function-level imports included; TYPE_CHECKING blocks excluded)."""

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2] / "core" / "src" / "lazy"

# lowest first; one row of DESIGN.md's table per level
LEVELS = [
    ["lazy.helpers", "lazy.progress", "lazy.profile", "lazy.record", "lazy.diskcache"],
    ["lazy.dtype"],
    ["lazy.symbolic"],
    ["lazy.shape"],
    ["lazy.ops", "lazy.rewrite"],
    ["lazy.codegen.uops"],
    ["lazy.renderer"],
    ["lazy.device"],
    ["lazy.hcq"],
    ["lazy.hookspecs", "lazy.plugins", "lazy.pydevice", "lazy.wmma"],
    ["lazy.codegen", "lazy.viz"],
    ["lazy.lazy", "lazy.multi"],
    ["lazy.engine.schedule"],
    ["lazy.engine.realize", "lazy.engine.jit", "lazy.engine", "lazy.dlpack"],
    [
        "lazy.function",
        "lazy.tensor",
        "lazy.tensor_movement",
        "lazy.tensor_host",
        "lazy.tensor_base",
        "lazy.tensor_create",
        "lazy.tensor_index",
        "lazy.tensor_math",
        "lazy.tensor_division",
        "lazy.tensor_nn",
        "lazy.tensor_conv",
        "lazy.tensor_reduce",
        "lazy.tensor_operators",
        "lazy.tensor_devices",
        "lazy.tensor_assign",
    ],
    ["lazy.nn", "lazy.distributed", "lazy.onnx"],
    ["lazy.conformance"],
    ["lazy.__main__", "lazy"],
]


def level_of(module: str) -> int:
    best, best_len = None, -1
    for i, names in enumerate(LEVELS):
        for name in names:
            if (module == name or module.startswith(name + ".")) and len(name) > best_len:
                best, best_len = i, len(name)
    assert best is not None, f"{module} is not in the layer table; add it to LEVELS"
    return best


def module_name(path: pathlib.Path) -> str:
    rel = path.relative_to(ROOT.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: pathlib.Path) -> list[str]:
    tree = ast.parse(path.read_text())
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(n) for n in ast.walk(node))
    found = []
    pkg = module_name(path).rsplit(".", 1)[0] if path.name != "__init__.py" else module_name(path)
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg.rsplit(".", node.level - 1)[0] if node.level > 1 else pkg
                found.append(f"{base}.{node.module}" if node.module else base)
            elif node.module:
                found.append(node.module)
                found += [f"{node.module}.{a.name}" for a in node.names if node.module == "lazy"]
    return found


def test_imports_point_down_the_layer_table():
    bad = []
    for path in sorted(ROOT.rglob("*.py")):
        me = module_name(path)
        if me == "lazy" or me.startswith("lazy.conformance.test_"):
            continue
        for imp in imports_of(path):
            if imp.split(".")[0] != "lazy" or imp == "lazy":
                continue
            if level_of(imp) > level_of(me):
                bad.append(f"{me} (level {level_of(me)}) imports {imp} (level {level_of(imp)})")
    assert not bad, "imports pointing up the layer table:\n" + "\n".join(bad)


def test_core_never_imports_a_plugin():
    bad = []
    for path in sorted(ROOT.rglob("*.py")):
        for imp in imports_of(path):
            if imp.startswith("lazy_"):
                bad.append(f"{module_name(path)} imports plugin module {imp}")
    assert not bad, "\n".join(bad)
