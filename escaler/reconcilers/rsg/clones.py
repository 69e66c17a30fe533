"""GroupReplication clones: group *i* of a ResourceScalingGroup is one clone of each member's template.

``clone_of(template, owner, member, index, replicas)`` builds the object to create from the member
workload the spec names (its *template*: a Deployment, StatefulSet, LeaderWorkerSet or any kind
with ``spec.replicas``), purely from data:

* **Name** ``{member}-g{index}`` (``clone_name``): the member's name in the spec, not the
  template's, so the names docs/guide/resourcescalinggroup.md promises are predictable.
* **Labels** (on the clone, in its pod templates and in its selector): the template's, plus
  ``autoscaling.openfuyao.com/rsg: <rsg name>``, ``autoscaling.openfuyao.com/group: <index>`` and
  ``autoscaling.openfuyao.com/member: <member>``. Pods keep the template's labels, so a Service
  that selects the template's pods routes to every group.
* **Selector**: a Deployment's or StatefulSet's ``spec.selector.matchLabels`` gains the rsg,
  group and member labels. A selector is immutable after creation, so each clone is born with
  one that matches its own pods only: no clone selects another group's pods, nor the template's
  (which lack the labels). The template's own selector still matches the clones' pods; its
  controller ignores them, as they are controlled by the clone's ReplicaSet/StatefulSet
  (controllers never adopt a pod another controller owns). A LeaderWorkerSet has no selector (its
  controller labels pods by LWS name); its leader and worker templates get the labels.
* **Owner**: one ``ownerReference`` to the RSG with ``controller: true``, so the garbage collector
  deletes the clones with the RSG. ``blockOwnerDeletion`` is not set (it would need ``update`` on
  ``resourcescalinggroups/finalizers`` where the OwnerReferencesPermissionEnforcement admission
  plugin runs, and a background delete does not need it).
* **Stripped**: everything the server owns or that belongs to the template object — ``uid``,
  ``resourceVersion``, ``generation``, ``creationTimestamp``, ``deletionTimestamp``,
  ``managedFields``, ``selfLink``, the template's ``ownerReferences`` and ``finalizers``,
  ``status``, and the annotations ``kubectl.kubernetes.io/last-applied-configuration`` and
  ``deployment.kubernetes.io/revision``.
* ``spec.replicas`` = the member's ``replicasPerGroup``.

``group_of(obj)`` reads a clone's group index back from its label (None when absent or malformed);
``owned_by(obj, uid)`` says whether an object is controlled by the RSG of that uid; ``is_clone(obj)``
whether it is a clone at all (the rsg and group labels and a controller ownerReference to a
ResourceScalingGroup).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from escaler.api.rsg import ResourceScalingGroup

__all__ = [
    "GROUP_LABEL",
    "MEMBER_LABEL",
    "RSG_LABEL",
    "clone_name",
    "clone_of",
    "group_of",
    "group_selector",
    "is_clone",
    "owned_by",
]

# the labels of a clone (docs/guide/resourcescalinggroup.md names the first two)
RSG_LABEL = "autoscaling.openfuyao.com/rsg"
GROUP_LABEL = "autoscaling.openfuyao.com/group"
MEMBER_LABEL = "autoscaling.openfuyao.com/member"

_SERVER_FIELDS = ("uid", "resourceVersion", "generation", "creationTimestamp", "deletionTimestamp",
                  "deletionGracePeriodSeconds", "managedFields", "selfLink", "ownerReferences", "finalizers")
_DROPPED_ANNOTATIONS = ("kubectl.kubernetes.io/last-applied-configuration",
                        "deployment.kubernetes.io/revision")
# kinds whose spec.selector.matchLabels must include the clone labels (immutable after creation)
_SELECTOR_KINDS = frozenset({("apps", "Deployment"), ("apps", "StatefulSet"), ("apps", "ReplicaSet")})


def clone_name(member: str, index: int) -> str:
    return f"{member}-g{index}"


def group_selector(rsg_name: str) -> str:
    """``status.selector`` of a GroupReplication RSG: every clone pod of every group."""
    return f"{RSG_LABEL}={rsg_name}"


def _labels_of(rsg_name: str, member: str, index: int) -> dict[str, str]:
    return {RSG_LABEL: rsg_name, GROUP_LABEL: str(index), MEMBER_LABEL: member}


def _label(node: dict[str, Any], labels: Mapping[str, str]) -> None:
    """Add ``labels`` to ``node.metadata.labels`` (a pod template or the object)."""
    meta = node.setdefault("metadata", {})
    meta["labels"] = {**(meta.get("labels") or {}), **labels}


def _metadata(template: Mapping[str, Any], name: str, labels: Mapping[str, str],
              owner: ResourceScalingGroup) -> dict[str, Any]:
    meta = copy.deepcopy(dict(template.get("metadata") or {}))
    for field in _SERVER_FIELDS:
        meta.pop(field, None)
    meta.pop("namespace", None)
    meta.pop("generateName", None)
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k not in _DROPPED_ANNOTATIONS}
    if annotations:
        meta["annotations"] = annotations
    else:
        meta.pop("annotations", None)
    meta["name"] = name
    meta["labels"] = {**(meta.get("labels") or {}), **labels}
    meta["ownerReferences"] = [{"apiVersion": owner.API_VERSION, "kind": owner.KIND,
                                "name": owner.name, "uid": owner.metadata.uid, "controller": True}]
    return meta


def clone_of(template: Mapping[str, Any], owner: ResourceScalingGroup, member: str, index: int,
             replicas: int) -> dict[str, Any]:
    """The clone of ``template`` for ``member`` in group ``index`` (see the module docstring)."""
    if not owner.metadata.uid:
        raise ValueError("clone_of: the ResourceScalingGroup has no metadata.uid yet")
    api_version, kind = str(template.get("apiVersion") or ""), str(template.get("kind") or "")
    labels = _labels_of(owner.name, member, index)
    spec = copy.deepcopy(dict(template.get("spec") or {}))
    spec["replicas"] = replicas
    group = api_version.split("/")[0] if "/" in api_version else ""
    if (group, kind) in _SELECTOR_KINDS:
        selector = spec.setdefault("selector", {})
        selector["matchLabels"] = {**(selector.get("matchLabels") or {}), **labels}
    for path in (("template",), ("leaderWorkerTemplate", "leaderTemplate"),
                 ("leaderWorkerTemplate", "workerTemplate")):
        node: Any = spec
        for part in path:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict):
            _label(node, labels)
    return {"apiVersion": api_version, "kind": kind,
            "metadata": _metadata(template, clone_name(member, index), labels, owner), "spec": spec}


def group_of(obj: Mapping[str, Any]) -> int | None:
    """The group index of a clone, from its label; None when absent or not a non-negative integer."""
    meta = obj.get("metadata")
    labels = meta.get("labels") if isinstance(meta, Mapping) else None
    value = labels.get(GROUP_LABEL) if isinstance(labels, Mapping) else None
    if not isinstance(value, str) or not value.isdigit():
        return None
    return int(value)


def owned_by(obj: Mapping[str, Any], uid: str) -> bool:
    """True when ``obj`` has a controller ownerReference to the object ``uid``."""
    meta = obj.get("metadata")
    refs = meta.get("ownerReferences") if isinstance(meta, Mapping) else None
    return any(isinstance(r, Mapping) and r.get("controller") is True and r.get("uid") == uid
               for r in refs or ())


def is_clone(obj: Mapping[str, Any]) -> bool:
    """True when ``obj`` carries the rsg and group labels and is controlled by a ResourceScalingGroup."""
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping):
        return False
    labels = meta.get("labels")
    if not isinstance(labels, Mapping) or RSG_LABEL not in labels or GROUP_LABEL not in labels:
        return False
    group = ResourceScalingGroup.API_VERSION.split("/")[0] + "/"
    return any(isinstance(r, Mapping) and r.get("controller") is True
               and r.get("kind") == ResourceScalingGroup.KIND
               and str(r.get("apiVersion") or "").startswith(group)
               for r in meta.get("ownerReferences") or ())
