"""spec.scaleDown.podDeletionCost on the real control plane (issue 16, docs/design.md#beyond-the-seeds): a
Deployment at 4 (kwok pods, the real kube-controller-manager's ReplicaSet controller) scaled by a
MetricsTrigger ElasticScaler on the fake Prometheus (ExternalServer, 2 s poll, no scale-down window). The same
fake Prometheus answers the per-pod query with one sample per pod: two pods are idle (0 running requests),
two busy. When the load drops so the scaler wants 2, the manager reads the per-pod values, gives the
two idle pods the lowest ``controller.kubernetes.io/pod-deletion-cost`` (-2 and -1; the busy pods are
not patched), writes 2 — and the ReplicaSet controller deletes exactly the two idle pods: the busy
pods survive. The Normal event DeletionCostSet names the pods and their costs, and the manager's
patches are in the audit log (two, on the idle pods only).

The idle pods are chosen as the two *oldest* pods by creation time (then name): without the
annotation the ReplicaSet controller prefers to delete the pods Ready for the shortest time, so this
choice is one its own order would not make on its own.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from .conftest import Cluster, PrometheusServer, eventually
from .es_helpers import (
    QUICK,
    AuditLog,
    apply,
    cond,
    deployment,
    es,
    pods,
    replicas,
    scaler,
    start_manager,
    wait_ready,
)

pytestmark = pytest.mark.e2e

USER = "escaler-deletion-cost"
DC = "app=dc"
ANNOTATION = "controller.kubernetes.io/pod-deletion-cost"
ANNOTATIONS = {**QUICK, "elasticscaler.io/behavior.scaleDown.stabilizationWindowSeconds": "0"}


def _trigger(url: str, query: str) -> dict[str, Any]:
    return {"type": "MetricsTrigger", "metricsTrigger": {"scalingAlgorithm": "apa", "metrics": [{
        "type": "ExternalServer",
        "externalServer": {"endpoint": url, "query": query, "timeoutSeconds": 2,
                           "target": {"type": "AverageValue", "averageValue": "10"}}}]}}


def _live(cluster: Cluster, ns: str) -> dict[str, dict[str, Any]]:
    """The Deployment's pods that are not being deleted, by name."""
    return {p["metadata"]["name"]: p for p in pods(cluster, ns, DC)
            if not p["metadata"].get("deletionTimestamp")}


def test_the_idle_pods_get_the_lowest_deletion_cost_and_are_the_ones_removed(
    cluster: Cluster, namespace: str, prometheus: PrometheusServer, managers: list[Any], tmp_path: Path
) -> None:
    explained = cluster.kubectl("explain", "elasticscaler.spec.scaleDown.podDeletionCost")
    assert "pod-deletion-cost" in explained and "DeletionCostSkipped" in explained, explained
    assert "holds the pod name" in cluster.kubectl(
        "explain", "elasticscaler.spec.scaleDown.podDeletionCost.prometheus.podLabel")
    load = f'load{{namespace="{namespace}"}}'
    per_pod = f'sum by (pod) (running{{namespace="{namespace}"}})'
    prometheus.set(load, 40.0)  # on target at 4 replicas
    apply(cluster, namespace, deployment("dc", 4))
    wait_ready(cluster, namespace, "dc", 4)
    by_age = sorted(_live(cluster, namespace).values(),
                    key=lambda p: (p["metadata"]["creationTimestamp"], p["metadata"]["name"]))
    idle = {p["metadata"]["name"] for p in by_age[:2]}
    busy = {p["metadata"]["name"] for p in by_age[2:]}
    values = {**{n: 0.0 for n in idle}, **dict(zip(sorted(busy), (6.0, 9.0), strict=True))}
    prometheus.set(per_pod, [({"pod": n}, v) for n, v in values.items()])

    policy = {"prometheus": {"endpoint": prometheus.url, "query": per_pod, "timeoutSeconds": 2}}
    apply(cluster, namespace, scaler("dc", "dc", _trigger(prometheus.url, load), annotations=ANNOTATIONS,
                                     scaleDown={"podDeletionCost": policy}))
    manager = start_manager(cluster, tmp_path, user=USER, namespace=namespace)
    managers.append(manager)
    active = ("True", "MetricsAvailable")
    eventually(lambda: cond(es(cluster, namespace, "dc"), "ScalingActive")[:2] == active, timeout=60,
               what=f"the scaler's first decision; log:\n{manager.output()}")
    assert replicas(cluster, namespace, "dc") == 4
    assert per_pod not in prometheus.queries  # no scale-down yet: the per-pod query is not sent

    prometheus.set(load, 20.0)  # the scaler now wants 2
    eventually(lambda: replicas(cluster, namespace, "dc") == 2, timeout=60,
               what=f"the scale-down to 2; log:\n{manager.output()}")
    assert per_pod in prometheus.queries
    eventually(lambda: set(_live(cluster, namespace)) == busy and len(pods(cluster, namespace, DC)) == 2,
               timeout=60, what=f"the idle pods {sorted(idle)} deleted and the busy {sorted(busy)} kept")
    for name, p in _live(cluster, namespace).items():
        assert ANNOTATION not in (p["metadata"].get("annotations") or {}), f"busy pod {name} was annotated"

    notes = [e.get("note", "") for e in cluster.kubectl_json(
        "get", "events.events.k8s.io", "-n", namespace, "--field-selector", "regarding.name=dc")["items"]
        if e.get("reason") == "DeletionCostSet"]
    assert len(notes) == 1, notes
    first, second = sorted(idle)
    assert notes[0].startswith(f"before scaling 4 -> 2: lowest cost to {first} (value 0, cost -2), "
                               f"{second} (value 0, cost -1)"), notes[0]
    patched = AuditLog.of(cluster).writes(users=USER, namespace=namespace, resource="pods", subresource=None,
                                          verbs=("patch",))
    assert sorted(ev["objectRef"]["name"] for ev in patched) == sorted(idle)  # the idle pods only
    assert manager.alive(), manager.output()
