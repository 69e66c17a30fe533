"""A Tidal sync → its status and events (docs/guide/tidal.md). Pure: data in, data out (no I/O, no clock).

``build_status(base, generation, evaluation, problems, now_iso)`` is the status to hold:

* ``desiredReplicas`` (absent when neither an active rule nor ``defaultReplicas`` applies),
  ``activeRules`` (spec order), ``nextTransitionTime`` (RFC 3339, UTC, whole seconds — fires are
  whole minutes), ``observedGeneration``;
* one condition, ``Ready``: True/``Scheduled``, or False with the first that applies of
  ``InvalidSpec`` (the object does not parse), ``InvalidSchedule`` (naming each rule and field that
  does not parse), ``MissingRequiredLabels``, ``TargetConflict``; the message names every problem.
  ``lastTransitionTime`` moves only when the status flips (``escaler.scaling.conditions``).

When the spec or a schedule is invalid there is no evaluation: ``desiredReplicas`` and
``activeRules`` are **held** at what ``base`` (the status the cluster holds) says — the follower
keeps the current count rather than act on a guess from the rules that do parse — and
``nextTransitionTime`` is removed (nothing is scheduled until the spec is fixed). Missing labels
and a conflict do not stop the evaluation (docs/guide/tidal.md: "status is still computed").

``events_for(old, new)``: Normal ``DesiredReplicasChanged`` when ``desiredReplicas`` changed (the
note names the active rules), Warning ``<reason>`` when ``Ready`` turns False or changes reason.
Callers record them only after a status write, so a steady state emits nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from escaler.scaling.conditions import ConditionValue, EventValue, set_condition
from escaler.scaling.tidal import Evaluation, ScheduleError

__all__ = [
    "EVENT_DESIRED_CHANGED",
    "INVALID_SCHEDULE",
    "INVALID_SPEC",
    "MISSING_REQUIRED_LABELS",
    "READY",
    "SCHEDULED",
    "TARGET_CONFLICT",
    "Problems",
    "build_status",
    "events_for",
    "rfc3339",
]

READY = "Ready"
SCHEDULED = "Scheduled"
INVALID_SPEC = "InvalidSpec"
INVALID_SCHEDULE = "InvalidSchedule"
MISSING_REQUIRED_LABELS = "MissingRequiredLabels"
TARGET_CONFLICT = "TargetConflict"
EVENT_DESIRED_CHANGED = "DesiredReplicasChanged"
_READY_MESSAGE = ("every schedule parses and the elasticscaler.io/name and elasticscaler.io/namespace "
                  "labels name the ElasticScaler that follows this Tidal")


@dataclass(frozen=True)
class Problems:
    """What is wrong with a Tidal in this sync (empty: nothing)."""

    # the object does not parse as a Tidal (pydantic's message); no evaluation
    invalid_spec: str | None = None
    # schedules that do not parse; any → no evaluation
    schedules: Sequence[ScheduleError] = field(default_factory=tuple)
    # the binding labels are missing (message), evaluation still runs
    labels: str | None = None
    # another scaler decides the target (message), evaluation still runs
    conflict: str | None = None

    @property
    def holds(self) -> bool:
        """True when no evaluation can be made (the status is held)."""
        return self.invalid_spec is not None or bool(self.schedules)

    def ready(self) -> tuple[bool, str, str]:
        """(status, reason, message) of the Ready condition."""
        found: list[tuple[str, str]] = []
        if self.invalid_spec is not None:
            found.append((INVALID_SPEC, self.invalid_spec))
        if self.schedules:
            found.append((INVALID_SCHEDULE, "; ".join(e.message for e in self.schedules)
                          + "; desiredReplicas and activeRules are held until the schedule is fixed"))
        if self.labels is not None:
            found.append((MISSING_REQUIRED_LABELS, self.labels))
        if self.conflict is not None:
            found.append((TARGET_CONFLICT, self.conflict))
        if not found:
            return True, SCHEDULED, _READY_MESSAGE
        return False, found[0][0], "; ".join(m for _, m in found)


def rfc3339(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _conditions(base: Mapping[str, Any]) -> list[ConditionValue]:
    raw = base.get("conditions")
    items = raw if isinstance(raw, Sequence) and not isinstance(raw, str) else ()
    values = (ConditionValue.from_wire(i) for i in items if isinstance(i, Mapping))
    return [c for c in values if c is not None]


def build_status(base: Mapping[str, Any], generation: int, evaluation: Evaluation | None, problems: Problems,
                 now_iso: str) -> dict[str, Any]:
    """The status to hold after this sync; see the module docstring."""
    status: dict[str, Any] = {"observedGeneration": generation}
    if evaluation is not None:
        desired: Any = evaluation.desired_replicas
        active: Any = list(evaluation.active_rules)
    else:
        desired, active = base.get("desiredReplicas"), base.get("activeRules")
    if desired is not None:
        status["desiredReplicas"] = desired
    listed = isinstance(active, Sequence) and not isinstance(active, str)
    status["activeRules"] = list(active) if listed else []
    if evaluation is not None and evaluation.next_transition is not None:
        status["nextTransitionTime"] = rfc3339(evaluation.next_transition)
    ok, reason, message = problems.ready()
    conditions = set_condition(_conditions(base), READY, ok, reason, message, generation=generation,
                               now_iso=now_iso)
    status["conditions"] = [c.to_wire() for c in conditions]
    return status


def _ready(status: Mapping[str, Any]) -> tuple[str, str, str] | None:
    for c in _conditions(status):
        if c.type == READY:
            return c.status, c.reason, c.message
    return None


def events_for(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[EventValue]:
    """The events of a status change from ``old`` to ``new``; see the module docstring."""
    out: list[EventValue] = []
    before, after = old.get("desiredReplicas"), new.get("desiredReplicas")
    if after is not None and before != after:
        rules = ", ".join(new.get("activeRules") or ()) or "none (spec.defaultReplicas)"
        out.append(EventValue("Normal", EVENT_DESIRED_CHANGED,
                              f"desiredReplicas {'unset' if before is None else before} -> {after}; "
                              f"active rules: {rules}"))
    was, now = _ready(old), _ready(new)
    if now is not None and now[0] == "False" and (was is None or was[:2] != now[:2]):
        out.append(EventValue("Warning", now[1], now[2]))
    return out
