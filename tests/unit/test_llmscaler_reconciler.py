"""The LLMScaler reconciler (docs/concepts.md, docs/llmscaler.md; seed 000) on the ElasticScaler unit harness:
a manager on fakes (``es_fakes.Harness``, FakeClock) with ``setup_llmscaler`` wired next to the ElasticScaler
controller on the same ``TargetBindings``; provider reads run inline through a scripted reader.

Every behaviour seed 000 lists: the condition table (ScalingActive / AbleToScale / ScalingLimited,
Validated, MetricsPipeline, the DecisionAvailable mirror), lastScaleTime only after a successful
write, observedGeneration on every path (target errors included), the stale ScalingDeferred
removed, provider switches overwriting the conditions, the deferral guards and timeout, scale-down
stabilization and maxStepReplicas, no scale-up cap, clamp last, events, and the cross-kind
TargetConflict (the older scaler wins)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from es_fakes import NS, Harness, deployment, external_metric, metrics_trigger, scaler

from escaler.api.elasticscaler import ElasticScaler
from escaler.errors import StatusError
from escaler.reconcilers.kit.bindings import TargetKey
from escaler.reconcilers.kit.watchkey import NOT_SYNCED_RETRY_SECONDS
from escaler.reconcilers.llmscaler import LLMScalerController, setup_llmscaler
from escaler.reconcilers.llmscaler.provider import CustomReading
from escaler.runtime import Request, Result
from escaler.runtime.executor import InlineExecutor
from escaler.signals.promqlscope import PromQLScope
from escaler.signals.sample import Sample
from escaler.targets.registry import default_registry

PROM = "http://prom.example:9090"
SLO = "http://slo.example:8082/decisions/chat"


class Reader:
    """Scripted provider answers: ``values[query]`` (float, or str error) and ``decision``."""

    def __init__(self) -> None:
        self.values: dict[str, float | str] = {}
        self.decision = CustomReading(None, "no decision scripted")
        self.calls = 0

    def prometheus(self, endpoint: str, query: str, timeout: float) -> Sample:
        self.calls += 1
        v = self.values.get(query, "no value scripted")
        return Sample.fail(v) if isinstance(v, str) else Sample(float(v))

    def custom(self, url: str, timeout: float) -> CustomReading:
        self.calls += 1
        return self.decision


class LLM:
    """The ES harness plus the LLMScaler controller (see the module docstring)."""

    def __init__(self, promql_scope: PromQLScope | None = None, poll_interval: float = 0.0) -> None:
        """``promql_scope`` None: queries unconfined (their fakes read bare names; confinement has its
        own tests in test_promql_scope.py). ``poll_interval`` 0: every sync reads afresh."""
        self.h = Harness()
        self.reader = Reader()
        self.ctl: LLMScalerController = setup_llmscaler(
            self.h.mgr,
            client=self.h.client,
            handlers=default_registry(self.h.client),  # type: ignore[arg-type]
            reader=self.reader,
            bindings=self.h.es.bindings,
            outbound=InlineExecutor(self.h.clock),
            scaler_metrics=self.h.reconciler._d.metrics,
            poll_interval=poll_interval,
            promql_scope=promql_scope,
        )

    def start(self) -> None:
        self.h.start()
        self.ctl.watches.start(self.ctl.controller.queue)

    def stop(self) -> None:
        self.h.stop()

    def reconcile(self, name: str = "chat") -> Result:
        result = Result()
        for _ in range(6):
            for r in ("llmscalers", "elasticscalers", "deployments", "horizontalpodautoscalers", "pods"):
                self.h.wait_synced(r)
            result = self.ctl.reconciler.reconcile(Request(NS, name))
            if self.h._listing() or result.requeue_after == NOT_SYNCED_RETRY_SECONDS:
                self.h.wait_listed()
                continue
            return result
        return result

    def obj(self, name: str = "chat") -> dict[str, Any]:
        got = self.h.api("llmscalers").get(f"{NS}/{name}")
        assert got is not None
        return got

    def status(self, name: str = "chat") -> dict[str, Any]:
        return dict(self.obj(name).get("status") or {})

    def cond(self, ctype: str, name: str = "chat") -> dict[str, Any] | None:
        return next((c for c in self.status(name).get("conditions") or () if c["type"] == ctype), None)

    def reason(self, ctype: str, name: str = "chat") -> tuple[str, str] | None:
        c = self.cond(ctype, name)
        return None if c is None else (c["status"], c["reason"])

    def edit(self, name: str = "chat", **spec: Any) -> None:
        obj = self.obj(name)
        obj["spec"].update(spec)
        obj["metadata"]["generation"] = int(obj["metadata"].get("generation") or 1) + 1
        self.h.api("llmscalers").update(obj)

    def set_status(self, status: dict[str, Any], name: str = "chat") -> None:
        obj = self.obj(name)
        obj["status"] = status
        self.h.api("llmscalers").update(obj)


def llmscaler(
    name: str = "chat",
    *,
    provider: str = "Prometheus",
    min_replicas: int = 1,
    max_replicas: int = 20,
    metrics: list[dict[str, Any]] | None = None,
    scale_down: dict[str, Any] | None = None,
    target: dict[str, str] | None = None,
    created: str = "2026-01-01T00:00:00Z",
    defer: int | None = None,
    generation: int = 1,
    custom: bool = True,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "targetRef": target or {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
        "minReplicas": min_replicas,
        "maxReplicas": max_replicas,
        "metricProvider": provider,
        "prometheus": {
            "endpoint": PROM,
            "metrics": metrics
            or [
                {"name": "running", "query": "sum(running)", "targetPerReplica": 8},
                {"name": "waiting", "query": "sum(waiting)", "targetPerReplica": 2.5},
            ],
        },
        "scaleDown": scale_down if scale_down is not None else {"stabilizationWindowSeconds": 0},
    }
    if custom:
        spec["customProvider"] = {"url": SLO}
    if defer is not None:
        spec["deferTimeoutSeconds"] = defer
    return {
        "apiVersion": "llm.escaler.io/v1alpha1",
        "kind": "LLMScaler",
        "metadata": {
            "name": name,
            "namespace": NS,
            "uid": f"uid-{name}",
            "generation": generation,
            "creationTimestamp": created,
        },
        "spec": spec,
    }


@pytest.fixture
def t() -> Iterator[LLM]:
    t = LLM()
    try:
        yield t
    finally:
        t.stop()


def _setup(t: LLM, replicas: int = 2, **kw: Any) -> None:
    t.h.api("deployments").create(deployment("web", replicas))
    t.h.api("llmscalers").create(llmscaler(**kw))
    t.start()


def _mirrors(t: LLM) -> None:
    """DecisionAvailable is ScalingActive, field for field (type aside)."""
    active, mirror = t.cond("ScalingActive"), t.cond("DecisionAvailable")
    assert active is not None and mirror is not None
    assert {**active, "type": "DecisionAvailable"} == mirror


# ------------------------------------------------------------------ Prometheus


def test_normal_write_every_condition_and_the_mirror(t: LLM) -> None:
    _setup(t)
    t.reader.values.update({"sum(running)": 40.0, "sum(waiting)": 9.0})  # 40/8 → 5, 9/2.5 → 4
    t.reconcile()
    assert t.h.replicas() == 5
    st = t.status()
    assert st["observedGeneration"] == 1 and st["lastScaleTime"]
    assert (st["currentReplicas"], st["desiredReplicas"]) == (5, 5)
    assert t.reason("ScalingActive") == ("True", "MetricsAvailable")
    assert t.cond("ScalingActive")["message"] == "evaluated 2 of 2 metrics; recommends 5 replicas"  # type: ignore[index]
    assert t.reason("AbleToScale") == ("True", "Synced")
    assert t.reason("ScalingLimited") == ("False", "DesiredWithinRange")
    assert t.reason("Validated") == ("True", "Valid")
    assert t.reason("MetricsPipeline") == ("True", "AllMetricsAvailable")
    _mirrors(t)
    assert all(c["observedGeneration"] == 1 for c in st["conditions"])
    assert [(m["name"], m["value"], m["recommendedReplicas"]) for m in st["currentMetrics"]] == [
        ("running", 40.0, 5),
        ("waiting", 9.0, 4),
    ]
    assert "SuccessfulRescale" in t.h.reasons()
    assert st["recentDecisions"][-1]["from"] == 2 and st["recentDecisions"][-1]["to"] == 5


def test_no_op_writes_nothing_and_keeps_last_scale_time(t: LLM) -> None:
    _setup(t, replicas=5)
    t.reader.values.update({"sum(running)": 40.0, "sum(waiting)": 9.0})
    t.reconcile()
    st = t.status()
    assert t.h.replicas() == 5 and "lastScaleTime" not in st
    assert t.reason("AbleToScale") == ("True", "Synced")
    writes = t.ctl.reconciler.reporter.writer.writes
    t.h.clock.step(30)
    t.reconcile()
    assert t.ctl.reconciler.reporter.writer.writes == writes  # unchanged status: not written
    assert t.h.client.count("update", "deployments") == 0


def test_partial_metrics_evaluated_k_of_m(t: LLM) -> None:
    _setup(t)
    t.reader.values.update(
        {"sum(running)": "Prometheus query failed: connection refused", "sum(waiting)": 9.0}
    )
    t.reconcile()
    assert t.h.replicas() == 4
    assert t.cond("ScalingActive")["message"] == "evaluated 1 of 2 metrics; recommends 4 replicas"  # type: ignore[index]
    assert t.reason("MetricsPipeline") == ("False", "PartialMetrics")


def test_prometheus_unreachable_holds_and_leaves_scaling_limited_untouched(t: LLM) -> None:
    _setup(t, max_replicas=4)
    t.reader.values.update({"sum(running)": 80.0, "sum(waiting)": 0.0})
    t.reconcile()
    assert t.reason("ScalingLimited") == ("True", "TooManyReplicas")
    limited = t.cond("ScalingLimited")
    t.reader.values.update(
        {
            "sum(running)": "Prometheus query failed: connection refused",
            "sum(waiting)": "Prometheus query failed: connection refused",
        }
    )
    t.h.clock.step(60)
    t.reconcile()
    assert t.h.replicas() == 4
    assert t.reason("ScalingActive") == ("False", "DecisionUnavailable")
    msg = t.cond("ScalingActive")["message"]  # type: ignore[index]
    assert msg.startswith(f"Prometheus {PROM}: running: ") and "connection refused" in msg
    assert t.cond("ScalingLimited") == limited  # only updated with a usable signal
    assert t.reason("MetricsPipeline") == ("False", "NoMetrics")
    _mirrors(t)
    assert "FailedComputeMetricsReplicas" in t.h.reasons()


def test_no_signal_still_respects_the_bounds(t: LLM) -> None:
    _setup(t, replicas=1, min_replicas=3)
    t.reconcile()  # nothing scripted: no usable metric
    assert t.reason("ScalingActive") == ("False", "DecisionUnavailable")
    assert t.h.replicas() == 3  # held, apart from min/max


# ------------------------------------------------------------------ Custom


def test_custom_decision_received_and_scale_to_zero(t: LLM) -> None:
    _setup(t, provider="Custom", min_replicas=0)
    t.reader.decision = CustomReading(3)
    t.reconcile()
    assert t.h.replicas() == 3
    assert t.reason("ScalingActive") == ("True", "DecisionReceived")
    assert t.cond("MetricsPipeline") is None  # decision-based: no MetricsPipeline
    _mirrors(t)
    t.reader.decision = CustomReading(0)
    t.h.settle()
    t.h.clock.step(30)
    t.reconcile()
    assert t.h.replicas() == 0


def test_custom_no_decision_message(t: LLM) -> None:
    _setup(t, provider="Custom")
    t.reader.decision = CustomReading(None, "HTTP 503, 19 bytes")
    t.reconcile()
    assert t.reason("ScalingActive") == ("False", "DecisionUnavailable")
    assert t.cond("ScalingActive")["message"] == (  # type: ignore[index]
        f"custom provider returned no decision: {SLO}: HTTP 503, 19 bytes"
    )
    _mirrors(t)
    assert t.h.replicas() == 2


def test_custom_without_custom_provider_is_invalid_spec_and_held(t: LLM) -> None:
    # only an object older than the CEL rule can look like this
    _setup(t, replicas=1, provider="Custom", custom=False, min_replicas=2)
    t.reconcile()
    assert t.reason("ScalingActive") == ("False", "InvalidSpec")
    assert "spec.customProvider" in t.cond("ScalingActive")["message"]  # type: ignore[index]
    assert t.reason("Validated") == ("False", "InvalidSpec")
    _mirrors(t)
    assert t.h.replicas() == 2  # held at the current count, apart from the min/max bounds
    assert t.reader.calls == 0


def test_switching_the_provider_overwrites_the_conditions_at_once(t: LLM) -> None:
    _setup(t, provider="Custom")
    t.reader.decision = CustomReading(3)
    t.reader.values.update({"sum(running)": "connection refused", "sum(waiting)": "connection refused"})
    t.reconcile()
    assert t.reason("ScalingActive") == ("True", "DecisionReceived")
    t.edit(metricProvider="Prometheus")
    t.reconcile()
    assert t.reason("ScalingActive") == ("False", "DecisionUnavailable")
    assert t.cond("ScalingActive")["message"].startswith(f"Prometheus {PROM}")  # type: ignore[index]
    assert t.reason("MetricsPipeline") == ("False", "NoMetrics")
    _mirrors(t)
    t.edit(metricProvider="Custom")
    t.reconcile()
    assert t.reason("ScalingActive") == ("True", "DecisionReceived")
    assert t.cond("MetricsPipeline") is None
    _mirrors(t)
    assert all(c["observedGeneration"] == 3 for c in t.status()["conditions"])


# ------------------------------------------------------------------ pipeline


def test_scale_down_stabilized_then_step_limited(t: LLM) -> None:
    _setup(t, replicas=6, scale_down={"stabilizationWindowSeconds": 300, "maxStepReplicas": 2})
    t.reader.values.update({"sum(running)": 48.0, "sum(waiting)": 0.0})  # 6
    t.reconcile()
    t.reader.values["sum(running)"] = 8.0  # 1
    t.h.clock.step(60)
    t.reconcile()
    assert t.h.replicas() == 6
    assert t.reason("AbleToScale") == ("True", "ScaleDownStabilized")
    t.h.clock.step(300)
    t.reconcile()
    assert t.h.replicas() == 4  # 6 → 1 capped at 2 per sync
    assert t.reason("ScalingLimited") == ("True", "ScaleDownLimit")


def test_scale_up_is_never_capped(t: LLM) -> None:
    _setup(t, replicas=1, max_replicas=30, scale_down={"stabilizationWindowSeconds": 0, "maxStepReplicas": 1})
    t.reader.values.update({"sum(running)": 160.0, "sum(waiting)": 0.0})  # 20
    t.reconcile()
    assert t.h.replicas() == 20
    assert t.reason("ScalingLimited") == ("False", "DesiredWithinRange")


LIMITS = [
    ("too-many", 200.0, 2, {"maxReplicas": 10}, ("True", "TooManyReplicas"), 10),
    ("too-few", 0.0, 4, {"minReplicas": 3}, ("True", "TooFewReplicas"), 3),
    (
        "step-wins-over-min",
        0.0,
        8,
        {"minReplicas": 3, "scaleDown": {"stabilizationWindowSeconds": 0, "maxStepReplicas": 2}},
        ("True", "ScaleDownLimit"),
        6,
    ),
    ("within", 24.0, 2, {}, ("False", "DesiredWithinRange"), 3),
]


@pytest.mark.parametrize(
    ("load", "replicas", "spec", "limited", "written"), [c[1:] for c in LIMITS], ids=[c[0] for c in LIMITS]
)
def test_each_scaling_limited_reason(
    t: LLM, load: float, replicas: int, spec: dict[str, Any], limited: tuple[str, str], written: int
) -> None:
    obj = llmscaler()
    obj["spec"].update(spec)
    t.h.api("deployments").create(deployment("web", replicas))
    t.h.api("llmscalers").create(obj)
    t.start()
    t.reader.values.update({"sum(running)": load, "sum(waiting)": 0.0})
    t.reconcile()
    assert t.reason("ScalingLimited") == limited
    assert t.h.replicas() == written


def test_lowering_max_replicas_takes_effect_at_the_next_sync(t: LLM) -> None:
    _setup(t, replicas=8, scale_down={"stabilizationWindowSeconds": 300})
    t.reader.values.update({"sum(running)": 64.0, "sum(waiting)": 0.0})
    t.reconcile()
    t.edit(maxReplicas=5)
    t.h.clock.step(10)
    t.reconcile()
    assert t.h.replicas() == 5  # clamp is last: the stabilization window does not hold it above max
    assert t.reason("ScalingLimited") == ("True", "TooManyReplicas")


def test_rollout_defers_then_times_out(t: LLM) -> None:
    dep = deployment("web", 2)
    dep["metadata"]["generation"] = 2  # a template rollout the Deployment controller has not observed
    t.h.api("deployments").create(dep)
    t.h.api("llmscalers").create(llmscaler(defer=120))
    t.start()
    t.reader.values.update({"sum(running)": 40.0, "sum(waiting)": 0.0})
    t.reconcile()
    assert t.h.replicas() == 2
    assert t.reason("AbleToScale") == ("True", "RolloutInProgress")
    st = t.status()
    assert st["deferredSince"] and "lastScaleTime" not in st
    assert t.h.reasons().count("ScalingDeferred") == 1
    t.h.clock.step(121)
    t.reconcile()
    assert t.h.replicas() == 5
    assert t.reason("AbleToScale") == ("True", "DeferralTimedOut")
    st = t.status()
    assert "deferredSince" not in st and st["lastScaleTime"]
    assert "DeferralTimedOut" in t.h.reasons()


def _deployment_status(t: LLM, status_replicas: int) -> None:
    """Play the Deployment controller: it observed the spec; ``status_replicas`` pods still exist."""
    obj = t.h.api("deployments").get(f"{NS}/web")
    assert obj is not None
    n = obj["spec"]["replicas"]
    obj["status"] = {
        "observedGeneration": obj["metadata"]["generation"],
        "replicas": status_replicas,
        "readyReplicas": n,
        "updatedReplicas": n,
    }
    t.h.api("deployments").update(obj)


def test_scale_down_stabilized_and_a_settle_guard_winning_over_it(t: LLM) -> None:
    _setup(t, replicas=6, scale_down={"stabilizationWindowSeconds": 300})
    t.reader.values.update({"sum(running)": 48.0, "sum(waiting)": 0.0})  # 6: a no-op
    t.reconcile()
    assert t.reason("AbleToScale") == ("True", "Synced")
    t.reader.values["sum(running)"] = 40.0  # 5, kept at 6 by the window
    t.h.clock.step(200)
    t.reconcile()
    assert t.reason("AbleToScale") == ("True", "ScaleDownStabilized")
    assert t.h.replicas() == 6
    # a previous scale-down has not settled (7 pods for spec 6): the settle guard holds the write
    _deployment_status(t, 7)
    t.reader.values["sum(running)"] = 8.0  # 1; the window (the 5 of 110 s ago) still says 5
    t.h.clock.step(110)
    t.reconcile()
    assert t.h.replicas() == 6
    assert t.reason("AbleToScale") == ("True", "ScaleDownSettling")  # the guard wins over stabilization
    _deployment_status(t, 6)
    t.h.clock.step(1)
    t.reconcile()
    assert t.h.replicas() == 5
    assert t.reason("AbleToScale") == ("True", "ScaleDownStabilized")


# ------------------------------------------------------------------ target errors, generations


def test_target_deleted_during_a_deferral(t: LLM) -> None:
    dep = deployment("web", 2)
    dep["metadata"]["generation"] = 2
    t.h.api("deployments").create(dep)
    t.h.api("llmscalers").create(llmscaler())
    t.start()
    t.reader.values.update({"sum(running)": 40.0, "sum(waiting)": 0.0})
    t.reconcile()
    before = t.status()
    t.h.api("deployments").delete(f"{NS}/web")
    t.edit(minReplicas=1)  # a spec change too: observedGeneration must follow on the error path
    t.reconcile()
    st = t.status()
    assert t.reason("AbleToScale") == ("False", "TargetNotFound")
    assert st["observedGeneration"] == 2
    assert t.cond("AbleToScale")["observedGeneration"] == 2  # type: ignore[index]
    # nothing else moves: counts, deferredSince, ScalingActive
    for k in ("currentReplicas", "desiredReplicas", "deferredSince"):
        assert st.get(k) == before.get(k)
    assert t.cond("ScalingActive") == next(c for c in before["conditions"] if c["type"] == "ScalingActive")
    assert "FailedGetScale" in t.h.reasons()


def test_invalid_api_version_is_able_to_scale_invalid_spec(t: LLM) -> None:
    t.h.api("llmscalers").create(
        llmscaler(target={"apiVersion": "apps/v1/extra", "kind": "Deployment", "name": "web"}, generation=7)
    )
    t.start()
    t.reconcile()
    assert t.reason("AbleToScale") == ("False", "InvalidSpec")
    assert "spec.targetRef.apiVersion" in t.cond("AbleToScale")["message"]  # type: ignore[index]
    st = t.status()
    assert st["observedGeneration"] == 7 and t.cond("ScalingActive") is None


def test_target_write_failed_persists_what_was_computed(t: LLM) -> None:
    _setup(t)
    t.h.client.faults[("patch", "deployments")] = [StatusError(500, "InternalError", "etcd down")]
    t.reader.values.update({"sum(running)": 40.0, "sum(waiting)": 0.0})
    result = t.reconcile()
    assert result.requeue
    assert t.reason("AbleToScale") == ("False", "TargetWriteFailed")
    assert t.reason("ScalingActive") == ("True", "MetricsAvailable")
    _mirrors(t)
    assert "lastScaleTime" not in t.status()
    assert "FailedRescale" in t.h.reasons()


def test_spec_change_moves_observed_generation_on_every_condition(t: LLM) -> None:
    _setup(t)
    t.reader.values.update({"sum(running)": 16.0, "sum(waiting)": 0.0})
    t.reconcile()
    t.edit(maxReplicas=12)
    t.edit(maxReplicas=11)
    t.reconcile()
    st = t.status()
    assert st["observedGeneration"] == 3
    assert {c["observedGeneration"] for c in st["conditions"]} == {3}


def test_a_stale_scaling_deferred_condition_is_removed_on_the_first_write(t: LLM) -> None:
    t.h.api("deployments").create(deployment("web", 2))
    t.h.api("llmscalers").create(llmscaler())
    t.set_status(
        {
            "conditions": [
                {
                    "type": "ScalingDeferred",
                    "status": "True",
                    "reason": "RolloutInProgress",
                    "message": "old",
                    "lastTransitionTime": "2025-01-01T00:00:00Z",
                }
            ]
        }
    )
    t.start()
    t.reader.values.update({"sum(running)": 16.0, "sum(waiting)": 0.0})
    t.reconcile()
    types = [c["type"] for c in t.status()["conditions"]]
    assert "ScalingDeferred" not in types and "AbleToScale" in types


def test_paused_annotation_freezes(t: LLM) -> None:
    obj = llmscaler()
    obj["metadata"]["annotations"] = {"elasticscaler.io/paused": "true"}
    t.h.api("deployments").create(deployment("web", 2))
    t.h.api("llmscalers").create(obj)
    t.start()
    t.reader.values.update({"sum(running)": 80.0, "sum(waiting)": 0.0})
    t.reconcile()
    assert t.h.replicas() == 2
    assert t.reason("AbleToScale") == ("True", "Paused")


def test_advisory_never_writes(t: LLM) -> None:
    obj = llmscaler()
    obj["spec"]["mode"] = "Advisory"
    t.h.api("deployments").create(deployment("web", 2))
    t.h.api("llmscalers").create(obj)
    t.start()
    t.reader.values.update({"sum(running)": 40.0, "sum(waiting)": 0.0})
    t.reconcile()
    assert t.h.replicas() == 2
    assert t.status()["desiredReplicas"] == 5


# ------------------------------------------------------------------ conflicts across kinds


def test_an_older_elasticscaler_wins_the_target(t: LLM) -> None:
    t.h.api("deployments").create(deployment("web", 2))
    t.h.api("elasticscalers").create(
        scaler("es", metrics_trigger(external_metric("queue", "10")), created="2025-01-01T00:00:00Z")
    )
    t.h.api("llmscalers").create(llmscaler(created="2026-01-01T00:00:00Z"))
    t.start()
    t.reader.values.update({"sum(running)": 80.0, "sum(waiting)": 0.0})
    t.reconcile()
    assert t.reason("Validated") == ("False", "TargetConflict")
    assert "ElasticScaler team/es" in t.cond("Validated")["message"]  # type: ignore[index]
    assert t.h.replicas() == 2 and t.reader.calls == 0
    assert "TargetConflict" in t.h.reasons()
    # and the ElasticScaler sees the younger LLMScaler as the loser: it may write
    es = ElasticScaler.parse(t.h.api("elasticscalers").get(f"{NS}/es"))  # type: ignore[arg-type]
    assert t.h.reconciler.conflict(es, TargetKey(NS, "apps", "Deployment", "web")) is None


def test_an_older_llmscaler_makes_the_elasticscaler_a_conflict(t: LLM) -> None:
    t.h.api("deployments").create(deployment("web", 2))
    t.h.api("llmscalers").create(llmscaler(created="2025-01-01T00:00:00Z"))
    t.h.api("elasticscalers").create(
        scaler("es", metrics_trigger(external_metric("queue", "10")), created="2026-01-01T00:00:00Z")
    )
    t.start()
    t.h.collector.values["queue"] = 80.0
    t.h.reconcile("es")
    assert t.h.condition("es", "Validated")["reason"] == "TargetConflict"  # type: ignore[index]
    assert "LLMScaler team/chat" in t.h.condition("es", "Validated")["message"]  # type: ignore[index]
    t.reader.values.update({"sum(running)": 24.0, "sum(waiting)": 0.0})
    t.reconcile()
    assert t.h.replicas() == 3 and t.reason("Validated") == ("True", "Valid")


def test_deleted_scaler_is_forgotten(t: LLM) -> None:
    _setup(t)
    t.reader.values.update({"sum(running)": 16.0, "sum(waiting)": 0.0})
    t.reconcile()
    t.h.api("llmscalers").delete(f"{NS}/chat")
    assert t.reconcile() == Result()
    assert Request(NS, "chat") not in t.ctl.reconciler._memory


def test_the_poller_enqueues_every_llmscaler() -> None:
    h = Harness()
    try:
        ctl = setup_llmscaler(
            h.mgr,
            client=h.client,
            handlers=default_registry(h.client),  # type: ignore[arg-type]
            reader=Reader(),
            bindings=h.es.bindings,
            outbound=InlineExecutor(h.clock),
            scaler_metrics=h.reconciler._d.metrics,
            poll_interval=30.0,
        )
        assert ctl.poller is not None
    finally:
        h.stop()


def test_explain_renders_an_llmscaler(t: LLM) -> None:
    from escaler.cli import explain

    _setup(t)
    t.reader.values.update({"sum(running)": 40.0, "sum(waiting)": 9.0})
    t.reconcile()
    text = explain.render(t.obj())
    assert "LLMScaler team/chat (generation 1, observed 1)" in text
    assert "provider Prometheus" in text
    assert "- Prometheus running: value 40 vs target 8 (AverageValue) -> recommends 5" in text
    assert "evaluated 2 of 2 metrics; recommends 5 replicas" in text
    assert "Health: ok" in text


def test_an_llmscaler_claim_change_wakes_the_other_kinds_claimants(t: LLM) -> None:
    t.h.api("deployments").create(deployment("web", 2))
    t.h.api("llmscalers").create(llmscaler(created="2025-01-01T00:00:00Z"))
    t.h.api("elasticscalers").create(
        scaler("es", {"type": "SignalTrigger", "signalTrigger": {}}, created="2026-01-01T00:00:00Z")
    )
    t.start()
    t.h.reconcile("es")
    assert t.h.condition("es", "Validated")["reason"] == "TargetConflict"  # type: ignore[index]
    bindings = t.h.es.bindings
    assert set(bindings._wakers) == {"ElasticScaler", "LLMScaler"}  # both setups registered theirs
    woken: list[tuple[str, str]] = []
    bindings.set_waker("ElasticScaler", lambda ns, name: woken.append((ns, name)))
    bindings.set_waker("LLMScaler", lambda ns, name: woken.append(("llm", name)))
    bindings.wake_claimants(TargetKey(NS, "apps", "Deployment", "web"), but="LLMScaler")
    assert woken == [(NS, "es")]  # only the other kind's claimants: the LLMScaler's own are mapped
    # the winner goes: the woken ElasticScaler takes over
    t.h.api("llmscalers").delete(f"{NS}/chat")
    t.h.wait_synced("llmscalers")
    t.h.reconcile("es")
    assert t.h.condition("es", "Validated")["reason"] == "Valid"  # type: ignore[index]


def test_an_unreadable_target_is_target_unreadable(t: LLM) -> None:
    _setup(t)
    t.reader.values.update({"sum(running)": 16.0, "sum(waiting)": 0.0})
    t.h.client.faults[("get", "deployments")] = [StatusError(503, "ServiceUnavailable", "etcd is slow")]
    result = t.reconcile()
    assert t.reason("AbleToScale") == ("False", "TargetUnreadable")
    assert "etcd is slow" in t.cond("AbleToScale")["message"]  # type: ignore[index]
    assert result.requeue_after and result.requeue_after > 0  # transient: retried
    assert t.status()["observedGeneration"] == 1


def test_the_manager_wires_the_llmscaler_controller(monkeypatch: pytest.MonkeyPatch) -> None:
    from es_fakes import Cluster

    from escaler.cli import manager as cli
    from escaler.runtime import Manager
    from escaler.runtime.executor import KeyedExecutor

    seen: dict[str, Any] = {}
    monkeypatch.setattr(cli, "setup_llmscaler", lambda mgr, **kw: seen.update(kw))
    monkeypatch.setattr(cli, "setup_elasticscaler", lambda mgr, **kw: None)
    parser = __import__("argparse").ArgumentParser()
    cli.add_arguments(parser)
    flags = cli.flags_from_args(
        parser.parse_args(
            [
                "--metrics-trigger-poll-interval=7s",
                "--webhook-port=0",
                "--allowed-endpoint-hosts=prom.example",
            ]
        )
    )
    cluster = Cluster()
    cli.register_reconcilers(Manager.for_testing(cluster.lw_factory, cluster.mapper), flags)
    assert seen["poll_interval"] == 7.0
    assert tuple(seen["allowed_hosts"]) == ("prom.example",)
    assert isinstance(seen["outbound"], KeyedExecutor) and seen["outbound"].name == "llmscaler-outbound"
    assert seen["bindings"] is not None and seen["scaler_metrics"] is not None


# ------------------------------------------------------------------ issue 28: deferral on a no-op,
# failed write, invalid pause annotations


def test_a_no_op_during_a_deferral_keeps_the_guard_and_the_timeout(t: LLM) -> None:
    """Issue 28 item 1 (seed 000): a recommendation alternating 6, 4, 6 during a rollout is forced at
    deferTimeoutSeconds after the first deferral, with one ScalingDeferred event; the no-op syncs in
    between keep AbleToScale=True/RolloutInProgress and deferredSince."""
    dep = deployment("web", 4)
    dep["metadata"]["generation"] = 2  # a template rollout the Deployment controller has not observed
    t.h.api("deployments").create(dep)
    t.h.api("llmscalers").create(llmscaler(defer=120))
    t.start()
    t.reader.values.update({"sum(running)": 48.0, "sum(waiting)": 0.0})  # 6
    t.reconcile()
    assert t.reason("AbleToScale") == ("True", "RolloutInProgress")
    since = t.status()["deferredSince"]
    for running, step, at in ((32.0, 40, 40), (48.0, 40, 80), (32.0, 20, 100)):  # 4 (a no-op), 6, 4
        t.h.clock.step(step)
        t.reader.values["sum(running)"] = running
        t.reconcile()
        assert t.h.replicas() == 4, at
        assert t.reason("AbleToScale") == ("True", "RolloutInProgress"), at
        assert t.status()["deferredSince"] == since, at
    t.h.clock.step(20)  # 120 s after the first deferral
    t.reader.values["sum(running)"] = 48.0
    t.reconcile()
    assert t.h.replicas() == 6
    assert t.reason("AbleToScale") == ("True", "DeferralTimedOut")
    assert "deferredSince" not in t.status()
    assert t.h.reasons().count("ScalingDeferred") == 1
    assert t.h.reasons().count("DeferralTimedOut") == 1


def test_a_no_op_ends_the_deferral_once_the_guard_is_gone(t: LLM) -> None:
    dep = deployment("web", 4)
    dep["metadata"]["generation"] = 2
    t.h.api("deployments").create(dep)
    t.h.api("llmscalers").create(llmscaler(defer=120))
    t.start()
    t.reader.values.update({"sum(running)": 48.0, "sum(waiting)": 0.0})  # 6: held
    t.reconcile()
    assert t.status()["deferredSince"]
    _deployment_status(t, 4)  # the rollout completes
    t.reader.values["sum(running)"] = 32.0  # 4: a no-op, nothing holds it any more
    t.h.clock.step(30)
    t.reconcile()
    assert t.reason("AbleToScale") == ("True", "Synced")
    assert "deferredSince" not in t.status()


def _rolling_out(t: LLM, name: str = "web") -> None:
    """Start a template rollout the Deployment controller has not observed yet."""
    obj = t.h.api("deployments").get(f"{NS}/{name}")
    assert obj is not None
    obj["metadata"]["generation"] = int(obj["metadata"].get("generation") or 1) + 1
    t.h.api("deployments").update(obj)


def test_a_failed_write_leaves_the_counts_deferred_since_and_last_scale_time(t: LLM) -> None:
    """Issue 28 item 2 (seed 000): a failed /scale write is reported on AbleToScale; desiredReplicas,
    currentReplicas, deferredSince and lastScaleTime stay as they were."""
    _setup(t, replicas=2, defer=120)
    t.reader.values.update({"sum(running)": 24.0, "sum(waiting)": 0.0})  # 3: a normal write
    t.reconcile()
    assert t.h.replicas() == 3
    _rolling_out(t)
    t.h.clock.step(10)
    t.reader.values["sum(running)"] = 40.0  # 5: held by the rollout
    t.reconcile()
    before = t.status()
    assert before["deferredSince"] and before["lastScaleTime"]
    assert (before["currentReplicas"], before["desiredReplicas"]) == (3, 5)
    t.h.clock.step(121)  # the write is forced, and fails
    t.reader.values["sum(running)"] = 56.0  # 7
    t.h.client.faults[("patch", "deployments")] = [StatusError(500, "InternalError", "etcd down")]
    result = t.reconcile()
    assert result.requeue
    assert t.h.replicas() == 3
    assert t.reason("AbleToScale") == ("False", "TargetWriteFailed")
    st = t.status()
    for k in ("currentReplicas", "desiredReplicas", "deferredSince", "lastScaleTime"):
        assert st.get(k) == before.get(k), k
    assert "FailedRescale" in t.h.reasons()


@pytest.mark.parametrize(
    ("key", "value"),
    [("elasticscaler.io/paused", "yes"), ("elasticscaler.io/paused-replicas", "-1")],
    ids=["paused-not-a-bool", "paused-replicas-negative"],
)
def test_an_invalid_pause_annotation_is_reported_once(t: LLM, key: str, value: str) -> None:
    """Issue 28 item 8: as the ElasticScaler does, an unusable pause annotation is a Warning event
    (InvalidAnnotation) naming the annotation and the rule, once while it lasts; its default is used."""
    obj = llmscaler()
    obj["metadata"]["annotations"] = {key: value}
    t.h.api("deployments").create(deployment("web", 2))
    t.h.api("llmscalers").create(obj)
    t.start()
    t.reader.values.update({"sum(running)": 40.0, "sum(waiting)": 0.0})
    t.reconcile()
    t.reconcile()
    warnings = [e for e in t.h.recorder.events if e.reason == "InvalidAnnotation"]
    assert len(warnings) == 1
    assert f"metadata.annotations[{key}]" in warnings[0].note
    assert t.h.replicas() == 5  # not paused: the default is used
