"""Keep-alive in the outbound client (issue 10, "How": per-host connection reuse) without weakening
``escaler.signals.fetch``: one connect for N sequential requests; no reuse after an error, a
timeout or a ``Connection: close``; the address policy still judges every request (a host that now
resolves to a refused address is refused although a connection to it is idle, and a connection is
reused only for the address it was opened to); the total deadline still holds on a reused
connection; a connection the server closed while idle is replaced within the same request; idle
connections are bounded and expire. Fails on fec3229 (one connection per request,
``Connection: close``; no ``ConnectionPool``).
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest
from outbound_fakes import RawServer, read_request

from escaler.clock import FakeClock
from escaler.signals.fetch import FetchError, HttpClient, fetch
from escaler.signals.netpolicy import AddressPolicy, parse_networks

BODY = b'{"ok":true}'


def _answer(body: bytes = BODY, extra: str = "") -> bytes:
    return (f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n{extra}\r\n"
            .encode() + body)


class KeepAliveServer:
    """HTTP/1.1 on 127.0.0.1 serving many requests per connection; ``script(n)`` says what the
    n-th request (over all connections, from 0) gets: bytes to send, or None to hang up."""

    def __init__(self, script: Callable[[int], bytes | None] | None = None) -> None:
        self.connections = 0
        self.heads: list[bytes] = []
        self._mu = threading.Lock()
        self._script = script or (lambda n: _answer())
        self.raw = RawServer(self._serve)

    @property
    def url(self) -> str:
        return self.raw.url

    def _serve(self, conn: socket.socket, stop: threading.Event) -> None:
        with self._mu:
            self.connections += 1
        while not stop.is_set():
            head = read_request(conn)
            if not head:
                return
            with self._mu:
                n = len(self.heads)
                self.heads.append(head)
            out = self._script(n)
            if out is None:
                return
            conn.sendall(out)

    def stop(self) -> None:
        self.raw.stop()


@pytest.fixture
def server() -> Iterator[KeepAliveServer]:
    s = KeepAliveServer()
    yield s
    s.stop()


def loopback(**kw: object) -> HttpClient:
    return HttpClient(AddressPolicy(parse_networks("127.0.0.0/8")), **kw)  # type: ignore[arg-type]


def test_sequential_requests_share_one_connection(server: KeepAliveServer) -> None:
    client = loopback()
    for _ in range(5):
        assert fetch(client, server.url + "/api/v1/query", timeout=5).body == BODY
    assert server.connections == 1
    assert b"connection: close" not in server.heads[0].lower()
    assert client.pool.opened == 1 and client.pool.reused == 4


def test_keep_alive_off_sends_connection_close_and_never_reuses(server: KeepAliveServer) -> None:
    client = loopback(keep_alive=False)
    for _ in range(3):
        fetch(client, server.url + "/", timeout=5)
    assert server.connections == 3
    assert b"connection: close" in server.heads[0].lower()


def test_no_reuse_after_an_error() -> None:
    # the 2nd request is answered with a body over max_bytes: that connection is dropped
    s = KeepAliveServer(lambda n: _answer(b"x" * 100) if n == 1 else _answer())
    try:
        client = loopback()
        fetch(client, s.url + "/", timeout=5)
        with pytest.raises(FetchError, match="larger than"):
            fetch(client, s.url + "/", timeout=5, max_bytes=50)
        fetch(client, s.url + "/", timeout=5)
        assert s.connections == 2
    finally:
        s.stop()


def test_no_reuse_when_the_server_says_close() -> None:
    s = KeepAliveServer(lambda n: _answer(extra="Connection: close\r\n"))
    try:
        client = loopback()
        for _ in range(3):
            fetch(client, s.url + "/", timeout=5)
        assert s.connections == 3
        assert client.pool.idle() == 0
    finally:
        s.stop()


def test_no_reuse_when_the_server_sent_more_than_the_answer() -> None:
    s = KeepAliveServer(lambda n: _answer() + b"HTTP/1.1 200 OK\r\n" if n == 0 else _answer())
    try:
        client = loopback()
        fetch(client, s.url + "/", timeout=5)
        fetch(client, s.url + "/", timeout=5)
        assert s.connections == 2  # the stray bytes were never read as the second answer
    finally:
        s.stop()


class Dns:
    def __init__(self, answer: Sequence[str]) -> None:
        self.answer = list(answer)

    def __call__(self, host: str, port: int) -> list[str]:
        return list(self.answer)


def test_the_address_policy_still_judges_every_request(server: KeepAliveServer) -> None:
    dns = Dns(["127.0.0.1"])
    client = HttpClient(AddressPolicy(parse_networks("127.0.0.0/8")), resolver=dns)
    url = f"http://prom.example:{server.raw.port}/api/v1/query"
    fetch(client, url, timeout=5)
    assert client.pool.idle() == 1
    # the name now resolves to the metadata service: refused, though a connection to the host is idle
    dns.answer = ["169.254.169.254"]
    with pytest.raises(FetchError, match="refused"):
        fetch(client, url, timeout=5)
    # it now resolves to another (allowed) address: the idle connection to 127.0.0.1 is not used for it
    dns.answer = ["127.0.0.2"]
    with contextlib.suppress(FetchError):  # nothing listens on 127.0.0.2: no request went to 127.0.0.1
        fetch(client, url, timeout=2)
    assert len(server.heads) == 1 and server.connections == 1


def test_the_deadline_holds_on_a_reused_connection() -> None:
    s = KeepAliveServer(lambda n: _answer() if n == 0 else b"HTTP/1.1 200 OK\r\n")  # then never finishes
    try:
        client = loopback()
        fetch(client, s.url + "/", timeout=5)
        with pytest.raises(FetchError, match=r"timed out after 0\.5s"):
            fetch(client, s.url + "/", timeout=0.5)
        assert client.pool.idle() == 0  # the timed-out connection is not kept
    finally:
        s.stop()


def test_a_connection_the_server_closed_while_idle_is_replaced() -> None:
    s = KeepAliveServer(lambda n: _answer() if n != 1 else None)  # 2nd request: hang up unanswered
    try:
        client = loopback()
        fetch(client, s.url + "/", timeout=5)
        assert fetch(client, s.url + "/", timeout=5).body == BODY  # retried once on a new connection
        assert s.connections == 2
    finally:
        s.stop()


def test_idle_connections_expire(server: KeepAliveServer) -> None:
    clock = FakeClock()
    client = loopback()
    fetch(client, server.url + "/", timeout=5, clock=clock)
    clock.step(31)
    fetch(client, server.url + "/", timeout=5, clock=clock)
    assert server.connections == 2


def test_idle_connections_are_bounded_per_host() -> None:
    from escaler.signals.connpool import ConnectionPool, ConnKey

    pool = ConnectionPool(max_per_host=2, max_total=3)
    pairs = [socket.socketpair() for _ in range(5)]
    try:
        a, b = ConnKey("http", "a", 80, "10.0.0.1"), ConnKey("http", "b", 80, "10.0.0.2")
        for s, _ in pairs[:3]:
            pool.put(a, s, 0.0)
        assert pool.idle() == 2  # per host
        pool.put(b, pairs[3][0], 0.0)
        pool.put(b, pairs[4][0], 0.0)
        assert pool.idle() == 3  # in all
        assert pairs[2][0].fileno() == -1  # the one over the bound was closed
        # a connection whose peer closed is never handed out
        pairs[1][1].close()
        got = pool.take(a, 1.0)
        assert got is pairs[0][0]  # the most recent one (its peer closed) was dropped
    finally:
        for s, t in pairs:
            s.close()
            t.close()


def test_tls_connections_are_reused_with_the_certificate_checked_once(tmp_path: Path) -> None:
    from outbound_fakes import make_ca

    ca = make_ca(tmp_path)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(str(ca.cert_file), str(ca.key_file))
    s = KeepAliveServer()
    plain = s._serve

    def tls(conn: socket.socket, stop: threading.Event) -> None:
        plain(ctx.wrap_socket(conn, server_side=True), stop)

    s.raw._script = tls
    try:
        client = loopback(ssl_context=ca.client_context())
        url = f"https://localhost:{s.raw.port}/api/v1/query"
        for _ in range(3):
            assert fetch(client, url, timeout=5, bearer_token="tok").body == BODY
        assert s.connections == 1
        assert all(b"authorization: bearer tok" in h.lower() for h in s.heads)
    finally:
        s.stop()
