"""``ControllerBuilder``: wire a reconciler to the watches that wake it (controller-runtime's builder).

::

    ControllerBuilder(mgr) \\
        .for_("escaler.io/v1alpha1", "ElasticScaler", predicates=[GenerationChangedPredicate()]) \\
        .owns("apps/v1", "Deployment") \\
        .watches("v1", "ConfigMap", EnqueueRequestsFromMapFunc(fn)) \\
        .with_options(max_concurrent_reconciles=4) \\
        .complete(MyReconciler())

Contract:

* ``for_`` (exactly once) names the primary kind: its events enqueue the object's own key.
  ``owns`` (any number) enqueues the *controlling owner* of the kind given to ``for_``
  (``EnqueueRequestForOwner``, ``controller: true`` references only). ``watches`` takes any
  ``EventHandler``; ``watches_source`` any ready-made ``Source`` (started with the controller's
  queue). Per-watch predicates must all pass; ``with_event_filter`` adds predicates to every watch.
* Nothing is resolved until ``complete``: each kind is mapped through the manager's RESTMapper
  to a resource, and its informer is taken from the manager's ``InformerFactory`` (shared with
  every other controller watching the same resource, namespace and selector). A namespaced kind
  is watched in the manager's namespace (``ManagerOptions.namespace``; "" = all) unless the
  watch names one; a cluster-scoped kind is always watched cluster-wide.
* ``complete`` builds the ``Controller`` (queue named after the controller, the manager's
  clock, metrics and write fence), adds it to the manager as a leader-election runnable and
  returns it. Controller names must be unique per manager (they label metrics); the default is
  the lower-cased ``for_`` kind. Every refusal is a ``ValueError`` naming the method and rule.
* Sharded managers (``mgr.shards`` set, ``--total-shards`` > 1): the controller gets the shard
  gate instead of the single fence, lists its primary objects from the ``for_`` cache, and is
  registered to enqueue a shard's objects when this replica gains that shard.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from escaler.informers.factory import ResourceKey
from escaler.runtime.controller import Controller, Source
from escaler.runtime.handlers import EnqueueRequestForObject, EnqueueRequestForOwner, EventHandler
from escaler.runtime.predicates import Predicate
from escaler.runtime.source import Kind
from escaler.runtime.types import Reconciler, Request
from escaler.workqueue.ratelimiters import RateLimiter, default_controller_rate_limiter
from escaler.workqueue.ratelimiting import RateLimitingQueue

if TYPE_CHECKING:
    from escaler.runtime.manager import Manager

__all__ = ["ControllerBuilder"]

# A controller name is a metric label value and a thread-name prefix: keep it tame.
_NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9_.]*[a-z0-9])?$")


@dataclass(frozen=True)
class _Watch:
    # apiVersion and kind of the watched objects
    api_version: str
    kind: str
    # None = derived at complete(): own key (for_) or owner of the for_ kind (owns)
    handler: EventHandler | None
    # all must pass
    predicates: tuple[Predicate, ...]
    # None = the manager's namespace
    namespace: str | None = None
    label_selector: str = ""
    # "for" | "owns" | "watches"
    role: str = "watches"


class ControllerBuilder:
    """Fluent construction of one controller; see the module docstring. Single use."""

    def __init__(self, manager: Manager) -> None:
        # the manager the controller is added to; fixed
        self._mgr = manager
        # explicit name, or None for the default (lower-cased for_ kind)
        self._name: str | None = None
        # the primary watch; exactly one before complete()
        self._for: _Watch | None = None
        # secondary watches, in call order
        self._watches: list[_Watch] = []
        # sources added as they are (watches_source), started with the controller's queue
        self._raw_sources: list[Source] = []
        # predicates applied to every watch
        self._global_predicates: list[Predicate] = []
        # None = the manager's default
        self._max_concurrent: int | None = None
        # None = client-go's default controller rate limiter on the manager's clock
        self._rate_limiter: RateLimiter[Request] | None = None
        # True once complete() ran
        self._completed = False

    def named(self, name: str) -> ControllerBuilder:
        if not _NAME_RE.match(name):
            raise ValueError(
                f"ControllerBuilder.named: {name!r} must be lower-case alphanumerics, '-', '_' or '.', "
                "starting and ending with an alphanumeric"
            )
        self._name = name
        return self

    def for_(self, api_version: str, kind: str, predicates: Sequence[Predicate] = ()) -> ControllerBuilder:
        if self._for is not None:
            raise ValueError(
                "ControllerBuilder.for_: may be called only once (one primary kind per controller)"
            )
        self._for = _Watch(api_version, kind, None, tuple(predicates), role="for")
        return self

    def owns(self, api_version: str, kind: str, predicates: Sequence[Predicate] = ()) -> ControllerBuilder:
        self._watches.append(_Watch(api_version, kind, None, tuple(predicates), role="owns"))
        return self

    def watches(
        self,
        api_version: str,
        kind: str,
        handler: EventHandler,
        predicates: Sequence[Predicate] = (),
        namespace: str | None = None,
        label_selector: str | None = None,
    ) -> ControllerBuilder:
        self._watches.append(
            _Watch(api_version, kind, handler, tuple(predicates), namespace, label_selector or "")
        )
        return self

    def watches_source(self, source: Source) -> ControllerBuilder:
        """Add a ready-made ``Source`` (controller-runtime's ``WatchesRawSource``): the controller starts
        it with its own queue, so a source that enqueues needs no late-bound reference to it."""
        self._raw_sources.append(source)
        return self

    def with_event_filter(self, predicate: Predicate) -> ControllerBuilder:
        """Apply ``predicate`` to every watch of this controller."""
        self._global_predicates.append(predicate)
        return self

    def with_options(
        self,
        *,
        max_concurrent_reconciles: int | None = None,
        rate_limiter: RateLimiter[Request] | None = None,
    ) -> ControllerBuilder:
        if max_concurrent_reconciles is not None:
            if not isinstance(max_concurrent_reconciles, int) or max_concurrent_reconciles < 1:
                raise ValueError(
                    "ControllerBuilder.with_options: max_concurrent_reconciles must be an integer >= 1, "
                    f"got {max_concurrent_reconciles!r}"
                )
            self._max_concurrent = max_concurrent_reconciles
        if rate_limiter is not None:
            self._rate_limiter = rate_limiter
        return self

    def complete(self, reconciler: Reconciler) -> Controller:
        """Resolve the watches, build the controller, add it to the manager and return it."""
        if self._completed:
            raise ValueError("ControllerBuilder.complete: this builder was already completed")
        if self._for is None:
            raise ValueError("ControllerBuilder.complete: for_() must be called (the primary kind)")
        mgr = self._mgr
        for_mapping = mgr.mapper.mapping_for(self._for.api_version, self._for.kind)
        name = self._name or for_mapping.kind.lower()
        if not _NAME_RE.match(name):
            raise ValueError(f"ControllerBuilder.complete: derived name {name!r} is invalid; use named()")
        # Resolve everything before creating anything, so a refusal leaves no threads behind.
        resolved: list[Kind] = []
        for watch in [self._for, *self._watches]:
            if watch.role == "for":
                handler: EventHandler = EnqueueRequestForObject()
            elif watch.role == "owns":
                handler = EnqueueRequestForOwner(
                    for_mapping.api_version, for_mapping.kind, is_controller=True,
                    owner_namespaced=for_mapping.namespaced,
                )
            else:
                assert watch.handler is not None
                handler = watch.handler
            mapping = (
                for_mapping if watch is self._for else mgr.mapper.mapping_for(watch.api_version, watch.kind)
            )
            namespace = ""
            if mapping.namespaced:
                namespace = mgr.options.namespace if watch.namespace is None else watch.namespace
            key = ResourceKey(mapping.group, mapping.version, mapping.resource, namespace=namespace,
                              label_selector=watch.label_selector)
            informer = mgr.informers.informer_for(key)
            if watch is self._for:
                primary = informer
            resolved.append(Kind(informer, handler,
                                 [*self._global_predicates, *watch.predicates],
                                 description=f"{watch.role} {mapping.api_version} {mapping.kind} [{key}]"))
        mgr.reserve_controller_name(name)
        clock = mgr.clock
        limiter: RateLimiter[Request] = (
            self._rate_limiter if self._rate_limiter is not None else default_controller_rate_limiter(clock)
        )
        queue: RateLimitingQueue[Request] = RateLimitingQueue(
            limiter, name, clock=clock, metrics_provider=mgr.metrics.workqueue_provider
        )
        controller = Controller(
            name,
            reconciler,
            queue=queue,
            max_concurrent_reconciles=self._max_concurrent or mgr.options.max_concurrent_reconciles,
            clock=clock,
            metrics=mgr.metrics.controller(name),
            can_write=mgr.can_write,
            cache_sync_timeout=mgr.options.cache_sync_timeout,
            shards=mgr.shards,
        )
        if mgr.shards is not None:
            controller.set_primary_lister(lambda: [_request_of_key(k) for k in primary.store.list_keys()])
            mgr.shards.on_gained(controller.enqueue_shard)
        for source in [*resolved, *self._raw_sources]:
            controller.watch(source)
        mgr.add(controller, needs_leader_election=True)
        self._completed = True
        return controller


def _request_of_key(key: str) -> Request:
    """The ``Request`` of a cache key (``namespace/name``, or ``name`` when cluster-scoped)."""
    ns, _, name = key.rpartition("/")
    return Request(ns, name)
