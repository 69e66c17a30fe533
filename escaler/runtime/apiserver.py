"""``ApiServer``: the manager's authenticated JSON API (``--api-bind-address``, SPEC §5.5, §9.2).

Reconcilers register routes on it during setup; the server knows no route of its own but
``GET /healthz``. The ElasticScaler reconciler adds the SignalTrigger push path::

    mgr.api_server.add_route(
        "POST", "/signal/v1/namespaces/{namespace}/elasticscalers/{name}", handle_signal,
        authz=ResourceAttributes(verb="update", group="elasticscaler.io", resource="elasticscalers",
                                 subresource="signal", namespace="{namespace}", name="{name}"))

Contract:

* Serves HTTP/1.1, or HTTPS when ``cert_file``/``key_file`` are given (TLS 1.2+, the pair
  re-read when it changes, the handshake in the connection's own thread — ``runtime.tls``).
  One daemon thread per connection, keep-alive, ``CONNECTION_TIMEOUT_SECONDS`` per socket.
* Routes: ``add_route(method, pattern, handler, *, authz=None, public=False)``. A pattern is
  literal segments and ``{param}`` segments (one path segment each, percent-decoded into
  ``ApiRequest.params``). Registration order decides between overlapping patterns; the same
  method on the same pattern shape twice is refused. Routes may be added while serving.
* Per request, in this order: no matching path → 404; path matches but not the method → 405
  (with ``Allow``); chunked body → 411; ``Content-Length`` above ``MAX_BODY_BYTES`` → 413 (the
  body is never read); then, unless the route is ``public`` or the server has no
  authenticator, ``Authorization: Bearer <token>`` is authenticated (missing or invalid → 401
  with ``WWW-Authenticate: Bearer``) and, when the route has ``authz``, the user is authorized
  for those attributes with path params substituted (denied → 403 naming the user, verb and
  resource); a review that cannot be made → 503 with ``Retry-After`` (never cached, never a
  denial); then the body is read and parsed as JSON (invalid → 400); then the handler runs.
* A handler returns an ``ApiResponse`` (JSON-encoded body) or raises ``ApiError`` for a 4xx of
  its own; any other exception is logged with its traceback and answered 500 — the server keeps
  serving. Every error body is ``{"error": {"code": ..., "message": ...}}``.
* ``ApiRequest`` never carries the ``Authorization`` header; ``user`` is the reviewed user
  (``None`` on a public route or with authentication off).
* A ``Runnable``: ``start(stop)`` binds (``OSError`` on a busy port, ``ssl.SSLError`` on a bad
  certificate), serves until ``stop`` is set, then closes. ``serve()``/``shutdown()`` do the same
  without blocking, for tests; ``port`` is the bound port.
* With a ``CollectorRegistry``: ``escaler_api_requests_total{route,method,code}`` and
  ``escaler_api_request_duration_seconds{route,method}`` (``route`` is the pattern, bounded).

Why the manager runs it as a *leader* runnable (``Manager.add_api_server``): a push must enqueue
on the controller that acts, and only the leader's controllers run; a standby that accepted a
push could only drop it. So only the leader binds the port: a standby refuses connections at
once and a client retries (the next attempt may reach the leader). Limitation: with several
replicas behind one Service, readiness does not follow leadership (a standby is ready so rolling
updates proceed), so pushes can hit a standby; run one replica of the API, or have clients retry
on connection errors. Authentication is off only when no authenticator is given (tests,
``--auth none``); without TLS, bearer tokens cross the network in clear text (a warning is logged).

RBAC for ``KubeAuthenticator``: see ``escaler.runtime.authn`` (create on ``tokenreviews`` and
``subjectaccessreviews``).
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qsl, unquote

from prometheus_client import CollectorRegistry, Counter, Histogram

from escaler.runtime.authn import (
    AccessDecision,
    Authenticator,
    ResourceAttributes,
    ReviewUnavailable,
    UserInfo,
)
from escaler.runtime.server import parse_bind_address
from escaler.runtime.tls import (
    DEFAULT_CONNECTION_TIMEOUT_SECONDS,
    CertificateReloader,
    ConnectionServer,
    ServingLifecycle,
    server_class,
)

__all__ = [
    "CONNECTION_TIMEOUT_SECONDS",
    "MAX_BODY_BYTES",
    "ApiError",
    "ApiHandler",
    "ApiRequest",
    "ApiResponse",
    "ApiServer",
]

# largest request body accepted (a signal is a few bytes; a decision query has none)
MAX_BODY_BYTES = 64 * 1024
# handshake, request read and keep-alive idle bound per connection
CONNECTION_TIMEOUT_SECONDS = DEFAULT_CONNECTION_TIMEOUT_SECONDS
# how long a client is asked to wait after a 503 (review unavailable)
RETRY_AFTER_SECONDS = 1
# how long shutdown() waits for the accept loop to finish its current poll
HEALTHZ_PATH = "/healthz"
# the route label of requests that matched no route
_UNMATCHED = "unmatched"

# HTTP status → the error code in {"error": {"code"}}
ERROR_CODES: Mapping[int, str] = {
    400: "invalid_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    411: "length_required",
    413: "payload_too_large",
    422: "invalid_request",
    429: "too_many_requests",
    500: "internal_error",
    502: "upstream_error",
    503: "unavailable",
}

_log = logging.getLogger(__name__)

_METHOD_RE = re.compile(r"^[A-Z]+$")
_PARAM_SEGMENT_RE = re.compile(r"^\{([A-Za-z_][A-Za-z0-9_]*)\}$")


@dataclass(frozen=True)
class ApiRequest:
    """What a handler sees of one request."""

    method: str
    # the request path, percent-encoded as sent (no query)
    path: str
    # the pattern's {param}s, percent-decoded
    params: Mapping[str, str]
    # query parameters; the first value of a repeated name
    query: Mapping[str, str]
    # header names lower-cased; Authorization removed
    headers: Mapping[str, str]
    # the parsed JSON body; None when the request had none
    body: Any
    # the authenticated user; None on a public route or with authentication off
    user: UserInfo | None


@dataclass(frozen=True)
class ApiResponse:
    """A handler's answer: ``body`` is JSON-encoded; ``None`` sends an empty body."""

    status: int = 200
    body: Any = None
    headers: Mapping[str, str] = field(default_factory=dict)


class ApiError(Exception):
    """Raised by a handler to answer ``{"error": {"code", "message"}}`` with ``status``."""

    def __init__(self, status: int, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code or ERROR_CODES.get(status, "error")
        self.message = message


ApiHandler = Callable[[ApiRequest], ApiResponse]


@dataclass(frozen=True)
class _Route:
    method: str
    pattern: str
    # the compiled pattern (full match on the raw path) and its param names, in order
    regex: re.Pattern[str]
    params: tuple[str, ...]
    handler: ApiHandler
    authz: ResourceAttributes | None
    public: bool

    @property
    def shape(self) -> str:
        """The pattern with param names erased: two routes of one shape match the same paths."""
        return self.regex.pattern


def _compile(pattern: str) -> tuple[re.Pattern[str], tuple[str, ...]]:
    if not pattern.startswith("/"):
        raise ValueError(f"route pattern {pattern!r}: must start with '/'")
    parts: list[str] = []
    names: list[str] = []
    for segment in pattern[1:].split("/"):
        m = _PARAM_SEGMENT_RE.match(segment)
        if m is not None:
            if m.group(1) in names:
                raise ValueError(f"route pattern {pattern!r}: parameter {{{m.group(1)}}} appears twice")
            names.append(m.group(1))
            parts.append(r"([^/]+)")
        elif "{" in segment or "}" in segment:
            raise ValueError(f"route pattern {pattern!r}: a parameter must be a whole segment, "
                             f"like {{name}}; got {segment!r}")
        else:
            parts.append(re.escape(segment))
    return re.compile("/" + "/".join(parts)), tuple(names)


def _error_body(status: int, message: str, code: str | None = None) -> dict[str, Any]:
    return {"error": {"code": code or ERROR_CODES.get(status, "error"), "message": message}}


class _Metrics:
    def __init__(self, registry: CollectorRegistry | None) -> None:
        # None when no registry was given (then nothing is recorded)
        self.requests: Counter | None = None
        self.latency: Histogram | None = None
        if registry is not None:
            self.requests = Counter("escaler_api_requests_total",
                                    "Requests to the manager's API server by route, method and HTTP code.",
                                    ["route", "method", "code"], registry=registry)
            self.latency = Histogram("escaler_api_request_duration_seconds",
                                     "Time to answer a request to the manager's API server "
                                     "(authentication and authorization included).",
                                     ["route", "method"], registry=registry)

    def observe(self, route: str, method: str, code: int, seconds: float) -> None:
        if self.requests is not None and self.latency is not None:
            self.requests.labels(route=route, method=method, code=str(code)).inc()
            self.latency.labels(route=route, method=method).observe(seconds)


class _Handler(BaseHTTPRequestHandler):
    server_version = "escaler-api"
    protocol_version = "HTTP/1.1"
    # set per server in ApiServer.serve()
    api: ApiServer

    # ------------------------------------------------------------------ responses

    def _send(self, status: int, body: bytes, *, ctype: str = "application/json",
              headers: Mapping[str, str] | None = None, close: bool = False) -> None:
        self.send_response(status)
        if body:
            self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Cache-Control", "no-store")
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        if self.command != "HEAD" and body:
            self.wfile.write(body)

    def _error(self, status: int, message: str, *, code: str | None = None,
               headers: Mapping[str, str] | None = None, close: bool = False) -> int:
        self._send(status, json.dumps(_error_body(status, message, code)).encode(),
                   headers=headers, close=close)
        return status

    # ------------------------------------------------------------------ dispatch

    def _handle(self) -> None:
        started = time.monotonic()
        method = self.command
        path, _, raw_query = self.path.partition("?")
        label = _UNMATCHED
        code = 500
        try:
            if path == HEALTHZ_PATH:
                label = HEALTHZ_PATH
                if method in ("GET", "HEAD"):
                    self._send(200, b"ok", ctype="text/plain; charset=utf-8")
                    code = 200
                else:
                    code = self._error(405, f"{method} {path}: use GET", headers={"Allow": "GET, HEAD"},
                                       close=True)
                return
            route, params, allowed = self.api._match(method, path)
            if route is None:
                if allowed:
                    code = self._error(405, f"{method} is not allowed on {path}; allowed: "
                                       + ", ".join(allowed), headers={"Allow": ", ".join(allowed)},
                                       close=True)
                else:
                    code = self._error(404, f"no route for {path}", close=True)
                return
            label = route.pattern
            code = self._serve_route(route, params, path, raw_query)
        except (BrokenPipeError, ConnectionResetError, TimeoutError) as exc:
            _log.debug("API client went away during %s %s: %s", method, path, exc)
            self.close_connection = True
        except Exception:
            # a bug here (not in a handler) must not kill the connection thread silently
            _log.exception("API server: %s %s failed", method, path)
            self.close_connection = True
        finally:
            self.api._metrics.observe(label, method, code, time.monotonic() - started)

    def _serve_route(self, route: _Route, params: dict[str, str], path: str, raw_query: str) -> int:
        # Body framing is checked before authentication: it costs nothing and reads nothing.
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            return self._error(411, "a request body must be sent with Content-Length", close=True)
        length_header = self.headers.get("Content-Length")
        try:
            length = int(length_header) if length_header is not None else 0
        except ValueError:
            length = -1
        if length < 0:
            return self._error(400, f"invalid Content-Length {length_header!r}", close=True)
        if length > MAX_BODY_BYTES:
            return self._error(413, f"request body of {length} bytes is larger than the "
                               f"{MAX_BODY_BYTES} bytes allowed", close=True)
        # An early answer leaves the body unread: close the connection rather than read it.
        close = length > 0
        user: UserInfo | None = None
        authenticator = self.api.authenticator
        if not route.public and authenticator is not None:
            token = self._bearer_token()
            if token is None:
                return self._error(401, "a bearer token is required (Authorization: Bearer <token>)",
                                   headers={"WWW-Authenticate": "Bearer"}, close=close)
            try:
                user = authenticator.authenticate(token)
                decision = (AccessDecision(True) if user is None or route.authz is None
                            else authenticator.authorize(user, route.authz.substitute(params)))
            except ReviewUnavailable as exc:
                return self._error(503, f"cannot check the request's credentials now: {exc}",
                                   headers={"Retry-After": str(RETRY_AFTER_SECONDS)}, close=close)
            if user is None:
                return self._error(401, "the bearer token is not valid",
                                   headers={"WWW-Authenticate": "Bearer"}, close=close)
            if not decision.allowed:
                assert route.authz is not None
                message = (f'user "{user.username}" cannot '
                           f"{route.authz.substitute(params).describe()}")
                if decision.reason:
                    message += f": {decision.reason}"
                _log.info("API request denied: %s", message)
                return self._error(403, message, close=close)
        body: Any = None
        if length > 0:
            raw = self.rfile.read(length)
            if len(raw) < length:
                self.close_connection = True
                return 400
            try:
                body = json.loads(raw)
            except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError
                return self._error(400, f"request body is not valid JSON: {exc}")
        request = ApiRequest(
            method=self.command, path=path, params=params,
            query=_first_values(raw_query),
            headers={k.lower(): v for k, v in self.headers.items() if k.lower() != "authorization"},
            body=body, user=user,
        )
        try:
            response = route.handler(request)
            payload = b"" if response.body is None else json.dumps(
                response.body, separators=(",", ":")).encode()
        except ApiError as exc:
            return self._error(exc.status, exc.message, code=exc.code)
        except Exception:
            _log.exception("API handler for %s %s failed", route.method, route.pattern)
            return self._error(500, f"internal error serving {route.method} {path}")
        self._send(response.status, payload, headers=response.headers)
        return response.status

    def _bearer_token(self) -> str | None:
        value = self.headers.get("Authorization") or ""
        scheme, _, token = value.strip().partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            return None
        return token

    do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = do_OPTIONS = _handle

    def log_message(self, format: str, *args: Any) -> None:
        _log.debug("%s - %s", self.address_string(), format % args)


def _first_values(raw_query: str) -> dict[str, str]:
    query: dict[str, str] = {}
    for key, value in parse_qsl(raw_query, keep_blank_values=True):
        query.setdefault(key, value)
    return query


class ApiServer(ServingLifecycle):
    """The manager's authenticated JSON API server; see the module docstring."""

    def __init__(
        self,
        bind_address: str,
        *,
        cert_file: str | None = None,
        key_file: str | None = None,
        authenticator: Authenticator | None,
        registry: CollectorRegistry | None = None,
        name: str = "api",
    ) -> None:
        address = parse_bind_address(bind_address)
        if address is None:
            raise ValueError(f"ApiServer: bind address {bind_address!r} disables the server; "
                             "do not create one instead")
        if (cert_file is None) != (key_file is None):
            raise ValueError("ApiServer: cert_file and key_file go together (both or neither)")
        # for logs and the manager's thread name
        self.name = name
        # (host, port, ipv6); fixed
        self.address = address
        # the TLS material (reloaded on change); None = plain HTTP
        self.certs = (CertificateReloader(cert_file, key_file, name=name)
                      if cert_file is not None and key_file is not None else None)
        # who checks credentials; None = authentication off (every route is public)
        self.authenticator = authenticator
        # request metrics (no-op without a registry)
        self._metrics = _Metrics(registry)
        # guards _routes, _server and _thread
        self._mu = threading.Lock()
        # the routes in registration order; replaced (never mutated) so readers need no lock
        self._routes: tuple[_Route, ...] = ()
        # the bound server; None before serve() and after shutdown()
        self._server: ConnectionServer | None = None
        # the accept loop's thread; None before serve()
        self._thread: threading.Thread | None = None
        # set while serving (for a readiness check)
        self.serving = threading.Event()

    @property
    def tls(self) -> bool:
        return self.certs is not None

    @property
    def port(self) -> int | None:
        with self._mu:
            return int(self._server.server_address[1]) if self._server is not None else None

    @property
    def routes(self) -> list[tuple[str, str]]:
        """``(method, pattern)`` of every route, in registration order."""
        return [(r.method, r.pattern) for r in self._routes]

    # ------------------------------------------------------------------ routes

    def add_route(
        self,
        method: str,
        pattern: str,
        handler: ApiHandler,
        *,
        authz: ResourceAttributes | None = None,
        public: bool = False,
    ) -> None:
        """Serve ``method pattern`` with ``handler``; see the module docstring.

        ``authz``: the attributes the caller must be allowed (``{param}`` placeholders are
        filled from the path); ``None`` = any authenticated caller. ``public``: no credentials
        at all (then ``authz`` must be ``None``).
        """
        if not _METHOD_RE.match(method):
            raise ValueError(f"route {method} {pattern}: method must be an upper-case HTTP method")
        if public and authz is not None:
            raise ValueError(f"route {method} {pattern}: a public route cannot require authz")
        if pattern == HEALTHZ_PATH:
            raise ValueError(f"route {method} {pattern}: {HEALTHZ_PATH} is served by the server itself")
        regex, params = _compile(pattern)
        if authz is not None:
            unknown = authz.placeholders() - set(params)
            if unknown:
                raise ValueError(f"route {method} {pattern}: authz names "
                                 f"{', '.join(sorted('{' + p + '}' for p in unknown))}, "
                                 "which the pattern does not have")
        route = _Route(method, pattern, regex, params, handler, authz, public)
        with self._mu:
            for other in self._routes:
                if other.method == method and other.shape == route.shape:
                    raise ValueError(f"route {method} {pattern}: already served as {other.method} "
                                     f"{other.pattern}")
            self._routes = (*self._routes, route)
        _log.debug("API route %s %s added", method, pattern)

    def _match(self, method: str, path: str) -> tuple[_Route | None, dict[str, str], list[str]]:
        """(route, params, []) on a match; (None, {}, allowed methods) when only the path matches."""
        allowed: list[str] = []
        for route in self._routes:
            m = route.regex.fullmatch(path)
            if m is None:
                continue
            if route.method == method:
                return route, {name: unquote(v) for name, v in zip(route.params, m.groups(), strict=True)}, []
            if route.method not in allowed:
                allowed.append(route.method)
        return None, {}, allowed

    # ------------------------------------------------------------------ lifecycle

    def serve(self) -> None:
        """Load the certificate (if any), bind, and serve from a daemon thread; raises on failure."""
        if self.certs is not None:
            self.certs.load()
        host, port, ipv6 = self.address
        handler = type("Handler", (_Handler,), {"api": self})
        with self._mu:
            if self._server is not None:
                raise RuntimeError("ApiServer: already serving")
            server = server_class(ipv6)((host, port), handler)
            server.certs = self.certs
            server.connection_timeout = CONNECTION_TIMEOUT_SECONDS
            server.log_name = self.name
            self._server = server
            self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1},
                                            name=f"http-{self.name}", daemon=True)
            self._thread.start()
        self.serving.set()
        _log.info("serving the API on %s:%d over %s (%s)", host or "*", self.port or 0,
                  "HTTPS" if self.certs is not None else "HTTP",
                  ", ".join(f"{m} {p}" for m, p in self.routes) or "no routes")
        if self.authenticator is None:
            _log.warning("the API server does not authenticate requests: anyone who can reach "
                         "%s:%d may call every route", host or "*", self.port or 0)
        elif self.certs is None:
            _log.warning("the API server serves plain HTTP: bearer tokens cross the network "
                         "unencrypted (give it a serving certificate)")

