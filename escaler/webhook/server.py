"""``WebhookServer``: the HTTPS server the API server calls for admission (SPEC §10).

Contract:

* Serves TLS (1.2 or later) with the certificate and key at ``cert_file``/``key_file`` (a
  mounted Secret — cert-manager's or ``hack/webhook-certs.sh``'s ``tls.crt``/``tls.key``). The
  files are re-read when they change (size, mtime or inode — a Secret volume update swaps a
  symlink), checked on each new connection: a rotated certificate is picked up without a
  restart. A pair that fails to load keeps the previous one (logged once per change).
* Routes: ``POST <path>`` for each ``Route`` (an AdmissionReview in, one out — see
  ``admission.review``); ``GET /healthz`` → ``200 ok``. Another method on a route is 405,
  another path 404. A body must carry ``Content-Length`` (411 otherwise) and be at most
  ``MAX_BODY_BYTES`` (413). No request ever gets a 500 from a handler bug: ``review`` answers
  every body.
* One thread per connection (daemon), HTTP/1.1 keep-alive; the TLS handshake runs in that
  thread, not in the accept loop, so a client that stalls mid-handshake delays only itself
  (``escaler.runtime.tls``, shared with the manager's API server).
  Every socket has a ``CONNECTION_TIMEOUT_SECONDS`` timeout (an idle keep-alive connection is
  closed after it).
* A ``Runnable``: ``start(stop)`` binds (raising ``OSError``/``ssl.SSLError`` on a busy port or a
  bad certificate, which fails the manager's start), serves until ``stop`` is set, then closes.
  ``Manager.add_webhook(server)`` runs it before the caches and stops it last. ``serve()`` and
  ``shutdown()`` do the same without blocking, for tests; ``port`` is the bound port.
* Metrics, when a ``CollectorRegistry`` is given, use controller-runtime's names:
  ``controller_runtime_webhook_requests_total{webhook,code}``,
  ``controller_runtime_webhook_requests_in_flight{webhook}`` and
  ``controller_runtime_webhook_latency_seconds{webhook}``.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from http.server import BaseHTTPRequestHandler
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from escaler.runtime.server import parse_bind_address
from escaler.runtime.tls import (
    DEFAULT_CONNECTION_TIMEOUT_SECONDS,
    CertificateReloader,
    ConnectionServer,
    ServingLifecycle,
    server_class,
)
from escaler.webhook.admission import Route, Validate, review

__all__ = [
    "CONNECTION_TIMEOUT_SECONDS",
    "DEFAULT_WEBHOOK_PORT",
    "MAX_BODY_BYTES",
    "CertificateReloader",
    "WebhookServer",
]

DEFAULT_WEBHOOK_PORT = 9443
# an AdmissionReview carries the object and the old object, each at most ~3 MiB in etcd
MAX_BODY_BYTES = 8 * 1024 * 1024
# handshake, request read and keep-alive idle bound per connection
CONNECTION_TIMEOUT_SECONDS = DEFAULT_CONNECTION_TIMEOUT_SECONDS
# how long shutdown() waits for the accept loop to finish its current poll

_log = logging.getLogger(__name__)

# (status, content type, body)
Response = tuple[int, str, bytes]
# POST handler: body → response
PostHandler = Callable[[bytes], Response]


class _Metrics:
    def __init__(self, registry: CollectorRegistry | None, name: str) -> None:
        # the webhook label value
        self.name = name
        # None when no registry was given (then nothing is recorded)
        self.requests: Counter | None = None
        self.in_flight: Gauge | None = None
        self.latency: Histogram | None = None
        if registry is not None:
            self.requests = Counter("controller_runtime_webhook_requests_total",
                                    "Total number of admission requests by HTTP status code.",
                                    ["webhook", "code"], registry=registry)
            self.in_flight = Gauge("controller_runtime_webhook_requests_in_flight",
                                   "Current number of admission requests being served.",
                                   ["webhook"], registry=registry)
            self.latency = Histogram("controller_runtime_webhook_latency_seconds",
                                     "Histogram of the latency of processing admission requests",
                                     ["webhook"], registry=registry)

    def observe(self, path: str, code: int, seconds: float) -> None:
        if self.requests is not None and self.latency is not None:
            self.requests.labels(webhook=path, code=str(code)).inc()
            self.latency.labels(webhook=path).observe(seconds)

    def flight(self, path: str, delta: int) -> None:
        if self.in_flight is not None:
            self.in_flight.labels(webhook=path).inc(delta)


class _Handler(BaseHTTPRequestHandler):
    server_version = "escaler-webhook"
    protocol_version = "HTTP/1.1"
    timeout = CONNECTION_TIMEOUT_SECONDS
    # set per server in WebhookServer.serve()
    posts: Mapping[str, PostHandler] = {}
    metrics: _Metrics

    def _send(self, status: int, ctype: str, body: bytes, *, close: bool = False,
              headers: Sequence[tuple[str, str]] = ()) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("X-Content-Type-Options", "nosniff")
        for key, value in headers:
            self.send_header(key, value)
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _text(self, status: int, text: str, **kw: Any) -> None:
        self._send(status, "text/plain; charset=utf-8", text.encode(), **kw)

    def _path(self) -> str:
        return self.path.split("?", 1)[0]

    def do_GET(self) -> None:
        path = self._path()
        if path == "/healthz":
            self._text(200, "ok")
        elif path in self.posts:
            self._text(405, "use POST\n", headers=[("Allow", "POST")])
        else:
            self._text(404, "404 page not found\n")

    do_HEAD = do_GET

    def do_POST(self) -> None:
        path = self._path()
        handler = self.posts.get(path)
        if handler is None:
            self._text(404, "404 page not found\n", close=True)
            return
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            self._text(411, "Content-Length required\n", close=True)
            return
        length_header = self.headers.get("Content-Length")
        try:
            length = int(length_header) if length_header is not None else -1
        except ValueError:
            length = -1
        if length < 0:
            self._text(411, "Content-Length required\n", close=True)
            return
        if length > MAX_BODY_BYTES:
            self._text(413, f"body larger than {MAX_BODY_BYTES} bytes\n", close=True)
            return
        started = time.monotonic()
        self.metrics.flight(path, 1)
        try:
            body = self.rfile.read(length)
            if len(body) < length:
                self.close_connection = True
                return
            status, ctype, payload = handler(body)
            self._send(status, ctype, payload)
            self.metrics.observe(path, status, time.monotonic() - started)
        finally:
            self.metrics.flight(path, -1)

    def _not_allowed(self) -> None:
        self._text(405, "method not allowed\n", headers=[("Allow", "GET, HEAD, POST")], close=True)

    do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _not_allowed

    def log_message(self, format: str, *args: Any) -> None:
        _log.debug("%s - %s", self.address_string(), format % args)


def _json(status_and_doc: tuple[int, dict[str, Any]]) -> Response:
    status, doc = status_and_doc
    return status, "application/json", json.dumps(doc, separators=(",", ":")).encode()


def _post_handler(route: Route, validate: Validate) -> PostHandler:
    def handle(body: bytes) -> Response:
        return _json(review(route, body, validate))
    return handle


class WebhookServer(ServingLifecycle):
    """The admission webhook's HTTPS server; see the module docstring."""

    def __init__(
        self,
        routes: Mapping[Route, Validate],
        *,
        cert_file: str,
        key_file: str,
        bind_address: str = f":{DEFAULT_WEBHOOK_PORT}",
        registry: CollectorRegistry | None = None,
        name: str = "webhook",
    ) -> None:
        address = parse_bind_address(bind_address)
        if address is None:
            raise ValueError(f"WebhookServer: bind address {bind_address!r} disables the server; "
                             "do not create one instead")
        # for logs and the manager's thread name
        self.name = name
        # (host, port, ipv6); fixed
        self.address = address
        # path → POST handler; fixed
        self._posts: dict[str, PostHandler] = {
            route.path: _post_handler(route, validate) for route, validate in routes.items()
        }
        # the TLS material, reloaded on change
        self.certs = CertificateReloader(cert_file, key_file, name=name)
        # request metrics (no-op without a registry)
        self._metrics = _Metrics(registry, name)
        # guards _server/_thread
        self._mu = threading.Lock()
        # the bound server; None before serve() and after shutdown()
        self._server: ConnectionServer | None = None
        # the accept loop's thread; None before serve()
        self._thread: threading.Thread | None = None
        # set once serving (for a readiness check)
        self.serving = threading.Event()

    @property
    def paths(self) -> list[str]:
        return sorted(self._posts)

    @property
    def port(self) -> int | None:
        with self._mu:
            return int(self._server.server_address[1]) if self._server is not None else None

    def serve(self) -> None:
        """Load the certificate, bind, and serve from a daemon thread; raises on failure."""
        self.certs.load()
        host, port, ipv6 = self.address
        handler = type("Handler", (_Handler,), {"posts": self._posts, "metrics": self._metrics})
        server_cls = server_class(ipv6)
        with self._mu:
            if self._server is not None:
                raise RuntimeError("WebhookServer: already serving")
            server = server_cls((host, port), handler)
            server.certs = self.certs
            server.connection_timeout = CONNECTION_TIMEOUT_SECONDS
            server.log_name = self.name
            self._server = server
            self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1},
                                            name=f"https-{self.name}", daemon=True)
            self._thread.start()
        self.serving.set()
        _log.info("serving the admission webhook on %s:%d (%s)", host or "*", self.port or 0,
                  ", ".join(self.paths))

