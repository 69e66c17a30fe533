"""Flow sizing in the SLO decision engine on the real control plane (issue 26): an LLMSLORequirement
with ``spec.flow``, asserted on what a user sees — ``kubectl get llmslo -o yaml`` (``status.decision``:
the flow's count, its steps in words, its figures; ``Ready``), the decisions route
``GET /decisions/v1/namespaces/{namespace}/{serviceId}`` on the manager's API, and an LLMScaler whose
Custom provider reads that route (``customProvider.serviceId``) scaling a kwok Deployment to the
flow's count; the requirement's bounds clamping it; a flow signal that stops answering held as
``SignalsMissing`` naming it; and the CRD's CEL rules of ``spec.flow``, applied by the API server
itself, refusing naming the field.

The manager runs as in ``test_slo_engine`` (``--slo-prometheus-endpoint`` on the fake Prometheus
``hack/fake_metrics.PrometheusServer``, ``--api-insecure``, a 2 s poll); the fake Prometheus answers the
exact PromQL the engine builds from ``spec.flow`` (``escaler.reconcilers.slo.kinds``: the vLLM preset
scoped by the selector, the TTFT objective from ``spec.ttft``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from escaler.reconcilers.slo.kinds import LLM_KIND, Plan

from .conftest import Cluster, PrometheusServer, eventually
from .es_helpers import Manager, apply, cond, deployment, replicas, start_manager
from .test_slo_engine import decided, get_decision, get_slo, http_get, llm_scaler, ready_is, wait_decision

pytestmark = pytest.mark.e2e

API = "llm.escaler.io/v1alpha1"
# one replica: 8000 prompt tokens/s prefilled, 1500 tokens/s decoded
CAPACITY = {"prefillTokensPerSecond": 8000, "decodeTokensPerSecond": 1500}
# 16000 prompt tok/s / 8000 + 3000 generated tok/s / 1500 = 4 replicas at 100 %; / 0.85 → 5. The TTFT
# p90 of 0.5 s less the mean prompt's 0.2 s prefill (16000 / 10 req/s / 8000) is 0.3 s of queueing:
# within the 1 s budget (half of ttft.targetMs), the utilisation target stays
LOAD: dict[str, float | None] = {
    "promptTokensRate": 16000, "generationTokensRate": 3000, "waiting": 0, "requestsRate": 10,
    "ttftP90": 0.5, "ttftMissShare": 0, "ttftMissShareLong": 0, "burstPromptTokensRate": 16000,
    "burstGenerationTokensRate": 3000}
WORK = "work: 16000 prompt tok/s / 8000 + 3000 generated tok/s / 1500 = 4.000 replicas at 100 %"


def flow_slo(name: str, service_id: str, target: str, ns: str, *, maxr: int = 12,
             **flow: Any) -> dict[str, Any]:
    return {"apiVersion": API, "kind": "LLMSLORequirement", "metadata": {"name": name},
            "spec": {"serviceId": service_id,
                     "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": target},
                     # the flow's TTFT objective (2 s); this PromQL is not read while flow is set
                     "ttft": {"targetMs": 2000, "promql": f'unread_ttft{{namespace="{ns}"}}'},
                     "flow": {"engine": "vllm", "selector": f'model_name="llama",namespace="{ns}"',
                              "capacity": CAPACITY, "coldStartSeconds": 30, **flow},
                     "bounds": {"min": {"type": "replica", "value": 1},
                                "max": {"type": "replica", "value": maxr}}}}


def answer(prometheus: PrometheusServer, obj: dict[str, Any], values: dict[str, float | None]) -> None:
    """The fake Prometheus answers each query the engine builds for ``obj`` with ``values[signal]``
    (None: no series)."""
    plan = LLM_KIND.parse(obj)
    assert isinstance(plan, Plan), plan
    for signal, query in plan.queries:
        value = values.get(signal, 0.0)
        if value is None:
            with prometheus._lock:
                prometheus.answers.pop(query, None)
        else:
            prometheus.set(query, value)


@pytest.fixture
def engine(cluster: Cluster, namespace: str, prometheus: PrometheusServer, managers: list[Manager],
           tmp_path: Path) -> Iterator[Manager]:
    mgr = start_manager(cluster, tmp_path, user="slo-flow", namespace=namespace,
                        extra_args=[f"--slo-prometheus-endpoint={prometheus.url}", "--api-insecure"])
    managers.append(mgr)

    def answering() -> bool:
        try:
            return http_get(mgr, "/decisions/warm-up", None)[0] == 410
        except OSError:
            return not mgr.alive()

    eventually(answering, timeout=40, what="the manager's API answering")
    assert mgr.alive(), mgr.output()
    yield mgr


def test_flow_sizes_the_requirement_and_an_llmscaler_applies_it(
        cluster: Cluster, namespace: str, prometheus: PrometheusServer, engine: Manager) -> None:
    ns = namespace
    sid = f"flow-{ns}"
    slo = flow_slo("chat", sid, "llama", ns)
    answer(prometheus, slo, LOAD)
    apply(cluster, ns, deployment("llama", 1))
    apply(cluster, ns, slo)

    # the decision: the flow's count, its steps in words, its figures
    obj = wait_decision(cluster, ns, "chat", decided(5), engine, what="the flow's 5 replicas")
    d = obj["status"]["decision"]
    for step in (WORK, "queueing delay 0.3 s within budget: utilisation target 0.85",
                 "flow need: ceil(4.000 / 0.85 + 0.000) = 5", "need: 5 + 0 headroom = 5",
                 "up at once: 1 -> 5"):
        assert step in d["reason"], d
    assert d["signals"] == {"currentReplicas": 1, "work": 4, "backlog": 0, "planned": 4, "utilization": 0.85,
                            "headroom": 0, "need": 5}, d
    assert cond(obj, "Ready") == ("True", "Sized", "sized from its signals: 5 replicas")
    assert f'unread_ttft{{namespace="{ns}"}}' not in prometheus.queries  # ttft only sets the objective
    code, body = get_decision(engine, sid, ns, cluster)
    assert code == 200 and body["replicas"] == 5 and body["signals"]["need"] == 5 and WORK in body["reason"]

    # an LLMScaler with the Custom provider on the route (by serviceId) scales the Deployment to it
    apply(cluster, ns, llm_scaler("chat", "llama", service_id=sid, maxr=12))
    try:
        eventually(lambda: replicas(cluster, ns, "llama") == 5, timeout=60, what="llama at the flow's 5")
    except AssertionError as e:
        st = cluster.kubectl_json("get", "llmscaler", "chat", "-n", ns).get("status")
        raise AssertionError(f"{e}; llmscaler status {st}; manager log:\n{engine.output(2000)}") from None

    # the requirement's bounds clamp the flow's count (a new range is a new flow config: it starts
    # afresh from the running 5), and the LLMScaler follows it down
    slo["spec"]["bounds"]["max"]["value"] = 3
    apply(cluster, ns, slo)
    obj = wait_decision(cluster, ns, "chat", decided(3), engine, what="clamped to bounds.max 3")
    assert obj["status"]["decision"]["reason"].endswith("clamped to [1, 3]: 3"), obj["status"]["decision"]
    eventually(lambda: replicas(cluster, ns, "llama") == 3, timeout=60, what="llama down to 3")

    # a signal the flow reads stops answering: SignalsMissing naming it, the decision held
    answer(prometheus, slo, {**LOAD, "waiting": None})
    obj = wait_decision(cluster, ns, "chat", ready_is("False", "SignalsMissing"), engine,
                        what="SignalsMissing")
    message = cond(obj, "Ready")[2]
    assert message.startswith("signals missing (waiting: "), message
    assert "holding the last decision (3 replicas)" in message
    code, body = get_decision(engine, sid, ns, cluster)
    assert code == 200 and body["replicas"] == 3 and "signals missing (waiting: " in body["reason"]
    assert replicas(cluster, ns, "llama") == 3
    answer(prometheus, slo, LOAD)
    wait_decision(cluster, ns, "chat", ready_is("True", "Sized"), engine, what="Sized again")
    assert get_slo(cluster, ns, "chat")["status"]["decision"]["replicas"] == 3


@pytest.mark.parametrize(("spec", "words"), [
    ({"deployType": "pd"}, ["spec.flow", "flow is not supported with deployType pd"]),
    ({"inflight": {"promql": "sum(x)"}}, ["spec.inflight", "inflight is not used with flow"]),
    ({"flow": {"ttftSeconds": 2}}, ["spec.flow.ttftSeconds", "flow.ttftSeconds is not used with ttft"]),
    ({"flow": {"engine": "tgi"}},
     ["spec.flow.queries.ttftMissShare", "a TTFT objective (flow.ttftSeconds or ttft) needs "
      "flow.queries.ttftMissShare with engine tgi or generic"]),
    ({"flow": {"selector": 'model_name="x"}) or vector(100'}},
     ["spec.flow.selector", "selector must be a PromQL label-matcher list"]),
], ids=["pd", "inflight", "ttftSeconds-with-ttft", "tgi-without-share", "selector-injection"])
def test_cel_rules_refuse_a_bad_flow_naming_the_field(cluster: Cluster, namespace: str, spec: dict[str, Any],
                                                      words: list[str]) -> None:
    obj = flow_slo("bad", "bad", "llama", namespace)
    for key, value in spec.items():
        if key == "flow":
            obj["spec"]["flow"].update(value)
        else:
            obj["spec"][key] = value
    with pytest.raises(AssertionError) as err:
        apply(cluster, namespace, obj)
    for w in words:
        assert w in str(err.value)
