"""The manager's own account is limited by ``manifests/rbac/manager-policy.yaml`` (issue 27, item 9).

The manager may ``create``/``delete`` Deployments, StatefulSets and LeaderWorkerSets in the
namespaces that opted in to GroupReplication (``manifests/rbac/group-replication.yaml``), and holds
``create``/``update``/``delete`` on HPAs (the companion HPA) and ``patch`` on pods (the
deletion-cost annotation) cluster-wide: with its token, one could run any pod such a namespace's
ServiceAccounts may run, scale anything through a forged HPA or change any pod. The shipped
ValidatingAdmissionPolicy narrows each to what the manager does. Here a ServiceAccount named
``escaler-manager`` holds exactly the shipped ClusterRole (and the opt-in Role in one namespace),
and the API server must refuse what the policy forbids and admit what the manager does, with the
policy's message:

* a Deployment not controlled by a ResourceScalingGroup: refused; a clone (RSG-controlled): admitted
  in the namespace that opted in, refused by RBAC in one that did not; deleting a Deployment no RSG
  controls: refused, a clone: admitted;
* an HPA not controlled by an ElasticScaler: refused; a companion: admitted; an update taking its
  controller away: refused;
* a pod: the deletion-cost annotation admitted; another annotation, a label, an image: refused.

The policy is the one of the checkout under test (``conftest.source_dir``); the binding is limited
to this test's namespaces so other tests' ServiceAccounts are not affected.
"""

from __future__ import annotations

import copy
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from .conftest import ROOT, Cluster, eventually, source_dir
from .es_helpers import (
    Manager,
    apply,
    cpu_utilization,
    deployment,
    metrics_trigger,
    sa_kubeconfig,
    scaler,
    start_manager,
)
from .test_rsg import clones, get_rsg, member, rsg

pytestmark = pytest.mark.e2e

SA = "escaler-manager"
RBAC = "rbac.authorization.k8s.io"


def _policy(ns: str, other: str) -> list[dict[str, Any]]:
    docs = [d for d in yaml.safe_load_all((source_dir() / "manifests" / "rbac" / "manager-policy.yaml")
                                          .read_text()) if d]
    policy = next(d for d in docs if d["kind"] == "ValidatingAdmissionPolicy")
    binding = next(d for d in docs if d["kind"] == "ValidatingAdmissionPolicyBinding")
    name = f"{policy['metadata']['name']}-{ns}"
    policy["metadata"]["name"] = binding["metadata"]["name"] = binding["spec"]["policyName"] = name
    binding["spec"]["matchResources"] = {"namespaceSelector": {"matchExpressions": [
        {"key": "kubernetes.io/metadata.name", "operator": "In", "values": [ns, other]}]}}
    return [policy, binding]


def _bind_shipped_role(cluster: Cluster, ns: str, other: str) -> None:
    """The shipped ClusterRole, bound to the ServiceAccount ``escaler-manager`` of ``ns``, and the
    opt-in Role of ``manifests/rbac/group-replication.yaml`` in ``ns`` only (``other`` has not
    opted in)."""
    role = next(d for d in yaml.safe_load_all((ROOT / "manifests" / "rbac" / "manager.yaml").read_text())
                if d and d["kind"] == "ClusterRole" and d["metadata"]["name"] == "escaler-manager")
    role = copy.deepcopy(role)
    name = f"escaler-manager-policy-{ns}"
    role["metadata"] = {"name": name}
    subjects = [{"kind": "ServiceAccount", "name": SA, "namespace": ns}]
    cluster.apply([{"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": SA, "namespace": ns}},
                   {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": other}},
                   role,
                   {"apiVersion": f"{RBAC}/v1", "kind": "ClusterRoleBinding", "metadata": {"name": name},
                    "subjects": subjects,
                    "roleRef": {"kind": "ClusterRole", "name": name, "apiGroup": RBAC}}])
    _opt_in(cluster, ns, ns)


def _opt_in(cluster: Cluster, ns: str, sa_namespace: str) -> None:
    """``manifests/rbac/group-replication.yaml`` in ``ns``, for the ServiceAccount of ``sa_namespace``."""
    text = (ROOT / "manifests" / "rbac" / "group-replication.yaml").read_text()
    docs = [d for d in yaml.safe_load_all(text) if d]
    for d in docs:
        d["metadata"]["namespace"] = ns
        if d["kind"] == "RoleBinding":
            d["subjects"] = [{"kind": "ServiceAccount", "name": SA, "namespace": sa_namespace}]
    cluster.apply(docs)


def _owners(cluster: Cluster, ns: str) -> dict[str, dict[str, Any]]:
    """Controller references to a real ResourceScalingGroup and a real ElasticScaler of ``ns`` (made
    by the admin; no manager runs): an owner that does not exist would have the garbage collector
    delete the objects under test while the test still uses them."""
    cluster.apply([rsg("g", [member("m", "m", 1)], replicas=0, strategy="InplaceScaling")
                   | {"metadata": {"name": "g", "namespace": ns}},
                   scaler("s", "x", metrics_trigger(cpu_utilization(70), algorithm="HPA"))
                   | {"metadata": {"name": "s", "namespace": ns}}])
    refs = {}
    for kind, name in (("resourcescalinggroup", "g"), ("elasticscaler", "s")):
        obj = cluster.kubectl_json("get", kind, name, "-n", ns)
        refs[obj["kind"]] = {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "name": name,
                             "uid": obj["metadata"]["uid"], "controller": True}
    return refs


def _deployment(name: str, ns: str, owner: dict[str, Any] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": ns}
    if owner is not None:
        meta["ownerReferences"] = [owner]
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta, "spec": {
        "replicas": 0, "selector": {"matchLabels": {"app": name}},
        "template": {"metadata": {"labels": {"app": name}},
                     "spec": {"containers": [{"name": "c", "image": "example.invalid/llm:1"}]}}}}


def _hpa(name: str, ns: str, owner: dict[str, Any] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": ns}
    if owner is not None:
        meta["ownerReferences"] = [owner]
    return {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": meta, "spec": {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "x"},
        "minReplicas": 1, "maxReplicas": 2}}


def _dry_run_create(cluster: Cluster, kc: Path, obj_json: str) -> str:
    """'' when admission admits ``obj_json``, else the refusal; nothing is stored either way."""
    return _stderr(cluster, kc, "create", "--dry-run=server", "-f", "-", input=obj_json)


def test_the_managers_account_can_do_only_what_the_manager_does(cluster: Cluster, namespace: str,
                                                                tmp_path: Path) -> None:
    ns, other = namespace, f"{namespace}-other"
    _bind_shipped_role(cluster, ns, other)
    cluster.apply(_policy(ns, other))
    kc = sa_kubeconfig(cluster, tmp_path, ns, SA)
    owners = _owners(cluster, ns)

    def create(obj: dict[str, Any]) -> str:
        """'' when admitted, else the API server's refusal."""
        return _stderr(cluster, kc, "create", "-f", "-", input=json.dumps(obj))

    # the policy takes effect asynchronously: wait for its first refusal, probing with a server-side
    # dry run (admission runs, nothing is stored: a probe admitted before the policy is in force must
    # not leave the Deployment behind, or the next probe reads AlreadyExists as a refusal)
    plain = json.dumps(_deployment("plain", ns))
    refusal = eventually(lambda: _dry_run_create(cluster, kc, plain), timeout=30,
                         what="the policy to refuse a Deployment no ResourceScalingGroup controls")
    assert "escaler-manager-limits" in refusal and \
        "may create a Deployment only when a ResourceScalingGroup controls it" in refusal, refusal
    # a clone: admitted where the namespace opted in (its Role), forbidden by RBAC elsewhere
    assert create(_deployment("clone-g0", ns, owner=owners["ResourceScalingGroup"])) == ""
    refusal = create(_deployment("clone-g0", other, owner=owners["ResourceScalingGroup"]))
    assert "forbidden" in refusal and "cannot create resource \"deployments\"" in refusal, refusal
    cluster.apply(_deployment("users", ns))  # the user's own, made by the admin
    refusal = _stderr(cluster, kc, "delete", "deployment", "users", "-n", ns)
    assert "may delete a Deployment only when a ResourceScalingGroup controls it" in refusal, refusal
    assert _stderr(cluster, kc, "delete", "deployment", "clone-g0", "-n", ns) == ""

    # HPAs: only companions
    refusal = create(_hpa("forged", ns))
    assert "may create a HorizontalPodAutoscaler only when a ElasticScaler controls it" in refusal, refusal
    assert create(_hpa("s-hpa", ns, owner=owners["ElasticScaler"])) == ""
    refusal = _stderr(cluster, kc, "patch", "hpa", "s-hpa", "-n", ns, "--type=json",
                      "-p", '[{"op": "remove", "path": "/metadata/ownerReferences"}]')
    assert "only when a ElasticScaler controls it" in refusal, refusal

    # pods: the deletion cost and nothing else
    cluster.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": ns},
                   "spec": {"containers": [{"name": "c", "image": "example.invalid/llm:1"}]}})
    assert _stderr(cluster, kc, "annotate", "pod", "p", "-n", ns,
                   "controller.kubernetes.io/pod-deletion-cost=5") == ""
    for args in (("annotate", "pod", "p", "-n", ns, "other=1"), ("label", "pod", "p", "-n", ns, "x=y"),
                 ("set", "image", "pod/p", "-n", ns, "c=example.invalid/evil:1")):
        refusal = _stderr(cluster, kc, *args)
        assert "may change only the controller.kubernetes.io/pod-deletion-cost annotation" in refusal, \
            (args, refusal)
    pod = cluster.kubectl_json("get", "pod", "p", "-n", ns)
    assert pod["spec"]["containers"][0]["image"] == "example.invalid/llm:1"
    annotations = pod["metadata"]["annotations"]
    assert annotations["controller.kubernetes.io/pod-deletion-cost"] == "5" and "other" not in annotations
    assert "x" not in (pod["metadata"].get("labels") or {})


def _stderr(cluster: Cluster, kc: Path, *args: str, input: str | None = None) -> str:
    """Run kubectl as the manager's ServiceAccount: '' when it succeeds, else its stderr."""
    r = subprocess.run([cluster.kubectl_bin, f"--kubeconfig={kc}", *args], input=input,
                       capture_output=True, text=True, timeout=60)
    return "" if r.returncode == 0 else (r.stderr.strip() or f"exit {r.returncode}")


def test_a_manager_under_the_policy_replicates_groups_only_where_the_namespace_opts_in(
    cluster: Cluster, namespace: str, tmp_path: Path, managers: list[Manager],
) -> None:
    """The real manager as the ServiceAccount ``escaler-manager`` (its TokenRequest token) with the
    shipped ClusterRole, under the policy: GroupReplication in a namespace that has not opted in is
    refused by the API server and the RSG says why; once the namespace's Role is bound the clones
    appear (the policy admits them); a companion HPA is admitted."""
    ns, other = namespace, f"{namespace}-other"
    _bind_shipped_role(cluster, ns, other)
    cluster.apply(_policy(ns, other))
    kc = sa_kubeconfig(cluster, tmp_path, ns, SA)
    # in force: a Deployment no RSG controls, where RBAC allows the create (ns has the Role), is refused
    # by the policy (a server-side dry run, so nothing is created)
    plain = json.dumps(_deployment("plain", ns))
    eventually(lambda: "escaler-manager-limits" in _dry_run_create(cluster, kc, plain), timeout=30,
               what="the policy in force")
    m = start_manager(cluster, tmp_path, user=SA, kubeconfig=kc, namespace=other, api=False)
    managers.append(m)
    apply(cluster, other, deployment("prefill", 0))
    apply(cluster, other, rsg("pd", [member("prefill", "prefill", 1)], replicas=2,
                              strategy="GroupReplication"))

    def says_why() -> str:
        conds = (get_rsg(cluster, other, "pd").get("status") or {}).get("conditions") or []
        return next((c["message"] for c in conds if "has not opted in" in c.get("message", "")), "")

    message = eventually(says_why, timeout=60, what=f"the RSG to report the refusal; log:\n{m.output(3000)}")
    assert f"namespace {other} has not opted in to GroupReplication" in message, message
    assert clones(cluster, other) == []
    _opt_in(cluster, other, ns)
    eventually(lambda: clones(cluster, other) == ["prefill-g0", "prefill-g1"], timeout=60,
               what=f"the clones once the namespace opted in; log:\n{m.output(3000)}")

    apply(cluster, other, deployment("web", 1))
    apply(cluster, other, scaler("h", "web", metrics_trigger(cpu_utilization(70), algorithm="HPA")))
    eventually(lambda: cluster.kubectl("get", "hpa", "h-hpa", "-n", other, "-o", "name", check=False).strip(),
               timeout=40, what=f"the companion HPA; log:\n{m.output(3000)}")
    assert m.alive(), m.output()
