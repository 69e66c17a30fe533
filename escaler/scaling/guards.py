"""Write guards and the deferral state machine (SPEC §4 step 5).

Guards — ``guards(target, current, desired) -> GuardHold | None``. A write from ``current`` to
``desired`` is held when:

* ``RolloutInProgress`` (any write): the target's rollout is incomplete — its
  ``status.observedGeneration`` < ``metadata.generation`` (its controller has not seen the latest
  spec yet), or its updated or ready replicas are behind ``spec.replicas``. Changing the count
  mid-rollout would stack a scale on an unfinished change (and count not-yet-ready pods as load
  capacity); waiting is cheaper.
* ``ScaleDownSettling`` (scale-downs only): a previous scale-down has not settled — the target's
  ``status.replicas`` > ``spec.replicas`` (pods are still terminating). Scaling down again now
  would act on metrics measured with pods that are already going away.

``RolloutInProgress`` is checked first. Facts the target does not report (``None`` in
``TargetSnapshot``: a custom resource without ``updatedReplicas``, say) never hold a write. No
write (``desired == current``) is never held.

Deferral — ``defer(hold, deferred_since, last_forced_write, now, defer_timeout) ->
DeferralOutcome``, the state machine around a hold:

* no hold → the write (if any) proceeds; ``deferred_since`` is cleared: nothing is held, so no
  deferral is running (a sync with nothing to write ends a deferral too);
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

__all__ = [
    "GUARD_REASONS",
    "ROLLOUT_IN_PROGRESS",
    "SCALE_DOWN_SETTLING",
    "DeferralOutcome",
    "GuardHold",
    "TargetSnapshot",
    "defer",
    "guards",
]

ROLLOUT_IN_PROGRESS = "RolloutInProgress"
SCALE_DOWN_SETTLING = "ScaleDownSettling"
GUARD_REASONS = (ROLLOUT_IN_PROGRESS, SCALE_DOWN_SETTLING)


def _opt_count(value: int | None, what: str) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        raise ValueError(f"TargetSnapshot.{what} must be an integer >= 0 or None, got {value!r}")


@dataclass(frozen=True)
class TargetSnapshot:
    """What the guards read from the write target (from its /scale or its object)."""

    # spec.replicas (the count a write changes); >= 0
    spec_replicas: int
    # metadata.generation; None when unknown
    generation: int | None = None
    # status.observedGeneration; None when the target does not report it
    observed_generation: int | None = None
    # status.replicas (pods that exist, terminating ones included); None when not reported
    status_replicas: int | None = None
    # status.updatedReplicas; None when not reported
    updated_replicas: int | None = None
    # status.readyReplicas; None when not reported
    ready_replicas: int | None = None

    def __post_init__(self) -> None:
        if isinstance(self.spec_replicas, bool) or not isinstance(self.spec_replicas, int) \
                or self.spec_replicas < 0:
            raise ValueError(
                f"TargetSnapshot.spec_replicas must be an integer >= 0, got {self.spec_replicas!r}")
        for name in ("generation", "observed_generation", "status_replicas", "updated_replicas",
                     "ready_replicas"):
            _opt_count(getattr(self, name), name)


@dataclass(frozen=True)
class GuardHold:
    """A guard holding this sync's write."""

    # ROLLOUT_IN_PROGRESS | SCALE_DOWN_SETTLING (the AbleToScale reason)
    reason: str
    # why, with the target's numbers (for the condition message and events)
    message: str


def guards(target: TargetSnapshot | None, current: int, desired: int) -> GuardHold | None:
    """The guard holding a write from ``current`` to ``desired``, or None; see the module docstring."""
    if target is None or desired == current:
        return None
    spec = target.spec_replicas
    if (target.generation is not None and target.observed_generation is not None
            and target.observed_generation < target.generation):
        return GuardHold(ROLLOUT_IN_PROGRESS,
                         f"target rollout in progress: status.observedGeneration "
                         f"{target.observed_generation} < metadata.generation {target.generation}")
    if target.updated_replicas is not None and target.updated_replicas < spec:
        return GuardHold(ROLLOUT_IN_PROGRESS,
                         f"target rollout in progress: {target.updated_replicas} of {spec} replicas updated")
    if target.ready_replicas is not None and target.ready_replicas < spec:
        return GuardHold(ROLLOUT_IN_PROGRESS,
                         f"target rollout in progress: {target.ready_replicas} of {spec} replicas ready")
    if desired < current and target.status_replicas is not None and target.status_replicas > spec:
        return GuardHold(SCALE_DOWN_SETTLING,
                         f"previous scale-down not settled: status.replicas {target.status_replicas} "
                         f"> spec.replicas {spec}")
    return None


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
) -> DeferralOutcome:
    """Advance the deferral state machine one sync; see the module docstring."""
    _check_time(now, "now")
    _check_time(deferred_since, "deferred_since")
    _check_time(last_forced_write, "last_forced_write")
    if isinstance(defer_timeout, bool) or not isinstance(defer_timeout, int | float) \
            or not math.isfinite(defer_timeout) or defer_timeout < 0:
        raise ValueError(f"defer_timeout must be a finite number of seconds >= 0, got {defer_timeout!r}")
    if hold is None:
        return DeferralOutcome(hold=None, write_allowed=True, forced=False, started=False,
                               deferred_since=None, last_forced_write=last_forced_write, force_at=None)
    started = deferred_since is None
    since = now if deferred_since is None else deferred_since
    if defer_timeout == 0:
        return DeferralOutcome(hold=hold, write_allowed=False, forced=False, started=started,
                               deferred_since=since, last_forced_write=last_forced_write, force_at=None)
    force_at = since + defer_timeout
    if last_forced_write is not None:
        force_at = max(force_at, last_forced_write + defer_timeout)
    if now >= force_at:
        return DeferralOutcome(hold=hold, write_allowed=True, forced=True, started=started,
                               deferred_since=None, last_forced_write=now, force_at=None)
    return DeferralOutcome(hold=hold, write_allowed=False, forced=False, started=started,
                           deferred_since=since, last_forced_write=last_forced_write, force_at=force_at)
