"""A watch source: one informer + one ``EventHandler`` + predicates, feeding a controller's queue.

Contract (controller-runtime's ``source.Kind``):

* ``Kind.start(queue)`` registers a ``ResourceEventHandler`` on the informer; from then on every
  event is unwrapped (tombstones → last known object), filtered through the predicates (all must
  pass), and handed to the ``EventHandler``, which enqueues ``Request``s. A handler registered
  on a running informer first receives synthetic adds for everything already cached, so a
  controller started late (e.g. after winning leader election) still sees every object once.
* ``stop()`` removes the registration; events after it are not delivered.
* A failure in a predicate or handler is logged and that event dropped: it must not stall the
  informer's delivery to other handlers.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from escaler.informers.store import DeletedFinalStateUnknown
from escaler.runtime.handlers import Enqueuer, EventHandler, unwrap
from escaler.runtime.predicates import Predicate

__all__ = ["EventSource", "InformerLike", "Kind", "Registration"]

Obj = Mapping[str, Any]

_log = logging.getLogger(__name__)


class Registration(Protocol):
    def remove(self) -> None: ...


class InformerLike(Protocol):
    """What a source needs from a ``SharedInformer``."""

    def add_event_handler(self, handler: Any) -> Any: ...

    def has_synced(self) -> bool: ...

    def wait_for_sync(self, timeout: float) -> bool: ...


class EventSource:
    """A ``ResourceEventHandler`` (informers' protocol) that applies predicates and a handler."""

    def __init__(self, handler: EventHandler, predicates: Sequence[Predicate], queue: Enqueuer,
                 description: str = "") -> None:
        # immutable wiring
        self._handler = handler
        self._predicates = tuple(predicates)
        self._queue = queue
        self._description = description

    def on_add(self, obj: Obj, is_in_initial_list: bool) -> None:
        try:
            if all(p.create(obj) for p in self._predicates):
                self._handler.create(obj, self._queue)
        except Exception:
            self._failed("create")

    def on_update(self, old: Obj, new: Obj) -> None:
        try:
            if all(p.update(old, new) for p in self._predicates):
                self._handler.update(old, new, self._queue)
        except Exception:
            self._failed("update")

    def on_delete(self, obj: Obj | DeletedFinalStateUnknown) -> None:
        last = unwrap(obj)
        try:
            if all(p.delete(last) for p in self._predicates):
                self._handler.delete(last, self._queue)
        except Exception:
            self._failed("delete")

    def generic(self, obj: Obj) -> None:
        """Deliver a generic event (from a non-informer trigger)."""
        try:
            if all(p.generic(obj) for p in self._predicates):
                self._handler.generic(obj, self._queue)
        except Exception:
            self._failed("generic")

    def _failed(self, what: str) -> None:
        _log.exception("%s event handling failed for %s; event dropped", what, self._description or "watch")


class Kind:
    """Watch one informer's events with ``handler`` filtered by ``predicates``."""

    def __init__(self, informer: InformerLike, handler: EventHandler,
                 predicates: Sequence[Predicate] = (), description: str = "") -> None:
        # the informer (shared with other controllers through the manager's factory)
        self.informer = informer
        self.handler = handler
        self.predicates = tuple(predicates)
        # for logs: e.g. "apps/v1 Deployment"
        self.description = description
        # the informer registration while started; None before start() and after stop()
        self._registration: Registration | None = None

    def start(self, queue: Enqueuer) -> None:
        if self._registration is not None:
            raise RuntimeError(f"source {self.description}: already started")
        self._registration = self.informer.add_event_handler(
            EventSource(self.handler, self.predicates, queue, self.description)
        )

    def wait_for_sync(self, timeout: float) -> bool:
        return self.informer.wait_for_sync(timeout)

    def stop(self) -> None:
        reg, self._registration = self._registration, None
        if reg is not None:
            reg.remove()

    def __repr__(self) -> str:
        return f"Kind({self.description})"
