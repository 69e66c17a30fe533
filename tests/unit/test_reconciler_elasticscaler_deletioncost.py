"""spec.scaleDown.podDeletionCost on the ElasticScaler reconciler (docs/design.md#beyond-the-seeds), on the
fakes with a FakeClock: a Deployment scale-down written now patches the idle pods' deletion cost (and only
those) before the replicas are written; a scale-down held by the stabilization window or a rollout guard,
a scale-up, and Advisory mode read and patch nothing; a failed per-pod query still scales down
(DeletionCostSkipped); a read in flight (the outbound executor) writes nothing until it completes;
a scaler without the policy never reads."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import es_fakes
import pytest
from es_fakes import NS, Harness, external_metric, metrics_trigger, pod, scaler
from executor_fakes import ManualExecutor

from escaler.api.elasticscaler import PodDeletionCostPrometheus
from escaler.cli.explain import render
from escaler.reconcilers.elasticscaler.deletioncost import read_key
from escaler.scaling.deletioncost import ANNOTATION
from escaler.signals.podvalues import PodValues

POLL = 30.0
ON_TARGET, HALF = 40.0, 20.0  # Value target 10: 4 replicas, then 2
LOAD = {"web-a": 8.0, "web-b": 0.0, "web-c": 5.0, "web-d": 1.0}  # b and d are idle
POLICY = {"prometheus": {"endpoint": "http://prometheus:9090", "query": "sum by (pod) (running)"}}


class PodValuesCollector(es_fakes.FakeCollector):
    """The fake collector with ``pod_values``: ``pod_load`` (or the error ``pod_error``), counted."""

    def __init__(self) -> None:
        super().__init__()
        self.pod_load: dict[str, float] = dict(LOAD)
        self.pod_error: str | None = None
        self.pod_reads: list[tuple[str, str]] = []

    def pod_values(self, namespace: str, source: PodDeletionCostPrometheus) -> PodValues:
        self.pod_reads.append((namespace, source.query))
        return PodValues.fail(self.pod_error) if self.pod_error else PodValues(dict(self.pod_load))


@pytest.fixture
def make(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    monkeypatch.setattr(es_fakes, "FakeCollector", PodValuesCollector)
    made: list[Harness] = []

    def build(**kwargs: Any) -> Harness:
        h = Harness(poll_interval=POLL, **kwargs)
        made.append(h)
        return h

    yield build
    for h in made:
        h.stop()


def _scaler(*, window: int = 0, policy: bool = True, mode: str | None = None) -> dict[str, Any]:
    obj = scaler("es", metrics_trigger(external_metric("queue", "10")), mode=mode, annotations={
        # each poll's sample alone (a window shorter than the poll), so a drop is a recommendation at once
        "elasticscaler.io/metrics.windowSeconds": "10",
        "elasticscaler.io/metrics.aggregationType": "Latest",
        "elasticscaler.io/behavior.scaleDown.stabilizationWindowSeconds": str(window)})
    if policy:
        obj["spec"]["scaleDown"] = {"podDeletionCost": POLICY}
    return obj


def _setup(h: Harness, obj: dict[str, Any]) -> None:
    h.api("deployments").create(es_fakes.deployment("web", 4))
    for name in LOAD:
        p = pod(name)
        p["spec"]["nodeName"] = "node-1"
        p["metadata"]["uid"] = f"uid-{name}"
        h.api("pods").create(p)
    h.api("elasticscalers").create(obj)
    h.collector.values["queue"] = ON_TARGET
    h.start()
    h.reconcile("es")
    assert h.replicas() == 4


def _poll(h: Harness, value: float = HALF) -> None:
    h.clock.step(POLL)
    h.collector.values["queue"] = value
    h.reconcile("es")


def _costs(h: Harness) -> dict[str, str | None]:
    out = {}
    for name in LOAD:
        obj = h.api("pods").get(f"{NS}/{name}")
        assert obj is not None
        out[name] = (obj["metadata"].get("annotations") or {}).get(ANNOTATION)
    return out


def _collector(h: Harness) -> PodValuesCollector:
    assert isinstance(h.collector, PodValuesCollector)
    return h.collector


def _notes(h: Harness, reason: str) -> list[str]:
    return [e.note for e in h.recorder.events if e.reason == reason]  # type: ignore[attr-defined]


def test_the_idle_pods_get_the_lowest_cost_before_the_scale_down(make: Any) -> None:
    h = make()
    _setup(h, _scaler())
    assert _collector(h).pod_reads == []  # no scale-down yet: no read
    _poll(h)
    assert h.replicas() == 2
    assert _costs(h) == {"web-a": None, "web-b": "-2", "web-c": None, "web-d": "-1"}
    assert h.client.count("patch", "pods") == 2  # only the pods that matter
    assert _collector(h).pod_reads == [(NS, "sum by (pod) (running)")]
    [note] = _notes(h, "DeletionCostSet")
    assert note.startswith("before scaling 4 -> 2: lowest cost to web-b (value 0, cost -2), "
                           "web-d (value 1, cost -1)")


def test_a_scale_down_held_by_the_window_reads_and_patches_nothing(make: Any) -> None:
    h = make()
    _setup(h, _scaler(window=120))
    for _ in range(3):  # 90 s: inside the window
        _poll(h)
        assert h.replicas() == 4
        able = h.condition("es", "AbleToScale")
        assert able is not None and able["reason"] == "ScaleDownStabilized"
    assert _collector(h).pod_reads == []
    assert h.client.count("patch", "pods") == 0
    _poll(h)
    _poll(h)  # the window has passed: the scale-down is written, and marked first
    assert h.replicas() == 2
    assert _costs(h)["web-b"] == "-2"


def test_a_scale_down_held_by_a_rollout_patches_nothing(make: Any) -> None:
    h = make()
    _setup(h, _scaler())
    dep = h.api("deployments").get(f"{NS}/web")
    assert dep is not None
    dep["metadata"]["generation"] = 2  # a template rollout the Deployment controller has not observed
    h.api("deployments").update(dep)
    _poll(h)
    assert h.replicas() == 4
    able = h.condition("es", "AbleToScale")
    assert able is not None and able["reason"] == "RolloutInProgress"
    assert _collector(h).pod_reads == [] and h.client.count("patch", "pods") == 0


def test_a_scale_up_and_advisory_mode_patch_nothing(make: Any) -> None:
    h = make()
    _setup(h, _scaler())
    _poll(h, 80.0)
    assert h.replicas() == 8
    h2 = make()
    _setup(h2, _scaler(mode="Advisory"))
    _poll(h2)
    assert h2.replicas() == 4
    assert h2.status("es")["desiredReplicas"] == 2
    for hh in (h, h2):
        assert _collector(hh).pod_reads == [] and hh.client.count("patch", "pods") == 0


def test_a_failed_query_still_scales_down_and_says_so(make: Any) -> None:
    h = make()
    _setup(h, _scaler())
    _collector(h).pod_error = "Prometheus query failed: GET http://prometheus:9090/api/v1/query: timed out"
    _poll(h)
    assert h.replicas() == 2
    assert h.client.count("patch", "pods") == 0
    [note] = _notes(h, "DeletionCostSkipped")
    assert note == ("before scaling 4 -> 2: pod deletion cost not set (no per-pod values: Prometheus query "
                    "failed: GET http://prometheus:9090/api/v1/query: timed out); the scale-down goes ahead "
                    "in the ReplicaSet controller's own order")


def test_a_scaler_without_the_policy_never_reads(make: Any) -> None:
    h = make()
    _setup(h, _scaler(policy=False))
    _poll(h)
    assert h.replicas() == 2
    assert _collector(h).pod_reads == [] and h.client.count("patch", "pods") == 0


def test_the_read_runs_off_the_worker_and_the_write_waits_for_it(make: Any) -> None:
    ex = ManualExecutor()
    h = make(outbound=ex)
    h.api("deployments").create(es_fakes.deployment("web", 4))
    for name in LOAD:
        p = pod(name)
        p["spec"]["nodeName"] = "node-1"
        h.api("pods").create(p)
    h.api("elasticscalers").create(_scaler())
    h.collector.values["queue"] = ON_TARGET
    h.start()
    metrics_key = ("metrics", NS, "es")
    h.reconcile("es")
    ex.complete(metrics_key)
    h.reconcile("es")
    assert h.replicas() == 4
    h.clock.step(POLL)
    h.collector.values["queue"] = HALF
    h.reconcile("es")
    ex.complete(metrics_key)
    h.reconcile("es")  # decides 2: starts the per-pod read, writes nothing yet
    assert ex.pending(read_key(NS, "es"))
    assert h.replicas() == 4 and h.client.count("patch", "pods") == 0
    h.reconcile("es")  # a sync while it is in flight starts no other
    assert ex.submitted.count((read_key(NS, "es"), NS)) == 1
    ex.complete(read_key(NS, "es"))
    h.reconcile("es")  # its completion: patch, then write
    assert h.replicas() == 2
    assert _costs(h) == {"web-a": None, "web-b": "-2", "web-c": None, "web-d": "-1"}


def test_a_deleted_scaler_drops_its_read(make: Any) -> None:
    ex = ManualExecutor()
    h = make(outbound=ex)
    h.reconciler.forget(es_fakes.Request(NS, "es"))
    assert read_key(NS, "es") in ex.discarded


def test_explain_shows_the_last_marking_as_step_8b(make: Any) -> None:
    h = make()
    _setup(h, _scaler())
    obj = h.api("elasticscalers").get(f"{NS}/es")
    assert obj is not None
    assert "no scale-down written with it in the recent events" in render(obj, [])
    _poll(h)
    obj = h.api("elasticscalers").get(f"{NS}/es")
    assert obj is not None
    events = [{"type": e.type, "reason": e.reason, "note": e.note}
              for e in h.recorder.events]  # type: ignore[attr-defined]
    out = render(obj, events)
    step = out.split("8b. Pod deletion cost (scaleDown.podDeletionCost)", 1)[1]
    assert step.splitlines()[1].startswith("   DeletionCostSet: before scaling 4 -> 2: lowest cost to web-b")
    plain = make()
    _setup(plain, _scaler(policy=False))
    plain_obj = plain.api("elasticscalers").get(f"{NS}/es")
    assert plain_obj is not None and "8b." not in render(plain_obj, events)
