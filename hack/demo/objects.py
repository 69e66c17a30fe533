"""The demo's Kubernetes objects: four scaling stories in one namespace, built from the shipped
samples (``manifests/samples/``) where they fit.

* ``model-server``: a Deployment scaled by the ElasticScaler ``model-server`` (MetricsTrigger,
  ``apa`` on an ExternalServer query: requests in flight, 8 per replica);
* ``llama``: a Deployment driven by the sample Tidal ``llama-office-hours`` through the sample
  StateTrigger ElasticScaler ``llama-es``; the rules are the shortest schedules cron allows, a rule
  on even minutes (UTC) and one on odd minutes (Asia/Kolkata), so a transition comes every minute;
* ``llama-pd``: the sample ResourceScalingGroup in InplaceScaling mode over two Deployments
  (``llama-prefill`` 2 per group, ``llama-decode`` 1 per group), its groups set through ``/scale``
  by the ElasticScaler ``llama-pd`` on prompt tokens per second;
* ``chat-llama``: a Deployment scaled by the sample LLMScaler ``chat-llama`` (Prometheus provider)
  on tokens per second.

Every builder returns plain dicts for ``kubectl apply``; nothing here talks to a cluster. The
sample files are read as they ship; what the demo changes is said where it changes it (endpoints
to the fake Prometheus, windows shortened so that scale-downs show within minutes).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

SAMPLES = Path(__file__).resolve().parents[2] / "manifests" / "samples"

ES_API = "elasticscaler.io/v1alpha1"
RSG_API = "autoscaling.openfuyao.com/v1alpha1"
LLM_API = "llm.escaler.io/v1alpha1"

# the Prometheus queries the scalers send, answered by the fake Prometheus from the trace


def q_in_flight(ns: str) -> str:
    """The model server's in-flight requests (each query names the demo's namespace: tenant PromQL
    reads only its own namespace's series)."""
    return f'sum(vllm:num_requests_running{{namespace="{ns}",model="model-server"}})'


def q_prompt_tps(ns: str) -> str:
    return f'sum(rate(vllm:prompt_tokens_total{{namespace="{ns}",model="llama-pd"}}[1m]))'


def q_tokens_tps(ns: str) -> str:
    return (f'sum(rate(vllm:prompt_tokens_total{{namespace="{ns}",model="chat-llama"}}[1m])) + '
            f'sum(rate(vllm:generation_tokens_total{{namespace="{ns}",model="chat-llama"}}[1m]))')

IN_FLIGHT_PER_REPLICA = 8
PROMPT_TPS_PER_GROUP = 2500
TOKENS_TPS_PER_REPLICA = 1500


@dataclass(frozen=True)
class Row:
    """One line of the live view: a scaler (or a schedule) and what it scales."""

    kind: str   # resource for kubectl: elasticscaler, tidal, resourcescalinggroup, llmscaler
    short: str  # prefix shown: es, tidal, rsg, llmscaler
    name: str
    target: str  # what it scales, as shown (e.g. deploy/model-server)

    @property
    def label(self) -> str:
        return f"{self.short}/{self.name}"


ROWS = (
    Row("elasticscaler", "es", "model-server", "deploy/model-server"),
    Row("tidal", "tidal", "llama-office-hours", "deploy/llama (via es/llama-es)"),
    Row("elasticscaler", "es", "llama-es", "deploy/llama"),
    Row("elasticscaler", "es", "llama-pd", "rsg/llama-pd"),
    Row("resourcescalinggroup", "rsg", "llama-pd", "deploy/llama-{prefill,decode}"),
    Row("llmscaler", "llmscaler", "chat-llama", "deploy/chat-llama"),
)


def sample(file: str, kind: str, name: str) -> dict[str, Any]:
    """The document ``kind/name`` of ``manifests/samples/<file>``."""
    for doc in yaml.safe_load_all((SAMPLES / file).read_text()):
        if doc and doc.get("kind") == kind and doc["metadata"]["name"] == name:
            return dict(doc)
    raise LookupError(f"manifests/samples/{file} has no {kind} {name}")


def deployment(name: str, replicas: int, ready_after: str | None = None) -> dict[str, Any]:
    """A model-server Deployment; kwok runs its pods (Ready ``ready_after`` after start, as an LLM
    server loading its weights, through hack/cluster.py's kwok stage). The image is the pause
    container, so that the same objects run on a real cluster (kind) without pulling a model server."""
    ann = {"escaler.test/ready-after": ready_after} if ready_after else {}
    return {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}, "annotations": ann},
                              "spec": {"containers": [{"name": "vllm", "image": "registry.k8s.io/pause:3.10",
                                                       "resources": {"requests": {"cpu": "100m"}}}],
                                       "terminationGracePeriodSeconds": 0}}},
    }


def quick(scale_down_window_s: int) -> dict[str, str]:
    """Annotations of a demo-speed MetricsTrigger: a 4 s window of the latest sample, and a short
    scale-down stabilization window (300 s by default)."""
    return {"elasticscaler.io/metrics.windowSeconds": "4",
            "elasticscaler.io/metrics.aggregationType": "Latest",
            "elasticscaler.io/behavior.scaleDown.stabilizationWindowSeconds": str(scale_down_window_s)}


def model_server_scaler(namespace: str, prom_url: str, scale_down_window_s: int) -> dict[str, Any]:
    return {
        "apiVersion": ES_API, "kind": "ElasticScaler",
        "metadata": {"name": "model-server", "annotations": quick(scale_down_window_s)},
        "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "model-server"},
                 "minReplicas": 1, "maxReplicas": 12,
                 "trigger": {"type": "MetricsTrigger", "metricsTrigger": {
                     "scalingAlgorithm": "apa", "metrics": [{"type": "ExternalServer", "externalServer": {
                         "endpoint": prom_url, "query": q_in_flight(namespace), "timeoutSeconds": 2,
                         "target": {"type": "AverageValue",
                                    "averageValue": str(IN_FLIGHT_PER_REPLICA)}}}]}}},
    }


def tidal(namespace: str) -> dict[str, Any]:
    """The sample Tidal with the demo's rules: 4 replicas on even minutes (UTC), 2 on odd minutes
    (Asia/Kolkata, +05:30: the same minute parity), 1 when neither is active."""
    t = copy.deepcopy(sample("tidal.yaml", "Tidal", "llama-office-hours"))
    t["metadata"]["labels"]["elasticscaler.io/namespace"] = namespace
    t["spec"]["defaultReplicas"] = 1
    t["spec"]["rules"] = [
        {"name": "even-minutes", "start": "CRON_TZ=UTC */2 * * * *", "end": "CRON_TZ=UTC 1-59/2 * * * *",
         "replicas": 4},
        {"name": "odd-minutes", "start": "CRON_TZ=Asia/Kolkata 1-59/2 * * * *",
         "end": "CRON_TZ=Asia/Kolkata */2 * * * *", "replicas": 2},
    ]
    return t


def tidal_follower() -> dict[str, Any]:
    """The sample StateTrigger ElasticScaler as shipped: it follows the Tidal at once on the way down
    too (a StateTrigger has no scale-down window by default)."""
    return copy.deepcopy(sample("elasticscaler.yaml", "ElasticScaler", "llama-es"))


def pd_group() -> dict[str, Any]:
    """The sample RSG, InplaceScaling over two Deployments (the sample's decode member is a
    LeaderWorkerSet, whose controller the local control plane does not run)."""
    rsg = copy.deepcopy(sample("resourcescalinggroup.yaml", "ResourceScalingGroup", "llama-pd"))
    rsg["spec"]["strategy"] = "InplaceScaling"
    rsg["spec"]["replicas"] = 1
    rsg["spec"].pop("scaleDown", None)  # GroupReplication only
    for m in rsg["spec"]["members"]:
        m["targetRef"] = {"apiVersion": "apps/v1", "kind": "Deployment", "name": f"llama-{m['name']}"}
    return rsg


def pd_scaler(namespace: str, prom_url: str, scale_down_window_s: int) -> dict[str, Any]:
    return {
        "apiVersion": ES_API, "kind": "ElasticScaler",
        "metadata": {"name": "llama-pd", "annotations": quick(scale_down_window_s)},
        "spec": {"targetRef": {"apiVersion": RSG_API, "kind": "ResourceScalingGroup", "name": "llama-pd"},
                 "minReplicas": 1, "maxReplicas": 6,
                 "trigger": {"type": "MetricsTrigger", "metricsTrigger": {
                     "scalingAlgorithm": "apa", "metrics": [{"type": "ExternalServer", "externalServer": {
                         "endpoint": prom_url, "query": q_prompt_tps(namespace), "timeoutSeconds": 2,
                         "target": {"type": "AverageValue",
                                    "averageValue": str(PROMPT_TPS_PER_GROUP)}}}]}}},
    }


def llm_scaler(namespace: str, prom_url: str, scale_down_window_s: int) -> dict[str, Any]:
    """The sample LLMScaler on the fake Prometheus, sized on tokens per second."""
    s = copy.deepcopy(sample("llmscaler.yaml", "LLMScaler", "chat-llama"))
    s["spec"]["targetRef"]["name"] = "chat-llama"
    s["spec"]["maxReplicas"] = 12
    s["spec"]["prometheus"] = {"endpoint": prom_url, "timeoutSeconds": 2, "metrics": [
        {"name": "tokens-per-replica", "query": q_tokens_tps(namespace),
         "targetPerReplica": TOKENS_TPS_PER_REPLICA}]}
    s["spec"]["scaleDown"] = {"stabilizationWindowSeconds": scale_down_window_s, "maxStepReplicas": 2}
    return s


def workloads() -> list[dict[str, Any]]:
    """The five Deployments, and the RSG over two of them (at one group: what they hold)."""
    return [deployment("model-server", 1, ready_after="3s"), deployment("llama", 1),
            deployment("llama-prefill", 2), deployment("llama-decode", 1), deployment("chat-llama", 1),
            pd_group()]


def scalers(namespace: str, prom_url: str, scale_down_window_s: int) -> list[dict[str, Any]]:
    """What decides replicas: three ElasticScalers, the Tidal, the LLMScaler."""
    return [model_server_scaler(namespace, prom_url, scale_down_window_s), tidal(namespace), tidal_follower(),
            pd_scaler(namespace, prom_url, scale_down_window_s),
            llm_scaler(namespace, prom_url, scale_down_window_s)]
