"""Pod deletion cost (docs/design.md#beyond-the-seeds, issue 16): choose which pods leave on a Deployment
scale-down.

The ReplicaSet controller, when it removes pods, deletes first the pods that are not assigned to a
node, then Pending before Running, not Ready before Ready; only among the rest does it read the
``controller.kubernetes.io/pod-deletion-cost`` annotation (an int32; absent = 0; lower goes first),
then falls back to its own order (more pods on the node, shorter Ready time, newer). The annotation
is a best-effort hint: it only applies to ReplicaSets (so Deployments), and the controller reads it
when it scales down.

``removals(write, current, desired)`` is how many pods a decision removes: ``current - desired``
when the pipeline's write goes out now and lowers the count, else 0 — a scale-down held by a
guard or by stabilization is not written (``Decision.write`` is False), so nothing is patched.

``plan(pods, values, remove)`` is the patch set for one scale-down, from a per-pod value (lower =
more idle, e.g. running requests) and the pods' current annotations:

* pods being deleted are not counted; pods the controller deletes first anyway (unassigned,
  Pending, not Ready: ``PodView.goes_first``) take their share of ``remove`` before any cost is
  read, so only ``remove - len(those)`` Ready pods need choosing;
* the *victims* are that many Ready pods with the lowest values (ties by name); a pod without a
  value (no series for it) is never chosen over a measured one — it ranks after every measured
  pod, and is not annotated at all (the controller's own order decides among those);
* victims get the costs ``-n .. -1`` (the most idle ``-n``), below every pod left unannotated (0);
* escaler treats negative costs on the target's pods as its own: a pod that is *not* a victim and
  carries a negative cost (a victim of an earlier scale-down that did not happen, or a busy pod
  now) has the annotation removed, so it does not go before the victims; positive costs are
  left as they are (they only make a pod stay longer);
* only pods whose annotation changes are patched: at most ``remove`` victims plus the negative
  costs to clear, the clearing first (a patch set cut short by a failure leaves busy pods raised
  rather than only the victims lowered). More than ``max_patches`` → nothing is patched
  (``Plan.skipped`` says why) and the scale-down goes ahead in the controller's own order.

Pure: no I/O, no clock. ``pod_view`` reads a pod object (a mapping, as the informer cache holds
it) into a ``PodView``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ANNOTATION",
    "EVENT_DELETION_COST_SET",
    "EVENT_DELETION_COST_SKIPPED",
    "MAX_COST",
    "MAX_PATCHES_PER_WRITE",
    "MIN_COST",
    "Patch",
    "Plan",
    "PodView",
    "parse_cost",
    "plan",
    "pod_view",
    "removals",
]

# the annotation the ReplicaSet controller reads
ANNOTATION = "controller.kubernetes.io/pod-deletion-cost"
# the events of the reconciler's costs step (Normal: the pods marked; Warning: why none was)
EVENT_DELETION_COST_SET = "DeletionCostSet"
EVENT_DELETION_COST_SKIPPED = "DeletionCostSkipped"
# its value is an int32
MIN_COST, MAX_COST = -(2**31), 2**31 - 1
# most pod patches one scale-down may make (victims + cleared costs); beyond it nothing is patched
MAX_PATCHES_PER_WRITE = 64


@dataclass(frozen=True)
class PodView:
    """One pod of the target, as the deletion order sees it."""

    name: str
    # the annotation's value (absent or not an int32: None, which the controller reads as 0)
    cost: int | None = None
    # the controller deletes it before reading any cost: unassigned, Pending or not Ready
    goes_first: bool = False
    # metadata.deletionTimestamp is set: already leaving, not counted
    terminating: bool = False

    @property
    def effective_cost(self) -> int:
        return 0 if self.cost is None else self.cost


@dataclass(frozen=True)
class Patch:
    """Set the annotation on ``pod`` to ``cost``, or remove it (``cost`` None)."""

    pod: str
    cost: int | None


@dataclass(frozen=True)
class Plan:
    """What to patch before one scale-down."""

    # the Ready pods chosen to go, most idle first, with their values
    victims: tuple[tuple[str, float], ...] = ()
    # the annotation changes to make (victims whose cost differs, negative costs to clear)
    patches: tuple[Patch, ...] = ()
    # pods the controller deletes first anyway (not Ready, Pending, unassigned), counted in ``remove``
    first: tuple[str, ...] = ()
    # why nothing is patched although pods had to be chosen; None otherwise
    skipped: str | None = None

    def describe(self) -> str:
        """One line for an Event: who goes, at what cost, and what else changed."""
        if self.skipped is not None:
            return f"pod deletion cost not set: {self.skipped}"
        parts: list[str] = []
        if self.victims:
            costs = {p.pod: p.cost for p in self.patches}
            parts.append("lowest cost to " + ", ".join(
                f"{name} (value {value:g}, cost {costs.get(name, 'unchanged')})"
                for name, value in self.victims))
        cleared = [p.pod for p in self.patches if p.cost is None]
        if cleared:
            parts.append("negative cost cleared on " + ", ".join(cleared))
        if self.first:
            parts.append("not Ready, removed first by the ReplicaSet controller: " + ", ".join(self.first))
        return "; ".join(parts) if parts else "no pod needs a deletion cost"


def removals(write: bool, current: int, desired: int) -> int:
    """How many pods this decision removes now: ``current - desired`` when the write goes out and
    lowers the count; 0 for a scale-up, no change, or a write that is held (not written)."""
    return current - desired if write and desired < current else 0


def parse_cost(value: object) -> int | None:
    """The annotation's value as the controller reads it: an int32, else None (read as 0)."""
    if not isinstance(value, str) or not value.strip():
        return None
    try:
        cost = int(value.strip(), 10)
    except ValueError:
        return None
    return cost if MIN_COST <= cost <= MAX_COST else None


def pod_view(pod: Mapping[str, Any]) -> PodView | None:
    """A pod object as a ``PodView``; None without a name."""
    raw_meta, raw_spec, raw_status = pod.get("metadata"), pod.get("spec"), pod.get("status")
    meta: Mapping[str, Any] = raw_meta if isinstance(raw_meta, Mapping) else {}
    spec: Mapping[str, Any] = raw_spec if isinstance(raw_spec, Mapping) else {}
    status: Mapping[str, Any] = raw_status if isinstance(raw_status, Mapping) else {}
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        return None
    annotations = meta.get("annotations")
    cost = parse_cost(annotations.get(ANNOTATION)) if isinstance(annotations, Mapping) else None
    ready = any(isinstance(c, Mapping) and c.get("type") == "Ready" and c.get("status") == "True"
                for c in status.get("conditions") or ())
    first = not spec.get("nodeName") or status.get("phase") != "Running" or not ready
    return PodView(name, cost, goes_first=first, terminating=bool(meta.get("deletionTimestamp")))


def plan(pods: Sequence[PodView], values: Mapping[str, float], remove: int, *,
         max_patches: int = MAX_PATCHES_PER_WRITE) -> Plan:
    """The patches before removing ``remove`` pods (see the module docstring)."""
    if remove <= 0:
        return Plan()
    active = [p for p in pods if not p.terminating]
    first = tuple(sorted(p.name for p in active if p.goes_first))
    ready = [p for p in active if not p.goes_first]
    needed = min(remove - len(first), len(ready))
    if needed <= 0:
        return Plan(first=first)
    measured = sorted((values[p.name], p.name) for p in ready if _usable(values.get(p.name)))
    victims = tuple((name, value) for value, name in measured[:needed])
    chosen = {name: -(len(victims) - i) for i, (name, _) in enumerate(victims)}
    patches: list[Patch] = []
    for p in sorted(ready, key=lambda p: p.name):
        want = chosen.get(p.name)
        if want is not None:
            if p.cost != want:
                patches.append(Patch(p.name, want))
        elif p.effective_cost < 0:
            patches.append(Patch(p.name, None))
    if len(patches) > max_patches:
        return Plan(victims=victims, first=first,
                    skipped=f"{len(patches)} pod patches needed, more than {max_patches} per scale-down")
    # the cleared costs first, then the victims (most idle first): a patch set cut short by a
    # failure leaves busy pods raised rather than only the victims lowered
    order = {name: i for i, (name, _) in enumerate(victims)}
    patches.sort(key=lambda p: (p.cost is not None, order.get(p.pod, 0), p.pod))
    return Plan(victims=victims, patches=tuple(patches), first=first)


def _usable(value: float | None) -> bool:
    return value is not None and math.isfinite(value)
