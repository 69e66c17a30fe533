"""ElasticScaler on the real control plane: every trigger, the guards and the failure modes,
asserted on what ``kubectl get es -o yaml`` and ``kubectl get deploy`` show (issue: the decision
pipeline and the ElasticScaler reconciler, scenarios (a)-(j)).

One ``python -m escaler manager`` process serves the module (poll interval 2 s so tests run in
seconds; the 30 s default is for production), on the admin kubeconfig.
"""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from . import es_helpers
from .conftest import ROOT, Cluster, PrometheusServer, eventually, wait_synced
from .es_helpers import apply, cond, es, replicas
from .webhook import free_port

pytestmark = pytest.mark.e2e

GROUP = "elasticscaler.io/v1alpha1"


@pytest.fixture
def manager(cluster: Cluster, namespace: str,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The manager, watching only the test's namespace (tests share the control plane with other
    workers' tests, docs/testing.md)."""
    work = tmp_path_factory.mktemp("es-manager")
    api_port = free_port()
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
        f"--api-bind-address=127.0.0.1:{api_port}",
        "--log-format=json",
        # the fake Prometheus servers listen on loopback, refused by default (SSRF guard)
        "--allow-endpoint-networks=127.0.0.0/8",
    ]
    # the manager trusts the cluster CA for outbound https (the TLS fake Prometheus of test_k)
    ca = str(cluster.require_local().pki / "ca.crt")
    with open(log, "wb") as f:
        proc = subprocess.Popen(
            args, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1", "SSL_CERT_FILE": ca},
        )
    # the API serves HTTPS by default (a self-signed certificate: no --api-cert-dir here)
    info = {"proc": proc, "log": log, "api": f"https://127.0.0.1:{api_port}"}
    wait_synced(proc, log)
    try:
        yield info
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()


def mlog(manager: dict[str, Any]) -> str:
    return str(Path(manager["log"]).read_text(errors="replace")[-4000:])


def deployment(name: str, replicas: int, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "containers": [
                        {
                            "name": "main",
                            "image": "registry.local/llm:1",
                            "resources": {"requests": {"cpu": "500m"}},
                        }
                    ],
                    **spec,
                },
            },
        },
    }


def scaler(
    name: str,
    target: str,
    trigger: dict[str, Any],
    *,
    minr: int = 1,
    maxr: int = 10,
    annotations: dict[str, str] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    return {
        "apiVersion": GROUP,
        "kind": "ElasticScaler",
        "metadata": {"name": name, "annotations": annotations or {}},
        "spec": {
            "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": target},
            "minReplicas": minr,
            "maxReplicas": maxr,
            "trigger": trigger,
            **spec,
        },
    }


def prom_trigger(url: str, query: str, per_replica: str = "10") -> dict[str, Any]:
    return {
        "type": "MetricsTrigger",
        "metricsTrigger": {
            "scalingAlgorithm": "apa",
            "metrics": [
                {
                    "type": "ExternalServer",
                    "externalServer": {
                        "endpoint": url,
                        "query": query,
                        "timeoutSeconds": 2,
                        "target": {"type": "AverageValue", "averageValue": per_replica},
                    },
                }
            ],
        },
    }


FAST = {
    "elasticscaler.io/metrics.windowSeconds": "4",
    "elasticscaler.io/behavior.scaleDown.stabilizationWindowSeconds": "12",
}


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
    """``es_helpers.wait_cond`` with this module's manager log on a timeout."""
    try:
        return es_helpers.wait_cond(cluster, ns, name, ctype, status, reason, timeout=timeout)
    except AssertionError as e:
        raise AssertionError(f"{e}; log:\n{mlog(manager)}") from None


def test_a_apa_scales_up_then_stabilizes_then_scales_down(
    cluster: Cluster, namespace: str, prometheus: Any, manager: dict[str, Any]
) -> None:
    apply(cluster, namespace, deployment("llm-a", 2))
    q = f'sum(vllm:num_requests_running{{namespace="{namespace}"}})'
    prometheus.set(q, 20)  # 20 over 2 replicas = 10 per replica: at target
    # a 30 s window, not FAST's 12 s: `escaler explain` below must run inside it, and a CLI process
    # started on a loaded machine (the parallel tier) can take most of 12 s to answer
    held = {**FAST, "elasticscaler.io/behavior.scaleDown.stabilizationWindowSeconds": "30"}
    apply(cluster, namespace, scaler("a", "llm-a", prom_trigger(prometheus.url, q), annotations=held))
    obj = wait_cond(cluster, namespace, "a", "ScalingActive", "True", "MetricsAvailable", manager)
    assert "evaluated 1 of 1 metrics" in cond(obj, "ScalingActive")[2]
    assert replicas(cluster, namespace, "llm-a") == 2
    prometheus.set(q, 60)  # 30 per replica: 6 needed (apa may take it in two steps, 2 → 4 → 6)
    eventually(lambda: replicas(cluster, namespace, "llm-a") == 6, timeout=40, what="settle at 6")
    # the status is written after the target: wait for it rather than read it once (on a loaded
    # machine the Deployment showed 6 while the status still said 4)
    obj = eventually(lambda: (o := es(cluster, namespace, "a"))["status"].get("desiredReplicas") == 6 and o,
                     timeout=20, what="the status at 6")
    assert obj["status"]["lastScaleTime"]
    assert any(d["to"] == 6 for d in obj["status"]["recentDecisions"])
    prometheus.set(q, 12)  # 2 per replica: wants 2, held by the 30 s window
    wait_cond(cluster, namespace, "a", "AbleToScale", "True", "ScaleDownStabilized", manager, timeout=20)
    assert replicas(cluster, namespace, "llm-a") == 6
    # while held, `escaler explain` shows the pipeline step by step and the verdict "waiting"
    out = subprocess.run([sys.executable, "-m", "escaler", "explain", "-n", namespace, "a",
                          f"--kubeconfig={cluster.kubeconfig}"], cwd=ROOT, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    for step in ("1. Inputs", "2. Recommendation", "3. Stabilization", "4. Rate limit", "5. Step limits",
                 "6. Clamp", "7. Guard", "8. Write"):
        assert step in out.stdout, out.stdout
    assert "ScaleDownStabilized" in out.stdout and "waiting" in out.stdout, out.stdout
    # after the window: 12 in total wants 2 (apa halves per step at most: 6 → 3 → 2)
    eventually(lambda: replicas(cluster, namespace, "llm-a") == 2, timeout=60, what="scale down after window")


def test_b_hpa_mode_with_the_real_hpa_controller(
    cluster: Cluster, namespace: str, fake_metrics: Any, manager: dict[str, Any]
) -> None:
    apply(cluster, namespace, deployment("llm-b", 1))
    fake_metrics.set_external(namespace, "queue_depth", 30)
    trig = {
        "type": "MetricsTrigger",
        "metricsTrigger": {
            "scalingAlgorithm": "HPA",
            "metrics": [
                {
                    "type": "External",
                    "external": {
                        "metric": {"name": "queue_depth"},
                        "target": {"type": "AverageValue", "averageValue": "10"},
                    },
                }
            ],
        },
    }
    apply(cluster, namespace, scaler("b", "llm-b", trig, maxr=6))
    hpa = eventually(
        lambda: (
            cluster.kubectl_json("get", "hpa", "b-hpa", "-n", namespace)
            if "b-hpa" in cluster.kubectl("get", "hpa", "-n", namespace, "-o", "name", check=False)
            else None
        ),
        timeout=30,
        what=f"companion HPA; log:\n{mlog(manager)}",
    )
    owner = hpa["metadata"]["ownerReferences"][0]
    assert owner["kind"] == "ElasticScaler" and owner["name"] == "b" and owner.get("controller") is True
    assert hpa["spec"]["maxReplicas"] == 6
    eventually(lambda: replicas(cluster, namespace, "llm-b") == 3, timeout=60, what="HPA to scale to 3")
    eventually(
        lambda: (es(cluster, namespace, "b").get("status") or {}).get("currentReplicas") == 3,
        timeout=30,
        what="status mirrors the HPA",
    )
    # drift: a hand edit of the HPA is reverted
    cluster.kubectl(
        "patch", "hpa", "b-hpa", "-n", namespace, "--type=merge", "-p", '{"spec":{"maxReplicas":2}}'
    )
    eventually(
        lambda: cluster.kubectl_json("get", "hpa", "b-hpa", "-n", namespace)["spec"]["maxReplicas"] == 6,
        timeout=40,
        what="drift reverted",
    )
    # deleting the scaler garbage-collects its HPA
    cluster.kubectl("delete", "es", "b", "-n", namespace)
    eventually(
        lambda: "b-hpa" not in cluster.kubectl("get", "hpa", "-n", namespace, "-o", "name"),
        timeout=40,
        what="HPA garbage-collected",
    )


def test_c_resource_metrics_through_metrics_k8s_io(
    cluster: Cluster, namespace: str, fake_metrics: Any, manager: dict[str, Any]
) -> None:
    apply(cluster, namespace, deployment("llm-c", 2))
    eventually(
        lambda: (
            cluster.kubectl_json("get", "deployment", "llm-c", "-n", namespace)["status"].get("readyReplicas")
            == 2
        ),
        timeout=40,
        what="2 ready pods",
    )
    fake_metrics.set_pod_usage(namespace, "*", cpu=0.7, memory=1e8)  # 700m of 500m requested = 140 %
    trig = {
        "type": "MetricsTrigger",
        "metricsTrigger": {
            "metrics": [
                {
                    "type": "Resource",
                    "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 70}},
                }
            ]
        },
    }
    apply(cluster, namespace, scaler("c", "llm-c", trig, annotations=FAST))
    # every pod (new ones too) reports 140 %, so it keeps doubling (2 → 4 → 8) up to maxReplicas 10.
    # As the HPA does, a new pod's cpu sample only counts once it was taken a full metrics window
    # (30 s here) after the pod became Ready; until then the new pods count as 0 % on a scale-up,
    # which holds the count (capacity on the way, not double-counted) — so each step takes a window.
    for want in (4, 8, 10):
        eventually(
            lambda w=want: replicas(cluster, namespace, "llm-c") == w,
            timeout=60,
            what=f"140% of a 70% target: {want}; log:\n{mlog(manager)}",
        )
    obj = wait_cond(cluster, namespace, "c", "ScalingLimited", "True", "TooManyReplicas", manager)
    m = obj["status"]["currentMetrics"][0]
    assert float(m["value"]) == pytest.approx(140, abs=1)
    assert obj["status"]["desiredReplicas"] == 10


SOURCE_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "replicasources.e2e.escaler.io"},
    "spec": {
        "group": "e2e.escaler.io",
        "scope": "Namespaced",
        "names": {"plural": "replicasources", "singular": "replicasource", "kind": "ReplicaSource"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "schema": {
                    "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
                },
            }
        ],
    },
}


def test_d_state_trigger_follows_a_labelled_custom_source(
    cluster: Cluster, namespace: str, manager: dict[str, Any], api_client: Any
) -> None:
    cluster.apply(SOURCE_CRD)
    cluster.wait_established("replicasources.e2e.escaler.io")
    apply(cluster, namespace, deployment("llm-d", 1))
    src = {
        "apiVersion": "e2e.escaler.io/v1",
        "kind": "ReplicaSource",
        "metadata": {
            "name": "plan",
            "labels": {"elasticscaler.io/name": "d", "elasticscaler.io/namespace": namespace},
        },
        "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "llm-d"}},
    }
    apply(cluster, namespace, src)
    trig = {"type": "StateTrigger"}
    s = scaler("d", "plan", trig, maxr=8)
    s["spec"]["targetRef"] = {"apiVersion": "e2e.escaler.io/v1", "kind": "ReplicaSource", "name": "plan"}
    apply(cluster, namespace, s)
    wait_cond(cluster, namespace, "d", "ScalingActive", "False", "DecisionUnavailable", manager)
    custom = k8s.CustomObjectsApi(api_client)
    apps = k8s.AppsV1Api(api_client)
    for want in (3, 5):
        # the clock starts before the source changes; both the change and the reads go through
        # the API client (no kubectl process start-up in the measurement), polled every 20 ms
        t0 = time.monotonic()
        custom.patch_namespaced_custom_object_status(
            "e2e.escaler.io", "v1", namespace, "replicasources", "plan",
            {"status": {"desiredReplicas": want}})
        eventually(
            lambda w=want: apps.read_namespaced_deployment("llm-d", namespace).spec.replicas == w,
            timeout=10,
            interval=0.02,
            what=f"target to follow the source to {want}; log:\n{mlog(manager)}",
        )
        took = time.monotonic() - t0
        sys.stderr.write(f"\n[e2e] state source → target write: {took:.2f}s\n")
        assert took <= 1.0, (f"docs/guide/elasticscaler.md#the-triggers: a source change reaches the target "
                             f"within 1 s; took {took:.2f}s")


def _token(cluster: Cluster, ns: str, sa: str, audience: str | None = "escaler") -> str:
    """A token for ``sa`` (created on first use) issued for ``audience`` (None: the API server's)."""
    if cluster.kubectl("get", "serviceaccount", sa, "-n", ns, check=False).strip() == "":
        cluster.kubectl("create", "serviceaccount", sa, "-n", ns)
    extra = ["--audience", audience] if audience else []
    return cluster.kubectl("create", "token", sa, "-n", ns, *extra).strip()


# the manager's API certificate is self-signed in these tests (its fingerprint is in the log)
_UNVERIFIED = ssl.create_default_context()
_UNVERIFIED.check_hostname = False
_UNVERIFIED.verify_mode = ssl.CERT_NONE


def _api_up(api: str) -> bool:
    try:
        with urllib.request.urlopen(f"{api}/healthz", timeout=5, context=_UNVERIFIED) as r:
            return int(r.status) == 200
    except (OSError, urllib.error.URLError):
        return False


def _push(api: str, ns: str, name: str, body: dict[str, Any], token: str | None) -> int:
    req = urllib.request.Request(
        f"{api}/signal/v1/namespaces/{ns}/elasticscalers/{name}",
        data=json.dumps(body).encode(),
        method="POST",
        headers={
            "Content-Type": "application/json",
            **({"Authorization": f"Bearer {token}"} if token else {}),
        },
    )
    try:
        with urllib.request.urlopen(req, timeout=10, context=_UNVERIFIED) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return int(e.code)


def test_e_signal_push_from_zero_and_idle_back_to_zero(
    cluster: Cluster, namespace: str, manager: dict[str, Any]
) -> None:
    apply(cluster, namespace, deployment("llm-e", 0))
    trig = {"type": "SignalTrigger", "signalTrigger": {"idleTimeoutSeconds": 8, "activationReplicas": 1}}
    apply(
        cluster,
        namespace,
        scaler(
            "e",
            "llm-e",
            trig,
            minr=0,
            maxr=3,
            annotations={"elasticscaler.io/behavior.scaleDown.stabilizationWindowSeconds": "0"},
        ),
    )
    api = manager["api"]
    eventually(lambda: _api_up(api), timeout=60, what=f"the manager's API; log:\n{mlog(manager)}")
    assert _push(api, namespace, "e", {"active": True}, None) == 401
    assert _push(api, namespace, "e", {"active": True}, "not-a-token") == 401
    nobody = _token(cluster, namespace, "nobody")
    assert _push(api, namespace, "e", {"active": True}, nobody) == 403
    # issue 9: a token issued for the API server (not the escaler audience) is refused
    assert _push(api, namespace, "e", {"active": True}, _token(cluster, namespace, "gateway", None)) == 401
    pusher = _token(cluster, namespace, "gateway")
    cluster.apply(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "signal", "namespace": namespace},
            "rules": [
                {
                    "apiGroups": ["elasticscaler.io"],
                    "resources": ["elasticscalers/signal"],
                    "verbs": ["update"],
                }
            ],
        }
    )
    cluster.kubectl(
        "create",
        "rolebinding",
        "signal",
        "-n",
        namespace,
        "--role=signal",
        f"--serviceaccount={namespace}:gateway",
    )
    # RBAC propagates within seconds; the first authorized push answers 202 Accepted
    eventually(lambda: _push(api, namespace, "e", {"active": True}, pusher) == 202, timeout=15,
               what="authorized push")
    t0 = time.monotonic()
    eventually(
        lambda: replicas(cluster, namespace, "llm-e") == 1,
        timeout=10,
        interval=0.05,
        what=f"0 → 1 on the push; log:\n{mlog(manager)}",
    )
    sys.stderr.write(f"\n[e2e] signal push → target write: {time.monotonic() - t0:.2f}s\n")
    eventually(lambda: replicas(cluster, namespace, "llm-e") == 0, timeout=30, what="idle → 0")


def test_f_rollout_holds_the_write_until_defer_timeout(
    cluster: Cluster, namespace: str, prometheus: Any, manager: dict[str, Any]
) -> None:
    apply(cluster, namespace, deployment("llm-f", 2))
    eventually(
        lambda: (
            cluster.kubectl_json("get", "deployment", "llm-f", "-n", namespace)["status"].get(
                "updatedReplicas"
            )
            == 2
        ),
        timeout=40,
        what="rolled out",
    )
    # a new template whose pods can never be scheduled: the rollout stays in progress
    stuck = deployment("llm-f", 2, nodeSelector={"e2e.escaler.io/nowhere": "true"})
    apply(cluster, namespace, stuck)
    q = f'sum(load{{namespace="{namespace}",t="f"}})'
    prometheus.set(q, 60)
    apply(
        cluster,
        namespace,
        scaler("f", "llm-f", prom_trigger(prometheus.url, q), annotations=FAST, deferTimeoutSeconds=15),
    )
    obj = wait_cond(cluster, namespace, "f", "AbleToScale", "True", "RolloutInProgress", manager)
    deferred_since = _rfc3339(obj["status"]["deferredSince"])
    assert replicas(cluster, namespace, "llm-f") == 2
    # deferTimeoutSeconds (15) after deferredSince the held write is forced: 60 over 2 replicas at
    # 10 per replica wants 6, and apa's one-step limit doubles at most: exactly 4
    eventually(lambda: replicas(cluster, namespace, "llm-f") == 4, timeout=40, what="forced write")
    # the status (lastScaleTime) is written after the target: wait for it to record the forced write
    # (recentDecisions gets an entry per write; a held write adds none)

    def recorded() -> Any:
        o = es(cluster, namespace, "f")
        last = (o["status"].get("recentDecisions") or [{}])[-1]
        return (last.get("from"), last.get("to")) == (2, 4) and o

    forced = eventually(recorded, timeout=15, interval=0.1, what="the forced write in status.recentDecisions")
    forced_at = _rfc3339(forced["status"]["lastScaleTime"])
    # timestamps have 1 s resolution and the forcing sync runs on the 2 s poll
    assert 15 <= forced_at - deferred_since <= 15 + 2 + 1, (deferred_since, forced_at)
    events = cluster.kubectl_json(
        "get", "events", "-n", namespace, "--field-selector", "reason=DeferralTimedOut,involvedObject.name=f"
    )["items"]
    assert events, "a DeferralTimedOut event is recorded for the forced write"
    # the rollout is still stuck, so the next write is held again (a new deferral): the forced
    # DeferralTimedOut status lasts one sync, the event and recentDecisions keep it
    assert es(cluster, namespace, "f")["status"]["lastScaleTime"]


def _rfc3339(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def test_g_two_scalers_on_one_target_older_wins(
    cluster: Cluster, namespace: str, prometheus: Any, manager: dict[str, Any]
) -> None:
    apply(cluster, namespace, deployment("llm-g", 2))
    q1, q2 = f'one{{namespace="{namespace}"}}', f'two{{namespace="{namespace}"}}'
    prometheus.set(q1, 40)  # wants 4
    prometheus.set(q2, 80)  # wants 8
    latest = {**FAST, "elasticscaler.io/metrics.aggregationType": "Latest"}
    apply(cluster, namespace, scaler("g-old", "llm-g", prom_trigger(prometheus.url, q1), annotations=latest))
    wait_cond(cluster, namespace, "g-old", "ScalingActive", "True", "MetricsAvailable", manager)
    time.sleep(1.1)  # creationTimestamp has 1 s resolution: make "older" unambiguous
    apply(cluster, namespace, scaler("g-new", "llm-g", prom_trigger(prometheus.url, q2), annotations=latest))
    wait_cond(cluster, namespace, "g-new", "Validated", "False", "TargetConflict", manager)
    eventually(lambda: replicas(cluster, namespace, "llm-g") == 4, timeout=40, what="only the older writes")
    time.sleep(5)  # several polls of both scalers
    dep = cluster.kubectl_json("get", "deployment", "llm-g", "-n", namespace)
    assert dep["spec"]["replicas"] == 4
    # every replica write bumps metadata.generation: created at 1, exactly one write (2 → 4) since;
    # a write war (4 ↔ 8) or a write by the younger would show as a higher generation
    assert dep["metadata"]["generation"] == 2
    assert not (es(cluster, namespace, "g-new").get("status") or {}).get("lastScaleTime")
    assert cond(es(cluster, namespace, "g-old"), "Validated")[:2] == ("True", "Valid")


def test_h_prometheus_unreachable_holds_replicas(
    cluster: Cluster, namespace: str, prometheus: Any, manager: dict[str, Any]
) -> None:
    apply(cluster, namespace, deployment("llm-h", 3))
    q = f'h{{namespace="{namespace}"}}'
    prometheus.set(q, 30)
    apply(cluster, namespace, scaler("h", "llm-h", prom_trigger(prometheus.url, q), annotations=FAST))
    wait_cond(cluster, namespace, "h", "ScalingActive", "True", "MetricsAvailable", manager)
    # an error page first: the condition quotes it capped at 1 KiB (plus the source's name)
    prometheus.fail(503, "x" * 5000)
    obj = wait_cond(cluster, namespace, "h", "ScalingActive", "False", "DecisionUnavailable", manager)
    assert "503" in cond(obj, "ScalingActive")[2]
    assert len(cond(obj, "ScalingActive")[2].encode()) <= 2 * 1024
    # then nothing listens at all: a failing source is never read as "no load", so the count is
    # held at 3 — not 1 (what a zero would give) — well past the 4 s window and 12 s stabilization
    s = scaler("h", "llm-h", prom_trigger(f"http://127.0.0.1:{free_port()}", q), annotations=FAST)
    apply(cluster, namespace, s)
    obj = eventually(lambda: (o := es(cluster, namespace, "h")) and "Connection refused" in cond(
        o, "ScalingActive")[2] and o, timeout=30, what=f"connection refused reported; log:\n{mlog(manager)}")
    assert cond(obj, "ScalingActive")[:2] == ("False", "DecisionUnavailable")
    time.sleep(20)
    assert replicas(cluster, namespace, "llm-h") == 3
    assert cond(es(cluster, namespace, "h"), "ScalingActive")[:2] == ("False", "DecisionUnavailable")


def test_i_advisory_mode_never_writes_the_target(
    cluster: Cluster, namespace: str, prometheus: Any, manager: dict[str, Any]
) -> None:
    apply(cluster, namespace, deployment("llm-i", 2))
    q = f'i{{namespace="{namespace}"}}'
    prometheus.set(q, 80)
    apply(
        cluster,
        namespace,
        scaler("i", "llm-i", prom_trigger(prometheus.url, q), annotations=FAST, mode="Advisory"),
    )
    # 80 over 2 replicas at 10 per replica wants 8; apa doubles at most per step: 4 (the target
    # stays at 2, so the advice stays 4)
    eventually(
        lambda: (es(cluster, namespace, "i").get("status") or {}).get("desiredReplicas") == 4,
        timeout=40,
        what=f"advisory decision; log:\n{mlog(manager)}",
    )
    time.sleep(4)
    dep = cluster.kubectl_json("get", "deployment", "llm-i", "-n", namespace)
    assert (dep["spec"]["replicas"], dep["metadata"]["generation"]) == (2, 1)  # never written
    # the advice is bound by apa's rate cap (8 → 4): reported as its own step, in status and explain
    obj = es(cluster, namespace, "i")
    assert cond(obj, "ScalingLimited")[:2] == ("True", "ScaleUpLimit")
    assert obj["status"]["recentDecisions"][-1]["boundBy"] == "RateLimit"
    out = subprocess.run([sys.executable, "-m", "escaler", "explain", "-n", namespace, "i",
                          f"--kubeconfig={cluster.kubeconfig}"], cwd=ROOT, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    rate = out.stdout.split("4. Rate limit", 1)[1].split("5. Step limits", 1)[0]
    assert "ScaleUpLimit" in rate, out.stdout


def test_j_target_deleted_then_recreated(
    cluster: Cluster, namespace: str, prometheus: Any, manager: dict[str, Any]
) -> None:
    q = f'j{{namespace="{namespace}"}}'
    prometheus.set(q, 20)  # 20 at 10 per replica: 2 wanted
    apply(cluster, namespace, deployment("llm-j", 2))
    apply(cluster, namespace, scaler("j", "llm-j", prom_trigger(prometheus.url, q), annotations=FAST))
    wait_cond(cluster, namespace, "j", "AbleToScale", "True", "Synced", manager)
    cluster.kubectl("delete", "deployment", "llm-j", "-n", namespace)
    obj = wait_cond(cluster, namespace, "j", "AbleToScale", "False", "TargetNotFound", manager)
    assert cond(obj, "Validated")[:2] == ("True", "Valid")  # a target error touches AbleToScale only
    # recreated at 1 replica with the load at 40: the scaler recovers on the creation event and
    # scales the new Deployment (1 → 2 by apa's one-step limit, then 4)
    prometheus.set(q, 40)
    apply(cluster, namespace, deployment("llm-j", 1))
    wait_cond(cluster, namespace, "j", "AbleToScale", "True", "Synced", manager)
    eventually(lambda: replicas(cluster, namespace, "llm-j") == 4, timeout=40,
               what=f"the recreated target is scaled; log:\n{mlog(manager)}")


def _wait_message(cluster: Cluster, ns: str, name: str, ctype: str, fragment: str,
                  manager: dict[str, Any]) -> tuple[str, str, str]:
    def seen() -> tuple[str, str, str] | None:
        c = cond(es(cluster, ns, name), ctype)
        return c if fragment in c[2] else None

    eventually(seen, timeout=40, what=f"{ctype} saying {fragment!r}; log:\n{mlog(manager)}")
    return cond(es(cluster, ns, name), ctype)


def test_k_prometheus_bearer_token_from_a_secret(
    cluster: Cluster, namespace: str, manager: dict[str, Any]
) -> None:
    """A token only goes to https endpoints, and only from a Secret labelled as a bearer token."""
    pki = cluster.require_local().pki
    prometheus = PrometheusServer(cert_file=pki / "metrics-server.crt", key_file=pki / "metrics-server.key")
    prometheus.required_token = "s3cret-token"
    prometheus.start()
    try:
        cluster.kubectl(
            "create", "secret", "generic", "prom", "-n", namespace, "--from-literal=token=s3cret-token"
        )
        apply(cluster, namespace, deployment("llm-k", 2))
        q = f'k{{namespace="{namespace}"}}'
        prometheus.set(q, 40)
        trig = prom_trigger(prometheus.url.replace("https://", "http://"), q)
        server = trig["metricsTrigger"]["metrics"][0]["externalServer"]
        server["bearerTokenSecretRef"] = {"name": "prom", "key": "token"}
        # plain http: refused before the Secret is read
        apply(cluster, namespace, scaler("k", "llm-k", trig, annotations=FAST))
        status, reason, message = _wait_message(cluster, namespace, "k", "ScalingActive",
                                                "only sent over https://", manager)
        assert (status, reason) == ("False", "DecisionUnavailable") and "s3cret" not in message
        # https, but the Secret has not opted in
        server["endpoint"] = prometheus.url
        apply(cluster, namespace, scaler("k", "llm-k", trig, annotations=FAST))
        status, reason, message = _wait_message(cluster, namespace, "k", "ScalingActive",
                                                "elasticscaler.io/bearer-token", manager)
        assert (status, reason) == ("False", "DecisionUnavailable") and f"{namespace}/prom" in message
        assert prometheus.queries == [], "a query went out without its token, or with one not opted in"
        # labelled, but the Secret does not list the endpoint's host: still refused (issue 27 item 15)
        cluster.kubectl("label", "secret", "prom", "-n", namespace, "elasticscaler.io/bearer-token=true")
        host = urllib.parse.urlsplit(prometheus.url).hostname
        status, reason, message = _wait_message(cluster, namespace, "k", "ScalingActive",
                                                f"is not a bearer token for host {host}", manager)
        assert (status, reason) == ("False", "DecisionUnavailable")
        assert "elasticscaler.io/bearer-token-hosts" in message
        assert prometheus.queries == [], "the token went to a host the Secret does not list"
        # opted in for that host, a missing key
        cluster.kubectl("annotate", "secret", "prom", "-n", namespace,
                        f"elasticscaler.io/bearer-token-hosts={host}")
        server["bearerTokenSecretRef"] = {"name": "prom", "key": "missing"}
        apply(cluster, namespace, scaler("k", "llm-k", trig, annotations=FAST))
        status, _, message = _wait_message(cluster, namespace, "k", "ScalingActive", "has no key", manager)
        assert status == "False" and "missing" in message
        server["bearerTokenSecretRef"] = {"name": "prom", "key": "token"}
        apply(cluster, namespace, scaler("k", "llm-k", trig, annotations=FAST))
        wait_cond(cluster, namespace, "k", "ScalingActive", "True", "MetricsAvailable", manager)
        eventually(lambda: replicas(cluster, namespace, "llm-k") == 4, timeout=40,
                   what="scaled with the token")
    finally:
        prometheus.stop()
