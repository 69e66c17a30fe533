"""What one ElasticScaler sync carries, and what the reconciler remembers between syncs.

* ``ScalerMemory`` — per scaler, in this process only (lost on restart, by design): sample
  windows, the pipeline state, the algorithm's history, the last metrics collection, signal pull
  bookkeeping, annotation problems already reported.
* ``Sync`` — one reconcile: the request, the cached object, the wall-clock time, and the requeue
  candidates gathered along the way (``result()`` takes the earliest).
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
from escaler.api.scaler import MetricStatus
from escaler.reconcilers.elasticscaler.state import ObjectRef
from escaler.runtime.types import Request, Result
from escaler.scaling.algorithm import Recommendation
from escaler.scaling.conditions import ConditionValue
from escaler.scaling.pipeline import PipelineState, RecommendResult
from escaler.scaling.text import format_time
from escaler.scaling.window import MetricWindows

__all__ = ["Collected", "Resolved", "ScalerMemory", "Sync", "epoch", "regarding", "to_condition", "to_value",
           "wall"]


@dataclass(frozen=True)
class Collected:
    """One metrics collection and what it recommended."""

    # monotonic time of the collection
    at: float
    # metadata.generation and annotations it was made under (a spec change collects afresh)
    generation: int
    annotations: tuple[tuple[str, str], ...]
    recommend: RecommendResult
    statuses: tuple[MetricStatus, ...]


@dataclass
class ScalerMemory:
    """What this process keeps about one scaler between syncs (lost on restart, by design)."""

    # metadata.uid of the scaler this memory belongs to (a recreated scaler starts afresh)
    uid: str
    # the metric sample windows (MetricsTrigger)
    windows: MetricWindows = field(default_factory=MetricWindows)
    # the pipeline state (stabilization history, deferral); None until the first decision
    state: PipelineState | None = None
    # past raw recommendations of the algorithm, oldest first (AlgorithmContext.history)
    algorithm_history: tuple[Recommendation, ...] = ()
    # annotation problems already reported as Warning events
    reported: frozenset[str] = frozenset()
    # monotonic time of the next SignalTrigger endpoint pull
    next_pull: float = 0.0
    # the last pull's error (kept until the next pull)
    pull_error: str | None = None
    # MetricsTrigger: the last collection's outcome, reused by syncs between two polls
    last_metrics: Collected | None = None


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


@dataclass
class Sync:
    """One reconcile's inputs and accumulating outputs."""

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


def regarding(obj: Mapping[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata") or {}
    return {"apiVersion": ElasticScaler.API_VERSION, "kind": ElasticScaler.KIND,
            "metadata": {k: meta.get(k) for k in ("name", "namespace", "uid", "resourceVersion")
                         if meta.get(k)}}
