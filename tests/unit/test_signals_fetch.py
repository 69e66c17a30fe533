"""Outbound calls to user-named endpoints (issue 9, "Outbound calls"): each test here is a
regression test that fails on the code before the change (6cf3acc), so it runs there too: the
client comes from ``client()``, a ``requests.Session`` on the old code.

* a total deadline per response: a server trickling the body, or the headers, one byte every
  0.2 s is cut at the deadline (the old client read on for as long as the server trickled);
* SSRF: loopback (also as ``::ffff:127.0.0.1`` and as a name) and metadata host names are
  refused before anything is sent, unless re-allowed;
* no echo: a foreign body never reaches a message;
* no cookies kept between requests, no proxy taken from the environment;
* ExternalServer ``timeoutSeconds`` at most 30, the collection budget 30 s, no ``?``/``#`` in
  the endpoint;
* ``bearerTokenSecretRef``: only Secrets labelled ``elasticscaler.io/bearer-token: "true"`` are
  read, and a token never goes over plain ``http://`` (the Secret is not even read).
"""

from __future__ import annotations

import base64
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import requests
from outbound_fakes import FakeSecrets, RawServer, read_request

from escaler.api.elasticscaler import ExternalServerMetricSource, MetricSpec
from escaler.signals import query_prometheus
from escaler.signals.bearer import secret_key_reader
from escaler.signals.collector import DEFAULT_COLLECT_BUDGET_SECONDS, MetricsCollector
from escaler.signals.signal_pull import pull_signal
from escaler.webhook.validation import validate_object

try:
    from escaler.signals.fetch import HttpClient
    from escaler.signals.netpolicy import AddressPolicy, parse_networks
    NEW = True
except ImportError:  # 6cf3acc: fetch took a requests.Session and had no address policy
    NEW = False

SECRET = "AKIAIOSFODNN7EXAMPLE"
TRICKLE_SECONDS = 10.0


def client(allow: str = "") -> Any:
    """The outbound client: the default policy, or with ``allow`` re-allowed."""
    if not NEW:
        return requests.Session()
    return HttpClient(AddressPolicy(parse_networks(allow)))


def loopback() -> Any:
    return client("127.0.0.0/8")


def _trickle(head: bytes, tail: bytes) -> Callable[[socket.socket, threading.Event], None]:
    """Answer with ``head`` at once, then ``tail`` one byte every 0.2 s for up to 10 s."""
    def script(conn: socket.socket, stop: threading.Event) -> None:
        read_request(conn)
        conn.sendall(head)
        end = time.monotonic() + TRICKLE_SECONDS
        for b in tail:
            if stop.wait(0.2) or time.monotonic() > end:
                return
            conn.sendall(bytes([b]))
    return script


BODY = json.dumps({"status": "success", "data": {"resultType": "scalar", "result": [0, "1"]}}).encode()
BODY_TRICKLE = (b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n", b" " * 1000)
HEADER_TRICKLE = (b"HTTP/1.1 200 OK\r\n", b"X-Slow: " + b"a" * 1000 + b"\r\n\r\n")
STATUS_TRICKLE = (b"", b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")


@pytest.mark.parametrize(("head", "tail"), [BODY_TRICKLE, HEADER_TRICKLE, STATUS_TRICKLE],
                         ids=["body", "headers", "status-line"])
def test_a_trickling_server_is_cut_at_the_deadline(head: bytes, tail: bytes) -> None:
    with RawServer(_trickle(head, tail)) as srv:
        start = time.monotonic()
        s = query_prometheus(loopback(), srv.url, "up", 0.5)
        took = time.monotonic() - start
    assert s.value is None and s.error is not None and "timed out after 0.5s" in s.error
    # the server trickles a byte every 0.2 s for 10 s, so no single read waits out the 0.5 s
    # deadline; only the total deadline can end the exchange (slack for a loaded machine, far from 10)
    assert took < 4.0, f"the query took {took:.1f}s: the deadline did not bound the exchange"


def test_a_trickling_signal_endpoint_is_cut_at_the_deadline() -> None:
    with RawServer(_trickle(*BODY_TRICKLE)) as srv:
        start = time.monotonic()
        r = pull_signal(loopback(), srv.url + "/signal", timeout=0.5)
        took = time.monotonic() - start
    assert r.error is not None and "timed out" in r.error and took < 4.0


# ---- SSRF ----------------------------------------------------------------------------------------


def _answering(body: bytes = BODY) -> Callable[[socket.socket, threading.Event], None]:
    def script(conn: socket.socket, stop: threading.Event) -> None:
        read_request(conn)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body)
    return script


@pytest.fixture
def internal() -> Iterator[RawServer]:
    """An 'internal' service on loopback that answers anyone (the manager's own ports, say)."""
    with RawServer(_answering(json.dumps({"active": True}).encode())) as srv:
        srv.hits = 0  # type: ignore[attr-defined]
        yield srv


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "[::ffff:127.0.0.1]"],
                         ids=["ipv4", "name", "ipv4-mapped-ipv6"])
def test_loopback_is_refused_by_default(internal: RawServer, host: str) -> None:
    r = pull_signal(client(), f"http://{host}:{internal.port}/status", timeout=2)
    assert r.active is None and r.error is not None, "the manager fetched a loopback URL for a scaler"
    assert "loopback (127.0.0.0/8)" in r.error and "--allow-endpoint-networks" in r.error


def test_loopback_re_allowed_explicitly(internal: RawServer) -> None:
    r = pull_signal(loopback(), f"http://127.0.0.1:{internal.port}/status", timeout=2)
    assert r.active is True


@pytest.mark.parametrize("host", ["metadata.google.internal", "METADATA.google.internal.", "instance-data",
                                  "169.254.169.254"])
def test_metadata_services_are_refused_before_any_request(host: str) -> None:
    start = time.monotonic()
    s = query_prometheus(client(), f"http://{host}", "up", 2)
    assert s.error is not None and "metadata service" in s.error
    assert time.monotonic() - start < 1.0  # refused, not timed out connecting


# ---- no echo ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("status", [200, 502])
def test_a_foreign_body_never_reaches_a_message(status: int) -> None:
    page = f"<html><body>{SECRET}</body></html>".encode()

    def script(conn: socket.socket, stop: threading.Event) -> None:
        read_request(conn)
        conn.sendall(b"HTTP/1.1 %d X\r\nContent-Length: %d\r\n\r\n" % (status, len(page)) + page)

    with RawServer(script) as srv:
        s = query_prometheus(loopback(), srv.url, "up", 2)
        r = pull_signal(loopback(), srv.url + "/x", timeout=2)
    assert s.error is not None and r.error is not None
    for message in (s.error, r.error):
        assert SECRET not in message and "<html>" not in message
        assert f"{len(page)} bytes" in message


# ---- no cookies, no proxy --------------------------------------------------------------------------


def test_no_cookie_is_kept_between_requests() -> None:
    heads: list[bytes] = []

    def script(conn: socket.socket, stop: threading.Event) -> None:
        heads.append(read_request(conn))
        conn.sendall(b"HTTP/1.1 200 OK\r\nSet-Cookie: session=tracked; Path=/\r\nContent-Length: %d\r\n"
                     b"Connection: close\r\n\r\n" % len(BODY) + BODY)

    c = loopback()
    with RawServer(script) as srv:
        assert query_prometheus(c, srv.url, "up", 2).value == 1.0
        assert query_prometheus(c, srv.url, "up", 2).value == 1.0
    assert len(heads) == 2 and b"cookie" not in heads[1].lower()


def test_proxy_environment_is_ignored(monkeypatch: pytest.MonkeyPatch) -> None:
    proxied: list[bytes] = []

    def proxy(conn: socket.socket, stop: threading.Event) -> None:
        proxied.append(read_request(conn))
        conn.sendall(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")

    with RawServer(proxy) as p, RawServer(_answering()) as srv:
        for var in ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
            monkeypatch.setenv(var, p.url)
        for var in ("NO_PROXY", "no_proxy"):
            monkeypatch.delenv(var, raising=False)
        s = query_prometheus(loopback(), srv.url, "up", 2)
    assert proxied == [], "the request went through a proxy taken from the environment"
    assert s.value == 1.0


# ---- API bounds ------------------------------------------------------------------------------------


def _server(**over: Any) -> dict[str, Any]:
    return {"endpoint": "http://prometheus.monitoring:9090", "query": "sum(up)",
            "target": {"type": "Value", "value": "1"}, **over}


def test_timeout_seconds_is_capped_at_30() -> None:
    ExternalServerMetricSource.model_validate(_server(timeoutSeconds=30))
    with pytest.raises(ValueError, match=r"timeout_seconds|timeoutSeconds"):
        ExternalServerMetricSource.model_validate(_server(timeoutSeconds=31))


def test_collection_budget_is_30_seconds() -> None:
    assert DEFAULT_COLLECT_BUDGET_SECONDS == 30


def _es(endpoint: str) -> dict[str, Any]:
    return {"apiVersion": "elasticscaler.io/v1alpha1", "kind": "ElasticScaler",
            "metadata": {"name": "s", "namespace": "team"},
            "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "d"},
                     "minReplicas": 1, "maxReplicas": 3,
                     "trigger": {"type": "MetricsTrigger", "metricsTrigger": {"metrics": [
                         {"type": "ExternalServer", "externalServer": _server(endpoint=endpoint)}]}}}}


@pytest.mark.parametrize("endpoint", ["http://prom:9090/?x=1", "http://prom:9090#frag", "http://prom:9090/a?"],
                         ids=["query", "fragment", "empty-query"])
def test_external_server_endpoint_refuses_query_and_fragment(endpoint: str) -> None:
    out = validate_object("ElasticScaler", _es(endpoint))
    path = "spec.trigger.metricsTrigger.metrics[0].externalServer.endpoint"
    assert [e.path for e in out.errors] == [path], out.errors
    assert "'?' or '#'" in out.errors[0].message


def test_external_server_endpoint_with_a_path_is_fine() -> None:
    assert validate_object("ElasticScaler", _es("https://prom.example/prometheus/")).errors == []


# ---- bearer tokens -------------------------------------------------------------------------------


def test_a_secret_that_did_not_opt_in_is_never_read() -> None:
    # any Secret of the namespace, e.g. a database password the scaler's author cannot read
    secret = {"metadata": {"name": "db"}, "data": {"password": base64.b64encode(SECRET.encode()).decode()}}
    read = secret_key_reader(FakeSecrets({"db": secret}))  # type: ignore[arg-type]
    with pytest.raises(Exception) as got:
        read("team", "db", "password", "evil.example")
    assert "elasticscaler.io/bearer-token" in str(got.value) and SECRET not in str(got.value)


def test_a_token_never_goes_over_plain_http() -> None:
    reads: list[str] = []
    heads: list[bytes] = []

    def reader(ns: str, name: str, key: str, host: str) -> str:
        reads.append(name)
        return SECRET

    def script(conn: socket.socket, stop: threading.Event) -> None:
        heads.append(read_request(conn))
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(BODY) + BODY)

    with RawServer(script) as srv:
        spec = MetricSpec.model_validate({"type": "ExternalServer", "externalServer": {
            **_server(endpoint=srv.url), "bearerTokenSecretRef": {"name": "prom", "key": "token"}}})
        http = loopback() if NEW else requests.Session
        c = MetricsCollector(None, None, http, secret_reader=reader)  # type: ignore[arg-type]
        [(_, sample)] = c.collect("team", [spec], _Target(), 1)
    assert not any(SECRET.encode() in h for h in heads), "the token went over plain http"
    assert sample.error is not None and "only sent over https://" in sample.error
    assert reads == []


class _Target:
    selector = ""
    spec_replicas = 1
