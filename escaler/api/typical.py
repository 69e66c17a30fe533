"""Typical documents of escaler's kinds, as text: the preset dictionaries (``escaler.packed``) that a
manager packs a fleet's records against.

A fleet's statuses repeat their keys, condition rows and reasons from one scaler to the next and
differ in names, counts and times; deflated against the text of a typical one, each takes ~7x less
than its own text (issue 30, memory per scaler). The status writer packs its memo of what it last
wrote against ``STATUS_ZDICT`` (``escaler.reconcilers.kit.status``); the ElasticScaler informer
cache keeps each cached spec and status deflated against ``ELASTICSCALER_ZDICT``, a typical spec
(``SPEC_TEXT``) followed by the same status (``escaler.informers.transform``). Changing a text only
changes what is packed from then on costs: a packed value never leaves the process that packed it.
The most repeated parts come last (deflate reaches the end of its window most cheaply).

This module is data only: it imports nothing of escaler.
"""

from __future__ import annotations

import json

__all__ = ["ELASTICSCALER_ZDICT", "SPEC_TEXT", "STATUS_ZDICT"]

# the spec of the first sample ElasticScaler (escaler/data/samples/elasticscaler.yaml, the guide's:
# a MetricsTrigger over the four metric source types; tests/unit/test_api_typical.py keeps the two
# equal), as compact JSON: what a fleet's specs repeat (keys, source types, targets, PromQL)
SPEC_TEXT = json.dumps({"apiVersion": "elasticscaler.io/v1alpha1", "kind": "ElasticScaler", "spec": {
    "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "llama-decode"},
    "minReplicas": 1, "maxReplicas": 10, "deferTimeoutSeconds": 600, "mode": "Active",
    "trigger": {"type": "MetricsTrigger", "metricsTrigger": {
        "scalingAlgorithm": "apa",
        "algorithmConfig": {"tolerance": "0.1", "scaleUpRate": "2.0", "scaleDownRate": "2.0"},
        "metrics": [
            {"type": "Resource", "resource": {"name": "cpu", "target": {
                "type": "Utilization", "averageUtilization": 70}}},
            {"type": "Custom", "custom": {"metric": {"name": "vllm_num_requests_waiting"}, "target": {
                "type": "AverageValue", "averageValue": "4"}}},
            {"type": "External", "external": {"metric": {"name": "queue_depth", "selector": {
                "matchLabels": {"q": "llama"}}}, "target": {"type": "Value", "value": "100"}}},
            {"type": "ExternalServer", "externalServer": {
                "endpoint": "http://prometheus.monitoring:9090",
                "query": 'sum(vllm:num_requests_running{namespace="default", model="llama"})',
                "target": {"type": "AverageValue", "averageValue": "8"}, "timeoutSeconds": 5}}]}}},
}, separators=(",", ":")).encode()

STATUS_ZDICT = json.dumps({
    "hpaName": None, "fallback": {"failures": 1, "since": "2026-01-01T00:00:00Z"},
    "deferredSince": "2026-01-01T00:00:00Z",
    "observedGeneration": 1, "currentReplicas": 2, "desiredReplicas": 2,
    "currentMetrics": [{"name": "cpu", "type": "Resource", "value": 20.0, "target": 10.0,
                        "targetType": "Utilization", "recommendedReplicas": 2, "error": "timed out"},
                       {"name": "sum(rate(vllm:num_requests_waiting[1m]))", "type": "ExternalServer",
                        "value": 20.0, "target": 10.0, "targetType": "AverageValue",
                        "recommendedReplicas": 2}],
    "recentDecisions": [{"time": "2026-01-01T00:00:00Z", "from": 2, "to": 4, "boundBy": "Clamp",
                         "reason": "evaluated 1 of 1 metrics; recommends 4 replicas (cpu 20/10 (Value))"}],
    "conditions": [
        {"type": "ScalingActive", "status": "True", "observedGeneration": 1,
         "lastTransitionTime": "2026-01-01T00:00:00Z", "reason": "MetricsAvailable",
         "message": "evaluated 1 of 1 metrics; recommends 2 replicas"},
        {"type": "AbleToScale", "status": "True", "observedGeneration": 1,
         "lastTransitionTime": "2026-01-01T00:00:00Z", "reason": "Synced",
         "message": "the target is at the desired count (2)"},
        {"type": "ScalingLimited", "status": "False", "observedGeneration": 1,
         "lastTransitionTime": "2026-01-01T00:00:00Z", "reason": "DesiredWithinRange",
         "message": "the desired count is within the acceptable range [1, 10]"},
        {"type": "Validated", "status": "True", "observedGeneration": 1,
         "lastTransitionTime": "2026-01-01T00:00:00Z", "reason": "Valid", "message": "the spec is valid"},
        {"type": "MetricsPipeline", "status": "True", "observedGeneration": 1,
         "lastTransitionTime": "2026-01-01T00:00:00Z", "reason": "AllMetricsAvailable",
         "message": "all 1 metrics available"}],
    "resolvedTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
    "lastScaleTime": "2026-01-01T00:00:00Z",
}, separators=(",", ":")).encode()

# what the ElasticScaler cache packs its objects' parts against (escaler.informers.transform): a
# typical spec, then a typical status (the status's text last: packed statuses refer to it most)
ELASTICSCALER_ZDICT = SPEC_TEXT + STATUS_ZDICT
