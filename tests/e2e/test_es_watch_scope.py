"""What a namespace user can make the manager watch (issue 9, "Watches a CR can cause").

ElasticScalers whose ``targetRef`` names a cluster-scoped kind (Node, ClusterRole) or a kind that
cannot be scaled (Secret) are refused with ``AbleToScale=False/InvalidSpec`` naming the kind and
the rule, and the manager never starts an informer for those kinds (its log names every watch it
starts: ``watching <group/version/resource> ns=...``). A Deployment target in the same namespace
is watched, so the log line is known to be there when a watch does start.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .conftest import Cluster
from .es_helpers import (
    apply,
    cond,
    deployment,
    es,
    external_metric,
    metrics_trigger,
    scaler,
    start_manager,
    wait_cond,
)

pytestmark = pytest.mark.e2e

REFUSED = {
    "on-node": ("v1", "Node", "kwok-node-0", "kind Node (nodes) is cluster-scoped"),
    "on-clusterrole": ("rbac.authorization.k8s.io/v1", "ClusterRole", "admin",
                       "kind ClusterRole (clusterroles.rbac.authorization.k8s.io) is cluster-scoped"),
    "on-secret": ("v1", "Secret", "db-password", "kind Secret (secrets) is not scalable"),
}


def test_refused_target_kinds_are_never_watched(cluster: Cluster, namespace: str, tmp_path: Path) -> None:
    cluster.kubectl("create", "secret", "generic", "db-password", "-n", namespace, "--from-literal=p=x")
    apply(cluster, namespace, deployment("web", 1))
    mgr = start_manager(cluster, tmp_path, user="escaler-watch-scope", api=False, namespace=namespace)
    try:
        for name, (api_version, kind, target, _) in REFUSED.items():
            obj = scaler(name, target, metrics_trigger(external_metric("queue")))
            obj["spec"]["targetRef"] = {"apiVersion": api_version, "kind": kind, "name": target}
            apply(cluster, namespace, obj)
        apply(cluster, namespace, scaler("on-web", "web", metrics_trigger(external_metric("queue"))))
        for name, (_, _, _, rule) in REFUSED.items():
            wait_cond(cluster, namespace, name, "AbleToScale", "False", "InvalidSpec", mgr)
            message = cond(es(cluster, namespace, name), "AbleToScale")[2]
            assert message.startswith("spec.targetRef: ") and rule in message, message
        wait_cond(cluster, namespace, "on-web", "Validated", "True", "Valid", mgr)
        log = mgr.output(1_000_000)
        watched = [line for line in log.splitlines() if '"message": "watching ' in line]
        assert any("apps/v1/deployments" in line for line in watched), "the Deployment's watch is logged"
        for resource in ("/nodes", "/clusterroles", "/secrets"):
            assert not [w for w in watched if resource in w], f"the manager watched {resource}: {watched}"
    finally:
        mgr.stop()
