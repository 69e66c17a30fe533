"""ElasticScaler reconciler on the in-process fake API: MetricsTrigger with an algorithm, status and
target write economy, conflicts, Advisory, pause, validation."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from es_fakes import (
    NS,
    Harness,
    cpu_metric,
    deployment,
    external_metric,
    harness,
    metrics_trigger,
    scaler,
)

from escaler.reconcilers.kit.bindings import TargetKey
from escaler.runtime import Request


@pytest.fixture
def h() -> Iterator[Harness]:
    with harness() as hh:
        yield hh


def _setup(h: Harness, *objs: dict, replicas: int = 2) -> None:
    h.api("deployments").create(deployment("web", replicas))
    for o in objs:
        h.api("elasticscalers").create(o)
    h.start()


# -- MetricsTrigger + apa: the happy path ---------------------------------------------------------


def test_metrics_trigger_scales_up_and_reports(h: Harness) -> None:
    _setup(h, scaler("es", metrics_trigger(external_metric("queue", "10"))))
    h.collector.values["queue"] = 50.0  # 50 / 10 per replica → 5 replicas
    result = h.reconcile("es")
    assert h.replicas() == 4  # apa's one-step limit: at most x2 (2 → 4)
    st = h.status("es")
    # the status describes the target after the sync (written: at the desired count); the step is
    # in recentDecisions
    assert st["currentReplicas"] == 4 and st["desiredReplicas"] == 4
    assert [(d["from"], d["to"]) for d in st["recentDecisions"]] == [(2, 4)]
    assert st["observedGeneration"] == 1
    assert st["lastScaleTime"]
    assert st["resolvedTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}
    assert st["currentMetrics"][0]["name"] == "queue"
    assert st["currentMetrics"][0]["value"] == 50.0 and st["currentMetrics"][0]["recommendedReplicas"] == 4
    [decision] = st["recentDecisions"]
    assert (decision["from"], decision["to"]) == (2, 4)
    conds = {c["type"]: c for c in st["conditions"]}
    assert conds["ScalingActive"]["reason"] == "MetricsAvailable"
    assert conds["AbleToScale"]["reason"] == "Synced"
    assert conds["Validated"]["reason"] == "Valid"
    assert conds["MetricsPipeline"]["reason"] == "AllMetricsAvailable"
    assert "SuccessfulRescale" in h.reasons()
    # nothing time-based holds a finished scale-up, and polling is off in this harness: no requeue
    assert (result.requeue, result.requeue_after) == (False, 0.0)
    assert h.client.count("patch", "deployments") == 1


def test_status_and_target_unchanged_means_no_writes(h: Harness) -> None:
    _setup(h, scaler("es", metrics_trigger(external_metric("queue", "10"))), replicas=3)
    h.collector.values["queue"] = 30.0  # exactly 3 replicas' worth: no change
    h.reconcile("es")
    assert h.client.count("patch", "elasticscalers/status") == 1
    assert h.client.count("patch", "deployments") == 0
    for _ in range(3):
        h.reconcile("es")
    assert h.client.count("patch", "elasticscalers/status") == 1, "an unchanged status is never written"
    assert h.client.count("patch", "deployments") == 0, "an unchanged count is never written"
    assert h.reconciler.reporter.writer.skipped == 3


def test_status_written_again_only_when_it_changes(h: Harness) -> None:
    _setup(h, scaler("es", metrics_trigger(external_metric("queue", "10"))), replicas=3)
    h.collector.values["queue"] = 30.0
    h.reconcile("es")
    h.collector.values["queue"] = "prometheus down"
    h.clock.step(120)  # the only sample leaves the 60 s window
    h.reconcile("es")
    assert h.client.count("patch", "elasticscalers/status") == 2
    cond = h.condition("es", "ScalingActive")
    assert cond is not None and (cond["status"], cond["reason"]) == ("False", "DecisionUnavailable")
    assert h.replicas() == 3, "no usable signal: the count is held"


def test_stale_cache_after_own_write_does_not_rewrite_status(h: Harness) -> None:
    _setup(h, scaler("es", metrics_trigger(external_metric("queue", "10"))), replicas=3)
    h.collector.values["queue"] = 30.0
    h.wait_synced()
    before = h.cached("es")  # the object before our own status write
    h.reconcile("es")
    assert h.client.count("patch", "elasticscalers/status") == 1

    h.scaler_cache.freeze(before)  # the cache has not seen our write yet
    h.reconciler.reconcile(Request(NS, "es"))
    assert h.client.count("patch", "elasticscalers/status") == 1


def test_decision_latency_and_desired_metrics(h: Harness) -> None:
    _setup(h, scaler("es", metrics_trigger(external_metric("queue", "10"))))
    h.collector.values["queue"] = 50.0
    h.reconcile("es")
    text = h.mgr.metrics.exposition().decode()
    assert 'escaler_desired_replicas{name="es",namespace="team"} 4.0' in text
    assert 'escaler_scale_writes_total{name="es",namespace="team",result="success"} 1.0' in text
    assert "escaler_decision_latency_seconds_count 1.0" in text


def test_metric_errors_counted_and_partial_metrics_never_scale_down(h: Harness) -> None:
    _setup(
        h, scaler("es", metrics_trigger(external_metric("a", "10"), external_metric("b", "10"))), replicas=4
    )
    h.collector.values.update(a=10.0, b="adapter unavailable")  # a alone says 1 replica
    h.reconcile("es")
    assert h.replicas() == 4, "a scale-down on partial metrics is suppressed"
    cond = h.condition("es", "MetricsPipeline")
    assert cond is not None and cond["reason"] == "PartialMetrics"
    assert "adapter unavailable" in cond["message"]
    text = h.mgr.metrics.exposition().decode()
    assert 'escaler_metric_errors_total{name="es",namespace="team"} 1.0' in text


# -- conflicts ------------------------------------------------------------------------------------


def test_conflict_older_scaler_wins_then_takes_over(h: Harness) -> None:
    old = scaler("old", metrics_trigger(external_metric("queue", "10")), created="2026-01-01T00:00:00Z")
    new = scaler("new", metrics_trigger(external_metric("queue", "10")), created="2026-01-02T00:00:00Z")
    _setup(h, new, old)
    h.collector.values["queue"] = 50.0
    h.reconcile("new")
    cond = h.condition("new", "Validated")
    assert cond is not None and (cond["status"], cond["reason"]) == ("False", "TargetConflict")
    assert "ElasticScaler team/old" in cond["message"]
    assert h.replicas() == 2, "the loser never writes"
    assert "TargetConflict" in h.reasons()
    h.reconcile("old")
    assert h.replicas() == 4
    assert h.condition("old", "Validated")["reason"] == "Valid"  # type: ignore[index]
    # the winner goes: the other one takes over
    h.api("elasticscalers").delete(f"{NS}/old")
    h.reconcile("new")
    assert h.condition("new", "Validated")["reason"] == "Valid"  # type: ignore[index]


@pytest.mark.parametrize(
    ("a", "b", "winner"),
    [
        (("x", "2026-01-01T00:00:00Z"), ("y", "2026-01-02T00:00:00Z"), "x"),
        (("x", "2026-01-03T00:00:00Z"), ("y", "2026-01-02T00:00:00Z"), "y"),
        (("b", "2026-01-01T00:00:00Z"), ("a", "2026-01-01T00:00:00Z"), "a"),
    ],
    ids=["older-wins", "older-wins-reversed", "same-time-name-breaks-tie"],
)
def test_conflict_resolution_order(h: Harness, a: tuple[str, str], b: tuple[str, str], winner: str) -> None:
    _setup(h, *(scaler(n, metrics_trigger(external_metric()), created=t) for n, t in (a, b)))
    h.collector.values["queue"] = 20.0
    for name in (a[0], b[0]):
        h.reconcile(name)
    loser = b[0] if winner == a[0] else a[0]
    assert h.condition(winner, "Validated")["reason"] == "Valid"  # type: ignore[index]
    assert h.condition(loser, "Validated")["reason"] == "TargetConflict"  # type: ignore[index]


def test_conflict_across_kinds_uses_kind_then_name() -> None:
    from escaler.reconcilers.kit.bindings import Claim, TargetBindings

    t = "2026-01-01T00:00:00Z"
    claims = sorted(
        [Claim(t, "LLMScaler", NS, "a"), Claim(t, "ElasticScaler", NS, "z")], key=lambda c: c.sort_key
    )
    assert claims[0].kind == "ElasticScaler"
    assert TargetBindings().foreign_hpas(TargetKey(NS, "apps", "Deployment", "web")) == []


def test_foreign_hpa_holds_the_scaler(h: Harness) -> None:
    _setup(h, scaler("es", metrics_trigger(external_metric())))
    h.api("horizontalpodautoscalers").create(
        {
            "apiVersion": "autoscaling/v2",
            "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "theirs", "namespace": NS},
            "spec": {
                "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                "minReplicas": 1,
                "maxReplicas": 5,
            },
        }
    )
    h.collector.values["queue"] = 50.0
    h.reconcile("es")
    cond = h.condition("es", "Validated")
    assert cond is not None and cond["reason"] == "TargetConflict" and "theirs" in cond["message"]
    assert h.replicas() == 2


# -- Advisory, pause ------------------------------------------------------------------------------


def test_advisory_computes_but_never_writes(h: Harness) -> None:
    _setup(h, scaler("es", metrics_trigger(external_metric()), mode="Advisory"))
    h.collector.values["queue"] = 50.0
    h.reconcile("es")
    assert h.replicas() == 2
    assert h.client.count("patch", "deployments") == 0
    st = h.status("es")
    assert st["desiredReplicas"] == 4
    assert "Advisory" in h.condition("es", "AbleToScale")["message"]  # type: ignore[index]
    assert st["recentDecisions"][-1]["to"] == 4
    h.reconcile("es")
    assert len(h.status("es")["recentDecisions"]) == 1, "the same would-be decision is recorded once"
    assert "SuccessfulRescale" not in h.reasons()


def test_advisory_does_not_conflict(h: Harness) -> None:
    active = scaler("active", metrics_trigger(external_metric()), created="2026-01-02T00:00:00Z")
    advisory = scaler(
        "advisory", metrics_trigger(external_metric()), mode="Advisory", created="2026-01-01T00:00:00Z"
    )
    _setup(h, active, advisory)
    h.collector.values["queue"] = 50.0
    h.reconcile("active")
    h.reconcile("advisory")
    assert h.condition("active", "Validated")["reason"] == "Valid"  # type: ignore[index]
    assert h.condition("advisory", "Validated")["reason"] == "Valid"  # type: ignore[index]
    assert h.replicas() == 4


def test_paused_freezes(h: Harness) -> None:
    _setup(
        h, scaler("es", metrics_trigger(external_metric()), annotations={"elasticscaler.io/paused": "true"})
    )
    h.collector.values["queue"] = 50.0
    h.reconcile("es")
    assert h.replicas() == 2
    cond = h.condition("es", "AbleToScale")
    assert cond is not None and (cond["status"], cond["reason"]) == ("True", "Paused")


def test_paused_replicas_pins(h: Harness) -> None:
    _setup(
        h,
        scaler(
            "es", metrics_trigger(external_metric()), annotations={"elasticscaler.io/paused-replicas": "7"}
        ),
    )
    h.collector.values["queue"] = 10.0
    h.reconcile("es")
    assert h.replicas() == 7
    assert h.status("es")["recentDecisions"][-1]["boundBy"] == "PausedReplicas"


# -- validation -----------------------------------------------------------------------------------


def test_unregistered_algorithm(h: Harness) -> None:
    _setup(h, scaler("es", metrics_trigger(external_metric(), algorithm="nope")))
    h.reconcile("es")
    cond = h.condition("es", "Validated")
    assert cond is not None and cond["reason"] == "AlgorithmNotRegistered" and "nope" in cond["message"]
    assert h.condition("es", "ScalingActive")["reason"] == "InvalidSpec"  # type: ignore[index]


def test_cross_field_rule_is_invalid_spec(h: Harness) -> None:
    _setup(h, scaler("es", metrics_trigger(external_metric()), min_replicas=5, max_replicas=2))
    h.reconcile("es")
    cond = h.condition("es", "Validated")
    assert cond is not None and cond["reason"] == "InvalidSpec" and "minReplicas" in cond["message"]
    assert h.replicas() == 2


def test_bad_annotation_reported_once(h: Harness) -> None:
    _setup(
        h,
        scaler(
            "es",
            metrics_trigger(external_metric()),
            annotations={"elasticscaler.io/metrics.windowSeconds": "soon"},
        ),
    )
    h.collector.values["queue"] = 20.0
    h.reconcile("es")
    h.reconcile("es")
    assert h.reasons().count("InvalidAnnotation") == 1


def test_target_deleted_then_recreated(h: Harness) -> None:
    _setup(h, scaler("es", metrics_trigger(external_metric())))
    h.collector.values["queue"] = 20.0
    h.reconcile("es")
    h.api("deployments").delete(f"{NS}/web")
    h.reconcile("es")
    cond = h.condition("es", "AbleToScale")
    assert cond is not None and (cond["status"], cond["reason"]) == ("False", "TargetNotFound")
    # the target watch enqueues the scaler when the Deployment comes back
    queue = h.es.controller.queue
    while len(queue):
        queue.done(queue.get())
    h.api("deployments").create(deployment("web", 2))
    from fakeapi import wait_until

    wait_until(lambda: len(queue) > 0, what="target creation enqueues the scaler")
    assert queue.get() == Request(NS, "es")
    h.reconcile("es")
    assert h.condition("es", "AbleToScale")["status"] == "True"  # type: ignore[index]


def test_rollout_in_progress_defers(h: Harness) -> None:
    # a template rollout: 1 of 2 replicas runs the latest template (not-ready replicas alone would
    # be capacity on the way, not a rollout)
    rolling = deployment("web", 2)
    rolling["status"]["updatedReplicas"] = 1
    h.api("deployments").create(rolling)
    h.api("elasticscalers").create(scaler("es", metrics_trigger(external_metric())))
    h.start()
    h.collector.values["queue"] = 50.0
    result = h.reconcile("es")
    assert h.replicas() == 2
    cond = h.condition("es", "AbleToScale")
    assert cond is not None and cond["reason"] == "RolloutInProgress"
    assert h.status("es")["deferredSince"]
    assert "ScalingDeferred" in h.reasons()
    assert result.requeue_after == 600.0  # forced after deferTimeoutSeconds


def test_deleted_scaler_is_forgotten(h: Harness) -> None:
    _setup(h, scaler("es", metrics_trigger(external_metric())))
    h.collector.values["queue"] = 50.0
    h.reconcile("es")
    assert h.es.watches.held()
    h.api("elasticscalers").delete(f"{NS}/es")
    h.reconcile("es")
    assert h.es.watches.held() == {}
    assert h.mgr.dynamic_informers.active_keys() == []
    assert "escaler_desired_replicas{" not in h.mgr.metrics.exposition().decode()


def test_cpu_metric_statuses_target_type(h: Harness) -> None:
    _setup(h, scaler("es", metrics_trigger(cpu_metric(50))))
    h.collector.values["cpu"] = 100.0
    h.reconcile("es")
    m = h.status("es")["currentMetrics"][0]
    assert (m["type"], m["targetType"], m["target"]) == ("Resource", "Utilization", 50.0)
    assert h.replicas() == 4


def test_metrics_collected_once_per_poll_interval() -> None:
    with harness(poll_interval=30.0) as h:
        _setup(h, scaler("es", metrics_trigger(external_metric("queue", "10"))), replicas=1)
        h.collector.values["queue"] = 80.0  # 8 replicas' worth; apa doubles at most per step
        h.reconcile("es")
        assert h.replicas() == 2 and h.collector.calls == 1
        h.settle()
        h.reconcile("es")  # woken by the target's rollout: reuses the last collection, no new step
        assert h.replicas() == 2 and h.collector.calls == 1
        h.clock.step(30)
        h.reconcile("es")  # the next poll collects again
        assert h.collector.calls == 2 and h.replicas() == 4


def test_stale_cache_never_drops_a_recent_decision(h: Harness) -> None:
    _setup(h, scaler("es", metrics_trigger(external_metric("queue", "10"))), replicas=1)
    h.collector.values["queue"] = 80.0
    h.wait_synced()
    before = h.cached("es")
    h.reconcile("es")  # 1 -> 2, recorded
    h.settle()

    h.wait_synced("deployments")
    h.scaler_cache.freeze(before)  # the cache has not seen the status write yet
    h.reconciler.reconcile(Request(NS, "es"))  # 2 -> 4, built on what we wrote, not on the stale copy
    assert [(d["from"], d["to"]) for d in h.status("es")["recentDecisions"]] == [(1, 2), (2, 4)]


def test_metrics_trigger_does_not_scale_from_zero(h: Harness) -> None:
    _setup(h, scaler("es", metrics_trigger(external_metric())), replicas=0)
    h.collector.values["queue"] = 50.0
    h.reconcile("es")
    assert h.replicas() == 0
    cond = h.condition("es", "ScalingActive")
    assert cond is not None and (cond["status"], cond["reason"]) == ("False", "ScalingDisabled")
    assert h.collector.calls == 0, "nothing is queried while the workload is switched off"


def test_write_conflict_requeues_and_other_failures_are_reported(h: Harness) -> None:
    from escaler.errors import StatusError

    _setup(h, scaler("es", metrics_trigger(external_metric())))
    h.collector.values["queue"] = 50.0
    h.client.faults[("patch", "deployments")] = [StatusError(409, "Conflict", "modified")]
    result = h.reconcile("es")
    assert result.requeue and h.replicas() == 2
    assert h.client.count("patch", "elasticscalers/status") == 0, "a conflict re-reads before reporting"
    # a real 409 means the target moved on: the next sync writes from its newer version (never again
    # from the one refused: tests/unit/test_reconciler_stale_target.py)
    h.settle()
    h.client.faults[("patch", "deployments")] = [StatusError(403, "Forbidden", "no RBAC")]
    result = h.reconcile("es")
    assert result.requeue
    cond = h.condition("es", "AbleToScale")
    assert cond is not None and (cond["status"], cond["reason"]) == ("False", "TargetWriteFailed")
    assert h.condition("es", "ScalingActive")["reason"] == "MetricsAvailable"  # type: ignore[index]
    assert "FailedRescale" in h.reasons()
    h.reconcile("es")
    assert h.replicas() == 4


def test_total_per_replica_metric_is_windowed_as_a_total() -> None:
    # External/ExternalServer with AverageValue: the collector divides the workload total by the
    # current count. The window must hold totals, or samples taken at different counts mix:
    # 40 at 2 replicas (20 each) then 40 at 4 (10 each) would average 15 and overshoot to 6.
    target = {"type": "AverageValue", "averageValue": "10"}
    avg = {"type": "External", "external": {"metric": {"name": "queue"}, "target": target}}
    with harness() as h:
        _setup(h, scaler("es", metrics_trigger(avg)), replicas=2)
        h.collector.values["queue"] = 20.0  # a total of 40 over 2 replicas
        h.reconcile("es")
        assert h.replicas() == 4
        h.wait_synced("deployments")
        h.clock.step(5)
        h.collector.values["queue"] = 10.0  # the same total of 40, now over 4 replicas
        h.reconcile("es")
        assert h.replicas() == 4
        assert h.status("es")["currentMetrics"][0]["value"] == 10.0
