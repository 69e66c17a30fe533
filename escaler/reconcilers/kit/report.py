"""``Reporter``: the one place a scaler sync becomes status and events
(docs/concepts.md#conditions-and-health).

One ``Reporter`` per scaler kind that writes a workload: ``ReportedKind`` says which (its
apiVersion and kind — the status resource and the Events' regarding object —, its status model,
and whether it writes the deprecated ``DecisionAvailable`` mirror, as LLMScaler does; the
ElasticScaler's is ``escaler.reconcilers.elasticscaler.reconciler.ES_REPORTED``). The fields only an
ElasticScaler status has (``hpaName``, ``resolvedTargetRef``) are touched only on an
``ElasticScalerStatus``.

Every path of a reconcile ends here, with one of:

* ``hold(sync, Hold)`` — the sync stopped before the pipeline. A validation failure sets
  ``Validated=False`` (and ``ScalingActive=False/InvalidSpec`` when the spec cannot produce a
  decision) and drops ``status.resolvedTargetRef`` unless the hold is a TargetConflict (a waiting
  claimant keeps its place in line); a target error sets ``AbleToScale=False`` and nothing else; an
  object that does not parse says so on Validated and ScalingActive; a quiet hold writes nothing.
* ``claim(sync, Claim)`` — a StateTrigger scaler records the end of its chain in
  ``status.resolvedTargetRef`` and writes nothing else: its next sync (woken by the binding index
  change, or the backstop requeue) writes the target once the index shows the claim.
* ``synced(sync, Synced)`` — the pipeline ran: conditions from ``conditions_for``, the counts,
  ``deferredSince``, ``fallback`` (the count of polls without a usable signal, with
  ``spec.fallback``), ``lastScaleTime`` (only after a successful write), ``recentDecisions`` (a
  write, or in Advisory mode a would-be write that differs from the last one recorded). A failed
  write (``AbleToScale=False/TargetWriteFailed``) persists the conditions computed in that sync
  and leaves the counts, ``deferredSince`` and ``lastScaleTime`` as they were (seed 000).

Status is written only when it changed significantly; drift (a metric value inside the
significance, numbers in an error text) only at the opt-in refresh, ``--status-refresh-seconds``
(``StatusWriter``; the rule is in ``escaler.reconcilers.kit.drift``); events go through
the recorder, which aggregates repeats. The conditions engine is ``escaler.scaling.conditions`` —
there is no other.

**An unchanged sync costs next to nothing.** ``synced`` first computes a key of everything the status
is built from except the metric values — the scaler's resourceVersion (its spec, annotations and
the status the cluster holds), the condition ``Plan`` (``escaler.scaling.conditions.plan``), the
counts, ``deferredSince``, the target, each ``currentMetrics`` row but its value — and compares it
with the key of the last status it built for that scaler. Equal keys, no write to record, and every
metric value inside the significance from the value the cluster holds: the status is not parsed,
rebuilt or serialised, nothing is sent (``StatusWriter.skip``), the plan's events (none for a healthy
scaler) are recorded as a full sync would, and nothing is logged. With the opt-in refresh, pending
drift is still written when due. Any other path's status write (a hold, a claim, the HPA mirror) drops the
key, so the next sync builds afresh; the key map is bounded like the writer's (``MAX_REMEMBERED``).

**Only the key's hash is kept** (issue 30, memory per scaler: the key itself held ~600 bytes a
scaler at 10,000 — its rows, texts and tuples — even with equal rows shared across the fleet): the
key is ``hash()``ed, and the next sync's key is compared by its hash. Two different keys with one
hash (64 bits; a string's hash is seeded per process, so a namespace user cannot aim at one) would
skip one rebuild the status needed; with 10,000 scalers polled every 30 seconds that is expected
once in ~10^9 years. An element without a hash cannot reach the key (tuples, strings, numbers and
frozen dataclasses of them).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Generic, TypeVar

from pydantic import ValidationError

from escaler.api.common import TargetRef
from escaler.api.elasticscaler import ElasticScalerStatus, FallbackStatus
from escaler.api.llmscaler import LLMScalerStatus
from escaler.api.scaler import MetricStatus, RecentDecision, ScalerStatus
from escaler.boundeddict import BoundedDict
from escaler.errors import StatusError, is_not_found
from escaler.informers.frozen import thaw
from escaler.kube.discovery import ResourceMapping
from escaler.reconcilers.kit.drift import (
    DEFAULT_SIGNIFICANCE,
    DEFAULT_STATUS_REFRESH_SECONDS,
    value_moved,
)
from escaler.reconcilers.kit.ports import EventSink, KubeClient, Mapper, ObjectRef
from escaler.reconcilers.kit.status import MAX_REMEMBERED, StatusWriter, WriteOutcome
from escaler.reconcilers.kit.sync import (
    Claim,
    Hold,
    Sync,
    regarding,
    to_condition,
    to_value,
    wall,
)
from escaler.runtime.types import Result
from escaler.scaling.annotations import AnnotationProblem
from escaler.scaling.conditions import (
    INVALID_SPEC,
    TARGET_CONFLICT,
    EventValue,
    Plan,
    SyncOutcome,
    TargetError,
    Validation,
    conditions_for,
    plan,
)
from escaler.scaling.pipeline import Decision
from escaler.scaling.text import cap_text

__all__ = ["CLAIM_RECHECK_SECONDS", "EVENT_INVALID_ANNOTATION", "ReportedKind",
           "Reporter", "Synced"]

# the reason of the Warning event reporting an unusable annotation (docs/reference/annotations.md)
EVENT_INVALID_ANNOTATION = "InvalidAnnotation"
# backstop requeue after recording a claim (the binding index update normally wakes the scaler first)
CLAIM_RECHECK_SECONDS = 2.0

_log = logging.getLogger(__name__)

S = TypeVar("S", bound=ScalerStatus)


@dataclass(frozen=True)
class ReportedKind(Generic[S]):
    """The scaler kind a ``Reporter`` writes status and events for."""

    api_version: str
    kind: str
    # the status model (parsed from the cached object, serialised for the write)
    status_model: type[S]
    # also write the deprecated DecisionAvailable mirror of ScalingActive (LLMScaler)
    decision_available: bool = False



@dataclass(frozen=True)
class Synced:
    """A sync in which the pipeline ran."""

    decision: Decision
    # the target written (or that would be)
    target: ObjectRef
    current_metrics: Sequence[MetricStatus]
    # the write happened
    written: bool
    # the write failed (TargetWriteFailed)
    error: TargetError | None
    advisory: bool
    # when an Unschedulable pod leaves its grace period (epoch seconds), if one is inside it
    recheck_at: float | None = None
    # a metric value's move that is worth a status write at once (``drift.significance_of``)
    significance: float = DEFAULT_SIGNIFICANCE
    # the Validated result of this sync (valid unless the spec cannot produce a decision and the
    # pipeline still ran to hold the count, as an LLMScaler Custom provider without customProvider)
    validation: Validation = field(default_factory=Validation)


@dataclass(frozen=True, slots=True)
class _Seen:
    """The last status ``synced`` built for a scaler (see the module docstring)."""

    # the hash of everything that status was built from except the metric values (``_key``)
    key: int
    # the currentMetrics values of the status the cluster holds after that sync (as written)
    held: tuple[float | None, ...]
    # that status differed from the one held by drift not yet written
    drift: bool


def _ref(ref: ObjectRef) -> TargetRef:
    return TargetRef(api_version=ref.api_version, kind=ref.kind, name=ref.name)


class Reporter(Generic[S]):
    """Status and events of one scaler kind; see the module docstring. Thread-safe."""

    def __init__(self, client: KubeClient, mapper: Mapper, recorder: EventSink,
                 refresh_seconds: float = DEFAULT_STATUS_REFRESH_SECONDS, *,
                 kind: ReportedKind[S]) -> None:
        # status patches, only when changed significantly (drift every refresh_seconds, 0 = never)
        self._writer = StatusWriter(client, refresh_seconds=refresh_seconds)
        # the scaler kind reported on; fixed
        self._kind = kind
        # resolves the scaler resource
        self._mapper = mapper
        self._recorder = recorder
        # guards _seen
        self._mu = threading.Lock()
        # uid → the last status synced() built for it; dropped by any other status write; bounded
        self._seen: BoundedDict[str, _Seen] = BoundedDict(MAX_REMEMBERED)

    @property
    def writer(self) -> StatusWriter:
        return self._writer

    # ------------------------------------------------------------------ building blocks

    def mapping(self) -> ResourceMapping:
        return self._mapper.mapping_for(self._kind.api_version, self._kind.kind)

    def previous_status(self, sync: Sync) -> S:
        raw = self._writer.base_status(sync.obj)
        if raw:
            try:
                return self._kind.status_model.model_validate(raw)
            except ValidationError:
                _log.warning("status of %s does not parse; rewriting it", sync.req)
        return self._kind.status_model()

    def write_status(self, sync: Sync, status: S,
                     significance: float = DEFAULT_SIGNIFICANCE) -> WriteOutcome:
        """Write ``status`` if it changed significantly, or drift when the refresh is due."""
        with self._mu:
            self._seen.pop(_uid(sync.obj), None)
        try:
            return self._writer.write(self.mapping(), sync.obj, status.to_object(), now=sync.now,
                                      significance=significance)
        except StatusError as err:
            if not is_not_found(err):
                raise  # deleted meanwhile is fine: the delete event forgets it
            return WriteOutcome.UNCHANGED

    def emit(self, sync: Sync, events: Sequence[EventValue], action: str = "Scale") -> None:
        ref = regarding(sync.obj, self._kind.api_version, self._kind.kind)
        for ev in events:
            try:
                self._recorder.event(ref, "Warning" if ev.type == "Warning" else "Normal", ev.reason, action,
                                     ev.note)
            except ValueError:
                _log.exception("cannot record event %s", ev.reason)

    def apply(self, sync: Sync, status: S, outcome: SyncOutcome) -> list[EventValue]:
        """Set ``status.conditions`` from ``outcome`` (the one condition engine) and observedGeneration."""
        if self._kind.decision_available:
            outcome = replace(outcome, decision_available=True)
        conds, events = conditions_for(outcome, sync.generation, sync.now_iso,
                                       [to_value(c) for c in status.conditions])
        status.conditions = [to_condition(c) for c in conds]
        status.observed_generation = sync.generation
        return events

    def annotation_problems(self, sync: Sync, reported: frozenset[str],
                            problems: Sequence[AnnotationProblem]) -> frozenset[str]:
        """Report each unusable annotation once while it lasts (a Warning event); returns the problems
        reported and still present — bounded by the object's annotations, however often they change
        (a problem fixed and broken again is reported again)."""
        current = list(dict.fromkeys(p.fallback_message() for p in problems))
        new = [m for m in current if m not in reported]
        if new:
            self.emit(sync, [EventValue("Warning", EVENT_INVALID_ANNOTATION, m) for m in new],
                      action="ParseAnnotations")
        # no problem (nearly every scaler): the one shared empty set, not a fresh 216-byte one per
        # scaler and sync (issue 30, memory per scaler)
        return frozenset(current) if current else _NO_PROBLEMS

    def forget(self, uid: str) -> None:
        self._writer.forget(uid)
        with self._mu:
            self._seen.pop(uid, None)

    # ------------------------------------------------------------------ the three endings

    def hold(self, sync: Sync, hold: Hold) -> Result:
        if hold.quiet:
            return Result(requeue_after=hold.requeue) if hold.requeue else Result()
        status = self._hold_base(sync, hold)
        if hold.unparsable is not None:
            outcome = SyncOutcome(validation=Validation(INVALID_SPEC, cap_text(hold.unparsable)))
            action = "Validate"
        elif hold.target_error is not None:
            outcome, action = SyncOutcome(target_error=hold.target_error), "GetScale"
        else:
            outcome, action = SyncOutcome(validation=hold.validation), "Validate"
        self.emit(sync, self.apply(sync, status, outcome), action=action)
        self.write_status(sync, status)
        sync.wait(hold.requeue)
        return sync.result()

    def _hold_base(self, sync: Sync, hold: Hold) -> S:
        if hold.unparsable is not None:
            # the status may not parse either: keep what does, as plain data
            raw = sync.obj.get("status")
            old = thaw(raw) if isinstance(raw, Mapping) else {}
            try:
                return self._kind.status_model.model_validate(old)
            except ValidationError:
                return self._kind.status_model()
        status = self.previous_status(sync)
        if isinstance(status, ElasticScalerStatus):
            status.hpa_name = None
            keeps_claim = hold.target_error is not None or (
                hold.validation is not None and hold.validation.reason == TARGET_CONFLICT)
            if not keeps_claim:
                status.resolved_target_ref = None  # a scaler that cannot act holds no target
            elif hold.resolved is not None:
                status.resolved_target_ref = _ref(hold.resolved)
        return status

    def claim(self, sync: Sync, claim: Claim) -> Result:
        status = self.previous_status(sync)
        if isinstance(status, ElasticScalerStatus):
            status.hpa_name = None
            status.resolved_target_ref = _ref(claim.target)
        self.write_status(sync, status)
        _log.info("ElasticScaler %s claims %s before writing it", sync.req, claim.target.describe())
        return Result(requeue_after=CLAIM_RECHECK_SECONDS)

    def synced(self, sync: Sync, s: Synced) -> Result:
        d = s.decision
        outcome = SyncOutcome(decision=d, target_error=s.error, validation=s.validation,
                              decision_available=self._kind.decision_available)
        p = plan(outcome)
        key = hash(_key(sync, s, p))
        if self._quiet(sync, s, key):
            self._writer.skip()
            self.emit(sync, p.events)
            return _after(sync, s)
        status = self.previous_status(sync)
        held = tuple(m.value for m in status.current_metrics)
        if isinstance(status, ElasticScalerStatus):
            status.hpa_name = None
            status.resolved_target_ref = _ref(s.target)
        if isinstance(status, ElasticScalerStatus | LLMScalerStatus):
            status.fallback = _fallback_status(d)
        status.current_metrics = list(s.current_metrics)
        events = self.apply(sync, status, outcome)
        if s.error is None:
            _counts(status, d, s.written)
        # else a failed write (TargetWriteFailed) leaves the counts, deferredSince and lastScaleTime as
        # they were (seed 000): the conditions say what failed, the next sync decides again
        if s.written:
            status.last_scale_time = sync.now_dt.replace(microsecond=0)
            status.record(RecentDecision(time=sync.now_dt, from_=d.current, to=d.desired,
                                         reason=cap_text(d.reason), bound_by=d.bound_by))
        elif s.advisory and d.would_write:
            last = status.recent_decisions[-1] if status.recent_decisions else None
            if last is None or (last.from_, last.to) != (d.current, d.desired):
                status.record(RecentDecision(time=sync.now_dt, from_=d.current, to=d.desired,
                                             reason=cap_text("Advisory mode (not written): " + d.reason),
                                             bound_by=d.bound_by))
        self.emit(sync, events)
        done = self.write_status(sync, status, s.significance)
        deferred = done == WriteOutcome.DEFERRED
        if len(held) != len(status.current_metrics) or not deferred:
            held = tuple(m.value for m in status.current_metrics)
        with self._mu:
            self._seen[_uid(sync.obj)] = _Seen(key, held, deferred)
        return _after(sync, s)

    def _quiet(self, sync: Sync, s: Synced, key: int) -> bool:
        """True when this sync's status would equal the last one built but for metric values inside
        the significance, with no write to record and no refresh due (see the module docstring)."""
        if s.written or s.error is not None:
            return False
        with self._mu:
            seen = self._seen.get(_uid(sync.obj))
        if seen is None or seen.key != key:
            return False
        values = tuple(m.value for m in s.current_metrics)
        if any(value_moved(h, m.value, m.target, s.significance)
               for h, m in zip(seen.held, s.current_metrics, strict=True)):
            return False
        if values == seen.held and not seen.drift:
            return True  # nothing differs from what the cluster holds: no refresh either
        return not self._writer.refresh_due(sync.obj, sync.now)


def _uid(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    return str(meta.get("uid") or meta.get("name"))


# annotation_problems' answer when there is none: one shared empty set
_NO_PROBLEMS: frozenset[str] = frozenset()


def _key(sync: Sync, s: Synced, p: Plan) -> tuple[Any, ...]:
    """Everything ``synced`` builds the status from except the metric values (see the module docstring)."""
    meta = sync.obj.get("metadata")
    rv = meta.get("resourceVersion") if isinstance(meta, Mapping) else None
    d = s.decision
    state = d.state if s.error is None else d.state_after_failed_write
    rows = tuple((m.name, m.type, m.target, m.target_type, m.recommended_replicas, m.error)
                 for m in s.current_metrics)
    return (rv, sync.generation, s.target, tuple(p.writes), p.removes, rows, d.current, d.desired,
            state.deferred_since, s.advisory, d.would_write, s.validation, d.fallback)


def _counts(status: ScalerStatus, d: Decision, written: bool) -> None:
    """The counts and deferredSince of a sync that did not fail to write."""
    # the target's count after this sync: a written sync left it at the desired count, so the
    # sync its informer echo triggers finds the same status and writes nothing (one status
    # patch per scale, not two); the step is in recentDecisions
    status.current_replicas = d.desired if written else d.current
    status.desired_replicas = d.desired
    status.deferred_since = wall(d.state.deferred_since) if d.state.deferred_since is not None else None


def _fallback_status(d: Decision) -> FallbackStatus | None:
    """``status.fallback``: the running count of polls without a usable signal (spec.fallback only)."""
    c = None if d.fallback is None else d.fallback.count
    return None if c is None else FallbackStatus(failures=c.failures, since=wall(c.since))


def _after(sync: Sync, s: Synced) -> Result:
    """The requeue of a sync in which the pipeline ran."""
    if s.error is not None:
        return Result(requeue=True)
    sync.wait(s.decision.requeue_after)
    if s.recheck_at is not None:
        sync.wait(s.recheck_at - sync.now)
    return sync.result()
