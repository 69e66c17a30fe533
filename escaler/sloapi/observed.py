"""What the decision engine observed of a route, read-only: its objectives, the latest measured values
and the current decision, from the SLO requirement's spec and ``status`` (issue 29, part B).

Contract (pure: data in, data out; never raises on a malformed status, it shows less):

``observed(kind, obj)`` → ``{"objectives": [...], "decision": {...} | None, "ready": {...} | None}``:

* ``objectives``: one per objective the spec sets, in the kind's order (LLM ``ttft``, ``otps``; job
  ``queue``), each ``{"signal", "objective", "measured"}``: ``signal`` is the engine's key in
  ``status.decision.signals`` (``ttftMs``, ``otps``, ``queueDepth``: ``SIGNALS``), ``objective``
  the target in words (``TTFT p90 <= 500 ms``, ``OTPS >= 20 tokens/s``, ``queue depth <= 100``),
  ``measured`` the value the last decision was computed from, named and with its unit
  (``TTFT p90 612 ms``), or
  ``None`` when the decision has none (no status yet, or the signal could not be read: ``ready``
  says why).
* ``decision``: ``status.decision``'s ``replicas``, ``reason`` and ``time``; ``None`` when the
  engine has written none.
* ``ready``: the ``Ready`` condition's ``status``, ``reason`` and ``message``; ``None`` when absent.

A route with no status yet has ``decision`` and ``ready`` ``None`` (the form says "no status
yet"). The status is the engine's record, written when a decision moves significantly
(``escaler.reconcilers.slo.report``), so ``measured`` is the value as of ``decision.time``. Every
string here is data — the form inserts it as text, never as HTML. A ``PUT`` body's ``observed``
is ignored (``escaler.sloapi.translate``): it is never written.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from escaler.sloapi.kinds import SLOKind

__all__ = ["FIELD", "SIGNALS", "observed"]

# the route body's field holding this view
FIELD = "observed"
# section -> the engine's signal key in status.decision.signals (escaler.reconcilers.slo.kinds:
# TTFT, OTPS, QUEUE_DEPTH; a unit test holds them equal)
SIGNALS: Mapping[str, str] = {"ttft": "ttftMs", "otps": "otps", "queue": "queueDepth"}
# section -> the unit its values are shown with
_UNITS: Mapping[str, str] = {"ttft": " ms", "otps": " tokens/s", "queue": ""}
_DEFAULT_PERCENTILE = 90


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _number(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def _fmt(value: float) -> str:
    return f"{value:.4g}"


def _target(section: str, spec: Mapping[str, Any]) -> tuple[str, str, float] | None:
    """(label, comparison, target) of the section's objective; None when the spec has no usable one."""
    if section == "ttft":
        target, pct = _number(spec.get("targetMs")), _number(spec.get("percentile"))
        label = f"TTFT p{_fmt(pct if pct is not None else _DEFAULT_PERCENTILE)}"
        return None if target is None else (label, "<=", target)
    if section == "otps":
        target = _number(spec.get("target"))
        return None if target is None else ("OTPS", ">=", target)
    target = _number(spec.get("maxDepth"))
    return None if target is None else ("queue depth", "<=", target)


def _decision(status: Mapping[str, Any]) -> dict[str, Any] | None:
    d = status.get("decision")
    if not isinstance(d, Mapping):
        return None
    replicas = d.get("replicas")
    return {"replicas": replicas if isinstance(replicas, int) and not isinstance(replicas, bool) else None,
            "reason": str(d.get("reason") or ""), "time": str(d.get("time") or "")}


def _ready(status: Mapping[str, Any]) -> dict[str, str] | None:
    conditions = status.get("conditions")
    if not isinstance(conditions, list | tuple):
        return None
    for c in conditions:
        if isinstance(c, Mapping) and c.get("type") == "Ready":
            return {k: str(c.get(k) or "") for k in ("status", "reason", "message")}
    return None


def observed(kind: SLOKind, obj: Mapping[str, Any]) -> dict[str, Any]:
    """The read-only view of ``obj``'s objectives and status (see the module docstring)."""
    spec, status = _mapping(obj.get("spec")), _mapping(obj.get("status"))
    decision = _decision(status)
    signals = _mapping(_mapping(status.get("decision")).get("signals"))
    objectives = []
    for section in kind.sections:
        target = _target(section, _mapping(spec.get(section)))
        if target is None:
            continue
        label, comparison, goal = target
        unit = _UNITS[section]
        value = _number(signals.get(SIGNALS[section]))
        objectives.append({"signal": SIGNALS[section],
                           "objective": f"{label} {comparison} {_fmt(goal)}{unit}",
                           "measured": None if value is None else f"{label} {_fmt(value)}{unit}"})
    return {"objectives": objectives, "decision": decision, "ready": _ready(status)}
