"""The device registry `Device`: discovers device plugins (entry points in group `lazy.devices`), checks them, picks
the default device and opens devices by name. A broken plugin becomes a `PluginProblem`; it never hides the others.

Nothing is discovered at import: the first question asked of `Device` imports the plugins' entry modules.
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import importlib.util
import re
import sys
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import pluggy

from lazy import hookspecs
from lazy.device import Compiled, DeviceError, opened_devices, set_device_opener
from lazy.hcq import adapt_simple_tier
from lazy.helpers import DEBUG, DEVICE, PLUGINS, dedup
from lazy.hookspecs import PLUGIN_API_VERSION, PROJECT_NAME, DeviceSpec, api_incompatibility

__all__ = ["Device", "DeviceSpec", "PluginInfo", "PluginProblem", "ENTRY_POINT_GROUP", "core_version"]

ENTRY_POINT_GROUP = "lazy.devices"
INSTALL_HINT = "install a device plugin (`pip install lazy-cpu`) or see `python -m lazy devices`"


PluginStatus = Literal["ok", "error", "disabled"]
_DEVICE_NAME = re.compile(r"[A-Z][A-Z0-9_]*")


@dataclass(frozen=True)
class PluginProblem:
    """Something wrong with one plugin: it failed to import, its hook raised, a spec was refused, a name collided."""

    plugin: str  # entry-point name (or the name listed in LAZY_PLUGINS)
    reason: str
    detail: str = ""  # the traceback, when an exception was the cause

    def __str__(self) -> str:
        return f"plugin {self.plugin!r}: {self.reason}"


@dataclass(frozen=True)
class PluginInfo:
    """One discovered plugin as `python -m lazy devices` lists it. `devices` holds the specs it was allowed to add."""

    name: str
    distribution: str
    version: str
    module: str
    devices: tuple[DeviceSpec, ...]
    status: PluginStatus
    reason: str = ""


def core_version() -> str:
    try:
        return importlib.metadata.version("lazy-core")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


@functools.lru_cache(maxsize=4096)
def canonical_device_name(name: str) -> str:
    """`"cpu"` -> `"CPU"`, `"CL:0"` -> `"CL"`, `"cl:01"` -> `"CL:1"`; a non-numeric argument (`"DISK:/tmp/F"`) is
    kept verbatim."""
    if not isinstance(name, str):
        raise TypeError(f"a device name is a str like 'CPU' or 'CL:1', not {type(name).__name__}")
    base, sep, arg = name.partition(":")
    base = base.upper()
    if not _DEVICE_NAME.fullmatch(base) or (sep and not arg):
        raise DeviceError(f"{name!r} is not a device name: expected NAME or NAME:ARG, e.g. 'CPU', 'CL:1', 'DISK:/f'")
    if arg.isascii() and arg.isdigit():
        arg = str(int(arg))
        return base if arg == "0" else f"{base}:{arg}"
    return f"{base}{sep}{arg}"


def _base(canonical: str) -> str:
    return canonical.partition(":")[0]


def _problem(plugin: str, what: str, exc: BaseException) -> PluginProblem:
    detail = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return PluginProblem(plugin, f"{what}: {type(exc).__name__}: {exc}", detail)


@dataclass(frozen=True)
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


@dataclass(frozen=True)
class _Loaded:
    specs: tuple[DeviceSpec, ...]
    problems: tuple[PluginProblem, ...]


@dataclass(frozen=True)
class _Index:
    """Everything derived from the loaded plugins under one LAZY_PLUGINS value; rebuilt when that value changes."""

    key: tuple[str, int]
    specs: dict[str, DeviceSpec]  # usable-by-name devices
    owners: dict[str, _Candidate]  # device name -> its plugin
    unusable: dict[str, str]  # device names that exist but may not be used (a collision) -> why
    plugins: tuple[PluginInfo, ...]
    problems: tuple[PluginProblem, ...]


def _entry_point_candidates() -> tuple[list[_Candidate], list[PluginProblem]]:
    try:
        eps = list(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP))
    except Exception as e:  # broken metadata of some unrelated distribution
        return [], [_problem("<entry points>", f"reading entry points of group {ENTRY_POINT_GROUP!r} failed", e)]
    found = []
    for ep in eps:
        dist = getattr(ep, "dist", None)
        dist_name = (getattr(dist, "name", None) or dist.metadata["Name"] or "") if dist is not None else ""
        found.append(_Candidate(ep.name, dist_name, dist.version if dist is not None else "", ep.value, ep.load))
    return found, []


def _parse_allow_list(value: str) -> list[str] | None:
    names = [n.strip() for n in str(value or "").split(",") if n.strip()]
    return names or None


class _DeviceRegistry:
    """The process-wide device registry, `lazy.Device`. See the module docstring."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._opened: dict[str, Compiled] = {}
        self._clear(discover=True)

    def _clear(self, discover: bool) -> None:
        self._discover = discover
        self._registered: list[_Candidate] = []
        self._found: tuple[list[_Candidate], list[PluginProblem]] | None = None  # entry points, read on first use
        self._loaded: dict[str, _Loaded] = {}
        self._pm = pluggy.PluginManager(PROJECT_NAME)
        self._pm.add_hookspecs(hookspecs)
        self._generation = 0
        self._index: _Index | None = None
        self._probes: dict[tuple[str, str], tuple[bool, str]] = {}
        self._auto_default: tuple[tuple[str, int], str | None, str] | None = None
        self._late_problems: list[PluginProblem] = []

    # ---- public API ----------------------------------------------------------------------------------------------

    def canonicalize(self, name: str) -> str:
        """The canonical instance name: upper-case device, ":0" dropped, other ordinals and path arguments kept."""
        return canonical_device_name(name)

    def __getitem__(self, name: str) -> Compiled:
        """The opened device `name` ("CPU", "cl:1", "DISK:/tmp/f"), opened on first use and cached."""
        canon = canonical_device_name(name)
        index = self._state()
        if (dev := self._opened.get(canon)) is not None and _base(canon) in index.specs:
            return dev
        with self._lock:
            spec, owner = self._resolve(canon, index)
            if (dev := self._opened.get(canon)) is not None:
                return dev
            ok, reason = self._probe_spec(owner, spec)
            if not ok:
                raise DeviceError(f"device {canon} ({owner.label}) is not usable: {reason}")
            try:
                dev = spec.open(canon)
            except Exception as e:
                raise DeviceError(f"device {canon} ({owner.label}) failed to open: {type(e).__name__}: {e}") from e
            if not isinstance(dev, Compiled):
                raise DeviceError(f"device {canon} ({owner.label}): open({canon!r}) returned {type(dev).__name__}, "
                                  f"not a lazy.device.Compiled; this is a bug in the plugin")  # fmt: skip
            adapt_simple_tier(dev)  # simple-tier devices get core's synchronous queues
            self._opened[canon] = opened_devices[canon] = dev
            if DEBUG >= 1:
                print(f"lazy: opened {canon} ({owner.label})", file=sys.stderr)
            return dev

    @property
    def DEFAULT(self) -> str:  # noqa: N802 (tinygrad's spelling, which users know)
        """`LAZY_DEVICE` when set (it must exist and be usable: no fallback), else the usable device with the highest
        priority among those that allow being the default. Raises DeviceError saying why when there is none."""
        index = self._state()
        requested = str(DEVICE.value or "").strip()
        if requested:
            try:
                canon = canonical_device_name(requested)
                spec, owner = self._resolve(canon, index)
            except DeviceError as e:
                raise DeviceError(f"LAZY_DEVICE={requested}: {e}") from None
            ok, reason = self._probe_spec(owner, spec)
            if not ok:
                raise DeviceError(f"LAZY_DEVICE={requested} is not usable ({owner.label}): {reason}; pick another "
                                  f"device or unset LAZY_DEVICE (see `python -m lazy devices`)")  # fmt: skip
            return canon
        cached = self._auto_default
        if cached is None or cached[0] != index.key:
            with self._lock:
                cached = self._auto_default = (index.key, *self._choose_default(index))
        if cached[1] is None:
            raise DeviceError(cached[2])
        return cached[1]

    def specs(self) -> dict[str, DeviceSpec]:
        """Every device that can be asked for by name (enabled and not colliding), by name."""
        return dict(self._state().specs)

    def plugins(self) -> list[PluginInfo]:
        """Every discovered plugin, including the disabled and broken ones, in discovery order."""
        return list(self._state().plugins)

    def problems(self) -> list[PluginProblem]:
        """Everything that went wrong while discovering and calling plugins (disabled plugins are not problems)."""
        return [*self._state().problems, *self._late_problems]

    def probe(self, name: str) -> tuple[bool, str]:
        """(usable, reason) for device `name`, from its plugin's probe (run once per process). Unknown: DeviceError."""
        canon = canonical_device_name(name)
        index = self._state()
        if (why := index.unusable.get(_base(canon))) is not None:
            return False, why
        spec, owner = self._resolve(canon, index)
        return self._probe_spec(owner, spec)

    def opened(self, name: str) -> Compiled | None:
        """The device `name` if it has been opened, else None (never opens it)."""
        return self._opened.get(canonical_device_name(name))

    def known_failures(self, device: str) -> list[str]:
        """Conformance test ids the enabled plugins expect to fail on `device` (the `lazy_known_failures` hook)."""
        canon = canonical_device_name(device)
        enabled = {p.name for p in self._state().plugins if p.status != "disabled"}
        failures: list[str] = []
        for impl in self._pm.hook.lazy_known_failures.get_hookimpls():
            if impl.plugin_name not in enabled or impl.hookwrapper or impl.wrapper:
                continue
            try:
                result = impl.function(*[{"device": canon}[arg] for arg in impl.argnames])
            except Exception as e:
                self._late_problems.append(_problem(impl.plugin_name, f"lazy_known_failures({canon!r}) raised", e))
                continue
            if not isinstance(result, (list, tuple)) or not all(isinstance(x, str) for x in result):
                reason = f"lazy_known_failures({canon!r}) returned {result!r}; expected a list of test ids (str)"
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
            for canon, dev in list(self._opened.items()):
                try:
                    if callable(close := getattr(dev, "close", None)):
                        close()
                except Exception as e:  # a device that fails to close must not keep the others open
                    if DEBUG >= 1:
                        print(f"lazy: closing {canon} failed: {type(e).__name__}: {e}", file=sys.stderr)
                if opened_devices.get(canon) is dev:
                    del opened_devices[canon]
            self._opened.clear()
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

    def _candidates(self) -> tuple[list[_Candidate], list[PluginProblem]]:
        """All plugins by entry-point name; a name declared twice is refused for both, never resolved silently."""
        if self._found is None:
            self._found = _entry_point_candidates() if self._discover else ([], [])
        found, problems = self._found
        by_name: dict[str, list[_Candidate]] = {}
        for cand in [*found, *self._registered]:
            by_name.setdefault(cand.name, []).append(cand)
        unique, problems = [], list(problems)
        for name, cands in by_name.items():
            if len(cands) == 1:
                unique.append(cands[0])
            else:
                who = " and ".join(f"{c.distribution} {c.version} ({c.module})" for c in cands)
                problems.append(PluginProblem(name, f"plugin name {name!r} is declared by {who}; uninstall one"))
        return unique, problems

    def _build_index(self, key: tuple[str, int]) -> _Index:
        allow = _parse_allow_list(key[0])
        allowed = {n.lower() for n in allow} if allow is not None else None
        cands, problems = self._candidates()
        refused_names = {p.plugin for p in problems}
        enabled = [c for c in cands if allowed is None or c.name.lower() in allowed]
        loaded = {c.name: self._load(c) for c in enabled}
        by_device: dict[str, list[tuple[_Candidate, DeviceSpec]]] = {}
        for cand in enabled:
            problems.extend(loaded[cand.name].problems)
            for spec in loaded[cand.name].specs:
                by_device.setdefault(spec.name, []).append((cand, spec))
        specs, owners, unusable = {}, {}, {}
        for device, providers in by_device.items():
            if len(providers) == 1:
                owners[device], specs[device] = providers[0]
                continue
            who = ", ".join(c.label for c, _ in providers)
            unusable[device] = (f"device {device} is provided by {len(providers)} plugins ({who}); neither is used: "
                                f"uninstall one, or choose one with LAZY_PLUGINS")  # fmt: skip
            problems.extend(PluginProblem(c.name, unusable[device]) for c, _ in providers)
        installed = {c.name.lower() for c in cands} | {n.lower() for n in refused_names}
        for name in allow or []:
            if name.lower() not in installed:
                names = ", ".join(sorted(c.name for c in cands)) or "none"
                problems.append(PluginProblem(name, f"listed in LAZY_PLUGINS but not installed (installed: {names})"))
        index = _Index(key, specs, owners, unusable, self._infos(cands, problems, loaded, key[0]), tuple(problems))
        if DEBUG >= 1:
            for problem in index.problems:
                print(f"lazy: {problem}", file=sys.stderr)
        return index

    def _infos(self, cands: list[_Candidate], problems: list[PluginProblem], loaded: dict[str, _Loaded],
               allow_list: str) -> tuple[PluginInfo, ...]:  # fmt: skip
        infos = []
        listed = {c.name for c in cands}
        for cand in cands:
            reasons = "; ".join(p.reason for p in problems if p.plugin == cand.name)
            info = functools.partial(PluginInfo, cand.name, cand.distribution, cand.version, cand.module)
            if cand.name not in loaded:
                infos.append(info((), "disabled", f"disabled by LAZY_PLUGINS={allow_list}"))
            else:
                infos.append(info(loaded[cand.name].specs, "error" if reasons else "ok", reasons))
        for problem in problems:  # refused duplicates and LAZY_PLUGINS names that are not installed
            if problem.plugin not in listed:
                listed.add(problem.plugin)
                reasons = "; ".join(p.reason for p in problems if p.plugin == problem.plugin)
                infos.append(PluginInfo(problem.plugin, "", "", "", (), "error", reasons))
        return tuple(infos)

    def _load(self, cand: _Candidate) -> _Loaded:
        """Import a plugin and call its `lazy_devices` (once per reset); every failure becomes a PluginProblem."""
        if (done := self._loaded.get(cand.name)) is not None:
            return done
        try:
            plugin = cand.load()
            self._pm.register(plugin, name=cand.name)
        except (Exception, SystemExit) as e:
            done = _Loaded((), (_problem(cand.name, f"failed to load {cand.module}", e),))
        else:
            unknown = [hc.name for hc in self._pm.get_hookcallers(plugin) or [] if not hc.has_spec()]
            problems = [PluginProblem(cand.name, f"implements hook {name!r}, which lazy-core's plugin API "
                                      f"{PLUGIN_API_VERSION[0]}.{PLUGIN_API_VERSION[1]} does not define (a typo?)")
                        for name in unknown]  # fmt: skip
            specs = self._call_lazy_devices(cand, problems)
            done = _Loaded(tuple(specs), tuple(problems))
        self._loaded[cand.name] = done
        return done

    def _call_lazy_devices(self, cand: _Candidate, problems: list[PluginProblem]) -> list[DeviceSpec]:
        specs: list[DeviceSpec] = []
        for impl in self._pm.hook.lazy_devices.get_hookimpls():
            if impl.plugin_name != cand.name or impl.hookwrapper or impl.wrapper:
                continue
            try:
                result = impl.function()
            except (Exception, SystemExit) as e:
                problems.append(_problem(cand.name, "lazy_devices() raised", e))
                continue
            if not isinstance(result, (list, tuple)):
                reason = f"lazy_devices() returned {result!r}; expected list[DeviceSpec]"
                problems.append(PluginProblem(cand.name, reason))
                continue
            for spec in result:
                if not isinstance(spec, DeviceSpec):
                    problems.append(PluginProblem(cand.name, f"lazy_devices() returned {spec!r}, not a DeviceSpec"))
                elif (why := api_incompatibility(spec.api_version)) is not None:
                    problems.append(PluginProblem(cand.name, f"device {spec.name} refused: {why}"))
                elif any(s.name == spec.name for s in specs):
                    problems.append(PluginProblem(cand.name, f"device {spec.name} listed twice; the second is ignored"))
                else:
                    specs.append(spec)
        return specs

    # ---- lookups -------------------------------------------------------------------------------------------------

    def _resolve(self, canon: str, index: _Index) -> tuple[DeviceSpec, _Candidate]:
        base = _base(canon)
        if (why := index.unusable.get(base)) is not None:
            raise DeviceError(f"device {canon} cannot be used: {why}")
        if (spec := index.specs.get(base)) is None:
            raise self._unknown(canon, index)
        return spec, index.owners[base]

    def _unknown(self, canon: str, index: _Index) -> DeviceError:
        names = sorted([*index.specs, *index.unusable])
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
        key = (owner.name, spec.name)
        if (cached := self._probes.get(key)) is not None:
            return cached
        try:
            result = spec.probe()
            if isinstance(result, tuple) and len(result) == 2:
                result = (bool(result[0]), str(result[1]))
            else:
                result = (False, f"probe() returned {result!r}; expected (usable: bool, reason: str)")
        except Exception as e:
            result = (False, f"probe() raised {type(e).__name__}: {e}")
        self._probes[key] = result
        return result

    def _choose_default(self, index: _Index) -> tuple[str | None, str]:
        """(device, why): the highest-priority usable device that may be the default, or (None, what to do)."""
        candidates = sorted((s for s in index.specs.values() if s.default_ok), key=lambda s: (-s.priority, s.name))
        unusable = []
        for spec in candidates:
            ok, reason = self._probe_spec(index.owners[spec.name], spec)
            if ok:
                if DEBUG >= 1:
                    print(f"lazy: default device {spec.name} (priority {spec.priority}, "
                          f"{index.owners[spec.name].label})", file=sys.stderr)  # fmt: skip
                return spec.name, f"highest-priority usable device (priority {spec.priority})"
            unusable.append(f"{spec.name}: {reason}")
        if unusable:
            msg = "no usable default device; installed devices are unusable: " + "; ".join(unusable)
        elif disabled := [p.name for p in index.plugins if p.status == "disabled"]:
            msg = f"no usable default device: the installed plugins {', '.join(disabled)} are disabled by LAZY_PLUGINS"
        else:
            msg = "no usable default device: no device plugin is installed"
        if others := sorted(s.name for s in index.specs.values() if not s.default_ok):
            msg += f" ({', '.join(others)} must be asked for by name, e.g. LAZY_DEVICE={others[0]})"
        return None, f"{msg}; {INSTALL_HINT}"


Device = _DeviceRegistry()
set_device_opener(Device.__getitem__)
