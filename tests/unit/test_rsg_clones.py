"""``escaler.reconcilers.rsg.clones``: a GroupReplication clone of a member template."""

from __future__ import annotations

from typing import Any

import pytest

from escaler.api.rsg import ResourceScalingGroup
from escaler.reconcilers.rsg.clones import (
    GROUP_LABEL,
    MEMBER_LABEL,
    RSG_LABEL,
    clone_of,
    group_of,
    group_selector,
    owned_by,
)

OWNER = ResourceScalingGroup.model_validate({
    "apiVersion": "autoscaling.openfuyao.com/v1alpha1", "kind": "ResourceScalingGroup",
    "metadata": {"name": "llama-pd", "namespace": "team", "uid": "rsg-uid"},
    "spec": {"members": [{"name": "prefill", "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment",
                                                            "name": "llama-prefill"}}]}})
LABELS = {RSG_LABEL: "llama-pd", GROUP_LABEL: "3", MEMBER_LABEL: "prefill"}


def template(kind: str = "Deployment", api_version: str = "apps/v1") -> dict[str, Any]:
    return {
        "apiVersion": api_version, "kind": kind,
        "metadata": {
            "name": "llama-prefill", "namespace": "team", "uid": "tmpl-uid", "resourceVersion": "42",
            "generation": 7, "creationTimestamp": "2026-01-01T00:00:00Z",
            "managedFields": [{"manager": "kubectl"}],
            "labels": {"app": "llama-prefill"}, "finalizers": ["x/y"],
            "ownerReferences": [{"apiVersion": "v1", "kind": "Thing", "name": "t", "uid": "u",
                                 "controller": True}],
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{...}",
                            "deployment.kubernetes.io/revision": "3", "team": "llm"}},
        "spec": {"replicas": 9, "selector": {"matchLabels": {"app": "llama-prefill"}},
                 "template": {"metadata": {"labels": {"app": "llama-prefill"}},
                              "spec": {"containers": [{"name": "main", "image": "llm:1"}]}}},
        "status": {"replicas": 9, "readyReplicas": 9},
    }


@pytest.mark.parametrize("kind", ["Deployment", "StatefulSet"])
def test_clone_of_a_deployment_or_statefulset(kind: str) -> None:
    t = template(kind)
    c = clone_of(t, OWNER, "prefill", 3, 2)
    meta = c["metadata"]
    assert meta["name"] == "prefill-g3"
    for gone in ("uid", "resourceVersion", "generation", "creationTimestamp", "managedFields", "finalizers",
                 "namespace"):
        assert gone not in meta, gone
    assert "status" not in c
    assert meta["annotations"] == {"team": "llm"}
    assert meta["labels"] == {"app": "llama-prefill", **LABELS}
    assert meta["ownerReferences"] == [{"apiVersion": "autoscaling.openfuyao.com/v1alpha1",
                                        "kind": "ResourceScalingGroup", "name": "llama-pd", "uid": "rsg-uid",
                                        "controller": True}]
    assert c["spec"]["replicas"] == 2
    # the immutable selector is born with the group labels, and matches the clone's own pods only
    assert c["spec"]["selector"]["matchLabels"] == {"app": "llama-prefill", **LABELS}
    assert c["spec"]["template"]["metadata"]["labels"] == {"app": "llama-prefill", **LABELS}
    assert t["spec"]["replicas"] == 9 and t["spec"]["selector"]["matchLabels"] == {"app": "llama-prefill"}, \
        "the template must not be modified"
    assert group_of(c) == 3 and owned_by(c, "rsg-uid") and not owned_by(c, "tmpl-uid")


def test_clone_of_a_leaderworkerset_labels_both_templates() -> None:
    t = template("LeaderWorkerSet", "leaderworkerset.x-k8s.io/v1")
    del t["spec"]["selector"], t["spec"]["template"]
    t["spec"]["leaderWorkerTemplate"] = {"size": 4, "leaderTemplate": {"spec": {"containers": []}},
                                         "workerTemplate": {"metadata": {"labels": {"role": "w"}},
                                                            "spec": {"containers": []}}}
    c = clone_of(t, OWNER, "decode", 0, 1)
    lwt = c["spec"]["leaderWorkerTemplate"]
    labels = {**LABELS, GROUP_LABEL: "0", MEMBER_LABEL: "decode"}
    assert lwt["leaderTemplate"]["metadata"]["labels"] == labels
    assert lwt["workerTemplate"]["metadata"]["labels"] == {"role": "w", **labels}
    assert "selector" not in c["spec"] and c["spec"]["replicas"] == 1 and lwt["size"] == 4


def test_clone_of_refuses_an_owner_without_uid() -> None:
    owner = OWNER.model_copy(update={"metadata": OWNER.metadata.model_copy(update={"uid": None})})
    with pytest.raises(ValueError, match=r"no metadata\.uid"):
        clone_of(template(), owner, "prefill", 0, 1)


@pytest.mark.parametrize(("labels", "want"), [({GROUP_LABEL: "12"}, 12), ({GROUP_LABEL: "-1"}, None),
                                              ({GROUP_LABEL: "x"}, None), ({}, None)],
                         ids=["index", "negative", "not-a-number", "absent"])
def test_group_of(labels: dict[str, str], want: int | None) -> None:
    assert group_of({"metadata": {"labels": labels}}) == want


def test_group_selector_selects_every_clone_pod() -> None:
    assert group_selector("llama-pd") == "autoscaling.openfuyao.com/rsg=llama-pd"
