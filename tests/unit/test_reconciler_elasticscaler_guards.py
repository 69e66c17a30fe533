"""The write guards at the reconciler level (docs/concepts.md#the-decision-pipeline step 5, issue 8 items 1
and 13): the guard is driven by the target handler's own rollout verdict (StatefulSet partition and OnDelete,
paused Deployment), replicas that are only not Ready yet never hold a write, and pods Pending as
Unschedulable hold further scale-up (InsufficientCapacity) but never a scale-down."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from es_fakes import NS, Harness, deployment, external_metric, harness, metrics_trigger, pod, scaler

from escaler.targets.pods import UNSCHEDULABLE_GRACE_SECONDS


@pytest.fixture
def h() -> Iterator[Harness]:
    with harness() as hh:
        yield hh


def statefulset(replicas: int, status: dict[str, Any], strategy: dict[str, Any] | None = None,
                generation: int = 3) -> dict[str, Any]:
    spec: dict[str, Any] = {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}}}
    if strategy is not None:
        spec["updateStrategy"] = strategy
    return {"apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": "web", "namespace": NS, "generation": generation},
            "spec": spec, "status": {"observedGeneration": generation, **status}}


STS = {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "web"}


def _load(h: Harness, value: float) -> None:
    h.collector.values["queue"] = value


def _es(target: dict[str, str] | None = None, **kw: Any) -> dict[str, Any]:
    # External Value target 10: the load / 10 is the count (apa caps one step at x2)
    return scaler("es", metrics_trigger(external_metric("queue", "10")), target=target, **kw)


def _able(h: Harness) -> tuple[str, str]:
    c = h.condition("es", "AbleToScale")
    assert c is not None
    return c["reason"], c["message"]


# id → (the target object, its reference); every one is at 2 replicas and NOT in a template rollout
# by its own kind's rules, though its raw counts (updated < spec) look like one
NO_ROLLOUT: list[tuple[str, dict[str, Any], dict[str, str] | None]] = [
    ("statefulset-partition-reached",
     statefulset(2, {"replicas": 2, "readyReplicas": 2, "updatedReplicas": 1,
                     "currentRevision": "web-1", "updateRevision": "web-2"},
                 {"type": "RollingUpdate", "rollingUpdate": {"partition": 1}}), STS),
    ("statefulset-ondelete",
     statefulset(2, {"replicas": 2, "readyReplicas": 2, "updatedReplicas": 0,
                     "currentRevision": "web-1", "updateRevision": "web-2"},
                 {"type": "OnDelete"}), STS),
    ("deployment-paused",
     {**deployment("web", 2),
      "spec": {"replicas": 2, "paused": True, "selector": {"matchLabels": {"app": "web"}}},
      "status": {"observedGeneration": 1, "replicas": 2, "readyReplicas": 2, "updatedReplicas": 0}}, None),
    ("deployment-pods-not-ready-yet",
     deployment("web", 2, ready=0), None),
]


@pytest.mark.parametrize(("target", "ref"), [(t, r) for _, t, r in NO_ROLLOUT],
                         ids=[i for i, _, _ in NO_ROLLOUT])
def test_the_kinds_own_rollout_rules_never_hold_a_write(h: Harness, target: dict[str, Any],
                                                        ref: dict[str, str] | None) -> None:
    resource = "statefulsets" if target["kind"] == "StatefulSet" else "deployments"
    h.api(resource).create(target)
    h.api("elasticscalers").create(_es(ref))
    h.start()
    _load(h, 40.0)  # 4 replicas wanted
    h.reconcile("es")
    assert h.api(resource).get(f"{NS}/web")["spec"]["replicas"] == 4  # type: ignore[index]
    assert _able(h)[0] == "Synced"
    assert "deferredSince" not in h.status("es")


def test_a_template_rollout_still_holds_the_write(h: Harness) -> None:
    h.api("deployments").create({**deployment("web", 2), "status": {
        "observedGeneration": 1, "replicas": 3, "readyReplicas": 2, "updatedReplicas": 1}})
    h.api("elasticscalers").create(_es())
    h.start()
    _load(h, 40.0)
    result = h.reconcile("es")
    assert h.replicas() == 2
    reason, message = _able(h)
    assert reason == "RolloutInProgress"
    assert "updatedReplicas 1 < 2" in message
    assert result.requeue_after == 600.0  # forced after deferTimeoutSeconds (default 600)


def _pods(h: Harness, *pods: dict[str, Any]) -> None:
    for p in pods:
        h.api("pods").create(p)


def test_unschedulable_pods_hold_scale_up_with_the_schedulers_message(h: Harness) -> None:
    # 4 replicas: 2 run, 2 have been Pending as Unschedulable since the start (the clock is then
    # moved past the grace period)
    h.api("deployments").create(deployment("web", 4, ready=2))
    _pods(h, pod("web-a"), pod("web-b"),
          pod("web-c", unschedulable_since="2026-01-01T00:00:00Z"),
          pod("web-d", unschedulable_since="2026-01-01T00:00:00Z"))
    h.api("elasticscalers").create(_es())
    h.start()
    h.clock.step(UNSCHEDULABLE_GRACE_SECONDS)
    _load(h, 80.0)  # 8 wanted
    result = h.reconcile("es")
    assert h.replicas() == 4
    reason, message = _able(h)
    assert reason == "InsufficientCapacity"
    assert "2 pods of the target Pending as Unschedulable" in message
    assert "Insufficient nvidia.com/gpu" in message
    assert result.requeue_after == 600.0


def test_unschedulable_pods_never_hold_a_scale_down(h: Harness) -> None:
    h.api("deployments").create(deployment("web", 4, ready=2))
    _pods(h, pod("web-a"), pod("web-b"),
          pod("web-c", unschedulable_since="2026-01-01T00:00:00Z"),
          pod("web-d", unschedulable_since="2026-01-01T00:00:00Z"))
    h.api("elasticscalers").create(_es(annotations={
        "elasticscaler.io/behavior.scaleDown.stabilizationWindowSeconds": "0"}))
    h.start()
    h.clock.step(UNSCHEDULABLE_GRACE_SECONDS)
    _load(h, 20.0)  # 2 wanted
    h.reconcile("es")
    assert h.replicas() == 2
    assert _able(h)[0] == "Synced"


def test_a_pod_inside_its_grace_period_does_not_hold_and_is_looked_at_again_when_it_leaves_it(
        h: Harness) -> None:
    h.api("deployments").create(deployment("web", 3, ready=2))
    _pods(h, pod("web-a"), pod("web-b"), pod("web-c", unschedulable_since="2026-01-01T00:00:00Z"))
    h.api("elasticscalers").create(_es())
    h.start()
    h.clock.step(10)
    _load(h, 30.0)  # 3 wanted: no write
    result = h.reconcile("es")
    assert h.replicas() == 3
    assert _able(h)[0] == "Synced"
    assert result.requeue_after == UNSCHEDULABLE_GRACE_SECONDS - 10
