"""Fallback when the metrics die (docs/design.md#beyond-the-seeds): count the polls without a usable signal,
and engage.

A MetricsTrigger ElasticScaler or an LLMScaler with ``spec.fallback {failureThreshold, replicas}``
counts its consecutive *polls* (collections or provider reads, not reconciles: a sync between two
polls reuses the last outcome and counts nothing) whose outcome is ``DecisionUnavailable`` — every
metric failed or had nothing usable in its window, or the custom provider gave no decision.
``count`` is the one rule:

* a fresh poll without a usable signal adds one, up to ``failureThreshold`` (the count stops
  there: while engaged it no longer changes, so the status holding it is not rewritten per poll);
  the first one of a streak records its time (``since``);
* a fresh poll with a usable signal (a recommendation, even from partial metrics or the window's
  earlier samples) clears the count;
* anything else — a reused outcome, an InvalidSpec, a target at 0 replicas (ScalingDisabled) —
  leaves it as it is.

``FallbackState.engaged`` is ``failures >= failureThreshold``; the pipeline
(``escaler.scaling.pipeline.decide``) then takes ``replicas`` as the recommendation of the sync
(its own ``fallback`` step) and runs it through stabilization, step limits, clamp and guards like
any other (KEDA feeds its fallback count to the HPA as a metric, so the HPA's behavior and bounds
apply to it too). The count is recorded in the stabilization history, so when the signal comes back
a scale-down below it waits for the scale-down window. Below the threshold the count is held as
without a fallback, and the step says how many polls remain.

The count is kept in ``status.fallback`` by the reconciler (a new leader goes on counting).
Pure: no I/O, no clock (``now`` comes in).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["FallbackCount", "FallbackState", "count"]


@dataclass(frozen=True)
class FallbackCount:
    """Consecutive polls without a usable signal, and when the first of them happened."""

    # >= 1
    failures: int
    # epoch seconds of the first poll of the streak
    since: float

    def __post_init__(self) -> None:
        if isinstance(self.failures, bool) or not isinstance(self.failures, int) or self.failures < 1:
            raise ValueError(f"FallbackCount.failures must be an integer >= 1, got {self.failures!r}")
        if not math.isfinite(self.since):
            raise ValueError(f"FallbackCount.since must be a finite number, got {self.since!r}")


@dataclass(frozen=True)
class FallbackState:
    """What the pipeline reads: the policy (``spec.fallback``) and the running count."""

    # spec.fallback.failureThreshold, >= 1
    failure_threshold: int
    # spec.fallback.replicas, >= 0
    replicas: int
    # the running count; None when the last poll had a usable signal (or none failed yet)
    count: FallbackCount | None = None

    def __post_init__(self) -> None:
        if self.failure_threshold < 1:
            raise ValueError(f"FallbackState.failure_threshold must be >= 1, got {self.failure_threshold!r}")
        if self.replicas < 0:
            raise ValueError(f"FallbackState.replicas must be >= 0, got {self.replicas!r}")

    @property
    def failures(self) -> int:
        return 0 if self.count is None else self.count.failures

    @property
    def engaged(self) -> bool:
        """``failureThreshold`` consecutive polls had no usable signal: go to ``replicas``."""
        return self.failures >= self.failure_threshold


def count(previous: FallbackCount | None, *, fresh: bool, unavailable: bool, usable: bool, now: float,
          failure_threshold: int) -> FallbackCount | None:
    """The count after one sync (see the module docstring). ``fresh``: the outcome comes from a new
    poll; ``unavailable``: it is DecisionUnavailable; ``usable``: it recommends a count."""
    if not fresh:
        return previous
    if usable:
        return None
    if not unavailable:
        return previous
    if previous is None:
        return FallbackCount(1, now)
    return FallbackCount(min(previous.failures + 1, max(failure_threshold, 1)), previous.since)
