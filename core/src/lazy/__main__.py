"""`python -m lazy devices [--json] [-v]` (also the `lazy` console script): list every discovered device plugin, its
version, its devices and why any of them is unusable or lost a name clash, and which device is the default and why
(naming the higher-priority devices it was chosen over). `python -m lazy viz TRACE`: serve a saved LAZY_VIZ trace."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

USAGE = """usage: python -m lazy devices [--json] [-v]
       python -m lazy viz TRACE.json [--port N] [--no-browser]

commands:
  devices     list device plugins, their devices, why any is unusable, and the default device
              --json: the same as JSON; -v: tracebacks of plugin problems
  viz         serve the kernel graph viewer for a trace saved by LAZY_VIZ on 127.0.0.1 until Ctrl-C
              --port: the port to try first (another if it is in use); --no-browser: only print the URL
"""


def collect_report() -> dict[str, Any]:
    """What `devices` shows, as plain data (the `--json` output)."""
    from lazy.hookspecs import PLUGIN_API_VERSION
    from lazy.plugins import Device, core_version

    default, default_reason = Device.explain_default()
    plugins = []
    for info in Device.plugins():
        devices = []
        for spec in info.devices:  # (a disabled plugin lists none)
            usable, reason = Device.probe(spec.name, plugin=info.name)
            devices.append({"name": spec.name, "priority": spec.priority, "usable": usable, "reason": reason,
                            "default_ok": spec.default_ok, "description": spec.description})  # fmt: skip
        plugins.append({"name": info.name, "distribution": info.distribution, "version": info.version,
                        "module": info.module, "status": info.status, "reason": info.reason,
                        "devices": devices})  # fmt: skip
    return {
        "core_version": core_version(),
        "api_version": f"{PLUGIN_API_VERSION[0]}.{PLUGIN_API_VERSION[1]}",
        "default": default,
        "default_reason": default_reason,
        "plugins": plugins,
        "problems": [{"plugin": p.plugin, "reason": p.reason, "detail": p.detail} for p in Device.problems()],
    }


def _device_state(device: dict[str, Any], default: str | None, plugin_reason: str) -> str:
    if not device["usable"]:  # a clash's reason is already the plugin's reason, printed under it
        return "unusable (see below)" if device["reason"] in plugin_reason else f"unusable: {device['reason']}"
    flags = (("default", device["name"] == default), ("by name only", not device["default_ok"]))
    notes = [note for note, on in flags if on]
    state = "usable" + (f" ({', '.join(notes)})" if notes else "")
    return state + (f": {device['reason']}" if device["reason"] else "")


def format_report(report: dict[str, Any], verbose: bool = False) -> str:
    """The report as a table: one row per device, then the plugin's problem (if any) on an indented line."""
    header = ("PLUGIN", "DISTRIBUTION", "STATUS", "DEVICE", "PRIORITY", "STATE")
    rows: list[tuple[str, ...] | str] = []  # a str is a full-width line under its plugin
    for plugin in report["plugins"]:
        first = (plugin["name"], f"{plugin['distribution']} {plugin['version']}".strip() or "-", plugin["status"])
        if not plugin["devices"]:
            rows.append((*first, "-", "", ""))
        for i, device in enumerate(plugin["devices"]):
            state = _device_state(device, report["default"], plugin["reason"])
            rows.append((*(first if i == 0 else ("", "", "")), device["name"], str(device["priority"]), state))
        if plugin["reason"]:
            rows.append(f"    {plugin['reason']}")
    table = [header, *(row for row in rows if isinstance(row, tuple))]
    widths = [max(len(row[col]) for row in table) for col in range(len(header) - 1)]
    lines = [f"lazy-core {report['core_version']}, plugin API {report['api_version']}", ""]
    for row in [header, *rows] if rows else []:
        cells = [cell.ljust(width) for cell, width in zip(row, widths)] if isinstance(row, tuple) else [row]
        lines.append("  ".join([*cells, row[-1]] if isinstance(row, tuple) else cells).rstrip())
    if not rows:
        lines.append("no device plugins found")
    lines.append("")
    if report["default"] is not None:
        lines.append(f"default device: {report['default']} ({report['default_reason']})")
    else:
        lines.append(f"default device: none: {report['default_reason']}")
    for problem in report["problems"] if verbose else []:
        lines += ["", f"plugin {problem['plugin']!r}: {problem['reason']}", problem["detail"].rstrip()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Entry point of `python -m lazy` and the `lazy` script. Returns the exit status (0 even if a plugin is broken)."""
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help", "help"):
        print(USAGE, end="")
        return 0 if args else 2
    if args[0] == "viz":
        return viz_main(args[1:])
    if args[0] != "devices":
        print(f"unknown command {args[0]!r}\n\n{USAGE}", end="", file=sys.stderr)
        return 2
    parser = argparse.ArgumentParser(prog="python -m lazy devices", description="list device plugins and devices")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("-v", "--verbose", action="store_true", help="show tracebacks of plugin problems")
    opts = parser.parse_args(args[1:])
    report = collect_report()
    print(json.dumps(report, indent=2) if opts.json else format_report(report, opts.verbose))
    return 0


def viz_main(args: list[str]) -> int:
    """`python -m lazy viz TRACE [--port N] [--no-browser]`: 0 once stopped with Ctrl-C, 2 for a trace it cannot
    show (with the reason, no traceback)."""
    from lazy.viz.server import DEFAULT_PORT, TraceFileError, load_trace, serve

    parser = argparse.ArgumentParser(prog="python -m lazy viz", description="serve the kernel graph viewer for a trace")
    parser.add_argument("trace", help="a trace file written by LAZY_VIZ or lazy.viz.recording()")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help="port to try first (default %(default)s)")
    parser.add_argument("--no-browser", action="store_true", help="do not open a browser, only print the URL")
    opts = parser.parse_args(args)
    if not 0 <= opts.port < 65536:
        parser.error(f"--port {opts.port} is not a port number (0-65535; 0: any free port)")
    try:
        data = load_trace(opts.trace)
    except TraceFileError as e:
        print(f"lazy viz: {e}", file=sys.stderr)
        return 2
    serve(data, opts.port, open_browser=not opts.no_browser)
    return 0


if __name__ == "__main__":
    sys.exit(main())
