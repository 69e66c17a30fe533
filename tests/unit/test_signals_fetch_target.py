"""The request line ``fetch`` sends, now that a URL's checks and quoting are kept per URL and the
params are form-encoded through a byte table (issue 30, CPU per poll): the request target must be
byte for byte what ``urllib``'s quoting made of it before, and a refused URL is refused on every
call, not only the first.

* ``_form_encode`` equals ``urllib.parse.urlencode`` for any string keys and values (hypothesis:
  PromQL's braces, quotes and spaces, non-ASCII, control characters);
* the target a server receives for an endpoint with and without its own query string;
* a URL the rules refuse raises the same ``FetchError`` on a second call (the kept answer is the
  refusal, not a pass);
* every receive asks the kernel for a quick ACK first (Linux's ``TCP_QUICKACK``; CI runs Linux).
"""

from __future__ import annotations

import json
import socket
import threading
from urllib.parse import urlencode

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from outbound_fakes import RawServer, read_request

from escaler.signals.fetch import FetchError, HttpClient, _form_encode, fetch
from escaler.signals.netpolicy import AddressPolicy, parse_networks

BODY = json.dumps({"status": "success"}).encode()


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.text(max_size=20), st.text(max_size=80), max_size=4))
def test_form_encode_is_urlencode(params: dict[str, str]) -> None:
    assert _form_encode(params) == urlencode(params)


def test_form_encode_of_a_promql_query() -> None:
    q = 'sum(rate(http_requests_total{namespace="es-3",service="a b"}[1m])) > 0.5 ~ é'
    assert _form_encode({"query": q}) == urlencode({"query": q})


def _answer(seen: list[bytes]) -> object:
    def script(conn: socket.socket, stop: threading.Event) -> None:
        seen.append(read_request(conn))
        head = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(BODY)
        conn.sendall(head + BODY)
    return script


@pytest.mark.parametrize(("path", "params", "target"), [
    ("/api/v1/query", {"query": 'up{job="a b"}'}, "/api/v1/query?query=up%7Bjob%3D%22a+b%22%7D"),
    ("/api/v1/query?x=1", {"query": "up"}, "/api/v1/query?x=1&query=up"),
    ("/p%20q?x='a'&y=é", None, "/p%20q?x='a'&y=%C3%A9"),
    ("", {}, "/"),
])
def test_the_target_the_server_receives(path: str, params: dict[str, str] | None, target: str) -> None:
    seen: list[bytes] = []
    client = HttpClient(AddressPolicy(parse_networks("127.0.0.0/8")))
    with RawServer(_answer(seen)) as srv:  # type: ignore[arg-type]
        for _ in range(2):  # the second call takes the kept facts of the URL
            resp = fetch(client, f"http://127.0.0.1:{srv.port}{path}", timeout=5, params=params)
            assert resp.status == 200
    assert [line.split(b"\r\n", 1)[0] for line in seen] == [f"GET {target} HTTP/1.1".encode()] * 2


@pytest.mark.parametrize(("url", "rule"), [
    ("ftp://127.0.0.1/x", "scheme 'ftp' is not supported"),
    ("http://exa mple/", "whitespace"),
    ("http://metadata.google.internal/x", "cloud metadata service"),
])
def test_a_refused_url_is_refused_every_time(url: str, rule: str) -> None:
    client = HttpClient(AddressPolicy(parse_networks("127.0.0.0/8")))
    for _ in range(2):
        with pytest.raises(FetchError, match=rule):
            fetch(client, url, timeout=5, params={"query": "up"})


class _RecordingSocket:
    """What ``_DeadlineRaw`` calls on its socket, in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[object, ...]] = []

    def settimeout(self, t: float | None) -> None:
        self.calls.append(("settimeout",))

    def setsockopt(self, level: int, option: int, value: int) -> None:
        self.calls.append(("setsockopt", level, option, value))

    def recv_into(self, buffer: bytearray) -> int:
        self.calls.append(("recv_into",))
        return 0


def test_every_receive_asks_for_a_quick_ack() -> None:
    """A server writing head and body apart with Nagle on waits for the head's ACK: each receive
    first asks the kernel to acknowledge at once (the kernel clears the mode by itself), so the
    body is not held ~40 ms by the delayed-ACK timer (bench/bench_fetch_split.py measures it)."""
    from escaler.clock import RealClock
    from escaler.signals.fetch import _DeadlineRaw, _Exchange

    sock = _RecordingSocket()
    raw = _DeadlineRaw(sock, _Exchange(RealClock(), RealClock().monotonic() + 5))  # type: ignore[arg-type]
    for _ in range(2):
        raw.readinto(bytearray(16))
    quick = ("setsockopt", socket.IPPROTO_TCP, socket.TCP_QUICKACK, 1)
    assert [c for c in sock.calls if c[0] != "settimeout"] == [quick, ("recv_into",)] * 2
