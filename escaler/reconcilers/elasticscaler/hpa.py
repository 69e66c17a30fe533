"""MetricsTrigger with ``scalingAlgorithm: HPA``: the companion autoscaling/v2 HPA
(docs/guide/elasticscaler.md#the-triggers).

``desired_hpa(scaler, annotations)`` builds the whole companion object, ``{name}-hpa`` in the
scaler's namespace, controlled by the scaler (ownerReference ``controller: true``,
``blockOwnerDeletion: true``: the garbage collector deletes it with the scaler):

* ``scaleTargetRef`` = ``spec.targetRef``; ``minReplicas``/``maxReplicas`` from the spec;
* metrics translated: Resource → ``Resource``; Custom (a per-pod metric) → ``Pods``; External →
  ``External``. ``ExternalServer`` has no HPA equivalent: ``UnsupportedMetric`` names the metric;
* ``behavior`` always fully specified from the behavior annotations (stabilization windows,
  ``maxPodsPerStep`` as a ``Pods`` policy per 15 s, else the HPA's default policies), so the API
  server's defaulting adds nothing and drift detection can compare whole specs.

``spec_drift(desired, actual)`` is the drift check: it compares the two ``spec``s after
normalising quantities (the API server canonicalises ``"0.5"`` to ``"500m"``), so a hand edit
of any field is seen and a server-side rewrite of an equal value is not. ``mirror_status``
turns the HPA's status into the scaler's (replicas, lastScaleTime, metrics, conditions).

Pausing: ``paused`` pins the HPA to the current replica count and ``paused-replicas: N`` to N
(``minReplicas = maxReplicas``), since an HPA cannot be stopped otherwise; an HPA's
``minReplicas`` is at least 1, so ``paused-replicas: 0`` pins to 1.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from escaler.api.elasticscaler import ElasticScaler, MetricSourceType, MetricSpec, MetricTarget
from escaler.api.quantity import parse_quantity
from escaler.api.scaler import MetricStatus
from escaler.reconcilers.kit.names import HPA_API_VERSION, HPA_KIND
from escaler.scaling.annotations import ScalerAnnotations

__all__ = [
    "HPA_MIRRORED_CONDITIONS",
    "HPA_POLICY_PERIOD_SECONDS",
    "UnsupportedMetric",
    "desired_hpa",
    "hpa_name",
    "metric_statuses",
    "owned_by",
    "owner_reference",
    "spec_drift",
]

# period of the Pods policies written for maxPodsPerStep (the HPA's own default period)
HPA_POLICY_PERIOD_SECONDS = 15
# the HPA's default policies (k8s.io/kubernetes pkg/apis/autoscaling/v2/defaults.go)
_DEFAULT_SCALE_UP_POLICIES = [
    {"type": "Pods", "value": 4, "periodSeconds": 15},
    {"type": "Percent", "value": 100, "periodSeconds": 15},
]
_DEFAULT_SCALE_DOWN_POLICIES = [{"type": "Percent", "value": 100, "periodSeconds": 15}]
# HPA condition types copied into the scaler's status
HPA_MIRRORED_CONDITIONS = ("AbleToScale", "ScalingActive", "ScalingLimited")
# JSON names of quantity fields in an HPA spec/status
_QUANTITY_KEYS = frozenset({"averageValue", "value"})


class UnsupportedMetric(ValueError):
    """A metric the HPA cannot express; the message names it by its field path."""


def hpa_name(scaler_name: str) -> str:
    return f"{scaler_name}-hpa"


def owner_reference(scaler: ElasticScaler) -> dict[str, Any]:
    return {"apiVersion": ElasticScaler.API_VERSION, "kind": ElasticScaler.KIND, "name": scaler.name,
            "uid": scaler.metadata.uid or "", "controller": True, "blockOwnerDeletion": True}


def owned_by(obj: Mapping[str, Any], uid: str) -> bool:
    """True when ``obj`` has a controller ownerReference with ``uid``."""
    meta = obj.get("metadata")
    refs = meta.get("ownerReferences") if isinstance(meta, Mapping) else None
    return any(isinstance(r, Mapping) and r.get("uid") == uid and r.get("controller") is True
               for r in refs or ())


def _target(t: MetricTarget) -> dict[str, Any]:
    out: dict[str, Any] = {"type": str(t.type)}
    if t.average_utilization is not None:
        out["averageUtilization"] = t.average_utilization
    if t.average_value is not None:
        out["averageValue"] = str(t.average_value)
    if t.value is not None:
        out["value"] = str(t.value)
    return out


def _identifier(name: str, selector: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name}
    if selector is not None:
        out["selector"] = selector.to_object()
    return out


def translate_metric(m: MetricSpec, index: int) -> dict[str, Any]:
    """One ElasticScaler metric as an autoscaling/v2 ``MetricSpec``."""
    if m.type == MetricSourceType.RESOURCE and m.resource is not None:
        return {"type": "Resource",
                "resource": {"name": m.resource.name, "target": _target(m.resource.target)}}
    if m.type == MetricSourceType.CUSTOM and m.custom is not None:
        metric = _identifier(m.custom.metric.name, m.custom.metric.selector)
        return {"type": "Pods", "pods": {"metric": metric, "target": _target(m.custom.target)}}
    if m.type == MetricSourceType.EXTERNAL and m.external is not None:
        return {"type": "External", "external": {
            "metric": _identifier(m.external.metric.name, m.external.metric.selector),
            "target": _target(m.external.target)}}
    raise UnsupportedMetric(
        f"spec.trigger.metricsTrigger.metrics[{index}]: type {m.type} is not supported with "
        "scalingAlgorithm HPA (use Resource, Custom or External, or an escaler algorithm such as apa)")


def _rules(window: int, max_pods: int | None, defaults: list[dict[str, Any]]) -> dict[str, Any]:
    policies = ([{"type": "Pods", "value": max_pods, "periodSeconds": HPA_POLICY_PERIOD_SECONDS}]
                if max_pods is not None else [dict(p) for p in defaults])
    return {"stabilizationWindowSeconds": window, "selectPolicy": "Max", "policies": policies}


def desired_hpa(scaler: ElasticScaler, ann: ScalerAnnotations, *,
                pinned_replicas: int | None = None) -> dict[str, Any]:
    """The companion HPA for ``scaler``; ``UnsupportedMetric`` for an ExternalServer metric.

    ``pinned_replicas`` (pause) sets minReplicas = maxReplicas = max(1, pinned_replicas).
    """
    trigger = scaler.spec.trigger.metrics_trigger
    assert trigger is not None
    metrics = [translate_metric(m, i) for i, m in enumerate(trigger.metrics)]
    lo, hi = max(1, scaler.spec.min_replicas), scaler.spec.max_replicas
    if pinned_replicas is not None:
        lo = hi = max(1, pinned_replicas)
    ref = scaler.spec.target_ref
    return {
        "apiVersion": HPA_API_VERSION,
        "kind": HPA_KIND,
        "metadata": {
            "name": hpa_name(scaler.name),
            "namespace": scaler.namespace,
            "labels": {"elasticscaler.io/name": scaler.name},
            "ownerReferences": [owner_reference(scaler)],
        },
        "spec": {
            "scaleTargetRef": {"apiVersion": ref.api_version, "kind": ref.kind, "name": ref.name},
            "minReplicas": lo,
            "maxReplicas": hi,
            "metrics": metrics,
            "behavior": {
                "scaleUp": _rules(ann.scale_up_stabilization_seconds, ann.scale_up_max_pods_per_step,
                                  _DEFAULT_SCALE_UP_POLICIES),
                "scaleDown": _rules(ann.scale_down_stabilization_seconds, ann.scale_down_max_pods_per_step,
                                    _DEFAULT_SCALE_DOWN_POLICIES),
            },
        },
    }


def _normalise(value: Any, key: str = "") -> Any:
    if isinstance(value, Mapping):
        return {k: _normalise(v, k) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_normalise(v) for v in value]
    if key in _QUANTITY_KEYS and isinstance(value, str | int) and not isinstance(value, bool):
        try:
            return ("quantity", parse_quantity(value))
        except ValueError:
            return value
    return value


def spec_drift(desired: Mapping[str, Any], actual: Mapping[str, Any]) -> list[str]:
    """Top-level ``spec`` fields of ``actual`` that differ from ``desired`` (empty = no drift)."""
    want = _normalise(desired.get("spec") or {})
    have = _normalise(actual.get("spec") or {})
    return sorted(k for k in set(want) | set(have) if want.get(k) != have.get(k))


def metadata_drift(desired: Mapping[str, Any], actual: Mapping[str, Any]) -> bool:
    """True when our labels or ownerReference are missing from ``actual``."""
    meta = actual.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    labels = meta.get("labels") or {}
    want_labels = desired["metadata"]["labels"]
    if any(labels.get(k) != v for k, v in want_labels.items()):
        return True
    want_ref = desired["metadata"]["ownerReferences"][0]
    return not owned_by(actual, want_ref["uid"])


def _float(value: Any) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        out = parse_quantity(value) if isinstance(value, str) else float(value)
    except (TypeError, ValueError):
        return None
    return out if math.isfinite(out) else None


def _current_value(cur: Mapping[str, Any]) -> tuple[float | None, str | None]:
    if cur.get("averageUtilization") is not None:
        return _float(cur.get("averageUtilization")), "Utilization"
    if cur.get("averageValue") is not None:
        return _float(cur.get("averageValue")), "AverageValue"
    if cur.get("value") is not None:
        return _float(cur.get("value")), "Value"
    return None, None


def _target_value(t: MetricTarget) -> float | None:
    raw: Any = t.average_utilization if t.average_utilization is not None else (
        t.average_value if t.average_value is not None else t.value)
    return _float(raw)


def metric_statuses(scaler: ElasticScaler, hpa: Mapping[str, Any] | None) -> list[MetricStatus]:
    """``status.currentMetrics`` mirrored from the HPA's ``status.currentMetrics`` (spec order)."""
    trigger = scaler.spec.trigger.metrics_trigger
    if trigger is None:
        return []
    status = hpa.get("status") if hpa is not None else None
    current = status.get("currentMetrics") if isinstance(status, Mapping) else None
    current = current if isinstance(current, list | tuple) else []
    out: list[MetricStatus] = []
    for m in trigger.metrics:
        name, target, src_key, match_type = "", None, "", ""
        if m.resource is not None:
            name, target, src_key, match_type = m.resource.name, m.resource.target, "resource", "Resource"
        elif m.custom is not None:
            name, target, src_key, match_type = m.custom.metric.name, m.custom.target, "pods", "Pods"
        elif m.external is not None:
            name, target = m.external.metric.name, m.external.target
            src_key, match_type = "external", "External"
        if target is None:
            continue
        value: float | None = None
        for cur in current:
            if not isinstance(cur, Mapping) or cur.get("type") != match_type:
                continue
            body = cur.get(src_key)
            if not isinstance(body, Mapping):
                continue
            cur_name = body.get("name") if src_key == "resource" else (body.get("metric") or {}).get("name")
            if cur_name == name and isinstance(body.get("current"), Mapping):
                value, _ = _current_value(body["current"])
                break
        out.append(MetricStatus(name=name, type=str(m.type), value=value, target=_target_value(target),
                                target_type=str(target.type)))
    return out
