"""metricsync: MetricsRecommender returns its outcome (rows, memory) instead of mutating shared state;
windows keyed by metric identity; totals windowed per replica; the HPA's pod rules for Resource
metrics; the panic window; the rate cap reported; read failures reported on every path."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
import requests
from prometheus_client import CollectorRegistry
from test_kube_fakeapi import FakeAPI, Reply

from escaler.api.elasticscaler import ElasticScaler, MetricSpec
from escaler.clock import FakeClock
from escaler.kube.discovery import RESTMapper
from escaler.kube.dynamic import DynamicClient
from escaler.reconcilers.elasticscaler.metricsync import (
    MetricsMemory,
    MetricsOutcome,
    MetricsRecommender,
    window_key,
)
from escaler.reconcilers.kit.poller import phase as poll_phase
from escaler.reconcilers.kit.scalermetrics import ScalerMetrics
from escaler.runtime.types import Request
from escaler.scaling.algorithm import AlgorithmContext, MetricValue, NoDecision, PodCounts
from escaler.scaling.annotations import MISSING_DATA_POLICY, PANIC_WINDOW_PERCENTAGE, parse_annotations
from escaler.scaling.registry import get_algorithm, register_algorithm, unregister_algorithm
from escaler.signals import MetricsCollector, Sample, to_metric_value
from escaler.targets import TargetSnapshot

NS = "team"
WALL = 1_767_225_600.0  # 2026-01-01T00:00:00Z, the FakeClock's wall clock


def external(name: str, target: dict[str, Any], selector: dict[str, str] | None = None) -> dict[str, Any]:
    metric: dict[str, Any] = {"name": name}
    if selector:
        metric["selector"] = {"matchLabels": selector}
    return {"type": "External", "external": {"metric": metric, "target": target}}


def value(v: str) -> dict[str, Any]:
    return {"type": "Value", "value": v}


def average(v: str) -> dict[str, Any]:
    return {"type": "AverageValue", "averageValue": v}


CPU70 = {"type": "Resource",
         "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 70}}}


def es(*metrics: dict[str, Any], annotations: dict[str, str] | None = None, algorithm: str = "apa",
       generation: int = 1) -> ElasticScaler:
    meta: dict[str, Any] = {"name": "es", "namespace": NS, "generation": generation, "uid": "u1",
                            "creationTimestamp": "2026-01-01T00:00:00Z"}
    if annotations:
        meta["annotations"] = annotations
    return ElasticScaler.parse({
        "apiVersion": "elasticscaler.io/v1alpha1", "kind": "ElasticScaler", "metadata": meta,
        "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                 "minReplicas": 1, "maxReplicas": 50,
                 "trigger": {"type": "MetricsTrigger",
                             "metricsTrigger": {"scalingAlgorithm": algorithm, "metrics": list(metrics)}}}})


def snap(replicas: int) -> TargetSnapshot:
    return TargetSnapshot(api_version="apps/v1", kind="Deployment", namespace=NS, name="web", uid="t",
                          generation=1, observed_generation=1, spec_replicas=replicas,
                          status_replicas=replicas, ready_replicas=replicas, updated_replicas=replicas,
                          selector="app=web", resource_version="1", rollout_in_progress=False,
                          settling_scale_down=False)


@dataclass
class ScriptedCollector:
    """One sample per metric *index* (``samples[i]``: a float, a ``Sample``, or an error string)."""

    samples: Sequence[float | str | Sample] = field(default_factory=list)
    calls: int = 0

    def collect(self, namespace: str, metrics: Sequence[MetricSpec], target: Any,
                current_replicas: int) -> list[tuple[MetricSpec, Sample]]:
        self.calls += 1
        out = []
        for spec, s in zip(metrics, self.samples, strict=True):
            sample = s if isinstance(s, Sample) else Sample.fail(s) if isinstance(s, str) \
                else Sample(float(s))
            out.append((spec, sample))
        return out

    def to_metric_value(self, spec: MetricSpec, sample: Sample) -> MetricValue:
        return to_metric_value(spec, sample)


class Run:
    """A recommender on a FakeClock; ``sync`` stores the returned memory as a reconciler would."""

    def __init__(self, collector: Any, poll_interval: float = 0.0, allowed_hosts: Sequence[str] = ()) -> None:
        self.clock = FakeClock()
        self.registry = CollectorRegistry()
        self.metrics = ScalerMetrics(self.registry)
        self.rec = MetricsRecommender(collector, self.metrics, self.clock, allowed_hosts, poll_interval)
        self.memory = MetricsMemory()

    def sync(self, scaler: ElasticScaler, replicas: int, *, step: float = 0.0) -> MetricsOutcome:
        self.clock.step(step)
        ann, _ = parse_annotations(scaler.metadata.annotations or {})
        out = self.rec.recommend(scaler, ann, snap(replicas), self.memory,
                                 now=WALL + self.clock.monotonic() - 1000.0)
        self.memory = out.memory
        return out


# ---- item 3: windows keyed by the metric's identity ------------------------------------------------


def test_two_metrics_with_one_name_keep_separate_series() -> None:
    scaler = es(external("queue_depth", value("10"), {"q": "a"}),
                external("queue_depth", value("10"), {"q": "b"}))
    col = ScriptedCollector([10.0, 1000.0])
    run = Run(col)
    run.sync(scaler, 4)
    col.samples = [20.0, 2000.0]
    out = run.sync(scaler, 4, step=2)
    assert [(r.name, r.value) for r in out.statuses] == [("queue_depth", 15.0), ("queue_depth", 1500.0)]
    assert len(out.memory.windows) == 2


def test_a_spec_edit_starts_a_fresh_window() -> None:
    col = ScriptedCollector([10.0])
    run = Run(col)
    run.sync(es(external("queue", value("10"), {"q": "a"})), 4)
    col.samples = [30.0]
    edited = es(external("queue", value("10"), {"q": "b"}), generation=2)
    out = run.sync(edited, 4, step=2)
    assert out.statuses[0].value == 30.0  # not (10 + 30) / 2
    assert out.memory.windows.names() == [window_key(0, edited.spec.trigger.metrics_trigger.metrics[0])]  # type: ignore[union-attr]


def test_window_key_is_index_and_spec_hash() -> None:
    a = MetricSpec.model_validate(external("q", value("10"), {"q": "a"}))
    b = MetricSpec.model_validate(external("q", value("10"), {"q": "b"}))
    same = MetricSpec.model_validate(external("q", value("10"), {"q": "a"}))
    assert window_key(0, a) == window_key(0, same)
    assert len({window_key(0, a), window_key(0, b), window_key(1, a)}) == 3
    assert window_key(3, a).startswith("3/")


# ---- item 5: the rate cap is reported -----------------------------------------------------------------


def test_the_rate_cap_reaches_the_pipeline() -> None:
    out = Run(ScriptedCollector([50.0])).sync(es(external("queue", value("10"))), 2)
    # 50 / 10 = 5 replicas asked; apa's 2x cap allows 4
    assert (out.recommend.replicas, out.recommend.uncapped) == (4, 5)
    assert out.statuses[0].recommended_replicas == 4


def plain_three(ctx: AlgorithmContext) -> int:
    return 3


def test_a_plug_in_returning_a_count_reports_no_cap() -> None:
    register_algorithm("plain-three", plain_three)
    try:
        scaler = es(external("queue", value("10")), algorithm="plain-three")
        out = Run(ScriptedCollector([50.0])).sync(scaler, 2)
    finally:
        unregister_algorithm("plain-three")
    assert (out.recommend.replicas, out.recommend.uncapped) == (3, 3)


# ---- item 8: a failing read is reported on every path --------------------------------------------------


def test_a_failed_read_is_reported_while_the_window_still_decides() -> None:
    scaler = es(external("queue", value("10")))
    col = ScriptedCollector([60.0])
    run = Run(col)
    run.sync(scaler, 6)
    col.samples = ["external.metrics.k8s.io: 503 adapter down"]
    out = run.sync(scaler, 6, step=2)
    assert out.recommend.replicas == 6  # from the window's 60
    assert out.recommend.metric_errors == ("queue: external.metrics.k8s.io: 503 adapter down",)
    assert out.statuses[0].value == 60.0
    assert out.statuses[0].error == "external.metrics.k8s.io: 503 adapter down"
    labels = {"namespace": NS, "name": "es"}
    assert run.registry.get_sample_value("escaler_metric_errors_total", labels) == 1.0


def boom(ctx: AlgorithmContext) -> int:
    raise NoDecision("the plug-in cannot tell")


# id, annotations, algorithm, metrics, samples, (summary fragment, evaluated)
FAILURES: list[tuple[str, dict[str, str], str, list[dict[str, Any]], list[float | str], str]] = [
    ("ignore-empty-window", {}, "apa", [external("queue", value("10"))], ["adapter down"],
     "metrics: queue: adapter down"),
    ("fail-policy", {MISSING_DATA_POLICY: "Fail"}, "apa", [external("queue", value("10"))], ["adapter down"],
     "missingDataPolicy Fail"),
    ("partial-metrics", {}, "apa", [external("a", value("10")), external("b", value("10"))],
     [20.0, "adapter down"], "evaluated 1 of 2 metrics"),
    ("algorithm-no-decision", {}, "boom", [external("a", value("10")), external("b", value("10"))],
     [20.0, "adapter down"], "the plug-in cannot tell"),
]


@pytest.mark.parametrize(("annotations", "algorithm", "metrics", "samples", "summary"),
                         [f[1:] for f in FAILURES], ids=[f[0] for f in FAILURES])
def test_every_path_reports_the_failed_read(annotations: dict[str, str], algorithm: str,
                                            metrics: list[dict[str, Any]], samples: list[float | str],
                                            summary: str) -> None:
    register_algorithm("boom", boom)
    try:
        scaler = es(*metrics, annotations=annotations, algorithm=algorithm)
        out = Run(ScriptedCollector(samples)).sync(scaler, 4)
    finally:
        unregister_algorithm("boom")
    failed = metrics[samples.index("adapter down")]["external"]["metric"]["name"]
    assert out.recommend.metric_errors == (f"{failed}: adapter down",)
    assert summary in out.recommend.summary()


# ---- item 2: Resource metrics with the HPA's pod rules, windowed as totals ---------------------------------


def cpu(utilization: float, ready: int, unready: int = 0, missing: int = 0) -> Sample:
    return Sample(utilization, pods=PodCounts(ready=ready, ready_weight=float(ready), unready=unready,
                                              unready_weight=float(unready), missing=missing,
                                              missing_weight=float(missing)))


def test_two_running_two_pending_give_four_not_eight() -> None:
    out = Run(ScriptedCollector([cpu(140, ready=2, unready=2)])).sync(es(CPU70), 4)
    assert out.recommend.replicas == 4
    assert out.statuses[0].value == 140.0 and out.statuses[0].recommended_replicas == 4


def test_pods_becoming_ready_do_not_overshoot() -> None:
    # 2 pods at 140 % wait for 2 Pending ones; when those are Ready the load spreads (70 % on 4): the
    # window holds the total (280 percent-pods), so the value is 70 at once, not an average of 140 and 70
    col = ScriptedCollector([cpu(140, ready=2, unready=2)])
    run = Run(col)
    run.sync(es(CPU70), 4)
    col.samples = [cpu(70, ready=4)]
    out = run.sync(es(CPU70), 4, step=2)
    assert out.statuses[0].value == 70.0
    assert out.recommend.replicas == 4


def test_a_failed_resource_read_uses_the_last_pod_groups() -> None:
    col = ScriptedCollector([cpu(140, ready=2, unready=2)])
    run = Run(col)
    run.sync(es(CPU70), 4)
    col.samples = ["metrics.k8s.io: 503"]
    out = run.sync(es(CPU70), 4, step=2)
    assert out.statuses[0].value == 140.0 and out.recommend.replicas == 4
    assert out.recommend.metric_errors == ("cpu: metrics.k8s.io: 503",)


@pytest.fixture
def api() -> Iterator[FakeAPI]:
    with FakeAPI() as a:
        yield a


def test_end_to_end_with_the_collector_and_pending_pods(api: FakeAPI) -> None:
    def web(name: str, phase: str) -> dict[str, Any]:
        status: dict[str, Any] = {"phase": phase}
        if phase == "Running":
            status |= {"startTime": "2025-12-31T22:00:00Z", "conditions": [
                {"type": "Ready", "status": "True", "lastTransitionTime": "2025-12-31T22:01:00Z"}]}
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS,
                                                              "labels": {"app": "web"}},
                "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]},
                "status": status}

    for name, phase in [("a", "Running"), ("b", "Running"), ("c", "Pending"), ("d", "Pending")]:
        api.put_object("/api/v1", "pods", web(name, phase))
    api.on("GET", "/apis/metrics.k8s.io/v1beta1/namespaces/team/pods", lambda _r: Reply(200, {"items": [
        {"metadata": {"name": n}, "timestamp": "2025-12-31T23:59:50Z", "window": "30s",
         "containers": [{"name": "c", "usage": {"cpu": "1400m"}}]} for n in ("a", "b")]}))
    rest = api.rest()
    run = Run(None)
    collector = MetricsCollector(rest, DynamicClient(rest, RESTMapper(rest)), requests.Session, run.clock)
    run.rec = MetricsRecommender(collector, run.metrics, run.clock, (), 0.0)
    out = run.sync(es(CPU70), 4)
    assert out.statuses[0].value == 140.0
    assert out.recommend.replicas == 4  # the HPA's answer; utilization x spec.replicas gave 8


# ---- item 12: the panic window in metricsync -------------------------------------------------------------


def test_the_panic_window_takes_over_a_surge_and_the_rows_show_its_values() -> None:
    scaler = es(external("queue", average("10")))
    col = ScriptedCollector([40.0 / 4])  # the collector divides the total by the current count
    run = Run(col)
    for _ in range(15):
        out = run.sync(scaler, 4, step=2)
    assert out.recommend.replicas == 4
    col.samples = [120.0 / 4]
    out = run.sync(scaler, 4, step=2)
    assert (out.recommend.replicas, out.recommend.uncapped) == (8, 12)
    assert "panic window" in out.recommend.detail
    assert out.statuses[0].value == 30.0  # the newest sample, per replica (the stable average is 45/4)
    col.samples = [120.0 / 8]
    out = run.sync(scaler, 8, step=2)
    assert out.recommend.replicas == 12
    # the load drops at once: the stable window still remembers 120, so the scale-down waits
    col.samples = [40.0 / 12]
    out = run.sync(scaler, 12, step=2)
    assert out.recommend.replicas == 12
    assert "waits until every sample" in out.recommend.detail


def test_panic_off_keeps_the_stable_window_alone() -> None:
    scaler = es(external("queue", average("10")), annotations={PANIC_WINDOW_PERCENTAGE: "0"})
    col = ScriptedCollector([10.0])
    run = Run(col)
    for _ in range(15):
        run.sync(scaler, 4, step=2)
    col.samples = [30.0]
    out = run.sync(scaler, 4, step=2)
    assert out.recommend.replicas == 5  # the 60 s average of 15 x 40 and one 120 is 45: ceil(4.5)


# ---- the refactor: an outcome, not a mutation ------------------------------------------------------------


def test_recommend_never_mutates_the_memory_it_is_given() -> None:
    register_algorithm("apa-with-history", get_algorithm("apa"))  # reads the default history (64)
    try:
        scaler = es(external("queue", value("10")), algorithm="apa-with-history")
        col = ScriptedCollector([40.0])
        run = Run(col)
        first = run.sync(scaler, 4)
        before = first.memory.windows.window(first.memory.windows.names()[0]).samples()
        ann, _ = parse_annotations({})
        again = run.rec.recommend(scaler, ann, snap(4), first.memory, now=WALL + 2)
    finally:
        unregister_algorithm("apa-with-history")
    assert first.memory.windows.window(first.memory.windows.names()[0]).samples() == before
    assert again.memory is not first.memory and again.memory.windows is not first.memory.windows
    assert len(again.memory.history) == 2 and len(first.memory.history) == 1


def test_an_algorithm_that_reads_no_history_keeps_none() -> None:
    # apa is registered with history=0 (escaler.scaling.registry): a scaler using it keeps nothing
    run = Run(ScriptedCollector([40.0]))
    outs = [run.sync(es(external("queue", value("10"))), 4) for _ in range(3)]
    assert [o.recommend.replicas for o in outs] == [4, 4, 4]
    assert all(o.memory.history == () for o in outs)


def _step_to_due(run: Run, late: float = 0.0, interval: float = 30.0) -> float:
    """How far ``run``'s clock is from the scaler NS/es's next due poll (plus ``late``)."""
    p = poll_phase(Request(NS, "es"), interval)
    now = run.clock.monotonic()
    return (math.floor((now + 1e-6 - p) / interval) + 1) * interval + p + late - now  # strictly after now


def test_syncs_between_polls_reuse_the_collection_and_the_memory() -> None:
    scaler = es(external("queue", value("10")))
    col = ScriptedCollector([40.0])
    run = Run(col, poll_interval=30)
    first = run.sync(scaler, 4, step=_step_to_due(run))
    at = run.clock.monotonic()
    second = run.sync(scaler, 4, step=10)
    assert col.calls == 1 and second.memory is first.memory and second.recommend is first.recommend
    run.sync(scaler, 4, step=18)  # two seconds before the next due poll: still reused
    assert col.calls == 1
    third = run.sync(scaler, 4, step=_step_to_due(run))  # one poll interval later
    assert col.calls == 2 and third.memory.last is not None and third.memory.last.at == at + 30
    # a spec change collects at once
    run.sync(es(external("queue", value("20")), generation=2), 4, step=1)
    assert col.calls == 3


def test_a_collection_that_ran_late_does_not_make_the_next_poll_reuse_it() -> None:
    """Collected 8 s after its due time (a backlog): the old 80 %-of-the-interval rule reused it at
    the next due poll (22 s < 24 s), so the scaler was read every 60 s."""
    scaler = es(external("queue", value("10")))
    col = ScriptedCollector([40.0])
    run = Run(col, poll_interval=30)
    run.sync(scaler, 4, step=_step_to_due(run, late=8.0))
    run.sync(scaler, 4, step=5)
    assert col.calls == 1
    run.sync(scaler, 4, step=_step_to_due(run))
    assert col.calls == 2


@pytest.mark.parametrize(
    ("replicas", "collector", "hosts", "fragment"),
    [(0, ScriptedCollector([1.0]), (), "the target has 0 replicas"),
     (4, None, (), "no metrics collector configured")],
    ids=["target-at-zero", "no-collector"],
)
def test_nothing_read_leaves_the_windows_alone(replicas: int, collector: Any, hosts: tuple[str, ...],
                                               fragment: str) -> None:
    run = Run(collector, allowed_hosts=hosts)
    out = run.sync(es(external("queue", value("10"))), replicas)
    assert out.recommend.unavailable is not None and fragment in out.recommend.unavailable
    assert out.statuses == () and len(out.memory.windows) == 0 and out.memory.last is not None


def test_a_refused_endpoint_is_invalid_before_any_request() -> None:
    col = ScriptedCollector([1.0])
    run = Run(col, allowed_hosts=("*.internal",))
    prom = {"type": "ExternalServer", "externalServer": {"endpoint": "http://evil.example:9090",
                                                         "query": "sum(x)", "target": value("10")}}
    out = run.sync(es(prom), 4)
    assert out.recommend.invalid_spec is not None
    assert "not in --allowed-endpoint-hosts" in out.recommend.invalid_spec
    assert col.calls == 0
