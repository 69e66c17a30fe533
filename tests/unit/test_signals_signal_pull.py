"""escaler.signals.signal_pull: strict parsing of {"active": bool, "replicas": int?}, over real HTTP."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
import requests
from test_kube_fakeapi import FakeAPI, Reply, Req

from escaler.errors import MAX_BODY_BYTES
from escaler.signals import SignalReading, parse_signal, pull_signal
from escaler.signals.signal_pull import MAX_SIGNAL_BYTES

GOOD: list[tuple[str, bytes, SignalReading]] = [
    ("active", b'{"active": true}', SignalReading(True)),
    ("idle", b'{"active": false}', SignalReading(False)),
    ("with-replicas", b'{"active": true, "replicas": 3}', SignalReading(True, 3)),
    ("zero-replicas", b'{"active": false, "replicas": 0}', SignalReading(False, 0)),
    ("null-replicas", b'{"active": true, "replicas": null}', SignalReading(True, None)),
    ("unknown-keys-ignored", b'{"active": true, "queue": 12, "since": "x"}', SignalReading(True)),
    ("whitespace", b' \n{"active":true}\n', SignalReading(True)),
]

BAD: list[tuple[str, bytes, str]] = [
    ("active-string", b'{"active": "true"}', '"active" must be a JSON boolean, got "true"'),
    ("active-number", b'{"active": 1}', '"active" must be a JSON boolean, got 1'),
    ("active-missing", b'{"replicas": 2}', '"active" must be a JSON boolean, got null'),
    ("empty-object", b"{}", '"active" must be a JSON boolean'),
    ("negative-replicas", b'{"active": true, "replicas": -1}', '"replicas" must be an integer >= 0, got -1'),
    ("float-replicas", b'{"active": true, "replicas": 2.0}', "got 2.0"),
    ("bool-replicas", b'{"active": true, "replicas": true}', "got true"),
    ("string-replicas", b'{"active": true, "replicas": "2"}', 'got "2"'),
    ("array", b"[true]", "not a JSON object"),
    ("null", b"null", "not a JSON object"),
    ("not-json", b"active", "not JSON"),
    ("empty", b"", "not JSON"),
    ("bad-utf8", b"\xff\xfe", "not JSON"),
]


@pytest.mark.parametrize(("body", "expected"), [c[1:] for c in GOOD], ids=[c[0] for c in GOOD])
def test_parse_good(body: bytes, expected: SignalReading) -> None:
    assert parse_signal(body) == expected


@pytest.mark.parametrize(("body", "fragment"), [c[1:] for c in BAD], ids=[c[0] for c in BAD])
def test_parse_bad(body: bytes, fragment: str) -> None:
    r = parse_signal(body, where="signal endpoint http://gw/x")
    assert r.active is None and r.replicas is None
    assert r.error is not None and fragment in r.error
    assert r.error.startswith("signal endpoint http://gw/x: ")


@pytest.mark.parametrize(("active", "error"), [(None, None), (True, "x")], ids=["neither", "both"])
def test_reading_refuses_programming_errors(active: Any, error: Any) -> None:
    with pytest.raises(ValueError):
        SignalReading(active, None, error)


# ---- over HTTP ---------------------------------------------------------------------------------

PATH = "/activity/llama"


@pytest.fixture
def gw() -> Iterator[FakeAPI]:
    with FakeAPI() as a:
        yield a


@pytest.fixture
def session() -> Iterator[requests.Session]:
    with requests.Session() as s:
        yield s


def test_pull(gw: FakeAPI, session: requests.Session) -> None:
    gw.on("GET", PATH, lambda _r: Reply(200, {"active": True, "replicas": 2}))
    assert pull_signal(session, gw.url + PATH, bearer_token="t0k") == SignalReading(True, 2)
    (req,) = gw.reqs("GET", PATH)
    assert req.headers["authorization"] == "Bearer t0k"


def test_http_error_is_capped(gw: FakeAPI, session: requests.Session) -> None:
    gw.on("GET", PATH, lambda _r: Reply(500, "e" * 5000))
    r = pull_signal(session, gw.url + PATH)
    assert r.active is None and r.error is not None
    assert f"signal endpoint {gw.url}{PATH}: HTTP 500: eee" in r.error
    assert len(r.error.encode()) <= MAX_BODY_BYTES + len("…".encode())


def test_redirect_is_an_error(gw: FakeAPI, session: requests.Session) -> None:
    gw.on("GET", PATH, lambda _r: Reply(307, "", {"Location": "http://elsewhere.example/"}))
    r = pull_signal(session, gw.url + PATH)
    assert r.error is not None and "HTTP 307" in r.error
    assert len(gw.reqs()) == 1


def test_oversized_body(gw: FakeAPI, session: requests.Session) -> None:
    gw.on("GET", PATH, lambda _r: Reply(200, " " * (MAX_SIGNAL_BYTES + 1)))
    r = pull_signal(session, gw.url + PATH)
    assert r.error is not None and f"larger than {MAX_SIGNAL_BYTES} bytes" in r.error


def test_timeout(gw: FakeAPI, session: requests.Session) -> None:
    gate = threading.Event()

    def slow(_r: Req) -> Reply:
        gate.wait(10)
        return Reply(200, {"active": True})

    gw.on("GET", PATH, slow)
    try:
        r = pull_signal(session, gw.url + PATH, timeout=0.3)
    finally:
        gate.set()
    assert r.active is None and r.error is not None and "timed out after 0.3s" in r.error


def test_disallowed_host(gw: FakeAPI, session: requests.Session) -> None:
    r = pull_signal(session, gw.url + PATH, allowed=lambda _h: False)
    assert r.error is not None and "not allowed by --allowed-endpoint-hosts" in r.error
    assert gw.reqs() == []
