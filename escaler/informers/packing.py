"""Packed caches: which kinds' informer caches keep each object deflated, and against what.

An informer's cache holds every object of its kind for as long as it exists. For the kinds of which
a manager holds one per scaler — a fleet of thousands of small documents of one shape — the frozen
form (``escaler.informers.frozen``: a dict per JSON object, interned strings) costs ~3.3 KB per
ElasticScaler even with its shared parts (``escaler.informers.transform``), where its JSON deflated
against a typical ElasticScaler's text (``escaler.packed``) takes ~200 bytes (issue 30: memory per
scaler at 10,000 scalers; ``python bench/run.py bench_cache_object``). The price is a decode per read
(~40 microseconds), paid once per poll thanks to the store's small cache of recent reads
(``escaler.informers.store``), so only the kinds whose objects are read about once per poll are
packed.

Contract:

* ``packer_for(group, resource)`` → the ``JsonPacker`` of a packed kind, None for every other kind
  (kept frozen as before). Packed: ElasticScalers (``elasticscaler.io/elasticscalers``), against
  ``ELASTICSCALER_ZDICT``. The informers' factory and the dynamic informers ask it for every informer
  they create, as they ask ``transform_for`` (one place for all of them).
* A packed cache is invisible to its readers: what ``get``/``list``/``by_index`` return is frozen and
  equal to what a frozen cache would return (``Indexer``'s contract); only ``is`` between two reads
  of one object changes (each read of a packed object is a fresh copy, read-only all the same).
* The dictionary is fixed for the process (what it packed unpacks only with it); an object unlike it
  only packs less.
"""

from __future__ import annotations

import json

from escaler.packed import JsonPacker

__all__ = ["ELASTICSCALER_ZDICT", "PACKED_KINDS", "packer_for"]

_TIME = "2026-01-01T00:00:00Z"

# the text of a typical cached ElasticScaler (a MetricsTrigger scaler with its status), the parts
# every object repeats last (deflate reaches the end of the dictionary most cheaply)
ELASTICSCALER_ZDICT = json.dumps({
    "apiVersion": "elasticscaler.io/v1alpha1", "kind": "ElasticScaler",
    "metadata": {"name": "web", "namespace": "default", "uid": "00000000-0000-0000-0000-000000000000",
                 "resourceVersion": "1000", "generation": 1, "creationTimestamp": _TIME,
                 "labels": {"app": "web"},
                 "annotations": {"elasticscaler.io/tolerance": "0.1"}},
    "spec": {
        "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
        "minReplicas": 1, "maxReplicas": 10, "pollIntervalSeconds": 30,
        "scaleDown": {"stabilizationWindowSeconds": 300},
        "trigger": {"type": "MetricsTrigger", "metricsTrigger": {"scalingAlgorithm": "apa", "metrics": [
            {"type": "Resource", "resource": {"name": "cpu",
                                              "target": {"type": "Utilization", "averageUtilization": 60}}},
            {"type": "ExternalServer", "externalServer": {
                "endpoint": "http://prometheus.monitoring:9090",
                "query": 'sum(rate(http_requests_total{namespace="default",service="web"}[1m]))',
                "target": {"type": "AverageValue", "averageValue": "10"}}}]}}},
    "status": {
        "observedGeneration": 1, "currentReplicas": 2, "desiredReplicas": 2,
        "currentMetrics": [{"name": "cpu", "type": "Resource", "value": 20.0, "target": 10.0,
                            "targetType": "Utilization", "recommendedReplicas": 2},
                           {"name": 'sum(rate(http_requests_total{namespace="default",service="web"}[1m]))',
                            "type": "ExternalServer", "value": 20.0, "target": 10.0,
                            "targetType": "AverageValue", "recommendedReplicas": 2}],
        "recentDecisions": [{"time": _TIME, "from": 2, "to": 4, "boundBy": "maxReplicas",
                             "reason": "evaluated 1 of 1 metrics; recommends 4 replicas"}],
        "conditions": [
            {"type": "ScalingActive", "status": "True", "observedGeneration": 1,
             "lastTransitionTime": _TIME, "reason": "MetricsAvailable",
             "message": "evaluated 1 of 1 metrics; recommends 2 replicas"},
            {"type": "AbleToScale", "status": "True", "observedGeneration": 1,
             "lastTransitionTime": _TIME, "reason": "Synced",
             "message": "the target is at the desired count (2)"},
            {"type": "ScalingLimited", "status": "False", "observedGeneration": 1,
             "lastTransitionTime": _TIME, "reason": "DesiredWithinRange",
             "message": "the desired count is within the acceptable range [1, 10]"},
            {"type": "Validated", "status": "True", "observedGeneration": 1,
             "lastTransitionTime": _TIME, "reason": "Valid", "message": "the spec is valid"},
            {"type": "MetricsPipeline", "status": "True", "observedGeneration": 1,
             "lastTransitionTime": _TIME, "reason": "AllMetricsAvailable",
             "message": "all 1 metrics available"}],
        "resolvedTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
        "lastScaleTime": _TIME},
}, separators=(",", ":")).encode()

# (group, resource) → the packer of its cache
PACKED_KINDS: dict[tuple[str, str], JsonPacker] = {
    ("elasticscaler.io", "elasticscalers"): JsonPacker(ELASTICSCALER_ZDICT),
}


def packer_for(group: str, resource: str) -> JsonPacker | None:
    """The packer of the kind's cache; None: the kind is cached frozen (see the module docstring)."""
    return PACKED_KINDS.get((group, resource))
