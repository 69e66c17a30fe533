"""Valid objects of every kind, and a tiny path setter, for the webhook tests."""

from __future__ import annotations

import copy
import json
import re
from typing import Any

DELETE = object()

ELASTICSCALER: dict[str, Any] = {
    "apiVersion": "elasticscaler.io/v1alpha1",
    "kind": "ElasticScaler",
    "metadata": {
        "name": "llama-decode",
        "namespace": "default",
        "annotations": {
            "elasticscaler.io/metrics.windowSeconds": "60",
            "elasticscaler.io/metrics.gcFactor": "2",
            "elasticscaler.io/metrics.aggregationType": "P90",
            "elasticscaler.io/metrics.missingDataPolicy": "Ignore",
            "elasticscaler.io/metrics.enableOutlierFilter": "false",
            "elasticscaler.io/metrics.outlierThreshold": "3.0",
            "elasticscaler.io/behavior.scaleUp.stabilizationWindowSeconds": "0",
            "elasticscaler.io/behavior.scaleDown.stabilizationWindowSeconds": "300",
            "elasticscaler.io/behavior.scaleUp.maxPodsPerStep": "4",
            "elasticscaler.io/behavior.scaleDown.maxPodsPerStep": "1",
            "elasticscaler.io/paused": "false",
            "kubectl.kubernetes.io/last-applied-configuration": "{}",
        },
    },
    "spec": {
        "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "llama-decode"},
        "minReplicas": 1,
        "maxReplicas": 10,
        "deferTimeoutSeconds": 600,
        "trigger": {
            "type": "MetricsTrigger",
            "metricsTrigger": {
                "scalingAlgorithm": "apa",
                "algorithmConfig": {"tolerance": "0.1", "scaleUpRate": "2.0", "scaleDownRate": "2.0"},
                "metrics": [
                    {
                        "type": "Resource",
                        "resource": {
                            "name": "cpu",
                            "target": {"type": "Utilization", "averageUtilization": 70},
                        },
                    },
                    {
                        "type": "Custom",
                        "custom": {
                            "metric": {"name": "vllm_num_requests_waiting"},
                            "target": {"type": "AverageValue", "averageValue": "4"},
                        },
                    },
                    {
                        "type": "External",
                        "external": {
                            "metric": {"name": "queue_depth", "selector": {"matchLabels": {"q": "llama"}}},
                            "target": {"type": "Value", "value": "100"},
                        },
                    },
                    {
                        "type": "ExternalServer",
                        "externalServer": {
                            "endpoint": "http://prometheus.monitoring:9090",
                            "query": 'sum(vllm:num_requests_running{namespace="default", model="llama"})',
                            "target": {"type": "AverageValue", "averageValue": "8"},
                            "timeoutSeconds": 5,
                        },
                    },
                ],
            },
        },
    },
}

SIGNAL_SCALER: dict[str, Any] = {
    "apiVersion": "elasticscaler.io/v1alpha1",
    "kind": "ElasticScaler",
    "metadata": {"name": "llama-idle", "namespace": "default"},
    "spec": {
        "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "llama"},
        "minReplicas": 0,
        "maxReplicas": 4,
        "trigger": {
            "type": "SignalTrigger",
            "signalTrigger": {
                "endpoint": "http://gateway.llm:8080/activity/llama",
                "pollIntervalSeconds": 10,
                "idleTimeoutSeconds": 600,
                "activationReplicas": 1,
            },
        },
    },
}

TIDAL: dict[str, Any] = {
    "apiVersion": "tidal.io/v1alpha1",
    "kind": "Tidal",
    "metadata": {
        "name": "llama-office-hours",
        "namespace": "default",
        "labels": {"elasticscaler.io/name": "llama-es", "elasticscaler.io/namespace": "default"},
    },
    "spec": {
        "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "llama"},
        "defaultReplicas": 2,
        "rules": [
            {
                "name": "weekday-peak",
                "start": "CRON_TZ=Asia/Shanghai 0 9 * * 1-5",
                "end": "CRON_TZ=Asia/Shanghai 0 19 * * 1-5",
                "replicas": 8,
            },
            {
                "name": "night-batch",
                "start": "CRON_TZ=UTC 0 1 * * *",
                "end": "CRON_TZ=UTC 30 4 * * *",
                "replicas": 3,
            },
        ],
    },
}

RSG: dict[str, Any] = {
    "apiVersion": "autoscaling.openfuyao.com/v1alpha1",
    "kind": "ResourceScalingGroup",
    "metadata": {"name": "llama-pd", "namespace": "default"},
    "spec": {
        "strategy": "GroupReplication",
        "replicas": 2,
        "members": [
            {
                "name": "prefill",
                "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "llama-prefill"},
                "replicasPerGroup": 2,
            },
            {
                "name": "decode",
                "targetRef": {
                    "apiVersion": "leaderworkerset.x-k8s.io/v1",
                    "kind": "LeaderWorkerSet",
                    "name": "llama-decode",
                },
                "replicasPerGroup": 1,
            },
        ],
        "scaleDown": {
            "prometheus": {
                "endpoint": "http://prometheus:9090",
                "query": 'sum by (group) (vllm:num_requests_running{namespace="default", rsg="llama"})',
            }
        },
    },
}

LLMSCALER: dict[str, Any] = {
    "apiVersion": "llm.escaler.io/v1alpha1",
    "kind": "LLMScaler",
    "metadata": {"name": "llama", "namespace": "default"},
    "spec": {
        "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "llama"},
        "minReplicas": 1,
        "maxReplicas": 16,
        "metricProvider": "Prometheus",
        "prometheus": {
            "endpoint": "http://prometheus:9090",
            "metrics": [
                {
                    "name": "running-per-replica",
                    "query": 'sum(vllm:num_requests_running{namespace="default", model="llama"})',
                    "targetPerReplica": 8,
                }
            ],
        },
        "customProvider": {
            "url": "http://escaler-slo.escaler-system:8080/decisions/chat-llama",
            "timeoutSeconds": 5,
        },
        "scaleDown": {"stabilizationWindowSeconds": 300, "maxStepReplicas": 2},
        "deferTimeoutSeconds": 600,
    },
}

LLMSLO: dict[str, Any] = {
    "apiVersion": "llm.escaler.io/v1alpha1",
    "kind": "LLMSLORequirement",
    "metadata": {"name": "chat-llama", "namespace": "default"},
    "spec": {
        "serviceId": "chat-llama",
        "highPriority": False,
        "deployType": "pd",
        "targetRef": {
            "apiVersion": "autoscaling.openfuyao.com/v1alpha1",
            "kind": "ResourceScalingGroup",
            "name": "llama-pd",
        },
        "concurrencyPerReplica": 16,
        "ttft": {
            "targetMs": 800,
            "percentile": 90,
            "promql": 'histogram_quantile(0.9, sum(rate(x{namespace="default"}[1m])) by (le))',
        },
        "otps": {"target": 20, "promql": 'avg(otps{namespace="default"})'},
        "bounds": {"min": {"type": "pdengine", "value": 0}, "max": {"type": "pdengine", "value": 4}},
    },
}

JOBSLO: dict[str, Any] = {
    "apiVersion": "llm.escaler.io/v1alpha1",
    "kind": "JobSLORequirement",
    "metadata": {"name": "batch-embed", "namespace": "default"},
    "spec": {
        "serviceId": "batch-embed",
        "highPriority": False,
        "queue": {"maxDepth": 200, "promql": 'sum(queue_depth{namespace="default", svc="batch-embed"})'},
        "bounds": {"min": {"type": "concurrency", "value": 0}, "max": {"type": "replica", "value": 4}},
    },
}

# scalingAlgorithm HPA (docs/guide/elasticscaler.md#the-triggers): metrics from the spec, behavior from
# behavior.* annotations only
HPA_SCALER: dict[str, Any] = {
    "apiVersion": "elasticscaler.io/v1alpha1",
    "kind": "ElasticScaler",
    "metadata": {
        "name": "llama-hpa",
        "namespace": "default",
        "annotations": {
            "elasticscaler.io/behavior.scaleDown.stabilizationWindowSeconds": "120",
            "elasticscaler.io/behavior.scaleUp.maxPodsPerStep": "4",
            "elasticscaler.io/paused": "false",
        },
    },
    "spec": {
        "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "llama"},
        "minReplicas": 1,
        "maxReplicas": 8,
        "trigger": {
            "type": "MetricsTrigger",
            "metricsTrigger": {
                "scalingAlgorithm": "HPA",
                "metrics": [
                    {
                        "type": "Resource",
                        "resource": {
                            "name": "cpu",
                            "target": {"type": "Utilization", "averageUtilization": 70},
                        },
                    },
                    {
                        "type": "External",
                        "external": {
                            "metric": {"name": "queue_depth"},
                            "target": {"type": "AverageValue", "averageValue": "10"},
                        },
                    },
                ],
            },
        },
    },
}

SAMPLES: dict[str, dict[str, Any]] = {
    "elasticscaler": ELASTICSCALER,
    "hpa-scaler": HPA_SCALER,
    "signal-scaler": SIGNAL_SCALER,
    "tidal": TIDAL,
    "rsg": RSG,
    "llmscaler": LLMSCALER,
    "llmslo": LLMSLO,
    "jobslo": JOBSLO,
}

_TOKEN = re.compile(r"\.?([^.\[\]]+)|\[([^\]]+)\]")


def _tokens(path: str) -> list[str | int]:
    out: list[str | int] = []
    for m in _TOKEN.finditer(path):
        name, bracket = m.group(1), m.group(2)
        if name is not None:
            out.append(name)
        else:
            out.append(int(bracket) if bracket.isdigit() else bracket)
    return out


def put(obj: dict[str, Any], path: str, value: Any) -> None:
    """Set (or, with ``DELETE``, remove) ``path`` — ``spec.rules[0].start``,
    ``metadata.annotations[elasticscaler.io/paused]`` — creating maps on the way."""
    *parents, last = _tokens(path)
    cur: Any = obj
    for tok in parents:
        if isinstance(tok, str) and tok not in cur:
            cur[tok] = {}
        cur = cur[tok]
    if value is DELETE:
        del cur[last]
    else:
        cur[last] = copy.deepcopy(value)


def sample(name: str, changes: dict[str, Any] | None = None) -> dict[str, Any]:
    obj = copy.deepcopy(SAMPLES[name])
    for path, value in (changes or {}).items():
        put(obj, path, value)
    return obj


def review_body(
    obj: Any,
    *,
    operation: str = "CREATE",
    kind: dict[str, str] | None = None,
    old: Any = None,
    uid: str = "e911857d-c318-11e8-bbad-025000000001",
) -> bytes:
    if kind is None and isinstance(obj, dict):
        group, _, version = str(obj.get("apiVersion", "")).rpartition("/")
        kind = {"group": group, "version": version, "kind": str(obj.get("kind", ""))}
    request: dict[str, Any] = {
        "uid": uid,
        "kind": kind,
        "operation": operation,
        "object": obj,
        "namespace": "default",
        "name": "x",
    }
    if old is not None:
        request["oldObject"] = old
    if operation == "DELETE":
        request["oldObject"], request["object"] = obj, None
    return json.dumps(
        {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    ).encode()
