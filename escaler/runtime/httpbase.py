"""The one HTTP base of the manager's four servers: probes, metrics, the signal API, the webhook.

Contract:

* ``Limits`` bound every connection: at most ``max_connections`` are served at once, and at most
  ``max_per_client`` from one client address (default half the cap: one client — a tenant's pod
  holding keep-alive connections open with a cheap request every few seconds — can never take
  every slot; the connections beyond are answered 503 like those beyond the cap); a request
  (its line, headers and body) must arrive **in full** within ``request_deadline`` seconds of the
  moment the server starts waiting for it — a total deadline, not a per-read timeout, so a client
  that trickles one byte a second is cut off at the deadline; ``max_body_bytes`` caps a body
  (``0``: the server takes no body at all). On a kept-alive connection the first byte of the
  next request must come within ``idle_timeout`` (then the connection is closed: an idle
  keep-alive is not a request, and its wait is not re-armed to the request deadline), and a
  connection older than ``max_connection_seconds`` is closed after the answer it is serving
  (``Connection: close``), so no client keeps a slot forever. The deadlines are measured on the
  injected ``Clock`` (tests step a ``FakeClock``); the socket timeout of every read is the time
  left.
* ``ConnectionServer`` accepts on one thread and serves each connection on its own daemon thread,
  TLS handshake included (a stalled handshake delays only itself; ``certs`` set = HTTPS, the
  context taken from ``certs.current()`` per connection, so a rotated certificate applies to the
  next one). Beyond ``max_connections`` a connection is answered ``503`` with ``Retry-After`` and
  ``Connection: close`` by one of at most ``OVERFLOW_RESPONDERS`` short-lived threads (bounded by
  ``OVERFLOW_DEADLINE_SECONDS``), and beyond those it is closed at once: threads stay bounded by
  ``max_connections + OVERFLOW_RESPONDERS`` whatever the load.
* ``BaseHandler`` is the request side: HTTP/1.1 with keep-alive; ``reply()`` is the one ``_send``
  (``Content-Length``, ``nosniff``, ``no-store``); ``read_body()`` enforces framing (chunked →
  411, missing ``Content-Length`` where a body is required → 411, malformed → 400, above the cap →
  413, the body never read) and ``parse_json()`` turns *any* JSON failure — syntax, bad UTF-8,
  ``RecursionError`` from ``[[[[...]]]]`` — into a 400 naming the problem; ``require_json()`` is
  415 for a body whose ``Content-Type`` is present and not JSON (``is_json_media_type``: the
  SLO API's rule, so a form post is never parsed as JSON by accident). A handler raises
  ``HttpError`` for a 4xx/5xx of its own; any other exception is logged and answered 500, and the
  connection thread lives on. A request past its deadline is answered ``408`` and closed (or just
  closed if not one byte of it arrived: an idle keep-alive connection). Error bodies come from the
  server's ``render_error`` (JSON for the API server, text elsewhere).
* After each request, the server's ``observer`` (when set) gets ``(route label, method, code,
  seconds)`` — each server maps that to its own metric names.
* ``ServingLifecycle``: ``shutdown()`` (idempotent) and the ``Runnable`` ``start(stop)`` every
  server shares.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import math
import socket
import ssl
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

from escaler.clock import Clock, RealClock

__all__ = [
    "DEFAULT_MAX_CONNECTIONS",
    "DEFAULT_REQUEST_DEADLINE_SECONDS",
    "OVERFLOW_RESPONDERS",
    "RETRY_AFTER_SECONDS",
    "BaseHandler",
    "CertificateSource",
    "ConnectionServer",
    "DeadlineExceeded",
    "ErrorRenderer",
    "HttpError",
    "Limits",
    "RequestObserver",
    "ServingLifecycle",
    "is_json_media_type",
    "parse_json",
    "server_class",
    "text_error",
]

# Connections served at once per server (a probe, a scrape, a push or a review each hold one).
DEFAULT_MAX_CONNECTIONS = 64
# Whole-request bound: line + headers + body, and the keep-alive wait for the next request.
DEFAULT_REQUEST_DEADLINE_SECONDS = 10.0
# Threads that may answer 503 to connections beyond the cap at one time; more are just closed.
OVERFLOW_RESPONDERS = 8
# A kept-alive connection's wait for the first byte of its next request.
DEFAULT_IDLE_TIMEOUT_SECONDS = 5.0
# A connection is closed after the answer it serves once it is this old.
DEFAULT_MAX_CONNECTION_SECONDS = 60.0
# How long an overflow responder may spend (handshake, reading the head, writing the 503).
OVERFLOW_DEADLINE_SECONDS = 1.0
# What a 503 asks the client to wait.
RETRY_AFTER_SECONDS = 1
# Largest request head an overflow responder reads before answering.
_OVERFLOW_HEAD_BYTES = 16 * 1024
# Draining a connection closed after an error: reads of at most this long, this many.
_LINGER_TIMEOUT_SECONDS = 0.25
_LINGER_READS = 8
# How long shutdown() waits for the serving thread to end.
SHUTDOWN_JOIN_SECONDS = 5.0
# How often the serving loop (socketserver's serve_forever) checks for shutdown(): a shutdown
# waits up to this long for it. Read when serving starts; the unit tests lower it.
SERVE_POLL_SECONDS = 0.1

_log = logging.getLogger(__name__)

# (status, message, machine-readable code or None) → (content type, body) of an error answer
ErrorRenderer = Callable[[int, str, "str | None"], tuple[str, bytes]]
# (route label, method, status code, seconds)
RequestObserver = Callable[[str, str, int, float], None]


def text_error(status: int, message: str, code: str | None = None) -> tuple[str, bytes]:
    """The plain-text error body of the probe, metrics and webhook servers."""
    return "text/plain; charset=utf-8", (message.rstrip("\n") + "\n").encode()


@dataclass(frozen=True)
class Limits:
    """Per-server bounds; see the module docstring."""

    max_connections: int = DEFAULT_MAX_CONNECTIONS
    request_deadline: float = DEFAULT_REQUEST_DEADLINE_SECONDS
    # 0 = no request body accepted (probes, metrics)
    max_body_bytes: int = 0
    # connections at once from one client address; None = half of max_connections (at least 1)
    max_per_client: int | None = None
    idle_timeout: float = DEFAULT_IDLE_TIMEOUT_SECONDS
    max_connection_seconds: float = DEFAULT_MAX_CONNECTION_SECONDS

    @property
    def per_client(self) -> int:
        """The connections one client address may hold at once."""
        if self.max_per_client is not None:
            return min(self.max_per_client, self.max_connections)
        return max(1, self.max_connections // 2)

    def __post_init__(self) -> None:
        if not isinstance(self.max_connections, int) or self.max_connections < 1:
            raise ValueError(f"Limits.max_connections: must be an integer >= 1, got {self.max_connections!r}")
        if not (self.request_deadline > 0 and math.isfinite(self.request_deadline)):
            raise ValueError(f"Limits.request_deadline: must be a finite number of seconds > 0, "
                             f"got {self.request_deadline!r}")
        if not isinstance(self.max_body_bytes, int) or self.max_body_bytes < 0:
            raise ValueError(f"Limits.max_body_bytes: must be an integer >= 0, got {self.max_body_bytes!r}")
        if self.max_per_client is not None and (not isinstance(self.max_per_client, int)
                                                or self.max_per_client < 1):
            raise ValueError(f"Limits.max_per_client: must be an integer >= 1, got {self.max_per_client!r}")
        for name in ("idle_timeout", "max_connection_seconds"):
            v = getattr(self, name)
            if not (v > 0 and math.isfinite(v)):
                raise ValueError(f"Limits.{name}: must be a finite number of seconds > 0, got {v!r}")


class HttpError(Exception):
    """Raised while serving a request: answer ``status`` with ``message`` (rendered by the server)."""

    def __init__(self, status: int, message: str, *, headers: Mapping[str, str] | None = None,
                 close: bool = False, code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = dict(headers or {})
        # close the connection after answering (e.g. an unread body)
        self.close = close
        # the API server's machine-readable error code; None = derived from status
        self.code = code


class DeadlineExceeded(Exception):
    """The request did not arrive in full within ``Limits.request_deadline``.

    Deliberately not a ``TimeoutError``: ``BaseHTTPRequestHandler`` swallows those silently, and
    a request cut at its deadline is answered 408.
    """


def is_json_media_type(value: str) -> bool:
    """Whether a ``Content-Type`` names JSON: ``application/json`` or a ``+json`` type (RFC 6839,
    e.g. ``application/merge-patch+json``), parameters and case ignored."""
    essence = value.split(";", 1)[0].strip().lower()
    kind, _, subtype = essence.partition("/")
    return kind == "application" and (subtype == "json" or (subtype.endswith("+json") and len(subtype) > 5))


def parse_json(raw: bytes, what: str = "request body") -> Any:
    """``json.loads`` where every failure is a 400 ``HttpError`` naming the problem."""
    try:
        return json.loads(raw)
    except UnicodeDecodeError as exc:
        raise HttpError(400, f"{what} is not valid JSON: not UTF-8 ({exc.reason} at byte {exc.start})"
                        ) from None
    except ValueError as exc:  # JSONDecodeError
        raise HttpError(400, f"{what} is not valid JSON: {exc}") from None
    except RecursionError:
        raise HttpError(400, f"{what} is not valid JSON: nested too deeply") from None


class CertificateSource(Protocol):
    """What ``ConnectionServer`` needs of ``escaler.runtime.tls.CertificateReloader``."""

    def current(self) -> ssl.SSLContext: ...


class _DeadlineReader(io.RawIOBase):
    """Socket reads bounded by one request's total deadline (armed per request)."""

    def __init__(self, sock: socket.socket, clock: Clock, deadline_seconds: float) -> None:
        self._sock = sock
        self._clock = clock
        self._seconds = deadline_seconds
        # clock.monotonic() by which the current request must have arrived; None = not armed
        self.deadline: float | None = None
        # bytes received since the last arm()
        self.received = 0
        # clock.monotonic() by which the first byte must arrive (a kept-alive connection); None = none
        self.first_byte_by: float | None = None

    def arm(self, idle: float | None = None) -> None:
        """Start a request's deadline; ``idle`` (a kept-alive connection) bounds the wait for its
        first byte too."""
        now = self._clock.monotonic()
        self.deadline = now + self._seconds
        self.first_byte_by = None if idle is None else now + min(idle, self._seconds)
        self.received = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        deadline = self.deadline if self.deadline is not None else self._clock.monotonic() + self._seconds
        if self.received == 0 and self.first_byte_by is not None:
            deadline = min(deadline, self.first_byte_by)
        remaining = deadline - self._clock.monotonic()
        if remaining <= 0:
            raise DeadlineExceeded
        self._sock.settimeout(remaining)
        try:
            n = self._sock.recv_into(buffer)
        except TimeoutError:
            raise DeadlineExceeded from None
        finally:
            # writes (the response) get the whole deadline again
            self._sock.settimeout(self._seconds)
        self.received += n
        if n and self._clock.monotonic() > deadline:
            raise DeadlineExceeded
        return n


class _SocketWriter(io.BufferedIOBase):
    """Unbuffered writes straight to the socket (what ``StreamRequestHandler`` uses with wbufsize 0)."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock

    def writable(self) -> bool:
        return True

    def write(self, b: Any) -> int:
        self._sock.sendall(b)
        with memoryview(b) as view:
            return view.nbytes


class ConnectionServer(ThreadingHTTPServer):
    """Bounded threads per connection, TLS handshake in the connection's thread; see the module."""

    daemon_threads = True
    # allow a quick restart on the same port (TIME_WAIT)
    allow_reuse_address = True
    # a larger accept backlog: overflow is answered, not left in the kernel queue
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], handler: type[BaseHandler], *, limits: Limits,
                 certs: CertificateSource | None = None, clock: Clock | None = None,
                 log_name: str = "http", render_error: ErrorRenderer = text_error,
                 observer: RequestObserver | None = None) -> None:
        # fixed after construction
        self.limits = limits
        # the certificate source (TLS), or None (plain HTTP)
        self.certs = certs
        self.clock: Clock = clock or RealClock()
        # names the server in log lines and thread names
        self.log_name = log_name
        self.render_error = render_error
        self.observer = observer
        # one permit per connection served; released when its thread ends
        self._slots = threading.BoundedSemaphore(limits.max_connections)
        # one permit per overflow responder
        self._overflow = threading.BoundedSemaphore(OVERFLOW_RESPONDERS)
        # guards the counters below
        self._mu = threading.Lock()
        # connections being served now (<= max_connections)
        self.open_connections = 0
        # requests whose deadline has been armed (monotonic; lets a test know a thread is reading)
        self.requests_begun = 0
        # connections refused beyond the cap (answered 503 or closed)
        self.rejected_connections = 0
        # connections being served now per client address (guarded by _mu; no zero entries)
        self._per_client: dict[str, int] = {}
        super().__init__(address, handler)

    def count(self, field: str, delta: int = 1) -> None:
        with self._mu:
            setattr(self, field, getattr(self, field) + delta)

    def _client_slot(self, client_address: Any) -> bool:
        """Take one of the client address's slots (``Limits.per_client``); False when it has none left."""
        host = str(client_address[0]) if isinstance(client_address, tuple) and client_address else "?"
        with self._mu:
            held = self._per_client.get(host, 0)
            if held >= self.limits.per_client:
                return False
            self._per_client[host] = held + 1
            return True

    def _client_release(self, client_address: Any) -> None:
        host = str(client_address[0]) if isinstance(client_address, tuple) and client_address else "?"
        with self._mu:
            left = self._per_client.get(host, 0) - 1
            if left > 0:
                self._per_client[host] = left
            else:
                self._per_client.pop(host, None)

    def _admit(self, client_address: Any) -> str | None:
        """Take a slot for the connection: None when taken, else why not ("client", "cap")."""
        if not self._client_slot(client_address):
            return "client"
        if not self._slots.acquire(blocking=False):
            self._client_release(client_address)
            return "cap"
        return None

    def process_request(self, request: Any, client_address: Any) -> None:
        refused = self._admit(client_address)
        if refused is None:
            target: Callable[[Any, Any], None] = self.process_request_thread
        else:
            self.count("rejected_connections")
            if self.rejected_connections == 1 or self.rejected_connections % 100 == 0:
                limit = (f"{self.limits.per_client} connections from one client" if refused == "client"
                         else f"{self.limits.max_connections} connections")
                _log.warning("%s: %s open (the cap); refusing more (%d refused so far)",
                             self.log_name, limit, self.rejected_connections)
            if not self._overflow.acquire(blocking=False):
                self.shutdown_request(request)
                return
            target = self._reject_overloaded
        try:
            threading.Thread(target=target, args=(request, client_address),
                             name=f"{self.log_name}-conn", daemon=True).start()
        except RuntimeError as exc:  # can't start new thread: give the permit back
            _log.error("%s: cannot start a connection thread: %s", self.log_name, exc)
            if refused is None:
                self._slots.release()
                self._client_release(client_address)
            else:
                self._overflow.release()
            self.shutdown_request(request)

    def _handshake(self, request: socket.socket, timeout: float) -> socket.socket:
        request.settimeout(timeout)
        if self.certs is None:
            return request
        return self.certs.current().wrap_socket(request, server_side=True)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        self.count("open_connections")
        conn = request
        try:
            conn = self._handshake(request, self.limits.request_deadline)
            self.finish_request(conn, client_address)
        except (OSError, ssl.SSLError) as exc:
            _log.debug("%s connection from %s failed: %s", self.log_name, client_address, exc)
        except Exception:
            self.handle_error(conn, client_address)
        finally:
            self.shutdown_request(conn)
            self.count("open_connections", -1)
            self._slots.release()
            self._client_release(client_address)

    def _reject_overloaded(self, request: Any, client_address: Any) -> None:
        conn = request
        try:
            conn = self._handshake(request, OVERFLOW_DEADLINE_SECONDS)
            deadline = self.clock.monotonic() + OVERFLOW_DEADLINE_SECONDS
            head = b""
            # read the request head (so the answer is not lost to a reset), but answer anyway
            with contextlib.suppress(TimeoutError):
                while b"\r\n\r\n" not in head and len(head) < _OVERFLOW_HEAD_BYTES:
                    if self.clock.monotonic() >= deadline:
                        break
                    chunk = conn.recv(4096)
                    if not chunk:
                        break
                    head += chunk
            ctype, body = self.render_error(503, "too many connections; retry later", None)
            conn.sendall((f"HTTP/1.1 503 Service Unavailable\r\nContent-Type: {ctype}\r\n"
                          f"Content-Length: {len(body)}\r\nRetry-After: {RETRY_AFTER_SECONDS}\r\n"
                          "Connection: close\r\n\r\n").encode() + body)
        except (OSError, ssl.SSLError) as exc:
            _log.debug("%s overflow answer to %s failed: %s", self.log_name, client_address, exc)
        finally:
            self.shutdown_request(conn)
            self._overflow.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        _log.debug("%s connection from %s failed", self.log_name, client_address, exc_info=True)


class ConnectionServer6(ConnectionServer):
    address_family = socket.AF_INET6


def server_class(ipv6: bool) -> type[ConnectionServer]:
    return ConnectionServer6 if ipv6 else ConnectionServer


class BaseHandler(BaseHTTPRequestHandler):
    """The request side shared by every server; subclasses implement ``serve_request``."""

    protocol_version = "HTTP/1.1"
    server_version = "escaler"
    # timeouts are set by _DeadlineReader, never by StreamRequestHandler.setup
    timeout = None
    server: ConnectionServer

    def setup(self) -> None:
        self.connection = self.request
        self._reader = _DeadlineReader(self.connection, self.server.clock,
                                       self.server.limits.request_deadline)
        self.rfile = io.BufferedReader(self._reader)
        self.wfile = _SocketWriter(self.connection)
        # the status of the last reply on this request (0 = none yet)
        self.status_sent = 0
        # the metric label of the current request (set by serve_request)
        self.route_label = "unmatched"
        # declared body bytes not read yet
        self.body_pending = 0
        # drain what the client still sends before closing (see finish)
        self.linger = False
        # when this connection was accepted, and how many requests it has begun
        self.opened = self.server.clock.monotonic()
        self.served = 0

    def handle_one_request(self) -> None:
        limits = self.server.limits
        self._reader.arm(limits.idle_timeout if self.served else None)
        self.served += 1
        self.server.count("requests_begun")
        self.status_sent = 0
        self.body_pending = 0
        # what send_response needs when the request line itself never arrived
        self.command, self.request_version, self.requestline = "", "HTTP/1.1", ""
        try:
            super().handle_one_request()
        except DeadlineExceeded:
            self.close_connection = True
            if self._reader.received and not self.status_sent:
                self._answer_error(HttpError(408, f"the request did not arrive within "
                                                  f"{self.server.limits.request_deadline:g} s", close=True))
                self.linger = True
        except (BrokenPipeError, ConnectionResetError, TimeoutError, ssl.SSLError) as exc:
            _log.debug("%s client %s went away: %s", self.server.log_name, self.client_address, exc)
            self.close_connection = True

    def finish(self) -> None:
        super().finish()
        if self.linger:
            self._drain()

    def _drain(self) -> None:
        """Read and drop what the client is still sending before the socket closes.

        Closing a socket with unread input makes the kernel send a reset, which can destroy the
        error answer just written before the client reads it (Go's ``closeWriteAndWait`` does
        the same). Bounded: ``_LINGER_READS`` reads of ``_LINGER_TIMEOUT_SECONDS`` at most.
        """
        with contextlib.suppress(OSError):
            self.connection.settimeout(_LINGER_TIMEOUT_SECONDS)
            for _ in range(_LINGER_READS):
                if not self.connection.recv(65536):
                    return

    # ------------------------------------------------------------------ responses

    def reply(self, status: int, body: bytes, *, ctype: str = "application/json",
              headers: Mapping[str, str] | None = None, close: bool = False) -> None:
        """Send one whole response (the one ``_send`` of every server)."""
        self.status_sent = status
        self.send_response(status)
        if body:
            self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Cache-Control", "no-store")
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        if close or self.server.clock.monotonic() - self.opened >= self.server.limits.max_connection_seconds:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        if self.command != "HEAD" and body:
            self.wfile.write(body)

    def _answer_error(self, err: HttpError) -> None:
        ctype, body = self.server.render_error(err.status, err.message, err.code)
        try:
            # an unread body would be parsed as the next request: close instead
            close = err.close or self.body_pending > 0
            self.reply(err.status, body, ctype=ctype, headers=err.headers, close=close)
            self.linger = self.linger or close
        except OSError as exc:
            _log.debug("%s: cannot answer %s: %s", self.server.log_name, self.client_address, exc)
            self.close_connection = True

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """``BaseHTTPRequestHandler``'s own refusals (bad request line, 414, 431) in our format."""
        self.close_connection = True
        self._answer_error(HttpError(code, message or self.responses.get(code, ("error",))[0], close=True))

    # ------------------------------------------------------------------ requests

    def content_length(self, *, required: bool) -> int:
        """The declared body length (0 when none), after the framing checks; raises ``HttpError``."""
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            raise HttpError(411, "a request body must be sent with Content-Length", close=True)
        header = self.headers.get("Content-Length")
        if header is None:
            if required:
                raise HttpError(411, "Content-Length required", close=True)
            return 0
        try:
            length = int(header)
        except ValueError:
            length = -1
        if length < 0:
            raise HttpError(400, f"invalid Content-Length {header!r}", close=True)
        cap = self.server.limits.max_body_bytes
        if length > cap:
            message = (f"request body of {length} bytes is larger than the {cap} bytes allowed"
                       if cap else "this server takes no request body")
            raise HttpError(413, message, close=True)
        self.body_pending = length
        return length

    def require_json(self) -> None:
        """415 unless the request's ``Content-Type`` is JSON or absent (call when it has a body)."""
        ctype = self.headers.get("Content-Type")
        if ctype is not None and not is_json_media_type(ctype):
            raise HttpError(415, f"Content-Type {ctype.strip()!r}: the body must be JSON "
                                 "(application/json)", close=self.body_pending > 0)

    def read_body(self, length: int) -> bytes:
        """Read exactly ``length`` bytes (within the request's deadline)."""
        raw = self.rfile.read(length) if length > 0 else b""
        self.body_pending = 0
        if len(raw) < length:
            raise HttpError(400, f"request body ended after {len(raw)} of {length} bytes", close=True)
        return raw

    def bearer_token(self) -> str | None:
        value = self.headers.get("Authorization") or ""
        scheme, _, token = value.strip().partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            return None
        return token

    def client_host(self) -> str:
        return str(self.client_address[0]) if self.client_address else ""

    # ------------------------------------------------------------------ dispatch

    def serve_request(self) -> None:
        """Answer the current request (``self.command``/``self.path``/``self.headers``)."""
        raise NotImplementedError

    def _dispatch(self) -> None:
        started = self.server.clock.monotonic()
        self.route_label = "unmatched"
        try:
            self.serve_request()
        except HttpError as err:
            self._answer_error(err)
        except DeadlineExceeded:
            raise
        except (BrokenPipeError, ConnectionResetError) as exc:
            _log.debug("%s client went away during %s %s: %s", self.server.log_name, self.command,
                       self.path, exc)
            self.close_connection = True
        except Exception:
            _log.exception("%s: %s %s failed", self.server.log_name, self.command, self.path)
            if not self.status_sent:
                self._answer_error(HttpError(500, f"internal error serving {self.command}", close=True))
            self.close_connection = True
        finally:
            observer = self.server.observer
            if observer is not None and self.status_sent:
                observer(self.route_label, self.command, self.status_sent,
                         self.server.clock.monotonic() - started)

    do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = do_OPTIONS = _dispatch

    def log_message(self, format: str, *args: Any) -> None:
        _log.debug("%s %s - %s", self.server.log_name, self.address_string(), format % args)


class ServingLifecycle:
    """``shutdown()`` and the ``Runnable`` ``start(stop)`` shared by every server.

    A subclass's ``serve()`` binds a ``ConnectionServer``, stores it in ``_server`` and its thread in
    ``_thread`` under ``_mu``, then sets ``serving``; this class stops them again.
    """

    # guards _server and _thread
    _mu: threading.Lock
    # the bound server while serving; None before serve() and after shutdown()
    _server: ConnectionServer | None
    # the thread running serve_forever while serving
    _thread: threading.Thread | None
    # set while accepting connections
    serving: threading.Event

    def serve(self) -> None:
        raise NotImplementedError

    @property
    def port(self) -> int | None:
        """The bound port, or ``None`` when not serving."""
        with self._mu:
            return int(self._server.server_address[1]) if self._server is not None else None

    def _start_thread(self, server: ConnectionServer, name: str) -> None:
        """Store ``server`` and serve it from a daemon thread; call with ``_mu`` held."""
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever,
                                        kwargs={"poll_interval": SERVE_POLL_SECONDS}, name=name, daemon=True)
        self._thread.start()

    def shutdown(self) -> None:
        """Stop serving and close the socket; idempotent."""
        self.serving.clear()
        with self._mu:
            server, thread = self._server, self._thread
            self._server = None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        if thread is not None:
            thread.join(SHUTDOWN_JOIN_SECONDS)

    def start(self, stop: threading.Event) -> None:
        """The ``Runnable`` entry point: serve until ``stop`` is set."""
        self.serve()
        try:
            stop.wait()
        finally:
            self.shutdown()
