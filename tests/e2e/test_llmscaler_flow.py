"""LLMScaler ``metricProvider: Flow`` on the real control plane (docs/llmscaler.md,
docs/design.md#the-llm-sizing-policy), asserted on what a user sees: the Deployment at the flow's count, the
status conditions and rows (``kubectl get llms -o yaml``), and ``python -m escaler explain --kind LLMScaler``
naming the flow's steps.

One ``python -m escaler manager`` watching the test's namespace (poll interval 2 s), a fake Prometheus
(``hack/fake_metrics.PrometheusServer``) answering the vLLM preset's queries — the exact PromQL the
manager builds from ``spec.flow`` (``escaler.reconcilers.kit.flowpresets``) — and a kwok
Deployment.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from escaler.api.llmflow import FlowProvider
from escaler.reconcilers.kit.flowpresets import flow_queries

from .conftest import ROOT, Cluster, PrometheusServer, eventually, wait_synced
from .es_helpers import Manager, apply, deployment, replicas, start_manager

pytestmark = pytest.mark.e2e

GROUP = "llm.escaler.io/v1alpha1"
# one replica: 8000 prompt tokens/s prefilled, 1500 tokens/s decoded
CAPACITY = {"prefillTokensPerSecond": 8000, "decodeTokensPerSecond": 1500}


@pytest.fixture
def manager(cluster: Cluster, namespace: str, managers: list[Manager], tmp_path: Path) -> Iterator[Path]:
    """The manager, watching only the test's namespace (poll 2 s); yields its log."""
    mgr = start_manager(cluster, tmp_path, user="llm-flow", namespace=namespace, poll="2s")
    managers.append(mgr)
    wait_synced(mgr.proc, mgr.log)
    yield mgr.log


def flow(endpoint: str, namespace: str) -> dict[str, Any]:
    # the namespace matcher: tenant PromQL reads only its own namespace's series (promqlscope)
    return {"engine": "vllm", "selector": f'model_name="llama-3-8b",namespace="{namespace}"',
            "endpoint": endpoint,
            "timeoutSeconds": 2, "capacity": CAPACITY, "ttftSeconds": 2, "coldStartSeconds": 30}


def scaler(name: str, target: str, endpoint: str, namespace: str) -> dict[str, Any]:
    return {"apiVersion": GROUP, "kind": "LLMScaler", "metadata": {"name": name}, "spec": {
        "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": target},
        "minReplicas": 1, "maxReplicas": 12, "metricProvider": "Flow", "flow": flow(endpoint, namespace),
        "scaleDown": {"stabilizationWindowSeconds": 0}}}


def answer(prometheus: PrometheusServer, namespace: str, values: dict[str, float | None]) -> None:
    """The fake Prometheus answers each preset query of ``flow`` with ``values[signal]`` (None: no series)."""
    for signal, query in flow_queries(FlowProvider.model_validate(flow(prometheus.url, namespace))):
        value = values.get(signal, 0.0)
        if value is None:
            with prometheus._lock:
                prometheus.answers.pop(query, None)
        else:
            prometheus.set(query, value)


def load(prompt: float, generated: float, requests: float) -> dict[str, float | None]:
    """A steady load: no queue, a TTFT p90 of 0.5 s, no request over the objective, no burst above it."""
    return {"promptTokensRate": prompt, "generationTokensRate": generated, "waiting": 0.0,
            "requestsRate": requests, "ttftP90": 0.5, "ttftMissShare": 0.0, "ttftMissShareLong": 0.0,
            "burstPromptTokensRate": prompt, "burstGenerationTokensRate": generated}


def get(cluster: Cluster, ns: str, name: str) -> dict[str, Any]:
    return dict(cluster.kubectl_json("get", "llmscaler", name, "-n", ns))


def conds(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}


def wait_for(cluster: Cluster, ns: str, name: str, what: str, check: Any, log: Path,
             timeout: float = 60) -> dict[str, Any]:
    last: dict[str, Any] = {}

    def probe() -> dict[str, Any] | None:
        nonlocal last
        last = get(cluster, ns, name)
        return last if check(last) else None

    try:
        return dict(eventually(probe, timeout=timeout, what=what))
    except AssertionError as e:
        raise AssertionError(f"{e}\nstatus: {last.get('status')}\nmanager log:\n"
                             f"{log.read_text(errors='replace')[-3000:]}") from None


def explain(cluster: Cluster, ns: str, name: str) -> str:
    out = subprocess.run([sys.executable, "-m", "escaler", "explain", "--kind", "LLMScaler", "-n", ns, name,
                          f"--kubeconfig={cluster.kubeconfig}"], cwd=ROOT, capture_output=True, text=True,
                         timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_flow_sizes_the_deployment_and_explain_names_the_steps(
    cluster: Cluster, namespace: str, prometheus: PrometheusServer, manager: Path
) -> None:
    # 16000 prompt tok/s / 8000 + 3000 generated tok/s / 1500 = 4 replicas at 100 %; / 0.85 → 5. The
    # TTFT p90 of 0.5 s less the mean prompt's 0.2 s prefill (16000 / 10 req/s / 8000) is 0.3 s of
    # queueing: within the 1 s budget (half the objective), the utilisation target stays
    answer(prometheus, namespace, load(16000, 3000, 10))
    apply(cluster, namespace, deployment("llama", 1))
    apply(cluster, namespace, scaler("llama", "llama", prometheus.url, namespace))
    eventually(lambda: replicas(cluster, namespace, "llama") == 5, timeout=60, what="llama at 5")
    obj = wait_for(cluster, namespace, "llama", "AbleToScale=True/Synced at 5",
                   lambda o: (conds(o).get("AbleToScale") or {}).get("reason") == "Synced"
                   and (o.get("status") or {}).get("currentReplicas") == 5, manager)
    cs, st = conds(obj), obj["status"]
    assert (cs["ScalingActive"]["status"], cs["ScalingActive"]["reason"]) == ("True", "MetricsAvailable")
    assert cs["ScalingActive"]["message"] == "evaluated 9 of 9 metrics; recommends 5 replicas"
    assert {**cs["ScalingActive"], "type": "DecisionAvailable"} == cs["DecisionAvailable"]
    assert (cs["MetricsPipeline"]["status"], cs["Validated"]["status"]) == ("True", "True")
    assert (cs["ScalingLimited"]["status"], cs["ScalingLimited"]["reason"]) == ("False", "DesiredWithinRange")
    rows = {m["name"]: m for m in st["currentMetrics"]}
    assert [m["type"] for m in st["currentMetrics"]] == ["Flow"] * 9 + ["FlowDecision"] * 6
    assert (rows["promptTokensRate"]["value"], rows["promptTokensRate"]["target"]) == (16000, 8000)
    assert (rows["work"]["value"], rows["need"]["value"], rows["need"]["recommendedReplicas"]) == (4, 5, 5)
    last = st["recentDecisions"][-1]
    assert (last["from"], last["to"]) == (1, 5)
    work = "work: 16000 prompt tok/s / 8000 + 3000 generated tok/s / 1500 = 4.000 replicas at 100 %"
    assert work in last["reason"]

    text = explain(cluster, namespace, "llama")
    assert "provider Flow" in text
    assert "   - Flow promptTokensRate: value 16000 (vs 8000 per replica)" in text
    block = text[text.index("1b. Flow sizing"):text.index("2. Recommendation")]
    for figure in ("work 4:", "backlog 0:", "planned 4:", "utilization 0.85:", "headroom 0:", "need 5:"):
        assert f"\n   {figure}" in block, block
    for step in (work, "queueing delay 0.3 s within budget: utilisation target 0.85",
                 "flow need: ceil(4.000 / 0.85 + 0.000) = 5", "need: 5 + 0 headroom = 5",
                 "up at once: 1 -> 5"):
        assert step in text, text
    assert "Health: ok" in text

    # the load doubles: up at once to ceil(8 / 0.85) = 10 — or more: the least-squares trend of the
    # few polls so far (4, 4, ..., 8) projects the rise on over the cold start, and a forecast only
    # raises (it is what the decision says, and the Deployment follows the decision)
    answer(prometheus, namespace, load(32000, 6000, 20))
    eventually(lambda: replicas(cluster, namespace, "llama") >= 10, timeout=60, what="llama at 10 or more")
    def decided(o: dict[str, Any]) -> bool:
        st = o.get("status") or {}
        last = (st.get("recentDecisions") or [{}])[-1]
        return bool(last.get("to", 0) >= 10 and st.get("currentReplicas") == last["to"])

    last = wait_for(cluster, namespace, "llama", "the decision written", decided,
                    manager)["status"]["recentDecisions"][-1]
    assert "= 8.000 replicas at 100 %" in last["reason"], last  # work: 32000 / 8000 + 6000 / 1500
    assert last["to"] == 10 or "forecast: trend" in last["reason"], last

    # a signal the flow reads stops answering: DecisionUnavailable naming it, the count held
    answer(prometheus, namespace, {**load(32000, 6000, 20), "waiting": None})
    obj = wait_for(cluster, namespace, "llama", "ScalingActive=False/DecisionUnavailable",
                   lambda o: (conds(o).get("ScalingActive") or {}).get("reason") == "DecisionUnavailable",
                   manager)
    message = conds(obj)["ScalingActive"]["message"]
    assert message.startswith(f"Flow {prometheus.url}: waiting: "), message
    assert "no series" in message
    assert (conds(obj)["MetricsPipeline"]["reason"]) == "PartialMetrics"
    assert replicas(cluster, namespace, "llama") == obj["status"]["currentReplicas"] >= 10
