"""The response-head parser of the outbound GETs (issue 30, ``escaler.signals.httphead``): what it
reads equals what ``http.client`` reads for well-formed heads (status, reason, version, framing,
keep-alive, every header), it keeps ``http.client``'s bounds (64 KiB a line, 100 lines), it refuses
malformed heads with a message naming the rule (never the response's bytes), and a server trickling
a head one byte at a time is still cut at the exchange's deadline (an injected clock, no sleeps).
"""

from __future__ import annotations

import http.client
import importlib
import io
import re
import socket
import threading
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from outbound_fakes import RawServer, read_request

from escaler.clock import FakeClock
from escaler.signals.fetch import FetchError, HttpClient, fetch
from escaler.signals.httphead import MAX_HEADERS, MAX_LINE, BoundedResponse, MalformedResponse
from escaler.signals.netpolicy import AddressPolicy, parse_networks

# the module (escaler.signals re-exports the function ``fetch`` under the same name)
fetch_module = importlib.import_module("escaler.signals.fetch")


class _BytesSock:
    """What ``HTTPResponse`` needs of a socket, over fixed bytes."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def makefile(self, mode: str) -> io.BufferedReader:
        return io.BufferedReader(io.BytesIO(self.data))


def new(data: bytes, method: str = "GET") -> BoundedResponse:
    r = BoundedResponse(_BytesSock(data), method=method)  # type: ignore[arg-type]
    r.begin()
    return r


def old(data: bytes, method: str = "GET") -> http.client.HTTPResponse:
    r = http.client.HTTPResponse(_BytesSock(data), method=method)  # type: ignore[arg-type]
    r.begin()
    return r


def refusal(data: bytes) -> str:
    with pytest.raises(MalformedResponse) as got:
        new(data).read()
    return str(got.value)


PROM_BODY = b'{"status":"success","data":{"resultType":"scalar","result":[0,"1"]}}'
PROM = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nDate: Mon, 07 Dec 2026 01:00:00 GMT\r\n"
        b"Content-Length: %d\r\n\r\n" % len(PROM_BODY) + PROM_BODY)


# ---- normal responses ------------------------------------------------------------------------------


def test_a_prometheus_answer_reads_as_http_client_reads_it() -> None:
    a, b = new(PROM), old(PROM)
    framing = (a.status, a.reason, a.version, a.length, a.chunked, a.will_close)
    assert framing == (b.status, b.reason, b.version, b.length, b.chunked, b.will_close)
    assert framing == (200, "OK", 11, len(PROM_BODY), False, False)
    assert a.getheaders() == b.getheaders()
    assert a.getheader("content-type") == "application/json" and a.getheader("X-None", "d") == "d"
    assert a.read() == b.read()


def test_duplicate_fields_keep_their_order_and_join_like_http_client() -> None:
    data = b"HTTP/1.1 302 Found\r\nVary: a\r\nLocation: /x\r\nvary: b\r\nContent-Length: 0\r\n\r\n"
    a, b = new(data), old(data)
    assert a.getheader("VARY") == b.getheader("VARY") == "a, b"
    assert a.headers.get_all("vary") == ["a", "b"] and a.headers.get("Vary") == "a"
    assert a.getheaders() == b.getheaders()


def test_a_folded_field_is_joined_with_one_space() -> None:
    data = b"HTTP/1.1 200 OK\r\nX-Long: first\r\n  second\r\n\tthird\r\nContent-Length: 0\r\n\r\n"
    assert new(data).getheader("x-long") == "first second third"
    # http.client keeps the raw line breaks inside the value; the words are the same
    assert (old(data).getheader("x-long") or "").split() == ["first", "second", "third"]


def test_values_lose_their_surrounding_spaces_and_keep_latin1() -> None:
    data = b"HTTP/1.1 200 OK\r\nX-A:\t  caf\xe9  \r\nContent-Length:  2 \r\n\r\nok"
    r = new(data)
    assert r.getheader("x-a") == "caf\u00e9" and r.length == 2 and r.read() == b"ok"


def test_a_bare_lf_line_end_is_accepted_like_http_client() -> None:
    data = b"HTTP/1.1 200 OK\nContent-Length: 2\n\nok"
    assert new(data).read() == old(data).read() == b"ok"


def test_chunked_bodies_are_decoded_by_http_client_as_before() -> None:
    data = (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 999\r\n\r\n"
            b"5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nX-Trailer: t\r\n\r\n")
    a, b = new(data), old(data)
    assert a.chunked and a.length is None and not a.will_close
    assert a.read() == b.read() == b"hello world" and a.isclosed()


@pytest.mark.parametrize(("head", "closes"), [
    (b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n", True),
    (b"HTTP/1.1 200 OK\r\nConnection: Keep-Alive, Close\r\nContent-Length: 0\r\n\r\n", True),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", False),
    (b"HTTP/1.1 200 OK\r\n\r\n", True),  # no length, not chunked: the body ends at close
    (b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n", True),
    (b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n", False),
    (b"HTTP/1.1 204 No Content\r\n\r\n", False),
], ids=["close", "close-in-a-list", "keep-alive", "no-length", "http-1.0", "http-1.0-keep-alive", "204"])
def test_keep_alive_is_decided_as_http_client_decides_it(head: bytes, closes: bool) -> None:
    a, b = new(head), old(head)
    assert a.will_close == b.will_close == closes
    assert (a.version, a.length) == (b.version, b.length)


def test_interim_100_continue_answers_are_skipped() -> None:
    data = b"HTTP/1.1 100 Continue\r\nX-I: 1\r\n\r\nHTTP/1.1 100 Continue\r\n\r\n" + PROM
    assert new(data).status == old(data).status == 200


def test_a_status_line_without_reason_is_fine() -> None:
    r = new(b"HTTP/1.1 503\r\nContent-Length: 0\r\n\r\n")
    assert (r.status, r.reason) == (503, "")


# ---- bounds ----------------------------------------------------------------------------------------


def _with_headers(n: int) -> bytes:
    return b"HTTP/1.1 200 OK\r\n" + b"".join(b"X-%d: v\r\n" % i for i in range(n)) + b"\r\n"


def test_header_lines_are_capped_like_http_client() -> None:
    # http.client counts the empty line that ends the head: 99 fields pass, 100 do not
    assert len(new(_with_headers(MAX_HEADERS - 1)).getheaders()) == MAX_HEADERS - 1
    old(_with_headers(MAX_HEADERS - 1))
    assert refusal(_with_headers(MAX_HEADERS)) == f"more than {MAX_HEADERS} header lines"
    with pytest.raises(http.client.HTTPException):
        old(_with_headers(MAX_HEADERS))


def test_a_folded_line_counts_as_a_line() -> None:
    data = b"HTTP/1.1 200 OK\r\nX: a\r\n" + b" more\r\n" * (MAX_HEADERS - 1) + b"\r\n"
    assert "more than 100 header lines" in refusal(data)


@pytest.mark.parametrize("where", ["status", "header"])
def test_a_line_over_64_kib_is_refused(where: str) -> None:
    long = b"a" * MAX_LINE
    data = (b"HTTP/1.1 200 " + long + b"\r\n\r\n") if where == "status" else \
        (b"HTTP/1.1 200 OK\r\nX-Big: " + long + b"\r\n\r\n")
    message = refusal(data)
    assert f"longer than {MAX_LINE} bytes" in message and "aaaa" not in message
    # a line of exactly the cap (its line end included) passes, as in http.client
    fits = b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * (MAX_LINE - len(b"X-Big: \r\n")) + b"\r\n\r\n"
    assert len(new(fits).getheader("x-big") or "") == len(old(fits).getheader("x-big") or "")


# ---- malformed heads ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("data", "rule"), [
    (b"HTTP/1.1 200 OK\r\nContent-Type: a", "the connection closed inside the header line 1"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n", "the connection closed inside the header line 2"),
    (b"HTTP/1.1 200 OK", "the connection closed inside the status line"),
    (b"HTTP/1.1 200 OK\r\nX-A: a\rb\r\n\r\n", "header line 1 contains a bare CR or a NUL byte"),
    (b"HTTP/1.1 200 OK\r\nX-A: a\x00b\r\n\r\n", "header line 1 contains a bare CR or a NUL byte"),
    (b"HTTP/1.1 200 OK\r\nsecret-token\r\n\r\n", "header line 1 has no ':'"),
    (b"HTTP/1.1 200 OK\r\n: v\r\n\r\n", "header line 1 has an empty or invalid field name"),
    (b"HTTP/1.1 200 OK\r\nContent-Length : 5\r\n\r\n", "header line 1 has an empty or invalid field name"),
    (b"HTTP/1.1 200 OK\r\n folded\r\n\r\n", "header line 1 continues a header field but none came before it"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 5x\r\n\r\n", "Content-Length is not a decimal number"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", "Content-Length is not a decimal number"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: " + b"9" * 5000 + b"\r\n\r\n", "Content-Length is not a decimal"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nok",
     "several Content-Length fields with different values"),
    (b"SSH-2.0-OpenSSH_9.6\r\n", "the status line does not start with 'HTTP/1.x '"),
    (b"HTTP/2 200\r\n\r\n", "the status line does not start with 'HTTP/1.x '"),
    (b"HTTP/1.1 2000 OK\r\n\r\n", "the status line has no 3-digit status code"),
    (b"HTTP/1.1 OK 200\r\n\r\n", "the status line has no 3-digit status code"),
    (b"HTTP/1.1 \xb2\xb2\xb2 OK\r\n\r\n", "the status line has no 3-digit status code"),
    (b"HTTP/1.1\r\n\r\n", "the status line has no 3-digit status code"),
    (b"HTTP/1.1 100 Continue\r\n\r\n" * 11 + PROM, "more than 10 interim '100 Continue' answers"),
], ids=["eof-in-a-line", "eof-before-the-empty-line", "eof-in-the-status-line", "bare-cr", "nul",
        "no-colon", "empty-name", "space-before-colon", "continuation-first", "length-not-digits",
        "negative-length", "length-5000-digits", "conflicting-lengths", "not-http", "http-2",
        "4-digit-status", "status-not-a-number", "status-superscript-digits", "no-status", "too-many-100s"])
def test_a_malformed_head_is_refused_naming_the_rule(data: bytes, rule: str) -> None:
    assert rule in refusal(data)


def test_a_closed_connection_before_any_byte_is_remote_disconnected() -> None:
    # the keep-alive retry (escaler.signals.fetch) treats this one as "the idle connection was stale"
    with pytest.raises(http.client.RemoteDisconnected):
        new(b"")


def test_identical_duplicate_lengths_are_fine() -> None:
    r = new(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nok")
    assert r.read() == b"ok"


# ---- the property: the same answer as http.client ----------------------------------------------------

_NAME = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.!#$%&'*+^`|~",
                min_size=1, max_size=20)
# a field value: latin-1 without CR, LF or NUL (what a server may send in a well-formed head)
_VALUE = st.text(alphabet=st.characters(min_codepoint=0x09, max_codepoint=0xFF,
                                        blacklist_characters="\r\n\x00\x0b\x0c"), max_size=30)
_WORD = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789/=;,. -", min_size=1, max_size=12) \
    .map(str.strip).filter(bool)
_FIELD = st.one_of(
    st.tuples(_NAME.filter(lambda n: n.lower() not in _FRAMING), _VALUE, st.lists(_WORD, max_size=2)),
    st.tuples(st.sampled_from(["Content-Type", "content-type", "Location", "Content-Encoding"]), _WORD,
              st.just([])),
    st.tuples(st.sampled_from(["Connection", "connection"]),
              st.sampled_from(["close", "keep-alive", "Upgrade"]), st.just([])),
)
_FRAMING = {"content-length", "transfer-encoding", "connection", "keep-alive", "proxy-connection"}


def _unfold(value: str) -> str:
    """http.client's value as this parser reads it: line breaks of folds as one space, no
    surrounding spaces."""
    return re.sub(r"(?:[ \t]*\r?\n[ \t]*)+", " ", value).strip(" \t")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(status=st.integers(100, 999).filter(lambda s: s != 100), version=st.sampled_from(["1.0", "1.1"]),
       reason=st.sampled_from(["", " OK", " Not Found", " a  b"]), fields=st.lists(_FIELD, max_size=25),
       framing=st.sampled_from(["length", "chunked", "none", "both"]), eol=st.sampled_from(["\r\n", "\n"]))
def test_any_well_formed_head_reads_as_http_client_reads_it(
        status: int, version: str, reason: str, fields: list[tuple[str, str, list[str]]], framing: str,
        eol: str) -> None:
    lines = [f"HTTP/{version} {status}{reason}"]
    for name, value, folds in fields:
        lines.append(f"{name}: {value}")
        lines += [f" {w}" for w in folds]
    if framing in ("length", "both"):
        lines.append("Content-Length: 4")
    if framing in ("chunked", "both"):
        lines.append("Transfer-Encoding: chunked")
    body = b"4\r\nbody\r\n0\r\n\r\n" if framing in ("chunked", "both") else b"body"
    data = (eol.join(lines) + eol + eol).encode("iso-8859-1") + body
    a, b = new(data), old(data)
    assert (a.status, a.reason, a.version, a.chunked, a.length, a.will_close) == \
        (b.status, b.reason, b.version, b.chunked, b.length, b.will_close)
    assert a.getheaders() == [(k, _unfold(v)) for k, v in b.getheaders()]
    for name, _, _ in fields:
        assert a.headers.get_all(name) == [_unfold(v) for v in b.headers.get_all(name) or []]
    assert a.read() == b.read()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.binary(max_size=300),
                 st.lists(st.sampled_from([b"HTTP/1.1 200 OK", b"HTTP/1.0 100 x", b"X: y", b" z", b":", b"\r",
                                           b"\0", b"Content-Length: 3", b"Transfer-Encoding: chunked",
                                           b"", b"\xff", b"HTTP/1.1"]), max_size=12)
                 .map(lambda parts: b"\r\n".join(parts))))
def test_any_bytes_are_read_or_refused_never_crash(data: bytes) -> None:
    """Refused with our error, or read — and then http.client reads the same status and framing."""
    try:
        a = new(data)
    except (MalformedResponse, http.client.RemoteDisconnected):
        return
    b = old(data)
    assert (a.status, a.version, a.chunked, a.length, a.will_close) == \
        (b.status, b.version, b.chunked, b.length, b.will_close)


# ---- the deadline holds while a head trickles in (injected clock) -----------------------------------


class _TrickleSock:
    """A connected socket that returns one byte per receive, each taking ``per_byte`` seconds of
    ``clock``; records the timeouts it was given."""

    def __init__(self, data: bytes, clock: FakeClock, per_byte: float) -> None:
        self.data, self.clock, self.per_byte = data, clock, per_byte
        self.timeouts: list[float] = []

    def settimeout(self, t: float) -> None:
        self.timeouts.append(t)

    def setsockopt(self, level: int, option: int, value: int) -> None:
        """Socket options (the quick ACK asked before each receive) change nothing here."""

    def recv_into(self, buffer: Any) -> int:
        self.clock.step(self.per_byte)
        if not self.data:
            return 0
        buffer[0] = self.data[0]
        self.data = self.data[1:]
        return 1


@pytest.mark.parametrize("data", [
    b"HTTP/1.1 200 OK\r\n" + b"X-Slow: " + b"a" * 1000 + b"\r\n\r\n",
    b"HTTP/1.1 200 OK\r\n" + b"X: a\r\n" * 90 + b"\r\n",
    b"HTTP/1.1 100 Continue\r\n\r\n" * 5 + b"HTTP/1.1 200 OK\r\n\r\n",
], ids=["one-long-line", "many-short-lines", "interim-answers"])
def test_a_head_trickled_one_byte_at_a_time_hits_the_deadline(data: bytes) -> None:
    clock = FakeClock()
    exchange = fetch_module._Exchange(clock, clock.monotonic() + 5.0)
    sock = _TrickleSock(data, clock, per_byte=0.3)
    resp = BoundedResponse(fetch_module._Sock(exchange.reader(sock)), method="GET")  # type: ignore[arg-type]
    with pytest.raises(fetch_module._Timeout):
        resp.begin()
    # cut after 5 s of 0.3 s bytes (17 of them), every receive given only what was left
    assert len(data) - len(sock.data) == 17
    assert all(0 < t <= 5.0 for t in sock.timeouts) and sock.timeouts == sorted(sock.timeouts, reverse=True)


# ---- through fetch: messages and keep-alive ----------------------------------------------------------


def _client() -> HttpClient:
    return HttpClient(AddressPolicy(parse_networks("127.0.0.0/8")))


def _serve(answers: list[bytes]) -> tuple[RawServer, list[int]]:
    """A server answering request n on any connection with ``answers[n]``; counts connections."""
    count = [0]
    n = [0]
    mu = threading.Lock()

    def script(conn: socket.socket, stop: threading.Event) -> None:
        with mu:
            count[0] += 1
        while read_request(conn):
            with mu:
                i = n[0]
                n[0] += 1
            conn.sendall(answers[min(i, len(answers) - 1)])
    return RawServer(script), count


def test_fetch_names_the_rule_and_never_the_bytes() -> None:
    srv, _ = _serve([b"HTTP/1.1 200 OK\r\nAKIAIOSFODNN7EXAMPLE\r\n\r\n"])
    with srv, pytest.raises(FetchError) as got:
        fetch(_client(), srv.url + "/api/v1/query", timeout=5)
    message = str(got.value)
    assert message.endswith("malformed HTTP response: header line 1 has no ':'")
    assert "AKIA" not in message


def test_chunked_answers_keep_the_connection_alive() -> None:
    chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\n{}\n\r\n0\r\n\r\n"
    srv, connections = _serve([chunked])
    client = _client()
    with srv:
        bodies = [fetch(client, srv.url + "/", timeout=5).body for _ in range(3)]
    assert bodies == [b"{}\n"] * 3 and connections[0] == 1 and client.pool.reused == 2


def test_a_malformed_answer_drops_the_connection() -> None:
    good = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
    srv, connections = _serve([good, b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n", good])
    client = _client()
    with srv:
        assert fetch(client, srv.url + "/", timeout=5).body == b"ok"
        with pytest.raises(FetchError, match="Content-Length is not a decimal number"):
            fetch(client, srv.url + "/", timeout=5)
        assert client.pool.idle() == 0
        assert fetch(client, srv.url + "/", timeout=5).body == b"ok"
    assert connections[0] == 2
