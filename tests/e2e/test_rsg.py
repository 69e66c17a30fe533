"""ResourceScalingGroup on the real control plane (issue 11, docs/guide/resourcescalinggroup.md).

One manager (``python -m escaler manager``, as a user runs it) serves every test of this module.
The local control plane has no LeaderWorkerSet controller: the module installs the LWS CRD (with
its ``scale`` subresource, as upstream declares it) and the tests play its controller where
readiness matters (``lws_controller``: an LWS clone's status reports its replicas ready, as the LWS
controller would once kwok's pods are Ready). Deployment clones get real pods, made Ready by kwok
at once.

* the shipped sample, applied as is (with its two member workloads created), reaches
  ``Ready=True`` with both groups' clones ready, and ``kubectl get rsg`` shows Strategy/Groups/Ready;
* an ElasticScaler targeting an RSG scales it through ``/scale`` and the members follow, in both
  modes (InplaceScaling: the members' replicas; GroupReplication: clone Deployments appear);
* GroupReplication scale-down removes the least-loaded group per the fake Prometheus, and
  deleting the RSG garbage-collects its clones (kube-controller-manager's garbage collector);
* a member write refused by a ValidatingAdmissionPolicy leaves ``Ready=False/MemberWriteFailed``
  and the member's message naming it and the refusal, and recovers once the policy is lifted;
* GroupReplication is bounded (issue 27 item 3): 40 groups are created in passes of at most 16
  clone creates (counted in the audit log, a pass ending at the RSG's status write), a member whose
  clone would exceed 256 KiB is refused with ``TemplateTooLarge``, and ``--max-clones-per-namespace``
  stops every RSG of a namespace together at the limit with ``CloneLimitReached``.

Latencies are printed (``[rsg]`` lines).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from .conftest import ROOT, Cluster, eventually, wait_synced
from .es_helpers import AuditLog, Manager, apply, deployment, hold, replicas, start_manager

pytestmark = pytest.mark.e2e

RSG_API = "autoscaling.openfuyao.com/v1alpha1"
LWS_API = "leaderworkerset.x-k8s.io/v1"
SAMPLE = ROOT / "manifests" / "samples" / "resourcescalinggroup.yaml"
FAST = {"elasticscaler.io/metrics.windowSeconds": "4"}

LWS_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "leaderworkersets.leaderworkerset.x-k8s.io"},
    "spec": {
        "group": "leaderworkerset.x-k8s.io", "scope": "Namespaced",
        "names": {"kind": "LeaderWorkerSet", "listKind": "LeaderWorkerSetList", "plural": "leaderworkersets",
                  "singular": "leaderworkerset", "shortNames": ["lws"]},
        "versions": [{
            "name": "v1", "served": True, "storage": True,
            "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
            "subresources": {"status": {}, "scale": {"specReplicasPath": ".spec.replicas",
                                                     "statusReplicasPath": ".status.replicas",
                                                     "labelSelectorPath": ".status.hpaPodSelector"}},
        }],
    },
}


def lws(name: str, replicas: int) -> dict[str, Any]:
    return {"apiVersion": LWS_API, "kind": "LeaderWorkerSet", "metadata": {"name": name},
            "spec": {"replicas": replicas, "leaderWorkerTemplate": {
                "size": 1, "workerTemplate": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [
                    {"name": "main", "image": "registry.local/llm:1"}]}}}}}


def rsg(name: str, members: list[dict[str, Any]], *, replicas: int, strategy: str,
        prometheus: dict[str, Any] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"strategy": strategy, "replicas": replicas, "members": members}
    if prometheus is not None:
        spec["scaleDown"] = {"prometheus": prometheus}
    return {"apiVersion": RSG_API, "kind": "ResourceScalingGroup", "metadata": {"name": name}, "spec": spec}


def member(name: str, deploy: str, per_group: int) -> dict[str, Any]:
    return {"name": name, "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": deploy},
            "replicasPerGroup": per_group}


def es_on_rsg(name: str, target: str, endpoint: str, query: str) -> dict[str, Any]:
    """An ElasticScaler on an RSG: one group per 10 of the query's value."""
    return {
        "apiVersion": "elasticscaler.io/v1alpha1", "kind": "ElasticScaler",
        "metadata": {"name": name, "annotations": FAST},
        "spec": {"targetRef": {"apiVersion": RSG_API, "kind": "ResourceScalingGroup", "name": target},
                 "minReplicas": 1, "maxReplicas": 5, "trigger": {"type": "MetricsTrigger", "metricsTrigger": {
                     "scalingAlgorithm": "apa", "metrics": [{"type": "ExternalServer", "externalServer": {
                         "endpoint": endpoint, "query": query, "timeoutSeconds": 2,
                         "target": {"type": "AverageValue", "averageValue": "10"}}}]}}},
    }


def get_rsg(cluster: Cluster, ns: str, name: str) -> dict[str, Any]:
    return dict(cluster.kubectl_json("get", "resourcescalinggroup", name, "-n", ns))


def cond(obj: dict[str, Any], ctype: str) -> tuple[str, str, str]:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c["type"] == ctype:
            return c["status"], c["reason"], c.get("message", "")
    return "", "", ""


def rsg_state(cluster: Cluster, ns: str, name: str) -> str:
    st = get_rsg(cluster, ns, name).get("status") or {}
    return json.dumps({k: st.get(k) for k in ("replicas", "readyReplicas", "members", "conditions")})


def clones(cluster: Cluster, ns: str, kind: str = "deployment") -> list[str]:
    out = cluster.kubectl("get", kind, "-n", ns, "-l", "autoscaling.openfuyao.com/rsg", "-o",
                          "jsonpath={.items[*].metadata.name}")
    return sorted(out.split())


def wait_rsg(cluster: Cluster, ns: str, name: str, pred: Any, what: str, m: Manager,
             timeout: float = 60) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        obj = get_rsg(cluster, ns, name)
        return obj if pred(obj) else None

    try:
        return dict(eventually(check, timeout=timeout, interval=0.3, what=what))
    except AssertionError as e:
        raise AssertionError(f"{e}; rsg: {rsg_state(cluster, ns, name)}; log:\n{m.output(3000)}") from None


@pytest.fixture(scope="module")
def lws_crd(cluster: Cluster) -> None:
    cluster.apply(LWS_CRD)
    cluster.wait_established("leaderworkersets.leaderworkerset.x-k8s.io")


@pytest.fixture
def manager(cluster: Cluster, namespace: str, lws_crd: None,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[Manager]:
    m = start_manager(cluster, tmp_path_factory.mktemp("rsg-manager"), user="escaler-rsg", api=False,
                      namespace=namespace)
    wait_synced(m.proc, m.log)
    try:
        yield m
    finally:
        m.stop()


@pytest.fixture
def lws_controller(cluster: Cluster, namespace: str) -> Iterator[None]:
    """Plays the LeaderWorkerSet controller in ``namespace``: each LWS reports its replicas ready."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            items = json.loads(cluster.kubectl("get", "lws", "-n", namespace, "-o", "json", check=False)
                               or '{"items": []}')["items"]
            for o in items:
                n = o["spec"].get("replicas", 1)
                st = o.get("status") or {}
                if st.get("readyReplicas") != n or st.get("replicas") != n:
                    name = o["metadata"]["name"]
                    cluster.kubectl("patch", "lws", name, "-n", namespace, "--subresource=status",
                                    "--type=merge", "-p", json.dumps({"status": {
                                        "replicas": n, "readyReplicas": n, "updatedReplicas": n,
                                        "hpaPodSelector": f"leaderworkerset.sigs.k8s.io/name={name}"}}),
                                    check=False)
            stop.wait(0.5)

    t = threading.Thread(target=loop, daemon=True)
    t.start()
    try:
        yield
    finally:
        stop.set()
        t.join(10)


def test_the_shipped_sample_reaches_a_healthy_state(cluster: Cluster, namespace: str, manager: Manager,
                                                     lws_controller: None) -> None:
    ns = namespace
    apply(cluster, ns, deployment("llama-prefill", 0))
    apply(cluster, ns, lws("llama-decode", 0))
    t0 = time.monotonic()
    cluster.kubectl("apply", "-n", ns, "-f", str(SAMPLE))
    obj = wait_rsg(cluster, ns, "llama-pd", lambda o: cond(o, "Ready")[:2] == ("True", "AllGroupsReady"),
                   "the sample RSG Ready", manager, timeout=90)
    print(f"\n[rsg] sample: applied -> Ready=True (2 groups, clones ready) in {time.monotonic() - t0:.2f}s")
    st = obj["status"]
    assert (st["replicas"], st["readyReplicas"]) == (2, 2)
    assert st["selector"] == "autoscaling.openfuyao.com/rsg=llama-pd"
    assert clones(cluster, ns) == ["prefill-g0", "prefill-g1"]
    assert clones(cluster, ns, "lws") == ["decode-g0", "decode-g1"]
    assert replicas(cluster, ns, "prefill-g1") == 2
    assert [g["index"] for g in st["groups"]] == [0, 1] and all(g["ready"] for g in st["groups"])
    # the template is never written; the clones' pods are selected by the RSG's selector
    assert replicas(cluster, ns, "llama-prefill") == 0
    pods = cluster.kubectl_json("get", "pods", "-n", ns, "-l", st["selector"])["items"]
    assert len(pods) == 4, [p["metadata"]["name"] for p in pods]
    table = cluster.kubectl("get", "resourcescalinggroups", "-n", ns)
    header, row = table.splitlines()[:2]
    assert header.split()[:4] == ["NAME", "STRATEGY", "GROUPS", "READY"], table
    assert row.split()[:4] == ["llama-pd", "GroupReplication", "2", "2"], table
    print(f"[rsg] kubectl get resourcescalinggroups:\n{table}")


def test_an_elasticscaler_scales_an_inplace_rsg_through_scale(cluster: Cluster, namespace: str,
                                                              manager: Manager, prometheus: Any) -> None:
    ns, q = namespace, f'sum(load{{namespace="{namespace}"}})'
    apply(cluster, ns, deployment("prefill", 2))
    apply(cluster, ns, deployment("decode", 1))
    apply(cluster, ns, rsg("pd", [member("prefill", "prefill", 2), member("decode", "decode", 1)], replicas=1,
                           strategy="InplaceScaling"))
    wait_rsg(cluster, ns, "pd", lambda o: cond(o, "Ready")[0] == "True", "the RSG Ready", manager)
    prometheus.set(q, 10)
    apply(cluster, ns, es_on_rsg("es", "pd", prometheus.url, q))
    time.sleep(3)
    t0 = time.monotonic()
    prometheus.set(q, 30)  # three groups
    wait_rsg(cluster, ns, "pd", lambda o: o["spec"]["replicas"] == 3, "the ElasticScaler's /scale write",
             manager)
    t_scale = time.monotonic() - t0
    eventually(lambda: (replicas(cluster, ns, "prefill"), replicas(cluster, ns, "decode")) == (6, 3),
               timeout=30, what="the members at 3 groups")
    t_members = time.monotonic() - t0
    obj = wait_rsg(cluster, ns, "pd", lambda o: (o.get("status") or {}).get("readyReplicas") == 3,
                   "3 ready groups", manager)
    print(f"\n[rsg] inplace: metric step -> RSG spec.replicas 3 in {t_scale:.2f}s, members 6/3 in "
          f"{t_members:.2f}s, "
          f"3 groups ready in {time.monotonic() - t0:.2f}s")
    rows = {r["name"]: r for r in obj["status"]["members"]}
    assert rows["prefill"]["desiredReplicas"] == 6 and rows["decode"]["desiredReplicas"] == 3


def test_group_replication_scale_up_least_loaded_scale_down_and_gc(
        cluster: Cluster, namespace: str, manager: Manager, prometheus: Any) -> None:
    ns, q = namespace, f'sum(load{{namespace="{namespace}"}})'
    rank_q = f'sum by (group) (load{{namespace="{namespace}"}})'
    apply(cluster, ns, deployment("prefill", 0))
    apply(cluster, ns, deployment("decode", 0))
    apply(cluster, ns, rsg("pd", [member("prefill", "prefill", 2), member("decode", "decode", 1)], replicas=1,
                           strategy="GroupReplication",
                           prometheus={"endpoint": prometheus.url, "query": rank_q}))
    wait_rsg(cluster, ns, "pd", lambda o: cond(o, "Ready")[0] == "True", "one group Ready", manager)
    assert clones(cluster, ns) == ["decode-g0", "prefill-g0"]
    prometheus.set(q, 10)
    apply(cluster, ns, es_on_rsg("es", "pd", prometheus.url, q))
    time.sleep(3)
    t0 = time.monotonic()
    prometheus.set(q, 30)
    want = sorted(f"{m}-g{i}" for m in ("prefill", "decode") for i in range(3))
    eventually(lambda: clones(cluster, ns) == want, timeout=60, what="3 groups of clones")
    t_up = time.monotonic() - t0
    wait_rsg(cluster, ns, "pd", lambda o: (o.get("status") or {}).get("readyReplicas") == 3, "3 ready",
             manager)
    print(f"\n[rsg] group replication: metric step -> 3 groups of clones in {t_up:.2f}s, ready in "
          f"{time.monotonic() - t0:.2f}s")

    # scale-down: the fake Prometheus says group 1 is the least loaded
    cluster.kubectl("delete", "elasticscaler", "es", "-n", ns)
    prometheus.set(rank_q, [({"group": "0"}, 4.0), ({"group": "1"}, 0.5), ({"group": "2"}, 9.0)])
    t0 = time.monotonic()
    cluster.kubectl("scale", "resourcescalinggroup", "pd", "-n", ns, "--replicas=2")
    left = ["decode-g0", "decode-g2", "prefill-g0", "prefill-g2"]
    eventually(lambda: clones(cluster, ns) == left, timeout=30, what="group 1 removed")
    print(f"[rsg] scale-down 3 -> 2: least-loaded group 1 removed in {time.monotonic() - t0:.2f}s")
    obj = wait_rsg(cluster, ns, "pd", lambda o: cond(o, "ScaleDownRanking")[:2] == ("True", "LeastLoaded")
                   and (o.get("status") or {}).get("replicas") == 2, "LeastLoaded condition", manager)
    assert "1=0.5" in cond(obj, "ScaleDownRanking")[2]
    assert rank_q in prometheus.queries

    # deleting the RSG garbage-collects its clones (ownerReferences; kube-controller-manager's GC)
    t0 = time.monotonic()
    cluster.kubectl("delete", "resourcescalinggroup", "pd", "-n", ns)
    eventually(lambda: clones(cluster, ns) == [], timeout=60, what="the clones garbage-collected")
    print(f"[rsg] RSG deleted -> clones garbage-collected in {time.monotonic() - t0:.2f}s")
    assert replicas(cluster, ns, "prefill") == 0, "the templates stay"


def _freeze(cluster: Cluster, ns: str, target: str) -> str:
    """A ValidatingAdmissionPolicy refusing replica writes to ``target`` in ``ns``; returns its name."""
    name = f"rsg-e2e-freeze-{ns}"
    cluster.apply([
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
         "metadata": {"name": name},
         "spec": {"failurePolicy": "Fail", "matchConstraints": {"resourceRules": [
             {"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["UPDATE"],
              "resources": ["deployments/scale", "deployments"]}]},
             "validations": [{"expression": f"object.metadata.name != '{target}'",
                              "message": f"replica writes to {target} are frozen by the e2e test"}]}},
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
         "metadata": {"name": name},
         "spec": {"policyName": name, "validationActions": ["Deny"], "matchResources": {
             "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}}}}},
    ])
    # in force once a server-side dry run is refused
    def refused() -> bool:
        out = cluster.kubectl("scale", "deployment", target, "-n", ns, "--replicas=7", "--dry-run=server",
                              check=False)
        return not out.strip()

    eventually(refused, timeout=30, what="the policy in force")
    return name


def test_a_refused_member_write_is_reported_and_recovers(cluster: Cluster, namespace: str,
                                                          manager: Manager) -> None:
    ns = namespace
    apply(cluster, ns, deployment("prefill", 2))
    apply(cluster, ns, deployment("decode", 1))
    apply(cluster, ns, rsg("pd", [member("prefill", "prefill", 2), member("decode", "decode", 1)], replicas=1,
                           strategy="InplaceScaling"))
    wait_rsg(cluster, ns, "pd", lambda o: cond(o, "Ready")[0] == "True", "the RSG Ready", manager)
    policy = _freeze(cluster, ns, "decode")
    cluster.kubectl("scale", "resourcescalinggroup", "pd", "-n", ns, "--replicas=2")
    obj = wait_rsg(cluster, ns, "pd", lambda o: cond(o, "Ready")[:2] == ("False", "MemberWriteFailed"),
                   "MemberWriteFailed", manager)
    decode = {r["name"]: r for r in obj["status"]["members"]}["decode"]
    assert "member decode" in decode["message"] and f"Deployment {ns}/decode" in decode["message"]
    assert "frozen by the e2e test" in decode["message"], decode
    assert "frozen by the e2e test" in cond(obj, "Ready")[2]
    assert replicas(cluster, ns, "prefill") == 4, "prefill (first in list order) is written"
    assert replicas(cluster, ns, "decode") == 1
    print(f"\n[rsg] refused write: Ready=False/MemberWriteFailed: {cond(obj, 'Ready')[2]}")

    t0 = time.monotonic()
    cluster.kubectl("delete", "validatingadmissionpolicybinding", policy)
    cluster.kubectl("delete", "validatingadmissionpolicy", policy)
    eventually(lambda: replicas(cluster, ns, "decode") == 2, timeout=60,
               what="decode written after the refusal is lifted")
    obj = wait_rsg(cluster, ns, "pd", lambda o: cond(o, "Ready")[0] == "True", "Ready again", manager)
    print(f"[rsg] refusal lifted -> decode written and Ready=True in {time.monotonic() - t0:.2f}s")
    assert all("message" not in r for r in obj["status"]["members"])
    assert manager.alive(), manager.output()


# --- issue 27, item 3: GroupReplication as an amplifier -----------------------------------------

# the manager's defaults (escaler.reconcilers.rsg.limits), as a user runs it
WRITES_PER_SYNC = 16
TEMPLATE_BYTES = 256 * 1024


def _create(cluster: Cluster, ns: str, obj: dict[str, Any]) -> None:
    """``kubectl create``: a large object has no room for apply's last-applied annotation."""
    cluster.kubectl("create", "-n", ns, "-f", "-", input=json.dumps(obj))


def _passes(cluster: Cluster, ns: str, user: str, since: int) -> list[int]:
    """The manager's clone creates in ``ns`` grouped by pass: a pass ends at its RSG status write."""
    runs, current = [], 0
    for ev in AuditLog.of(cluster).writes(users=user, namespace=ns, since=since):
        ref = ev["objectRef"]
        if ref.get("resource") == "deployments" and ev["verb"] == "create" and not ref.get("subresource"):
            current += 1
        elif ref.get("resource") == "resourcescalinggroups" and ref.get("subresource") == "status":
            runs.append(current)
            current = 0
    return [n for n in [*runs, current] if n]


def test_group_replication_creates_in_passes_of_at_most_the_bound(cluster: Cluster, namespace: str,
                                                                   manager: Manager) -> None:
    """Issue 27 item 3 with the manager's defaults: 40 groups are created 16 clones per pass at most
    (before the bound, one reconcile created all 40)."""
    ns, groups = namespace, 40
    audit = AuditLog.of(cluster)
    apply(cluster, ns, deployment("small", 0, cpu="1m"))
    since = audit.offset()
    t0 = time.monotonic()
    apply(cluster, ns, rsg("many", [member("small", "small", 1)], replicas=groups,
                           strategy="GroupReplication"))
    want = sorted(f"small-g{i}" for i in range(groups))
    eventually(lambda: clones(cluster, ns) == want, timeout=90, interval=0.5, what=f"{groups} clones")
    print(f"\n[rsg] {groups} groups created in {time.monotonic() - t0:.2f}s")
    wait_rsg(cluster, ns, "many", lambda o: (o.get("status") or {}).get("replicas") == groups,
             "status.replicas", manager)
    passes = _passes(cluster, ns, manager.user, since)
    print(f"[rsg] clone creates per pass: {passes}")
    assert sum(passes) == groups, f"each clone created once: {passes}"
    assert max(passes) <= WRITES_PER_SYNC, f"a pass created {max(passes)} clones (bound {WRITES_PER_SYNC})"
    assert len(passes) >= 3, passes


def test_group_replication_refuses_an_oversized_template(cluster: Cluster, namespace: str,
                                                         manager: Manager) -> None:
    """With the manager's defaults, a member whose clone would exceed 256 KiB is refused
    (TemplateTooLarge naming the member and the rule) and nothing of it is created (before the
    limit, the 296 KiB template was cloned)."""
    ns = namespace
    huge = deployment("huge", 0, cpu="1m")
    huge["spec"]["template"]["spec"]["containers"][0]["args"] = ["x" * (TEMPLATE_BYTES + 40 * 1024)]
    _create(cluster, ns, huge)
    apply(cluster, ns, rsg("big", [member("huge", "huge", 1)], replicas=2, strategy="GroupReplication"))
    obj = wait_rsg(cluster, ns, "big", lambda o: cond(o, "Ready")[1] in ("TemplateTooLarge", "AllGroupsReady",
                                                                         "GroupsNotReady"),
                   "the oversized template refused", manager)
    status, reason, message = cond(obj, "Ready")
    assert (status, reason) == ("False", "TemplateTooLarge"), (status, reason, message)
    assert message.startswith("spec.members[0] (huge): Deployment"), message
    assert f"above the {TEMPLATE_BYTES} bytes" in message and "--max-clone-template-bytes" in message
    assert not [n for n in clones(cluster, ns) if n.startswith("huge-")], "nothing of it created"


def test_group_replication_stops_at_the_namespace_bound(cluster: Cluster, namespace: str, lws_crd: None,
                                                        tmp_path_factory: pytest.TempPathFactory) -> None:
    """``--max-clones-per-namespace=6``: an RSG of 5 groups of 2 members gets 3 groups, a second
    RSG of the namespace none; both say CloneLimitReached naming spec.replicas and the limit, and the
    namespace never holds more than 6 clones."""
    ns = namespace
    m = start_manager(cluster, tmp_path_factory.mktemp("rsg-cap"), user="escaler-rsg-cap", api=False,
                      namespace=ns, extra_args=["--max-clones-per-namespace=6"])
    wait_synced(m.proc, m.log)
    try:
        apply(cluster, ns, deployment("prefill", 0, cpu="1m"))
        apply(cluster, ns, deployment("decode", 0, cpu="1m"))
        apply(cluster, ns, rsg("pd", [member("prefill", "prefill", 1), member("decode", "decode", 1)],
                               replicas=5, strategy="GroupReplication"))
        obj = wait_rsg(cluster, ns, "pd", lambda o: cond(o, "Ready")[1] == "CloneLimitReached", "refused", m)
        message = cond(obj, "Ready")[2]
        assert message.startswith("spec.replicas: 5 groups of 2 members need 10 clones"), message
        assert "at most 6 clones" in message and "--max-clones-per-namespace" in message
        assert "3 groups exist, the other 2 are refused" in message, message
        apply(cluster, ns, rsg("more", [member("other", "prefill", 1)], replicas=2,
                               strategy="GroupReplication"))
        obj = wait_rsg(cluster, ns, "more", lambda o: cond(o, "Ready")[1] == "CloneLimitReached", "refused",
                       m)
        assert "0 groups exist, the other 2 are refused" in cond(obj, "Ready")[2]
        hold(lambda: len(clones(cluster, ns)) == 6, 5, what="6 clones in the namespace, never more")
        assert (get_rsg(cluster, ns, "pd").get("status") or {}).get("replicas") == 3
    finally:
        m.stop()
