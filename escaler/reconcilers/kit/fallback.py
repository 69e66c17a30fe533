"""``spec.fallback`` in a sync, for every kind that has one (ElasticScaler MetricsTrigger, LLMScaler).

A scaler with ``spec.fallback`` counts the consecutive *polls* without a usable signal
(``escaler.scaling.fallback.count``; a target at 0 replicas a trigger cannot scale from is switched
off, not a failed poll: ``count_poll``); the pipeline engages the fallback at ``failureThreshold``.
The count lives in the reconciler's per-scaler memory (``FallbackMemory``) and is seeded once from
``status.fallback`` as the last leader wrote it (``seeded_count``), so a new leader goes on counting
rather than starting from nothing. ``advance_fallback`` is the one step a reconciler calls.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from escaler.api.elasticscaler import Fallback, FallbackStatus
from escaler.scaling.fallback import FallbackCount, FallbackState, count
from escaler.scaling.pipeline import RecommendResult

__all__ = ["FallbackMemory", "advance_fallback", "count_poll", "seeded_count"]


def seeded_count(status: FallbackStatus | None) -> FallbackCount | None:
    """The fallback count a new process starts from: ``status.fallback`` as the last leader wrote it
    (shared with LLMScaler)."""
    return None if status is None else FallbackCount(status.failures, status.since.timestamp())


def count_poll(previous: FallbackCount | None, rr: RecommendResult, *, fresh: bool, current: int,
               now: float, failure_threshold: int) -> FallbackCount | None:
    """The fallback count after a sync whose recommendation is ``rr`` (shared with LLMScaler): a
    target at 0 replicas a trigger cannot scale from is ScalingDisabled (switched off), not a
    failed poll."""
    unavailable = rr.unavailable is not None and (current > 0 or rr.can_scale_from_zero)
    return count(previous, fresh=fresh, unavailable=unavailable, usable=rr.replicas is not None, now=now,
                 failure_threshold=failure_threshold)


class FallbackMemory(Protocol):
    """The per-scaler memory ``advance_fallback`` keeps its count in."""

    fallback: FallbackCount | None
    fallback_seeded: bool


def advance_fallback(mem: FallbackMemory, policy: Fallback | None,
                     previous: Callable[[], FallbackStatus | None], rr: RecommendResult, *, fresh: bool,
                     current: int, now: float) -> FallbackState | None:
    """The fallback of this sync (shared with LLMScaler): None without ``policy``; otherwise the count
    seeded once from ``previous()`` (status.fallback, so a new leader goes on counting), advanced by
    ``count_poll``, and kept in ``mem``."""
    if policy is None:
        mem.fallback, mem.fallback_seeded = None, True
        return None
    if not mem.fallback_seeded:
        mem.fallback = seeded_count(previous())
        mem.fallback_seeded = True
    mem.fallback = count_poll(mem.fallback, rr, fresh=fresh, current=current, now=now,
                              failure_threshold=policy.failure_threshold)
    return FallbackState(policy.failure_threshold, policy.replicas, mem.fallback)
