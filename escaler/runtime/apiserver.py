"""``ApiServer``: the manager's authenticated JSON API (``--api-bind-address``,
docs/guide/elasticscaler.md#the-triggers, docs/slo.md).

Reconcilers register routes on it during setup; the server knows no route of its own but
``GET /healthz``. The ElasticScaler reconciler adds the SignalTrigger push path::

    mgr.api_server.add_route(
        "POST", "/signal/v1/namespaces/{namespace}/elasticscalers/{name}", handle_signal,
        authz=ResourceAttributes(verb="update", group="elasticscaler.io", resource="elasticscalers",
                                 subresource="signal", namespace="{namespace}", name="{name}"))

Contract:

* Serves HTTPS (TLS 1.2+, the handshake in the connection's own thread) by default: with
  ``cert_file``/``key_file`` (re-read when they change — ``runtime.tls``), else with a
  self-signed pair made by ``serve()`` (its SHA-256 fingerprint logged and kept in
  ``self_signed_fingerprint``). Plain HTTP only when asked: ``insecure=True`` (``--api-insecure``).
* Connections as ``runtime.httpbase`` serves them (``API_LIMITS``): at most 64 at once (503 with
  ``Retry-After`` beyond), a request line + headers + body must arrive within 10 s in total (408),
  keep-alive.
* Routes: ``add_route(method, pattern, handler, *, authz=None, public=False)``. A pattern is
  literal segments and ``{param}`` segments (one path segment each, percent-decoded into
  ``ApiRequest.params``). Registration order decides between overlapping patterns; the same
  method on the same pattern shape twice is refused. Routes may be added while serving.
* Per request, in this order: no matching path → 404; path matches but not the method → 405 (with
  ``Allow``); chunked body → 411; ``Content-Length`` above ``MAX_BODY_BYTES`` → 413 (the body is
  never read); a body whose ``Content-Type`` is present and not JSON → 415; then, unless the route
  is ``public`` or the server has no authenticator, the ``runtime.authfilter`` filter:
  ``Authorization: Bearer <token>`` is authenticated by a TokenReview for the ``escaler`` audience
  (missing or invalid → 401 with ``WWW-Authenticate: Bearer``; a client past its budget of failed
  authentications → 429 without a review) and, when the route has ``authz``, the user is authorized
  for those attributes with path params substituted (denied → 403 naming the user, verb and
  resource); a review that cannot be made → 503 with ``Retry-After`` saying only "authentication
  unavailable" (the cause is logged; never cached, never a denial); then the body is read and parsed
  as JSON (any failure, ``RecursionError`` and bad UTF-8 included → 400); then the handler runs.
* A handler returns an ``ApiResponse`` (JSON-encoded body) or raises ``ApiError`` for a 4xx (or a
  503) of its own, with headers if it needs them (``Retry-After``); any other exception is logged
  with its traceback and answered 500 — the server keeps serving. Every error body is
  ``{"error": {"code": ..., "message": ...}}``.
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
embedding); with ``--api-insecure``, bearer tokens cross the network in clear text (a warning is
logged).

RBAC for ``KubeAuthenticator``: see ``escaler.runtime.authn`` (create on ``tokenreviews`` and
``subjectaccessreviews``).
"""

from __future__ import annotations

import json
import logging
import re
import tempfile
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, unquote

from prometheus_client import CollectorRegistry, Counter, Histogram

from escaler.clock import Clock
from escaler.runtime.authfilter import FailureLimiter, RequestAuth
from escaler.runtime.authn import Authenticator, ResourceAttributes, UserInfo
from escaler.runtime.httpbase import (
    BaseHandler,
    ConnectionServer,
    HttpError,
    Limits,
    ServingLifecycle,
    parse_json,
    server_class,
)
from escaler.runtime.server import parse_bind_address
from escaler.runtime.tls import CertificateReloader, self_signed

__all__ = [
    "API_LIMITS",
    "ERROR_CODES",
    "MAX_BODY_BYTES",
    "ApiError",
    "ApiHandler",
    "ApiRequest",
    "ApiResponse",
    "ApiServer",
]

# largest request body accepted (a signal is a few bytes; a decision query has none)
MAX_BODY_BYTES = 64 * 1024
# connections at once, whole-request deadline, body cap
API_LIMITS = Limits(max_connections=64, request_deadline=10.0, max_body_bytes=MAX_BODY_BYTES)
# how a client gets a token this server accepts (in a 401)
AUDIENCE_HINT = ("tokens must be issued for the escaler audience: "
                 "kubectl create token <serviceaccount> --audience escaler")
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
    408: "request_timeout",
    409: "conflict",
    410: "gone",
    411: "length_required",
    413: "payload_too_large",
    415: "unsupported_media_type",
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

    def __init__(self, status: int, message: str, code: str | None = None,
                 headers: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code or ERROR_CODES.get(status, "error")
        self.message = message
        # sent with the error (e.g. Retry-After on a 429 or 503)
        self.headers = dict(headers or {})


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


def _json_error(status: int, message: str, code: str | None = None) -> tuple[str, bytes]:
    return "application/json", json.dumps(_error_body(status, message, code)).encode()


class _Handler(BaseHandler):
    server_version = "escaler-api"
    # set per server in ApiServer.serve()
    api: ApiServer

    def serve_request(self) -> None:
        method = self.command
        path, _, raw_query = self.path.partition("?")
        if path == HEALTHZ_PATH:
            self.route_label = HEALTHZ_PATH
            if method not in ("GET", "HEAD"):
                raise HttpError(405, f"{method} {path}: use GET", headers={"Allow": "GET, HEAD"}, close=True)
            self.reply(200, b"ok", ctype="text/plain; charset=utf-8")
            return
        route, params, allowed = self.api._match(method, path)
        if route is None:
            if allowed:
                raise HttpError(405, f"{method} is not allowed on {path}; allowed: " + ", ".join(allowed),
                                headers={"Allow": ", ".join(allowed)}, close=True)
            raise HttpError(404, f"no route for {path}", close=True)
        self.route_label = route.pattern
        self._serve_route(route, params, path, raw_query)

    def _serve_route(self, route: _Route, params: dict[str, str], path: str, raw_query: str) -> None:
        # Body framing is checked before authentication: it costs nothing and reads nothing.
        length = self.content_length(required=False)
        if length > 0:
            self.require_json()
        user: UserInfo | None = None
        if not route.public and self.api.auth is not None:
            user = self.api.auth.check(self.bearer_token(), self.client_host(),
                                       route.authz.substitute(params) if route.authz is not None else None)
        raw = self.read_body(length)
        body = parse_json(raw) if length > 0 else None
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
            raise HttpError(exc.status, exc.message, code=exc.code, headers=exc.headers) from None
        except Exception:
            _log.exception("API handler for %s %s failed", route.method, route.pattern)
            raise HttpError(500, f"internal error serving {route.method} {path}") from None
        self.reply(response.status, payload, headers=response.headers)


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
        insecure: bool = False,
        authenticator: Authenticator | None,
        registry: CollectorRegistry | None = None,
        name: str = "api",
        limits: Limits = API_LIMITS,
        failure_limiter: FailureLimiter | None = None,
        clock: Clock | None = None,
    ) -> None:
        address = parse_bind_address(bind_address)
        if address is None:
            raise ValueError(f"ApiServer: bind address {bind_address!r} disables the server; "
                             "do not create one instead")
        if (cert_file is None) != (key_file is None):
            raise ValueError("ApiServer: cert_file and key_file go together (both or neither)")
        if insecure and cert_file is not None:
            raise ValueError("ApiServer: insecure (plain HTTP) and a serving certificate exclude each other")
        # for logs and the manager's thread name
        self.name = name
        # (host, port, ipv6); fixed
        self.address = address
        # plain HTTP, asked for explicitly; fixed
        self.insecure = insecure
        # the TLS material (reloaded on change); None = plain HTTP, or a self-signed pair made by serve()
        self.certs = (CertificateReloader(cert_file, key_file, name=name)
                      if cert_file is not None and key_file is not None else None)
        # SHA-256 of the serving certificate when serve() generated it (else None)
        self.self_signed_fingerprint: str | None = None
        # holds the generated pair while serving; None otherwise
        self._self_signed_dir: tempfile.TemporaryDirectory[str] | None = None
        # who checks credentials; None = authentication off (every route is public)
        self.authenticator = authenticator
        self.auth = (RequestAuth(authenticator, failure_limiter or FailureLimiter(clock=clock), name=name,
                                 hint=AUDIENCE_HINT) if authenticator is not None else None)
        self.limits = limits
        self._clock = clock
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
        return not self.insecure

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

    def _serving_certs(self) -> CertificateReloader | None:
        """The certificate to serve: the given pair, a fresh self-signed one, or None (insecure)."""
        if self.insecure:
            return None
        if self.certs is None:
            self._self_signed_dir = tempfile.TemporaryDirectory(prefix="escaler-api-tls-")
            host = self.address[0]
            cert_file, key_file, fingerprint = self_signed(self._self_signed_dir.name,
                                                           [host] if host else [])
            self.certs = CertificateReloader(cert_file, key_file, name=self.name)
            self.self_signed_fingerprint = fingerprint
            _log.warning("the API server has no serving certificate: serving a self-signed one "
                         "(SHA-256 fingerprint %s); give it one with --api-cert-dir", fingerprint)
        self.certs.load()
        return self.certs

    def serve(self) -> None:
        """Load (or make) the certificate, bind, and serve from a daemon thread; raises on failure."""
        certs = self._serving_certs()
        host, port, ipv6 = self.address
        handler = type("Handler", (_Handler,), {"api": self})
        with self._mu:
            if self._server is not None:
                raise RuntimeError("ApiServer: already serving")
            server = server_class(ipv6)((host, port), handler, limits=self.limits, certs=certs,
                                        clock=self._clock, log_name=self.name, render_error=_json_error,
                                        observer=self._metrics.observe)
            self._start_thread(server, f"http-{self.name}")
        self.serving.set()
        _log.info("serving the API on %s:%d over %s (%s)", host or "*", self.port or 0,
                  "HTTPS" if certs is not None else "HTTP",
                  ", ".join(f"{m} {p}" for m, p in self.routes) or "no routes")
        if self.authenticator is None:
            _log.warning("the API server does not authenticate requests: anyone who can reach "
                         "%s:%d may call every route", host or "*", self.port or 0)
        elif certs is None:
            _log.warning("the API server serves plain HTTP (--api-insecure): bearer tokens cross "
                         "the network unencrypted")

    def shutdown(self) -> None:
        super().shutdown()
        if self._self_signed_dir is not None:
            self._self_signed_dir.cleanup()
            self._self_signed_dir = None
            self.certs = None
