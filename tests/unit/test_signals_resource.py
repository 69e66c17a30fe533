"""escaler.signals.resource: the HPA's pod groups (ready, unready, missing, ignored), utilization and
per-pod averages over the ready pods, the HPA's replica count for every case of its algorithm docs,
and the collector over HTTP."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest
from test_kube_fakeapi import FakeAPI, Reply, Req, status

from escaler.kube.discovery import RESTMapper
from escaler.kube.dynamic import DynamicClient
from escaler.scaling.algorithm import PodCounts
from escaler.signals import PodUsage, ResourceCollector, Sample, resource_sample
from escaler.signals import resource as resource_module
from escaler.signals.resource import (
    CPU_INITIALIZATION_PERIOD_SECONDS,
    INITIAL_READINESS_DELAY_SECONDS,
    resource_replicas,
)

NS = "ns1"
METRICS_PATH = "/apis/metrics.k8s.io/v1beta1/namespaces/ns1/pods"
# the wall clock of every test: 2026-01-01T01:00:00Z
NOW = datetime(2026, 1, 1, 1, 0, 0, tzinfo=UTC).timestamp()
# a pod started an hour ago and Ready for 59 minutes: long past the cpu initialization period
STARTED = NOW - 3600


def at(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def pod(name: str, *requests: Mapping[str, str], phase: str = "Running", deleting: bool = False,
        init: list[dict[str, Any]] | None = None, pod_requests: Mapping[str, str] | None = None,
        labels: Mapping[str, str] | None = None, ready: str | None = "True", started: float | None = STARTED,
        transition: float | None = None) -> dict[str, Any]:
    """A pod; Running pods are Ready since a minute after they started, unless told otherwise
    (``ready=None``: no Ready condition; ``started=None``: no startTime)."""
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
    status: dict[str, Any] = {"phase": phase}
    if phase != "Pending":
        if started is not None:
            status["startTime"] = at(started)
        if ready is not None:
            since = transition if transition is not None else (started or STARTED) + 60
            status["conditions"] = [{"type": "Ready", "status": ready, "lastTransitionTime": at(since)}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": md, "spec": spec, "status": status}


def pm(name: str, *usages: Mapping[str, str], sampled: float = NOW - 10,
       window: str = "30s") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": NS}, "timestamp": at(sampled), "window": window,
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
     "no cpu metrics for any ready pod of the 2 pods of Deployment ns1/web (app=web) "
     "(0 unready, 2 without"),
    ("only-unready-pods", "cpu", "Utilization",
     [pod("a", CPU, phase="Pending"), pod("b", CPU, ready="False", transition=STARTED + 1)],
     [pm("b", {"cpu": "1"})], "(2 unready, 0 without metrics yet)"),
    ("pending-pod-without-requests-is-named", "cpu", "Utilization",
     [pod("a", CPU), pod("web-3", {}, phase="Pending")], [pm("a", {"cpu": "1"})], "pods web-3 of"),
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
    s = resource_sample(resource, target_type, pods, metrics, now=NOW, where="Deployment ns1/web (app=web)")
    if isinstance(expected, str):
        assert s.value is None and s.error is not None
        assert expected in s.error
    else:
        assert s.error is None
        assert s.value == pytest.approx(expected)


# ---- the HPA's pod groups -----------------------------------------------------------------------

YOUNG = NOW - 60  # started a minute ago: inside the cpu initialization period
INIT = CPU_INITIALIZATION_PERIOD_SECONDS
DELAY = INITIAL_READINESS_DELAY_SECONDS
ONE = {"cpu": "1", "memory": "1Gi"}
BUSY = {"cpu": "800m", "memory": "512Mi"}

# id, resource, the pod under test (next to one ready pod "a" at 500m / 256Mi), its metric (None: none),
# expected (unready, missing) counts
GROUPS: list[tuple[str, str, dict[str, Any], dict[str, Any] | None, tuple[int, int]]] = [
    ("ready", "cpu", pod("x", ONE), pm("x", BUSY), (0, 0)),
    ("pending-is-unready", "cpu", pod("x", ONE, phase="Pending"), None, (1, 0)),
    ("pending-with-a-metric-is-still-unready", "cpu", pod("x", ONE, phase="Pending"), pm("x", BUSY), (1, 0)),
    ("pending-memory-is-unready-too", "memory", pod("x", ONE, phase="Pending"), None, (1, 0)),
    ("no-metric-is-missing", "cpu", pod("x", ONE), None, (0, 1)),
    ("container-without-usage-is-missing", "cpu", pod("x", ONE), pm("x", {"memory": "1Mi"}),
     (0, 1)),
    ("cpu-without-ready-condition", "cpu", pod("x", ONE, ready=None), pm("x", BUSY), (1, 0)),
    ("cpu-without-start-time", "cpu", pod("x", ONE, started=None), pm("x", BUSY), (1, 0)),
    ("memory-ignores-readiness", "memory", pod("x", ONE, ready=None, started=None), pm("x", BUSY), (0, 0)),
    ("young-cpu-not-ready", "cpu", pod("x", ONE, ready="False", started=YOUNG, transition=YOUNG),
     pm("x", BUSY), (1, 0)),
    ("young-cpu-ready-sample-within-a-window-of-readiness", "cpu",
     pod("x", ONE, started=YOUNG, transition=NOW - 20), pm("x", BUSY, sampled=NOW - 5, window="30s"),
     (1, 0)),
    ("young-cpu-ready-sample-a-window-after-readiness", "cpu",
     pod("x", ONE, started=YOUNG, transition=NOW - 50), pm("x", BUSY, sampled=NOW - 5, window="30s"),
     (0, 0)),
    ("young-cpu-go-duration-window", "cpu",
     pod("x", ONE, started=YOUNG, transition=NOW - 50), pm("x", BUSY, sampled=NOW - 5, window="1m0s"),
     (1, 0)),
    ("young-cpu-ready-unknown-status-counts", "cpu",
     pod("x", ONE, ready="Unknown", started=YOUNG, transition=NOW - 50), pm("x", BUSY), (0, 0)),
    ("old-cpu-never-ready", "cpu",
     pod("x", ONE, ready="False", started=NOW - INIT - 100, transition=NOW - INIT - 100 + DELAY - 1),
     pm("x", BUSY), (1, 0)),
    ("old-cpu-was-ready-once-counts", "cpu",
     pod("x", ONE, ready="False", started=NOW - INIT - 100, transition=NOW - 10), pm("x", BUSY), (0, 0)),
    ("old-cpu-ready", "cpu", pod("x", ONE, started=NOW - INIT - 1, transition=NOW - 5), pm("x", BUSY),
     (0, 0)),
]


@pytest.mark.parametrize(("resource", "other", "metric", "groups"), [g[1:] for g in GROUPS],
                         ids=[g[0] for g in GROUPS])
def test_pods_are_grouped_as_the_hpa_does(resource: str, other: dict[str, Any], metric: dict[str, Any] | None,
                                          groups: tuple[int, int]) -> None:
    pods = [pod("a", ONE), other, pod("gone", ONE, deleting=True), pod("done", ONE, phase="Succeeded"),
            pod("failed", ONE, phase="Failed")]
    metrics = [pm("a", {"cpu": "500m", "memory": "256Mi"}), pm("gone", BUSY), pm("done", BUSY),
               pm("failed", BUSY), *([metric] if metric else [])]
    s = resource_sample(resource, "Utilization", pods, metrics, now=NOW)
    unready, missing = groups
    ready = 2 - unready - missing
    unit = 1.0 if resource == "cpu" else float(2**30)  # every pod requests 1 cpu and 1Gi
    assert s.pods == PodCounts(ready=ready, ready_weight=ready * unit, unready=unready,
                               unready_weight=unready * unit, missing=missing, missing_weight=missing * unit)
    # the value is over the ready pods only (what status.currentMetrics shows, as the HPA's status):
    # a alone at 500m of 1 cpu (256Mi of 1Gi), or a and x at 1300m of 2 cpu (768Mi of 2Gi)
    expected = {("cpu", 1): 50.0, ("cpu", 2): 65.0, ("memory", 1): 25.0, ("memory", 2): 37.5}
    assert s.value == pytest.approx(expected[resource, ready])


def test_average_value_weighs_pods_one_each() -> None:
    s = resource_sample("cpu", "AverageValue", [pod("a", {}), pod("b", {}), pod("c", {}, phase="Pending")],
                        [pm("a", {"cpu": "1"}), pm("b", {"cpu": "2"})], now=NOW)
    assert s.value == 1.5
    assert s.pods == PodCounts(ready=2, ready_weight=2.0, unready=1, unready_weight=1.0)


# The HPA's replica count, case by case (kubernetes.io "Horizontal Pod Autoscaling", Algorithm details,
# and the replica calculator's rules). Every pod requests 1 cpu; "p%" is a pod's usage in percent.
def pods_at(*usages: int | str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Pods by usage: an int is a ready pod at that %, "missing" has no metric, "pending" is Pending,
    "unready" is a young pod not Ready yet (its metric is there but does not count)."""
    pods, metrics = [], []
    for i, u in enumerate(usages):
        name = f"p{i}"
        if u == "pending":
            pods.append(pod(name, {"cpu": "1"}, phase="Pending"))
            continue
        if u == "unready":
            pods.append(pod(name, {"cpu": "1"}, ready="False", started=YOUNG, transition=YOUNG))
            metrics.append(pm(name, {"cpu": "2"}))
            continue
        pods.append(pod(name, {"cpu": "1"}))
        if u != "missing":
            metrics.append(pm(name, {"cpu": f"{u}0m"}))
    return pods, metrics


# id, current replicas, target %, pods, expected replicas, expected reported utilization
HPA_CASES: list[tuple[str, int, int, tuple[int | str, ...], int, float]] = [
    # desiredReplicas = ceil[currentReplicas * (currentMetricValue / desiredMetricValue)]
    ("doubles-at-twice-the-target", 2, 50, (100, 100), 4, 100.0),
    ("halves-at-half-the-target", 4, 100, (50, 50, 50, 50), 2, 50.0),
    ("within-tolerance-keeps", 4, 50, (54, 54, 54, 54), 4, 54.0),
    # the case: 2 running at 140 % of 70 % and 2 Pending ask for 4, not 8
    ("two-running-two-pending", 4, 70, (140, 140, "pending", "pending"), 4, 140.0),
    # unready pods count as 0 % on a scale-up: the new ratio decides (3 pods at 0 % dilute 2 at 200 %)
    ("unready-dampen-scale-up", 5, 50, (200, 200, "unready", "unready", "unready"), 8, 200.0),
    # ... and are left out of a scale-down (ceil(0.5 * 2 ready), not ceil(0.5 * 4))
    ("unready-ignored-on-scale-down", 4, 70, (35, 35, "pending", "pending"), 1, 35.0),
    # missing pods count as 100 % of their request on a scale-down (conservative)
    ("missing-at-100pc-on-scale-down", 4, 50, (10, 10, 10, "missing"), 3, 10.0),
    # ... as max(100 %, target) when the target is above 100 %
    ("missing-at-target-above-100pc", 4, 200, (20, 20, 20, "missing"), 2, 20.0),
    # missing pods count as 0 % on a scale-up
    ("missing-at-0pc-on-scale-up", 4, 50, (150, 150, "missing", "missing"), 6, 150.0),
    # the recomputed ratio points the other way: no change (a scale-down that 100 % missing pods flip)
    ("direction-flip-down-keeps", 4, 50, (20, 20, "missing", "missing"), 4, 20.0),
    # ... and a scale-up that 0 % missing pods flip (naive apa: ceil(3 * 1.2) = 4)
    ("direction-flip-up-keeps", 3, 100, (120, 120, "missing"), 3, 120.0),
    # the recomputed ratio lands in the tolerance band: no change
    ("recomputed-within-tolerance-keeps", 4, 50, (100, 100, "unready", "unready"), 4, 100.0),
    # the final check: the new count would move against the ratio (more pods than spec.replicas)
    ("more-pods-than-replicas-never-scales-up-on-a-low-ratio", 2, 100, (30, "missing", "missing", "missing"),
     2, 30.0),
    ("never-scales-down-on-a-high-ratio", 10, 100, (300, "pending"), 10, 300.0),
]


@pytest.mark.parametrize(("current", "target", "usages", "replicas", "utilization"),
                         [c[1:] for c in HPA_CASES], ids=[c[0] for c in HPA_CASES])
def test_resource_replicas_follow_the_hpa(current: int, target: int, usages: tuple[int | str, ...],
                                          replicas: int, utilization: float) -> None:
    pods, metrics = pods_at(*usages)
    got, value = resource_replicas("cpu", "Utilization", float(target), pods, metrics, tolerance=0.1, now=NOW,
                                   current_replicas=current)
    assert got == replicas
    assert value == pytest.approx(utilization)


def test_resource_replicas_average_value_missing_pods_count_at_the_target() -> None:
    # AverageValue 200m per pod: 3 ready at 100m (ratio 0.5), 1 missing counted at the target on the
    # scale-down: (300m + 200m) / 4 pods / 200m = 0.625 → ceil(0.625 * 4) = 3
    pods, metrics = pods_at(10, 10, 10, "missing")
    got, value = resource_replicas("cpu", "AverageValue", 0.2, pods, metrics, tolerance=0.1, now=NOW,
                                   current_replicas=4)
    assert got == 3
    assert value == pytest.approx(0.1)


def test_resource_replicas_without_a_value_raises_the_reason() -> None:
    pods, metrics = pods_at("missing", "pending")
    with pytest.raises(ValueError, match="no cpu metrics for any ready pod"):
        resource_replicas("cpu", "Utilization", 50.0, pods, metrics, tolerance=0.1, now=NOW,
                          current_replicas=2)


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
    s = collector.collect(NS, "cpu", "Utilization", Target(), now=NOW)
    assert s == Sample(75.0, pods=PodCounts(ready=2, ready_weight=1.0))
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
    assert collector.collect(NS, "cpu", "Utilization", Target(), now=NOW).value == 100.0
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
    assert c.collect(NS, "cpu", "Utilization", Target(), now=NOW).value == 20.0
    assert asked == [(NS, "app=web")]
    assert api.reqs("GET", "/api/v1/") == []


def test_pod_lister_that_cannot_answer_falls_back_to_the_api(api: FakeAPI) -> None:
    rest = api.rest()
    api.put_object("/api/v1", "pods", pod("a", CPU))
    serve_metrics(api, [pm("a", {"cpu": "100m"})])
    c = ResourceCollector(rest, DynamicClient(rest, RESTMapper(rest)), pod_lister=lambda _n, _s: None)
    assert c.collect(NS, "cpu", "Utilization", Target(), now=NOW).value == 20.0
    assert len(api.reqs("GET", "/api/v1/namespaces/ns1/pods")) == 1


def test_memo_shares_one_read_between_metrics(api: FakeAPI, collector: ResourceCollector) -> None:
    api.put_object("/api/v1", "pods", pod("a", BOTH))
    serve_metrics(api, [pm("a", {"cpu": "250m", "memory": "256Mi"})])
    memo: dict[str, PodUsage | Sample] = {}
    assert collector.collect(NS, "cpu", "Utilization", Target(), memo, now=NOW).value == 50.0
    assert collector.collect(NS, "memory", "Utilization", Target(), memo, now=NOW).value == 25.0
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
    s = collector.collect(NS, "cpu", "Utilization", Target(), now=NOW)
    assert s.error is not None and fragment in s.error


def test_pod_list_failure_is_a_sample(api: FakeAPI, collector: ResourceCollector) -> None:
    api.on("GET", "/api/v1/namespaces/ns1/pods", lambda _r: Reply(500, status(500, "InternalError", "etcd")))
    s = collector.collect(NS, "cpu", "Utilization", Target(), now=NOW)
    assert s.error is not None and "listing the pods of Deployment ns1/web (app=web)" in s.error


def test_empty_selector_is_refused_without_a_request(api: FakeAPI, collector: ResourceCollector) -> None:
    s = collector.collect(NS, "cpu", "Utilization", Target(selector=""), now=NOW)
    assert s.error is not None and "no pod selector" in s.error
    assert api.reqs() == []
