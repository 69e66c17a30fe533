"""Health checks, bind addresses, the HTTP server over a real loopback port, and metric names."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from runtime_fakes import http_get

from escaler.runtime.health import HealthChecks, ping
from escaler.runtime.metrics import EXPOSITION_CONTENT_TYPE, MetricsRegistry
from escaler.runtime.server import HTTPServer, Response, parse_bind_address
from escaler.workqueue.ratelimiting import RateLimitingQueue

BIND_CASES = [
    ("all-interfaces", ":8081", ("", 8081, False)),
    ("loopback-ephemeral", "127.0.0.1:0", ("127.0.0.1", 0, False)),
    ("hostname", "localhost:9090", ("localhost", 9090, False)),
    ("ipv6", "[::1]:8080", ("::1", 8080, True)),
    ("disabled-zero", "0", None),
    ("disabled-empty", "", None),
]


@pytest.mark.parametrize(("address", "expected"), [c[1:] for c in BIND_CASES], ids=[c[0] for c in BIND_CASES])
def test_parse_bind_address(address: str, expected: tuple[str, int, bool] | None) -> None:
    assert parse_bind_address(address) == expected


@pytest.mark.parametrize("address", ["8080", "host", ":99999", "1.2.3.4:", "[::1]", ":http"], ids=[
    "bare-port", "no-port", "port-too-big", "empty-port", "v6-no-port", "named-port"])
def test_parse_bind_address_rejects(address: str) -> None:
    with pytest.raises(ValueError, match="bind address"):
        parse_bind_address(address)


def test_health_checks_evaluate() -> None:
    checks = HealthChecks("readyz")
    assert checks.evaluate() == (True, "ok")  # vacuously healthy
    checks.add("ping", ping)
    checks.add("caches", lambda: False)
    checks.add("boom", lambda: 1 / 0 == 0)
    ok, body = checks.evaluate() or (True, "")
    assert not ok
    assert body == "[+]ping ok\n[-]caches failed\n[-]boom failed\nreadyz check failed\n"
    assert checks.evaluate(only="ping") == (True, "ok")
    assert checks.evaluate(only="nope") is None
    with pytest.raises(ValueError, match="already registered"):
        checks.add("ping", ping)
    with pytest.raises(ValueError, match="no '/'"):
        checks.add("a/b", ping)


@pytest.fixture
def server() -> Iterator[tuple[HTTPServer, HealthChecks, MetricsRegistry]]:
    checks = HealthChecks("healthz")
    checks.add("ping", ping)
    reg = MetricsRegistry()

    def probe(rest: str) -> Response:
        result = checks.evaluate(only=rest or None)
        if result is None:
            return 404, "text/plain", b"unknown check\n"
        return (200 if result[0] else 500), "text/plain", result[1].encode()

    srv = HTTPServer("test", "127.0.0.1:0", {
        "/healthz": probe,
        "/metrics": lambda _r: (200, EXPOSITION_CONTENT_TYPE, reg.exposition()),
        "/boom": lambda _r: (200, "text/plain", bytes(1 // 0)),
    })
    srv.serve()
    try:
        yield srv, checks, reg
    finally:
        srv.shutdown()


def test_http_server_serves_probes(server: tuple[HTTPServer, HealthChecks, MetricsRegistry]) -> None:
    srv, checks, _ = server
    assert srv.port
    assert http_get(srv.port, "/healthz")[:2] == (200, "ok")
    checks.add("db", lambda: False)
    status, body, _ = http_get(srv.port, "/healthz")
    assert status == 500 and "[-]db failed" in body and "[+]ping ok" in body
    assert http_get(srv.port, "/healthz/ping")[:2] == (200, "ok")
    assert http_get(srv.port, "/healthz/db")[0] == 500
    assert http_get(srv.port, "/healthz/nope")[0] == 404
    assert http_get(srv.port, "/nothing")[0] == 404
    assert http_get(srv.port, "/boom")[0] == 500  # a failing handler does not kill the server
    assert http_get(srv.port, "/healthz?verbose=1")[0] == 500


def test_http_server_shutdown_releases_the_port() -> None:
    srv = HTTPServer("once", "127.0.0.1:0", {"/healthz": lambda _r: (200, "text/plain", b"ok")})
    srv.serve()
    port = srv.port
    assert port is not None
    srv.shutdown()
    srv.shutdown()  # idempotent
    assert srv.port is None
    again = HTTPServer("again", f"127.0.0.1:{port}", {})
    again.serve()
    again.shutdown()


def test_http_server_bind_conflict_raises_oserror() -> None:
    first = HTTPServer("first", "127.0.0.1:0", {})
    first.serve()
    try:
        clash = HTTPServer("clash", f"127.0.0.1:{first.port}", {})
        with pytest.raises(OSError):
            clash.serve()
    finally:
        first.shutdown()


def test_disabled_server_does_nothing() -> None:
    srv = HTTPServer("off", "0", {})
    assert not srv.enabled
    srv.serve()
    assert srv.port is None


EXPECTED_METRICS = [
    'controller_runtime_reconcile_total{controller="demo",result="success"}',
    'controller_runtime_reconcile_total{controller="demo",result="error"}',
    'controller_runtime_reconcile_total{controller="demo",result="requeue"}',
    'controller_runtime_reconcile_total{controller="demo",result="requeue_after"}',
    'controller_runtime_reconcile_errors_total{controller="demo"}',
    'controller_runtime_terminal_reconcile_errors_total{controller="demo"}',
    'controller_runtime_reconcile_panics_total{controller="demo"}',
    'controller_runtime_reconcile_time_seconds_bucket{controller="demo",le="0.005"}',
    'controller_runtime_active_workers{controller="demo"}',
    'controller_runtime_max_concurrent_reconciles{controller="demo"}',
    'leader_election_master_status{name="escaler-manager"}',
    'workqueue_depth{name="demo"}',
    'workqueue_adds_total{name="demo"}',
    'workqueue_queue_duration_seconds_count{name="demo"}',
    'workqueue_work_duration_seconds_count{name="demo"}',
    'workqueue_retries_total{name="demo"}',
    'workqueue_unfinished_work_seconds{name="demo"}',
    'workqueue_longest_running_processor_seconds{name="demo"}',
]


def test_metrics_names_on_the_wire(server: tuple[HTTPServer, HealthChecks, MetricsRegistry]) -> None:
    srv, _, reg = server
    reg.controller("demo")
    reg.set_leader("escaler-manager", True)
    q: RateLimitingQueue[str] = RateLimitingQueue(name="demo", metrics_provider=reg.workqueue_provider)
    try:
        q.add("x")
        status, body, headers = http_get(srv.port or 0, "/metrics")
    finally:
        q.shutdown()
    assert status == 200
    assert headers["Content-Type"].startswith("text/plain")
    missing = [m for m in EXPECTED_METRICS if m not in body]
    assert missing == []
    assert 'leader_election_master_status{name="escaler-manager"} 1.0' in body


def test_each_metrics_registry_is_independent() -> None:
    a, b = MetricsRegistry(), MetricsRegistry()  # no "Duplicated timeseries" across managers
    a.controller("x").reconcile_finished("success", 0.1)
    assert a.registry.get_sample_value("controller_runtime_reconcile_total",
                                       {"controller": "x", "result": "success"}) == 1
    assert b.registry.get_sample_value("controller_runtime_reconcile_total",
                                       {"controller": "x", "result": "success"}) is None
    assert a.controller("x") is a.controller("x")
