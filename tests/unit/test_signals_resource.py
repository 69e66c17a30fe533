"""escaler.signals.resource: HPA-style utilization and per-pod averages from metrics.k8s.io."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pytest
from test_kube_fakeapi import FakeAPI, Reply, Req, status

from escaler.kube.discovery import RESTMapper
from escaler.kube.dynamic import DynamicClient
from escaler.signals import PodUsage, ResourceCollector, Sample, resource_sample
from escaler.signals import resource as resource_module

NS = "ns1"
METRICS_PATH = "/apis/metrics.k8s.io/v1beta1/namespaces/ns1/pods"


def pod(name: str, *requests: Mapping[str, str], phase: str = "Running", deleting: bool = False,
        init: list[dict[str, Any]] | None = None, pod_requests: Mapping[str, str] | None = None,
        labels: Mapping[str, str] | None = None) -> dict[str, Any]:
    containers = [{"name": f"c{i}", "resources": {"requests": dict(r)} if r else {}}
                  for i, r in enumerate(requests)]
    spec: dict[str, Any] = {"containers": containers}
    if init:
        spec["initContainers"] = init
    if pod_requests:
        spec["resources"] = {"requests": dict(pod_requests)}
    md: dict[str, Any] = {"name": name, "namespace": NS, "labels": dict(labels or {"app": "web"})}
    if deleting:
        md["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"apiVersion": "v1", "kind": "Pod", "metadata": md, "spec": spec, "status": {"phase": phase}}


def pm(name: str, *usages: Mapping[str, str]) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": NS}, "timestamp": "2026-01-01T00:00:00Z", "window": "30s",
            "containers": [{"name": f"c{i}", "usage": dict(u)} for i, u in enumerate(usages)]}


CPU = {"cpu": "500m"}
BOTH = {"cpu": "500m", "memory": "1Gi"}

# id, resource, target type, pods, metrics, expected value (float) or error fragment (str)
CASES: list[tuple[str, str, str, list[dict[str, Any]], list[dict[str, Any]], float | str]] = [
    ("cpu-utilization", "cpu", "Utilization", [pod("a", CPU), pod("b", CPU)],
     [pm("a", {"cpu": "250m"}), pm("b", {"cpu": "500m"})], 75.0),
    ("cpu-average-value", "cpu", "AverageValue", [pod("a", CPU), pod("b", CPU)],
     [pm("a", {"cpu": "250m"}), pm("b", {"cpu": "500m"})], 0.375),
    ("nanocores", "cpu", "Utilization", [pod("a", CPU)], [pm("a", {"cpu": "250000000n"})], 50.0),
    ("memory-utilization", "memory", "Utilization", [pod("a", BOTH)], [pm("a", {"memory": "512Mi"})], 50.0),
    ("memory-average-bytes", "memory", "AverageValue", [pod("a", BOTH), pod("b", BOTH)],
     [pm("a", {"memory": "100Mi"}), pm("b", {"memory": "300Mi"})], 200.0 * 2**20),
    ("pod-without-request-is-named", "cpu", "Utilization", [pod("a", CPU), pod("web-2", {})],
     [pm("a", {"cpu": "1"}), pm("web-2", {"cpu": "1"})], "pods web-2 of"),
    ("container-without-request", "cpu", "Utilization", [pod("a", CPU, {"memory": "1Gi"})],
     [pm("a", {"cpu": "1"}, {"cpu": "1"})], "do not request cpu on every container"),
    ("many-without-requests-truncated", "cpu", "Utilization", [pod(f"p{i}", {}) for i in range(8)],
     [pm(f"p{i}", {"cpu": "1"}) for i in range(8)], "p0, p1, p2, p3, p4 and 3 more"),
    ("average-value-needs-no-requests", "cpu", "AverageValue", [pod("a", {})], [pm("a", {"cpu": "2"})], 2.0),
    ("pods-without-metrics-left-out", "cpu", "Utilization", [pod("a", CPU), pod("b", CPU), pod("new", CPU)],
     [pm("a", {"cpu": "100m"}), pm("b", {"cpu": "300m"})], 40.0),
    ("no-metrics-at-all", "cpu", "Utilization", [pod("a", CPU), pod("b", CPU)], [],
     "no cpu metrics for any of the 2 pods"),
    ("no-pods", "cpu", "Utilization", [], [pm("a", {"cpu": "1"})], "no running pods match"),
    ("deleting-and-finished-pods-skipped", "cpu", "Utilization",
     [pod("a", CPU), pod("b", CPU, deleting=True), pod("c", CPU, phase="Failed"),
      pod("d", CPU, phase="Succeeded")],
     [pm("a", {"cpu": "250m"}), pm("b", {"cpu": "5"}), pm("c", {"cpu": "5"}), pm("d", {"cpu": "5"})], 50.0),
    ("only-terminating-pods", "cpu", "Utilization", [pod("b", CPU, deleting=True)], [pm("b", {"cpu": "1"})],
     "no running pods match"),
    ("container-missing-usage-skips-pod", "cpu", "Utilization", [pod("a", CPU, CPU), pod("b", CPU)],
     [pm("a", {"cpu": "1"}, {"memory": "1Mi"}), pm("b", {"cpu": "250m"})], 50.0),
    ("multi-container-sums", "cpu", "Utilization", [pod("a", {"cpu": "100m"}, {"cpu": "300m"})],
     [pm("a", {"cpu": "100m"}, {"cpu": "100m"})], 50.0),
    ("sidecar-init-counts-plain-init-does-not", "cpu", "Utilization",
     [pod("a", {"cpu": "300m"}, init=[
         {"name": "sidecar", "restartPolicy": "Always", "resources": {"requests": {"cpu": "100m"}}},
         {"name": "setup", "resources": {"requests": {"cpu": "4"}}}])],
     [pm("a", {"cpu": "200m"})], 50.0),
    ("pod-level-requests", "cpu", "Utilization", [pod("a", {}, pod_requests={"cpu": "2"})],
     [pm("a", {"cpu": "1"})], 50.0),
    ("metrics-of-other-pods-ignored", "cpu", "Utilization", [pod("a", CPU)],
     [pm("a", {"cpu": "250m"}), pm("stranger", {"cpu": "100"})], 50.0),
    ("bad-usage-quantity", "cpu", "Utilization", [pod("a", CPU)], [pm("a", {"cpu": "lots"})],
     "'lots' is not a Kubernetes quantity"),
    ("bad-request-quantity", "cpu", "Utilization", [pod("a", {"cpu": "x"})], [pm("a", {"cpu": "1"})],
     "'x' is not a Kubernetes quantity"),
    ("zero-requests", "cpu", "Utilization", [pod("a", {"cpu": "0"})], [pm("a", {"cpu": "1"})],
     "request no cpu"),
    ("value-target-refused", "cpu", "Value", [pod("a", CPU)], [pm("a", {"cpu": "1"})],
     "target type 'Value' is not supported"),
    ("unknown-resource", "gpu", "AverageValue", [pod("a", CPU)], [pm("a", {"cpu": "1"})],
     "no gpu metrics"),
]


@pytest.mark.parametrize(("resource", "target_type", "pods", "metrics", "expected"),
                         [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_resource_sample(resource: str, target_type: str, pods: list[dict[str, Any]],
                         metrics: list[dict[str, Any]], expected: float | str) -> None:
    s = resource_sample(resource, target_type, pods, metrics, where="Deployment ns1/web (app=web)")
    if isinstance(expected, str):
        assert s.value is None and s.error is not None
        assert expected in s.error
    else:
        assert s.error is None
        assert s.value == pytest.approx(expected)


# ---- over HTTP ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    kind: str = "Deployment"
    name: str = "web"
    selector: str = "app=web"


@pytest.fixture
def api() -> Iterator[FakeAPI]:
    with FakeAPI() as a:
        yield a


@pytest.fixture
def collector(api: FakeAPI) -> ResourceCollector:
    rest = api.rest()
    return ResourceCollector(rest, DynamicClient(rest, RESTMapper(rest)))


def serve_metrics(api: FakeAPI, items: list[dict[str, Any]]) -> None:
    api.on("GET", METRICS_PATH, lambda _r: Reply(200, {"kind": "PodMetricsList",
                                                       "apiVersion": "metrics.k8s.io/v1beta1",
                                                       "metadata": {}, "items": items}))


def test_collect_over_http(api: FakeAPI, collector: ResourceCollector) -> None:
    for p in [pod("a", CPU), pod("b", CPU), pod("other", CPU, labels={"app": "db"})]:
        api.put_object("/api/v1", "pods", p)
    serve_metrics(api, [pm("a", {"cpu": "250m"}), pm("b", {"cpu": "500m"})])
    s = collector.collect(NS, "cpu", "Utilization", Target())
    assert s == Sample(75.0)
    (metrics_req,) = api.reqs("GET", METRICS_PATH)
    assert metrics_req.q() == {"labelSelector": "app=web"}
    (pods_req,) = api.reqs("GET", "/api/v1/namespaces/ns1/pods")
    assert pods_req.q()["labelSelector"] == "app=web"


def test_pods_are_listed_in_pages(api: FakeAPI, collector: ResourceCollector,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(resource_module, "POD_LIST_PAGE", 2)
    names = ["a", "b", "c", "d", "e"]
    for n in names:
        api.put_object("/api/v1", "pods", pod(n, CPU))
    serve_metrics(api, [pm(n, {"cpu": "500m"}) for n in names])
    assert collector.collect(NS, "cpu", "Utilization", Target()) == Sample(100.0)
    pages = api.reqs("GET", "/api/v1/namespaces/ns1/pods")
    assert [r.q().get("continue") for r in pages] == [None, "2", "4"]
    assert all(r.q()["limit"] == "2" for r in pages)


def test_pod_lister_cache_is_used(api: FakeAPI) -> None:
    rest = api.rest()
    asked: list[tuple[str, str]] = []

    def lister(namespace: str, selector: str) -> list[dict[str, Any]]:
        asked.append((namespace, selector))
        return [pod("a", CPU)]

    serve_metrics(api, [pm("a", {"cpu": "100m"})])
    c = ResourceCollector(rest, DynamicClient(rest, RESTMapper(rest)), pod_lister=lister)
    assert c.collect(NS, "cpu", "Utilization", Target()) == Sample(20.0)
    assert asked == [(NS, "app=web")]
    assert api.reqs("GET", "/api/v1/") == []


def test_pod_lister_that_cannot_answer_falls_back_to_the_api(api: FakeAPI) -> None:
    rest = api.rest()
    api.put_object("/api/v1", "pods", pod("a", CPU))
    serve_metrics(api, [pm("a", {"cpu": "100m"})])
    c = ResourceCollector(rest, DynamicClient(rest, RESTMapper(rest)), pod_lister=lambda _n, _s: None)
    assert c.collect(NS, "cpu", "Utilization", Target()) == Sample(20.0)
    assert len(api.reqs("GET", "/api/v1/namespaces/ns1/pods")) == 1


def test_memo_shares_one_read_between_metrics(api: FakeAPI, collector: ResourceCollector) -> None:
    api.put_object("/api/v1", "pods", pod("a", BOTH))
    serve_metrics(api, [pm("a", {"cpu": "250m", "memory": "256Mi"})])
    memo: dict[str, PodUsage | Sample] = {}
    assert collector.collect(NS, "cpu", "Utilization", Target(), memo) == Sample(50.0)
    assert collector.collect(NS, "memory", "Utilization", Target(), memo) == Sample(25.0)
    assert len(api.reqs("GET", METRICS_PATH)) == 1
    assert len(api.reqs("GET", "/api/v1/namespaces/ns1/pods")) == 1


@pytest.mark.parametrize(
    ("code", "fragment"),
    [(404, "is metrics-server installed"), (403, "RBAC"), (503, "metrics-server is not answering"),
     (500, "metrics.k8s.io: GET")],
    ids=["not-installed", "forbidden", "unavailable", "server-error"],
)
def test_metrics_api_errors_are_samples(api: FakeAPI, collector: ResourceCollector, code: int,
                                        fragment: str) -> None:
    api.put_object("/api/v1", "pods", pod("a", CPU))

    def fail(_r: Req) -> Reply:
        return Reply(code, status(code, "X", "nope"))

    api.on("GET", METRICS_PATH, fail)
    s = collector.collect(NS, "cpu", "Utilization", Target())
    assert s.error is not None and fragment in s.error


def test_pod_list_failure_is_a_sample(api: FakeAPI, collector: ResourceCollector) -> None:
    api.on("GET", "/api/v1/namespaces/ns1/pods", lambda _r: Reply(500, status(500, "InternalError", "etcd")))
    s = collector.collect(NS, "cpu", "Utilization", Target())
    assert s.error is not None and "listing the pods of Deployment ns1/web (app=web)" in s.error


def test_empty_selector_is_refused_without_a_request(api: FakeAPI, collector: ResourceCollector) -> None:
    s = collector.collect(NS, "cpu", "Utilization", Target(selector=""))
    assert s.error is not None and "no pod selector" in s.error
    assert api.reqs() == []
