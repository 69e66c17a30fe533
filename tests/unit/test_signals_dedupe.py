"""Identical outbound queries inside one poll tick are made once (issue 10, "How"): single flight
plus a short reuse window, keyed so that an answer is never shared across different bearer tokens
(nor between a token and none). Fails on fec3229 (no ``escaler.signals.dedupe``; every scaler's
ExternalServer query was its own request).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from outbound_fakes import HttpsServer, ScratchCA, make_ca

from escaler.api.elasticscaler import MetricSpec
from escaler.clock import FakeClock
from escaler.signals.collector import MetricsCollector
from escaler.signals.dedupe import SharedQueries
from escaler.signals.fetch import HttpClient
from escaler.signals.netpolicy import AddressPolicy, parse_networks
from escaler.signals.sample import Sample

NS = "team"


def test_concurrent_identical_calls_run_once() -> None:
    shared: SharedQueries[int] = SharedQueries(FakeClock())
    release, started = threading.Event(), threading.Event()
    calls = []

    def slow() -> int:
        calls.append(1)
        started.set()
        release.wait(5)
        return 7

    results: list[int] = []
    leader = threading.Thread(target=lambda: results.append(shared.run("k", slow, 5, lambda: -1)))
    leader.start()
    assert started.wait(5)
    followers = [threading.Thread(target=lambda: results.append(shared.run("k", slow, 5, lambda: -1)))
                 for _ in range(4)]
    for t in followers:
        t.start()
    from fakeapi import wait_until
    wait_until(lambda: shared.made == 1 and len(calls) == 1, what="leader running")
    release.set()
    for t in [leader, *followers]:
        t.join(5)
    assert results == [7] * 5 and len(calls) == 1
    assert (shared.made, shared.shared) == (1, 4)


def test_a_completed_answer_is_shared_within_the_window_only() -> None:
    clock = FakeClock()
    shared: SharedQueries[int] = SharedQueries(clock, window=1.0)
    n = iter(range(100))
    assert shared.run("k", lambda: next(n), 1, lambda: -1) == 0
    clock.step(0.5)
    assert shared.run("k", lambda: next(n), 1, lambda: -1) == 0
    assert shared.run("other", lambda: next(n), 1, lambda: -1) == 1  # another key: its own call
    clock.step(0.6)
    assert shared.run("k", lambda: next(n), 1, lambda: -1) == 2  # past the window: asked afresh


def test_window_zero_shares_only_in_flight_calls() -> None:
    shared: SharedQueries[int] = SharedQueries(FakeClock(), window=0.0)
    n = iter(range(100))
    assert [shared.run("k", lambda: next(n), 1, lambda: -1) for _ in range(3)] == [0, 1, 2]


def test_a_leader_that_raises_shares_nothing() -> None:
    shared: SharedQueries[int] = SharedQueries(FakeClock())

    def boom() -> int:
        raise RuntimeError("down")

    with pytest.raises(RuntimeError):
        shared.run("k", boom, 1, lambda: -1)
    assert shared.run("k", lambda: 3, 1, lambda: -1) == 3


def test_a_follower_waits_no_longer_than_its_own_time() -> None:
    shared: SharedQueries[int] = SharedQueries(FakeClock())
    release, started = threading.Event(), threading.Event()

    def slow() -> int:
        started.set()
        release.wait(5)
        return 1

    t = threading.Thread(target=shared.run, args=("k", slow, 5, lambda: -1))
    t.start()
    assert started.wait(5)
    try:
        assert shared.run("k", slow, 0.05, lambda: -1) == -1
    finally:
        release.set()
        t.join(5)


# ---------------------------------------------------------------------------- in the collector


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> ScratchCA:
    return make_ca(tmp_path_factory.mktemp("tls"))


@pytest.fixture
def prom(tls: ScratchCA) -> Iterator[HttpsServer]:
    doc = {"status": "success", "data": {"resultType": "scalar", "result": [0, "6"]}}
    server = HttpsServer(tls, lambda _p: (200, json.dumps(doc).encode())).start()
    yield server
    server.stop()


def _metric(endpoint: str, query: str = "sum(load)", secret: str | None = None,
            timeout: int = 5) -> MetricSpec:
    es: dict[str, Any] = {"endpoint": endpoint, "query": query, "target": {"type": "Value", "value": "1"},
                          "timeoutSeconds": timeout}
    if secret is not None:
        es["bearerTokenSecretRef"] = {"name": secret, "key": "token"}
    return MetricSpec.model_validate({"type": "ExternalServer", "externalServer": es})


def _collector(tls: ScratchCA, clock: FakeClock, shared: SharedQueries[Sample] | None) -> MetricsCollector:
    tokens = {("a", "t1"): "token-one", ("b", "t1"): "token-one", ("a", "t2"): "token-two"}
    http = HttpClient(AddressPolicy(parse_networks("127.0.0.0/8")), ssl_context=tls.client_context())
    return MetricsCollector(None, None, http, clock, shared=shared,  # type: ignore[arg-type]
                            secret_reader=lambda ns, name, key, host: tokens[(ns, name)])


def test_scalers_sharing_one_query_make_one_request(tls: ScratchCA, prom: HttpsServer) -> None:
    clock = FakeClock()
    c = _collector(tls, clock, SharedQueries(clock))
    for _ in range(20):
        [(_, sample)] = c.collect(NS, [_metric(prom.url)], None, 2)  # type: ignore[arg-type]
        assert sample.value == 6.0
    assert len(prom.seen) == 1


def test_answers_are_never_shared_across_tokens(tls: ScratchCA, prom: HttpsServer) -> None:
    clock = FakeClock()
    c = _collector(tls, clock, SharedQueries(clock))
    c.collect("a", [_metric(prom.url, secret="t1")], None, 1)  # type: ignore[arg-type]
    c.collect("b", [_metric(prom.url, secret="t1")], None, 1)  # type: ignore[arg-type]  # same token: shared
    c.collect("a", [_metric(prom.url, secret="t2")], None, 1)  # type: ignore[arg-type]  # another token
    c.collect("a", [_metric(prom.url)], None, 1)  # type: ignore[arg-type]  # no token
    c.collect("a", [_metric(prom.url, query="sum(other)")], None, 1)  # type: ignore[arg-type]  # another query
    c.collect("a", [_metric(prom.url, timeout=9)], None, 1)  # type: ignore[arg-type]  # another timeout
    auths = [r.headers.get("authorization") for r in prom.seen]
    assert auths == ["Bearer token-one", "Bearer token-two", None, None, None]


def test_without_sharing_every_collection_asks(tls: ScratchCA, prom: HttpsServer) -> None:
    clock = FakeClock()
    c = _collector(tls, clock, None)
    for _ in range(3):
        c.collect(NS, [_metric(prom.url)], None, 2)  # type: ignore[arg-type]
    assert len(prom.seen) == 3
