"""What one ElasticScaler sync carries, what stops it early, and what the reconciler remembers.

* ``Sync`` — one reconcile: the request, the cached object, the wall-clock time, and the requeue
  candidates gathered along the way (``result()`` takes the earliest).
* ``Hold`` — a sync that ends before the pipeline: what to report (a validation failure, a target
  error, an object that does not parse) and when to look again. ``quiet`` holds write nothing (an
  informer that has not listed yet, or a metrics collection or signal pull just started on the
  outbound executor: there is nothing new to say until it completes and wakes the scaler). Each
  step of the reconciler returns its value or a ``Hold``; one ``report`` turns either into status
  and events.
* ``Claim`` — a StateTrigger scaler records the end of its chain in ``status.resolvedTargetRef``
  (its claim in the binding index) *before* it writes that target, so two scalers never write one
  target in the window before the index shows both.
* ``ScalerMemory`` — per scaler, in this process only: sample windows, the pipeline state, the
  algorithm's history, the last metrics collection, signal pull bookkeeping, annotation problems
  already reported, the fallback count. A new process (restart, new leader) seeds the pipeline
  state from status (``escaler.scaling.pipeline.PipelineState.seed``), never from nothing, and the
  fallback count from ``status.fallback``.
* ``Resolved`` — a StateTrigger's source and the end of its targetRef chain.
* conversions between the API's ``Condition`` and the condition model's ``ConditionValue``, and
  the ``regarding`` reference of the scaler's Events.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from escaler.api.conditions import Condition
from escaler.api.elasticscaler import ElasticScaler
from escaler.reconcilers.elasticscaler.metricsync import MetricsMemory
from escaler.reconcilers.elasticscaler.signalsync import PullMemory
from escaler.reconcilers.ports import ObjectRef
from escaler.runtime.types import Request, Result
from escaler.scaling.conditions import ConditionValue, TargetError, Validation
from escaler.scaling.fallback import FallbackCount
from escaler.scaling.pipeline import PipelineState
from escaler.scaling.text import format_time

__all__ = ["Claim", "Hold", "Resolved", "ScalerMemory", "Sync", "epoch", "regarding",
           "to_condition", "to_value", "wall"]


# a scaler that never pulled (every MetricsTrigger scaler): one shared, frozen PullMemory
_NO_PULL = PullMemory()


@dataclass
class ScalerMemory:
    """What this process keeps about one scaler between syncs (see the module docstring)."""

    # metadata.uid of the scaler this memory belongs to (a recreated scaler starts afresh)
    uid: str
    # MetricsTrigger: windows, algorithm history, last collection (metricsync returns the next one)
    metrics: MetricsMemory = field(default_factory=MetricsMemory)
    # the pipeline state (stabilization history, deferral); None until the first decision
    state: PipelineState | None = None
    # annotation problems already reported as Warning events
    reported: frozenset[str] = frozenset()
    # the pollIntervalSeconds clamp last reported as a Warning event (None: not clamped)
    poll_clamp_reported: str | None = None
    # SignalTrigger: endpoint pull bookkeeping (signalsync returns the next one)
    pull: PullMemory = field(default_factory=lambda: _NO_PULL)
    # spec.fallback: consecutive metric polls without a usable signal (None: the last one had one);
    # seeded once from status.fallback (``fallback_seeded``), so a new leader goes on counting
    fallback: FallbackCount | None = None
    fallback_seeded: bool = False
    # the target resourceVersion the last replica write went out from (written, or 409); no write
    # goes out from it again (targetread.write_replicas: one write per cached version)
    wrote_from: str = ""


@dataclass(frozen=True)
class Resolved:
    """A StateTrigger's source and the end of its targetRef chain."""

    source_ref: ObjectRef
    # the source object as read
    source: Mapping[str, Any]
    # the workload to write
    target: ObjectRef
    # why the source's changes cannot reach us (missing binding labels), if so
    label_issue: str | None = None


@dataclass(frozen=True)
class Hold:
    """A sync that stops before the pipeline (see the module docstring)."""

    # Validated=False with this reason (and ScalingActive=False/InvalidSpec for spec failures)
    validation: Validation | None = None
    # AbleToScale=False with this reason; Validated is left as it is
    target_error: TargetError | None = None
    # the object does not parse: Validated and ScalingActive False/InvalidSpec with this text
    unparsable: str | None = None
    # look again after this many seconds (None: only an event can change the outcome)
    requeue: float | None = None
    # write nothing (waiting for a cache to list, or for an outbound read to complete)
    quiet: bool = False
    # what the status should say about the resolved target (None: leave resolvedTargetRef out)
    resolved: ObjectRef | None = None


@dataclass(frozen=True)
class Claim:
    """A StateTrigger scaler claims ``target`` in status before writing it (see the module docstring)."""

    target: ObjectRef


@dataclass
class Sync:
    """One reconcile's inputs and accumulating requeue candidates."""

    req: Request
    # the cached object (frozen)
    obj: Mapping[str, Any]
    # wall-clock now, epoch seconds and datetime
    now: float
    now_dt: datetime
    # requeue candidates (seconds)
    waits: list[float] = field(default_factory=list)

    @property
    def now_iso(self) -> str:
        return format_time(self.now)

    @property
    def generation(self) -> int:
        meta = self.obj.get("metadata")
        value = meta.get("generation") if isinstance(meta, Mapping) else None
        return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0

    def wait(self, seconds: float | None) -> None:
        if seconds is not None and math.isfinite(seconds) and seconds > 0:
            self.waits.append(seconds)

    def result(self) -> Result:
        return Result(requeue_after=min(self.waits)) if self.waits else Result()


def to_value(c: Condition) -> ConditionValue:
    return ConditionValue(type=c.type, status=str(c.status), reason=c.reason, message=c.message,
                          observed_generation=c.observed_generation or 0,
                          last_transition_time=format_time(c.last_transition_time.timestamp()))


def to_condition(v: ConditionValue) -> Condition:
    return Condition.model_validate({
        "type": v.type, "status": v.status, "reason": v.reason, "message": v.message,
        "observedGeneration": v.observed_generation, "lastTransitionTime": v.last_transition_time})


def epoch(dt: datetime | None) -> float | None:
    return dt.timestamp() if dt is not None else None


def wall(seconds: float) -> datetime:
    return datetime.fromtimestamp(math.floor(seconds), UTC)


def regarding(obj: Mapping[str, Any], api_version: str = ElasticScaler.API_VERSION,
              kind: str = ElasticScaler.KIND) -> dict[str, Any]:
    """The ``regarding`` reference of an Event about scaler ``obj`` (an ElasticScaler unless told)."""
    meta = obj.get("metadata") or {}
    return {"apiVersion": api_version, "kind": kind,
            "metadata": {k: meta.get(k) for k in ("name", "namespace", "uid", "resourceVersion")
                         if meta.get(k)}}
