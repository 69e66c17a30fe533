"""What one ResourceScalingGroup sync carries (``RSGSync``) and what it ends with (``Outcome``).

A sync is level-based: ``RSGSync`` holds the cached object it started from, the parsed model, the
wall time, and the watch roles it asked for (``roles``: what the sync read; roles an earlier sync
held and this one did not ask for are dropped when it ends, ``members.Interests``).

Every path of a sync ends in one ``Outcome``, which ``report.Reporter`` turns into status and
events:

* ``Outcome.quiet(requeue)``: write nothing (a cache not listed yet — its list wakes the RSG; a
  query in flight — its completion wakes it; the manager may not write);
* ``Outcome.hold(reason, message, requeue)``: ``Ready=False/<reason>`` with a message naming the
  field or member and the rule; counts, members and groups keep what the status already says;
* a full outcome from a strategy sync: counts, ``members``/``groups`` rows (JSON form), the Ready
  condition, the scale-down ranking condition when a ranking was made, events, and when to look
  again (a failed write's backoff).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from escaler.api.rsg import ResourceScalingGroup
from escaler.informers.frozen import FrozenDict
from escaler.runtime.types import Request

__all__ = ["READY", "SCALE_DOWN_RANKING", "CondSpec", "EventSpec", "Outcome", "RSGSync"]


@dataclass
class RSGSync:
    """One reconcile of one RSG."""

    req: Request
    # the cached object the sync started from (read-only)
    obj: FrozenDict
    rsg: ResourceScalingGroup
    # wall time of the sync (the injected clock)
    now: datetime
    # the watch roles this sync asked for (members.Interests drops the others at the end)
    roles: set[str] = field(default_factory=set)

    @property
    def now_iso(self) -> str:
        return self.now.strftime("%Y-%m-%dT%H:%M:%SZ")

    @property
    def generation(self) -> int:
        return self.rsg.metadata.generation or 0


@dataclass(frozen=True)
class CondSpec:
    """A condition to set: type, "True"/"False", reason, message."""

    type: str
    status: str
    reason: str
    message: str


@dataclass(frozen=True)
class EventSpec:
    """An event to record: "Normal"/"Warning", reason, action, note."""

    type: str
    reason: str
    action: str
    note: str


@dataclass
class Outcome:
    """The end of a sync (see the module docstring)."""

    # False: write nothing at all
    report: bool = True
    # None: keep what the status says
    replicas: int | None = None
    ready_replicas: int | None = None
    selector: str | None = None
    members: list[dict[str, Any]] | None = None
    groups: list[dict[str, Any]] | None = None
    # conditions to set (Ready always, when reporting)
    conditions: list[CondSpec] = field(default_factory=list)
    # condition types to remove (a ranking condition after a switch to InplaceScaling)
    removed: tuple[str, ...] = ()
    events: list[EventSpec] = field(default_factory=list)
    # seconds until the next sync (0 = only when something changes)
    requeue_after: float = 0.0
    # re-run at once (a 409: the object moved since it was read)
    requeue: bool = False

    @classmethod
    def quiet(cls, requeue_after: float = 0.0, requeue: bool = False) -> Outcome:
        return cls(report=False, requeue_after=requeue_after, requeue=requeue)

    @classmethod
    def hold(cls, reason: str, message: str, requeue_after: float = 0.0) -> Outcome:
        return cls(conditions=[CondSpec(READY, "False", reason, message)], requeue_after=requeue_after)


# condition types
READY = "Ready"
SCALE_DOWN_RANKING = "ScaleDownRanking"
