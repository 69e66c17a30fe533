"""An SLO requirement's status (docs/slo.md): ``decision`` + the ``Ready`` condition, and when a new one
is worth a write. Pure: data in, data out.

``build_status(base, generation, decision, ready, now_iso)``:

* ``observedGeneration``: the generation this sync saw;
* ``decision`` (``replicas``, ``reason``, ``signals``, ``time``): this sync's, or — when the sync has
  none (an invalid spec, a target not found before any decision) — the one ``base`` holds, kept
  as it is (the LLMScaler reading it keeps the last answer, and ``kubectl get`` shows it);
* one condition, ``Ready`` (``lastTransitionTime`` moves only when the status flips):

  - True / ``Sized``: every signal was read and the decision computed from them;
  - False / ``SignalsMissing``: a signal could not be read; the last decision is held (the message
    names each signal and its error);
  - False / ``InvalidSpec``: the spec breaks a rule (the message names each field and rule);
  - False / ``TargetNotFound`` / ``TargetUnreadable``: the current replicas of ``targetRef`` are
    unknown; the last decision is held;
  - False / ``ServiceIdConflict``: another requirement defines the same ``serviceId``: the decision is
    computed, but ``GET /decisions/{serviceId}`` answers 409 until one of them goes.

**Drift** (``worth_writing``). Signals wobble every poll; a status is a record of decisions, not a
live feed (the live one is ``GET /decisions/{serviceId}``). So a new status is written only when it
differs *significantly* from the one the cluster holds: ``observedGeneration``, a condition's type,
status or reason, or its message beyond its numbers; the decision's ``replicas``, its reason beyond
its numbers, the set of signals, or a signal value that moved by more than ``SIGNIFICANCE`` of the
held value (``escaler.reconcilers.kit.drift.value_moved``). Otherwise the held status is
kept, decision time included — an idle requirement writes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from escaler.reconcilers.kit.drift import mask_numbers, value_moved
from escaler.scaling.conditions import ConditionValue, set_condition
from escaler.scaling.slo import Decision

__all__ = [
    "INVALID_SPEC",
    "READY",
    "SERVICE_ID_CONFLICT",
    "SIGNALS_MISSING",
    "SIGNIFICANCE",
    "SIZED",
    "TARGET_NOT_FOUND",
    "TARGET_UNREADABLE",
    "Ready",
    "build_status",
    "decision_wire",
    "held_replicas",
    "rfc3339",
    "worth_writing",
]

READY = "Ready"
SIZED = "Sized"
SIGNALS_MISSING = "SignalsMissing"
INVALID_SPEC = "InvalidSpec"
TARGET_NOT_FOUND = "TargetNotFound"
TARGET_UNREADABLE = "TargetUnreadable"
SERVICE_ID_CONFLICT = "ServiceIdConflict"
# a signal value's move below this fraction of the held value is drift (not written on its own)
SIGNIFICANCE = 0.1
# longest decision reason written (the CRD's maxLength)
MAX_REASON = 1024


@dataclass(frozen=True)
class Ready:
    """The Ready condition of a sync."""

    ok: bool
    reason: str
    message: str


def rfc3339(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def decision_wire(decision: Decision, now_iso: str) -> dict[str, Any]:
    """A decision in its status/API form."""
    reason = decision.reason
    if len(reason) > MAX_REASON:
        reason = reason[:MAX_REASON - 3] + "..."
    return {"replicas": decision.replicas, "reason": reason, "signals": dict(decision.signals),
            "time": now_iso}


def held_replicas(status: Mapping[str, Any]) -> int | None:
    """The replicas of the decision a status holds, or None."""
    d = status.get("decision")
    n = d.get("replicas") if isinstance(d, Mapping) else None
    return n if isinstance(n, int) and not isinstance(n, bool) and n >= 0 else None


def _conditions(base: Mapping[str, Any]) -> list[ConditionValue]:
    raw = base.get("conditions")
    items = raw if isinstance(raw, Sequence) and not isinstance(raw, str) else ()
    values = (ConditionValue.from_wire(i) for i in items if isinstance(i, Mapping))
    return [c for c in values if c is not None]


def build_status(base: Mapping[str, Any], generation: int, decision: Mapping[str, Any] | None, ready: Ready,
                 now_iso: str) -> dict[str, Any]:
    """The status to hold after this sync; see the module docstring."""
    status: dict[str, Any] = {"observedGeneration": generation}
    kept = decision if decision is not None else base.get("decision")
    if isinstance(kept, Mapping):
        status["decision"] = dict(kept)
    conditions = set_condition(_conditions(base), READY, ready.ok, ready.reason, ready.message,
                               generation=generation, now_iso=now_iso)
    status["conditions"] = [c.to_wire() for c in conditions]
    return status


def _masked_condition(c: Any) -> Any:
    if isinstance(c, Mapping) and isinstance(c.get("message"), str):
        return {**c, "message": mask_numbers(c["message"])}
    return c


def _number(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def _decision_moved(held: Any, new: Any) -> bool:
    if not (isinstance(held, Mapping) and isinstance(new, Mapping)):
        return bool(held != new)
    if held.get("replicas") != new.get("replicas"):
        return True
    if mask_numbers(str(held.get("reason") or "")) != mask_numbers(str(new.get("reason") or "")):
        return True
    a, b = held.get("signals") or {}, new.get("signals") or {}
    if not (isinstance(a, Mapping) and isinstance(b, Mapping)) or set(a) != set(b):
        return bool(a != b)
    return any(value_moved(_number(a[k]), _number(b[k]), None, SIGNIFICANCE) for k in a)


def worth_writing(held: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """True when ``new`` differs from ``held`` (what the cluster holds) beyond drift."""
    if {k: v for k, v in held.items() if k not in ("decision", "conditions")} != \
            {k: v for k, v in new.items() if k not in ("decision", "conditions")}:
        return True
    hc, nc = held.get("conditions") or [], new.get("conditions") or []
    if len(hc) != len(nc) or any(_masked_condition(x) != _masked_condition(y)
                                 for x, y in zip(hc, nc, strict=True)):
        return True
    return _decision_moved(held.get("decision"), new.get("decision"))
