"""What one scaler sync carries and what stops it early (every kind that writes a workload).

* ``Sync`` — one reconcile: the request, the cached object, the wall-clock time, and the requeue
  candidates gathered along the way (``result()`` takes the earliest).
* ``Hold`` — a sync that ends before the pipeline: what to report (a validation failure, a target
  error, an object that does not parse) and when to look again. ``quiet`` holds write nothing (an
  informer that has not listed yet, or an outbound read — a metrics collection, a signal pull, a
  provider read — just started on the outbound executor: there is nothing new to say until it
  completes and wakes the scaler). Each step of a reconciler returns its value or a ``Hold``; one
  ``report.Reporter`` turns either into status and events.
* ``Claim`` — a StateTrigger scaler records the end of its chain in ``status.resolvedTargetRef``
  (its claim in the binding index) *before* it writes that target, so two scalers never write one
  target in the window before the index shows both.
* conversions between the API's ``Condition`` and the condition model's ``ConditionValue``, and
  the ``regarding`` reference of the scaler's Events.

What an ElasticScaler remembers between syncs (``ScalerMemory``) and a StateTrigger's ``Resolved``
chain are the ElasticScaler's own: ``escaler.reconcilers.elasticscaler.context``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from escaler.api.conditions import Condition
from escaler.api.elasticscaler import ElasticScaler
from escaler.reconcilers.kit.ports import ObjectRef
from escaler.runtime.types import Request, Result
from escaler.scaling.conditions import ConditionValue, TargetError, Validation
from escaler.scaling.text import format_time

__all__ = ["Claim", "Hold", "Sync", "epoch", "regarding", "to_condition", "to_value", "wall"]


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
