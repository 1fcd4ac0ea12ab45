"""The VIZ web server: bound to 127.0.0.1 only, serving the app's own static files and a VizSession's payloads.

`make_server(session, port)` binds (port 0 picks a free one; a taken port raises PortInUseError saying what to do),
`start_in_thread` runs it in the background (tests, the benchmark), `serve_until_interrupted` in the foreground.
Endpoints: `/` and the files of static/, `/ctxs`, `/ctxs?ctx=i&idx=j` (JSON lines, one graph per line, streamed),
`/prepare?ctx=i&idx=j` (replay that step in the background now: the page asks when a group opens; JSON
`{"started": bool}`), `/kernel?ctx=i`, `/search?q=text`, `/get_profile` (packed bytes), `/profile_info`,
`/kernel_stats`, `/timeline_overview?bins=N`. HEAD is answered like GET, bodiless; an index out of range or not a
number 0 or more is a 404 whose JSON says which numbers exist.
"""

from __future__ import annotations

import contextlib
import errno
import json
import re
import threading
import webbrowser
from collections.abc import Callable, Iterable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from fusegrad.viz.session import VizSession

HOST = "127.0.0.1"
STATIC = Path(__file__).resolve().parent / "static"
# a static file is one plain name in static/: no folders, so no path can climb out of it
_STATIC_NAME = re.compile(r"[A-Za-z0-9_-]+\.(html|js|css|svg)")
_CONTENT_TYPES = {"html": "text/html; charset=utf-8", "js": "text/javascript; charset=utf-8",
                  "css": "text/css; charset=utf-8", "svg": "image/svg+xml"}  # fmt: skip
# the page may load nothing but its own files and talk to nothing but this server
_CSP = ("default-src 'none'; script-src 'self'; worker-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")  # fmt: skip


class PortInUseError(OSError):
    """The port is taken; the message says which and how to pick another."""


def _int_arg(query: dict[str, list[str]], name: str) -> int:
    """Query parameter `name` as a non-negative integer; ValueError (a 404 answer) saying what was given otherwise."""
    if name not in query:
        raise ValueError(f"query parameter {name} is missing: expected an integer 0 or more")
    text = query[name][0]
    if not text.isdigit() or not text.isascii() or len(text) > 18:
        raise ValueError(f"query parameter {name} must be an integer 0 or more: got {text[:40]!r}")
    return int(text)


class VizHandler(BaseHTTPRequestHandler):
    """One request. `session` is set on the subclass each server makes."""

    session: VizSession
    server_version = "fusegrad-viz"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002  # BaseHTTPRequestHandler's signature
        pass  # requests are not logged: the terminal shows the URL and errors only

    def do_HEAD(self) -> None:  # BaseHTTPRequestHandler dispatches on this name
        """The GET answer's status and headers, no body (send_error leaves the body out for HEAD by itself)."""
        self.do_GET()

    @property
    def wants_body(self) -> bool:
        return self.command != "HEAD"

    def do_GET(self) -> None:  # BaseHTTPRequestHandler dispatches on this name
        url = urlsplit(self.path)
        host = self.headers.get("Host", "")
        if host and host.rsplit(":", 1)[0] not in (HOST, "localhost"):  # a foreign Host: DNS rebinding
            return self.send_error(HTTPStatus.FORBIDDEN, "unexpected Host header")
        query = parse_qs(url.query, keep_blank_values=True)  # `ctx=` is a bad index, not a missing one
        routes: dict[str, Callable[[dict[str, list[str]]], None]] = {
            "/ctxs": self.ctxs, "/kernel": self.kernel, "/search": self.search,
            "/get_profile": self.get_profile, "/profile_info": self.profile_info,
            "/kernel_stats": self.kernel_stats, "/timeline_overview": self.timeline_overview,
            "/prepare": self.prepare}  # fmt: skip
        try:
            if (route := routes.get(url.path)) is not None:
                return route(query)
            return self.static(url.path)
        except (ValueError, IndexError) as e:
            return self.send_json({"error": str(e)}, HTTPStatus.NOT_FOUND)
        except (BrokenPipeError, ConnectionResetError):
            return None  # the page went elsewhere before the answer was complete

    # *** answers ***

    def send_body(self, body: bytes, content_type: str, status: HTTPStatus = HTTPStatus.OK) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.security_headers()
        self.end_headers()
        if self.wants_body:
            self.wfile.write(body)

    def security_headers(self) -> None:
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Content-Security-Policy", _CSP)

    def send_json(self, value: Any, status: HTTPStatus = HTTPStatus.OK) -> None:
        self.send_body(json.dumps(value, default=str).encode(), "application/json", status)

    def send_lines(self, messages: Iterable[Any]) -> None:
        """JSON lines, each flushed as it is made: the page draws the first graph while the rest are replayed."""
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", "application/x-ndjson")
        self.security_headers()
        self.end_headers()  # HTTP/1.0 without a length: the body ends when the connection closes
        if not self.wants_body:
            return  # the graphs are not replayed for a HEAD request
        for message in messages:
            self.wfile.write(json.dumps(message, default=str).encode() + b"\n")
            self.wfile.flush()

    def static(self, path: str) -> None:
        name = "index.html" if path == "/" else unquote(path[1:])
        file = STATIC / name
        if not _STATIC_NAME.fullmatch(name) or not file.is_file():
            return self.send_error(HTTPStatus.NOT_FOUND, "no such file")
        return self.send_body(file.read_bytes(), _CONTENT_TYPES[name.rsplit(".", 1)[1]])

    def ctxs(self, query: dict[str, list[str]]) -> None:
        if "ctx" not in query:
            return self.send_json(self.session.groups())
        ctx, idx = _int_arg(query, "ctx"), _int_arg(query, "idx")
        self.session.step(ctx, idx)  # raises IndexError (404) before the stream starts
        return self.send_lines(self.session.step_stream(ctx, idx))

    def prepare(self, query: dict[str, list[str]]) -> None:
        ctx, idx = _int_arg(query, "ctx"), _int_arg(query, "idx")
        if not self.wants_body:  # HEAD: the numbers are checked, nothing is started
            self.session.step(ctx, idx)
            return self.send_json({"started": False})
        return self.send_json({"started": self.session.prepare(ctx, idx)})

    def kernel(self, query: dict[str, list[str]]) -> None:
        return self.send_json(self.session.kernel(_int_arg(query, "ctx")))

    def search(self, query: dict[str, list[str]]) -> None:
        return self.send_json(self.session.search(query.get("q", [""])[0]))

    def get_profile(self, query: dict[str, list[str]]) -> None:
        return self.send_body(self.session.profile_bytes(), "application/octet-stream")

    def profile_info(self, query: dict[str, list[str]]) -> None:
        return self.send_json(self.session.profile_info())

    def kernel_stats(self, query: dict[str, list[str]]) -> None:
        return self.send_json(self.session.kernel_stats())

    def timeline_overview(self, query: dict[str, list[str]]) -> None:
        return self.send_json(self.session.timeline_overview(_int_arg(query, "bins")))


def make_server(session: VizSession, port: int) -> ThreadingHTTPServer:
    """A server for `session` on 127.0.0.1:`port` (0: any free port), not yet serving."""
    handler = type("SessionHandler", (VizHandler,), {"session": session})
    try:
        server = ThreadingHTTPServer((HOST, port), handler)
    except OSError as e:
        if e.errno == errno.EADDRINUSE:
            raise PortInUseError(errno.EADDRINUSE, f"viz: port {port} on {HOST} is already in use (another viewer?):"
                                 " pass --port N for another one, or --port 0 for any free port") from None  # fmt: skip
        raise
    server.daemon_threads = True  # open streams don't keep the process alive
    return server


def url_of(server: ThreadingHTTPServer) -> str:
    return f"http://{HOST}:{server.server_address[1]}/"


def start_in_thread(session: VizSession, port: int = 0) -> tuple[ThreadingHTTPServer, str]:
    """Serve in a daemon thread; returns the server (call `.shutdown()`) and its URL."""
    server = make_server(session, port)
    threading.Thread(target=server.serve_forever, name="viz-server", daemon=True).start()
    return server, url_of(server)


def serve_until_interrupted(server: ThreadingHTTPServer, open_browser: bool) -> None:
    """Print the URL, open a browser tab when asked, serve until Ctrl-C."""
    url = url_of(server)
    print(
        f"VIZ: serving on {url} (Ctrl-C to stop; over SSH forward the port, or use python -m fusegrad.viz.cli)",
        flush=True,
    )
    if open_browser:
        with contextlib.suppress(webbrowser.Error):  # no browser after all: the printed URL is enough
            webbrowser.open_new_tab(url)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        print("\nVIZ: stopped", flush=True)
    finally:
        server.server_close()
