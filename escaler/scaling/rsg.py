"""The pure arithmetic of a ResourceScalingGroup (docs/guide/resourcescalinggroup.md): no I/O, no clock, no
kube types.

* ``member_replicas(groups, per_group)``: InplaceScaling sets each member to ``groups x
  replicasPerGroup``.
* ``inplace_writes(members, groups)``: the member writes of one InplaceScaling sync, **in write
  order**: members that grow first, in list order (scale-up: list order), then members that shrink,
  in reverse list order (scale-down: reverse order). Members already at their count are not
  written. A mixed plan (some grow, some shrink: a partial write being undone) grows before it
  shrinks, so capacity is added before any is taken away.
* ``complete_groups(members)``: how many whole groups the members hold, ``min(floor(replicas /
  replicasPerGroup))`` (0 for no members): what ``status.replicas``/``readyReplicas`` report under
  InplaceScaling, so a half-written scale never counts as a group.
* ``indices_to_create(present, groups)``: GroupReplication scale-up fills the lowest free indices
  until ``groups`` exist (a group deleted from the middle is the first one recreated, so clone
  names stay in ``0..groups-1`` where possible).
* ``removal_order(present, loads)``: GroupReplication scale-down order. With ``loads`` (one value
  per group index, from ``scaleDown.prometheus``): least loaded first; a group the query returned
  no value for counts as idle (load 0: nothing the query can see runs there); ties go to the
  highest index. Without loads (no query, or it failed): highest index first.
* ``groups_to_remove(present, groups, loads)``: the first ``len(present) - groups`` of that order.

Every function validates its inputs and raises ``ValueError`` naming the argument.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

__all__ = [
    "MemberCount",
    "MemberWrite",
    "complete_groups",
    "groups_to_remove",
    "indices_to_create",
    "inplace_writes",
    "member_replicas",
    "removal_order",
]


@dataclass(frozen=True)
class MemberCount:
    """One member as it is: its name, replicas per group and current replica count."""

    name: str
    # replicasPerGroup; >= 1
    per_group: int
    # the member's spec replicas now (or its ready replicas, for complete_groups); >= 0
    replicas: int


@dataclass(frozen=True)
class MemberWrite:
    """Write ``desired`` replicas to member ``name`` (currently ``current``)."""

    name: str
    current: int
    desired: int

    @property
    def grows(self) -> bool:
        return self.desired > self.current


def _count(value: int, what: str, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{what} must be an integer >= {minimum}, got {value!r}")
    return value


def member_replicas(groups: int, per_group: int) -> int:
    """Replicas of a member for ``groups`` groups of ``per_group`` each."""
    return _count(groups, "groups") * _count(per_group, "per_group", 1)


def inplace_writes(members: Sequence[MemberCount], groups: int) -> list[MemberWrite]:
    """The writes that bring every member to ``groups x per_group``, in write order (module doc)."""
    _count(groups, "groups")
    writes = [MemberWrite(m.name, _count(m.replicas, f"members[{m.name}].replicas"),
                          member_replicas(groups, m.per_group)) for m in members]
    up = [w for w in writes if w.grows]
    down = [w for w in reversed(writes) if w.desired < w.current]
    return up + down


def complete_groups(members: Sequence[MemberCount]) -> int:
    """Whole groups the members hold: min over members of floor(replicas / per_group)."""
    if not members:
        return 0
    return min(_count(m.replicas, f"members[{m.name}].replicas") // _count(m.per_group, "per_group", 1)
               for m in members)


def indices_to_create(present: Collection[int], groups: int) -> list[int]:
    """The lowest indices not in ``present`` until ``groups`` groups exist (ascending)."""
    _count(groups, "groups")
    for i in present:
        _count(i, "present index")
    need = groups - len(set(present))
    out: list[int] = []
    i = 0
    while len(out) < need:
        if i not in present:
            out.append(i)
        i += 1
    return out


def removal_order(present: Collection[int], loads: Mapping[int, float] | None) -> list[int]:
    """Every present group, the first to delete first (see the module docstring)."""
    indices = sorted({_count(i, "present index") for i in present}, reverse=True)
    if loads is None:
        return indices
    for i, v in loads.items():
        if not isinstance(v, int | float) or isinstance(v, bool) or not math.isfinite(v):
            raise ValueError(f"loads[{i}] must be a finite number, got {v!r}")
    # stable sort on a list already in descending index order: ties keep the highest index first
    return sorted(indices, key=lambda i: float(loads.get(i, 0.0)))


def groups_to_remove(present: Collection[int], groups: int,
                     loads: Mapping[int, float] | None) -> list[int]:
    """The groups to delete so that ``groups`` remain, first to go first."""
    _count(groups, "groups")
    excess = len(set(present)) - groups
    return removal_order(present, loads)[:excess] if excess > 0 else []
