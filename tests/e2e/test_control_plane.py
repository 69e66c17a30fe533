"""The local control plane does what the rest of the suite relies on.

* a Deployment gets Running, Ready pods on kwok's fake nodes (scheduler + controllers + kwok);
* the HPA controller of kube-controller-manager scales a Deployment from an external metric
  served by the fake metrics backend through the real APIService path;
* the resource metrics path (``kubectl top``) and the custom metrics path answer through the
  API server.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client as k8s

from .conftest import Cluster, eventually

pytestmark = pytest.mark.e2e


def deployment(name: str, replicas: int) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}},
                              "spec": {"containers": [{"name": "main", "image": "registry.local/llm:1",
                                                       "resources": {"requests": {"cpu": "500m"}}}]}}},
    }


def test_nodes_are_ready_kwok_nodes(cluster: Cluster) -> None:
    nodes = cluster.kubectl_json("get", "nodes")["items"]
    ready = [n["metadata"]["name"] for n in nodes
             if any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"]["conditions"])]
    assert len(ready) >= 2, f"expected >= 2 Ready nodes, got {ready}"


def test_deployment_gets_ready_pods(cluster: Cluster, namespace: str, api_client: k8s.ApiClient) -> None:
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(deployment("web", 3)))
    apps = k8s.AppsV1Api(api_client)
    eventually(lambda: (apps.read_namespaced_deployment("web", namespace).status.ready_replicas or 0) == 3,
               timeout=60, what="3 ready replicas")
    pods = k8s.CoreV1Api(api_client).list_namespaced_pod(namespace, label_selector="app=web").items
    assert len(pods) == 3
    assert all(p.status.phase == "Running" for p in pods)
    assert all(p.spec.node_name and p.spec.node_name.startswith("kwok-node-") for p in pods)
    out = cluster.kubectl("get", "deployment", "web", "-n", namespace)
    assert "3/3" in out


def test_hpa_scales_from_fake_external_metric(cluster: Cluster, namespace: str, fake_metrics: Any) -> None:
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(deployment("api", 1)))
    fake_metrics.set_external(namespace, "queue_depth", 40)
    hpa = {
        "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": {"name": "api"},
        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "api"},
                 "minReplicas": 1, "maxReplicas": 8,
                 "metrics": [{"type": "External", "external": {
                     "metric": {"name": "queue_depth"},
                     "target": {"type": "AverageValue", "averageValue": "10"}}}]},
    }
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(hpa))

    def replicas() -> int:
        return int(cluster.kubectl_json("get", "deployment", "api", "-n", namespace)["spec"]["replicas"])

    # 40 / 10 per pod → 4 replicas, decided by kube-controller-manager's HPA controller
    eventually(lambda: replicas() == 4, timeout=90, what="HPA to scale api to 4")
    # once at 4 replicas, the HPA's own status shows the per-pod average it read: 40 / 4
    status = eventually(lambda: (s := cluster.kubectl_json("get", "hpa", "api", "-n", namespace)["status"])
                        and s.get("currentMetrics") and s["currentMetrics"][0]["external"]["current"]
                        .get("averageValue") == "10" and s, timeout=30, what="HPA status at 10/pod")
    assert status["desiredReplicas"] == 4
    assert any(r.startswith(f"/apis/external.metrics.k8s.io/v1beta1/namespaces/{namespace}/queue_depth")
               for r in fake_metrics.requests)


def test_resource_and_custom_metrics_through_the_api_server(
        cluster: Cluster, namespace: str, fake_metrics: Any) -> None:
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(deployment("m", 2)))
    eventually(lambda: cluster.kubectl_json("get", "deployment", "m", "-n", namespace)["status"]
               .get("readyReplicas") == 2, timeout=60, what="2 ready pods")
    fake_metrics.set_pod_usage(namespace, "*", cpu=0.35, memory=200 * 2**20)
    fake_metrics.set_custom(namespace, "vllm_num_requests_waiting", 3)
    top = eventually(lambda: cluster.kubectl("top", "pods", "-n", namespace, "-l", "app=m", check=False),
                     timeout=30, what="kubectl top pods")
    assert top.count("350m") == 2, top
    raw = json.loads(cluster.kubectl(
        "get", "--raw",
        f"/apis/custom.metrics.k8s.io/v1beta2/namespaces/{namespace}/pods/*/vllm_num_requests_waiting"
        "?labelSelector=app%3Dm"))
    assert [i["value"] for i in raw["items"]] == ["3", "3"]
