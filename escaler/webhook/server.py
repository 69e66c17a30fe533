"""``WebhookServer``: the HTTPS server the API server calls for admission
(docs/install.md#the-admission-webhook).

Contract:

* Serves TLS (1.2 or later) with the certificate and key at ``cert_file``/``key_file`` (a
  mounted Secret — cert-manager's or ``hack/webhook-certs.sh``'s ``tls.crt``/``tls.key``). The
  files are re-read when they change (size, mtime or inode — a Secret volume update swaps a
  symlink), checked on each new connection: a rotated certificate is picked up without a
  restart. A pair that fails to load keeps the previous one (logged once per change).
* Routes: ``POST <path>`` for each ``Route`` (an AdmissionReview in, one out — see
  ``admission.review``); ``GET /healthz`` → ``200 ok``. Another method on a route is 405,
  another path 404. A body must carry ``Content-Length`` (411 otherwise) and be at most
  ``MAX_BODY_BYTES`` (413; kube-apiserver's own request cap is 3 MiB, an AdmissionReview of a
  custom resource fits in 2), and its ``Content-Type`` must be JSON when present (415; the API
  server sends ``application/json``). No request ever gets a 500 from a handler bug: ``review`` answers
  every body, and a body that is not JSON (bad UTF-8, nested too deeply) is a 400.
* Connections as ``escaler.runtime.httpbase`` serves them (shared with the API server, probes
  and metrics): one bounded thread per connection with the TLS handshake in it (a client that
  stalls mid-handshake delays only itself), ``WEBHOOK_LIMITS.max_connections`` at once (503
  beyond), and a total deadline per request (an idle keep-alive connection is closed after it).
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
from collections.abc import Callable, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from escaler.runtime.httpbase import (
    BaseHandler,
    ConnectionServer,
    HttpError,
    Limits,
    ServingLifecycle,
    server_class,
)
from escaler.runtime.server import parse_bind_address
from escaler.runtime.tls import CertificateReloader
from escaler.webhook.admission import Route, Validate, review

__all__ = [
    "DEFAULT_WEBHOOK_PORT",
    "MAX_BODY_BYTES",
    "WEBHOOK_LIMITS",
    "CertificateReloader",
    "WebhookServer",
]

DEFAULT_WEBHOOK_PORT = 9443
# an AdmissionReview of one of our custom resources (object + old object) fits well in 2 MiB
MAX_BODY_BYTES = 2 * 1024 * 1024
# connections at once (the API server's few), whole-request deadline, body cap. No per-client share:
# the one legitimate client is the API server, whose burst of reviews may come from one address
# (failurePolicy Fail: a 503 refuses a user's write); the idle timeout and the connection lifetime
# still apply
WEBHOOK_LIMITS = Limits(max_connections=32, request_deadline=10.0, max_body_bytes=MAX_BODY_BYTES,
                        max_per_client=32)

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


class _Handler(BaseHandler):
    server_version = "escaler-webhook"
    # set per server in WebhookServer.serve()
    posts: Mapping[str, PostHandler] = {}
    metrics: _Metrics

    def serve_request(self) -> None:
        path = self.path.split("?", 1)[0]
        if self.command in ("GET", "HEAD"):
            self.read_body(self.content_length(required=False))
            if path == "/healthz":
                self.reply(200, b"ok", ctype="text/plain; charset=utf-8")
            elif path in self.posts:
                raise HttpError(405, "use POST", headers={"Allow": "POST"})
            else:
                raise HttpError(404, "404 page not found")
            return
        if self.command != "POST":
            raise HttpError(405, "method not allowed", headers={"Allow": "GET, HEAD, POST"}, close=True)
        handler = self.posts.get(path)
        if handler is None:
            raise HttpError(404, "404 page not found", close=True)
        length = self.content_length(required=True)
        self.require_json()
        started = self.server.clock.monotonic()
        self.metrics.flight(path, 1)
        try:
            body = self.read_body(length)
            status, ctype, payload = handler(body)
            self.reply(status, payload, ctype=ctype)
            self.metrics.observe(path, status, self.server.clock.monotonic() - started)
        finally:
            self.metrics.flight(path, -1)


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
        limits: Limits = WEBHOOK_LIMITS,
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
        self.limits = limits
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

    def serve(self) -> None:
        """Load the certificate, bind, and serve from a daemon thread; raises on failure."""
        self.certs.load()
        host, port, ipv6 = self.address
        handler = type("Handler", (_Handler,), {"posts": self._posts, "metrics": self._metrics})
        server_cls = server_class(ipv6)
        with self._mu:
            if self._server is not None:
                raise RuntimeError("WebhookServer: already serving")
            server = server_cls((host, port), handler, limits=self.limits, certs=self.certs,
                                log_name=self.name)
            self._start_thread(server, f"https-{self.name}")
        self.serving.set()
        _log.info("serving the admission webhook on %s:%d (%s)", host or "*", self.port or 0,
                  ", ".join(self.paths))

