"""Bytes per cached object of a fleet, with each kind's informer transform and without its cuts.

``python bench/cache_cuts.py`` (``CUTS_N`` objects per kind, default 1000) builds a fleet of objects
shaped as the API server returns them, passes each through a transform and ``freeze`` (what an
informer's store holds) and walks the cached fleet with one ``seen`` set (``sys.getsizeof``; a
string interned by ``freeze`` or a row shared by a transform counts once), dividing by N. Each
object is decoded from its JSON text first, as the reflector does:

* **ElasticScaler**, bench/bench_capacity.py's shape: a query of its own per scaler, a status as the
  reconciler writes it after a scale-up (three conditions, one metric row, one decision,
  resolvedTargetRef), the times of a fleet created over one minute (whole seconds). Variants:
  ``managedFields stripped`` (``strip_managed_fields``) and ``after`` (``transform_for``: the
  last-applied annotation dropped, spec and status packed; until 2026-12-07 the spec's trigger and
  the status's rows were shared across the fleet instead, 3,221 bytes an object at CUTS_N=3000).
* **Deployment**, as created with ``kubectl apply`` from a typical model-server manifest (one
  container with args, env, resources, probes, a volume; the server's defaults filled in; two
  conditions; kubectl's last-applied annotation): ``before`` (``strip_managed_fields``) and
  ``after`` (``transform_for``: without the last-applied annotation and ``status.conditions``).

In-process and deterministic (no API server): the per-object figures the capacity bench's RSS is made
of, for shapes the fake API server of ``bench/mem_by_owner.py`` does not produce. Not part of
``make bench``; docs/performance.md quotes it.
"""

from __future__ import annotations

import gc
import json
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))

from mem_by_owner import _size  # noqa: E402

from escaler.informers.frozen import freeze  # noqa: E402
from escaler.informers.transform import (  # noqa: E402
    LAST_APPLIED,
    LAST_APPLIED_PATH,
    chain,
    drop_paths,
    strip_managed_fields,
    transform_for,
)

Transform = Callable[[Mapping[str, Any]], Mapping[str, Any]]


def _when(i: int) -> str:
    return f"2026-12-07T04:{i // 60 % 60:02d}:{i % 60:02d}Z"


def _uid(i: int, salt: str) -> str:
    return f"{salt}{i:07d}-1f2e-4c3b-9a8d-{i * 7919 % 10**12:012d}"


def elasticscaler(i: int, n: int, scaled: bool = True) -> dict[str, Any]:
    """``scaled``: after the surge's scale-up from 3 to 6 (ten minutes after a fleet created over one
    minute, the fleet's writes spread over a minute); else the status of its first poll."""
    ns, name = f"bench-{i % 10}", f"s-{i:05d}"
    created = _when(i * 60 // n)  # a fleet created over one minute
    replicas, scaled_at = (6, _when(600 + i * 60 // n)) if scaled else (3, "")
    query = f'sum(rate(http_requests_total{{namespace="{ns}",service="{name}"}}[1m]))'
    ref = {"apiVersion": "bench.example.com/v1", "kind": "Scalable", "name": name}

    def cond(kind: str, status: str, reason: str, message: str) -> dict[str, Any]:
        return {
            "type": kind,
            "status": status,
            "observedGeneration": 1,
            "lastTransitionTime": created,
            "reason": reason,
            "message": message,
        }

    return {
        "apiVersion": "elasticscaler.io/v1alpha1",
        "kind": "ElasticScaler",
        "metadata": {
            "name": name,
            "namespace": ns,
            "uid": _uid(i, "e"),
            "resourceVersion": str(100000 + 3 * i),
            "generation": 1,
            "creationTimestamp": created,
            "managedFields": [
                {
                    "manager": "escaler",
                    "operation": "Update",
                    "apiVersion": "elasticscaler.io/v1alpha1",
                    "time": created,
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:status": {".": {}, "f:conditions": {}}},
                    "subresource": "status",
                }
            ],
        },
        "spec": {
            "targetRef": ref,
            "minReplicas": 1,
            "maxReplicas": 20,
            "trigger": {
                "type": "MetricsTrigger",
                "metricsTrigger": {
                    "scalingAlgorithm": "apa",
                    "metrics": [
                        {
                            "type": "ExternalServer",
                            "externalServer": {
                                "endpoint": "http://127.0.0.1:9090",
                                "query": query,
                                "target": {"type": "AverageValue", "averageValue": "10"},
                            },
                        }
                    ],
                },
            },
        },
        "status": {
            "observedGeneration": 1,
            "currentReplicas": replicas,
            "desiredReplicas": replicas,
            "currentMetrics": [
                {
                    "name": query,
                    "type": "ExternalServer",
                    "value": (59.7 if scaled else 29.8) + i % 7 / 10,
                    "target": 10.0,
                    "targetType": "AverageValue",
                    "recommendedReplicas": replicas,
                }
            ],
            "recentDecisions": [
                {
                    "time": scaled_at,
                    "from": 3,
                    "to": 6,
                    "reason": "the metrics recommend 6 replicas",
                    "boundBy": "Recommendation",
                }
            ]
            if scaled
            else [],
            "conditions": [
                cond(
                    "ScalingActive",
                    "True",
                    "MetricsAvailable",
                    f"evaluated 1 of 1 metrics; recommends {replicas} replicas",
                ),
                cond("AbleToScale", "True", "Synced", f"the target is at the desired count ({replicas})"),
                cond(
                    "ScalingLimited",
                    "False",
                    "DesiredWithinRange",
                    "the desired count is within the acceptable range [1, 20]",
                ),
                cond("Validated", "True", "Valid", "the spec is valid"),
                cond("MetricsPipeline", "True", "AllMetricsAvailable", "all 1 metrics available"),
            ],
            "resolvedTargetRef": dict(ref),
        },
    }


def _with_scale_time(obj: dict[str, Any]) -> dict[str, Any]:
    if obj["status"]["recentDecisions"]:
        obj["status"]["lastScaleTime"] = obj["status"]["recentDecisions"][-1]["time"]
    return obj


def deployment(i: int, n: int) -> dict[str, Any]:
    ns, name = f"team-{i % 10}", f"llama-{i:05d}"
    created = _when(i * 60 // n)
    labels = {"app": name, "app.kubernetes.io/part-of": "inference"}
    container = {
        "name": "vllm",
        "image": "vllm/vllm-openai:v0.6.3",
        "args": [
            "--model",
            "meta-llama/Llama-3.1-8B-Instruct",
            "--tensor-parallel-size",
            "1",
            "--max-model-len",
            "8192",
            "--gpu-memory-utilization",
            "0.9",
            "--port",
            "8000",
        ],
        "env": [{"name": "HF_HOME", "value": "/models"}, {"name": "VLLM_LOGGING_LEVEL", "value": "INFO"}],
        "ports": [{"name": "http", "containerPort": 8000, "protocol": "TCP"}],
        "resources": {
            "limits": {"nvidia.com/gpu": "1", "memory": "32Gi"},
            "requests": {"cpu": "4", "memory": "32Gi", "nvidia.com/gpu": "1"},
        },
        "readinessProbe": {
            "httpGet": {"path": "/health", "port": 8000, "scheme": "HTTP"},
            "periodSeconds": 5,
            "timeoutSeconds": 1,
            "successThreshold": 1,
            "failureThreshold": 3,
        },
        "volumeMounts": [{"name": "models", "mountPath": "/models"}],
    }
    applied = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"annotations": {}, "labels": labels, "name": name, "namespace": ns},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "containers": [container],
                    "volumes": [{"name": "models", "persistentVolumeClaim": {"claimName": "models"}}],
                },
            },
        },
    }
    served_container = {
        **container,
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
        "imagePullPolicy": "IfNotPresent",
    }
    rs = f"{name}-7d9f8c6b5"
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": name,
            "namespace": ns,
            "uid": _uid(i, "d"),
            "resourceVersion": str(200000 + 5 * i),
            "generation": 1,
            "creationTimestamp": created,
            "labels": labels,
            "annotations": {
                "deployment.kubernetes.io/revision": "1",
                LAST_APPLIED: json.dumps(applied, separators=(",", ":")) + "\n",
            },
            "managedFields": [
                {
                    "manager": "kubectl-client-side-apply",
                    "operation": "Update",
                    "time": created,
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:spec": {}},
                }
            ],
        },
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": name}},
            "progressDeadlineSeconds": 600,
            "revisionHistoryLimit": 10,
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"},
            },
            "template": {
                "metadata": {"creationTimestamp": None, "labels": labels},
                "spec": {
                    "containers": [served_container],
                    "dnsPolicy": "ClusterFirst",
                    "restartPolicy": "Always",
                    "schedulerName": "default-scheduler",
                    "securityContext": {},
                    "terminationGracePeriodSeconds": 30,
                    "volumes": [{"name": "models", "persistentVolumeClaim": {"claimName": "models"}}],
                },
            },
        },
        "status": {
            "observedGeneration": 1,
            "replicas": 2,
            "updatedReplicas": 2,
            "readyReplicas": 2,
            "availableReplicas": 2,
            "conditions": [
                {
                    "type": "Available",
                    "status": "True",
                    "lastUpdateTime": created,
                    "lastTransitionTime": created,
                    "reason": "MinimumReplicasAvailable",
                    "message": "Deployment has minimum availability.",
                },
                {
                    "type": "Progressing",
                    "status": "True",
                    "lastUpdateTime": created,
                    "lastTransitionTime": created,
                    "reason": "NewReplicaSetAvailable",
                    "message": f'ReplicaSet "{rs}" has successfully progressed.',
                },
            ],
        },
    }


def per_object(make: Callable[[int, int], dict[str, Any]], transform: Transform, n: int) -> float:
    """Bytes per object of a fleet of ``n`` cached through ``transform`` (module docstring)."""
    # decoded from JSON text, as the reflector does: no string object shared between two fields
    cached = [freeze(transform(json.loads(json.dumps(make(i, n))))) for i in range(n)]
    gc.collect()
    seen: set[int] = set()
    return sum(_size(obj, seen) for obj in cached) / n


def _applied(make: Callable[[int, int], dict[str, Any]]) -> Callable[[int, int], dict[str, Any]]:
    """``make``'s object as ``kubectl apply`` leaves it: its manifest in the last-applied annotation."""

    def made(i: int, n: int) -> dict[str, Any]:
        obj = make(i, n)
        manifest = {k: obj[k] for k in ("apiVersion", "kind", "spec")}
        manifest["metadata"] = {"name": obj["metadata"]["name"], "namespace": obj["metadata"]["namespace"]}
        annotations = obj["metadata"].setdefault("annotations", {})
        annotations[LAST_APPLIED] = json.dumps(manifest, separators=(",", ":")) + "\n"
        return obj

    return made


def _scaled(i: int, n: int) -> dict[str, Any]:
    return _with_scale_time(elasticscaler(i, n))


def main() -> None:
    n = int(os.environ.get("CUTS_N", "1000"))
    es, applied = "ElasticScaler", "ElasticScaler, kubectl-applied"
    dep = "Deployment, kubectl-applied"
    es_cache = transform_for("elasticscaler.io", "elasticscalers")
    no_last_applied = chain(strip_managed_fields, drop_paths(LAST_APPLIED_PATH))
    variants: list[tuple[str, str, Callable[[int, int], dict[str, Any]], Transform]] = [
        (es, "managedFields stripped", _scaled, strip_managed_fields),
        (es, "after: last-applied dropped, spec and status packed", _scaled, es_cache),
        (applied, "before: managedFields stripped", _applied(_scaled), strip_managed_fields),
        (applied, "after", _applied(_scaled), es_cache),
        (dep, "before: managedFields stripped", deployment, strip_managed_fields),
        (dep, "+ last-applied dropped", deployment, no_last_applied),
        (dep, "after: + status.conditions dropped", deployment, transform_for("apps", "deployments")),
    ]
    print(f"| kind ({n} cached) | transform | bytes per object |")
    print("|---|---|---|")
    for kind, what, make, transform in variants:
        size = per_object(make, transform, n)
        print(f"| {kind} | {what} | {size:,.0f} |", flush=True)


if __name__ == "__main__":
    main()
