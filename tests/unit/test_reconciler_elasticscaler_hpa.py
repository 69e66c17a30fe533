"""MetricsTrigger with scalingAlgorithm HPA: the companion HPA built from the scaler, drift revert,
status mirror, refusals."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from es_fakes import (
    NS,
    Harness,
    cpu_metric,
    deployment,
    external_metric,
    external_server_metric,
    harness,
    metrics_trigger,
    scaler,
)

from escaler.api.elasticscaler import ElasticScaler
from escaler.clock import FakeClock
from escaler.reconcilers.elasticscaler.grants import REFUSED_TTL_S, MetricGrants
from escaler.reconcilers.elasticscaler.hpa import desired_hpa, spec_drift
from escaler.scaling.annotations import parse_annotations

CUSTOM = {
    "type": "Custom",
    "custom": {
        "metric": {"name": "waiting", "selector": {"matchLabels": {"m": "x"}}},
        "target": {"type": "AverageValue", "averageValue": "500m"},
    },
}


@pytest.fixture
def h() -> Iterator[Harness]:
    with harness() as hh:
        yield hh


def hpa_scaler(*metrics: dict[str, Any], **kw: Any) -> dict[str, Any]:
    return scaler("es", metrics_trigger(*metrics, algorithm="HPA"), **kw)


def _desired(obj: dict[str, Any]) -> dict[str, Any]:
    model = ElasticScaler.parse(obj)
    ann, _ = parse_annotations(model.metadata.annotations)
    return desired_hpa(model, ann)


def test_desired_spec_translates_metrics_bounds_and_behavior() -> None:
    obj = hpa_scaler(
        cpu_metric(70),
        CUSTOM,
        external_metric("queue", "100"),
        min_replicas=2,
        max_replicas=9,
        annotations={
            "elasticscaler.io/behavior.scaleDown.stabilizationWindowSeconds": "60",
            "elasticscaler.io/behavior.scaleUp.maxPodsPerStep": "3",
        },
    )
    hpa = _desired(obj)
    assert hpa["metadata"]["name"] == "es-hpa" and hpa["metadata"]["namespace"] == NS
    [owner] = hpa["metadata"]["ownerReferences"]
    assert owner == {
        "apiVersion": "elasticscaler.io/v1alpha1",
        "kind": "ElasticScaler",
        "name": "es",
        "uid": "uid-es",
        "controller": True,
        "blockOwnerDeletion": True,
    }
    spec = hpa["spec"]
    assert spec["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}
    assert (spec["minReplicas"], spec["maxReplicas"]) == (2, 9)
    assert spec["metrics"] == [
        {
            "type": "Resource",
            "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 70}},
        },
        {
            "type": "Pods",
            "pods": {
                "metric": {"name": "waiting", "selector": {"matchLabels": {"m": "x"}}},
                "target": {"type": "AverageValue", "averageValue": "500m"},
            },
        },
        {
            "type": "External",
            "external": {"metric": {"name": "queue"}, "target": {"type": "Value", "value": "100"}},
        },
    ]
    assert spec["behavior"]["scaleDown"]["stabilizationWindowSeconds"] == 60
    assert spec["behavior"]["scaleUp"]["policies"] == [{"type": "Pods", "value": 3, "periodSeconds": 15}]
    assert spec["behavior"]["scaleUp"]["stabilizationWindowSeconds"] == 0


@pytest.mark.parametrize(
    ("edit", "drift"),
    [
        (lambda s: None, []),
        (lambda s: s["metrics"][1]["pods"]["target"].update(averageValue="0.5"), []),  # server canonical form
        (lambda s: s.update(maxReplicas=50), ["maxReplicas"]),
        (lambda s: s["metrics"].pop(), ["metrics"]),
        (lambda s: s["behavior"]["scaleDown"].update(stabilizationWindowSeconds=1), ["behavior"]),
        (lambda s: s.update(extra="x"), ["extra"]),
    ],
    ids=["equal", "quantity-normalised", "max-edited", "metric-removed", "behavior-edited", "field-added"],
)
def test_drift_compares_semantically(edit: Any, drift: list[str]) -> None:
    desired = _desired(hpa_scaler(cpu_metric(70), CUSTOM))
    import copy

    actual = copy.deepcopy(desired)
    edit(actual["spec"])
    assert spec_drift(desired, actual) == drift


def test_external_server_refused(h: Harness) -> None:
    h.api("deployments").create(deployment("web"))
    h.api("elasticscalers").create(hpa_scaler(external_server_metric()))
    h.start()
    h.reconcile("es")
    cond = h.condition("es", "Validated")
    assert cond is not None and (cond["status"], cond["reason"]) == ("False", "UnsupportedMetric")
    assert "metrics[0]" in cond["message"]
    assert h.api("horizontalpodautoscalers").objects() == []


def test_companion_created_drift_reverted_and_status_mirrored(h: Harness) -> None:
    h.api("deployments").create(deployment("web"))
    h.api("elasticscalers").create(hpa_scaler(cpu_metric(70)))
    h.start()
    h.reconcile("es")
    hpa = h.api("horizontalpodautoscalers").get(f"{NS}/es-hpa")
    assert hpa is not None and hpa["spec"]["maxReplicas"] == 10
    assert h.status("es")["hpaName"] == "es-hpa"
    assert h.condition("es", "Validated")["reason"] == "Valid"  # type: ignore[index]
    # no drift: no update
    h.reconcile("es")
    assert h.client.count("update", "horizontalpodautoscalers") == 0
    # a hand edit is reverted on the next sync
    hpa["spec"]["maxReplicas"] = 99
    h.api("horizontalpodautoscalers").update(hpa)
    h.reconcile("es")
    assert h.client.count("update", "horizontalpodautoscalers") == 1
    assert h.api("horizontalpodautoscalers").get(f"{NS}/es-hpa")["spec"]["maxReplicas"] == 10  # type: ignore[index]
    # the HPA controller reports: the scaler mirrors it
    hpa = h.api("horizontalpodautoscalers").get(f"{NS}/es-hpa")
    assert hpa is not None
    hpa["status"] = {
        "currentReplicas": 2,
        "desiredReplicas": 3,
        "lastScaleTime": "2026-01-01T00:05:00Z",
        "currentMetrics": [
            {
                "type": "Resource",
                "resource": {"name": "cpu", "current": {"averageUtilization": 95, "averageValue": "950m"}},
            }
        ],
        "conditions": [
            {
                "type": "AbleToScale",
                "status": "True",
                "reason": "SucceededRescale",
                "message": "ok",
                "lastTransitionTime": "2026-01-01T00:05:00Z",
            },
            {
                "type": "ScalingActive",
                "status": "True",
                "reason": "ValidMetricFound",
                "message": "cpu",
                "lastTransitionTime": "2026-01-01T00:05:00Z",
            },
        ],
    }
    h.api("horizontalpodautoscalers").update(hpa)
    h.reconcile("es")
    st = h.status("es")
    assert (st["currentReplicas"], st["desiredReplicas"]) == (2, 3)
    assert st["currentMetrics"][0]["value"] == 95
    conds = {c["type"]: c for c in st["conditions"]}
    assert conds["ScalingActive"]["reason"] == "ValidMetricFound"
    assert conds["AbleToScale"]["reason"] == "SucceededRescale"


def test_leaving_hpa_path_deletes_companion(h: Harness) -> None:
    h.api("deployments").create(deployment("web"))
    h.api("elasticscalers").create(hpa_scaler(cpu_metric(70)))
    h.start()
    h.reconcile("es")
    assert h.api("horizontalpodautoscalers").get(f"{NS}/es-hpa") is not None
    obj = h.api("elasticscalers").get(f"{NS}/es")
    assert obj is not None
    obj["spec"]["trigger"]["metricsTrigger"]["scalingAlgorithm"] = "apa"
    obj["metadata"]["generation"] = 2
    h.api("elasticscalers").update(obj)
    h.collector.values["cpu"] = 70.0
    h.reconcile("es")
    assert h.api("horizontalpodautoscalers").get(f"{NS}/es-hpa") is None


def test_existing_unowned_hpa_with_our_name_is_a_conflict(h: Harness) -> None:
    h.api("deployments").create(deployment("web"))
    h.api("horizontalpodautoscalers").create(
        {
            "apiVersion": "autoscaling/v2",
            "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "es-hpa", "namespace": NS},
            "spec": {
                "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "other"},
                "maxReplicas": 3,
            },
        }
    )
    h.api("elasticscalers").create(hpa_scaler(cpu_metric(70)))
    h.start()
    h.reconcile("es")
    cond = h.condition("es", "Validated")
    assert cond is not None and cond["reason"] == "TargetConflict"
    assert h.api("horizontalpodautoscalers").get(f"{NS}/es-hpa")["spec"]["maxReplicas"] == 3  # type: ignore[index]


def test_paused_replicas_pins_the_hpa(h: Harness) -> None:
    h.api("deployments").create(deployment("web"))
    h.api("elasticscalers").create(
        hpa_scaler(cpu_metric(70), annotations={"elasticscaler.io/paused-replicas": "4"})
    )
    h.start()
    h.reconcile("es")
    spec = h.api("horizontalpodautoscalers").get(f"{NS}/es-hpa")["spec"]  # type: ignore[index]
    assert (spec["minReplicas"], spec["maxReplicas"]) == (4, 4)


def test_a_metric_the_manager_may_not_read_gets_no_companion_and_an_existing_one_goes() -> None:
    """Issue 27 item 10: the companion HPA is read with the kube-controller-manager's rights; the
    scaler may not make it read a metric the manager's own account may not."""
    allowed = {"queue"}
    grants = MetricGrants(lambda read: (read.subresource or read.resource) in allowed, FakeClock())
    with harness(metric_grants=grants) as h:
        h.api("deployments").create(deployment("web"))
        h.api("elasticscalers").create(hpa_scaler(external_metric("queue", "10")))
        h.start()
        h.reconcile("es")
        assert h.api("horizontalpodautoscalers").get(f"{NS}/es-hpa") is not None
        # the metric changed to one the manager may not read: the companion goes, the field is named
        obj = h.api("elasticscalers").get(f"{NS}/es")
        obj["spec"] = hpa_scaler(external_metric("secret", "10"))["spec"]
        h.api("elasticscalers").update(obj)
        h.wait_synced()
        result = h.reconcile("es")
        cond = h.condition("es", "Validated")
        assert cond is not None and (cond["status"], cond["reason"]) == ("False", "MetricNotGranted")
        assert "metrics[0].external.metric.name" in cond["message"] and "'secret'" in cond["message"]
        assert h.api("horizontalpodautoscalers").objects() == []
        assert result.requeue_after == REFUSED_TTL_S  # RBAC changes wake no scaler: look again
