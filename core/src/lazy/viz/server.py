"""The viewer's web server: the page (`lazy.viz.page`) and a trace's JSON over HTTP on 127.0.0.1, standard library
only, until Ctrl-C (`serve`); `load_trace` reads and checks a saved trace file, with a message that says what is
wrong with a bad one."""

from __future__ import annotations

import errno
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TextIO

from lazy.viz.capture import TRACE_FORMAT, TRACE_VERSION
from lazy.viz.page import PAGE

HOST = "127.0.0.1"
DEFAULT_PORT = 8765
PORT_TRIES = 20  # ports after the asked one to try before letting the system choose

# the page may run only its own inline script and style and read only from this server: nothing from the internet
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src data:"
)


class TraceFileError(ValueError):
    """A trace file the viewer cannot show; the message names the file, what is wrong and what to do."""


def load_trace(path: str) -> dict[str, Any]:
    """The trace saved at `path`, checked to be one this version of lazy can show."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        raise TraceFileError(
            f"{path}: no such file. Record a trace with `LAZY_VIZ=2 python your_program.py` (it prints the file's "
            "path at exit) or `with lazy.viz.recording() as trace: ...; trace.save(path)`"
        ) from None
    except OSError as e:
        raise TraceFileError(f"{path}: cannot read it ({e.strerror or e})") from None
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as e:
        raise TraceFileError(
            f"{path} is not valid JSON (line {e.lineno}, column {e.colno}: {e.msg}); the file is damaged or was cut "
            "short: record the trace again"
        ) from None
    except UnicodeDecodeError:
        raise TraceFileError(f"{path} is not a text file, so not a lazy viz trace") from None
    check_trace(data, path)
    return data


def check_trace(data: Any, where: str) -> None:
    """Raise `TraceFileError` unless `data` is a trace of the version this viewer reads."""
    if not isinstance(data, dict) or data.get("format") != TRACE_FORMAT:
        raise TraceFileError(
            f'{where} is not a lazy viz trace (it has no "format": "{TRACE_FORMAT}"); LAZY_VIZ and '
            "lazy.viz.recording() write those (a LAZY_PROFILE file is a Chrome trace: open it in Perfetto)"
        )
    if data.get("version") != TRACE_VERSION:
        raise TraceFileError(
            f"{where} is a version {data.get('version')!r} trace, this lazy reads version {TRACE_VERSION}: record the "
            "trace again with this lazy, or view it with the lazy that wrote it"
        )
    if not isinstance(data.get("realizes"), list) or not isinstance(data.get("kernels"), dict):
        raise TraceFileError(f'{where} is damaged: "realizes" must be a list and "kernels" an object')


class ViewerServer(ThreadingHTTPServer):
    """Serves `/` (the page) and `/trace.json` (the trace it shows)."""

    daemon_threads = True  # a browser's open connection never holds up Ctrl-C

    def __init__(self, port: int, trace_json: bytes):
        self.trace_json = trace_json
        super().__init__((HOST, port), _Handler)

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.server_port}/"


class _Handler(BaseHTTPRequestHandler):
    server: ViewerServer

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        path = self.path.split("?", 1)[0]
        if path in ("/", "/index.html"):
            self._send(200, "text/html; charset=utf-8", PAGE.encode())
        elif path == "/trace.json":
            self._send(200, "application/json", self.server.trace_json)
        else:
            self._send(404, "text/plain; charset=utf-8", f"not found: {path}\n".encode())

    def _send(self, status: int, content_type: str, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("Content-Security-Policy", CONTENT_SECURITY_POLICY)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # a request log would bury the URL line
        pass


def make_server(data: dict[str, Any], port: int = DEFAULT_PORT) -> ViewerServer:
    """A server for `data` bound to `port` on 127.0.0.1, or to the next free port after it when it is taken (or
    not ours to use), else to one the system picks; `port=0` lets the system pick at once."""
    trace_json = json.dumps(data, separators=(",", ":")).encode()
    candidates = [port + i for i in range(PORT_TRIES) if port + i < 65536] if port else []
    for candidate in [*candidates, 0]:
        try:
            return ViewerServer(candidate, trace_json)
        except OSError as e:
            if e.errno not in (errno.EADDRINUSE, errno.EACCES) or candidate == 0:
                raise
    raise AssertionError("unreachable: port 0 either binds or raises")


def serve(
    data: dict[str, Any], port: int = DEFAULT_PORT, open_browser: bool = True, stream: TextIO | None = None
) -> None:
    """Serve the viewer for `data` and print its URL (on `stream`, default stdout) until Ctrl-C."""
    out = sys.stdout if stream is None else stream
    server = make_server(data, port)
    if port and server.server_port != port:
        print(f"lazy viz: port {port} is in use, using {server.server_port}", file=out)
    print(f"lazy viz: serving the trace at {server.url} (Ctrl-C to stop)", file=out, flush=True)
    if open_browser:
        _open_browser(server.url)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        print("lazy viz: stopped", file=out)
    finally:
        server.server_close()


def _open_browser(url: str) -> None:
    """Open `url` in a graphical browser, if there is one: a text browser (what `webbrowser` finds without a display)
    would take over the terminal the URL is printed on."""
    import webbrowser

    try:
        browser = webbrowser.get()
        if type(browser) is not webbrowser.GenericBrowser:  # a console browser, or a command of the user's
            browser.open(url)
    except Exception:  # no browser is fine: the URL is printed
        pass
