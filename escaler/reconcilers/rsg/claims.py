"""What a ResourceScalingGroup claims in the cross-kind binding index (``escaler.reconcilers.kit.bindings``).

One writer per workload, across kinds: an RSG is a claim source like an ElasticScaler, and claims
every workload it *writes*:

* **InplaceScaling**: each member's ``targetRef`` (it writes their replicas);
* **GroupReplication**: each clone ``{member}-g{i}`` for ``i < spec.replicas`` (it writes their
  replicas, and creates and deletes them). The member objects are only templates there — read,
  never written — so an ElasticScaler may scale a template without a conflict.

Claims are read from the spec alone (never from status), so they do not move with status writes
and a restarted manager indexes the same claims before its first reconcile. An object that does
not parse claims nothing. The oldest claimant of a workload wins (``TargetBindings.winner``): an
ElasticScaler created after the RSG on one of its members holds with ``TargetConflict``, and an
RSG created after it reports ``Ready=False/TargetConflict`` naming the member and writes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from escaler.api.rsg import MAX_GROUPS, Strategy
from escaler.reconcilers.kit.bindings import TargetKey
from escaler.reconcilers.rsg.clones import clone_name

__all__ = ["MAX_CLAIMED_GROUPS", "member_targets", "rsg_targets"]

# claims of a GroupReplication RSG are bounded like its groups (the CRD refuses more: api.rsg.MAX_GROUPS)
MAX_CLAIMED_GROUPS = MAX_GROUPS


def _members(spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    members = spec.get("members")
    # a cached object's lists are tuples (FrozenList)
    return [m for m in members if isinstance(m, Mapping)] if isinstance(members, list | tuple) else []


def rsg_targets(obj: Mapping[str, Any]) -> list[TargetKey]:
    """The workloads ``obj`` (a ResourceScalingGroup, as plain data) writes."""
    return [t for _, t in member_targets(obj)]


def member_targets(obj: Mapping[str, Any]) -> list[tuple[str, TargetKey]]:
    """The workloads ``obj`` writes, each with the name of the member it belongs to."""
    meta, spec = obj.get("metadata"), obj.get("spec")
    if not isinstance(meta, Mapping) or not isinstance(spec, Mapping):
        return []
    ns = str(meta.get("namespace") or "")
    out: list[tuple[str, TargetKey]] = []
    replication = spec.get("strategy") == Strategy.GROUP_REPLICATION
    groups = spec.get("replicas", 1)
    groups = min(groups, MAX_CLAIMED_GROUPS) if isinstance(groups, int) and groups >= 0 else 0
    for m in _members(spec):
        ref = m.get("targetRef")
        if not isinstance(ref, Mapping) or not isinstance(m.get("name"), str):
            continue
        try:
            base = TargetKey.from_ref(ns, str(ref.get("apiVersion") or ""), str(ref.get("kind") or ""),
                                      str(ref.get("name") or ""))
        except ValueError:
            continue
        name = str(m["name"])
        if not replication:
            out.append((name, base))
            continue
        out += [(name, TargetKey(ns, base.group, base.kind, clone_name(name, i))) for i in range(groups)]
    return out
