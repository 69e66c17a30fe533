"""ElasticScaler with realistic pods: LLM servers that load their weights for a while before they
are Ready, and pods Pending because no GPU is free (issue 8, items 1 and 13;
docs/concepts.md#the-decision-pipeline step 5).

kwok makes pods Ready at once; ``hack/cluster.py`` adds a kwok Stage so that a pod annotated
``escaler.test/ready-after: "30s"`` is Running-but-not-Ready first and Ready 30 s after it started.
Pods that request ``nvidia.com/gpu`` beyond what the nodes offer stay Pending, and the real
kube-scheduler marks them ``PodScheduled=False/Unschedulable`` with its message. The first two
tests prove that infrastructure; the others assert what docs/concepts.md#the-decision-pipeline says a user
sees:

* only a *template* rollout is ``RolloutInProgress``: a StatefulSet held at its ``partition`` and a
  paused Deployment with a pending template change are still scaled at once (item 1);
* replicas that are not Ready yet are capacity on the way: a surge that needs two apa steps takes
  the second before the first step's pods are Ready (item 13);
* Unschedulable pods are reported as ``AbleToScale=True/InsufficientCapacity`` with the scheduler's
  message and hold further scale-up, but never a scale-down (item 13).

One manager (poll 2 s, its own user) serves the module.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest

from .conftest import Cluster, eventually, wait_synced
from .es_helpers import (
    QUICK,
    AuditLog,
    Manager,
    add_gpu_node,
    apply,
    cond,
    count_scale_writes,
    deployment,
    es,
    external_metric,
    generation,
    gpu_node_pool,
    hold,
    is_ready,
    metrics_trigger,
    pod_cond,
    pods,
    replicas,
    scaler,
    scaler_state,
    start_manager,
    statefulset,
    unschedulable,
    wait_cond,
    wait_ready,
    wait_replicas,
    wait_scheduler_words_reported,
    workload,
)

pytestmark = pytest.mark.e2e

# scale-down after 4 s instead of 300 s: these tests are about guards, not stabilization
SHORT_DOWN = {**QUICK, "elasticscaler.io/behavior.scaleDown.stabilizationWindowSeconds": "4"}
# apa on the External metric "queue" of the test's namespace, 10 per replica
QUEUE = metrics_trigger(external_metric("queue", "10"))
# the test's own kubectl (hack/cluster.py's admin client certificate)
ADMIN_USER = "escaler-admin"


@pytest.fixture
def manager(cluster: Cluster, namespace: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Manager]:
    m = start_manager(cluster, tmp_path_factory.mktemp("es-realistic"), user="escaler-realistic",
                      namespace=namespace)
    wait_synced(m.proc, m.log)
    try:
        yield m
    finally:
        m.stop()


@pytest.fixture
def gpu_node(cluster: Cluster, namespace: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """A kwok node with 2 GPUs that only this test's pods (``pool`` fields) may use."""
    node = add_gpu_node(cluster, namespace, gpus=2)
    try:
        yield gpu_node_pool(namespace)
    finally:
        cluster.require_local().delete_node(node)


def _wall(ts: str) -> float:
    return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()


# --- the infrastructure ------------------------------------------------------------------------


def test_kwok_pod_is_running_not_ready_until_its_ready_after_delay(cluster: Cluster, namespace: str) -> None:
    delay = 8
    apply(cluster, namespace, deployment("slow", 1, ready_after=f"{delay}s"))
    apply(cluster, namespace, deployment("fast", 1))
    # without the annotation kwok's shipped stage still makes a pod Ready at once
    eventually(lambda: [p for p in pods(cluster, namespace, "app=fast") if is_ready(p)], timeout=30,
               what="the un-annotated pod Ready")
    # (wall time the answer arrived, pod) observations of the annotated pod, every 0.2 s
    seen: list[tuple[float, dict[str, Any]]] = []

    def observe() -> dict[str, Any] | None:
        ps = pods(cluster, namespace, "app=slow")
        seen.append((time.time(), ps[0] if ps else {}))
        return ps[0] if ps and is_ready(ps[0]) else None

    ready = eventually(observe, timeout=60, interval=0.2, what=f"the annotated pod Ready; seen {seen[-1:]}")
    started = _wall(ready["status"]["startTime"])
    running = [p for _, p in seen if (p.get("status") or {}).get("phase") == "Running" and not is_ready(p)]
    assert running, "the pod was never seen Running and not Ready"
    first = running[0]
    assert pod_cond(first, "Ready")["reason"] == "ContainersNotReady"
    assert pod_cond(first, "ContainersReady")["status"] == "False"
    containers = first["status"]["containerStatuses"]
    assert [(c["ready"], c["started"], "running" in c["state"]) for c in containers] == [(False, True, True)]
    assert first["status"]["podIP"] and first["status"]["startTime"] == ready["status"]["startTime"]
    # not Ready whenever seen before startTime + delay (startTime has 1 s resolution), and still
    # not Ready late in the delay, not only at its start
    assert all(not is_ready(p) for t, p in seen if t < started + delay)
    assert any(not is_ready(p) for t, p in seen if started + delay - 2.5 <= t < started + delay)
    # Ready at startTime + delay: the transition is stamped in whole seconds, so delay or delay+1
    became_ready = _wall(pod_cond(ready, "Ready")["lastTransitionTime"]) - started
    assert became_ready in (delay, delay + 1), became_ready
    # the Deployment counts the pod Ready once the ReplicaSet and Deployment controllers have seen
    # it: a moment after the pod's own condition, so waited for, not read once
    eventually(lambda: (workload(cluster, namespace, "slow").get("status") or {}).get("readyReplicas") == 1,
               timeout=30, what="the Deployment's readyReplicas 1")


def test_kwok_gpu_request_stays_pending_unschedulable(
    cluster: Cluster, namespace: str, gpu_node: tuple[str, dict[str, Any]]
) -> None:
    # no node of the shared pool offers a GPU: Pending, PodScheduled=False/Unschedulable
    apply(cluster, namespace, deployment("nogpu", 1, gpus=1))
    pod = eventually(lambda: [p for p in pods(cluster, namespace, "app=nogpu") if unschedulable(p)],
                     timeout=30, what="an Unschedulable GPU pod")[0]
    assert "Insufficient nvidia.com/gpu" in pod_cond(pod, "PodScheduled")["message"]
    assert pod["status"]["phase"] == "Pending" and not pod["spec"].get("nodeName")
    # a node pool of the test's own with 2 GPUs: 2 pods run on it, the third waits for a GPU
    node, pool = gpu_node
    apply(cluster, namespace, deployment("gpu", 3, gpus=1, **pool))

    def split() -> tuple[list[str], list[str]] | None:
        ps = pods(cluster, namespace, "app=gpu")
        ok = sorted(p["spec"].get("nodeName", "") for p in ps if is_ready(p))
        waiting = [pod_cond(p, "PodScheduled")["message"] for p in ps if unschedulable(p)]
        return (ok, waiting) if len(ok) == 2 and len(waiting) == 1 else None

    ok, waiting = eventually(split, timeout=30, what="2 GPU pods Ready on the pool node, 1 Unschedulable")
    assert ok == [node, node]
    assert "Insufficient nvidia.com/gpu" in waiting[0]


def test_audit_log_counts_each_writers_replica_writes(
    cluster: Cluster, namespace: str, fake_metrics: Any, manager: Manager
) -> None:
    audit = AuditLog.of(cluster)
    since = audit.offset()
    apply(cluster, namespace, deployment("counted", 2))
    wait_ready(cluster, namespace, "counted", 2)
    assert generation(cluster, namespace, "counted") == 1
    cluster.kubectl("scale", "deployment/counted", "--replicas=3", "-n", namespace)  # the admin, via /scale
    assert generation(cluster, namespace, "counted") == 2
    wait_ready(cluster, namespace, "counted", 3)
    fake_metrics.set_external(namespace, "queue", 60)  # needs 6: one apa step from 3
    apply(cluster, namespace, scaler("s", "counted", QUEUE, annotations=SHORT_DOWN))
    wait_replicas(cluster, namespace, "counted", 6, scaler_name="s", timeout=30)
    time.sleep(2 * 2.0)  # two more polls: a manager rewriting the same count would show here
    mine = audit.scale_writes(manager.user, namespace, "counted", since=since)
    assert [(e["verb"], e["objectRef"].get("subresource")) for e in mine] in (
        [("update", "scale")], [("patch", "scale")])
    assert count_scale_writes(cluster, manager.user, namespace, "counted") == 1
    assert len(audit.scale_writes(ADMIN_USER, namespace, "counted", since=since)) == 1
    assert count_scale_writes(cluster, manager.user, namespace, "other") == 0
    assert generation(cluster, namespace, "counted") == 3


# --- item 1: the rollout guard follows the workload's own rules -----------------------------------


def test_statefulset_held_at_its_partition_is_scaled_at_once(
    cluster: Cluster, namespace: str, fake_metrics: Any, manager: Manager
) -> None:
    apply(cluster, namespace, statefulset("sts", 2, partition=2))
    wait_ready(cluster, namespace, "sts", 2, kind="statefulset")
    # a new template: partition 2 keeps both existing pods (ordinals 0, 1) on the old revision
    cluster.kubectl("patch", "statefulset", "sts", "-n", namespace, "--type=merge", "-p",
                    json.dumps({"spec": {"template": {"metadata": {"annotations": {"rev": "2"}}}}}))

    def partitioned() -> dict[str, Any] | None:
        s = workload(cluster, namespace, "sts", "statefulset")
        st = s.get("status") or {}
        done = st.get("observedGeneration") == s["metadata"]["generation"] and st.get("updateRevision") \
            and st.get("updateRevision") != st.get("currentRevision")
        return st if done else None

    st = eventually(partitioned, timeout=30, what="the partitioned rollout observed")
    assert (st["replicas"], st.get("updatedReplicas", 0), st["readyReplicas"]) == (2, 0, 2)
    fake_metrics.set_external(namespace, "queue", 40)  # 40 at 10 per replica: 4
    apply(cluster, namespace, scaler("s", "sts", QUEUE, kind="StatefulSet", annotations=SHORT_DOWN))
    wait_replicas(cluster, namespace, "sts", 4, kind="statefulset", scaler_name="s", timeout=30,
                  what="the StatefulSet scaled to 4 during its partitioned rollout")
    wait_cond(cluster, namespace, "s", "AbleToScale", "True", "Synced", manager, timeout=20)
    assert not es(cluster, namespace, "s")["status"].get("deferredSince")


def test_paused_deployment_with_a_pending_template_change_is_scaled_at_once(
    cluster: Cluster, namespace: str, fake_metrics: Any, manager: Manager
) -> None:
    apply(cluster, namespace, deployment("paused", 2))
    wait_ready(cluster, namespace, "paused", 2)
    cluster.kubectl("rollout", "pause", "deployment/paused", "-n", namespace)
    cluster.kubectl("patch", "deployment", "paused", "-n", namespace, "--type=merge", "-p",
                    json.dumps({"spec": {"template": {"metadata": {"annotations": {"rev": "2"}}}}}))

    def observed() -> dict[str, Any] | None:
        d = workload(cluster, namespace, "paused")
        st = d.get("status") or {}
        return st if st.get("observedGeneration") == d["metadata"]["generation"] else None

    st = eventually(observed, timeout=30, what="the paused template change observed")
    # paused: no new ReplicaSet, so no pod runs the new template
    assert (st["replicas"], st.get("updatedReplicas", 0)) == (2, 0)
    fake_metrics.set_external(namespace, "queue", 40)
    apply(cluster, namespace, scaler("s", "paused", QUEUE, annotations=SHORT_DOWN))
    wait_replicas(cluster, namespace, "paused", 4, scaler_name="s", timeout=30,
                  what="the paused Deployment scaled to 4")
    wait_cond(cluster, namespace, "s", "AbleToScale", "True", "Synced", manager, timeout=20)
    assert workload(cluster, namespace, "paused")["spec"]["paused"] is True


# --- item 13: starting pods are capacity on the way; Unschedulable pods are reported ---------------


def test_second_step_of_a_surge_is_not_held_by_pods_still_loading(
    cluster: Cluster, namespace: str, fake_metrics: Any, manager: Manager
) -> None:
    load_seconds = 30
    apply(cluster, namespace, deployment("llm", 2, ready_after=f"{load_seconds}s"))
    wait_ready(cluster, namespace, "llm", 2, timeout=load_seconds + 30)
    fake_metrics.set_external(namespace, "queue", 20)  # at target: 2
    apply(cluster, namespace, scaler("s", "llm", QUEUE, annotations=SHORT_DOWN))
    wait_cond(cluster, namespace, "s", "ScalingActive", "True", "MetricsAvailable", manager)
    assert replicas(cluster, namespace, "llm") == 2
    # needs 8; apa's default scaleUpRate 2 makes it two steps: 2 -> 4 -> 8
    fake_metrics.set_external(namespace, "queue", 80)
    eventually(lambda: replicas(cluster, namespace, "llm") >= 4, timeout=20, interval=0.2,
               what=f"the first step; {scaler_state(cluster, namespace, 's')}")
    first_step = time.monotonic()

    # the first step's pods are Ready only load_seconds after they start: the second step must not
    # wait for them (polls every 2 s; 20 s leaves a wide margin and is still well before they are Ready)
    d = wait_replicas(cluster, namespace, "llm", 8, scaler_name="s", timeout=20,
                      what="the second step (4 -> 8) while the first step's pods load")
    took = time.monotonic() - first_step
    ps = pods(cluster, namespace, "app=llm")
    assert took < load_seconds - 5, took
    assert len([p for p in ps if is_ready(p)]) == 2, "the first step's pods were already Ready"
    assert (d.get("status") or {}).get("readyReplicas") == 2
    obj = wait_cond(cluster, namespace, "s", "AbleToScale", "True", "Synced", manager, timeout=10)
    assert not obj["status"].get("deferredSince")
    assert [(x["from"], x["to"]) for x in obj["status"]["recentDecisions"] if x["to"] != x["from"]][-2:] \
        == [(2, 4), (4, 8)]


def test_unschedulable_pods_are_reported_and_hold_further_scale_up(
    cluster: Cluster, namespace: str, fake_metrics: Any, manager: Manager,
    gpu_node: tuple[str, dict[str, Any]],
) -> None:
    _, pool = gpu_node
    apply(cluster, namespace, deployment("gpu", 2, gpus=1, **pool))
    wait_ready(cluster, namespace, "gpu", 2)
    fake_metrics.set_external(namespace, "queue", 20)
    apply(cluster, namespace, scaler("s", "gpu", QUEUE, annotations=SHORT_DOWN))
    wait_cond(cluster, namespace, "s", "ScalingActive", "True", "MetricsAvailable", manager)
    fake_metrics.set_external(namespace, "queue", 40)  # needs 4; the pool has GPUs for 2
    wait_replicas(cluster, namespace, "gpu", 4, scaler_name="s", timeout=20, what="the scale-up to 4")
    waiting = eventually(lambda: (w := [p for p in pods(cluster, namespace, "app=gpu") if unschedulable(p)])
                         and len(w) == 2 and w, timeout=30, what="2 Unschedulable pods")
    message = pod_cond(waiting[0], "PodScheduled")["message"]
    assert "Insufficient nvidia.com/gpu" in message
    # reported, with the scheduler's words, once past the grace period
    obj = wait_cond(cluster, namespace, "s", "AbleToScale", "True", "InsufficientCapacity", manager,
                    timeout=90)
    assert "Insufficient nvidia.com/gpu" in cond(obj, "AbleToScale")[2], cond(obj, "AbleToScale")
    wait_scheduler_words_reported(cluster, namespace, "s", "app=gpu")
    # more load: no further scale-up while pods wait for GPUs
    fake_metrics.set_external(namespace, "queue", 80)
    hold(lambda: replicas(cluster, namespace, "gpu") == 4
         and cond(es(cluster, namespace, "s"), "AbleToScale")[:2] == ("True", "InsufficientCapacity"),
         seconds=12, what="replicas 4 held with AbleToScale=True/InsufficientCapacity")


def test_unschedulable_pods_never_hold_a_scale_down(
    cluster: Cluster, namespace: str, fake_metrics: Any, manager: Manager,
    gpu_node: tuple[str, dict[str, Any]],
) -> None:
    _, pool = gpu_node
    apply(cluster, namespace, deployment("gpu", 4, gpus=1, **pool))  # 2 run, 2 wait for a GPU
    eventually(lambda: len([p for p in pods(cluster, namespace, "app=gpu") if unschedulable(p)]) == 2
               and workload(cluster, namespace, "gpu").get("status", {}).get("readyReplicas") == 2,
               timeout=40, what="2 Ready and 2 Unschedulable pods")
    fake_metrics.set_external(namespace, "queue", 20)  # needs 2
    apply(cluster, namespace, scaler("s", "gpu", QUEUE, annotations=SHORT_DOWN))
    # the 4 s scale-down window, then the write: not a 600 s deferral
    wait_replicas(cluster, namespace, "gpu", 2, scaler_name="s", timeout=30, what="the scale-down 4 -> 2")
    obj = es(cluster, namespace, "s")
    assert not obj["status"].get("deferredSince")
    assert cond(obj, "AbleToScale")[1] != "DeferralTimedOut"
