"""escaler.signals.collector: dispatch by metric type, per-target-type values, the budget, MetricValue."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from outbound_fakes import HttpsServer, ScratchCA, make_ca
from test_kube_fakeapi import FakeAPI, Reply, Req

from escaler.api.elasticscaler import MetricSpec
from escaler.clock import FakeClock
from escaler.kube.discovery import RESTMapper
from escaler.kube.dynamic import DynamicClient
from escaler.scaling.algorithm import MetricValue, PodCounts
from escaler.signals import (
    AddressPolicy,
    HttpClient,
    MetricsCollector,
    Sample,
    parse_networks,
    to_metric_value,
)
from escaler.signals.promqlscope import PromQLScope
from escaler.targets import TargetSnapshot

NS = "ns1"


# the fake servers listen on 127.0.0.1, which the default policy refuses
LOOPBACK = HttpClient(AddressPolicy(parse_networks("127.0.0.0/8")))


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> ScratchCA:
    return make_ca(tmp_path_factory.mktemp("tls"))


def scalar(value: float) -> bytes:
    doc = {"status": "success", "data": {"resultType": "scalar", "result": [0, str(value)]}}
    return json.dumps(doc).encode()


def _tls_client(ca: ScratchCA) -> HttpClient:
    return HttpClient(AddressPolicy(parse_networks("127.0.0.0/8")), ssl_context=ca.client_context())


def snapshot(replicas: int = 2, selector: str = "app=web") -> TargetSnapshot:
    return TargetSnapshot(api_version="apps/v1", kind="Deployment", namespace=NS, name="web", uid="u",
                          generation=1, observed_generation=1, spec_replicas=replicas,
                          status_replicas=replicas, ready_replicas=replicas, updated_replicas=replicas,
                          selector=selector, resource_version="1", rollout_in_progress=False,
                          settling_scale_down=False)


def m(obj: dict[str, Any]) -> MetricSpec:
    return MetricSpec.model_validate(obj)


def resource(name: str, target: dict[str, Any]) -> MetricSpec:
    return m({"type": "Resource", "resource": {"name": name, "target": target}})


def prom_metric(endpoint: str, query: str, target: dict[str, Any], timeout: int = 5) -> MetricSpec:
    return m({"type": "ExternalServer", "externalServer": {"endpoint": endpoint, "query": query,
                                                           "target": target, "timeoutSeconds": timeout}})


def web_pod(name: str, ready: str = "True", started: str = "2025-12-31T23:00:00Z",
            since: str = "2025-12-31T23:01:00Z") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NS, "labels": {"app": "web"}},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]},
            "status": {"phase": "Running", "startTime": started,
                       "conditions": [{"type": "Ready", "status": ready, "lastTransitionTime": since}]}}


@pytest.fixture
def api() -> Iterator[FakeAPI]:
    with FakeAPI() as a:
        for name in ("a", "b"):
            a.put_object("/api/v1", "pods", web_pod(name))
        a.on("GET", "/apis/metrics.k8s.io/v1beta1/namespaces/ns1/pods", lambda _r: Reply(200, {"items": [
            {"metadata": {"name": "a"}, "containers": [{"name": "c", "usage": {"cpu": "500m",
                                                                               "memory": "256Mi"}}]},
            {"metadata": {"name": "b"}, "containers": [{"name": "c", "usage": {"cpu": "700m",
                                                                               "memory": "768Mi"}}]}]}))
        a.on("GET", re.escape("/apis/custom.metrics.k8s.io/v1beta2/namespaces/ns1/pods/*/waiting"),
             lambda _r: Reply(200, {"items": [{"value": "3"}, {"value": "5"}]}))
        a.on("GET", "/apis/external.metrics.k8s.io/v1beta1/namespaces/ns1/queue_depth",
             lambda _r: Reply(200, {"items": [{"value": "60"}, {"value": "40"}]}))
        a.on("GET", "/api/v1/query", lambda r: Reply(200, {"status": "success", "data": {
            "resultType": "scalar", "result": [0, "12" if "running" in r.q()["query"] else "0"]}}))
        yield a


@pytest.fixture
def collector(api: FakeAPI) -> MetricsCollector:
    rest = api.rest()
    return MetricsCollector(rest, DynamicClient(rest, RESTMapper(rest)), LOOPBACK, FakeClock())


def test_collect_dispatches_every_type_in_order(api: FakeAPI, collector: MetricsCollector) -> None:
    specs = [
        resource("cpu", {"type": "Utilization", "averageUtilization": 70}),
        resource("memory", {"type": "AverageValue", "averageValue": "1Gi"}),
        m({"type": "Custom", "custom": {"metric": {"name": "waiting"},
                                        "target": {"type": "AverageValue", "averageValue": "4"}}}),
        m({"type": "External", "external": {"metric": {"name": "queue_depth",
                                                       "selector": {"matchLabels": {"q": "llama"}}},
                                            "target": {"type": "Value", "value": "100"}}}),
        m({"type": "External", "external": {"metric": {"name": "queue_depth"},
                                            "target": {"type": "AverageValue", "averageValue": "30"}}}),
        prom_metric(api.url, "sum(running)", {"type": "AverageValue", "averageValue": "8"}),
        prom_metric(api.url, "sum(running)", {"type": "Value", "value": "8"}),
    ]
    out = collector.collect(NS, specs, snapshot(replicas=4), 4)
    assert [s for s, _ in out] == specs
    assert [sample for _, sample in out] == [
        Sample(60.0, pods=PodCounts(2, 2.0)),             # (0.5 + 0.7) / (1 + 1) cores
        Sample(512.0 * 2**20, pods=PodCounts(2, 2.0)),    # (256Mi + 768Mi) / 2 pods
        Sample(4.0),                  # per-pod average
        Sample(100.0),                # Value: the total
        Sample(25.0),                 # AverageValue: total / 4 replicas
        Sample(3.0),                  # 12 / 4 replicas
        Sample(12.0),                 # the query's result
    ]
    # cpu and memory share one pod list and one metrics read
    assert len(api.reqs("GET", "/apis/metrics.k8s.io/")) == 1
    assert len(api.reqs("GET", "/api/v1/namespaces/ns1/pods")) == 1
    assert api.reqs("GET", "/apis/external.metrics.k8s.io/")[0].q() == {"labelSelector": "q=llama"}


def test_collect_judges_pod_readiness_at_now(api: FakeAPI, collector: MetricsCollector) -> None:
    # pod a started a minute before the clock's now (2026-01-01T00:00:00Z) and is not Ready: inside the
    # cpu initialization period it is unready; ten minutes later it counts (it was Ready once: its
    # transition came more than the 30 s initial readiness delay after it started)
    api.put_object("/api/v1", "pods", web_pod("a", ready="False", started="2025-12-31T23:59:00Z",
                                              since="2025-12-31T23:59:40Z"))
    cpu = resource("cpu", {"type": "Utilization", "averageUtilization": 70})
    [(_, young)] = collector.collect(NS, [cpu], snapshot(replicas=2), 2)
    assert young == Sample(70.0, pods=PodCounts(ready=1, ready_weight=1.0, unready=1, unready_weight=1.0))
    later = datetime(2026, 1, 1, 0, 10, tzinfo=UTC).timestamp()
    [(_, old)] = collector.collect(NS, [cpu], snapshot(replicas=2), 2, now=later)
    assert old == Sample(60.0, pods=PodCounts(ready=2, ready_weight=2.0))
    # the pod groups reach the algorithm
    assert collector.to_metric_value(cpu, young).pods == young.pods


def test_metric_values_for_the_algorithm(collector: MetricsCollector) -> None:
    specs = [resource("cpu", {"type": "Utilization", "averageUtilization": 70}),
             prom_metric("http://prom:9090", "sum(x)", {"type": "Value", "value": "8"})]
    values = [collector.to_metric_value(s, Sample(1.5)) for s in specs]
    assert values == [MetricValue("cpu", "Resource", 1.5, "Utilization", 70.0),
                      MetricValue("sum(x)", "ExternalServer", 1.5, "Value", 8.0)]
    assert to_metric_value(specs[0], Sample.fail("down")).value is None


TO_VALUE: list[tuple[str, dict[str, Any], tuple[str, str, str, float] | str]] = [
    ("utilization", {"type": "Resource", "resource": {"name": "memory", "target": {
        "type": "Utilization", "averageUtilization": 80}}}, ("memory", "Resource", "Utilization", 80.0)),
    ("custom-milli", {"type": "Custom", "custom": {"metric": {"name": "rps"}, "target": {
        "type": "AverageValue", "averageValue": "500m"}}}, ("rps", "Custom", "AverageValue", 0.5)),
    ("external-int", {"type": "External", "external": {"metric": {"name": "qd"}, "target": {
        "type": "Value", "value": 100}}}, ("qd", "External", "Value", 100.0)),
    ("server-average", {"type": "ExternalServer", "externalServer": {
        "endpoint": "http://p:9090", "query": "q", "target": {"type": "AverageValue", "averageValue": "2k"}}},
     ("q", "ExternalServer", "AverageValue", 2000.0)),
    ("fractional-exponent", {"type": "External", "external": {"metric": {"name": "qd"}, "target": {
        "type": "Value", "value": "1e1.5"}}}, "external.target.value: '1e1.5' is not a Kubernetes quantity"),
    ("missing-target-value", {"type": "External", "external": {"metric": {"name": "qd"}, "target": {
        "type": "AverageValue"}}}, "external.target.averageValue: required when type is AverageValue"),
    ("missing-utilization", {"type": "Resource", "resource": {"name": "cpu", "target": {
        "type": "Utilization"}}}, "resource.target.averageUtilization: required"),
    ("missing-source", {"type": "Custom"}, "custom: required when type is Custom"),
]


@pytest.mark.parametrize(("obj", "expected"), [c[1:] for c in TO_VALUE], ids=[c[0] for c in TO_VALUE])
def test_to_metric_value(obj: dict[str, Any], expected: tuple[str, str, str, float] | str) -> None:
    spec = m(obj)
    if isinstance(expected, str):
        with pytest.raises(ValueError, match=re.escape(expected)):
            to_metric_value(spec, Sample(1.0))
    else:
        v = to_metric_value(spec, Sample(1.0))
        assert (v.name, v.type, v.target_type, v.target_value) == expected
        assert v.value == 1.0


def test_missing_source_is_an_error_sample_not_an_exception(collector: MetricsCollector) -> None:
    ((_, sample),) = collector.collect(NS, [m({"type": "External"})], snapshot(), 2)
    assert sample.error is not None and "external configuration is missing" in sample.error


def test_budget_stops_reading_further_metrics(api: FakeAPI) -> None:
    clock = FakeClock()

    def slow(_r: Req) -> Reply:
        clock.step(100)  # this query takes "100 s"
        return Reply(200, {"status": "success", "data": {"resultType": "scalar", "result": [0, "1"]}})

    api.on("GET", "/api/v1/query", slow)
    rest = api.rest()
    c = MetricsCollector(rest, DynamicClient(rest, RESTMapper(rest)), LOOPBACK, clock,
                         budget_seconds=50)
    specs = [prom_metric(api.url, "a", {"type": "Value", "value": "1"}, timeout=30),
             prom_metric(api.url, "b", {"type": "Value", "value": "1"})]
    c = MetricsCollector(rest, DynamicClient(rest, RESTMapper(rest)), LOOPBACK, clock, budget_seconds=20)
    (_, first), (_, second) = c.collect(NS, specs, snapshot(), 2)
    # the first query is cut at what was left of the budget (20 s), not its own 30 s
    assert first.error is not None and "timed out after 20s" in first.error
    assert second.error == "b: not read: the collection budget of 20s was used up by the metrics before it"
    assert len(api.reqs("GET", "/api/v1/query")) == 1


def test_shared_client_allow_hook_and_flag_token_over_https(api: FakeAPI, tls: ScratchCA) -> None:
    prom = HttpsServer(tls, lambda _p: (200, scalar(3)))
    prom.start()
    hosts: list[str] = []
    rest = api.rest()
    c = MetricsCollector(rest, DynamicClient(rest, RESTMapper(rest)), _tls_client(tls), FakeClock(),
                         allowed=lambda h: hosts.append(h) is None, prometheus_bearer_token="tok")
    spec = prom_metric(prom.url, "sum(running)", {"type": "Value", "value": "1"})
    try:
        [(_, s1)] = c.collect(NS, [spec], snapshot(), 1)
        other = threading.Thread(target=c.collect, args=(NS, [spec], snapshot(), 1))
        other.start()
        other.join(10)
    finally:
        prom.stop()
    assert s1.value == 3.0
    assert hosts == ["localhost"] * 2
    assert [r.headers["authorization"] for r in prom.seen] == ["Bearer tok"] * 2


@pytest.mark.parametrize("replicas", [-1, True, 1.0], ids=["negative", "bool", "float"])
def test_collect_refuses_bad_replicas(collector: MetricsCollector, replicas: Any) -> None:
    with pytest.raises(ValueError, match="current_replicas"):
        collector.collect(NS, [], snapshot(), replicas)


def test_budget_must_be_positive(api: FakeAPI) -> None:
    rest = api.rest()
    with pytest.raises(ValueError, match="budget_seconds"):
        MetricsCollector(rest, DynamicClient(rest, RESTMapper(rest)), budget_seconds=0)


def _token_metric(endpoint: str) -> MetricSpec:
    return m({"type": "ExternalServer", "externalServer": {
        "endpoint": endpoint, "query": "sum(running)", "target": {"type": "Value", "value": "1"},
        "bearerTokenSecretRef": {"name": "prom-token", "key": "token"}}})


def test_bearer_token_read_from_the_secret_per_query(api: FakeAPI, tls: ScratchCA) -> None:
    reads: list[tuple[str, str, str, str]] = []

    def reader(ns: str, name: str, key: str, host: str) -> str:
        reads.append((ns, name, key, host))
        return f"secret-{len(reads)}"

    prom = HttpsServer(tls, lambda _p: (200, scalar(12)))
    prom.start()
    rest = api.rest()
    c = MetricsCollector(rest, DynamicClient(rest, RESTMapper(rest)), _tls_client(tls), FakeClock(),
                         prometheus_bearer_token="flag-token", secret_reader=reader)
    try:
        [(_, s1)] = c.collect(NS, [_token_metric(prom.url)], snapshot(), 1)
        [(_, s2)] = c.collect(NS, [_token_metric(prom.url)], snapshot(), 1)
    finally:
        prom.stop()
    assert s1.value == 12.0 and s2.value == 12.0
    # read at every query (rotation is picked up), for the endpoint's host (the Secret lists its hosts)
    assert reads == [(NS, "prom-token", "token", "localhost")] * 2
    auth = [r.headers["authorization"] for r in prom.seen]
    assert auth == ["Bearer secret-1", "Bearer secret-2"]  # the Secret wins over the flag's token


def test_bearer_token_over_plain_http_is_refused_before_the_secret_is_read(api: FakeAPI) -> None:
    reads: list[str] = []

    def reader(ns: str, name: str, key: str, host: str) -> str:
        reads.append(name)
        return "s3cret"

    rest = api.rest()
    c = MetricsCollector(rest, DynamicClient(rest, RESTMapper(rest)), LOOPBACK, FakeClock(),
                         secret_reader=reader)
    [(_, sample)] = c.collect(NS, [_token_metric(api.url)], snapshot(), 1)
    assert sample.error is not None and "only sent over https://" in sample.error
    assert "externalServer.endpoint" in sample.error and "bearerTokenSecretRef" in sample.error
    assert reads == [] and api.reqs("GET", "/api/v1/query") == []


@pytest.mark.parametrize("reader", [None, "raise"], ids=["no-reader", "secret-unreadable"])
def test_unreadable_bearer_token_is_an_error_sample_naming_the_secret(api: FakeAPI, reader: Any) -> None:
    def failing(ns: str, name: str, key: str) -> str:
        raise KeyError(f"Secret {ns}/{name} has no key {key!r}")

    rest = api.rest()
    c = MetricsCollector(rest, DynamicClient(rest, RESTMapper(rest)), LOOPBACK, FakeClock(),
                         secret_reader=failing if reader == "raise" else None)
    [(_, sample)] = c.collect(NS, [_token_metric("https://localhost:1")], snapshot(), 1)
    assert sample.value is None and sample.error is not None
    assert f"bearerTokenSecretRef {NS}/prom-token[token]" in sample.error
    assert api.reqs("GET", "/api/v1/query") == [], "no query is sent without its token"


def test_a_query_outside_the_namespace_is_refused_before_the_secret_or_the_server(api: FakeAPI) -> None:
    """Tenant PromQL confinement (issue 27 item 4): neither the Secret nor Prometheus is touched."""
    reads: list[str] = []

    def reader(ns: str, name: str, key: str, host: str) -> str:
        reads.append(name)
        return "s3cret"

    rest = api.rest()
    c = MetricsCollector(rest, DynamicClient(rest, RESTMapper(rest)), LOOPBACK, FakeClock(),
                         secret_reader=reader, promql_scope=PromQLScope())
    [(_, sample)] = c.collect(NS, [_token_metric(api.url)], snapshot(), 1)
    assert sample.error is not None and sample.error.startswith("externalServer.query: every series selector")
    assert f'namespace="{NS}"' in sample.error and "running does not" in sample.error
    assert reads == [] and api.reqs("GET", "/api/v1/query") == []
    ok = prom_metric(api.url, f'sum(running{{namespace="{NS}"}})', {"type": "Value", "value": "1"})
    [(_, sample)] = c.collect(NS, [ok], snapshot(), 1)
    assert sample.value == 12.0 and len(api.reqs("GET", "/api/v1/query")) == 1
