"""The scaler condition model (SPEC §3): one sync's outcome → conditions and events.

``conditions_for(outcome, generation, now_iso, previous) -> (conditions, events)`` implements the
SPEC §3 table for every scaler kind:

=============== ====== ================================================================
type            status reasons (when)
=============== ====== ================================================================
ScalingActive   True   MetricsAvailable ("evaluated K of M metrics; recommends N replicas"),
                       DecisionReceived (a State/Signal/custom decision was read)
ScalingActive   False  DecisionUnavailable (the message names the source and the error, capped
                       at 1 KiB), InvalidSpec, ScalingDisabled (0 replicas, the trigger cannot
                       scale from zero)
AbleToScale     True   Synced, RolloutInProgress / ScaleDownSettling (a guard holds the write),
                       DeferralTimedOut (a held write was forced), ScaleDownStabilized, Paused
AbleToScale     False  InvalidSpec / TargetNotFound / TargetUnreadable / TargetWriteFailed
ScalingLimited  True   TooFewReplicas / TooManyReplicas / ScaleUpLimit / ScaleDownLimit
ScalingLimited  False  DesiredWithinRange
Validated       True   Valid
Validated       False  InvalidSpec / TargetConflict / AlgorithmNotRegistered / UnsupportedMetric /
                       TargetChainInvalid
MetricsPipeline True   AllMetricsAvailable
MetricsPipeline False  PartialMetrics / NoMetrics
=============== ====== ================================================================

Rules:

* **AbleToScale=True precedence**, in one sync: ``Paused`` (the pause annotations bypass the
  guards, so nothing competes with it), then a guard hold (``RolloutInProgress`` /
  ``ScaleDownSettling``) or ``DeferralTimedOut``, then ``ScaleDownStabilized``, then ``Synced``.
  ``elasticscaler.io/paused-replicas`` reports ``Paused`` too (pinned, message names N).
* **ScalingLimited** names the *last* pipeline step that changed the count
  (``Decision.limited_by``: a step limit not undone by the clamp is reported over the clamp), and
  is only updated on a sync where ScalingActive is True — and not while paused or pinned (the
  pipeline did not decide the count then). Otherwise it is left exactly as it was.
* **Target errors** (``SyncOutcome.target_error``): a read error (``InvalidSpec`` for an
  unparsable target apiVersion, ``TargetNotFound``, ``TargetUnreadable``; the pipeline did not run)
  touches only AbleToScale (and Validated, when the caller passes a validation result: it is about
  the spec, not the target). ``TargetWriteFailed`` sets AbleToScale=False and still writes what was
  computed earlier in that sync (ScalingActive, ScalingLimited, MetricsPipeline).
* A failed validation with no decision (the pipeline did not run) sets ScalingActive=False/
  InvalidSpec for the reasons that mean "the spec cannot produce a decision" (InvalidSpec,
  AlgorithmNotRegistered, UnsupportedMetric, TargetChainInvalid), not for TargetConflict (the spec
  is fine; another scaler owns the target).
* **MetricsPipeline** is written for metrics-based recommendations (``FROM_METRICS``) and removed
  for decision-based ones (a provider switch overwrites the conditions at once).
* **DecisionAvailable** (LLMScaler, ``SyncOutcome.decision_available``) mirrors ScalingActive
  exactly (status, reason, message, observedGeneration, lastTransitionTime) whenever ScalingActive
  is written.
* A stale ``ScalingDeferred`` condition (older controllers) is removed. Conditions of other types
  are kept untouched.
* Every condition written in this sync carries ``observedGeneration = generation``;
  ``lastTransitionTime`` is ``now_iso`` when the status changed (or the condition is new) and is
  kept otherwise, even when the reason or message changed (``metav1.Condition`` semantics).
* The result is ordered: ScalingActive, AbleToScale, ScalingLimited, Validated, MetricsPipeline,
  DecisionAvailable, then other types in their previous order — so an unchanged sync returns an
  equal list and the reconciler can skip the status write.

Events (``EventValue(type, reason, note)``; the recorder deduplicates and aggregates):
``SuccessfulRescale`` (Normal, a normal write: "New size: N; reason: ..."), ``ScalingDeferred``
(Normal, once per deferral: the sync the deferral starts), ``DeferralTimedOut`` (Warning, a forced
write), ``FailedGetScale`` (Warning, a target read error), ``FailedRescale`` (Warning, a failed
write), ``FailedComputeMetricsReplicas`` (Warning, ScalingActive=False with DecisionUnavailable or
InvalidSpec), ``TargetConflict`` (Warning, Validated=False/TargetConflict). Advisory mode never
writes, so it never emits the write events (SuccessfulRescale, DeferralTimedOut, FailedRescale);
the others are emitted, ScalingDeferred with an "Advisory mode:" note.

``health(conditions)`` is the SPEC §3 rule: ``failing`` when AbleToScale or ScalingActive is False
(and, beyond the SPEC's wording, when Validated is False: a refused scaler never writes);
``waiting`` when AbleToScale is True with a guard or stabilization reason (RolloutInProgress,
ScaleDownSettling, ScaleDownStabilized); ``ok`` otherwise. ScalingLimited is informational.
Pure: no I/O, no clock (the caller passes ``now_iso``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from escaler.scaling.guards import ROLLOUT_IN_PROGRESS, SCALE_DOWN_SETTLING
from escaler.scaling.pipeline import (
    DECISION_UNAVAILABLE,
    FROM_METRICS,
    INVALID_SPEC,
    RECOMMENDED,
    SCALING_DISABLED,
    STEP_MAX_REPLICAS,
    STEP_MIN_REPLICAS,
    STEP_SCALE_DOWN_LIMIT,
    STEP_SCALE_UP_LIMIT,
    Decision,
)
from escaler.scaling.text import cap_text, format_time

__all__ = [
    "ABLE_TO_SCALE",
    "ALGORITHM_NOT_REGISTERED",
    "ALL_METRICS_AVAILABLE",
    "CONDITION_ORDER",
    "DECISION_AVAILABLE",
    "DECISION_RECEIVED",
    "DECISION_UNAVAILABLE",
    "DEFERRAL_TIMED_OUT",
    "DESIRED_WITHIN_RANGE",
    "EVENT_DEFERRAL_TIMED_OUT",
    "EVENT_FAILED_COMPUTE_METRICS_REPLICAS",
    "EVENT_FAILED_GET_SCALE",
    "EVENT_FAILED_RESCALE",
    "EVENT_SCALING_DEFERRED",
    "EVENT_SUCCESSFUL_RESCALE",
    "EVENT_TARGET_CONFLICT",
    "FAILING",
    "INVALID_SPEC",
    "METRICS_AVAILABLE",
    "METRICS_PIPELINE",
    "NORMAL",
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
    "SYNCED",
    "TARGET_CHAIN_INVALID",
    "TARGET_CONFLICT",
    "TARGET_NOT_FOUND",
    "TARGET_READ_ERRORS",
    "TARGET_UNREADABLE",
    "TARGET_WRITE_FAILED",
    "TOO_FEW_REPLICAS",
    "TOO_MANY_REPLICAS",
    "UNSUPPORTED_METRIC",
    "VALID",
    "VALIDATED",
    "VALIDATION_FAILURES",
    "WAITING",
    "WARNING",
    "ConditionValue",
    "EventValue",
    "Health",
    "SyncOutcome",
    "TargetError",
    "Validation",
    "conditions_for",
    "health",
]

# condition types
SCALING_ACTIVE = "ScalingActive"
ABLE_TO_SCALE = "AbleToScale"
SCALING_LIMITED = "ScalingLimited"
VALIDATED = "Validated"
METRICS_PIPELINE = "MetricsPipeline"
DECISION_AVAILABLE = "DecisionAvailable"   # LLMScaler, deprecated: mirrors ScalingActive
SCALING_DEFERRED = "ScalingDeferred"       # removed: written by older controllers
CONDITION_ORDER = (SCALING_ACTIVE, ABLE_TO_SCALE, SCALING_LIMITED, VALIDATED, METRICS_PIPELINE,
                   DECISION_AVAILABLE)

# ScalingActive reasons (DECISION_UNAVAILABLE, INVALID_SPEC, SCALING_DISABLED come from pipeline)
METRICS_AVAILABLE = "MetricsAvailable"
DECISION_RECEIVED = "DecisionReceived"
# AbleToScale reasons (ROLLOUT_IN_PROGRESS, SCALE_DOWN_SETTLING come from guards)
SYNCED = "Synced"
DEFERRAL_TIMED_OUT = "DeferralTimedOut"
SCALE_DOWN_STABILIZED = "ScaleDownStabilized"
PAUSED = "Paused"
TARGET_NOT_FOUND = "TargetNotFound"
TARGET_UNREADABLE = "TargetUnreadable"
TARGET_WRITE_FAILED = "TargetWriteFailed"
TARGET_READ_ERRORS = (INVALID_SPEC, TARGET_NOT_FOUND, TARGET_UNREADABLE)
# ScalingLimited reasons
TOO_FEW_REPLICAS = "TooFewReplicas"
TOO_MANY_REPLICAS = "TooManyReplicas"
SCALE_UP_LIMIT = "ScaleUpLimit"
SCALE_DOWN_LIMIT = "ScaleDownLimit"
DESIRED_WITHIN_RANGE = "DesiredWithinRange"
# Validated reasons
VALID = "Valid"
TARGET_CONFLICT = "TargetConflict"
ALGORITHM_NOT_REGISTERED = "AlgorithmNotRegistered"
UNSUPPORTED_METRIC = "UnsupportedMetric"
TARGET_CHAIN_INVALID = "TargetChainInvalid"
VALIDATION_FAILURES = (INVALID_SPEC, TARGET_CONFLICT, ALGORITHM_NOT_REGISTERED, UNSUPPORTED_METRIC,
                       TARGET_CHAIN_INVALID)
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

# a condition message's maxLength (metav1.Condition); counted in bytes here, which is stricter
_MAX_MESSAGE_BYTES = 32768
# the MetricsPipeline message lists per-metric errors up to this size
_MAX_METRIC_ERRORS_BYTES = 4096
_LIMIT_REASONS = {
    STEP_MIN_REPLICAS: TOO_FEW_REPLICAS,
    STEP_MAX_REPLICAS: TOO_MANY_REPLICAS,
    STEP_SCALE_UP_LIMIT: SCALE_UP_LIMIT,
    STEP_SCALE_DOWN_LIMIT: SCALE_DOWN_LIMIT,
}
# a failed validation for which the spec cannot produce a decision (→ ScalingActive=False/InvalidSpec)
_SPEC_FAILURES = (INVALID_SPEC, ALGORITHM_NOT_REGISTERED, UNSUPPORTED_METRIC, TARGET_CHAIN_INVALID)


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
        object.__setattr__(self, "message", cap_text(self.message, _MAX_MESSAGE_BYTES))

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
        return "True", METRICS_AVAILABLE if rr.kind == FROM_METRICS else DECISION_RECEIVED, rr.summary()
    if d.activity == SCALING_DISABLED:
        return ("False", SCALING_DISABLED,
                "scaling is disabled since the replica count of the target is zero "
                "(the trigger cannot scale from zero)")
    if d.activity == INVALID_SPEC:
        return "False", INVALID_SPEC, rr.summary()
    assert d.activity == DECISION_UNAVAILABLE
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
    if d.would_write:
        text = f"would scale the target from {d.current} to {d.desired}" if d.advisory \
            else f"scaled the target from {d.current} to {d.desired}"
        return "True", SYNCED, _advisory(d, text)
    if d.activity == SCALING_DISABLED:
        return "True", SYNCED, "nothing to write: scaling is disabled while the target has 0 replicas"
    return "True", SYNCED, _advisory(d, f"the target is at the desired count ({d.desired})")


def _scaling_limited(d: Decision) -> _Spec:
    b = d.behavior
    if d.limited_by == STEP_MIN_REPLICAS:
        return "True", TOO_FEW_REPLICAS, (f"the desired replica count is less than the minimum replica "
                                          f"count; raised to minReplicas {b.min_replicas}")
    if d.limited_by == STEP_MAX_REPLICAS:
        return "True", TOO_MANY_REPLICAS, (f"the desired replica count is more than the maximum replica "
                                           f"count; capped at maxReplicas {b.max_replicas}")
    if d.limited_by == STEP_SCALE_UP_LIMIT:
        return "True", SCALE_UP_LIMIT, (f"the desired replica count is increasing faster than the "
                                        f"scale-up step limit ({b.scale_up_max_pods} per sync); limited "
                                        f"to {d.limited}")
    if d.limited_by == STEP_SCALE_DOWN_LIMIT:
        return "True", SCALE_DOWN_LIMIT, (f"the desired replica count is decreasing faster than the "
                                          f"scale-down step limit ({b.scale_down_max_pods} per sync); "
                                          f"limited to {d.limited}")
    return "False", DESIRED_WITHIN_RANGE, (f"the desired count is within the acceptable range "
                                           f"[{b.min_replicas}, {b.max_replicas}]")


def _metrics_pipeline(d: Decision) -> _Spec:
    rr = d.recommend
    k, m = rr.evaluated, rr.total
    errors = ""
    if rr.metric_errors:
        errors = "; " + cap_text("; ".join(rr.metric_errors), _MAX_METRIC_ERRORS_BYTES)
    if m == 0:
        return "False", NO_METRICS, "no metrics to evaluate" + errors
    if k == m:
        return "True", ALL_METRICS_AVAILABLE, f"all {m} metrics available"
    if k == 0:
        return "False", NO_METRICS, f"none of {m} metrics available" + errors
    return "False", PARTIAL_METRICS, f"{k} of {m} metrics available" + errors


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


def conditions_for(
    outcome: SyncOutcome,
    generation: int,
    now_iso: str,
    previous: Sequence[ConditionValue],
) -> tuple[list[ConditionValue], list[EventValue]]:
    """The scaler's conditions after this sync, and the events to record; see the module docstring."""
    if isinstance(generation, bool) or not isinstance(generation, int) or generation < 0:
        raise ValueError(f"generation must be an integer >= 0, got {generation!r}")
    writes: dict[str, _Spec] = {}
    removes: set[str] = {SCALING_DEFERRED}
    events: list[EventValue] = []
    d, te, validation = outcome.decision, outcome.target_error, outcome.validation

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
        events.extend(_events_for(d, te))
    elif validation is not None and validation.reason in _SPEC_FAILURES:
        writes[SCALING_ACTIVE] = ("False", INVALID_SPEC, validation.message or validation.reason)
        events.append(EventValue(WARNING, EVENT_FAILED_COMPUTE_METRICS_REPLICAS,
                                 validation.message or validation.reason))

    if outcome.decision_available and SCALING_ACTIVE in writes:
        writes[DECISION_AVAILABLE] = writes[SCALING_ACTIVE]

    by_type = {c.type: c for c in previous}
    result: dict[str, ConditionValue] = {}
    for ctype, (status, reason, message) in writes.items():
        old = by_type.get(ctype)
        transition = old.last_transition_time if old is not None and old.status == status else now_iso
        result[ctype] = ConditionValue(type=ctype, status=status, reason=reason,
                                       message=cap_text(message, _MAX_MESSAGE_BYTES),
                                       observed_generation=generation, last_transition_time=transition)
    if DECISION_AVAILABLE in result and SCALING_ACTIVE in result:
        # an exact mirror, lastTransitionTime included
        active = result[SCALING_ACTIVE]
        result[DECISION_AVAILABLE] = ConditionValue(
            type=DECISION_AVAILABLE, status=active.status, reason=active.reason, message=active.message,
            observed_generation=active.observed_generation, last_transition_time=active.last_transition_time)

    ordered: list[ConditionValue] = []
    for ctype in CONDITION_ORDER:
        if ctype in result:
            ordered.append(result[ctype])
        elif ctype in by_type and ctype not in removes:
            ordered.append(by_type[ctype])
    for cond in previous:
        if cond.type not in CONDITION_ORDER and cond.type not in removes:
            ordered.append(cond)
    return ordered, events


def health(conditions: Sequence[_ConditionLike]) -> Health:
    """``failing`` / ``waiting`` / ``ok`` per the SPEC §3 health rule (see the module docstring)."""
    by_type = {c.type: c for c in conditions}
    for ctype in (ABLE_TO_SCALE, SCALING_ACTIVE, VALIDATED):
        cond = by_type.get(ctype)
        if cond is not None and str(cond.status) == "False":
            return FAILING
    able = by_type.get(ABLE_TO_SCALE)
    if able is not None and str(able.status) == "True" and able.reason in (
            ROLLOUT_IN_PROGRESS, SCALE_DOWN_SETTLING, SCALE_DOWN_STABILIZED):
        return WAITING
    return OK
