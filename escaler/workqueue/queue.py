"""The work queue: fair, stingy, thread-safe (client-go ``util/workqueue`` ``Typed``).

Contract and guarantees, as in client-go:

* **Fair**: items are handed out by ``get()`` in the order they were added (FIFO).
* **Stingy**: an item is never handed to two workers at once, and adding an item that is already
  waiting is a no-op (re-adds collapse into the one waiting entry, which keeps its place).
* **Re-add while processing means process again**: an item added while a worker holds it is
  marked dirty and queued again, at the back, when that worker calls ``done(item)`` — once, however
  many times it was re-added meanwhile.
* Every ``get()`` must be paired with ``done(item)``; ``done`` of an item not being processed is a
  no-op.
* **Shutdown**: ``shutdown()`` makes ``add`` a no-op from then on and wakes every blocked
  ``get()``. As in client-go, ``get()`` keeps handing out items that were already queued (and
  dirty items re-queued by ``done``) and raises ``ShutDown`` once none is left, so workers finish
  the backlog and exit. ``shutdown_with_drain()`` does the same and additionally blocks until no
  item is being processed (a later ``shutdown()`` releases it early). Both are idempotent.

Items must be hashable; equal items are the same item. All state is guarded by one
``threading.Condition``. A queue with metrics enabled (see ``metrics.py``) runs one daemon thread
that refreshes the unfinished-work gauges until shutdown; call ``shutdown()`` to release it.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Hashable
from typing import Generic, TypeVar

from escaler.clock import Clock, RealClock
from escaler.workqueue.metrics import (
    UNFINISHED_WORK_UPDATE_PERIOD_SECONDS,
    MetricsProvider,
    NoopMetricsProvider,
    QueueMetrics,
)

__all__ = ["Queue", "ShutDown"]

T = TypeVar("T", bound=Hashable)


class ShutDown(Exception):
    """Raised by ``get()`` once the queue is shut down and nothing is left to hand out."""


class Queue(Generic[T]):
    """A fair, stingy work queue; see the module docstring for the contract."""

    def __init__(
        self,
        name: str = "",
        *,
        clock: Clock | None = None,
        metrics_provider: MetricsProvider | None = None,
    ) -> None:
        if not isinstance(name, str):
            raise TypeError(f"Queue.name: must be a str, got {type(name).__name__}")
        provider: MetricsProvider = (
            metrics_provider if metrics_provider is not None else NoopMetricsProvider()
        )
        # metrics label and thread-name suffix; "" disables metrics (as in client-go)
        self._name = name
        # the only time source of this queue and its subclasses
        self._clock: Clock = clock if clock is not None else RealClock()
        # guards every field below; getters wait on it for an item, drainers for _processing to empty
        self._cond = threading.Condition()
        # items ready to hand out, oldest first; no duplicates, each is in _dirty and not in _processing
        self._queue: deque[T] = deque()
        # items that need processing: all of _queue, plus processing items re-added since their get()
        self._dirty: set[T] = set()
        # items handed out by get() and not yet done(); disjoint from _queue
        self._processing: set[T] = set()
        # once True, never False again; add() is a no-op and get() stops waiting
        self._shutting_down = False
        # True while shutdown_with_drain() should keep waiting; shutdown() clears it
        self._draining = False
        # None exactly when metrics are off, so the hot path pays one test
        self._metrics: QueueMetrics[T] | None = (
            QueueMetrics(name, provider, self._clock)
            if name and not isinstance(provider, NoopMetricsProvider)
            else None
        )
        # set once by shutdown; background threads exit when they see it
        self._stopped = threading.Event()
        if self._metrics is not None:
            threading.Thread(
                target=self._update_unfinished_work_loop,
                name=f"workqueue-metrics[{name}]",
                daemon=True,
            ).start()

    def add(self, item: T) -> None:
        """Mark ``item`` as needing processing (no-op if already waiting, or after shutdown)."""
        with self._cond:
            if self._shutting_down or item in self._dirty:
                return
            if self._metrics is not None:
                self._metrics.add(item)
            self._dirty.add(item)
            if item in self._processing:
                # done() re-queues it; queueing it now would let a second worker take it
                return
            self._queue.append(item)
            self._cond.notify()

    def get(self) -> T:
        """Block until an item is ready and hand it out; raise ``ShutDown`` when none ever will be."""
        with self._cond:
            while not self._queue and not self._shutting_down:
                self._cond.wait()
            if not self._queue:
                raise ShutDown(f"workqueue {self._name!r} is shut down")
            item = self._queue.popleft()
            if self._metrics is not None:
                self._metrics.get(item)
            self._processing.add(item)
            self._dirty.discard(item)
            return item

    def done(self, item: T) -> None:
        """Finish processing ``item``; if it was re-added meanwhile, queue it again."""
        with self._cond:
            if item not in self._processing:
                return
            if self._metrics is not None:
                self._metrics.done(item)
            self._processing.discard(item)
            if item in self._dirty:
                self._queue.append(item)
                self._cond.notify()
            elif self._draining and not self._processing:
                self._cond.notify_all()

    def __len__(self) -> int:
        """Number of items ready to hand out (not counting items being processed)."""
        with self._cond:
            return len(self._queue)

    def shutdown(self) -> None:
        """Ignore further adds and wake blocked getters; does not wait for workers."""
        with self._cond:
            self._draining = False
            self._shutting_down = True
            self._cond.notify_all()
        self._stop_background()

    def shutdown_with_drain(self) -> None:
        """Like ``shutdown()``, then block until every item being processed is done.

        Items still queued are not waited for: workers may keep taking them with ``get()``.
        """
        with self._cond:
            self._draining = True
            self._shutting_down = True
            self._cond.notify_all()
        self._stop_background()
        with self._cond:
            while self._processing and self._draining:
                self._cond.wait()

    def shutting_down(self) -> bool:
        with self._cond:
            return self._shutting_down

    def update_unfinished_work(self) -> None:
        """Refresh the unfinished-work and longest-running-processor gauges (no-op without metrics).

        Called every ``UNFINISHED_WORK_UPDATE_PERIOD_SECONDS`` by the metrics thread; public so
        tests (and a scrape hook) can force a fresh value.
        """
        with self._cond:
            if self._metrics is not None and not self._shutting_down:
                self._metrics.update_unfinished_work()

    def _stop_background(self) -> None:
        """Stop background threads; called by every shutdown, after the flag is set, without ``_cond``."""
        self._stopped.set()

    def _update_unfinished_work_loop(self) -> None:
        while not self._clock.sleep(UNFINISHED_WORK_UPDATE_PERIOD_SECONDS, self._stopped):
            self.update_unfinished_work()
