"""LLMScaler on the real control plane (docs/concepts.md, docs/llmscaler.md; seed 000), asserted on what
``kubectl get llms -o yaml``, ``kubectl get deploy`` and the Events show.

One ``python -m escaler manager`` serves the module (poll interval 2 s; the 30 s default is for
production), on the admin kubeconfig; a fake Prometheus (``hack/fake_metrics.PrometheusServer``)
and a fake custom decision provider (``{"replicas": n}`` over HTTP, below) listen on loopback.

Seed 000 "Testing" case → test:

* normal write → ``test_a_normal_write_then_a_no_op``
* no-op → ``test_a_normal_write_then_a_no_op`` (nothing written: lastScaleTime and the object's
  resourceVersion stay)
* rollout deferral (and the forced write after deferTimeoutSeconds, measured from the first
  deferral across a no-op sync in between) → ``test_b_rollout_deferral_then_deferral_timed_out``
* Prometheus unreachable → ``test_c_prometheus_unreachable_and_a_large_error_body``
* a >1 KiB Prometheus error body → ``test_c_prometheus_unreachable_and_a_large_error_body``
* ScalingLimited left unchanged without a signal → ``test_c_prometheus_unreachable_and_a_large_error_body``
* target deleted while a deferral is running → ``test_d_target_deleted_during_a_deferral``
* invalid apiVersion → ``test_e_invalid_api_version``
* a spec change (status and every condition follow the new generation; lowering maxReplicas takes
  effect at the next sync) → ``test_f_spec_change_moves_observed_generation``
* ScaleDownStabilized, including a guard winning over it → ``test_g_scale_down_stabilized_then_a_guard_wins``
* each ScalingLimited reason → ``test_h_each_scaling_limited_reason``
* switching metricProvider Custom → Prometheus → Custom → ``test_i_provider_switch_custom_prometheus_custom``
* stale ScalingDeferred removed → ``test_j_stale_scaling_deferred_is_removed``
* DecisionAvailable mirrors ScalingActive → asserted in every test (``mirrored``): equal to it where
  ScalingActive is written, absent with it where the pipeline never ran (an invalid spec, a target
  conflict)
* (docs/concepts.md#conflicts-one-writer-per-workload) an LLMScaler and an older ElasticScaler on one
  Deployment → ``test_k_target_conflict_across_kinds``
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from .conftest import Cluster, PrometheusServer, eventually, source_dir, wait_synced
from .es_helpers import apply, deployment, hold, replicas, workload
from .webhook import free_port

pytestmark = pytest.mark.e2e

GROUP = "llm.escaler.io/v1alpha1"


# ------------------------------------------------------------------ fixtures


@pytest.fixture
def manager(cluster: Cluster, namespace: str,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The manager, watching only the test's namespace (tests share the control plane with other
    workers' tests, docs/testing.md)."""
    work = tmp_path_factory.mktemp("llm-manager")
    log = work / "manager.log"
    args = [
        sys.executable,
        "-m",
        "escaler",
        "manager",
        f"--kubeconfig={cluster.kubeconfig}",
        f"--namespace={namespace}",
        "--webhook-port=0",
        "--metrics-trigger-poll-interval=2s",
        "--metrics-bind-address=127.0.0.1:0",
        "--health-probe-bind-address=127.0.0.1:0",
        f"--api-bind-address=127.0.0.1:{free_port()}",
        "--log-format=json",
        # the fake servers listen on loopback, refused by default (SSRF guard)
        "--allow-endpoint-networks=127.0.0.0/8",
    ]
    # ESCALER_E2E_SRC (conftest.source_dir): the manager runs that checkout's escaler package, as
    # es_helpers.start_manager does, so a regression test can be watched failing on the old code
    src = source_dir()
    env = {**os.environ, "PYTHONUNBUFFERED": "1",
           "PYTHONPATH": os.pathsep.join(p for p in (str(src), os.environ.get("PYTHONPATH", "")) if p)}
    with open(log, "wb") as f:
        proc = subprocess.Popen(args, cwd=src, stdout=f, stderr=subprocess.STDOUT, env=env)
    info = {"proc": proc, "log": log}
    wait_synced(proc, log)
    try:
        yield info
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()


class Decisions:
    """A custom decision provider: ``GET /decisions/<id>`` → the scripted (status, body)."""

    def __init__(self) -> None:
        self._mu = threading.Lock()
        self._answers: dict[str, tuple[int, bytes]] = {}
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                with owner._mu:
                    status, body = owner._answers.get(self.path, (404, b'{"error": "no such route"}'))
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                return

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()

    def url(self, sid: str) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/decisions/{sid}"

    def set(
        self, sid: str, replicas: int | None = None, *, status: int = 200, body: bytes | None = None
    ) -> None:
        with self._mu:
            self._answers[f"/decisions/{sid}"] = (
                status,
                body if body is not None else json.dumps({"replicas": replicas, "reason": "e2e"}).encode(),
            )

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


@pytest.fixture
def decisions() -> Iterator[Decisions]:
    d = Decisions()
    try:
        yield d
    finally:
        d.stop()


# ------------------------------------------------------------------ helpers


def mlog(manager: dict[str, Any]) -> str:
    return str(Path(manager["log"]).read_text(errors="replace")[-3000:])


def llms(
    name: str,
    target: str,
    *,
    prom: str | None = None,
    queries: dict[str, float] | None = None,
    custom: str | None = None,
    provider: str = "Prometheus",
    minr: int = 1,
    maxr: int = 10,
    window: int = 0,
    step: int | None = None,
    **spec: Any,
) -> dict[str, Any]:
    s: dict[str, Any] = {
        "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": target},
        "minReplicas": minr,
        "maxReplicas": maxr,
        "metricProvider": provider,
        "scaleDown": {"stabilizationWindowSeconds": window, **({"maxStepReplicas": step} if step else {})},
        **spec,
    }
    if prom is not None:
        s["prometheus"] = {
            "endpoint": prom,
            "timeoutSeconds": 2,
            "metrics": [
                {"name": f"m{i}", "query": q, "targetPerReplica": t}
                for i, (q, t) in enumerate((queries or {}).items())
            ],
        }
    if custom is not None:
        s["customProvider"] = {"url": custom, "timeoutSeconds": 2}
    return {"apiVersion": GROUP, "kind": "LLMScaler", "metadata": {"name": name}, "spec": s}


def get(cluster: Cluster, ns: str, name: str) -> dict[str, Any]:
    return dict(cluster.kubectl_json("get", "llmscaler", name, "-n", ns))


def iso(text: str) -> datetime:
    """A status timestamp (RFC 3339, ``Z``) as an aware datetime."""
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def conds(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}


def state(cluster: Cluster, ns: str, name: str) -> str:
    st = get(cluster, ns, name).get("status") or {}
    cs = "; ".join(
        f"{c['type']}={c['status']}/{c['reason']}: {c.get('message', '')[:200]!r}"
        for c in st.get("conditions") or []
    )
    return f"llms/{name}: current={st.get('currentReplicas')} desired={st.get('desiredReplicas')} {cs}"


def wait_cond(
    cluster: Cluster,
    ns: str,
    name: str,
    ctype: str,
    status: str,
    reason: str,
    manager: dict[str, Any],
    timeout: float = 40,
) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        obj = get(cluster, ns, name)
        c = conds(obj).get(ctype)
        return obj if c is not None and (c["status"], c["reason"]) == (status, reason) else None

    try:
        return dict(eventually(check, timeout=timeout, what=f"{ctype}={status}/{reason} on {name}"))
    except AssertionError as e:
        raise AssertionError(f"{e}\n{state(cluster, ns, name)}\nmanager log:\n{mlog(manager)}") from None


def wait_replicas(cluster: Cluster, ns: str, target: str, n: int, scaler: str, timeout: float = 40) -> None:
    try:
        eventually(lambda: replicas(cluster, ns, target) == n, timeout=timeout, what=f"{target} at {n}")
    except AssertionError as e:
        raise AssertionError(
            f"{e} (now {replicas(cluster, ns, target)}); {state(cluster, ns, scaler)}"
        ) from None


def mirrored(obj: dict[str, Any], *, active: bool = True) -> None:
    """The deprecated DecisionAvailable is ScalingActive, field for field: present exactly when
    ScalingActive is (``active``: whether this state has a ScalingActive at all — a spec refused
    before the pipeline ran has neither), and then equal to it but for the type."""
    cs = conds(obj)
    if not active:
        assert "ScalingActive" not in cs and "DecisionAvailable" not in cs, cs
        return
    assert "DecisionAvailable" in cs and "ScalingActive" in cs, cs
    assert {**cs["ScalingActive"], "type": "DecisionAvailable"} == cs["DecisionAvailable"]


def events(cluster: Cluster, ns: str, name: str) -> list[dict[str, Any]]:
    items = cluster.kubectl_json("get", "events.events.k8s.io", "-n", ns)["items"]
    return [
        e
        for e in items
        if (e.get("regarding") or {}).get("kind") == "LLMScaler"
        and (e.get("regarding") or {}).get("name") == name
    ]


def stuck_rollout(cluster: Cluster, ns: str, name: str, n: int) -> None:
    """A Deployment at ``n`` whose new template can never be scheduled: its rollout stays in progress."""
    apply(cluster, ns, deployment(name, n))
    eventually(
        lambda: (workload(cluster, ns, name).get("status") or {}).get("updatedReplicas") == n,
        timeout=40,
        what=f"{name} rolled out",
    )
    apply(cluster, ns, deployment(name, n, nodeSelector={"e2e.escaler.io/nowhere": "true"}))


# ------------------------------------------------------------------ tests


def test_a_normal_write_then_a_no_op(
    cluster: Cluster, namespace: str, prometheus: PrometheusServer, manager: dict[str, Any]
) -> None:
    q1, q2 = f'sum(running{{namespace="{namespace}"}})', f'sum(waiting{{namespace="{namespace}"}})'
    prometheus.set(q1, 40)  # 40 / 8 → 5
    prometheus.set(q2, 9)  # 9 / 2.5 → 4
    apply(cluster, namespace, deployment("chat", 1))
    apply(cluster, namespace, llms("chat", "chat", prom=prometheus.url, queries={q1: 8, q2: 2.5}))
    wait_replicas(cluster, namespace, "chat", 5, "chat")
    obj = wait_cond(cluster, namespace, "chat", "AbleToScale", "True", "Synced", manager)
    cs, st = conds(obj), obj["status"]
    assert (cs["ScalingActive"]["status"], cs["ScalingActive"]["reason"]) == ("True", "MetricsAvailable")
    assert cs["ScalingActive"]["message"] == "evaluated 2 of 2 metrics; recommends 5 replicas"
    assert (cs["ScalingLimited"]["status"], cs["ScalingLimited"]["reason"]) == ("False", "DesiredWithinRange")
    assert (cs["Validated"]["status"], cs["MetricsPipeline"]["status"]) == ("True", "True")
    mirrored(obj)
    assert st["observedGeneration"] == obj["metadata"]["generation"] == 1
    assert all(c["observedGeneration"] == 1 for c in cs.values())
    assert st["lastScaleTime"] and st["currentReplicas"] == 5
    assert [(m["name"], m["recommendedReplicas"]) for m in st["currentMetrics"]] == [("m0", 5), ("m1", 4)]
    eventually(
        lambda: any(
            e["reason"] == "SuccessfulRescale" and "New size: 5" in e.get("note", "")
            for e in events(cluster, namespace, "chat")
        ),
        timeout=20,
        what="SuccessfulRescale",
    )
    table = cluster.kubectl("get", "llms", "chat", "-n", namespace)
    header, row = table.splitlines()[:2]
    assert header.split()[:9] == [
        "NAME",
        "TARGET",
        "MIN",
        "MAX",
        "CURRENT",
        "DESIRED",
        "ACTIVE",
        "ABLETOSCALE",
        "SCALING",
    ]
    assert row.split()[1:9] == ["chat", "1", "10", "5", "5", "True", "True", "Synced"]
    # the no-op: several polls with the same answer write nothing, not even status
    rv, last = obj["metadata"]["resourceVersion"], st["lastScaleTime"]
    hold(
        lambda: get(cluster, namespace, "chat")["metadata"]["resourceVersion"] == rv,
        8,
        what="an unchanged LLMScaler status",
    )
    assert replicas(cluster, namespace, "chat") == 5
    assert get(cluster, namespace, "chat")["status"]["lastScaleTime"] == last


def test_b_rollout_deferral_then_deferral_timed_out(
    cluster: Cluster, namespace: str, prometheus: PrometheusServer, manager: dict[str, Any]
) -> None:
    stuck_rollout(cluster, namespace, "roll", 2)
    q = f'sum(running{{namespace="{namespace}"}})'
    prometheus.set(q, 32)  # 4
    apply(
        cluster, namespace, llms("roll", "roll", prom=prometheus.url, queries={q: 8}, deferTimeoutSeconds=20)
    )
    obj = wait_cond(cluster, namespace, "roll", "AbleToScale", "True", "RolloutInProgress", manager)
    since = obj["status"].get("deferredSince")
    assert since and "lastScaleTime" not in obj["status"]
    assert replicas(cluster, namespace, "roll") == 2
    mirrored(obj)
    eventually(
        lambda: any(e["reason"] == "ScalingDeferred" for e in events(cluster, namespace, "roll")),
        timeout=20,
        what="ScalingDeferred event",
    )
    # a no-op while the deferral runs (the recommendation back at the current 2): the guard's
    # reason and deferredSince stay (seed 000), so the timeout still counts from the first hold
    prometheus.set(q, 16)  # 2
    eventually(
        lambda: (get(cluster, namespace, "roll").get("status") or {}).get("desiredReplicas") == 2,
        timeout=10,
        what="a no-op sync during the deferral",
    )
    obj = get(cluster, namespace, "roll")
    able = conds(obj)["AbleToScale"]
    assert (able["status"], able["reason"]) == ("True", "RolloutInProgress"), able
    assert obj["status"].get("deferredSince") == since
    prometheus.set(q, 32)  # 4 again: still held by the same deferral
    # deferTimeoutSeconds after the first deferredSince the held write is forced (AbleToScale=True/
    # DeferralTimedOut for that one sync)
    wait_replicas(cluster, namespace, "roll", 4, "roll", timeout=40)
    # the status is written after the target: wait for the decision the write recorded
    def recorded() -> dict[str, Any] | None:
        o = get(cluster, namespace, "roll")
        decisions = (o.get("status") or {}).get("recentDecisions") or []
        return o if any(d.get("to") == 4 for d in decisions) else None

    obj = eventually(recorded, timeout=10, what="the forced write's recentDecisions entry")
    last = obj["status"]["recentDecisions"][-1]
    assert last["to"] == 4 and "the held write is forced after deferTimeoutSeconds 20" in last["reason"], last
    # the forced write came at the timeout, measured from the first deferral (a no-op that ended the
    # deferral would have restarted it): timestamps have 1 s resolution, and the sync at the force
    # time (its requeue, or the 2 s poll) may lag a little
    waited = (iso(obj["status"]["lastScaleTime"]) - iso(since)).total_seconds()
    assert 20 <= waited <= 20 + 2 + 2, (since, obj["status"]["lastScaleTime"])
    eventually(
        lambda: any(e["reason"] == "DeferralTimedOut" for e in events(cluster, namespace, "roll")),
        timeout=20,
        what="DeferralTimedOut event",
    )
    deferred = [e for e in events(cluster, namespace, "roll") if e["reason"] == "ScalingDeferred"]
    assert len(deferred) == 1, [e.get("note") for e in deferred]


def test_c_prometheus_unreachable_and_a_large_error_body(
    cluster: Cluster, namespace: str, prometheus: PrometheusServer, manager: dict[str, Any]
) -> None:
    q = f'sum(running{{namespace="{namespace}"}})'
    prometheus.set(q, 80)  # 10, capped at 3
    apply(cluster, namespace, deployment("big", 1))
    apply(cluster, namespace, llms("big", "big", prom=prometheus.url, queries={q: 8}, maxr=3))
    wait_replicas(cluster, namespace, "big", 3, "big")
    obj = wait_cond(cluster, namespace, "big", "ScalingLimited", "True", "TooManyReplicas", manager)
    limited = conds(obj)["ScalingLimited"]
    # a proxy error page far over 1 KiB: nothing of it beyond the capped error text reaches status
    prometheus.fail(503, "<html>" + "x" * 4096 + "</html>")
    obj = wait_cond(cluster, namespace, "big", "ScalingActive", "False", "DecisionUnavailable", manager)
    msg = conds(obj)["ScalingActive"]["message"]
    assert msg.startswith(f"Prometheus {prometheus.url}: m0: ") and "HTTP 503" in msg, msg
    assert "x" * 300 not in msg and len(msg.encode()) <= 1024, msg
    mirrored(obj)
    assert conds(obj)["ScalingLimited"] == limited  # only updated with a usable signal
    assert (conds(obj)["MetricsPipeline"]["status"], conds(obj)["MetricsPipeline"]["reason"]) == (
        "False",
        "NoMetrics",
    )
    assert replicas(cluster, namespace, "big") == 3  # held
    eventually(
        lambda: any(e["reason"] == "FailedComputeMetricsReplicas" for e in events(cluster, namespace, "big")),
        timeout=20,
        what="FailedComputeMetricsReplicas event",
    )
    # unreachable: nothing listens on the endpoint
    apply(cluster, namespace, deployment("gone", 2))
    dead = f"http://127.0.0.1:{free_port()}"
    apply(cluster, namespace, llms("gone", "gone", prom=dead, queries={q: 8}))
    obj = wait_cond(cluster, namespace, "gone", "ScalingActive", "False", "DecisionUnavailable", manager)
    msg = conds(obj)["ScalingActive"]["message"]
    assert msg.startswith(f"Prometheus {dead}: m0: "), msg
    assert "ScalingLimited" not in conds(obj)
    mirrored(obj)
    assert replicas(cluster, namespace, "gone") == 2


def test_d_target_deleted_during_a_deferral(
    cluster: Cluster, namespace: str, prometheus: PrometheusServer, manager: dict[str, Any]
) -> None:
    stuck_rollout(cluster, namespace, "del", 2)
    q = f'sum(running{{namespace="{namespace}"}})'
    prometheus.set(q, 32)
    apply(cluster, namespace, llms("del", "del", prom=prometheus.url, queries={q: 8}))
    before = wait_cond(cluster, namespace, "del", "AbleToScale", "True", "RolloutInProgress", manager)
    cluster.kubectl("delete", "deployment", "del", "-n", namespace)
    obj = wait_cond(cluster, namespace, "del", "AbleToScale", "False", "TargetNotFound", manager)
    st = obj["status"]
    assert st["observedGeneration"] == obj["metadata"]["generation"]
    assert conds(obj)["AbleToScale"]["observedGeneration"] == obj["metadata"]["generation"]
    for k in ("currentReplicas", "desiredReplicas", "deferredSince"):
        assert st.get(k) == before["status"].get(k), k
    assert (
        conds(obj)["ScalingActive"] == conds(before)["ScalingActive"]
    )  # target errors touch AbleToScale only
    mirrored(obj)


def test_e_invalid_api_version(
    cluster: Cluster, namespace: str, prometheus: PrometheusServer, manager: dict[str, Any]
) -> None:
    obj = llms("bad", "x", prom=prometheus.url, queries={f'sum(x{{namespace="{namespace}"}})': 1})
    obj["spec"]["targetRef"]["apiVersion"] = "apps/v1/extra"
    apply(cluster, namespace, obj)
    got = wait_cond(cluster, namespace, "bad", "AbleToScale", "False", "InvalidSpec", manager)
    assert "spec.targetRef.apiVersion" in conds(got)["AbleToScale"]["message"]
    assert got["status"]["observedGeneration"] == got["metadata"]["generation"]
    assert "lastScaleTime" not in got["status"]
    mirrored(got, active=False)  # the pipeline never ran: no ScalingActive, so no mirror either


def test_f_spec_change_moves_observed_generation(
    cluster: Cluster, namespace: str, prometheus: PrometheusServer, manager: dict[str, Any]
) -> None:
    q = f'sum(running{{namespace="{namespace}"}})'
    prometheus.set(q, 64)  # 8
    apply(cluster, namespace, deployment("gen", 1))
    apply(cluster, namespace, llms("gen", "gen", prom=prometheus.url, queries={q: 8}, window=300))
    wait_replicas(cluster, namespace, "gen", 8, "gen")
    # lowering maxReplicas takes effect at the next sync (clamp last), though the window would hold 8
    cluster.kubectl(
        "patch", "llmscaler", "gen", "-n", namespace, "--type=merge", "-p", '{"spec":{"maxReplicas":5}}'
    )
    wait_replicas(cluster, namespace, "gen", 5, "gen", timeout=20)

    def followed() -> dict[str, Any] | None:
        obj = get(cluster, namespace, "gen")
        gen = obj["metadata"]["generation"]
        ok = (
            gen == 2
            and obj["status"].get("observedGeneration") == 2
            and all(c["observedGeneration"] == 2 for c in conds(obj).values())
        )
        return obj if ok else None

    obj = eventually(followed, timeout=20, what="observedGeneration 2 on the status and every condition")
    assert (conds(obj)["ScalingLimited"]["reason"]) == "TooManyReplicas"
    mirrored(obj)


def test_g_scale_down_stabilized_then_a_guard_wins(
    cluster: Cluster, namespace: str, prometheus: PrometheusServer, manager: dict[str, Any]
) -> None:
    q = f'sum(running{{namespace="{namespace}"}})'
    prometheus.set(q, 48)  # 6
    apply(cluster, namespace, deployment("stab", 6))
    apply(cluster, namespace, llms("stab", "stab", prom=prometheus.url, queries={q: 8}, window=10))
    wait_cond(cluster, namespace, "stab", "AbleToScale", "True", "Synced", manager)
    prometheus.set(q, 40)  # 5: the window keeps 6
    obj = wait_cond(cluster, namespace, "stab", "AbleToScale", "True", "ScaleDownStabilized", manager)
    assert replicas(cluster, namespace, "stab") == 6
    mirrored(obj)
    # a rollout starts; once the window holds only 5s, the load drops to 1: the write (6 → 5, held
    # above 1 by the window) is held by the guard, whose reason wins over ScaleDownStabilized
    apply(cluster, namespace, deployment("stab", 6, nodeSelector={"e2e.escaler.io/nowhere": "true"}))
    time.sleep(11)
    prometheus.set(q, 8)
    # 1 is recommended, the window keeps 5, and the guard holds 6 → 5: AbleToScale says the guard
    def guard_wins() -> dict[str, Any] | None:
        obj = get(cluster, namespace, "stab")
        cs = conds(obj)
        ok = "recommends 1 replicas" in cs["ScalingActive"]["message"] and cs["AbleToScale"]["reason"] == (
            "RolloutInProgress")
        return obj if ok else None

    obj = eventually(guard_wins, timeout=30, what=f"the guard winning; {state(cluster, namespace, 'stab')}")
    assert replicas(cluster, namespace, "stab") == 6
    mirrored(obj)


def test_h_each_scaling_limited_reason(
    cluster: Cluster, namespace: str, prometheus: PrometheusServer, manager: dict[str, Any]
) -> None:
    q_hi, q_zero, q_mid = (
        f'sum(hi{{namespace="{namespace}"}})',
        f'sum(zero{{namespace="{namespace}"}})',
        f'sum(mid{{namespace="{namespace}"}})',
    )
    prometheus.set(q_hi, 200)
    prometheus.set(q_zero, 0)
    prometheus.set(q_mid, 24)  # 3
    # name, replicas, scaler kwargs, expected (status, reason), replicas at the end. Each state is
    # stable: a step limit would bind once per sync on the way down, so the "step" target's rollout
    # is stuck and the guard holds its (step-limited) write: ScalingLimited is reported all along.
    cases = [
        ("many", 1, dict(queries={q_hi: 8}, maxr=4), ("True", "TooManyReplicas"), 4),
        ("few", 4, dict(queries={q_zero: 8}, minr=2), ("True", "TooFewReplicas"), 2),
        ("step", 6, dict(queries={q_zero: 8}, minr=1, step=2), ("True", "ScaleDownLimit"), 6),
        ("within", 1, dict(queries={q_mid: 8}), ("False", "DesiredWithinRange"), 3),
    ]
    stuck_rollout(cluster, namespace, "step", 6)
    for name, n, kw, _, _ in cases:
        if name != "step":
            apply(cluster, namespace, deployment(name, n))
        apply(cluster, namespace, llms(name, name, prom=prometheus.url, **kw))  # type: ignore[arg-type]
    for name, _, _, (status, reason), written in cases:
        obj = wait_cond(cluster, namespace, name, "ScalingLimited", status, reason, manager)
        mirrored(obj)
        wait_replicas(cluster, namespace, name, written, name, timeout=20)
    assert (
        "desired 4" in conds(get(cluster, namespace, "step"))["ScalingLimited"]["message"]
        or get(cluster, namespace, "step")["status"]["desiredReplicas"] == 4
    )


def test_i_provider_switch_custom_prometheus_custom(
    cluster: Cluster,
    namespace: str,
    prometheus: PrometheusServer,
    decisions: Decisions,
    manager: dict[str, Any],
) -> None:
    q = f'sum(running{{namespace="{namespace}"}})'
    prometheus.set(q, 16)  # 2
    decisions.set(namespace, 3)
    apply(cluster, namespace, deployment("sw", 1))
    apply(
        cluster,
        namespace,
        llms(
            "sw",
            "sw",
            prom=prometheus.url,
            queries={q: 8},
            custom=decisions.url(namespace),
            provider="Custom",
        ),
    )
    wait_replicas(cluster, namespace, "sw", 3, "sw")
    obj = wait_cond(cluster, namespace, "sw", "ScalingActive", "True", "DecisionReceived", manager)
    assert "MetricsPipeline" not in conds(obj)
    mirrored(obj)
    cluster.kubectl(
        "patch",
        "llmscaler",
        "sw",
        "-n",
        namespace,
        "--type=merge",
        "-p",
        '{"spec":{"metricProvider":"Prometheus"}}',
    )
    obj = wait_cond(cluster, namespace, "sw", "ScalingActive", "True", "MetricsAvailable", manager)
    mirrored(obj)
    wait_replicas(cluster, namespace, "sw", 2, "sw")
    # back to Custom, whose provider now answers garbage: the conditions are overwritten at once
    decisions.set(namespace, body=b'{"replicas": "many"}')
    cluster.kubectl(
        "patch",
        "llmscaler",
        "sw",
        "-n",
        namespace,
        "--type=merge",
        "-p",
        '{"spec":{"metricProvider":"Custom"}}',
    )
    obj = wait_cond(cluster, namespace, "sw", "ScalingActive", "False", "DecisionUnavailable", manager)
    msg = conds(obj)["ScalingActive"]["message"]
    assert msg.startswith("custom provider returned no decision: "), msg
    assert '"replicas" must be an integer >= 0, got a string' in msg
    assert "MetricsPipeline" not in conds(obj)
    mirrored(obj)
    assert replicas(cluster, namespace, "sw") == 2


def test_j_stale_scaling_deferred_is_removed(
    cluster: Cluster, namespace: str, prometheus: PrometheusServer, manager: dict[str, Any]
) -> None:
    q = f'sum(running{{namespace="{namespace}"}})'
    prometheus.set(q, 16)
    apply(cluster, namespace, deployment("old", 2))
    apply(cluster, namespace, llms("old", "old", prom=prometheus.url, queries={q: 8}))
    wait_cond(cluster, namespace, "old", "AbleToScale", "True", "Synced", manager)
    # an older controller's leftover, written as a user would (kubectl patch --subresource=status)
    obj = get(cluster, namespace, "old")
    stale = {
        "type": "ScalingDeferred",
        "status": "True",
        "reason": "RolloutInProgress",
        "message": "old",
        "lastTransitionTime": "2025-01-01T00:00:00Z",
        "observedGeneration": 1,
    }
    patch = {"status": {"conditions": [*obj["status"]["conditions"], stale]}}
    cluster.kubectl(
        "patch",
        "llmscaler",
        "old",
        "-n",
        namespace,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps(patch),
    )
    eventually(
        lambda: "ScalingDeferred" not in conds(get(cluster, namespace, "old")),
        timeout=20,
        what="the stale ScalingDeferred removed",
    )
    mirrored(get(cluster, namespace, "old"))


def test_k_target_conflict_across_kinds(
    cluster: Cluster, namespace: str, prometheus: PrometheusServer, manager: dict[str, Any]
) -> None:
    q = f'sum(running{{namespace="{namespace}"}})'
    prometheus.set(q, 40)
    apply(cluster, namespace, deployment("both", 1))
    apply(
        cluster,
        namespace,
        {
            "apiVersion": "elasticscaler.io/v1alpha1",
            "kind": "ElasticScaler",
            "metadata": {"name": "older"},
            "spec": {
                "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "both"},
                "minReplicas": 1,
                "maxReplicas": 10,
                "trigger": {
                    "type": "MetricsTrigger",
                    "metricsTrigger": {
                        "metrics": [
                            {
                                "type": "ExternalServer",
                                "externalServer": {
                                    "endpoint": prometheus.url,
                                    "query": q,
                                    "target": {"type": "Value", "value": "20"},
                                },
                            }
                        ]
                    },
                },
            },
        },
    )
    time.sleep(1.1)  # creationTimestamp has a one-second resolution: the LLMScaler is younger
    apply(cluster, namespace, llms("younger", "both", prom=prometheus.url, queries={q: 8}))
    obj = wait_cond(cluster, namespace, "younger", "Validated", "False", "TargetConflict", manager)
    assert (
        "ElasticScaler" in conds(obj)["Validated"]["message"]
        and "older" in conds(obj)["Validated"]["message"]
    )
    mirrored(obj, active=False)  # refused before the pipeline ran: neither ScalingActive nor its mirror
    wait_replicas(cluster, namespace, "both", 2, "younger")  # the ElasticScaler's 40 / 20
    hold(lambda: replicas(cluster, namespace, "both") == 2, 5, what="the younger LLMScaler never writes")
    mirrored(get(cluster, namespace, "younger"), active=False)
