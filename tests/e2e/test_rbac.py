"""The RBAC in ``manifests/rbac/manager.yaml`` is all the manager needs (issue 9, docs/security.md).

A manager runs as a user outside ``system:masters``, bound to exactly the shipped roles of
``manifests/rbac/manager.yaml`` (the ClusterRole, the leader-election Role in its namespace, and the
``escaler-manager-metrics`` ClusterRole with the one External metric its scalers read, added as
docs/install.md says) and the per-namespace Role of ``manifests/rbac/bearer-tokens.yaml``, with
leader election on. It must lead, scale a
Deployment through ``/scale`` on an External metric, run a ``scalingAlgorithm: HPA`` scaler's
companion HPA, scale a Deployment from an LLMScaler's Prometheus query, write status and Events,
and never be refused: no 403 in the audit log for its
user, and no "forbidden" in its log. A rule missing from the manifest fails this test; a rule too
many is caught by review of the manifest, each rule being explained in docs/security.md.

GroupReplication is a per-namespace opt-in (issue 27 item 3): bound to the shipped ClusterRole
only, a manager creates no clone (``Ready=False/CloneWriteFailed`` says the namespace has not opted
in); once ``manifests/rbac/group-replication.yaml``'s Role is bound in the namespace, it clones.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from .conftest import ROOT, Cluster, eventually
from .es_helpers import (
    QUICK,
    AuditLog,
    Manager,
    apply,
    cond,
    deployment,
    external_metric,
    hold,
    lease_holder,
    metrics_trigger,
    replicas,
    scaler,
    start_manager,
    wait_cond,
)

pytestmark = pytest.mark.e2e

USER = "escaler-rbac"
GROUP = "escaler:managers"
LEASE = "escaler-rbac"
RBAC = "rbac.authorization.k8s.io"


# what a user adds to escaler-manager-metrics for the External metric the scalers below read
QUEUE_METRIC_RULE = {"apiGroups": ["external.metrics.k8s.io"], "resources": ["queue"],
                     "verbs": ["get", "list"]}


def _manifests(names: tuple[str, ...] = ("manager.yaml", "bearer-tokens.yaml")) -> list[dict[str, Any]]:
    """The shipped Roles and ClusterRoles (their bindings name the in-cluster ServiceAccount; this
    test binds the same roles to its own user instead)."""
    docs = []
    for name in names:
        docs += [d for d in yaml.safe_load_all((ROOT / "manifests" / "rbac" / name).read_text())
                 if d and d["kind"] in ("ClusterRole", "Role")]
    for doc in docs:
        if doc["metadata"]["name"] == "escaler-manager-metrics":
            doc["rules"] = [QUEUE_METRIC_RULE]
    return docs


def _bind(cluster: Cluster, ns: str, names: tuple[str, ...] = ("manager.yaml", "bearer-tokens.yaml"),
          group: str = GROUP) -> None:
    """The shipped roles of ``names``, bound to the manager's ``group``: the ClusterRole cluster-wide,
    the Roles in ``ns`` (the manager's namespace, and here also the namespace using bearer-token
    Secrets)."""
    docs = _manifests(names)
    objs: list[dict[str, Any]] = []
    for doc in docs:
        role = copy.deepcopy(doc)
        name = f"{role['metadata']['name']}-{ns}"
        role["metadata"]["name"] = name
        subjects = [{"kind": "Group", "name": group, "apiGroup": RBAC}]
        if role["kind"] == "ClusterRole":
            binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                       "metadata": {"name": name}, "subjects": subjects,
                       "roleRef": {"kind": "ClusterRole", "name": name, "apiGroup": RBAC}}
        else:
            role["metadata"]["namespace"] = ns
            binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                       "metadata": {"name": name, "namespace": ns}, "subjects": subjects,
                       "roleRef": {"kind": "Role", "name": name, "apiGroup": RBAC}}
        objs += [role, binding]
    cluster.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objs}))


def test_the_shipped_rbac_is_enough_for_the_manager(cluster: Cluster, namespace: str, tmp_path: Path,
                                                   fake_metrics: Any, managers: list[Manager],
                                                   prometheus: Any) -> None:
    ns = namespace
    _bind(cluster, ns)
    audit = AuditLog.of(cluster)
    since = audit.offset()
    m = start_manager(cluster, tmp_path, user=USER, groups=(GROUP,), namespace=ns, leader_elect=True,
                      leader_election_id=LEASE, api=False)
    managers.append(m)
    eventually(lambda: lease_holder(cluster, ns, LEASE), timeout=40, what=f"the lease; log:\n{m.output()}")

    # an apa scaler on an External metric: /scale writes, status, Events
    apply(cluster, ns, deployment("llm", 1))
    fake_metrics.set_external(ns, "queue", 10)
    apply(cluster, ns, scaler("s", "llm", metrics_trigger(external_metric("queue", "10")), annotations=QUICK))
    wait_cond(cluster, ns, "s", "ScalingActive", "True", "MetricsAvailable", m)
    fake_metrics.set_external(ns, "queue", 30)
    eventually(lambda: replicas(cluster, ns, "llm") >= 2, timeout=40, what=f"a scale-up; log:\n{m.output()}")

    # a companion HPA
    apply(cluster, ns, deployment("llm-b", 1))
    apply(cluster, ns, scaler("h", "llm-b", metrics_trigger(external_metric("queue", "10"), algorithm="HPA")))
    eventually(lambda: cluster.kubectl("get", "hpa", "-n", ns, "-o", "name", check=False).strip(),
               timeout=40, what=f"the companion HPA; log:\n{m.output()}")

    # an LLMScaler (Prometheus provider): its status and a /scale write
    apply(cluster, ns, deployment("llm-c", 1))
    prometheus.set(f'sum(running{{namespace="{ns}"}})', 24)  # 24 / 8 → 3
    llms_spec = {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "llm-c"},
                 "prometheus": {"endpoint": prometheus.url, "metrics": [
                     {"name": "running", "query": f'sum(running{{namespace="{ns}"}})',
                      "targetPerReplica": 8}]}}
    apply(cluster, ns, {"apiVersion": "llm.escaler.io/v1alpha1", "kind": "LLMScaler",
                        "metadata": {"name": "l"}, "spec": llms_spec})
    eventually(lambda: replicas(cluster, ns, "llm-c") == 3, timeout=40,
               what=f"the LLMScaler's write; log:\n{m.output()}")

    events = json.loads(cluster.kubectl("get", "events.events.k8s.io", "-n", ns, "-o", "json"))["items"]
    assert any(e.get("reportingController", "").startswith("escaler") or
               (e.get("regarding") or {}).get("name") == "s" for e in events), events

    refused = [f"{e.get('verb')} {e.get('requestURI')} -> {e.get('responseStatus', {}).get('code')}"
               for e in audit.events(since)
               if (e.get("user") or {}).get("username") == USER
               and (e.get("responseStatus") or {}).get("code") == 403]
    assert refused == [], refused
    log = m.output(tail=2_000_000).lower()
    assert "forbidden" not in log, m.output(tail=8000)
    assert m.alive(), m.output()


def test_a_companion_hpa_reads_no_metric_the_manager_may_not(
    cluster: Cluster, namespace: str, tmp_path: Path, fake_metrics: Any, managers: list[Manager],
) -> None:
    """Issue 27 item 10: the kube-controller-manager may read every External metric; the manager's
    own account only those ``escaler-manager-metrics`` names. A ``scalingAlgorithm: HPA`` scaler on
    a metric the manager may not read gets no companion HPA (whose values would be mirrored into its
    status): Validated=False/MetricNotGranted names the field, the metric and the ClusterRole. A
    granted metric still gets its companion."""
    ns, user, group = namespace, "escaler-rbac-grants", "escaler:managers-grants"
    _bind(cluster, ns, group=group)
    m = start_manager(cluster, tmp_path, user=user, groups=(group,), namespace=ns, leader_elect=True,
                      leader_election_id=f"{LEASE}-grants", api=False)
    managers.append(m)
    eventually(lambda: lease_holder(cluster, ns, f"{LEASE}-grants"), timeout=40,
               what=f"the lease; log:\n{m.output()}")
    fake_metrics.set_external(ns, "secret", 7)
    apply(cluster, ns, deployment("a", 1))
    apply(cluster, ns, scaler("h", "a", metrics_trigger(external_metric("secret", "10"), algorithm="HPA")))
    obj = wait_cond(cluster, ns, "h", "Validated", "False", "MetricNotGranted", m)
    message = cond(obj, "Validated")[2]
    for part in ("spec.trigger.metricsTrigger.metrics[0].external.metric.name", "'secret'",
                 "escaler-manager-metrics"):
        assert part in message, message
    assert cond(obj, "ScalingActive")[:2] == ("False", "InvalidSpec"), obj["status"]
    assert not (obj["status"].get("currentMetrics") or []), obj["status"]

    def companions() -> list[str]:
        return sorted(cluster.kubectl("get", "hpa", "-n", ns, "-o", "name", check=False).split())

    # a granted metric still gets its companion; the refused one never does
    apply(cluster, ns, deployment("b", 1))
    apply(cluster, ns, scaler("g", "b", metrics_trigger(external_metric("queue", "10"), algorithm="HPA")))
    eventually(lambda: companions() == ["horizontalpodautoscaler.autoscaling/g-hpa"], timeout=40,
               what=f"the granted scaler's companion HPA; log:\n{m.output()}")
    hold(lambda: companions() == ["horizontalpodautoscaler.autoscaling/g-hpa"], seconds=5,
         what="no companion HPA for the metric the manager may not read")


def test_group_replication_needs_the_namespace_opt_in(cluster: Cluster, namespace: str, tmp_path: Path,
                                                      managers: list[Manager]) -> None:
    # a user and group of its own: the first test counts its user's 403s in the shared audit log,
    # and this one's manager is refused on purpose
    ns, user, group = namespace, "escaler-rbac-optin", "escaler:managers-optin"
    _bind(cluster, ns, ("manager.yaml",), group=group)
    m = start_manager(cluster, tmp_path, user=user, groups=(group,), namespace=ns, api=False)
    managers.append(m)
    apply(cluster, ns, deployment("llm", 0))
    apply(cluster, ns, {"apiVersion": "autoscaling.openfuyao.com/v1alpha1", "kind": "ResourceScalingGroup",
                        "metadata": {"name": "g"},
                        "spec": {"strategy": "GroupReplication", "replicas": 1, "members": [
                            {"name": "llm", "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment",
                                                          "name": "llm"}}]}})

    def ready() -> tuple[str, str]:
        obj = json.loads(cluster.kubectl("get", "rsg", "g", "-n", ns, "-o", "json"))
        c = next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == "Ready"), {})
        return c.get("reason", ""), c.get("message", "")

    _, message = eventually(lambda: ready() if ready()[0] == "CloneWriteFailed" else None, timeout=40,
                                 what=f"the refusal; log:\n{m.output()}")
    assert f"namespace {ns} has not opted in to GroupReplication" in message, message
    assert "manifests/rbac/group-replication.yaml" in message and "forbidden" in message.lower(), message
    assert not cluster.kubectl("get", "deployment", "llm-g0", "-n", ns, check=False).strip()

    _bind(cluster, ns, ("group-replication.yaml",), group=group)
    eventually(lambda: cluster.kubectl("get", "deployment", "llm-g0", "-n", ns, "-o", "name",
                                       check=False).strip(),
               timeout=40, what=f"the clone once the namespace opted in; log:\n{m.output()}")
