"""The scaler condition model (docs/concepts.md#conditions-and-health): one sync's outcome → conditions and
events — the one condition engine of escaler (every reconciler writes its conditions through this module).

``conditions_for(outcome, generation, now_iso, previous) -> (conditions, events)`` implements the
docs/concepts.md#conditions-and-health table for every scaler kind:

=============== ====== ================================================================
type            status reasons (when)
=============== ====== ================================================================
ScalingActive   True   MetricsAvailable ("evaluated K of M metrics; recommends N replicas", with
                       MetricsTrigger activation "; below activation (...): the target goes to 0"
                       or "; above activation (...): active"),
                       DecisionReceived (a State/Signal/custom decision was read)
ScalingActive   False  DecisionUnavailable (the message names the source and the error, capped
                       at 1 KiB), InvalidSpec, ScalingDisabled (0 replicas, the trigger cannot
                       scale from zero), Advisory (Advisory mode with ``scalingAlgorithm: HPA``:
                       the companion HPA is not created, so nothing computes a decision; written
                       by the reconciler with ``set_condition`` and ``ADVISORY_HPA_MESSAGE``)
AbleToScale     True   Synced, RolloutInProgress / ScaleDownSettling / InsufficientCapacity (a
                       guard holds the write), DeferralTimedOut (a held write was forced),
                       ScaleDownStabilized, InsufficientCapacity (reported: Unschedulable pods,
                       nothing written this sync), Paused
AbleToScale     False  InvalidSpec / TargetNotFound / TargetUnreadable / TargetWriteFailed
ScalingLimited  True   TooFewReplicas / TooManyReplicas / ScaleUpLimit / ScaleDownLimit
ScalingLimited  False  DesiredWithinRange
Validated       True   Valid
Validated       False  InvalidSpec / TargetConflict / AlgorithmNotRegistered / UnsupportedMetric /
                       MetricNotGranted / TargetChainInvalid
MetricsPipeline True   AllMetricsAvailable
MetricsPipeline False  PartialMetrics / NoMetrics
ScheduleFloor   True   FloorActive (``spec.floorFrom``: the Tidal's floor in force, its replicas
                       and rules named)
ScheduleFloor   False  NoActiveRule / TidalNotFound / TidalInvalid (no floor now; the message
                       names the Tidal). Informational: never part of the health rule
=============== ====== ================================================================

Rules:

* **AbleToScale=True precedence**, in one sync: ``Paused`` (the pause annotations bypass the
  guards, so nothing competes with it), then a guard hold (``RolloutInProgress`` /
  ``ScaleDownSettling`` / ``InsufficientCapacity``) or ``DeferralTimedOut``, then
  ``ScaleDownStabilized``, then ``InsufficientCapacity`` as a report (pods of the target are
  Unschedulable and the sync writes nothing: the scheduler's message is shown, health *waiting*),
  then ``Synced`` (a write; its message mentions Unschedulable pods when there are).
  ``elasticscaler.io/paused-replicas`` reports ``Paused`` too (pinned, message names N).
* **ScalingLimited** reports ``Decision.limited_by``: the *last* deciding step that changed the
  count (a step limit not undone by the clamp is reported over the clamp; the algorithm's own
  rate cap — ``rateLimit``, apa's scaleUpRate/scaleDownRate — is ScaleUpLimit/ScaleDownLimit with
  a message saying it was the algorithm's rate), and is only updated on a sync where ScalingActive
  is True — and not while paused or pinned (the pipeline did not decide the count then).
  Otherwise it is left exactly as it was.
* **Target errors** (``SyncOutcome.target_error``) touch only AbleToScale (and the conditions'
  observedGeneration); never ``Validated``, even when the caller passes a validation result (it
  is ignored on such a sync). A read error (``InvalidSpec`` for an unparsable target apiVersion,
  ``TargetNotFound``, ``TargetUnreadable``; the pipeline did not run) writes AbleToScale=False
  only. ``TargetWriteFailed`` sets AbleToScale=False and still writes what was computed earlier in
  that sync (ScalingActive, ScalingLimited, MetricsPipeline).
* A failed validation with no decision (the pipeline did not run) sets ScalingActive=False/
  InvalidSpec for the reasons that mean "the spec cannot produce a decision" (InvalidSpec,
  AlgorithmNotRegistered, UnsupportedMetric, MetricNotGranted, TargetChainInvalid), not for
  TargetConflict (the spec is fine; another scaler owns the target).
* **MetricsPipeline** is written for metrics-based recommendations (``FROM_METRICS``) and removed
  for decision-based ones (a provider switch overwrites the conditions at once). It reports a
  failing source *as soon as a read fails* (``RecommendResult.metric_errors``: this sync's read
  errors, one per metric), even while the decision still comes from the window's earlier samples:
  any read error → False/``PartialMetrics`` (some metric read fine this sync) or False/``NoMetrics``
  (none did), the message naming each failing source with its error (each capped at 1 KiB, the
  whole message at ``MAX_METRICS_PIPELINE_MESSAGE_BYTES``) and saying when the decision used the
  window's earlier samples. True/``AllMetricsAvailable`` only when every read succeeded and every
  metric was evaluated.
* **DecisionAvailable** (LLMScaler, ``SyncOutcome.decision_available``) mirrors ScalingActive
  exactly (status, reason, message, observedGeneration, lastTransitionTime) whenever ScalingActive
  is written.
* **ScheduleFloor** is written on every sync the pipeline ran for a scaler with ``spec.floorFrom``
  (``Decision.floor``, ``escaler.scaling.floor``) and removed on a sync without it.
* A stale ``ScalingDeferred`` condition (older controllers, ``DROPPED_TYPES``) is removed.
  Conditions of other types are kept untouched.
* Every condition written in this sync carries ``observedGeneration = generation``;
  ``lastTransitionTime`` is ``now_iso`` when the status changed (or the condition is new) and is
  kept otherwise, even when the reason or message changed (``metav1.Condition`` semantics).
  Messages are capped at 32 KiB (bytes; ``metav1.Condition``'s maxLength).
* The result is ordered: ScalingActive, AbleToScale, ScalingLimited, Validated, MetricsPipeline,
  DecisionAvailable (``CONDITION_ORDER``), then other types in their previous order — so an
  unchanged sync returns an equal list and the reconciler can skip the status write.

The same rules, one condition at a time, for the paths ``conditions_for`` does not cover (the
companion-HPA mirror, holds before any decision, an object that does not parse):

* ``set_condition(conditions, type, status, reason, message, generation=, now_iso=)`` → the list
  with that condition replaced (transition time kept unless the status flips, observedGeneration,
  capped message, order, dropped types removed);
* ``remove_condition(conditions, type)``, ``ordered(conditions)`` (order + dropped types);
* ``plan(outcome)`` → ``Plan``: the (status, reason, message) per type ``conditions_for`` would
  write, the types it removes, and its events — without the previous conditions: a reconciler
  compares plans to skip rebuilding a status nothing changed in;
* ``changed_types(previous, current)`` → the types whose (status, reason) changed or are new: what
  an event is emitted for, so a steady state emits nothing;
* ``ConditionValue.from_wire(mapping)`` / ``.to_wire()`` convert the JSON (camelCase) form.

Events (``EventValue(type, reason, note)``; the recorder deduplicates and aggregates):
``SuccessfulRescale`` (Normal, a normal write: "New size: N; reason: ..."), ``ScalingDeferred``
(Normal, once per deferral: the sync the deferral starts), ``DeferralTimedOut`` (Warning, a forced
write), ``FailedGetScale`` (Warning, a target read error), ``FailedRescale`` (Warning, a failed
write), ``FailedComputeMetricsReplicas`` (Warning, ScalingActive=False with DecisionUnavailable or
InvalidSpec), ``TargetConflict`` (Warning, Validated=False/TargetConflict). Advisory mode never
writes, so it never emits the write events (SuccessfulRescale, DeferralTimedOut, FailedRescale);
the others are emitted, ScalingDeferred with an "Advisory mode:" note.

``health(conditions)`` is the docs/concepts.md#conditions-and-health rule: ``failing`` when AbleToScale or
ScalingActive is False (and, beyond the documented rule, when Validated is False: a refused scaler never
writes); ``waiting`` when AbleToScale is True with a guard or stabilization reason (``WAITING_REASONS``:
RolloutInProgress, ScaleDownSettling, InsufficientCapacity, ScaleDownStabilized); ``ok``
otherwise. ScalingLimited is informational.
Pure: no I/O, no clock (the caller passes ``now_iso``).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal, Protocol

from escaler.api.scaler import BoundBy
from escaler.scaling.activation import describe as describe_activation
from escaler.scaling.floor import FLOOR_ACTIVE, NO_FLOOR, TIDAL_INVALID, TIDAL_NOT_FOUND
from escaler.scaling.floor import describe as describe_floor
from escaler.scaling.guards import INSUFFICIENT_CAPACITY, ROLLOUT_IN_PROGRESS, SCALE_DOWN_SETTLING
from escaler.scaling.pipeline import (
    DECISION_UNAVAILABLE,
    FROM_METRICS,
    INVALID_SPEC,
    RECOMMENDED,
    SCALE_DOWN_LIMIT,
    SCALE_UP_LIMIT,
    SCALING_DISABLED,
    TOO_FEW_REPLICAS,
    TOO_MANY_REPLICAS,
    Decision,
    fallback_note,
)
from escaler.scaling.text import MAX_ERROR_BYTES, cap_text, format_time

__all__ = [
    "ABLE_TO_SCALE",
    "ADVISORY",
    "ADVISORY_HPA_MESSAGE",
    "ALGORITHM_NOT_REGISTERED",
    "ALL_METRICS_AVAILABLE",
    "CONDITION_ORDER",
    "DECISION_AVAILABLE",
    "DECISION_RECEIVED",
    "DECISION_UNAVAILABLE",
    "DEFERRAL_TIMED_OUT",
    "DESIRED_WITHIN_RANGE",
    "DROPPED_TYPES",
    "EVENT_DEFERRAL_TIMED_OUT",
    "EVENT_FAILED_COMPUTE_METRICS_REPLICAS",
    "EVENT_FAILED_GET_SCALE",
    "EVENT_FAILED_RESCALE",
    "EVENT_SCALING_DEFERRED",
    "EVENT_SUCCESSFUL_RESCALE",
    "EVENT_TARGET_CONFLICT",
    "FAILING",
    "FLOOR_ACTIVE",
    "INSUFFICIENT_CAPACITY",
    "INVALID_SPEC",
    "MAX_CONDITION_MESSAGE_BYTES",
    "MAX_METRICS_PIPELINE_MESSAGE_BYTES",
    "METRICS_AVAILABLE",
    "METRICS_PIPELINE",
    "METRIC_NOT_GRANTED",
    "NORMAL",
    "NO_FLOOR",
    "NO_METRICS",
    "OK",
    "PARTIAL_METRICS",
    "PAUSED",
    "ROLLOUT_IN_PROGRESS",
    "SCALE_DOWN_LIMIT",
    "SCALE_DOWN_SETTLING",
    "SCALE_DOWN_STABILIZED",
    "SCALE_UP_LIMIT",
    "SCALING_ACTIVE",
    "SCALING_DEFERRED",
    "SCALING_DISABLED",
    "SCALING_LIMITED",
    "SCHEDULE_FLOOR",
    "SYNCED",
    "TARGET_CHAIN_INVALID",
    "TARGET_CONFLICT",
    "TARGET_NOT_FOUND",
    "TARGET_READ_ERRORS",
    "TARGET_UNREADABLE",
    "TARGET_WRITE_FAILED",
    "TIDAL_INVALID",
    "TIDAL_NOT_FOUND",
    "TOO_FEW_REPLICAS",
    "TOO_MANY_REPLICAS",
    "UNSUPPORTED_METRIC",
    "VALID",
    "VALIDATED",
    "VALIDATION_FAILURES",
    "WAITING",
    "WAITING_REASONS",
    "WARNING",
    "ConditionValue",
    "EventValue",
    "Health",
    "Plan",
    "SyncOutcome",
    "TargetError",
    "Validation",
    "changed_types",
    "conditions_for",
    "health",
    "limited_by_algorithm_rate",
    "ordered",
    "plan",
    "remove_condition",
    "set_condition",
]

# condition types
SCALING_ACTIVE = "ScalingActive"
ABLE_TO_SCALE = "AbleToScale"
SCALING_LIMITED = "ScalingLimited"
VALIDATED = "Validated"
METRICS_PIPELINE = "MetricsPipeline"
DECISION_AVAILABLE = "DecisionAvailable"   # LLMScaler, deprecated: mirrors ScalingActive
SCHEDULE_FLOOR = "ScheduleFloor"           # spec.floorFrom: whether the Tidal's floor is in force
SCALING_DEFERRED = "ScalingDeferred"       # removed: written by older controllers
CONDITION_ORDER = (SCALING_ACTIVE, ABLE_TO_SCALE, SCALING_LIMITED, VALIDATED, METRICS_PIPELINE,
                   DECISION_AVAILABLE, SCHEDULE_FLOOR)
# condition types removed on the first status write (docs/concepts.md#conditions-and-health: a stale
# ScalingDeferred)
DROPPED_TYPES = frozenset({SCALING_DEFERRED})

# ScalingActive reasons (DECISION_UNAVAILABLE, INVALID_SPEC, SCALING_DISABLED come from pipeline)
METRICS_AVAILABLE = "MetricsAvailable"
DECISION_RECEIVED = "DecisionReceived"
# ScalingActive=False: Advisory mode on a scalingAlgorithm HPA scaler (the companion HPA is not
# created, so nothing computes a decision); ScalingDisabled stays reserved for zero replicas
ADVISORY = "Advisory"
ADVISORY_HPA_MESSAGE = (
    "Advisory mode: the companion HPA is not created (it would scale the target), so no decision is "
    "computed with scalingAlgorithm HPA; use an escaler algorithm such as apa to get advisory decisions")
# AbleToScale reasons (ROLLOUT_IN_PROGRESS, SCALE_DOWN_SETTLING, INSUFFICIENT_CAPACITY come from guards)
SYNCED = "Synced"
DEFERRAL_TIMED_OUT = "DeferralTimedOut"
SCALE_DOWN_STABILIZED = "ScaleDownStabilized"
PAUSED = "Paused"
TARGET_NOT_FOUND = "TargetNotFound"
TARGET_UNREADABLE = "TargetUnreadable"
TARGET_WRITE_FAILED = "TargetWriteFailed"
TARGET_READ_ERRORS = (INVALID_SPEC, TARGET_NOT_FOUND, TARGET_UNREADABLE)
# ScalingLimited reasons (TOO_FEW_REPLICAS, TOO_MANY_REPLICAS, SCALE_UP_LIMIT, SCALE_DOWN_LIMIT come
# from pipeline: they are Decision.limited_by's values)
DESIRED_WITHIN_RANGE = "DesiredWithinRange"
# Validated reasons
VALID = "Valid"
TARGET_CONFLICT = "TargetConflict"
ALGORITHM_NOT_REGISTERED = "AlgorithmNotRegistered"
UNSUPPORTED_METRIC = "UnsupportedMetric"
# scalingAlgorithm HPA with a Custom/External metric the manager's own account may not read
METRIC_NOT_GRANTED = "MetricNotGranted"
TARGET_CHAIN_INVALID = "TargetChainInvalid"
VALIDATION_FAILURES = (INVALID_SPEC, TARGET_CONFLICT, ALGORITHM_NOT_REGISTERED, UNSUPPORTED_METRIC,
                       METRIC_NOT_GRANTED, TARGET_CHAIN_INVALID)
# MetricsPipeline reasons
ALL_METRICS_AVAILABLE = "AllMetricsAvailable"
PARTIAL_METRICS = "PartialMetrics"
NO_METRICS = "NoMetrics"

# event types and reasons
NORMAL = "Normal"
WARNING = "Warning"
EVENT_SUCCESSFUL_RESCALE = "SuccessfulRescale"
EVENT_SCALING_DEFERRED = "ScalingDeferred"
EVENT_DEFERRAL_TIMED_OUT = "DeferralTimedOut"
EVENT_FAILED_GET_SCALE = "FailedGetScale"
EVENT_FAILED_RESCALE = "FailedRescale"
EVENT_FAILED_COMPUTE_METRICS_REPLICAS = "FailedComputeMetricsReplicas"
EVENT_TARGET_CONFLICT = "TargetConflict"

# health()
Health = Literal["failing", "waiting", "ok"]
FAILING: Health = "failing"
WAITING: Health = "waiting"
OK: Health = "ok"
# AbleToScale=True reasons that make a scaler *waiting*
WAITING_REASONS = frozenset({ROLLOUT_IN_PROGRESS, SCALE_DOWN_SETTLING, INSUFFICIENT_CAPACITY,
                             SCALE_DOWN_STABILIZED})

# a condition message's maxLength (metav1.Condition); counted in bytes here, which is stricter
MAX_CONDITION_MESSAGE_BYTES = 32768
# the whole MetricsPipeline message (each source's error is capped at 1 KiB before)
MAX_METRICS_PIPELINE_MESSAGE_BYTES = 4 * MAX_ERROR_BYTES
_STATUSES = ("True", "False", "Unknown")
# what a ScalingLimited message says when the algorithm's own rate cap bound the count
_ALGORITHM_RATE = "faster than the algorithm's"
# a failed validation for which the spec cannot produce a decision (→ ScalingActive=False/InvalidSpec)
_SPEC_FAILURES = (INVALID_SPEC, ALGORITHM_NOT_REGISTERED, UNSUPPORTED_METRIC, METRIC_NOT_GRANTED,
                  TARGET_CHAIN_INVALID)


@dataclass(frozen=True)
class ConditionValue:
    """A condition in the ``metav1.Condition`` shape (the reconciler converts it to the API model)."""

    # CamelCase type, e.g. ScalingActive
    type: str
    # "True" | "False" | "Unknown"
    status: str
    # CamelCase reason
    reason: str
    # human-readable details; <= 32768 bytes
    message: str
    # metadata.generation when the condition was set; >= 0
    observed_generation: int
    # RFC 3339 time of the last status change
    last_transition_time: str

    @classmethod
    def from_wire(cls, item: Mapping[str, Any]) -> ConditionValue | None:
        """A condition from its JSON form (camelCase keys, as in a status); None when malformed."""
        ctype, status, reason = item.get("type"), item.get("status"), item.get("reason")
        at, gen = item.get("lastTransitionTime"), item.get("observedGeneration", 0)
        if not (isinstance(ctype, str) and ctype and isinstance(reason, str) and reason
                and status in _STATUSES and isinstance(at, str) and at):
            return None
        if gen is None:
            gen = 0
        if isinstance(gen, bool) or not isinstance(gen, int) or gen < 0:
            return None
        message = item.get("message")
        return cls(type=ctype, status=str(status), reason=reason,
                   message=message if isinstance(message, str) else "", observed_generation=gen,
                   last_transition_time=at)

    def to_wire(self) -> dict[str, Any]:
        """The JSON form (camelCase keys), as written into a status."""
        return {"type": self.type, "status": self.status, "reason": self.reason, "message": self.message,
                "observedGeneration": self.observed_generation,
                "lastTransitionTime": self.last_transition_time}


@dataclass(frozen=True)
class EventValue:
    """An event to record about the scaler (regarding object); the recorder deduplicates."""

    # NORMAL | WARNING
    type: str
    # CamelCase reason, e.g. SuccessfulRescale
    reason: str
    # the event's note
    note: str


@dataclass(frozen=True)
class TargetError:
    """Reading or writing the target failed this sync."""

    # InvalidSpec (target apiVersion unparsable) | TargetNotFound | TargetUnreadable |
    # TargetWriteFailed
    reason: str
    # what failed, naming the target and the error (capped at 1 KiB)
    message: str

    def __post_init__(self) -> None:
        if self.reason not in (*TARGET_READ_ERRORS, TARGET_WRITE_FAILED):
            raise ValueError(f"TargetError.reason must be one of "
                             f"{', '.join((*TARGET_READ_ERRORS, TARGET_WRITE_FAILED))}, got {self.reason!r}")
        object.__setattr__(self, "message", cap_text(self.message))

    @property
    def is_read_error(self) -> bool:
        return self.reason in TARGET_READ_ERRORS


@dataclass(frozen=True)
class Validation:
    """The spec's validation result (ElasticScaler and LLMScaler): ``Valid`` or a failure reason."""

    # VALID or one of VALIDATION_FAILURES
    reason: str = VALID
    # why, naming the field path and the rule ("" when valid is fine)
    message: str = ""

    def __post_init__(self) -> None:
        if self.reason != VALID and self.reason not in VALIDATION_FAILURES:
            raise ValueError(f"Validation.reason must be {VALID} or one of {', '.join(VALIDATION_FAILURES)}, "
                             f"got {self.reason!r}")
        object.__setattr__(self, "message", cap_text(self.message, MAX_CONDITION_MESSAGE_BYTES))

    @property
    def ok(self) -> bool:
        return self.reason == VALID


@dataclass(frozen=True)
class SyncOutcome:
    """What one sync produced: the reconciler fills what it got to."""

    # the pipeline's result; None when it did not run (target read error, failed validation)
    decision: Decision | None = None
    # a target read or write failure this sync
    target_error: TargetError | None = None
    # the Validated result; None = leave Validated as it is
    validation: Validation | None = None
    # LLMScaler: also write the deprecated DecisionAvailable mirror of ScalingActive
    decision_available: bool = False

    def __post_init__(self) -> None:
        te = self.target_error
        if te is not None and te.is_read_error and self.decision is not None:
            raise ValueError(
                "SyncOutcome: a target read error means the pipeline did not run (decision=None)")
        if te is not None and not te.is_read_error and self.decision is None:
            raise ValueError("SyncOutcome: TargetWriteFailed needs the decision whose write failed")


class _ConditionLike(Protocol):
    @property
    def type(self) -> str: ...

    @property
    def status(self) -> str: ...

    @property
    def reason(self) -> str: ...


# (status, reason, message) of one condition to write
_Spec = tuple[str, str, str]


def _bool(value: bool) -> str:
    return "True" if value else "False"


def _scaling_active(d: Decision) -> _Spec:
    rr = d.recommend
    if d.activity == RECOMMENDED:
        # MetricsTrigger activation: say why the target is (or goes) to 0, or stays up
        tail = "" if rr.activation is None else f"; {describe_activation(rr.activation)}"
        reason = METRICS_AVAILABLE if rr.kind == FROM_METRICS else DECISION_RECEIVED
        return "True", reason, rr.summary() + tail
    if d.activity == SCALING_DISABLED:
        return ("False", SCALING_DISABLED,
                "scaling is disabled since the replica count of the target is zero "
                "(the trigger cannot scale from zero)")
    if d.activity == INVALID_SPEC:
        return "False", INVALID_SPEC, rr.summary()
    assert d.activity == DECISION_UNAVAILABLE
    if d.fallback is not None:
        # spec.fallback: say whether it is engaged, the count and the threshold
        # (docs/design.md#beyond-the-seeds)
        return "False", DECISION_UNAVAILABLE, f"{fallback_note(d.fallback)}; {rr.summary()}"
    return "False", DECISION_UNAVAILABLE, rr.summary()


def _advisory(d: Decision, text: str) -> str:
    return f"Advisory mode (the target is never written): {text}" if d.advisory else text


def _able_to_scale(d: Decision) -> _Spec:
    if d.pinned:
        return "True", PAUSED, _advisory(d, f"pinned to {d.desired} replicas by "
                                            f"elasticscaler.io/paused-replicas; the pipeline is bypassed")
    if d.frozen:
        return "True", PAUSED, (f"paused by elasticscaler.io/paused: nothing is written (the pipeline "
                                f"would scale from {d.current} to {d.clamped})")
    if d.held and d.guard is not None:
        since = d.state.deferred_since
        when = "never forced (deferTimeoutSeconds 0)" if d.force_at is None \
            else f"forced at {format_time(d.force_at)}"
        since_text = "" if since is None else f" since {format_time(since)}"
        if d.desired == d.current:  # a no-op while the deferral runs: it goes on
            return "True", d.guard.reason, _advisory(
                d, f"{d.guard.message}; nothing to write this sync ({d.current} replicas), the deferral "
                   f"running{since_text} goes on; {when}")
        return "True", d.guard.reason, _advisory(
            d, f"{d.guard.message}; holding the write {d.current} -> {d.desired}{since_text}; {when}")
    if d.forced and d.guard is not None:
        return "True", DEFERRAL_TIMED_OUT, _advisory(
            d, f"{d.guard.message}; the held write {d.current} -> {d.desired} was forced after "
               f"deferTimeoutSeconds {d.behavior.defer_timeout_seconds:g}")
    if d.down_stabilized:
        return "True", SCALE_DOWN_STABILIZED, _advisory(
            d, f"recent recommendations were higher than current one, applying the highest recent "
               f"recommendation ({d.stabilized} over {d.recommendation}, window "
               f"{d.behavior.scale_down_stabilization_seconds:g}s)")
    if d.capacity is not None and not d.would_write:
        return "True", INSUFFICIENT_CAPACITY, _advisory(d, d.capacity.message)
    if d.would_write:
        # a write leaves the target at the desired count: the same words as the no-op sync that
        # follows it (its own informer echo), so that sync has nothing to rewrite; the step itself
        # is in recentDecisions, lastScaleTime and the SuccessfulRescale event
        text = f"would scale the target from {d.current} to {d.desired}" if d.advisory \
            else f"the target is at the desired count ({d.desired})"
        if d.capacity is not None:
            text += f"; {d.capacity.message}"
        return "True", SYNCED, _advisory(d, text)
    if d.activity == SCALING_DISABLED:
        return "True", SYNCED, "nothing to write: scaling is disabled while the target has 0 replicas"
    return "True", SYNCED, _advisory(d, f"the target is at the desired count ({d.desired})")


def _scaling_limited(d: Decision) -> _Spec:
    b = d.behavior
    step = d.limiting_step
    if step is not None and step.bound == BoundBy.RATE_LIMIT:
        direction = "increasing" if d.limited_by == SCALE_UP_LIMIT else "decreasing"
        rate = "scale-up" if d.limited_by == SCALE_UP_LIMIT else "scale-down"
        return "True", str(d.limited_by), (f"the desired replica count is {direction} {_ALGORITHM_RATE} "
                                           f"{rate} rate; capped from {step.before} to {step.after}")
    if d.limited_by == TOO_FEW_REPLICAS:
        return "True", TOO_FEW_REPLICAS, (f"the desired replica count is less than the minimum replica "
                                          f"count; raised to minReplicas {b.min_replicas}")
    if d.limited_by == TOO_MANY_REPLICAS:
        return "True", TOO_MANY_REPLICAS, (f"the desired replica count is more than the maximum replica "
                                           f"count; capped at maxReplicas {b.max_replicas}")
    if d.limited_by == SCALE_UP_LIMIT:
        return "True", SCALE_UP_LIMIT, (f"the desired replica count is increasing faster than the "
                                        f"scale-up step limit ({b.scale_up_max_pods} per sync); limited "
                                        f"to {d.limited}")
    if d.limited_by == SCALE_DOWN_LIMIT:
        return "True", SCALE_DOWN_LIMIT, (f"the desired replica count is decreasing faster than the "
                                          f"scale-down step limit ({b.scale_down_max_pods} per sync); "
                                          f"limited to {d.limited}")
    return "False", DESIRED_WITHIN_RANGE, (f"the desired count is within the acceptable range "
                                           f"[{b.min_replicas}, {b.max_replicas}]")


def limited_by_algorithm_rate(reason: str, message: str) -> bool:
    """Whether a ScalingLimited condition (its reason and message) reports the algorithm's own rate
    cap (the ``rateLimit`` step) rather than a step limit — for ``escaler explain``."""
    return reason in (SCALE_UP_LIMIT, SCALE_DOWN_LIMIT) and _ALGORITHM_RATE in message


def _metrics_pipeline(d: Decision) -> _Spec:
    status, reason, message = _metrics_pipeline_spec(d)
    return status, reason, cap_text(message, MAX_METRICS_PIPELINE_MESSAGE_BYTES)


def _metrics_pipeline_spec(d: Decision) -> _Spec:
    rr = d.recommend
    k, m, errors = rr.evaluated, rr.total, rr.metric_errors
    failing = "; failing: " + "; ".join(errors) if errors else ""
    if m == 0:
        return "False", NO_METRICS, "no metrics to evaluate" + failing
    if errors:
        # a read failed this sync: report it now, whatever the window still gives
        read_ok = max(0, m - len(errors))
        # the failing metrics still evaluated had earlier samples in the window
        used_window = d.activity == RECOMMENDED and k > read_ok
        decided = "; the decision used the window's earlier samples" if used_window else ""
        if read_ok == 0:
            return "False", NO_METRICS, f"all {m} metric reads failed this sync{decided}{failing}"
        failed = f"{len(errors)} of {m} metric reads failed this sync"
        return "False", PARTIAL_METRICS, f"{failed}{decided}{failing}"
    if k == m:
        return "True", ALL_METRICS_AVAILABLE, f"all {m} metrics available"
    if k == 0:
        return "False", NO_METRICS, f"none of {m} metrics available"
    return "False", PARTIAL_METRICS, f"{k} of {m} metrics available"


def _events_for(d: Decision, target_error: TargetError | None) -> list[EventValue]:
    events: list[EventValue] = []
    if d.activity in (DECISION_UNAVAILABLE, INVALID_SPEC):
        events.append(EventValue(WARNING, EVENT_FAILED_COMPUTE_METRICS_REPLICAS, d.recommend.summary()))
    if d.deferral_started and d.guard is not None:
        when = "never forced (deferTimeoutSeconds 0)" if d.force_at is None \
            else f"forced at {format_time(d.force_at)}"
        events.append(EventValue(NORMAL, EVENT_SCALING_DEFERRED, _advisory(
            d, f"holding the write {d.current} -> {d.desired}: {d.guard.reason}: {d.guard.message}; {when}")))
    if not d.write:
        return events
    if target_error is not None:
        events.append(EventValue(WARNING, EVENT_FAILED_RESCALE,
                                 f"New size: {d.desired}; reason: {d.reason}; error: {target_error.message}"))
    elif d.forced and d.guard is not None:
        since = d.previous_state.deferred_since
        since_text = "" if since is None else f" since {format_time(since)}"
        events.append(EventValue(WARNING, EVENT_DEFERRAL_TIMED_OUT,
                                 f"New size: {d.desired}; reason: the write held by {d.guard.reason}"
                                 f"{since_text} was forced after deferTimeoutSeconds "
                                 f"{d.behavior.defer_timeout_seconds:g} ({d.guard.message})"))
    else:
        events.append(EventValue(NORMAL, EVENT_SUCCESSFUL_RESCALE,
                                 f"New size: {d.desired}; reason: {d.reason}"))
    return events


@dataclass(frozen=True)
class Plan:
    """What one sync's outcome makes of the conditions, before they meet the previous ones: the
    (status, reason, message) per type to write, the types to remove, and the events. Equal plans on
    equal previous conditions give equal conditions (a reconciler may skip rebuilding on that)."""

    writes: tuple[tuple[str, str, str, str], ...]
    removes: frozenset[str]
    events: tuple[EventValue, ...]


def plan(outcome: SyncOutcome) -> Plan:
    """The conditions ``conditions_for`` would write for ``outcome`` and the events it returns,
    without the previous conditions (no transition times, no ordering); see ``Plan``."""
    writes: dict[str, _Spec] = {}
    removes: set[str] = set()
    events: list[EventValue] = []
    d, te = outcome.decision, outcome.target_error
    # a target error touches only AbleToScale: Validated is left as it was, whatever was passed
    validation = outcome.validation if te is None else None

    if validation is not None:
        default_message = "the spec is valid" if validation.ok else validation.reason
        writes[VALIDATED] = (_bool(validation.ok), validation.reason, validation.message or default_message)
        if validation.reason == TARGET_CONFLICT:
            events.append(EventValue(WARNING, EVENT_TARGET_CONFLICT, validation.message or TARGET_CONFLICT))

    if te is not None and te.is_read_error:
        writes[ABLE_TO_SCALE] = ("False", te.reason, te.message)
        events.append(EventValue(WARNING, EVENT_FAILED_GET_SCALE, te.message))
    elif d is not None:
        writes[SCALING_ACTIVE] = _scaling_active(d)
        if d.activity == RECOMMENDED and not d.pinned and not d.frozen:
            writes[SCALING_LIMITED] = _scaling_limited(d)
        if d.recommend.kind == FROM_METRICS:
            writes[METRICS_PIPELINE] = _metrics_pipeline(d)
        else:
            removes.add(METRICS_PIPELINE)
        if te is not None:
            writes[ABLE_TO_SCALE] = ("False", te.reason, te.message)
        else:
            writes[ABLE_TO_SCALE] = _able_to_scale(d)
        if d.floor is not None:
            writes[SCHEDULE_FLOOR] = (_bool(d.floor.reason == FLOOR_ACTIVE), d.floor.reason,
                                      describe_floor(d.floor))
        else:
            removes.add(SCHEDULE_FLOOR)
        events.extend(_events_for(d, te))
    elif validation is not None and validation.reason in _SPEC_FAILURES:
        writes[SCALING_ACTIVE] = ("False", INVALID_SPEC, validation.message or validation.reason)
        events.append(EventValue(WARNING, EVENT_FAILED_COMPUTE_METRICS_REPLICAS,
                                 validation.message or validation.reason))

    if outcome.decision_available and SCALING_ACTIVE in writes:
        writes[DECISION_AVAILABLE] = writes[SCALING_ACTIVE]
    shared = tuple((t, status, reason, _shared_text(text)) for t, (status, reason, text) in writes.items())
    return Plan(shared, _shared_types(removes), tuple(events))


# A plan is kept by the reconciler between syncs (the status it built) and its messages end up in the
# cached status too: equal texts and type sets are one object across a fleet (issue 10, memory per
# scaler). Interning is invisible to a reader (equal strings stay equal); longer texts are left as
# they are.
_SHARED_TEXT_MAX = 256
# every set of condition types plan() removes → one frozenset (a few constants: bounded)
_TYPE_SETS: dict[frozenset[str], frozenset[str]] = {}


def _shared_text(text: str) -> str:
    return sys.intern(text) if len(text) <= _SHARED_TEXT_MAX and type(text) is str else text


def _shared_types(types: set[str]) -> frozenset[str]:
    key = frozenset(types)
    return _TYPE_SETS.setdefault(key, key)


def conditions_for(
    outcome: SyncOutcome,
    generation: int,
    now_iso: str,
    previous: Sequence[ConditionValue],
) -> tuple[list[ConditionValue], list[EventValue]]:
    """The scaler's conditions after this sync, and the events to record; see the module docstring."""
    _check_generation(generation)
    p = plan(outcome)
    conditions = [c for c in previous if c.type not in p.removes]
    for ctype, status, reason, message in p.writes:
        conditions = _set(conditions, ctype, status, reason, message, generation, now_iso)
    if any(w[0] == DECISION_AVAILABLE for w in p.writes):
        # an exact mirror, lastTransitionTime included
        active = next(c for c in conditions if c.type == SCALING_ACTIVE)
        conditions = [replace(active, type=DECISION_AVAILABLE) if c.type == DECISION_AVAILABLE else c
                      for c in conditions]
    return ordered(conditions), list(p.events)


# ---------------------------------------------------------------- one condition at a time


def _check_generation(generation: int) -> None:
    if isinstance(generation, bool) or not isinstance(generation, int) or generation < 0:
        raise ValueError(f"generation must be an integer >= 0, got {generation!r}")


def _set(conditions: Sequence[ConditionValue], ctype: str, status: str, reason: str, message: str,
         generation: int, now_iso: str) -> list[ConditionValue]:
    old = next((c for c in conditions if c.type == ctype), None)
    transition = old.last_transition_time if old is not None and old.status == status else now_iso
    new = ConditionValue(type=ctype, status=status, reason=reason,
                         message=cap_text(message, MAX_CONDITION_MESSAGE_BYTES),
                         observed_generation=generation, last_transition_time=transition)
    if old is None:
        return [*conditions, new]
    return [new if c.type == ctype else c for c in conditions]


def ordered(conditions: Iterable[ConditionValue]) -> list[ConditionValue]:
    """``conditions`` in the status order (``CONDITION_ORDER``, then other types in their given
    order), one per type (the last wins), without ``DROPPED_TYPES``."""
    by_type: dict[str, ConditionValue] = {}
    for c in conditions:
        if c.type not in DROPPED_TYPES:
            by_type[c.type] = c
    known = [by_type[t] for t in CONDITION_ORDER if t in by_type]
    return known + [c for t, c in by_type.items() if t not in CONDITION_ORDER]


def set_condition(
    conditions: Sequence[ConditionValue],
    type_: str,
    status: bool | str,
    reason: str,
    message: str,
    *,
    generation: int,
    now_iso: str,
) -> list[ConditionValue]:
    """``conditions`` with ``type_`` set: ``lastTransitionTime`` kept when the existing condition of
    that type has the same status (else ``now_iso``), ``observedGeneration = generation``, message
    capped; ordered, dropped types removed (see ``ordered``). ``status``: a bool or
    ``"True"``/``"False"``/``"Unknown"``."""
    _check_generation(generation)
    st = ("True" if status else "False") if isinstance(status, bool) else status
    if st not in _STATUSES:
        raise ValueError(f"status must be a bool or one of {', '.join(_STATUSES)}, got {status!r}")
    if not type_ or not reason:
        raise ValueError("set_condition: type and reason must not be empty")
    return ordered(_set(conditions, type_, st, reason, message, generation, now_iso))


def remove_condition(conditions: Sequence[ConditionValue], type_: str) -> list[ConditionValue]:
    """``conditions`` without ``type_``; ordered, dropped types removed."""
    return ordered(c for c in conditions if c.type != type_)


def changed_types(previous: Sequence[_ConditionLike], current: Sequence[_ConditionLike]) -> list[str]:
    """The types of ``current`` whose (status, reason) differ from ``previous`` or that are new, in
    ``current``'s order: what an event should be emitted for (a steady state emits nothing)."""
    before = {c.type: (str(c.status), c.reason) for c in previous}
    return [c.type for c in current if before.get(c.type) != (str(c.status), c.reason)]


def health(conditions: Sequence[_ConditionLike]) -> Health:
    """``failing`` / ``waiting`` / ``ok`` per the health rule of docs/concepts.md#conditions-and-health
    (see the module docstring)."""
    by_type = {c.type: c for c in conditions}
    for ctype in (ABLE_TO_SCALE, SCALING_ACTIVE, VALIDATED):
        cond = by_type.get(ctype)
        if cond is not None and str(cond.status) == "False":
            return FAILING
    able = by_type.get(ABLE_TO_SCALE)
    if able is not None and str(able.status) == "True" and able.reason in WAITING_REASONS:
        return WAITING
    return OK
