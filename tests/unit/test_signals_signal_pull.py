"""escaler.signals.signal_pull: strict parsing of {"active": bool, "replicas": int?}, over real HTTP."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from test_kube_fakeapi import FakeAPI, Reply, Req

from escaler.signals import (
    AddressPolicy,
    HttpClient,
    SignalReading,
    parse_networks,
    parse_signal,
    pull_signal,
)
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
    ("active-string", b'{"active": "true"}', '"active" must be a JSON boolean, got a string'),
    ("active-number", b'{"active": 1}', '"active" must be a JSON boolean, got an integer'),
    ("active-missing", b'{"replicas": 2}', '"active" must be a JSON boolean, got null'),
    ("empty-object", b"{}", '"active" must be a JSON boolean'),
    ("negative-replicas", b'{"active": true, "replicas": -1}',
     '"replicas" must be an integer >= 0, got a negative integer'),
    ("float-replicas", b'{"active": true, "replicas": 2.0}', "got a number that is not an integer"),
    ("bool-replicas", b'{"active": true, "replicas": true}', "got a boolean"),
    ("string-replicas", b'{"active": true, "replicas": "2"}', "got a string"),
    ("object-replicas", b'{"active": true, "replicas": {"a": 1}}', "got an object"),
    ("array", b"[true]", "not a JSON object"),
    ("null", b"null", "not a JSON object"),
    ("not-json", b"active", "not JSON"),
    ("empty", b"", "not JSON"),
    ("bad-utf8", b"\xff\xfe", "not JSON"),
    ("deep-nesting", b"[" * 100_000, "not JSON"),
]

SECRET = "AKIA-instance-credentials"

# a foreign body never reaches a message (status, Events): only types, sizes and the rule
NO_ECHO: list[tuple[str, bytes]] = [
    ("text", SECRET.encode()),
    ("active-string", b'{"active": "' + SECRET.encode() + b'"}'),
    ("replicas-string", b'{"active": true, "replicas": "' + SECRET.encode() + b'"}'),
    ("active-list", b'{"active": ["' + SECRET.encode() + b'"]}'),
]


@pytest.mark.parametrize("body", [c[1] for c in NO_ECHO], ids=[c[0] for c in NO_ECHO])
def test_parse_never_echoes_the_body(body: bytes) -> None:
    r = parse_signal(body, where="signal endpoint http://gw/x")
    assert r.error is not None and "AKIA" not in r.error


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
def session() -> HttpClient:
    # the fake server listens on 127.0.0.1, which the default policy refuses
    return HttpClient(AddressPolicy(parse_networks("127.0.0.0/8")))


def test_pull(gw: FakeAPI, session: HttpClient) -> None:
    gw.on("GET", PATH, lambda _r: Reply(200, {"active": True, "replicas": 2}))
    assert pull_signal(session, gw.url + PATH) == SignalReading(True, 2)
    (req,) = gw.reqs("GET", PATH)
    assert "authorization" not in req.headers


def test_no_token_over_plain_http(gw: FakeAPI, session: HttpClient) -> None:
    r = pull_signal(session, gw.url + PATH, bearer_token="t0k")
    assert r.error is not None and "only sent over https://" in r.error and "t0k" not in r.error
    assert gw.reqs() == []


def test_http_error_body_is_not_echoed(gw: FakeAPI, session: HttpClient) -> None:
    gw.on("GET", PATH, lambda _r: Reply(500, "e" * 5000))
    r = pull_signal(session, gw.url + PATH)
    assert r.active is None and r.error == f"signal endpoint {gw.url}{PATH}: HTTP 500, 5000 bytes"


def test_loopback_refused_by_default(gw: FakeAPI) -> None:
    r = pull_signal(HttpClient(), gw.url + PATH)
    assert r.error is not None and "127.0.0.1 is loopback (127.0.0.0/8)" in r.error
    assert "--allow-endpoint-networks" in r.error
    assert gw.reqs() == []


def test_redirect_is_an_error(gw: FakeAPI, session: HttpClient) -> None:
    gw.on("GET", PATH, lambda _r: Reply(307, "", {"Location": "http://elsewhere.example/"}))
    r = pull_signal(session, gw.url + PATH)
    assert r.error is not None and "HTTP 307" in r.error
    assert len(gw.reqs()) == 1


def test_oversized_body(gw: FakeAPI, session: HttpClient) -> None:
    gw.on("GET", PATH, lambda _r: Reply(200, " " * (MAX_SIGNAL_BYTES + 1)))
    r = pull_signal(session, gw.url + PATH)
    assert r.error is not None and f"larger than {MAX_SIGNAL_BYTES} bytes" in r.error


def test_timeout(gw: FakeAPI, session: HttpClient) -> None:
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


def test_disallowed_host(gw: FakeAPI, session: HttpClient) -> None:
    r = pull_signal(session, gw.url + PATH, allowed=lambda _h: False)
    assert r.error is not None and "not allowed by --allowed-endpoint-hosts" in r.error
    assert gw.reqs() == []
