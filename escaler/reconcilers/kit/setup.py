"""Setup helpers every scaler kind's ``setup_<kind>`` wires its controller with.

* ``outbound_executor(mgr, controller=...)`` — the ``KeyedExecutor`` that runs a controller's outbound
  reads (metric collections, signal pulls, provider reads) off its reconcile workers, bounded per
  namespace (``--outbound-workers``, ``--outbound-per-namespace``); one per controller.
* ``add_poller(...)`` — the leader-only ``poller.MetricsPoller`` of the objects a kind polls, each at
  its own ``spec.pollIntervalSeconds`` (``spec_poll_interval``) raised to ``--min-poll-interval``, or
  at the setup's interval (``DEFAULT_POLL_INTERVAL_SECONDS`` unless given; the manager passes
  ``--metrics-trigger-poll-interval``); on a sharded manager only the scalers of the shards this
  replica leads.
* ``cache_reader(mapper, watches)`` — the ResourceHandlers' ``CacheGet``: a target from the
  ``watchindex.WatchIndex`` cache of its kind, so a read costs no GET once the kind is listed.
* ``TargetChanged`` — the predicate of a claimant watch: an update passes only when the target the
  object claims changed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from escaler.reconcilers.kit.poller import DEFAULT_MIN_POLL_INTERVAL_SECONDS, MetricsPoller
from escaler.reconcilers.kit.ports import Mapper, ObjectRef
from escaler.reconcilers.kit.watchindex import WatchIndex
from escaler.reconcilers.kit.watchkey import watch_key
from escaler.runtime.controller import Controller
from escaler.runtime.executor import (
    DEFAULT_OUTBOUND_PER_GROUP,
    DEFAULT_OUTBOUND_WORKERS,
    KeyedExecutor,
    executor_metrics,
)
from escaler.runtime.manager import Manager
from escaler.runtime.types import Request

__all__ = [
    "DEFAULT_POLL_INTERVAL_SECONDS",
    "TargetChanged",
    "add_poller",
    "cache_reader",
    "outbound_executor",
    "spec_poll_interval",
]

# a setup's poll interval when none is given, seconds (the manager passes
# --metrics-trigger-poll-interval): a polled scaler without spec.pollIntervalSeconds is polled this often
DEFAULT_POLL_INTERVAL_SECONDS = 30.0


def cache_reader(mapper: Mapper,
                 watches: WatchIndex) -> Callable[[str, str, str, str], Mapping[str, Any] | None]:
    """The ResourceHandlers' ``CacheGet``: an object from a listed watch of its kind, else None."""

    def get(api_version: str, kind: str, namespace: str, name: str) -> Mapping[str, Any] | None:
        try:
            key = watch_key(mapper, namespace, ObjectRef(api_version, kind, name))
        except Exception:  # an unparsable apiVersion or an unserved kind: the handler GETs and says so
            return None
        return watches.cached(key, namespace, name)

    return get


def outbound_executor(mgr: Manager, *, workers: int = DEFAULT_OUTBOUND_WORKERS,
                      per_namespace: int = DEFAULT_OUTBOUND_PER_GROUP,
                      controller: str) -> KeyedExecutor:
    """The executor that runs a scaler controller's outbound reads (ElasticScaler metric collections
    and signal pulls; LLMScaler provider reads, ``controller="llmscaler"``) off the reconcile
    workers (``--outbound-workers``, ``--outbound-per-namespace``), on the manager's clock and
    metrics registry. One per controller: its completions wake that controller's scalers."""
    return KeyedExecutor(f"{controller}-outbound", workers=workers, per_group=per_namespace,
                         clock=mgr.clock, metrics=executor_metrics(mgr.metrics.registry))


def spec_poll_interval(obj: Mapping[str, Any]) -> float | None:
    """A scaler's ``spec.pollIntervalSeconds`` (ElasticScaler and LLMScaler); None when unset."""
    value = (obj.get("spec") or {}).get("pollIntervalSeconds")
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def add_poller(mgr: Manager, controller: Controller, store: Any, poll_interval: float,
               poll_tick: float | None, start_poll: Callable[[Request], bool] | None,
               *, is_polled: Callable[[Mapping[str, Any]], bool],
               interval_of: Callable[[Mapping[str, Any]], float | None] = spec_poll_interval,
               min_poll_interval: float = DEFAULT_MIN_POLL_INTERVAL_SECONDS) -> MetricsPoller | None:
    """The ``MetricsPoller`` (leader-only) of the objects of ``store`` that ``is_polled`` selects (the
    ElasticScaler's MetricsTriggers but ``HPA``; every LLMScaler for its controller), each at its own
    ``interval_of`` (raised to ``min_poll_interval``) or ``poll_interval``; None when
    ``poll_interval`` is 0. On a sharded manager only the scalers of the shards this replica leads."""
    if poll_interval <= 0:
        return None

    shards = mgr.shards
    # the spec intervals seen by the last list (the poller reads them in the same relist pass)
    intervals: dict[Request, float | None] = {}

    def polled() -> list[Request]:
        seen = {Request(str(o["metadata"].get("namespace") or ""), str(o["metadata"]["name"])): interval_of(o)
                for o in store.list() if is_polled(o)}
        intervals.clear()
        intervals.update(seen)
        reqs = list(seen)
        if shards is None:
            return reqs
        # sharded: only the scalers of shards this replica leads (a gained shard is enqueued whole
        # by the controller; the poller picks its scalers up at their next phase)
        led = set(shards.led())
        return [r for r in reqs if shards.shard_of(r.namespace, r.name) in led]

    kwargs: dict[str, float] = {} if poll_tick is None else {"tick": poll_tick}
    poller = MetricsPoller(poll_interval, polled, controller.queue.add_after, mgr.clock, **kwargs,
                           start_poll=start_poll, interval_of=intervals.get, min_interval=min_poll_interval)
    if shards is not None:
        shards.on_gained(lambda _shard: poller.relist_now())
        shards.on_lost(lambda _shard: poller.relist_now())
    mgr.add(poller, needs_leader_election=True)
    return poller


class TargetChanged:
    """Pass creates and deletes, and updates that change the target an object claims."""

    def __init__(self, target_fn: Callable[[Mapping[str, Any]], Any]) -> None:
        self._fn = target_fn

    def _target(self, obj: Mapping[str, Any]) -> Any:
        try:
            return self._fn(obj)
        except Exception:
            return None

    def create(self, obj: Mapping[str, Any]) -> bool:
        return True

    def update(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
        return bool(self._target(old) != self._target(new))

    def delete(self, obj: Mapping[str, Any]) -> bool:
        return True

    def generic(self, obj: Mapping[str, Any]) -> bool:
        return True
