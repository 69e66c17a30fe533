"""The manager's small HTTP servers (probes and metrics), on ``escaler.runtime.httpbase``.

Contract:

* Bind addresses follow controller-runtime's flags: ``":8081"`` (every IPv4 interface),
  ``"127.0.0.1:0"`` (loopback, ephemeral port), ``"[::1]:8080"`` (IPv6), and ``"0"`` (or ``""``)
  meaning *disabled*. ``parse_bind_address`` rejects anything else with a ``ValueError`` naming
  the rule.
* ``HTTPServer.serve()`` binds synchronously — a port already in use raises ``OSError`` there,
  so the manager fails fast, before touching the cluster — then serves from a daemon thread,
  each connection on its own bounded thread (a slow scrape never blocks a probe) with the
  ``Limits`` of ``httpbase``: a connection cap (503 beyond it), a total deadline per request, and
  no request body (a ``Content-Length`` above 0 is 413). ``port`` is the bound port (useful with
  port 0). ``shutdown()`` stops serving and closes the socket; it is idempotent.
* Routes are exact paths; a route also serves its sub-paths (``/healthz/<check>``) and receives
  the remainder. Anything else is 404; methods other than GET/HEAD are 405. Access logs go to the
  ``logging`` module at DEBUG, not to stderr.
* ``protected`` routes (the manager passes ``/metrics`` with ``--metrics-secure``) need a bearer
  token that a TokenReview accepts and a SubjectAccessReview allowing ``get`` on the
  non-resource URL (``nonResourceURLs: ["/metrics"]``) — 401 / 403 / 429 / 503 as
  ``escaler.runtime.authfilter`` answers, exactly what controller-runtime's secure metrics
  serving does. Probes are never protected: the kubelet sends no token.
* ``certs`` serves HTTPS (the manager gives secure ``/metrics`` one: a bearer token never crosses
  the network in clear); None serves plain HTTP.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Collection, Mapping

from escaler.clock import Clock
from escaler.runtime.authfilter import RequestAuth
from escaler.runtime.authn import NonResourceAttributes
from escaler.runtime.httpbase import (
    BaseHandler,
    CertificateSource,
    ConnectionServer,
    HttpError,
    Limits,
    ServingLifecycle,
    server_class,
)

__all__ = ["PROBE_LIMITS", "HTTPServer", "Response", "RouteHandler", "parse_bind_address"]

# (status, content type, body)
Response = tuple[int, str, bytes]
# called with the path remainder after the route ("" for the route itself, "name" for /route/name)
RouteHandler = Callable[[str], Response]

_log = logging.getLogger(__name__)

_BIND_RE = re.compile(r"^(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<host>[^:\[\]]*)):(?P<port>\d{1,5})$")
# Probes and scrapes: a few at a time, small, no body; a probe must answer within its timeout.
PROBE_LIMITS = Limits(max_connections=16, request_deadline=10.0, max_body_bytes=0)


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


class _Handler(BaseHandler):
    # set per server class in HTTPServer.serve()
    routes: Mapping[str, RouteHandler] = {}
    protected: frozenset[str] = frozenset()
    auth: RequestAuth | None = None

    def serve_request(self) -> None:
        if self.command not in ("GET", "HEAD"):
            raise HttpError(405, f"{self.command}: use GET", headers={"Allow": "GET, HEAD"}, close=True)
        self.content_length(required=False)
        path = self.path.split("?", 1)[0]
        for route, handler in self.routes.items():
            if path == route or path.startswith(route.rstrip("/") + "/"):
                self.route_label = route
                if route in self.protected and self.auth is not None:
                    self.auth.check(self.bearer_token(), self.client_host(),
                                    NonResourceAttributes(path=path, verb=self.command.lower()))
                status, ctype, body = handler(path[len(route):].strip("/"))
                self.reply(status, body, ctype=ctype)
                return
        raise HttpError(404, "404 page not found")


class HTTPServer(ServingLifecycle):
    """One named HTTP server with fixed routes; see the module docstring."""

    def __init__(self, name: str, bind_address: str, routes: Mapping[str, RouteHandler], *,
                 limits: Limits = PROBE_LIMITS, auth: RequestAuth | None = None,
                 protected: Collection[str] = (), clock: Clock | None = None,
                 certs: CertificateSource | None = None) -> None:
        for route in routes:
            if not route.startswith("/"):
                raise ValueError(f"HTTPServer {name}: route {route!r} must start with '/'")
        unknown = set(protected) - set(routes)
        if unknown:
            raise ValueError(f"HTTPServer {name}: protected routes {sorted(unknown)} are not routes")
        if protected and auth is None:
            raise ValueError(f"HTTPServer {name}: protected routes need an auth filter")
        # for logs and the thread name
        self.name = name
        # the parsed address; None when disabled (then serve() is a no-op)
        self.address = parse_bind_address(bind_address)
        # immutable copy of the routes, and the ones that need a token
        self._routes = dict(routes)
        self.protected = frozenset(protected)
        self.auth = auth
        self.limits = limits
        self._clock = clock
        # HTTPS with this pair; None = plain HTTP
        self.certs = certs
        # the bound server; None before serve() and after shutdown()
        self._server: ConnectionServer | None = None
        # the serving thread; None before serve()
        self._thread: threading.Thread | None = None
        # guards _server/_thread transitions
        self._mu = threading.Lock()
        # set while serving
        self.serving = threading.Event()

    @property
    def routes(self) -> Mapping[str, RouteHandler]:
        return self._routes

    @property
    def enabled(self) -> bool:
        return self.address is not None

    def serve(self) -> None:
        """Bind (raising ``OSError`` on failure) and serve from a daemon thread."""
        if self.address is None:
            return
        host, port, ipv6 = self.address
        handler = type("Handler", (_Handler,), {"routes": self._routes, "protected": self.protected,
                                                "auth": self.auth})
        with self._mu:
            if self._server is not None:
                raise RuntimeError(f"HTTPServer {self.name}: already serving")
            server = server_class(ipv6)((host, port), handler, limits=self.limits, clock=self._clock,
                                        log_name=self.name, certs=self.certs)
            self._start_thread(server, f"http-{self.name}")
        self.serving.set()
        _log.info("serving %s on %s:%d%s", self.name, host or "*", self.port or 0,
                  f" ({', '.join(sorted(self.protected))} behind TokenReview/SubjectAccessReview)"
                  if self.protected else "")
