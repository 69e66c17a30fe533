"""The pods of a target as the write guards see them (docs/concepts.md#the-decision-pipeline step 5): who
cannot be scheduled.

``capacity(pods, now, grace_seconds) -> Capacity`` looks at a target's pods (already selected by its
pod selector, from an informer cache) and counts those **Pending as Unschedulable** — phase
``Pending`` with the ``PodScheduled=False/Unschedulable`` condition the scheduler sets — for longer
than ``grace_seconds`` (measured from that condition's ``lastTransitionTime``, else the pod's
``creationTimestamp``). Those are reported as ``AbleToScale=True/InsufficientCapacity`` with the
scheduler's own message; further scale-up waits while they do, a scale-down never does. A pod that
is merely not Ready yet (LLM servers load weights for minutes) is *not* counted: it is capacity on
the way.

``Capacity.recheck_at``: the wall-clock time at which a pod that is Unschedulable but still inside
its grace period will leave it (the reconciler requeues then: no event marks that moment), or None.
Pods being deleted are ignored. ``now`` and the times are wall-clock epoch seconds (the API
server's timestamps are wall clock). Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from escaler.kube.labels import parse_selector
from escaler.kube.timestamps import epoch_seconds

__all__ = ["UNSCHEDULABLE_GRACE_SECONDS", "Capacity", "capacity", "select_pods"]

# how long a pod may stay Unschedulable before it counts (the scheduler retries, a cluster
# autoscaler may add a node within a minute; a shorter blip is not a capacity problem)
UNSCHEDULABLE_GRACE_SECONDS = 30.0
# the scheduler's message is quoted at most this long
_MAX_MESSAGE = 512

_Obj = Mapping[str, Any]


@dataclass(frozen=True)
class Capacity:
    """What the pods say about the room to scale up."""

    # pods Pending as Unschedulable beyond the grace period
    unschedulable: int = 0
    # the scheduler's message for one of them (the guard says how many); "" when unschedulable == 0
    message: str = ""
    # when a pod still inside its grace period leaves it (epoch seconds); None when none is
    recheck_at: float | None = None


def _unschedulable_since(pod: _Obj) -> tuple[float, str] | None:
    raw_meta, raw_status = pod.get("metadata"), pod.get("status")
    meta: _Obj = raw_meta if isinstance(raw_meta, Mapping) else {}
    status: _Obj = raw_status if isinstance(raw_status, Mapping) else {}
    if meta.get("deletionTimestamp") or status.get("phase") != "Pending":
        return None
    for cond in status.get("conditions") or ():
        if (isinstance(cond, Mapping) and cond.get("type") == "PodScheduled"
                and cond.get("status") == "False" and cond.get("reason") == "Unschedulable"):
            since = epoch_seconds(cond.get("lastTransitionTime"))
            if since is None:
                since = epoch_seconds(meta.get("creationTimestamp"))
            return (since if since is not None else 0.0), str(cond.get("message") or "")
    return None


def capacity(pods: Iterable[_Obj], now: float,
             grace_seconds: float = UNSCHEDULABLE_GRACE_SECONDS) -> Capacity:
    """See the module docstring."""
    over: list[str] = []
    recheck: list[float] = []
    for pod in pods:
        found = _unschedulable_since(pod)
        if found is None:
            continue
        since, message = found
        if now - since >= grace_seconds:
            over.append(message)
        else:
            recheck.append(since + grace_seconds)
    if not over:
        return Capacity(recheck_at=min(recheck, default=None))
    quoted = next((m for m in over if m), "no message from the scheduler")[:_MAX_MESSAGE]
    return Capacity(len(over), quoted, min(recheck, default=None))


def select_pods(pods: Iterable[_Obj], selector: str) -> list[_Obj]:
    """The pods whose labels match ``selector`` (string form); none for an empty or bad selector."""
    if not selector:
        return []
    try:
        sel = parse_selector(selector)
    except ValueError:
        return []
    out = []
    for pod in pods:
        meta = pod.get("metadata")
        if isinstance(meta, Mapping) and sel.matches(meta.get("labels")):
            out.append(pod)
    return out
