"""Write guards and the deferral state machine (docs/concepts.md#the-decision-pipeline step 5).

Guards — ``guards(target, current, desired) -> GuardHold | None``. The guard input
(``TargetSnapshot``) carries *facts the target's ResourceHandler already computed* (one source of
truth: the guards never recompute rollout state from raw counts, so each kind's own exceptions —
a paused Deployment, a StatefulSet partition or ``OnDelete`` — are honoured here as they are
there), plus what the reconciler counted about the target's pods. A write from ``current`` to
``desired`` is held when:

* ``RolloutInProgress`` (any write): ``rollout_in_progress`` — the target's *template rollout* is
  incomplete (``status.observedGeneration`` < ``metadata.generation``, or updated replicas behind
  what the kind expects). Changing the count mid-rollout would stack a scale on an unfinished
  change; waiting is cheaper. ``rollout_message`` says which check holds.
* ``ScaleDownSettling`` (scale-downs only): ``settling_scale_down`` — a previous scale-down has not
  settled (``status.replicas`` > ``spec.replicas``: pods are still terminating). Scaling down again
  now would act on metrics measured with pods that are already going away.
* ``InsufficientCapacity`` (scale-ups only): ``unschedulable_pods`` > 0 — pods of the target are
  Pending as Unschedulable beyond the reconciler's grace period. More replicas would only queue
  behind them; the scheduler's message (``unschedulable_message``) says why. A scale-down or a
  no-op is never held by them (removing replicas is how capacity comes back).

Checked in that order. Replicas that merely are not Ready yet (an LLM server loading weights for
minutes) are **not** a rollout: they count as capacity on the way (HPA's unready-pod rule), so
the guards never wait for them — the snapshot has no ready count for that reason. No write
(``desired == current``) is never held, but keeps a running deferral going (below).

``insufficient_capacity(target)`` is the InsufficientCapacity report whatever the direction: the
condition model shows it on AbleToScale even on a sync it does not hold (a no-op).

Deferral — ``defer(hold, deferred_since, last_forced_write, now, defer_timeout) ->
DeferralOutcome``, the state machine around a hold (any of the three guards):

* no hold → the write (if any) proceeds; ``deferred_since`` is cleared: nothing is held, so no
  deferral is running;
* a sync with nothing to write (``no_op``) while a deferral runs and a guard still stands on the
  target (``guards(..., deferring=True)``: rollout, settling scale-down or Unschedulable pods,
  whatever the direction) → the deferral goes on: same ``deferred_since``, same ``force_at``, the
  guard's reason stays on AbleToScale (seed 000: "also on a no-op while a deferral runs"). A
  recommendation that flips between a held write and the current count during one rollout is thus
  forced ``defer_timeout`` after the *first* hold, with one ScalingDeferred. A no-op with no guard
  left ends the deferral; a no-op never starts one;
* a hold and no running deferral → the deferral starts: ``deferred_since = now``, ``started``
  (the reconciler emits ``ScalingDeferred`` once, for this sync only);
* a hold while a deferral runs → the write stays held until ``force_at`` = ``deferred_since +
  defer_timeout``, but no earlier than ``last_forced_write + defer_timeout`` (forced writes are
  paced to at most one per ``defer_timeout``). At or after ``force_at`` the write is **forced**
  (``AbleToScale=True/DeferralTimedOut``, event ``DeferralTimedOut``); the forced write clears
  ``deferred_since`` and sets ``last_forced_write = now``;
* ``defer_timeout == 0`` never forces: the write is held for as long as the guard holds.

The outcome is the state *after a successful write*; when the write fails, the reconciler keeps
the previous ``deferred_since``/``last_forced_write`` (``Decision.state_after_failed_write``).
``now`` and the stored times are seconds on the caller's clock; the pipeline uses wall-clock
seconds since the epoch because ``deferredSince`` is persisted in status and must survive a
restart. Pure: no I/O, no clock.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

from escaler.scaling.text import cap_text

__all__ = [
    "GUARD_REASONS",
    "INSUFFICIENT_CAPACITY",
    "ROLLOUT_IN_PROGRESS",
    "SCALE_DOWN_SETTLING",
    "DeferralOutcome",
    "GuardHold",
    "HandlerFacts",
    "TargetSnapshot",
    "defer",
    "guards",
    "insufficient_capacity",
]

ROLLOUT_IN_PROGRESS = "RolloutInProgress"
SCALE_DOWN_SETTLING = "ScaleDownSettling"
INSUFFICIENT_CAPACITY = "InsufficientCapacity"
GUARD_REASONS = (ROLLOUT_IN_PROGRESS, SCALE_DOWN_SETTLING, INSUFFICIENT_CAPACITY)


class HandlerFacts(Protocol):
    """What a ResourceHandler's read reports (``escaler.targets.TargetSnapshot`` is one)."""

    @property
    def spec_replicas(self) -> int: ...

    @property
    def status_replicas(self) -> int: ...

    @property
    def rollout_in_progress(self) -> bool: ...

    @property
    def rollout_message(self) -> str: ...

    @property
    def settling_scale_down(self) -> bool: ...


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


@dataclass(frozen=True)
class TargetSnapshot:
    """What the guards read about the write target: the handler's facts and the pod count."""

    # spec.replicas (the count a write changes); >= 0
    spec_replicas: int
    # status.replicas (pods that exist, terminating ones included), for messages; None = not reported
    status_replicas: int | None = None
    # the handler's verdict: the target's template rollout is incomplete (with each kind's exceptions)
    rollout_in_progress: bool = False
    # the handler's reason for rollout_in_progress ("" when it is False); capped at 1 KiB
    rollout_message: str = ""
    # the handler's verdict: a previous scale-down has not settled (status.replicas > spec.replicas)
    settling_scale_down: bool = False
    # pods of the target Pending as Unschedulable beyond the grace period (the reconciler counts); >= 0
    unschedulable_pods: int = 0
    # the scheduler's message for one of them ("" when none); capped at 1 KiB
    unschedulable_message: str = ""

    def __post_init__(self) -> None:
        if not _is_count(self.spec_replicas):
            raise ValueError(
                f"TargetSnapshot.spec_replicas must be an integer >= 0, got {self.spec_replicas!r}")
        if self.status_replicas is not None and not _is_count(self.status_replicas):
            raise ValueError(f"TargetSnapshot.status_replicas must be an integer >= 0 or None, got "
                             f"{self.status_replicas!r}")
        if not _is_count(self.unschedulable_pods):
            raise ValueError(f"TargetSnapshot.unschedulable_pods must be an integer >= 0, got "
                             f"{self.unschedulable_pods!r}")
        for name in ("rollout_in_progress", "settling_scale_down"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"TargetSnapshot.{name} must be a bool, got {getattr(self, name)!r}")
        object.__setattr__(self, "rollout_message", cap_text(self.rollout_message))
        object.__setattr__(self, "unschedulable_message", cap_text(self.unschedulable_message))

    @classmethod
    def of(cls, facts: HandlerFacts, *, unschedulable_pods: int = 0,
           unschedulable_message: str = "") -> TargetSnapshot:
        """The guard input from a ResourceHandler's read and the reconciler's Unschedulable count."""
        return cls(spec_replicas=facts.spec_replicas, status_replicas=facts.status_replicas,
                   rollout_in_progress=facts.rollout_in_progress, rollout_message=facts.rollout_message,
                   settling_scale_down=facts.settling_scale_down, unschedulable_pods=unschedulable_pods,
                   unschedulable_message=unschedulable_message)


@dataclass(frozen=True)
class GuardHold:
    """A guard holding this sync's write (or, for ``insufficient_capacity``, reporting)."""

    # one of GUARD_REASONS (the AbleToScale reason)
    reason: str
    # why, with the target's numbers (for the condition message and events)
    message: str


def insufficient_capacity(target: TargetSnapshot | None) -> GuardHold | None:
    """The InsufficientCapacity report when pods of the target are Unschedulable, else None."""
    if target is None or target.unschedulable_pods == 0:
        return None
    n = target.unschedulable_pods
    pods = "1 pod" if n == 1 else f"{n} pods"
    why = f": {target.unschedulable_message}" if target.unschedulable_message else ""
    return GuardHold(INSUFFICIENT_CAPACITY,
                     f"{pods} of the target Pending as Unschedulable{why}; a scale-up waits for them, a "
                     f"scale-down does not")


def guards(target: TargetSnapshot | None, current: int, desired: int, *,
           deferring: bool = False) -> GuardHold | None:
    """The guard holding a write from ``current`` to ``desired``, or None; see the module docstring.

    ``deferring``: a deferral is running. A no-op then reports the first guard the target still
    raises in either direction, which keeps the deferral (and its reason) going; without a running
    deferral a no-op is never held."""
    if target is None:
        return None
    if desired == current:
        if not deferring:
            return None
        return _rollout(target) or _settling(target) or insufficient_capacity(target)
    hold = _rollout(target)
    if hold is None and desired < current:
        hold = _settling(target)
    if hold is None and desired > current:
        hold = insufficient_capacity(target)
    return hold


def _rollout(target: TargetSnapshot) -> GuardHold | None:
    if not target.rollout_in_progress:
        return None
    detail = f": {target.rollout_message}" if target.rollout_message else ""
    return GuardHold(ROLLOUT_IN_PROGRESS, f"target rollout in progress{detail}")


def _settling(target: TargetSnapshot) -> GuardHold | None:
    if not target.settling_scale_down:
        return None
    counts = "" if target.status_replicas is None else \
        f": status.replicas {target.status_replicas} > spec.replicas {target.spec_replicas}"
    return GuardHold(SCALE_DOWN_SETTLING, f"previous scale-down not settled{counts}")


@dataclass(frozen=True)
class DeferralOutcome:
    """What ``defer`` decided; the times are the state to persist after a successful write."""

    # the guard seen this sync (also set when its write was forced), None when nothing holds
    hold: GuardHold | None
    # the write may happen now (no hold, or a forced write)
    write_allowed: bool
    # the held write is forced now (DeferralTimedOut)
    forced: bool
    # a deferral started this sync: emit ScalingDeferred
    started: bool
    # the running deferral's start; None when nothing is held (cleared by a write)
    deferred_since: float | None
    # when the last forced write happened (for pacing); None when never
    last_forced_write: float | None
    # while held: when the write will be forced; None when not held or never forced (timeout 0)
    force_at: float | None

    @property
    def held(self) -> bool:
        """A guard holds the write this sync (not forced)."""
        return self.hold is not None and not self.forced


def _check_time(value: float | None, what: str) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)
                              or not math.isfinite(value)):
        raise ValueError(f"{what} must be a finite number or None, got {value!r}")


def defer(
    hold: GuardHold | None,
    deferred_since: float | None,
    last_forced_write: float | None,
    now: float,
    defer_timeout: float,
    *,
    no_op: bool = False,
) -> DeferralOutcome:
    """Advance the deferral state machine one sync; see the module docstring. ``no_op``: this sync
    has nothing to write (``hold`` is then ``guards(..., deferring=True)``)."""
    _check_time(now, "now")
    _check_time(deferred_since, "deferred_since")
    _check_time(last_forced_write, "last_forced_write")
    if isinstance(defer_timeout, bool) or not isinstance(defer_timeout, int | float) \
            or not math.isfinite(defer_timeout) or defer_timeout < 0:
        raise ValueError(f"defer_timeout must be a finite number of seconds >= 0, got {defer_timeout!r}")
    if hold is None or (no_op and deferred_since is None):
        return DeferralOutcome(hold=None, write_allowed=True, forced=False, started=False,
                               deferred_since=None, last_forced_write=last_forced_write, force_at=None)
    if no_op and deferred_since is not None:
        # nothing to force: the running deferral goes on, its force time unchanged
        force_at = None if defer_timeout == 0 else _force_at(deferred_since, last_forced_write, defer_timeout)
        return DeferralOutcome(hold=hold, write_allowed=False, forced=False, started=False,
                               deferred_since=deferred_since, last_forced_write=last_forced_write,
                               force_at=force_at)
    started = deferred_since is None
    since = now if deferred_since is None else deferred_since
    if defer_timeout == 0:
        return DeferralOutcome(hold=hold, write_allowed=False, forced=False, started=started,
                               deferred_since=since, last_forced_write=last_forced_write, force_at=None)
    force_at = _force_at(since, last_forced_write, defer_timeout)
    if now >= force_at:
        return DeferralOutcome(hold=hold, write_allowed=True, forced=True, started=started,
                               deferred_since=None, last_forced_write=now, force_at=None)
    return DeferralOutcome(hold=hold, write_allowed=False, forced=False, started=started,
                           deferred_since=since, last_forced_write=last_forced_write, force_at=force_at)


def _force_at(since: float, last_forced_write: float | None, defer_timeout: float) -> float:
    """When a write held since ``since`` is forced: after the timeout, and paced after the last one."""
    force_at = since + defer_timeout
    if last_forced_write is not None:
        force_at = max(force_at, last_forced_write + defer_timeout)
    return force_at
