"""The device registry `Device`: discovers device plugins (entry points in group `lazy.devices`), checks them, picks
the default device and opens devices by name. A broken plugin becomes a `PluginProblem`; it never hides the others,
and nothing a plugin's code does (an exception, `sys.exit()`) escapes into the host program: only Ctrl-C passes.

Nothing is discovered at import: the first question asked of `Device` reads the entry points (`_read_entry_points`),
imports pluggy and `lazy.hookspecs`, and then the plugins' entry modules; `import lazy` loads none of them.
"""

from __future__ import annotations

import functools
import importlib
import re
import reprlib
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from lazy.device import (
    HOST_MEMORY,
    Compiled,
    DeviceError,
    allocator_contract_problems,
    dlpack_contract_problems,
    opened_devices,
    set_device_opener,
    set_simple_tier_loader,
)
from lazy.helpers import DEBUG, DEVICE, PLUGINS, dedup
from lazy.record import field, record

if TYPE_CHECKING:
    import pluggy

    from lazy.hookspecs import FIRST_PARTY_DISTRIBUTIONS, DeviceSpec, InstanceSuffix

__all__ = ["Device", "DeviceSpec", "PluginInfo", "PluginProblem", "PluginFailure", "call_plugin", "ENTRY_POINT_GROUP",
           "FIRST_PARTY_DISTRIBUTIONS", "core_version"]  # fmt: skip

ENTRY_POINT_GROUP = "lazy.devices"
INSTALL_HINT = "install a device plugin (`pip install lazy-cpu`) or see `python -m lazy devices`"

T = TypeVar("T")
PluginStatus = Literal["ok", "error", "disabled"]
_NAME_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")  # a device name: [A-Z][A-Z0-9_]*


# ---------------------------------------------------------------------------------------------------------------------
# calling plugin code


@record(frozen=True)
class PluginFailure:
    """What plugin code raised instead of returning; `str()` reads as a predicate: "raised OSError: ...", "called
    sys.exit(3)"."""

    exc: BaseException

    def __str__(self) -> str:
        if isinstance(self.exc, SystemExit):
            return f"called sys.exit({'' if self.exc.code is None else repr(self.exc.code)})"
        return f"raised {type(self.exc).__name__}: {self.exc}"

    @property
    def traceback(self) -> str:
        import traceback  # when a plugin failed: `import lazy` need not load it

        return "".join(traceback.format_exception(type(self.exc), self.exc, self.exc.__traceback__))


def call_plugin(fn: Callable[..., T], *args: Any) -> T | PluginFailure:
    """`fn(*args)` for a function that a plugin supplied; whatever it raises comes back as a `PluginFailure`.

    The BaseExceptions `SystemExit` (a plugin calling `sys.exit()` must not end the host program) and `GeneratorExit`
    are caught too; `MemoryError` and `RecursionError` are Exceptions, so a plugin that runs out of either is reported
    like any other failure. Only `KeyboardInterrupt` passes: the user's Ctrl-C must still stop the program, whatever
    plugin code happened to be running.
    """
    try:
        return fn(*args)
    except KeyboardInterrupt:
        raise
    except BaseException as e:
        return PluginFailure(e)


@record(frozen=True)
class PluginProblem:
    """Something wrong with one plugin: it failed to import, its hook raised, a spec was refused, a name collided."""

    plugin: str  # entry-point name (or the name listed in LAZY_PLUGINS)
    reason: str
    detail: str = ""  # the traceback, when an exception was the cause
    distribution: str = ""  # tells apart two distributions that declare the same entry-point name

    def __str__(self) -> str:
        return f"plugin {self.plugin!r}: {self.reason}"


@record(frozen=True)
class PluginInfo:
    """One discovered plugin as `python -m lazy devices` lists it. `devices` holds the specs its `lazy_devices`
    returned and core accepted; `Device.probe(name, plugin=...)` says whether each is usable or lost a name clash."""

    name: str
    distribution: str
    version: str
    module: str
    devices: tuple[DeviceSpec, ...]
    status: PluginStatus
    reason: str = ""


def __getattr__(name: str) -> Any:
    """`DeviceSpec` and `FIRST_PARTY_DISTRIBUTIONS`, re-exported from `lazy.hookspecs`, which imports pluggy: it is
    imported when they are first asked for, not with `lazy`."""
    if name in ("DeviceSpec", "FIRST_PARTY_DISTRIBUTIONS"):
        from lazy import hookspecs

        return getattr(hookspecs, name)
    raise AttributeError(f"module 'lazy.plugins' has no attribute {name!r}")


def core_version() -> str:
    import importlib.metadata

    try:
        return importlib.metadata.version("lazy-core")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


# ---------------------------------------------------------------------------------------------------------------------
# device names


def _check_is_str(name: object) -> None:
    if not isinstance(name, str):
        raise TypeError(f"a device name is a str like 'CPU' or 'CL:1', not {type(name).__name__}")


def canonical_device_name(name: str, suffix: InstanceSuffix | None = None) -> str:
    """`"cpu"` -> `"CPU"`, `"CL:0"` -> `"CL"`, `"cl:01"` -> `"CL:1"`. `suffix` is the device's declared
    `DeviceSpec.instance_suffix`: an "ordinal" device refuses anything after the colon but a non-negative integer
    (`"CPU:abc"`, `"CPU:-1"`), a "path" device keeps it verbatim (`"DISK:/tmp/F"`, `"DISK:007"`). None, for a device
    no plugin provides (it fails when opened): digits are an ordinal, anything else is kept."""
    _check_is_str(name)
    base, sep, arg = name.partition(":")
    base = base.upper()
    if not ("A" <= base[:1] <= "Z" and _NAME_CHARS.issuperset(base)) or (sep and not arg):
        raise DeviceError(f"{name!r} is not a device name: expected NAME or NAME:ARG, e.g. 'CPU', 'CL:1', 'DISK:/f'")
    if not sep or suffix == "path":
        return f"{base}{sep}{arg}"
    if arg.isascii() and arg.isdigit():
        arg = str(int(arg))
        return base if arg == "0" else f"{base}:{arg}"
    if suffix == "ordinal":
        raise DeviceError(f"{name!r} is not a {base} device: {base} instances are '{base}' or '{base}:k' with k a "
                          f"non-negative integer (e.g. '{base}:1'), not {arg!r}")  # fmt: skip
    return f"{base}:{arg}"


def _base(canonical: str) -> str:
    return canonical.partition(":")[0]


# ---------------------------------------------------------------------------------------------------------------------
# what discovery finds


@record(frozen=True)
class _Candidate:
    """A plugin found but not yet loaded: an entry point, a core plugin in a checkout, or a `Device.register` object."""

    name: str
    distribution: str
    version: str
    module: str
    load: Callable[[], Any] = field(compare=False)

    @property
    def label(self) -> str:
        dist = f"{self.distribution} {self.version}".strip()
        return f"plugin {self.name!r}" + (f" from {dist}" if dist else "")

    @property
    def first_party(self) -> bool:
        import re

        from lazy.hookspecs import FIRST_PARTY_DISTRIBUTIONS

        return re.sub(r"[-_.]+", "-", self.distribution).lower() in FIRST_PARTY_DISTRIBUTIONS

    def problem(self, reason: str, failure: PluginFailure | None = None) -> PluginProblem:
        return PluginProblem(self.name, reason, failure.traceback if failure is not None else "", self.distribution)


@record(frozen=True)
class _Loaded:
    specs: tuple[DeviceSpec, ...]
    problems: tuple[PluginProblem, ...]


@record(frozen=True)
class _Clash:
    """A device name that several enabled plugins provide, and no single first-party one among them: nobody gets it."""

    reason: str
    specs: tuple[DeviceSpec, ...]


@record(frozen=True)
class _Index:
    """Everything derived from the loaded plugins under one LAZY_PLUGINS value; rebuilt when that value changes."""

    key: tuple[str, int]
    specs: dict[str, DeviceSpec]  # usable-by-name devices
    owners: dict[str, _Candidate]  # device name -> its plugin
    clashes: dict[str, _Clash]  # device names that exist but that nobody may use
    ignored: dict[tuple[str, str], str]  # (plugin, device) whose claim to the device name is not used -> why
    plugins: tuple[PluginInfo, ...]
    problems: tuple[PluginProblem, ...]
    canonical: dict[str, str] = field(default_factory=dict)  # names asked for -> canonical names, under these specs


def _read_entry_points() -> list[_Candidate]:
    """The entry points of `ENTRY_POINT_GROUP`, as importlib.metadata finds them: each distribution's
    `entry_points.txt` in the `*.dist-info` / `*.egg-info` folders along sys.path, the first distribution of a name
    winning. Read here directly where that is all there is to read (`_distributions`): importing importlib.metadata
    brings 67 modules (email, zipfile, socket, csv among them), 25-55 ms of a process's first device."""
    import os

    if (dists := _distributions()) is None:
        return _read_entry_points_importlib()
    found = []
    for folder, header in dists:
        dist, version = header.get("name", ""), header.get("version", "")
        for ep_name, value in _group_entries(os.path.join(folder, "entry_points.txt"), ENTRY_POINT_GROUP):
            found.append(_Candidate(ep_name, dist, version, value, functools.partial(_load_entry_point, value)))
    return found


def distribution_version(name: str) -> str | None:
    """The installed version of distribution `name`, or None: `importlib.metadata.version` without importing it where
    sys.path holds only folders (`_distributions`). For plugins' probes, which run when the default device is chosen."""
    if (dists := _distributions()) is None:
        import importlib.metadata

        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            return None
    key = _normalized(name)
    return next((h.get("version") for _, h in dists if _normalized(h.get("name", "")) == key), None)


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def _distributions() -> list[tuple[str, dict[str, str]]] | None:
    """(metadata folder, its Name and Version) of each distribution along sys.path, the first of a name winning, as
    importlib.metadata finds them; None where it would find more than folders hold: a zip on sys.path, or an import
    hook that lists distributions of its own (then importlib.metadata is asked)."""
    import os
    from importlib.machinery import PathFinder

    if any(hasattr(f, "find_distributions") and f is not PathFinder for f in sys.meta_path):
        return None
    if any(os.path.isfile(entry) for entry in sys.path if entry):
        return None
    stamp = tuple((entry, _mtime(entry or ".")) for entry in sys.path)  # a folder's entries change its time
    if _dist_cache and _dist_cache[0][0] == stamp:
        return _dist_cache[0][1]
    found, seen = [], set()
    for entry in sys.path:
        folder = entry or "."
        try:
            names = sorted(os.listdir(folder))
        except OSError:
            continue
        for name in names:
            if not name.lower().endswith((".dist-info", ".egg-info")):
                continue
            meta = os.path.join(folder, name)
            header = _metadata_header(meta)
            header.setdefault("name", name.rsplit(".", 1)[0].split("-")[0])
            if (key := _normalized(header["name"])) in seen:  # an earlier entry of sys.path holds this distribution
                continue
            seen.add(key)
            found.append((meta, header))
    _dist_cache[:] = [(stamp, found)]
    return found


_dist_cache: list[tuple[tuple[tuple[str, int], ...], list[tuple[str, dict[str, str]]]]] = []


def _mtime(folder: str) -> int:
    import os

    try:
        return os.stat(folder).st_mtime_ns
    except OSError:
        return -1


def _read_entry_points_importlib() -> list[_Candidate]:
    import importlib.metadata

    found = []
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        dist = getattr(ep, "dist", None)
        dist_name = (getattr(dist, "name", None) or dist.metadata["Name"] or "") if dist is not None else ""
        found.append(_Candidate(ep.name, dist_name, dist.version if dist is not None else "", ep.value, ep.load))
    return found


def _metadata_header(folder: str) -> dict[str, str]:
    """Name and Version from a distribution's METADATA (PKG-INFO for an egg-info): the first lines of its header."""
    import os

    out: dict[str, str] = {}
    for file in ("METADATA", "PKG-INFO"):
        try:
            with open(os.path.join(folder, file), encoding="utf-8", errors="replace") as f:
                for line in f:
                    if not line.strip():
                        break  # the header ends at the first empty line
                    key, sep, value = line.partition(":")
                    if sep and key.strip().lower() in ("name", "version"):
                        out.setdefault(key.strip().lower(), value.strip())
                    if len(out) == 2:
                        break
            return out
        except OSError:
            continue
    return out


def _group_entries(path: str, group: str) -> list[tuple[str, str]]:
    """The (name, value) entries of `[group]` in an entry_points.txt (an ini file; # and ; start comments)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    entries, section = [], None
    for raw in lines:
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1].strip()
        elif section == group and "=" in line:
            name, _, value = line.partition("=")
            entries.append((name.strip(), value.strip()))
    return entries


def _load_entry_point(value: str) -> Any:
    """What an entry point's value names: `module` or `module:attr.attr`, extras in brackets ignored."""
    module, _, attrs = value.split("[", 1)[0].partition(":")
    obj = importlib.import_module(module.strip())
    for attr in filter(None, attrs.strip().split(".")):
        obj = getattr(obj, attr)
    return obj


def _entry_point_candidates() -> tuple[list[_Candidate], list[PluginProblem]]:
    found = call_plugin(_read_entry_points)  # an installed distribution's metadata is third-party code's data too
    if isinstance(found, PluginFailure):
        reason = f"reading the entry points of group {ENTRY_POINT_GROUP!r} {found}"
        return [], [PluginProblem("<entry points>", reason, found.traceback)]
    return found, []


def _parse_allow_list(value: str) -> list[str] | None:
    names = [n.strip() for n in str(value or "").split(",") if n.strip()]
    return names or None


def _settle_clash(what: str, parties: list[_Candidate], name_of: Callable[[_Candidate], str]
                  ) -> tuple[_Candidate | None, str]:  # fmt: skip
    """Who keeps a name that several plugins claim (`what`: "device CPU", "plugin name 'cpu'"), and the report naming
    every party (`name_of` each): the single first-party claimant keeps it; with none (or several), nobody does, since
    any other choice (install order, alphabetical) would hand the name to a plugin the user may never have meant."""
    first_party = [p for p in parties if p.first_party]
    winner = first_party[0] if len(first_party) == 1 else None
    who = " and ".join(map(name_of, parties))
    if winner is not None:
        return winner, f"{what} is claimed by {who}; {name_of(winner)} keeps it: a clash goes to the first-party plugin"
    why = "several of them are first-party" if first_party else "none of them is first-party, which would keep it"
    return None, f"{what} is claimed by {who}; none of them gets it: {why}"


def _distribution_of(cand: _Candidate) -> str:
    """Which distribution declared an entry point, e.g. "lazy-cpu 0.1 (lazy_cpu)", for a clash over its name."""
    return " ".join(filter(None, (cand.distribution or "an unnamed distribution", cand.version, f"({cand.module})")))


def _is_probe_answer(answer: object) -> bool:
    return isinstance(answer, tuple) and len(answer) == 2 and type(answer[0]) is bool and isinstance(answer[1], str)


# ---------------------------------------------------------------------------------------------------------------------
# the registry


class _DeviceRegistry:
    """The process-wide device registry, `lazy.Device`. See the module docstring."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._clear(discover=True)

    def _clear(self, discover: bool) -> None:
        self._discover = discover
        self._registered: list[_Candidate] = []
        self._found: tuple[list[_Candidate], list[PluginProblem]] | None = None  # entry points, read on first use
        self._loaded: dict[str, _Loaded] = {}
        self._plugin_manager: pluggy.PluginManager | None = None  # made when the first plugin is loaded
        self._generation = 0
        self._index: _Index | None = None
        self._probes: dict[tuple[str, str], tuple[bool, str]] = {}
        self._auto_default: tuple[tuple[str, int], str | None, str] | None = None
        self._late_problems: list[PluginProblem] = []

    @property
    def _pm(self) -> pluggy.PluginManager:
        """pluggy's manager, with lazy's hook specifications."""
        with self._lock:
            if self._plugin_manager is None:
                import pluggy

                from lazy import hookspecs

                self._plugin_manager = pluggy.PluginManager(hookspecs.PROJECT_NAME)
                self._plugin_manager.add_hookspecs(hookspecs)
            return self._plugin_manager

    # ---- public API ----------------------------------------------------------------------------------------------

    def canonicalize(self, name: str) -> str:
        """The canonical instance name: upper-case device, ":0" dropped, other ordinals and path arguments kept.
        Raises DeviceError, naming the valid forms, for a suffix the device does not take (`"CPU:abc"`, `"CPU:-1"`:
        see `DeviceSpec.instance_suffix`)."""
        return self._canonical(name, self._state())

    def __getitem__(self, name: str) -> Compiled:
        """The opened device `name` ("CPU", "cl:1", "DISK:/tmp/f"), opened on first use and cached."""
        index = self._state()
        canon = self._canonical(name, index)
        if (dev := opened_devices.get(canon)) is not None and _base(canon) in index.specs:
            return dev
        with self._lock:
            spec, owner = self._resolve(canon, index)
            if (dev := opened_devices.get(canon)) is not None:
                return dev
            ok, reason = self._probe_spec(owner, spec)
            if not ok:
                raise DeviceError(f"device {canon} ({owner.label}) is not usable: {reason}")
            opened = call_plugin(spec.open, canon)
            if isinstance(opened, PluginFailure):
                msg = f"device {canon} ({owner.label}) failed to open: open({canon!r}) {opened}"
                raise DeviceError(msg) from opened.exc
            if not isinstance(opened, Compiled):
                got = type(opened).__name__
                raise DeviceError(f"device {canon} ({owner.label}): open({canon!r}) returned {got}, not a "
                                  f"lazy.device.Compiled; this is a bug in the plugin")  # fmt: skip
            self._check_contract(canon, owner, opened, spec.dlpack_device_types)
            opened.host_memory = tuple(spec.dlpack_device_types)[:1] == (HOST_MEMORY,)
            opened_devices[canon] = opened
            if DEBUG >= 1:
                print(f"lazy: opened {canon} ({owner.label})", file=sys.stderr)
            return opened

    def _check_contract(self, canon: str, owner: _Candidate, dev: Compiled, dlpack_types: tuple[int, ...] = ()) -> None:
        """Refuse a device that breaks the plugin contract (an allocator feature declared but not implemented or the
        other way round, a queue without a handler for a command core sends, DLPack memory declared without the
        allocator features that serve it), naming each requirement and its fix; the device is closed again and the
        refusal is a problem of its plugin."""
        from lazy.hcq import queue_contract_problems  # with the first device: `import lazy` need not load HCQ

        problems = [
            *allocator_contract_problems(dev.allocator),
            *queue_contract_problems(dev),
            *dlpack_contract_problems(dlpack_types, dev.allocator),
        ]
        if not problems:
            return
        call_plugin(dev.close)
        problem = owner.problem(f"device {canon} breaks the plugin contract: " + "; ".join(problems))
        self._late_problems.append(problem)
        raise DeviceError(f"device {canon} ({owner.label}) breaks the plugin contract, so it is not opened:\n"
                          + "\n".join(f"  - {p}" for p in problems))  # fmt: skip

    @property
    def DEFAULT(self) -> str:  # noqa: N802 (tinygrad's spelling, which users know)
        """`LAZY_DEVICE` when set (it must exist and be usable: no fallback), else the usable device with the highest
        priority among those that allow being the default. Raises DeviceError saying why when there is none."""
        device, why = self.explain_default()
        if device is None:
            raise DeviceError(why)
        return device

    def explain_default(self) -> tuple[str | None, str]:
        """(the default device, why it is the default), or (None, why there is none and what to do). When devices of
        higher priority are unusable, the reason names each and why: the default never changes without a word."""
        index = self._state()
        if requested := str(DEVICE.value or "").strip():
            return self._requested_default(requested, index)
        cached = self._auto_default
        if cached is None or cached[0] != index.key:
            with self._lock:
                cached = self._auto_default = (index.key, *self._choose_default(index))
        return cached[1], cached[2]

    def specs(self) -> dict[str, DeviceSpec]:
        """Every device that can be asked for by name (enabled and not lost to a clash), by name."""
        return dict(self._state().specs)

    def plugins(self) -> list[PluginInfo]:
        """Every discovered plugin, including the disabled and broken ones, in discovery order."""
        return list(self._state().plugins)

    def problems(self) -> list[PluginProblem]:
        """Everything that went wrong while discovering and calling plugins (disabled plugins are not problems)."""
        return dedup([*self._state().problems, *self._late_problems])

    def probe(self, name: str, plugin: str | None = None) -> tuple[bool, str]:
        """(usable, reason) for device `name`, from its plugin's probe (run once per process). Unknown: DeviceError.
        `plugin`: the device as that plugin provides it, which is (False, why) when its claim lost a name clash."""
        index = self._state()
        base = _base(self._canonical(name, index))
        if plugin is not None and (why := index.ignored.get((plugin, base))) is not None:
            return False, why
        if (clash := index.clashes.get(base)) is not None:
            return False, clash.reason
        spec, owner = self._resolve(base, index)
        return self._probe_spec(owner, spec)

    def opened(self, name: str) -> Compiled | None:
        """The device `name` if it has been opened, else None (never opens it)."""
        return opened_devices.get(self.canonicalize(name))

    def known_failures(self, device: str) -> list[str]:
        """Conformance test ids the enabled plugins expect to fail on `device` (the `lazy_known_failures` hook)."""
        canon = self.canonicalize(device)
        enabled = {p.name for p in self._state().plugins if p.status != "disabled"}
        failures: list[str] = []
        for impl in self._pm.hook.lazy_known_failures.get_hookimpls():
            if impl.plugin_name not in enabled or impl.hookwrapper or impl.wrapper:
                continue
            result = call_plugin(impl.function, *[{"device": canon}[arg] for arg in impl.argnames])
            if isinstance(result, PluginFailure):
                reason = f"lazy_known_failures({canon!r}) {result}"
                self._late_problems.append(PluginProblem(impl.plugin_name, reason, result.traceback))
                continue
            if not isinstance(result, (list, tuple)) or not all(isinstance(x, str) for x in result):
                reason = f"lazy_known_failures({canon!r}) returned {reprlib.repr(result)}; expected a list of test ids"
                self._late_problems.append(PluginProblem(impl.plugin_name, reason))
                continue
            failures.extend(result)
        return dedup(failures)

    # ---- test support --------------------------------------------------------------------------------------------

    def register(self, plugin: object, name: str, dist: str = "test", version: str = "0") -> None:
        """Add an in-process plugin (a module or object with `@hookimpl` functions) as if an entry point named `name`
        of distribution `dist` declared it. For tests and notebooks; `reset()` forgets it."""
        with self._lock:
            if any(c.name == name for c in self._registered):
                raise ValueError(f"a plugin named {name!r} is already registered; call Device.reset() first")
            module = getattr(plugin, "__name__", None) or f"{type(plugin).__module__}.{type(plugin).__qualname__}"
            self._registered.append(_Candidate(name, dist, version, module, lambda: plugin))
            self._generation += 1

    def reset(self, discover: bool = True) -> None:
        """Close opened devices and forget every plugin, spec, probe and problem; the next use discovers again.
        `discover=False`: from then on only `register`ed plugins exist (hermetic tests)."""
        with self._lock:
            for canon, dev in list(opened_devices.items()):
                if callable(close := getattr(dev, "close", None)):
                    # a device that fails to close (or exits) must not keep the others open
                    if isinstance(failure := call_plugin(close), PluginFailure) and DEBUG >= 1:
                        print(f"lazy: closing {canon}: close() {failure}", file=sys.stderr)
                del opened_devices[canon]
                if (allocator := getattr(dev, "allocator", None)) is not None:
                    allocator.closed = True  # its buffers are gone (`lazy.device.Buffer.opaque` says so)
            self._clear(discover)

    # ---- discovery -----------------------------------------------------------------------------------------------

    def _state(self) -> _Index:
        key = (str(PLUGINS.value or ""), self._generation)
        index = self._index
        if index is not None and index.key == key:
            return index
        with self._lock:
            if self._index is None or self._index.key != key:
                self._index = self._build_index(key)
            return self._index

    def _candidates(self) -> tuple[list[tuple[_Candidate, PluginProblem | None]], list[PluginProblem]]:
        """Every plugin found, in discovery order, each with what keeps it from loading: its entry-point name is
        declared by another distribution too, and `_settle_clash` gave the name to another (or to nobody)."""
        if self._found is None:
            self._found = _entry_point_candidates() if self._discover else ([], [])
        found, problems = self._found
        everyone = [*found, *self._registered]
        by_name: dict[str, list[_Candidate]] = {}
        for cand in everyone:
            by_name.setdefault(cand.name, []).append(cand)
        refused: dict[int, PluginProblem] = {}
        for name, parties in by_name.items():
            if len(parties) < 2:
                continue
            winner, reason = _settle_clash(f"plugin name {name!r}", parties, _distribution_of)
            reason += "; the other one is not loaded" if winner is not None else ""
            reason += f": uninstall all but one (an entry-point name in group {ENTRY_POINT_GROUP} must be unique)"
            for cand in parties:
                if cand is not winner:
                    refused[id(cand)] = cand.problem(reason)
        return [(cand, refused.get(id(cand))) for cand in everyone], list(problems)

    def _build_index(self, key: tuple[str, int]) -> _Index:
        allow = _parse_allow_list(key[0])
        allowed = {n.lower() for n in allow} if allow is not None else None
        found, problems = self._candidates()
        in_list = [(cand, refusal) for cand, refusal in found if allowed is None or cand.name.lower() in allowed]
        problems.extend(refusal for _, refusal in in_list if refusal is not None)
        enabled = [cand for cand, refusal in in_list if refusal is None]
        loaded = {c.name: self._load(c) for c in enabled}
        for cand in enabled:
            problems.extend(loaded[cand.name].problems)
        specs, owners, clashes, ignored = self._settle_devices(enabled, loaded, problems)
        installed = {cand.name.lower() for cand, _ in found}
        for name in allow or []:
            if name.lower() not in installed:
                names = ", ".join(sorted({cand.name for cand, _ in found})) or "none"
                problems.append(PluginProblem(name, f"listed in LAZY_PLUGINS but not installed (installed: {names})"))
        problems = dedup(problems)
        infos = self._infos(found, {c.name for c, _ in in_list}, loaded, problems, key[0])
        index = _Index(key, specs, owners, clashes, ignored, infos, tuple(problems))
        if DEBUG >= 1:
            for problem in index.problems:
                print(f"lazy: {problem}", file=sys.stderr)
        return index

    def _settle_devices(self, enabled: list[_Candidate], loaded: dict[str, _Loaded], problems: list[PluginProblem]
                        ) -> tuple[dict[str, DeviceSpec], dict[str, _Candidate], dict[str, _Clash],
                                   dict[tuple[str, str], str]]:  # fmt: skip
        """Who provides each device name; a name several plugins provide goes to `_settle_clash`'s choice, and every
        claim that is not used becomes a problem of its plugin."""
        by_device: dict[str, list[tuple[_Candidate, DeviceSpec]]] = {}
        for cand in enabled:
            for spec in loaded[cand.name].specs:
                by_device.setdefault(spec.name, []).append((cand, spec))
        specs, owners, clashes, ignored = {}, {}, {}, {}
        for device, claims in by_device.items():
            winner: _Candidate | None = claims[0][0]
            if len(claims) > 1:
                winner, reason = _settle_clash(f"device {device}", [cand for cand, _ in claims], lambda c: c.label)
                if winner is None:
                    reason += "; uninstall all but one, or choose one with LAZY_PLUGINS"
                    clashes[device] = _Clash(reason, tuple(spec for _, spec in claims))
                else:
                    reason += f"; to use another one, leave {winner.name!r} out of LAZY_PLUGINS"
                for cand, _ in claims:
                    if cand is not winner:
                        ignored[(cand.name, device)] = reason
                        problems.append(cand.problem(reason))
            if winner is not None:
                owners[device] = winner
                specs[device] = next(spec for cand, spec in claims if cand is winner)
        return specs, owners, clashes, ignored

    def _infos(self, found: list[tuple[_Candidate, PluginProblem | None]], in_list: set[str],
               loaded: dict[str, _Loaded], problems: list[PluginProblem], allow_list: str
               ) -> tuple[PluginInfo, ...]:  # fmt: skip
        infos = []
        for cand, refusal in found:
            info = functools.partial(PluginInfo, cand.name, cand.distribution, cand.version, cand.module)
            if cand.name not in in_list:
                infos.append(info((), "disabled", f"disabled by LAZY_PLUGINS={allow_list}"))
            elif refusal is not None:
                infos.append(info((), "error", refusal.reason))
            else:
                mine = [p.reason for p in problems if (p.plugin, p.distribution) == (cand.name, cand.distribution)]
                infos.append(info(loaded[cand.name].specs, "error" if mine else "ok", "; ".join(mine)))
        listed = {cand.name for cand, _ in found}
        for problem in problems:  # LAZY_PLUGINS names that are not installed
            if problem.plugin not in listed:
                listed.add(problem.plugin)
                reasons = "; ".join(p.reason for p in problems if p.plugin == problem.plugin)
                infos.append(PluginInfo(problem.plugin, "", "", "", (), "error", reasons))
        return tuple(infos)

    def _load(self, cand: _Candidate) -> _Loaded:
        """Import a plugin and call its `lazy_devices` (once per reset); every failure becomes a PluginProblem."""
        if (done := self._loaded.get(cand.name)) is not None:
            return done

        def load_and_register() -> object:  # the import and pluggy's look at the plugin object both run its code
            plugin = cand.load()
            self._pm.register(plugin, name=cand.name)
            return plugin

        plugin = call_plugin(load_and_register)
        from lazy.hookspecs import PLUGIN_API_VERSION

        if isinstance(plugin, PluginFailure):
            done = _Loaded((), (cand.problem(f"loading {cand.module} {plugin}", plugin),))
        else:
            unknown = [hc.name for hc in self._pm.get_hookcallers(plugin) or [] if not hc.has_spec()]
            problems = [cand.problem(f"implements hook {name!r}, which lazy-core's plugin API "
                                     f"{PLUGIN_API_VERSION[0]}.{PLUGIN_API_VERSION[1]} does not define (a typo?)")
                        for name in unknown]  # fmt: skip
            specs = self._call_lazy_devices(cand, problems)
            done = _Loaded(tuple(specs), tuple(problems))
        self._loaded[cand.name] = done
        return done

    def _call_lazy_devices(self, cand: _Candidate, problems: list[PluginProblem]) -> list[DeviceSpec]:
        from lazy.hookspecs import DeviceSpec, api_incompatibility

        specs: list[DeviceSpec] = []
        for impl in self._pm.hook.lazy_devices.get_hookimpls():
            if impl.plugin_name != cand.name or impl.hookwrapper or impl.wrapper:
                continue
            result = call_plugin(impl.function)  # DeviceSpec's own checks run here, inside the plugin's hook
            if isinstance(result, PluginFailure):
                problems.append(cand.problem(f"lazy_devices() {result}", result))
                continue
            if not isinstance(result, (list, tuple)):
                problems.append(cand.problem(f"lazy_devices() returned {reprlib.repr(result)}; expected "
                                             f"list[DeviceSpec]"))  # fmt: skip
                continue
            for spec in result:
                if not isinstance(spec, DeviceSpec):
                    problems.append(cand.problem(f"lazy_devices() returned {reprlib.repr(spec)}, not a DeviceSpec"))
                elif (why := api_incompatibility(spec.api_version)) is not None:
                    problems.append(cand.problem(f"device {spec.name} refused: {why}"))
                elif any(s.name == spec.name for s in specs):
                    problems.append(cand.problem(f"device {spec.name} listed twice; the second is ignored"))
                else:
                    specs.append(spec)
        return specs

    # ---- lookups -------------------------------------------------------------------------------------------------

    def _canonical(self, name: str, index: _Index) -> str:
        if isinstance(name, str) and (canon := index.canonical.get(name)) is not None:
            return canon  # (every Buffer and Tensor asks: keep the hit to one dict lookup)
        _check_is_str(name)
        spec = index.specs.get(name.partition(":")[0].upper())
        canon = canonical_device_name(name, spec.instance_suffix if spec is not None else None)
        if len(index.canonical) < 4096:  # bounded: every DISK file is a name of its own
            index.canonical[name] = canon
        return canon

    def _resolve(self, canon: str, index: _Index) -> tuple[DeviceSpec, _Candidate]:
        base = _base(canon)
        if (clash := index.clashes.get(base)) is not None:
            raise DeviceError(f"device {canon} cannot be used: {clash.reason}")
        if (spec := index.specs.get(base)) is None:
            raise self._unknown(canon, index)
        return spec, index.owners[base]

    def _unknown(self, canon: str, index: _Index) -> DeviceError:
        names = sorted([*index.specs, *index.clashes])
        if names:
            msg = f"unknown device {canon!r}; devices: {', '.join(names)}"
        else:
            msg = f"unknown device {canon!r}: no device plugin is installed; {INSTALL_HINT}"
        if disabled := [p.name for p in index.plugins if p.status == "disabled"]:
            msg += f"\nplugins disabled by LAZY_PLUGINS={PLUGINS.value}: {', '.join(disabled)}"
        if problems := self.problems():
            msg += "\nplugin problems:\n" + "\n".join(f"  {p}" for p in problems)
        return DeviceError(msg)

    def _probe_spec(self, owner: _Candidate, spec: DeviceSpec) -> tuple[bool, str]:
        """The device's probe, once per process. An answer that is not exactly (bool, str), an exception or a
        `sys.exit()` makes the device unusable and is a problem of its plugin (a bug, unlike a plain `(False, why)`)."""
        key = (owner.name, spec.name)
        if (cached := self._probes.get(key)) is not None:
            return cached
        answer = call_plugin(spec.probe)
        if isinstance(answer, PluginFailure):
            verdict, failure = (False, f"probe() {answer}"), answer
        elif not _is_probe_answer(answer):
            verdict, failure = (False, f"probe() returned {reprlib.repr(answer)}; expected (usable: bool, reason: "
                                       f"str), e.g. (False, 'no driver found')"), None  # fmt: skip
        else:
            self._probes[key] = verdict = (answer[0], str(answer[1]))
            return verdict
        problem = owner.problem(f"device {spec.name}: {verdict[1]}", failure)
        self._late_problems.append(problem)
        if DEBUG >= 1:
            print(f"lazy: {problem}", file=sys.stderr)
        self._probes[key] = verdict
        return verdict

    def _requested_default(self, requested: str, index: _Index) -> tuple[str | None, str]:
        try:
            canon = self._canonical(requested, index)
            spec, owner = self._resolve(canon, index)
        except DeviceError as e:
            return None, f"LAZY_DEVICE={requested}: {e}"
        ok, reason = self._probe_spec(owner, spec)
        if not ok:
            return None, (f"LAZY_DEVICE={requested} is not usable ({owner.label}): {reason}; pick another device or "
                          f"unset LAZY_DEVICE (see `python -m lazy devices`)")  # fmt: skip
        return canon, f"LAZY_DEVICE={requested}"

    def _choose_default(self, index: _Index) -> tuple[str | None, str]:
        """(device, why): the highest-priority usable device that may be the default, with every device of higher
        priority that was passed over and why; or (None, what to do). At LAZY_DEBUG=1 the choice is printed."""
        candidates = sorted((s for s in index.specs.values() if s.default_ok), key=lambda s: (-s.priority, s.name))
        passed_over = []  # (priority, what and why) of each device the default may not be
        for name, clash in index.clashes.items():
            if priorities := [s.priority for s in clash.specs if s.default_ok]:
                passed_over.append((max(priorities), f"{name} (priority {max(priorities)}): {clash.reason}"))
        for spec in candidates:
            owner = index.owners[spec.name]
            ok, reason = self._probe_spec(owner, spec)
            if ok:
                why = f"the highest-priority usable device, priority {spec.priority}"
                if over := [text for priority, text in sorted(passed_over, key=lambda p: -p[0])
                            if priority >= spec.priority]:  # fmt: skip
                    why += "; chosen over unusable " + "; ".join(over)
                if DEBUG >= 1:
                    print(f"lazy: default device {spec.name} ({owner.label}): {why}", file=sys.stderr)
                return spec.name, why
            passed_over.append((spec.priority, f"{spec.name} (priority {spec.priority}, {owner.label}): {reason}"))
        if passed_over:
            msg = "no usable default device; installed devices are unusable: " + "; ".join(t for _, t in passed_over)
        elif disabled := [p.name for p in index.plugins if p.status == "disabled"]:
            msg = f"no usable default device: the installed plugins {', '.join(disabled)} are disabled by LAZY_PLUGINS"
        else:
            msg = "no usable default device: no device plugin is installed"
        if others := sorted(s.name for s in index.specs.values() if not s.default_ok):
            msg += f" ({', '.join(others)} must be asked for by name, e.g. LAZY_DEVICE={others[0]})"
        return None, f"{msg}; {INSTALL_HINT}"


Device = _DeviceRegistry()
set_device_opener(Device.__getitem__)
set_simple_tier_loader(lambda: importlib.import_module("lazy.hcq"))  # installs core's synchronous queues
