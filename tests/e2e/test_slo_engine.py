"""The SLO decision engine on the real control plane (issue 12, docs/slo.md), asserted on what
``kubectl get llmslo/jobslo -o yaml`` and ``GET /decisions/v1/namespaces/{namespace}/{serviceId}`` show:

* an LLMSLORequirement's ``status.decision`` follows the fake Prometheus: TTFT above target → more
  replicas, recovered → fewer, Prometheus failing → the decision is held and ``Ready=False/
  SignalsMissing`` says so; the manager's decisions route answers the same decision (to a
  ServiceAccount token for the ``escaler`` audience bound to the shipped ``escaler-slo-owner``
  role in the namespace) and 404 for an unknown serviceId;
* ``spec.inflight`` (the load signal) is accepted by the CRD and keeps a loaded service from the
  scale-down its low TTFT alone would make;
* a serviceId defined by an LLMSLORequirement and a JobSLORequirement → 409, and both report
  ``Ready=False/ServiceIdConflict``;
* a JobSLORequirement sizes ``ceil(depth / maxDepth x current)`` from its target's replicas;
* the CEL bound rules (docs/slo.md#bounds-in-replicas), applied by the API server itself, refuse invalid
  bounds naming the field;
* THE END-TO-END LOOP: an LLMSLORequirement + the decision engine + an LLMScaler whose Custom
  provider names the route by ``serviceId`` (read in-process by the manager) scale a Deployment up
  while the fake Prometheus reports TTFT above target, and back down when it recovers.

The manager runs with ``--slo-prometheus-endpoint`` on the fake Prometheus and ``--api-insecure``
(plain HTTP, so the test client needs no CA). Tenants sharing a serviceId across namespaces:
``test_slo_tenants``.
"""

from __future__ import annotations

import http.client
import json
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .conftest import Cluster, eventually
from .es_helpers import Manager, apply, cond, deployment, replicas, start_manager
from .sloapi_helpers import bind_owner, sa_token

pytestmark = pytest.mark.e2e

API = "llm.escaler.io/v1alpha1"


def llm_slo(name: str, service_id: str, target: str, ttft_q: str, otps_q: str, *, maxr: int = 8,
            minr: int = 1) -> dict[str, Any]:
    return {"apiVersion": API, "kind": "LLMSLORequirement", "metadata": {"name": name},
            "spec": {"serviceId": service_id, "deployType": "aggregated",
                     "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": target},
                     "concurrencyPerReplica": 16,
                     "ttft": {"targetMs": 800, "percentile": 90, "promql": ttft_q},
                     "otps": {"target": 20, "promql": otps_q},
                     "bounds": {"min": {"type": "replica", "value": minr},
                                "max": {"type": "replica", "value": maxr}}}}


def job_slo(name: str, service_id: str, depth_q: str, target: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"serviceId": service_id, "queue": {"maxDepth": 200, "promql": depth_q},
                            "bounds": {"min": {"type": "concurrency", "value": 0},
                                       "max": {"type": "replica", "value": 10}}}
    if target is not None:
        spec["targetRef"] = {"apiVersion": "apps/v1", "kind": "Deployment", "name": target}
    return {"apiVersion": API, "kind": "JobSLORequirement", "metadata": {"name": name}, "spec": spec}


def get_slo(cluster: Cluster, ns: str, name: str, kind: str = "llmslo") -> dict[str, Any]:
    return dict(cluster.kubectl_json("get", kind, name, "-n", ns))


def wait_decision(cluster: Cluster, ns: str, name: str, pred: Any, mgr: Manager, *, kind: str = "llmslo",
                  timeout: float = 40, what: str = "decision") -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        obj = get_slo(cluster, ns, name, kind)
        return obj if pred(obj) else None

    try:
        return dict(eventually(check, timeout=timeout, what=f"{kind}/{name}: {what}"))
    except AssertionError as e:
        st = get_slo(cluster, ns, name, kind).get("status")
        raise AssertionError(f"{e} (status {st}); manager log:\n{mgr.output(2000)}") from None


def decided(n: int) -> Any:
    return lambda obj: ((obj.get("status") or {}).get("decision") or {}).get("replicas") == n


def ready_is(status: str, reason: str) -> Any:
    return lambda obj: cond(obj, "Ready")[:2] == (status, reason)


def http_base(mgr: Manager) -> str:
    return mgr.api.replace("https://", "http://")


def decisions_path(ns: str, service_id: str) -> str:
    return f"/decisions/v1/namespaces/{ns}/{service_id}"


def reader_token(cluster: Cluster, ns: str, sa: str = "slo-reader") -> str:
    """A token for the escaler audience of ServiceAccount ``sa``, allowed to get the SLO kinds in ``ns``."""
    bind_owner(cluster, ns, sa)
    return sa_token(cluster, ns, sa)


def http_get(mgr: Manager, path: str, token: str | None) -> tuple[int, Any]:
    u = urllib.parse.urlsplit(http_base(mgr))
    conn = http.client.HTTPConnection(u.hostname or "127.0.0.1", u.port, timeout=5)
    try:
        conn.request("GET", path, headers={"Authorization": f"Bearer {token}"} if token else {})
        resp = conn.getresponse()
        body = resp.read()
        return resp.status, json.loads(body) if body else None
    finally:
        conn.close()


_TOKENS: dict[str, str] = {}


def get_decision(mgr: Manager, service_id: str, ns: str, cluster: Cluster) -> tuple[int, Any]:
    """The namespace's route, read with a token allowed to get the SLO kinds there."""
    if ns not in _TOKENS:
        _TOKENS[ns] = reader_token(cluster, ns)
    return http_get(mgr, decisions_path(ns, service_id), _TOKENS[ns])


@pytest.fixture
def engine(cluster: Cluster, namespace: str, prometheus: Any, managers: list[Manager],
           tmp_path: Path) -> Iterator[Manager]:
    mgr = start_manager(cluster, tmp_path, user="slo-engine", namespace=namespace,
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


def test_decision_follows_prometheus_and_is_served(cluster: Cluster, namespace: str, prometheus: Any,
                                                   engine: Manager) -> None:
    ns = namespace
    ttft, otps = f'ttft_p90_ms{{namespace="{ns}"}}', f'otps{{namespace="{ns}"}}'
    prometheus.set(ttft, 1200.0)
    prometheus.set(otps, 25.0)
    apply(cluster, ns, deployment("llama", 2))
    apply(cluster, ns, llm_slo("chat", f"chat-{ns}", "llama", ttft, otps))
    # TTFT 1.5x the target → ceil(2 x 1.5) = 3 replicas
    obj = wait_decision(cluster, ns, "chat", decided(3), engine, what="3 replicas")
    d = obj["status"]["decision"]
    assert "scale up 2 -> 3" in d["reason"] and d["signals"]["ttftMs"] == 1200.0
    assert cond(obj, "Ready")[:2] == ("True", "Sized")
    assert obj["status"]["observedGeneration"] == obj["metadata"]["generation"]
    code, body = get_decision(engine, f"chat-{ns}", ns, cluster)
    assert code == 200 and body["replicas"] == 3 and body["signals"]["ttftMs"] == 1200.0
    # recovered: every signal has headroom → fewer (ceil(2 x 0.5 / 0.9) = 2)
    prometheus.set(ttft, 300.0)
    prometheus.set(otps, 40.0)
    wait_decision(cluster, ns, "chat", decided(2), engine, what="back to 2")
    assert get_decision(engine, f"chat-{ns}", ns, cluster)[1]["replicas"] == 2
    # Prometheus fails: the decision is held and the condition says why
    prometheus.fail(503)
    obj = wait_decision(cluster, ns, "chat", ready_is("False", "SignalsMissing"), engine,
                        what="SignalsMissing")
    assert obj["status"]["decision"]["replicas"] == 2
    assert "holding the last decision (2 replicas)" in cond(obj, "Ready")[2]
    code, body = get_decision(engine, f"chat-{ns}", ns, cluster)
    assert code == 200 and body["replicas"] == 2 and "signals missing" in body["reason"]
    prometheus.heal()
    wait_decision(cluster, ns, "chat", ready_is("True", "Sized"), engine, what="Sized again")
    code, body = get_decision(engine, "no-such-service", ns, cluster)
    assert code == 404 and body["error"]["code"] == "not_found"


def test_the_inflight_load_signal_holds_a_loaded_service(cluster: Cluster, namespace: str,
                                                         prometheus: Any, engine: Manager) -> None:
    ns = namespace
    ttft, otps = f'ttft{{namespace="{ns}",q="load"}}', f'otps{{namespace="{ns}",q="load"}}'
    load = f'inflight{{namespace="{ns}"}}'
    prometheus.set(ttft, 200.0)  # a quarter of the target: TTFT and OTPS alone would go 4 -> 2
    prometheus.set(otps, 40.0)
    prometheus.set(load, 60.0)   # 60 in flight on 4 x 16: ratio 0.9375, inside the band → hold 4
    apply(cluster, ns, deployment("loaded", 4))
    body = llm_slo("loaded", f"loaded-{ns}", "loaded", ttft, otps)
    body["spec"]["inflight"] = {"promql": load}
    apply(cluster, ns, body)
    # until the 4 pods are ready the load is per ready replica (at least 1): wait for all 4 serving
    per_replica = lambda o: ((o.get("status") or {}).get("decision") or {}).get(  # noqa: E731
        "signals", {}).get("inflightPerReplica")
    obj = wait_decision(cluster, ns, "loaded", lambda o: per_replica(o) == 15.0,
                        engine, what="a decision with the in-flight signal over 4 ready replicas")
    d = obj["status"]["decision"]
    assert d["replicas"] == 4 and d["signals"]["inflightPerReplica"] == 15.0, d
    assert d["signals"]["concurrencyPerReplica"] == 16
    assert "hysteresis band" in d["reason"] and "in-flight requests per serving replica 15" in d["reason"]
    prometheus.set(load, 8.0)  # the load leaves: TTFT/OTPS (0.5) are the worst → ceil(4 x 0.5 / 0.9) = 3
    wait_decision(cluster, ns, "loaded", decided(3), engine, what="3 once the load leaves")


def test_a_service_id_on_two_kinds_is_409(cluster: Cluster, namespace: str, prometheus: Any,
                                          engine: Manager) -> None:
    ns = namespace
    sid = f"shared-{ns}"
    prometheus.set(f'ttft{{namespace="{ns}"}}', 900.0)
    prometheus.set(f'otps{{namespace="{ns}"}}', 25.0)
    prometheus.set(f'depth{{namespace="{ns}"}}', 50.0)
    apply(cluster, ns, deployment("llama", 1))
    apply(cluster, ns, llm_slo("chat", sid, "llama", f'ttft{{namespace="{ns}"}}',
                               f'otps{{namespace="{ns}"}}'))
    apply(cluster, ns, job_slo("batch", sid, f'depth{{namespace="{ns}"}}'))
    for kind, name in (("llmslo", "chat"), ("jobslo", "batch")):
        obj = wait_decision(cluster, ns, name, ready_is("False", "ServiceIdConflict"), engine, kind=kind,
                            what="ServiceIdConflict")
        assert f"serviceId {sid} is defined by more than one SLO requirement CRs" in cond(obj, "Ready")[2]
    code, body = get_decision(engine, sid, ns, cluster)
    assert code == 409 and body["error"]["code"] == "conflict"
    cluster.kubectl("delete", "jobslo", "batch", "-n", ns)
    wait_decision(cluster, ns, "chat", ready_is("True", "Sized"), engine, what="conflict cleared")
    assert get_decision(engine, sid, ns, cluster)[0] == 200


def test_job_requirement_formula(cluster: Cluster, namespace: str, prometheus: Any, engine: Manager) -> None:
    ns = namespace
    depth = f'queue_depth{{namespace="{ns}"}}'
    prometheus.set(depth, 340.0)
    apply(cluster, ns, deployment("worker", 2))
    apply(cluster, ns, job_slo("batch", f"batch-{ns}", depth, target="worker"))
    # ceil(340 / 200 x 2) = 4
    obj = wait_decision(cluster, ns, "batch", decided(4), engine, kind="jobslo", what="4 replicas")
    assert "queue depth 340 / maxDepth 200 x 2 replicas -> 4" in obj["status"]["decision"]["reason"]
    assert get_decision(engine, f"batch-{ns}", ns, cluster)[1]["replicas"] == 4
    prometheus.set(depth, 0.0)
    wait_decision(cluster, ns, "batch", decided(0), engine, kind="jobslo", what="empty queue → 0")


def _bounds(lo: tuple[str, int], hi: tuple[str, int]) -> dict[str, Any]:
    return {"min": {"type": lo[0], "value": lo[1]}, "max": {"type": hi[0], "value": hi[1]}}


@pytest.mark.parametrize(("kind", "spec", "words"), [
    ("LLMSLORequirement", {"deployType": "pd", "bounds": _bounds(("pdengine", 0), ("pdengine", 1))},
     ["spec.bounds.max.value", "bounds.max.value of type pdengine must not be 1"]),
    ("LLMSLORequirement", {"bounds": _bounds(("replica", 5), ("replica", 2))},
     ["spec.bounds.min.value", "bounds.min.value must be less than or equal to bounds.max.value"]),
    ("LLMSLORequirement", {"deployType": "aggregated", "bounds": _bounds(("pdengine", 2), ("pdengine", 4))},
     ["spec.bounds", "bounds of type pdengine require deployType pd"]),
    ("LLMSLORequirement", {"bounds": _bounds(("replica", 1), ("concurrency", 64))},
     ["spec.bounds.max.type", "bounds.min.type and bounds.max.type must be the same"]),
    ("JobSLORequirement", {"bounds": _bounds(("replica", 0), ("concurrency", 64))},
     ["spec.bounds.max.type", "bounds.max.type must be replica"]),
    ("JobSLORequirement", {"bounds": _bounds(("pdengine", 0), ("replica", 4))},
     ["spec.bounds.min.type", "bounds.min.type must be replica or concurrency"]),
    ("LLMSLORequirement", {"bounds": _bounds(("replica", -1), ("replica", 2))},
     ["spec.bounds.min.value", "should be greater than or equal to 0"]),
], ids=["pdengine-max-1", "min-above-max", "pdengine-without-pd", "llm-mixed-types", "job-max-concurrency",
        "job-min-pdengine", "negative"])
def test_cel_rules_refuse_invalid_bounds_naming_the_field(cluster: Cluster, namespace: str, kind: str,
                                                          spec: dict[str, Any], words: list[str]) -> None:
    obj = (llm_slo("bad", "bad", "llama", "q1", "q2") if kind == "LLMSLORequirement"
           else job_slo("bad", "bad", "q"))
    obj["spec"].update(spec)
    with pytest.raises(AssertionError) as err:
        apply(cluster, namespace, obj)
    for w in words:
        assert w in str(err.value)


def llm_scaler(name: str, target: str, *, service_id: str | None = None, url: str | None = None,
               maxr: int = 6) -> dict[str, Any]:
    provider: dict[str, Any] = ({"serviceId": service_id} if service_id is not None
                                else {"url": url, "timeoutSeconds": 5})
    return {"apiVersion": API, "kind": "LLMScaler", "metadata": {"name": name},
            "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": target},
                     "minReplicas": 1, "maxReplicas": maxr, "metricProvider": "Custom",
                     "customProvider": provider,
                     "scaleDown": {"stabilizationWindowSeconds": 0}}}


def test_end_to_end_loop_llmscaler_follows_the_decision_engine(cluster: Cluster, namespace: str,
                                                               prometheus: Any, engine: Manager) -> None:
    """Acceptance: TTFT above target → the engine decides more → the LLMScaler (Custom provider by
    serviceId, read in-process) scales the Deployment up; TTFT recovered → back down to the minimum."""
    ns = namespace
    sid = f"loop-{ns}"
    ttft, otps = f'loop_ttft{{namespace="{ns}"}}', f'loop_otps{{namespace="{ns}"}}'
    prometheus.set(ttft, 1600.0)  # twice the target
    prometheus.set(otps, 25.0)
    apply(cluster, ns, deployment("llama", 1))
    apply(cluster, ns, llm_slo("loop", sid, "llama", ttft, otps, maxr=6))
    apply(cluster, ns, llm_scaler("loop", "llama", service_id=sid))

    def scaled_up() -> bool:
        return replicas(cluster, ns, "llama") >= 2

    try:
        eventually(scaled_up, timeout=60, what="the LLMScaler scaling llama up on the engine's decision")
    except AssertionError as e:
        st = cluster.kubectl_json("get", "llmscaler", "loop", "-n", ns).get("status")
        raise AssertionError(f"{e}; llmscaler status {st}; manager log:\n{engine.output(2000)}") from None
    # the engine keeps deciding from the new count while TTFT stays high: up to the bound
    eventually(lambda: replicas(cluster, ns, "llama") == 6, timeout=60, what="llama at the max bound 6")
    # recovered: the decision goes down, and the LLMScaler follows it to the minimum
    prometheus.set(ttft, 200.0)
    prometheus.set(otps, 60.0)
    eventually(lambda: replicas(cluster, ns, "llama") == 1, timeout=90, what="llama back to 1")
    assert get_decision(engine, sid, ns, cluster)[1]["replicas"] == 1
