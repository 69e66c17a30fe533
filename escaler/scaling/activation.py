"""Activation with metric scaling (docs/design.md#beyond-the-seeds): one MetricsTrigger scaler does 0 <-> 1 on
demand and 1 <-> N on load, like KEDA's ``activationThreshold``.

``spec.trigger.metricsTrigger.activation.value`` is a threshold on the trigger's *wake-capable*
metrics: the External and ExternalServer metrics, whose value is a total that exists while the
target has 0 replicas (a Resource or Custom metric is read from the target's pods, and there are
none at 0). Each poll reads those totals (``ActivationReading``: the newest sample, not the window's
aggregate, so a wake is not smoothed away) and ``ActivationState`` says:

* **active** — at least one reading is *strictly greater* than the value (KEDA's rule: a metric at
  the threshold does not activate);
* **inactive** — every reading is known and none is above the value;
* **unknown** — no reading is known (every wake-capable read failed this poll) but others are: the
  recommendation of the other metrics stands, and the count is never taken to 0 on a missing
  reading (as partial metrics never scale down).

``apply(state, recommendation, current)`` is the pipeline's ``activation`` step (after recommend and
before stabilize; ``escaler.scaling.pipeline.decide``):

* inactive → **0**, the algorithm's own rate cap does not apply (a halving cap never reaches 0);
  the scale-down stabilization window still does, so going to 0 waits for a whole window of
  inactive polls (KEDA's ``cooldownPeriod``), and step limits and the clamp (``minReplicas`` >= 1
  keeps the target up: activation is then only informative, as KEDA ignores it) apply after;
* active → at least **1** (the recommendation when higher). From 0 the caller recommends 0 (no
  algorithm runs without replicas: a per-replica value has no denominator) and this step wakes
  it to 1; the next poll, at 1 replica, scales on load. A wake is immediate: the pipeline does
  not let a scale-up stabilization window hold the count at 0;
* unknown → the recommendation, raised to 1 when the target is up (at 0 it stays 0).

A poll where no metric at all is usable has no recommendation: the pipeline holds the count (0
stays 0), or engages ``spec.fallback`` when configured; activation is not consulted.

Pure: no I/O, no clock.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["ACTIVE", "INACTIVE", "UNKNOWN", "ActivationReading", "ActivationState", "apply", "describe"]

# ActivationState.verdict values
ACTIVE = "active"
INACTIVE = "inactive"
UNKNOWN = "unknown"


def _fmt(value: float) -> str:
    return f"{value:g}"


@dataclass(frozen=True)
class ActivationReading:
    """One wake-capable metric's total this poll."""

    # the metric's display name (metric name or query), for messages
    name: str
    # the metric's total (not per replica); None when this poll could not read it
    value: float | None

    def __post_init__(self) -> None:
        if self.value is not None and not math.isfinite(self.value):
            object.__setattr__(self, "value", None)  # NaN/Inf never decide anything


@dataclass(frozen=True)
class ActivationState:
    """``spec.trigger.metricsTrigger.activation`` and this poll's readings."""

    # activation.value: active when a reading is strictly greater
    threshold: float
    # the wake-capable metrics' readings, in spec order; at least one
    readings: tuple[ActivationReading, ...]

    def __post_init__(self) -> None:
        if not math.isfinite(self.threshold):
            raise ValueError(f"ActivationState.threshold must be a finite number, got {self.threshold!r}")
        if not self.readings:
            raise ValueError("ActivationState.readings: at least one External or ExternalServer metric")

    @property
    def verdict(self) -> str:
        """ACTIVE, INACTIVE or UNKNOWN (see the module docstring)."""
        known = [r.value for r in self.readings if r.value is not None]
        if any(v > self.threshold for v in known):
            return ACTIVE
        return INACTIVE if known else UNKNOWN

    @property
    def active(self) -> bool:
        return self.verdict == ACTIVE


def describe(state: ActivationState) -> str:
    """The readings against the value, in words (the step's note, the ScalingActive message's tail)."""
    values = ", ".join(f"{r.name[:80]} {'unreadable' if r.value is None else _fmt(r.value)}"
                       for r in state.readings)
    verdict = state.verdict
    if verdict == ACTIVE:
        return f"above activation ({values}; activation.value {_fmt(state.threshold)}): active"
    if verdict == INACTIVE:
        return (f"below activation ({values}; activation.value {_fmt(state.threshold)}): the target goes "
                f"to 0")
    return f"activation unknown ({values}): never scaling to 0 on a missing reading"


def apply(state: ActivationState, recommendation: int, current: int) -> int:
    """The activation step (see the module docstring): the recommendation it passes on."""
    if recommendation < 0 or current < 0:
        raise ValueError(f"activation.apply: counts must be >= 0, got {recommendation!r}, {current!r}")
    verdict = state.verdict
    if verdict == INACTIVE:
        return 0
    if verdict == ACTIVE or current > 0:
        return max(recommendation, 1)
    return recommendation
