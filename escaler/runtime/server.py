"""The manager's small HTTP servers (probes and metrics): stdlib, one daemon thread each.

Contract:

* Bind addresses follow controller-runtime's flags: ``":8081"`` (every IPv4 interface),
  ``"127.0.0.1:0"`` (loopback, ephemeral port), ``"[::1]:8080"`` (IPv6), and ``"0"`` (or ``""``)
  meaning *disabled*. ``parse_bind_address`` rejects anything else with a ``ValueError`` naming
  the rule.
* ``HTTPServer.serve()`` binds synchronously — a port already in use raises ``OSError`` there,
  so the manager fails fast, before touching the cluster — then serves from a daemon thread
  (``ThreadingHTTPServer``: a slow scrape never blocks a probe). ``port`` is the bound port
  (useful with port 0). ``shutdown()`` stops serving and closes the socket; it is idempotent.
* Routes are exact paths; a route also serves its sub-paths (``/healthz/<check>``) and receives
  the remainder. Anything else is 404; methods other than GET/HEAD are 405. Access logs go to the
  ``logging`` module at DEBUG, not to stderr.
"""

from __future__ import annotations

import logging
import re
import socket
import threading
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["HTTPServer", "Response", "RouteHandler", "parse_bind_address"]

# (status, content type, body)
Response = tuple[int, str, bytes]
# called with the path remainder after the route ("" for the route itself, "name" for /route/name)
RouteHandler = Callable[[str], Response]

_log = logging.getLogger(__name__)

_BIND_RE = re.compile(r"^(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<host>[^:\[\]]*)):(?P<port>\d{1,5})$")
# How long shutdown() waits for the serving thread to finish its current poll.
_SHUTDOWN_JOIN_SECONDS = 5.0


def parse_bind_address(address: str) -> tuple[str, int, bool] | None:
    """``(host, port, ipv6)`` for a bind address; ``None`` when it is ``"0"``/``""`` (disabled)."""
    if address in ("", "0"):
        return None
    m = _BIND_RE.match(address)
    if m is None:
        raise ValueError(
            f"bind address {address!r}: must be 'host:port', ':port', '[ipv6]:port', or '0' to disable"
        )
    port = int(m.group("port"))
    if port > 65535:
        raise ValueError(f"bind address {address!r}: port must be 0..65535")
    if m.group("v6") is not None:
        return m.group("v6"), port, True
    return m.group("host") or "", port, False


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    # allow a quick restart of the manager on the same port (TIME_WAIT)
    allow_reuse_address = True


class _Server6(_Server):
    address_family = socket.AF_INET6


class _Handler(BaseHTTPRequestHandler):
    server_version = "escaler"
    # set per server class in HTTPServer.serve()
    routes: Mapping[str, RouteHandler] = {}

    def _dispatch(self, send_body: bool) -> None:
        path = self.path.split("?", 1)[0]
        response: Response = (404, "text/plain; charset=utf-8", b"404 page not found\n")
        for route, handler in self.routes.items():
            if path == route or path.startswith(route.rstrip("/") + "/"):
                rest = path[len(route):].strip("/")
                try:
                    response = handler(rest)
                except Exception:
                    _log.exception("HTTP handler for %s failed", route)
                    response = (500, "text/plain; charset=utf-8", b"internal error\n")
                break
        status, ctype, body = response
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("X-Content-Type-Options", "nosniff")
        self.end_headers()
        if send_body:
            self.wfile.write(body)

    def do_GET(self) -> None:
        self._dispatch(send_body=True)

    def do_HEAD(self) -> None:
        self._dispatch(send_body=False)

    def _not_allowed(self) -> None:
        self.send_response(405)
        self.send_header("Allow", "GET, HEAD")
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_POST = do_PUT = do_DELETE = do_PATCH = _not_allowed

    def log_message(self, format: str, *args: Any) -> None:
        _log.debug("%s - %s", self.address_string(), format % args)


class HTTPServer:
    """One named HTTP server with fixed routes; see the module docstring."""

    def __init__(self, name: str, bind_address: str, routes: Mapping[str, RouteHandler]) -> None:
        for route in routes:
            if not route.startswith("/"):
                raise ValueError(f"HTTPServer {name}: route {route!r} must start with '/'")
        # for logs and the thread name
        self.name = name
        # the parsed address; None when disabled (then serve() is a no-op)
        self.address = parse_bind_address(bind_address)
        # immutable copy of the routes
        self._routes = dict(routes)
        # the bound server; None before serve() and after shutdown()
        self._server: _Server | None = None
        # the serving thread; None before serve()
        self._thread: threading.Thread | None = None
        # guards _server/_thread transitions
        self._mu = threading.Lock()

    @property
    def routes(self) -> Mapping[str, RouteHandler]:
        return self._routes

    @property
    def enabled(self) -> bool:
        return self.address is not None

    @property
    def port(self) -> int | None:
        """The bound port, or ``None`` when not serving."""
        with self._mu:
            return int(self._server.server_address[1]) if self._server is not None else None

    def serve(self) -> None:
        """Bind (raising ``OSError`` on failure) and serve from a daemon thread."""
        if self.address is None:
            return
        host, port, ipv6 = self.address
        handler = type("Handler", (_Handler,), {"routes": self._routes})
        server_cls = _Server6 if ipv6 else _Server
        with self._mu:
            if self._server is not None:
                raise RuntimeError(f"HTTPServer {self.name}: already serving")
            server = server_cls((host, port), handler)
            self._server = server
            self._thread = threading.Thread(
                target=server.serve_forever, kwargs={"poll_interval": 0.1},
                name=f"http-{self.name}", daemon=True,
            )
            self._thread.start()
        _log.info("serving %s on %s:%d", self.name, host or "*", self.port or 0)

    def shutdown(self) -> None:
        with self._mu:
            server, thread = self._server, self._thread
            self._server = None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        if thread is not None:
            thread.join(_SHUTDOWN_JOIN_SECONDS)
