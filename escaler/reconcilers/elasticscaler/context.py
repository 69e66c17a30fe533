"""What the ElasticScaler reconciler remembers per scaler, and a StateTrigger's resolved chain.

* ``ScalerMemory`` — per scaler, in this process only: sample windows, the pipeline state, the
  algorithm's history, the last metrics collection, signal pull bookkeeping, annotation problems
  already reported, the fallback count. A new process (restart, new leader) seeds the pipeline
  state from status (``escaler.scaling.pipeline.PipelineState.seed``), never from nothing, and the
  fallback count from ``status.fallback``.
* ``Resolved`` — a StateTrigger's source and the end of its targetRef chain.

What one sync carries (``Sync``, ``Hold``, ``Claim``) is shared by every kind:
``escaler.reconcilers.kit.sync``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from escaler.reconcilers.elasticscaler.metricsync import MetricsMemory
from escaler.reconcilers.elasticscaler.signalsync import PullMemory
from escaler.reconcilers.kit.ports import ObjectRef
from escaler.scaling.fallback import FallbackCount
from escaler.scaling.pipeline import PipelineState
from escaler.targets.snapshot import TargetSnapshot

__all__ = ["Resolved", "ScalerMemory"]


# a scaler that never pulled (every MetricsTrigger scaler): one shared, frozen PullMemory
_NO_PULL = PullMemory()


@dataclass(slots=True)
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
    # goes out from it again (kit.targetread.write_replicas: one write per cached version)
    wrote_from: str = ""
    # the target snapshot the poller's shortcut read for the collection in flight; the reconcile
    # that consumes it takes it (once) instead of reading the target again while the cache still
    # holds the same object (kit.targetread: one target read per poll)
    polled_target: TargetSnapshot | None = None


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
