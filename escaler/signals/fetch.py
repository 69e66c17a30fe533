"""One bounded HTTP GET to a user-named endpoint (Prometheus, a SignalTrigger pull endpoint).

An endpoint is chosen by whoever can create a scaler, so every answer is hostile until parsed.
Contract of ``fetch(client, url, timeout=...)``:

* **Before anything is sent** the URL must pass ``escaler.scaling.endpoints.check_endpoint_url``,
  its host the ``allowed(host)`` hook (``--allowed-endpoint-hosts``) when one is given, and the
  client's ``AddressPolicy`` (``escaler.signals.netpolicy``: no loopback, link-local, metadata
  ... unless ``--allow-endpoint-networks`` re-allows them). The policy judges *every* address
  the host resolves to, after DNS resolution at connect time, and the socket connects to the
  checked address itself: there is no second lookup a rebinding DNS server could answer
  differently. TLS still verifies the certificate against the URL's host name.
* **One deadline for the whole exchange**: ``timeout`` seconds from the call, measured on the
  injected clock. DNS resolution, connect, the TLS handshake, the send, and *each* receive while
  reading the status line, the headers and the body get what is left of it as their socket
  timeout, and a read that starts with nothing left fails. A server trickling one byte every
  0.3 s is cut at the deadline, not after minutes. ``timeout`` is capped at
  ``MAX_TIMEOUT_SECONDS``.
* **Host-name lookups** run on a shared pool of threads (``getaddrinfo`` has no timeout: an
  abandoned lookup keeps its thread until it ends). Concurrent lookups of one (host, port) share
  one thread, and a tenant (``escaler.tenant``: the namespace an outbound job runs for) has at most
  ``DNS_PER_TENANT`` lookups pending, abandoned ones included; past that its lookup fails at once
  (``FetchError`` naming the namespace), so one namespace's slow names never hold the threads
  another namespace's lookups need.
* Bodies larger than ``max_bytes`` are refused rather than buffered; the status line and the
  headers are read by ``escaler.signals.httphead`` (64 KiB a line, 100 header lines, malformed
  heads refused with the rule named), the body by ``http.client`` (length, chunked, keep-alive).
* Redirects are not followed (a 3xx is returned like any other status): following one would let
  an endpoint send escaler, and its bearer token, to a host the policy never saw.
* A bearer token is sent only over ``https://`` (refused over plain ``http://``) and only when it
  is a valid header value (no CR/LF: a token cannot inject headers).
* The request is built here, from the URL alone: no cookies (nothing is ever stored), no proxy
  (``HTTP(S)_PROXY``/``NO_PROXY`` and ``.netrc`` are not read; a proxy would also defeat the
  address policy).
* **No delayed-ACK stall**: every receive first asks the kernel to acknowledge at once
  (``TCP_QUICKACK`` on Linux). A server that writes its head and its body separately with Nagle's
  algorithm on would otherwise wait for the kernel's delayed ACK (~40 ms) before sending the body:
  each answer took ~44 ms of wall clock, the outbound thread was held all that time, and the poll
  finished on a cold core (``bench/bench_fetch_split.py`` measures it).
* **Keep-alive** (``HttpClient(keep_alive=True)``, the default): after a complete exchange — the
  body read to its end, no ``Connection: close``, no error or timeout, no byte left over — the
  connection is kept idle in the client's ``escaler.signals.connpool.ConnectionPool`` and the next
  request to the same (scheme, host, port) takes it only if the host still resolves to, and the
  policy still allows, the very address it is connected to: every request resolves and checks as
  before, only the TCP connect and the TLS handshake are saved. A reused connection gets the new
  request's deadline on every socket operation like a new one. Any failure drops the connection;
  a reused connection that the server closed before answering (the keep-alive race) is retried
  once on a new connection within the same deadline (a GET is idempotent). Idle connections are
  bounded per host and in all, and closed after ``idle_seconds``. ``keep_alive=False`` sends
  ``Connection: close`` (one connection per request).
* It returns ``Response(status, body)`` for every HTTP answer, and raises ``FetchError`` for
  everything else: refused URL, host or address, timeout, connection or TLS failure, malformed or
  oversized response. A ``FetchError`` message names the endpoint (without user-info) and the
  cause; it never carries the token or bytes of the response.

``HttpClient`` holds what is fixed per manager (the address policy, the resolver, the TLS
context) and the pool of idle connections; it keeps no per-request state and is shared by every
thread.
"""

from __future__ import annotations

import contextlib
import functools
import http.client
import io
import ipaddress
import re
import socket
import ssl
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from urllib.parse import quote, urlsplit

from escaler.clock import Clock, RealClock
from escaler.scaling.endpoints import check_endpoint_url
from escaler.signals.connpool import ConnectionPool, ConnKey
from escaler.signals.httphead import BoundedResponse, MalformedResponse
from escaler.signals.netpolicy import AddressPolicy, IPAddress
from escaler.tenant import current as current_tenant

__all__ = [
    "DEFAULT_MAX_RESPONSE_BYTES",
    "MAX_TIMEOUT_SECONDS",
    "FetchError",
    "HostAllowed",
    "HttpClient",
    "Resolver",
    "Response",
    "fetch",
    "redact_url",
]

# Largest body read from an endpoint; a Prometheus answer with one sample is a few hundred bytes.
DEFAULT_MAX_RESPONSE_BYTES = 4 * 1024 * 1024
# Longest one request may take, whatever the spec asks (ExternalServer timeoutSeconds <= this).
MAX_TIMEOUT_SECONDS = 30.0
_CHUNK_BYTES = 64 * 1024
# threads resolving host names (getaddrinfo has no timeout of its own; a lookup waits in one).
# More than the outbound callers in flight (the manager's bounded executor), so a slow name one
# tenant chose holds one thread, never the lookups of the others.
_DNS_THREADS = 32
# host-name lookups one tenant (escaler.tenant: a namespace) may have pending at once, abandoned ones
# (past their caller's deadline, still in getaddrinfo) included: a tenant whose names resolve
# slowly holds at most these threads, never the others' lookups
DNS_PER_TENANT = 2

HostAllowed = Callable[[str], bool]
# (host, port) -> the addresses it resolves to, in connect order; OSError when it does not
Resolver = Callable[[str, int], Sequence[str]]

_USERINFO_RE = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*://)[^/?#]*@")
# a header value: visible ASCII and spaces, no CR/LF
_TOKEN_RE = re.compile(r"[\x21-\x7e][\x20-\x7e]*")
# socket option acknowledging received data at once (Linux); None where the platform lacks it
_TCP_QUICKACK: int | None = getattr(socket, "TCP_QUICKACK", None)
# URLs whose checks and quoting are kept (``_url_facts``): one entry per distinct endpoint URL
_URL_FACTS_MAX = 1024
# what application/x-www-form-urlencoded makes of each byte (``urllib.parse.quote_plus``'s rule)
_UNRESERVED = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-~")
_FORM_BYTE: tuple[str, ...] = tuple(
    chr(b) if b in _UNRESERVED else "+" if b == 0x20 else f"%{b:02X}" for b in range(256))


def redact_url(url: str) -> str:
    """The URL without its user-info, so a password written into a spec never reaches a message."""
    return _USERINFO_RE.sub(r"\1***@", url)


class FetchError(Exception):
    """The request could not be made or did not complete; the message says why."""


class _Timeout(Exception):
    """The exchange's deadline passed."""


@dataclass(frozen=True)
class Response:
    # HTTP status code
    status: int
    # the body, at most max_bytes long
    body: bytes
    # the Location header of a redirect ("" otherwise); never put into a message
    location: str = ""


def system_resolver(host: str, port: int) -> list[str]:
    """``getaddrinfo`` for TCP: the addresses in the order the system prefers, without duplicates."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    out: list[str] = []
    for _family, _type, _proto, _canon, sockaddr in infos:
        addr = str(sockaddr[0]).split("%", 1)[0]  # a scope id never names a different host
        if addr not in out:
            out.append(addr)
    return out


class HttpClient:
    """What every outbound GET shares: the address policy, the resolver, the TLS context."""

    def __init__(self, policy: AddressPolicy | None = None, *, resolver: Resolver | None = None,
                 ssl_context: ssl.SSLContext | None = None, keep_alive: bool = True,
                 pool: ConnectionPool | None = None) -> None:
        # the SSRF rule; the default refuses loopback, link-local, metadata ...
        self.policy = policy if policy is not None else AddressPolicy()
        # host name -> addresses; the system's by default
        self._resolver: Resolver = resolver or system_resolver
        # verifies server certificates (system CAs, SSL_CERT_FILE) and host names; None until the
        # first TLS connection makes the default one (loading the system CAs costs ~40 ms of CPU,
        # and every reconciler's setup makes a client whether or not a scaler ever uses https)
        self._ssl: ssl.SSLContext | None = ssl_context
        # resolves names off the caller's thread, so a lookup is bounded by the deadline too;
        # made on first use (an IP literal needs none)
        self._dns: ThreadPoolExecutor | None = None
        # guards the creation of _dns and of the default _ssl, _pending and _per_tenant
        self._mu = threading.Lock()
        # (host, port) → its lookup while it runs: concurrent lookups of one name share it
        self._pending: dict[tuple[str, int], Future[Sequence[str]]] = {}
        # tenant → its lookups still running (escaler.tenant; abandoned ones count until they end)
        self._per_tenant: dict[str, int] = {}
        # False: "Connection: close", one connection per request (the pool stays empty)
        self.keep_alive = keep_alive
        # idle keep-alive connections, by (scheme, host, port, checked address)
        self.pool = pool if pool is not None else ConnectionPool()

    def close(self) -> None:
        """Close every idle connection."""
        self.pool.close_all()

    def resolve(self, host: str, port: int, left: float) -> list[IPAddress]:
        """The addresses of ``host``, within ``left`` seconds; ``FetchError`` when there are none."""
        try:
            return [ipaddress.ip_address(host)]
        except ValueError:
            pass
        future = self._lookup(host, port)
        try:
            names = future.result(timeout=max(left, 0.0))
        except FutureTimeout:
            # not cancelled: another caller may share the lookup, and its tenant is charged until
            # it ends (an abandoned getaddrinfo keeps its thread anyway)
            raise _Timeout() from None
        except (OSError, UnicodeError) as err:
            raise FetchError(f"cannot resolve host {host!r}: {_os_error(err)}") from None
        addresses: list[IPAddress] = []
        for name in names:
            try:
                addresses.append(ipaddress.ip_address(name))
            except ValueError:
                continue
        if not addresses:
            raise FetchError(f"host {host!r} resolves to no IP address")
        return addresses

    def _lookup(self, host: str, port: int) -> Future[Sequence[str]]:
        """The pending lookup of ``(host, port)``: one already running is shared (a name polled by
        many scalers costs one thread), else a new one, charged to the calling tenant until it
        ends — ``FetchError`` when that tenant already has ``DNS_PER_TENANT`` pending."""
        tenant = current_tenant()
        with self._mu:
            if self._dns is None:
                self._dns = ThreadPoolExecutor(_DNS_THREADS, thread_name_prefix="escaler-dns")
            running = self._pending.get((host, port))
            if running is not None:
                return running
            if tenant is not None and self._per_tenant.get(tenant, 0) >= DNS_PER_TENANT:
                raise FetchError(f"cannot resolve host {host!r}: {DNS_PER_TENANT} host name lookups of "
                                 f"namespace {tenant} are still pending (slow DNS); retried at the next poll")
            future = self._dns.submit(self._resolver, host, port)
            self._pending[(host, port)] = future
            if tenant is not None:
                self._per_tenant[tenant] = self._per_tenant.get(tenant, 0) + 1

        def done(_: Future[Sequence[str]]) -> None:
            with self._mu:
                if self._pending.get((host, port)) is future:
                    del self._pending[(host, port)]
                if tenant is not None:
                    left = self._per_tenant.get(tenant, 0) - 1
                    if left > 0:
                        self._per_tenant[tenant] = left
                    else:
                        self._per_tenant.pop(tenant, None)

        future.add_done_callback(done)
        return future

    def tls_context(self) -> ssl.SSLContext:
        """The context every TLS connection is wrapped with (the default one is made on first use)."""
        with self._mu:
            if self._ssl is None:
                self._ssl = ssl.create_default_context()
            return self._ssl


def _os_error(err: BaseException) -> str:
    text = getattr(err, "strerror", None) or str(err) or type(err).__name__
    return f"{type(err).__name__}: {text}"


class _Exchange:
    """One request on one connection, every socket operation bounded by the deadline."""

    def __init__(self, clock: Clock, deadline: float) -> None:
        # measures the deadline
        self._clock = clock
        # clock.monotonic() value by which everything is over
        self._deadline = deadline

    def left(self) -> float:
        left = self._deadline - self._clock.monotonic()
        if left <= 0:
            raise _Timeout()
        return left

    def now(self) -> float:
        return self._clock.monotonic()

    def checked(self, client: HttpClient, host: str, port: int) -> list[IPAddress]:
        """The addresses of ``host``, every one allowed by the policy (else ``FetchError``)."""
        addresses = client.resolve(host, port, self.left())
        for address in addresses:
            reason = client.policy.refusal(address)
            if reason is not None:
                raise FetchError(f"endpoint host {host!r} is refused: {reason}")
        return addresses

    def connect(self, addresses: Sequence[IPAddress], port: int,
                where: str) -> tuple[socket.socket, IPAddress]:
        last: OSError | None = None
        for address in addresses:
            family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
            sock = socket.socket(family, socket.SOCK_STREAM)
            try:
                sock.settimeout(self.left())
                sock.connect((str(address), port))
                return sock, address
            except TimeoutError:
                sock.close()
                raise _Timeout() from None
            except OSError as err:
                sock.close()
                last = err
            except BaseException:
                sock.close()
                raise
        raise FetchError(f"{where}: cannot connect: {_os_error(last or OSError('no address'))}")

    def reader(self, sock: socket.socket) -> _Reader:
        return _Reader(_DeadlineRaw(sock, self))

    def send(self, sock: socket.socket, data: bytes) -> None:
        view = memoryview(data)
        while view:
            sock.settimeout(self.left())
            sent = sock.send(view)
            view = view[sent:]


class _DeadlineRaw(io.RawIOBase):
    """A socket as a raw stream whose every receive waits at most until the deadline."""

    def __init__(self, sock: socket.socket, exchange: _Exchange) -> None:
        # the connected (maybe TLS) socket; closed by the caller
        self._sock = sock
        # gives each receive its timeout
        self._exchange = exchange
        # True once the answer is complete: a receive then only looks, without waiting
        self.probe = False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview | bytearray) -> int | None:  # type: ignore[override]
        if self.probe:
            self._sock.settimeout(0.0)
            try:
                return self._sock.recv_into(buffer)
            except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
                return None  # nothing there: the raw-stream answer for "would block"
        self._sock.settimeout(self._exchange.left())
        _quick_ack(self._sock)
        return self._sock.recv_into(buffer)


def _quick_ack(sock: socket.socket) -> None:
    """Acknowledge what arrives at once instead of after the kernel's delayed-ACK timer (Linux
    ``TCP_QUICKACK``, which the kernel clears by itself, hence once per receive): a server that
    sends its head and its body in two writes with Nagle's algorithm on (Python's ``http.server``,
    many exporters and pull endpoints) holds the body until the head is acknowledged, ~40 ms per
    answer otherwise. Nothing changes for a server that answers in one write. Best effort: a
    platform or socket without it reads as before."""
    if _TCP_QUICKACK is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, _TCP_QUICKACK, 1)


class _Reader(io.BufferedReader):
    """The response reader; when ``http.client`` closes it (the answer is complete) it records
    whether the server sent anything beyond the answer (``leftover``: the connection is not reused)."""

    def __init__(self, raw: _DeadlineRaw) -> None:
        super().__init__(raw, _CHUNK_BYTES)
        # the raw stream (switched to probing on close)
        self._deadline_raw = raw
        # True when bytes beyond the answer were buffered or readable at close
        self.leftover = False
        # True once closed by http.client
        self.finished = False

    def close(self) -> None:
        if not self.closed and not self.finished:
            self.finished = True
            self._deadline_raw.probe = True
            try:
                self.leftover = bool(self.peek(1))
            except (OSError, ValueError):
                self.leftover = True
        super().close()


class _Sock:
    """What ``http.client.HTTPResponse`` needs of a socket: ``makefile`` returning our reader."""

    def __init__(self, reader: io.BufferedReader) -> None:
        self._reader = reader

    def makefile(self, mode: str) -> io.BufferedReader:
        return self._reader


def _request(host_header: str, target: str, bearer_token: str | None, keep_alive: bool) -> bytes:
    lines = [f"GET {target} HTTP/1.1", f"Host: {host_header}", "User-Agent: escaler",
             "Accept: application/json", "Accept-Encoding: identity"]
    if not keep_alive:
        lines.append("Connection: close")
    if bearer_token:
        lines.append(f"Authorization: Bearer {bearer_token}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("ascii")


def _form_encode(params: Mapping[str, str]) -> str:
    """``urlencode(params)`` for string keys and values (what ``quote_plus`` makes of each: UTF-8,
    unreserved characters kept, space as ``+``, every other byte ``%XX``), one table lookup per byte
    instead of a Python call per byte: a PromQL query is encoded on every poll."""
    return "&".join(f"{''.join(map(_FORM_BYTE.__getitem__, str(k).encode()))}="
                    f"{''.join(map(_FORM_BYTE.__getitem__, str(v).encode()))}" for k, v in params.items())


def _target(url_target: str, params: Mapping[str, str] | None) -> str:
    extra = _form_encode(params) if params else ""
    if not extra:
        return url_target
    return f"{url_target}&{extra}" if "?" in url_target else f"{url_target}?{extra}"


def _read_body(resp: http.client.HTTPResponse, exchange: _Exchange, max_bytes: int, where: str) -> bytes:
    body = bytearray()
    while True:
        chunk = resp.read(min(_CHUNK_BYTES, max_bytes + 1 - len(body)))
        exchange.left()  # an answer completed after the deadline is late all the same
        if not chunk:
            return bytes(body)
        body += chunk
        if len(body) > max_bytes:
            raise FetchError(f"{where}: response larger than {max_bytes} bytes")
        if resp.isclosed():  # the body's declared length is read: no read to learn it ended
            return bytes(body)


@functools.lru_cache(maxsize=_URL_FACTS_MAX)
def _url_facts(url: str) -> tuple[str, str, int, str] | str:
    """(scheme, host, port, request target without the params) of a URL every URL rule allows, or
    the refusal's text. Pure in ``url``, so kept for the last ``_URL_FACTS_MAX`` URLs: a fleet's
    scalers query a handful of endpoints, and each poll would otherwise parse, check and quote the
    same string again (the policy, the ``allowed`` hook and the token are still judged per call)."""
    try:
        host = check_endpoint_url(url)
    except ValueError as err:
        return f"endpoint {redact_url(url)!r}: {err}"
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    path = quote(parts.path or "/", safe="/%:@!$&'()*+,;=-._~")
    query = quote(parts.query, safe="/%:@!$&'()*+,;=-._~?")
    port = parts.port or (443 if scheme == "https" else 80)
    return scheme, host, port, f"{path}?{query}" if query else path


def _check(url: str, bearer_token: str | None, allowed: HostAllowed | None,
           client: HttpClient) -> tuple[str, str, int, str]:
    """(scheme, host, port, target without params) of a URL every rule allows; ``FetchError``
    naming the rule otherwise."""
    facts = _url_facts(url)
    if isinstance(facts, str):
        raise FetchError(facts)
    scheme, host, _, _ = facts
    if allowed is not None and not allowed(host):
        raise FetchError(f"endpoint host {host!r} is not allowed by --allowed-endpoint-hosts")
    refused = client.policy.host_refusal(host)
    if refused is not None:
        raise FetchError(f"endpoint {url}: {refused}")
    if bearer_token is not None:
        if scheme != "https":
            raise FetchError(f"endpoint {url}: a bearer token is only sent over https://, never over "
                             "plain http:// (anyone on the path could read it)")
        if not _TOKEN_RE.fullmatch(bearer_token):
            raise FetchError(f"endpoint {url}: the bearer token is not a valid HTTP header value "
                             "(visible ASCII, no line breaks)")
    return facts


def fetch(
    client: HttpClient,
    url: str,
    *,
    timeout: float,
    params: Mapping[str, str] | None = None,
    bearer_token: str | None = None,
    allowed: HostAllowed | None = None,
    max_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
    clock: Clock | None = None,
) -> Response:
    """GET ``url`` (see the module docstring)."""
    if timeout <= 0:
        raise ValueError(f"fetch: timeout must be > 0, got {timeout}")
    if max_bytes < 1:
        raise ValueError(f"fetch: max_bytes must be >= 1, got {max_bytes}")
    timeout = min(float(timeout), MAX_TIMEOUT_SECONDS)
    bearer_token = bearer_token or None
    scheme, host, port, url_target = _check(url, bearer_token, allowed, client)
    clock = clock or RealClock()
    exchange = _Exchange(clock, clock.monotonic() + timeout)
    where = f"GET {url}"
    default_port = 443 if scheme == "https" else 80
    host_header = (f"[{host}]" if ":" in host else host) + ("" if port == default_port else f":{port}")
    request = _request(host_header, _target(url_target, params), bearer_token, client.keep_alive)
    try:
        return _fetch(client, exchange, ConnKey(scheme, host, port, ""), request, max_bytes, where)
    except (_Timeout, TimeoutError):
        raise FetchError(f"{where}: timed out after {timeout:g}s") from None
    except ssl.SSLCertVerificationError as err:
        raise FetchError(f"{where}: TLS certificate not trusted: {err.verify_message}") from None
    except ssl.SSLError as err:
        raise FetchError(f"{where}: TLS failure: {err.reason or type(err).__name__}") from None
    except MalformedResponse as err:
        # its message names the rule, never bytes of the response
        raise FetchError(f"{where}: malformed HTTP response: {err}") from None
    except http.client.HTTPException as err:
        # the exception text may quote the response: name the failure, not its bytes
        raise FetchError(f"{where}: malformed HTTP response ({type(err).__name__})") from None
    except OSError as err:
        raise FetchError(f"{where}: {_os_error(err)}") from None


# what a reused connection the server had already closed fails with before any answer
_STALE = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError, ConnectionAbortedError,
          ssl.SSLEOFError, ssl.SSLZeroReturnError)


def _fetch(client: HttpClient, exchange: _Exchange, place: ConnKey, request: bytes, max_bytes: int,
           where: str) -> Response:
    """The exchange, on a reused connection when one is idle (retried once on a new one when the
    server had closed it), else on a new one."""
    addresses = exchange.checked(client, place.host, place.port)
    key, sock = _reused(client, exchange, place, addresses) if client.keep_alive else (None, None)
    if key is not None and sock is not None:
        try:
            return _exchange_on(client, exchange, key, sock, request, max_bytes, where)
        except _STALE:
            exchange.left()  # no time left: the timeout, not a second try
    key, sock = _opened(client, exchange, place, addresses, where)
    return _exchange_on(client, exchange, key, sock, request, max_bytes, where)


def _reused(client: HttpClient, exchange: _Exchange, place: ConnKey,
            addresses: Sequence[IPAddress]) -> tuple[ConnKey | None, socket.socket | None]:
    """An idle connection to one of the checked ``addresses``, or (None, None)."""
    for address in addresses:
        key = ConnKey(place.scheme, place.host, place.port, str(address))
        sock = client.pool.take(key, exchange.now())
        if sock is not None:
            return key, sock
    return None, None


def _opened(client: HttpClient, exchange: _Exchange, place: ConnKey, addresses: Sequence[IPAddress],
            where: str) -> tuple[ConnKey, socket.socket]:
    sock, address = exchange.connect(addresses, place.port, where)
    try:
        if place.scheme == "https":
            context = client.tls_context()  # before the deadline is read: a first use loads the CAs
            sock.settimeout(exchange.left())
            sock = context.wrap_socket(sock, server_hostname=place.host)
    except BaseException:
        sock.close()
        raise
    client.pool.count_open()
    return ConnKey(place.scheme, place.host, place.port, str(address)), sock


def _exchange_on(client: HttpClient, exchange: _Exchange, key: ConnKey, sock: socket.socket, request: bytes,
                 max_bytes: int, where: str) -> Response:
    """One request and its answer on ``sock``; the socket is pooled after a complete, clean
    exchange and closed otherwise."""
    keep = False
    try:
        exchange.send(sock, request)
        reader = exchange.reader(sock)
        resp = BoundedResponse(_Sock(reader), method="GET")  # type: ignore[arg-type]
        resp.begin()
        body = _read_body(resp, exchange, max_bytes, where)
        location = resp.getheader("Location", "") or "" if 300 <= resp.status < 400 else ""
        keep = client.keep_alive and not resp.will_close and resp.isclosed() and reader.finished \
            and not reader.leftover
        return Response(resp.status, body, location)
    finally:
        if keep:
            client.pool.put(key, sock, exchange.now())
        else:
            sock.close()
