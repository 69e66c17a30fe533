"""escaler.signals.prometheus (and fetch): ExternalServer instant queries over real HTTP."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from test_kube_fakeapi import FakeAPI, Reply, Req, Stream

from escaler.clock import FakeClock
from escaler.signals import (
    AddressPolicy,
    HttpClient,
    Sample,
    parse_networks,
    parse_query_response,
    query_prometheus,
)
from escaler.signals.prometheus import MAX_ERROR_TEXT


def vector(*values: str, labels: bool = False) -> dict[str, Any]:
    return {"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": {"pod": f"p{i}"} if labels else {}, "value": [1767225600.0, v]}
        for i, v in enumerate(values)]}}


def doc(result_type: str, result: Any) -> dict[str, Any]:
    return {"status": "success", "data": {"resultType": result_type, "result": result}}


BIG = "x" * 5000

# id, HTTP status, body (dict → JSON), expected value or error fragment
CASES: list[tuple[str, int, Any, float | str]] = [
    ("one-sample-vector", 200, vector("42.5"), 42.5),
    ("scalar", 200, doc("scalar", [1767225600.0, "7"]), 7.0),
    ("zero", 200, vector("0"), 0.0),
    ("scientific", 200, vector("1e3"), 1000.0),
    ("empty-vector", 200, vector(), "returned no series"),
    ("several-series", 200, vector("1", "2", "3", labels=True),
     "returned 3 series; aggregate them to one (e.g. wrap the query in sum())"),
    ("matrix", 200, doc("matrix", []), "result type 'matrix' is not supported"),
    ("string", 200, doc("string", [0, "x"]), "result type 'string' is not supported"),
    ("nan", 200, vector("NaN"), "is nan (not a finite number)"),
    ("plus-inf", 200, vector("+Inf"), "is inf (not a finite number)"),
    ("minus-inf", 200, doc("scalar", [0, "-Inf"]), "is -inf (not a finite number)"),
    ("not-a-number", 200, vector("abc"), "value that is not a number"),
    ("native-histogram", 200, doc("vector", [{"metric": {}, "histogram": [0, {"count": "1"}]}]),
     "a native histogram"),
    ("malformed-sample", 200, doc("vector", [{"metric": {}, "value": [0, 1.5]}]), "malformed sample"),
    ("status-error", 200, {"status": "error", "errorType": "execution", "error": "too many samples"},
     'query status is not "success": (execution) too many samples'),
    ("bad-query-400", 400, {"status": "error", "errorType": "bad_data", "error": "parse error at char 4"},
     "HTTP 400: (bad_data) parse error at char 4"),
    ("unavailable-503", 503, "upstream down", "HTTP 503, 13 bytes"),
    ("error-fields-not-strings", 500, {"error": {"x": 1}, "errorType": 7}, "HTTP 500, 35 bytes"),
    ("not-json", 200, "<html>hello</html>", "not a JSON object (18 bytes)"),
    ("no-data", 200, {"status": "success"}, "no data object"),
    ("redirect", 302, "", "redirects are not followed"),
]


@pytest.mark.parametrize(("code", "body", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_parse_query_response(code: int, body: Any, expected: float | str) -> None:
    raw = body.encode() if isinstance(body, str) else json.dumps(body).encode()
    s = parse_query_response(code, raw, where="http://prom:9090")
    if isinstance(expected, str):
        assert s.value is None and s.error is not None
        assert expected in s.error
        assert s.error.startswith("http://prom:9090: ")
    else:
        assert s == Sample(expected)


SECRET = "root:x:0:0:instance-credentials-AKIA1234"

# a foreign body never reaches a message: only the status, the size and Prometheus' own fields
NO_ECHO: list[tuple[str, int, bytes, str]] = [
    ("html-502", 502, f"<html>{SECRET}</html>".encode(), "HTTP 502, 53 bytes"),
    ("text-200", 200, SECRET.encode(), "not a JSON object (40 bytes)"),
    ("json-200-no-data", 200, json.dumps({"status": "ok", "creds": SECRET}).encode(),
     'query status is not "success", 69 bytes'),
    ("value-not-number", 200, json.dumps(vector(SECRET)).encode(), "value that is not a number"),
    ("malformed-value", 200, json.dumps(doc("scalar", [SECRET])).encode(), "malformed sample"),
    ("deep-nesting", 502, b"[" * 100_000, "HTTP 502, 100000 bytes"),
]


@pytest.mark.parametrize(("code", "body", "expected"), [c[1:] for c in NO_ECHO], ids=[c[0] for c in NO_ECHO])
def test_a_foreign_body_is_never_echoed(code: int, body: bytes, expected: str) -> None:
    s = parse_query_response(code, body, where="http://prom:9090")
    assert s.error is not None and expected in s.error
    assert SECRET not in s.error and "AKIA" not in s.error


def test_prometheus_error_fields_are_capped() -> None:
    s = parse_query_response(422, json.dumps({"status": "error", "errorType": "execution",
                                              "error": BIG}).encode(), where="p")
    assert s.error is not None and "(execution) xxx" in s.error
    assert s.error.count("x") <= MAX_ERROR_TEXT


# ---- over HTTP ---------------------------------------------------------------------------------


@pytest.fixture
def prom() -> Iterator[FakeAPI]:
    with FakeAPI() as a:
        yield a


@pytest.fixture
def session() -> HttpClient:
    # the fake server listens on 127.0.0.1, which the default policy refuses
    return HttpClient(AddressPolicy(parse_networks("127.0.0.0/8")))


def serve(prom: FakeAPI, status: int, body: Any, path: str = "/api/v1/query",
          headers: dict[str, str] | None = None) -> None:
    prom.on("GET", path, lambda _r: Reply(status, body, headers or {}))


def test_query_sends_the_query(prom: FakeAPI, session: HttpClient) -> None:
    serve(prom, 200, vector("3"))
    q = 'sum(vllm:num_requests_running{model="llama"})'
    assert query_prometheus(session, prom.url, q, 5) == Sample(3.0)
    (req,) = prom.reqs("GET")
    assert req.path == "/api/v1/query"
    assert req.q() == {"query": q}
    assert "authorization" not in req.headers


def test_endpoint_with_a_path_prefix(prom: FakeAPI, session: HttpClient) -> None:
    serve(prom, 200, vector("1"), path="/prometheus/api/v1/query")
    assert query_prometheus(session, prom.url + "/prometheus/", "up", 5) == Sample(1.0)


def test_bearer_token_is_never_sent_over_plain_http(prom: FakeAPI, session: HttpClient) -> None:
    serve(prom, 200, vector("1"))
    s = query_prometheus(session, prom.url, "up", 5, bearer_token="s3cret")
    assert s.error is not None and "only sent over https://" in s.error and "s3cret" not in s.error
    assert prom.reqs() == []


def test_non_200_with_a_5kb_body_is_not_echoed(prom: FakeAPI, session: HttpClient) -> None:
    serve(prom, 502, BIG)
    s = query_prometheus(session, prom.url, "up", 5)
    assert s.error is not None and "HTTP 502, 5000 bytes" in s.error
    assert "xxx" not in s.error


def test_redirects_are_not_followed(prom: FakeAPI, session: HttpClient) -> None:
    serve(prom, 302, "", headers={"Location": "http://elsewhere.example/api/v1/query"})
    s = query_prometheus(session, prom.url, "up", 5)
    assert s.error is not None and "redirects are not followed" in s.error
    assert "elsewhere" not in s.error
    assert len(prom.reqs()) == 1


def test_disallowed_host_sends_nothing(prom: FakeAPI, session: HttpClient) -> None:
    serve(prom, 200, vector("1"))
    hosts: list[str] = []

    def allowed(host: str) -> bool:
        hosts.append(host)
        return False

    s = query_prometheus(session, prom.url, "up", 5, allowed=allowed)
    assert s.error is not None and "'127.0.0.1' is not allowed by --allowed-endpoint-hosts" in s.error
    assert hosts == ["127.0.0.1"]
    assert prom.reqs() == []


@pytest.mark.parametrize("endpoint", ["http://user:pw@prom:9090", "ftp://prom", "prom:9090"],
                         ids=["credentials", "scheme", "relative"])
def test_invalid_endpoint_is_an_error(session: HttpClient, endpoint: str) -> None:
    s = query_prometheus(session, endpoint, "up", 5)
    assert s.error is not None and s.error.startswith("Prometheus query failed: endpoint")
    assert "pw" not in s.error  # a password in the spec never reaches a status message


def test_timeout(prom: FakeAPI, session: HttpClient) -> None:
    gate = threading.Event()

    def slow(_r: Req) -> Reply:
        gate.wait(10)
        return Reply(200, vector("1"))

    prom.on("GET", "/api/v1/query", slow)
    try:
        s = query_prometheus(session, prom.url, "up", 0.3)
    finally:
        gate.set()
    assert s.error is not None and "timed out after 0.3s" in s.error


def test_total_deadline_bounds_a_trickling_server(prom: FakeAPI, session: HttpClient) -> None:
    clock = FakeClock()
    body = json.dumps(vector("1")).encode()

    def trickle() -> Iterator[bytes]:
        yield body[:10]
        clock.step(60)  # the server takes "a minute" between two chunks
        yield body[10:]

    prom.on("GET", "/api/v1/query", lambda _r: Stream(trickle()))
    s = query_prometheus(session, prom.url, "up", 5, clock=clock)
    assert s.error is not None and "timed out after 5s" in s.error


def test_oversized_response_is_refused(prom: FakeAPI, session: HttpClient) -> None:
    serve(prom, 200, "1" * 5000)
    s = query_prometheus(session, prom.url, "up", 5, max_bytes=1000)
    assert s.error is not None and "larger than 1000 bytes" in s.error


def test_connection_refused(session: HttpClient) -> None:
    with FakeAPI() as gone:
        url = gone.url
    s = query_prometheus(session, url, "up", 2)
    assert s.error is not None and s.error.startswith("Prometheus query failed: GET ")
