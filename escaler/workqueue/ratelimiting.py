"""The rate-limiting queue: a ``DelayingQueue`` that retries items after a ``RateLimiter`` delay.

Contract (client-go ``rate_limiting_queue.go``):

* ``add_rate_limited(item)`` asks the limiter how long to wait (which records the attempt) and
  then behaves as ``add_after(item, delay)``; once shut down, it records the attempt but adds
  nothing. Each call that schedules the item counts one retry in the queue's metrics.
* ``forget(item)`` tells the limiter the item succeeded; the queue itself is unchanged (an item
  already scheduled still arrives).
* ``num_requeues(item)`` is the limiter's count for the item.

The default limiter is ``default_controller_rate_limiter`` on the queue's clock.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import TypeVar

from escaler.clock import Clock
from escaler.workqueue.delaying import DelayingQueue
from escaler.workqueue.metrics import MetricsProvider
from escaler.workqueue.ratelimiters import RateLimiter, default_controller_rate_limiter

__all__ = ["RateLimitingQueue"]

T = TypeVar("T", bound=Hashable)


class RateLimitingQueue(DelayingQueue[T]):
    """A ``DelayingQueue`` with rate-limited re-adds; see the module docstring."""

    def __init__(
        self,
        rate_limiter: RateLimiter[T] | None = None,
        name: str = "",
        *,
        clock: Clock | None = None,
        metrics_provider: MetricsProvider | None = None,
    ) -> None:
        super().__init__(name, clock=clock, metrics_provider=metrics_provider)
        # decides every add_rate_limited delay; shares the queue's clock when defaulted
        self._rate_limiter: RateLimiter[T] = (
            rate_limiter if rate_limiter is not None else default_controller_rate_limiter(self._clock)
        )

    def add_rate_limited(self, item: T) -> None:
        """Add ``item`` after the delay its rate limiter prescribes."""
        delay = self._rate_limiter.when(item)
        with self._cond:
            if self._shutting_down:
                return
            if self._metrics is not None:
                self._metrics.retry()
        self.add_after(item, delay)

    def forget(self, item: T) -> None:
        """Reset the rate limiter's history for ``item`` (call after it was processed successfully)."""
        self._rate_limiter.forget(item)

    def num_requeues(self, item: T) -> int:
        return self._rate_limiter.num_requeues(item)
