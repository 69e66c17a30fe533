"""Schedule floors (docs/design.md#beyond-the-seeds): a Tidal's rules as a lower bound under reactive scaling.

``spec.floorFrom: {kind: Tidal, name}`` on an ElasticScaler (MetricsTrigger) or an LLMScaler names
a Tidal **in the scaler's own namespace** (a namespace user never makes the manager read another
namespace's schedule). ``floor_of(name, spec, now)`` is that Tidal's floor at ``now``:

* computed from the Tidal's **spec**, with the one schedule evaluation of ``escaler.scaling.tidal``
  (zones, DST, ``excludeDates``) — not from its ``status.desiredReplicas``, so the floor is exact at
  the instant a rule starts or ends, whether or not the Tidal controller has written its status
  yet, and a Tidal nobody follows still works as a floor;
* ``replicas`` = the highest ``replicas`` of the active rules, else ``defaultReplicas``, else None
  (no floor) — exactly what the Tidal's ``status.desiredReplicas`` says at that instant;
* ``next_change`` = the next instant a rule of that Tidal starts or ends (epoch seconds): the
  scaler is looked at again then (the pipeline's ``requeue_after``), so a floor begins and ends on
  time without polling;
* a missing Tidal (``spec`` None) or one whose schedules or dates do not parse gives **no floor**
  and a ``problem`` naming the Tidal and the field (reported on the scaler's ``ScheduleFloor``
  condition), never a failed sync: the scaler goes on scaling on its metrics.

A *floor-only* Tidal is an ordinary Tidal that no StateTrigger follows: its rules are read as a
floor and nothing else. Its ``targetRef`` (required by the Tidal kind) may name the scaler's target;
the Tidal controller then reports it Ready without the ``elasticscaler.io`` labels and without a
conflict (``escaler.reconcilers.tidal.conflicts.floor_user``).

``apply_floor(count, floor)`` is the pipeline's ``floor`` step (``escaler.scaling.pipeline``):
``max(count, floor.replicas)``. It runs after recommend (and fallback, activation) and *before*
stabilization, so the floor enters the stabilization history: at a rule's end the count comes down
through the scale-down window like any lowered recommendation (no cliff), while the step limits and
the ``[minReplicas, maxReplicas]`` clamp still apply after it (the clamp stays last: a floor above
``maxReplicas`` is capped). The window counts from the last sync that saw the floor: the scaler
is synced at the rule's end (the requeue) and at every poll, so the release comes one scale-down
window after the end, or up to one poll interval earlier. Pure: no I/O, no clock (``now`` is an
argument).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from escaler.api.tidal import TidalSpec
from escaler.scaling.tidal import (
    Evaluation,
    ScheduleError,
    TooManyExcludedFires,
    evaluate,
    parse_rule_schedules,
)

__all__ = [
    "FLOOR_ACTIVE",
    "FLOOR_REASONS",
    "NO_FLOOR",
    "TIDAL_INVALID",
    "TIDAL_NOT_FOUND",
    "FloorState",
    "apply_floor",
    "describe",
    "floor_from",
    "floor_of",
]

# ScheduleFloor condition reasons: True while a floor is in force, False otherwise
FLOOR_ACTIVE = "FloorActive"        # a rule is active (or defaultReplicas applies): floor = its replicas
NO_FLOOR = "NoActiveRule"           # no rule active and no defaultReplicas: no floor now
TIDAL_NOT_FOUND = "TidalNotFound"   # floorFrom names a Tidal that does not exist (in the namespace)
TIDAL_INVALID = "TidalInvalid"      # the Tidal's schedules or dates do not parse
FLOOR_REASONS = (FLOOR_ACTIVE, NO_FLOOR, TIDAL_NOT_FOUND, TIDAL_INVALID)


@dataclass(frozen=True)
class FloorState:
    """A scaler's floor at one instant (see the module docstring)."""

    # the Tidal's name (in the scaler's namespace)
    tidal: str
    # the floor now, >= 0; None = no floor (no active rule and no default, or a problem)
    replicas: int | None
    # the active rules' names, in spec order
    active_rules: tuple[str, ...] = ()
    # epoch seconds of the next start/end fire of the Tidal's rules; None when nothing is scheduled
    next_change: float | None = None
    # why there is no floor: the Tidal is missing or invalid (message names it); None otherwise
    problem: str | None = None
    # FLOOR_REASONS member
    reason: str = NO_FLOOR

    def __post_init__(self) -> None:
        if self.replicas is not None and (isinstance(self.replicas, bool) or self.replicas < 0):
            raise ValueError(f"FloorState.replicas must be an integer >= 0 or None, got {self.replicas!r}")
        if self.reason not in FLOOR_REASONS:
            raise ValueError(f"FloorState.reason must be one of {', '.join(FLOOR_REASONS)}, got "
                             f"{self.reason!r}")
        if (self.replicas is not None) != (self.reason == FLOOR_ACTIVE):
            raise ValueError("FloorState: replicas is set exactly when the reason is FloorActive")


def floor_of(name: str, spec: TidalSpec | None, now: datetime) -> FloorState:
    """The floor Tidal ``name`` (``spec`` None: not found) gives at ``now``; see the module docstring."""
    if spec is None:
        return FloorState(name, None, problem=f"Tidal {name!r} (spec.floorFrom.name) not found in the "
                                              "scaler's namespace: no floor", reason=TIDAL_NOT_FOUND)
    rules, errors = parse_rule_schedules(
        [(r.name, r.start, r.end, r.replicas, r.exclude_dates) for r in spec.rules])
    return floor_from(name, errors, lambda: evaluate(rules, spec.default_replicas, now))


def floor_from(name: str, errors: Sequence[ScheduleError],
               evaluation: Callable[[], Evaluation]) -> FloorState:
    """The floor of Tidal ``name`` whose rules parsed with ``errors``, given its ``evaluation`` at
    the instant (called only without errors; it may raise ``TooManyExcludedFires``): ``floor_of``
    with the parse and the evaluation done by the caller (the manager's shared cache)."""
    if errors:
        why = "; ".join(e.message for e in errors[:3])
        return FloorState(name, None, problem=f"Tidal {name!r} (spec.floorFrom.name) is invalid: {why}: "
                                              "no floor", reason=TIDAL_INVALID)
    try:
        ev = evaluation()
    except TooManyExcludedFires as err:
        return FloorState(name, None, problem=f"Tidal {name!r} (spec.floorFrom.name) is invalid: {err}: "
                                              "no floor", reason=TIDAL_INVALID)
    nxt = None if ev.next_transition is None else ev.next_transition.timestamp()
    if ev.desired_replicas is None:
        return FloorState(name, None, ev.active_rules, nxt, reason=NO_FLOOR)
    return FloorState(name, ev.desired_replicas, ev.active_rules, nxt, reason=FLOOR_ACTIVE)


def apply_floor(count: int, floor: FloorState | None) -> int:
    """The pipeline's floor step: ``count`` raised to the floor, when one is in force."""
    if floor is None or floor.replicas is None:
        return count
    return max(count, floor.replicas)


def _rules(names: Sequence[str]) -> str:
    return ", ".join(names)


def describe(floor: FloorState) -> str:
    """One line: the floor in force (or why there is none); the ScheduleFloor message and the step note."""
    if floor.problem is not None:
        return floor.problem
    if floor.replicas is None:
        return f"Tidal {floor.tidal}: no rule active and no defaultReplicas: no floor"
    source = f"rules {_rules(floor.active_rules)}" if floor.active_rules else "defaultReplicas"
    return f"Tidal {floor.tidal}: floor {floor.replicas} replicas ({source})"
