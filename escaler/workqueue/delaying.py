"""The delaying queue: a ``Queue`` whose items can be added after a delay (client-go ``AddAfter``).

Contract and guarantees:

* ``add_after(item, delay_seconds)`` adds ``item`` to the queue once ``delay_seconds`` of the
  queue's clock have passed; a delay ``<= 0`` adds it at once. Everything ``Queue`` guarantees
  applies from the moment the item is added.
* While an item is waiting, scheduling it again keeps the **earliest** ready time (a later one is
  ignored), so an item waits in the delay heap at most once.
* Items whose ready times have passed are added in ready-time order (ties: scheduling order).
* One daemon thread waits for the earliest ready time with ``clock.wait``, so a test that steps a
  ``FakeClock`` releases items deterministically. When an ``add_after`` call that moves the
  earliest ready time returns, that thread is already parked for the new time: a test may call
  ``FakeClock.block_until_waiters(1)`` (2 when metrics are enabled: their updater thread sleeps on
  the clock too) and then ``step`` without racing it. The thread also wakes
  every ``MAX_WAIT_SECONDS`` at most (client-go's heartbeat), which bounds the cost of a missed
  wakeup and keeps real-clock timeouts small.
* ``shutdown()``/``shutdown_with_drain()`` stop that thread; items still waiting for their ready
  time are dropped, and ``add_after`` after shutdown is a no-op.
"""

from __future__ import annotations

import heapq
import itertools
import math
import threading
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from escaler.clock import Clock
from escaler.workqueue.metrics import MetricsProvider
from escaler.workqueue.queue import Queue

__all__ = ["MAX_WAIT_SECONDS", "DelayingQueue"]

T = TypeVar("T", bound=Hashable)

# client-go's maxWait: the waiter thread re-checks the heap at least this often.
MAX_WAIT_SECONDS = 10.0


@dataclass(order=True)
class _Entry(Generic[T]):
    # monotonic time (queue's clock) at which the item is added to the queue
    ready_at: float
    # scheduling order, to keep the heap order total and FIFO among equal ready times
    seq: int
    # the item; excluded from ordering so items need not be comparable
    item: T = field(compare=False)


class DelayingQueue(Queue[T]):
    """A ``Queue`` with ``add_after``; see the module docstring for the contract."""

    def __init__(
        self,
        name: str = "",
        *,
        clock: Clock | None = None,
        metrics_provider: MetricsProvider | None = None,
    ) -> None:
        super().__init__(name, clock=clock, metrics_provider=metrics_provider)
        # guards every field below; the waiter thread parks on it and add_after wakes it
        # (lock order: this before the queue's own lock, never the reverse)
        self._waiting_cond = threading.Condition()
        # min-heap of scheduled entries; may hold superseded entries (see _waiting), skipped on pop
        self._heap: list[_Entry[T]] = []
        # item -> its live entry in _heap; an entry not in here is superseded by an earlier one
        self._waiting: dict[T, _Entry[T]] = {}
        # source of _Entry.seq; strictly increasing
        self._seq = itertools.count()
        # bumped by add_after each time it moves the earliest ready time
        self._rearm_requested = 0
        # the _rearm_requested value the waiter thread last parked for; <= _rearm_requested
        self._rearm_done = 0
        # once True, never False: the waiter thread is stopping or gone, and add_after is a no-op
        self._waiter_stopped = False
        # the thread that moves ready entries into the queue
        self._waiter = threading.Thread(
            target=self._waiting_loop, name=f"workqueue-delaying[{name}]", daemon=True
        )
        self._waiter.start()

    def add_after(self, item: T, delay_seconds: float) -> None:
        """Add ``item`` once ``delay_seconds`` have passed (at once if ``<= 0``)."""
        if math.isnan(delay_seconds):
            raise ValueError("DelayingQueue.add_after: delay_seconds must be a number, got nan")
        if self.shutting_down():
            return
        if delay_seconds <= 0:
            self.add(item)
            return
        with self._waiting_cond:
            if self._waiter_stopped:
                return
            ready_at = self._clock.monotonic() + delay_seconds
            current = self._waiting.get(item)
            if current is not None and current.ready_at <= ready_at:
                return
            entry = _Entry(ready_at, next(self._seq), item)
            self._waiting[item] = entry
            heapq.heappush(self._heap, entry)
            self._drop_superseded_head()
            if self._heap[0] is not entry or threading.current_thread() is self._waiter:
                return
            # The waiter is parked for a later time: wake it, and return only once it has parked
            # again for this entry, so callers (and FakeClock tests) never race its re-arming.
            self._rearm_requested += 1
            wanted = self._rearm_requested
            self._waiting_cond.notify_all()
            while self._rearm_done < wanted and not self._waiter_stopped:
                self._waiting_cond.wait()

    def _stop_background(self) -> None:
        super()._stop_background()
        with self._waiting_cond:
            self._waiter_stopped = True
            self._waiting_cond.notify_all()

    def _drop_superseded_head(self) -> None:
        while self._heap and self._waiting.get(self._heap[0].item) is not self._heap[0]:
            heapq.heappop(self._heap)

    def _waiting_loop(self) -> None:
        try:
            with self._waiting_cond:
                while not self._waiter_stopped:
                    now = self._clock.monotonic()
                    self._drop_superseded_head()
                    while self._heap and self._heap[0].ready_at <= now:
                        entry = heapq.heappop(self._heap)
                        del self._waiting[entry.item]
                        self.add(entry.item)
                        self._drop_superseded_head()
                    timeout = min(self._heap[0].ready_at - now, MAX_WAIT_SECONDS) if self._heap else None
                    self._rearm_done = self._rearm_requested
                    self._waiting_cond.notify_all()
                    self._clock.wait(self._waiting_cond, timeout)
        finally:
            with self._waiting_cond:
                self._waiter_stopped = True
                self._waiting_cond.notify_all()
