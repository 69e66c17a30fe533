"""The MetricsTrigger poller: every scaler re-evaluated once per interval, spread over it (SPEC §5.2).

Metrics change without any Kubernetes event, so MetricsTrigger scalers (with an algorithm; the
HPA path needs none) are re-enqueued every ``--metrics-trigger-poll-interval`` (default 30 s;
0 disables polling). To avoid a burst of N collections at once, each scaler gets a fixed
*phase* in ``[0, interval)``, derived from a stable hash of its namespace/name, and is enqueued
at ``k x interval + phase`` on the manager's clock — so N scalers are spread evenly over the
interval on average, and one scaler is polled at the same offset every cycle, whichever
replica leads.

Contract:

* ``phase(request)`` is deterministic across processes (SHA-256, not Python's salted ``hash``).
* ``start(stop)`` (a leader-only runnable) loops: every ``tick`` seconds of the clock it lists the
  scalers (``list_scalers()``, read from the informer cache), and for each one whose next due
  time has come, enqueues it through ``add_after(request, delay)`` so that it lands exactly at
  its due time, then schedules the following cycle. A scaler that disappears from the list is
  forgotten; a new one is scheduled at its next phase. The queue collapses an enqueue that
  meets a pending one, so a scaler already queued for an event is not reconciled twice.
* ``interval == 0`` → ``start`` returns once ``stop`` is set without doing anything.
"""

from __future__ import annotations

import hashlib
import logging
import math
import threading
from collections.abc import Callable, Iterable

from escaler.clock import Clock
from escaler.runtime.types import Request

__all__ = ["DEFAULT_POLL_TICK_SECONDS", "MetricsPoller", "phase"]

# how often the poller wakes to schedule the next slice of the interval (upper bound)
DEFAULT_POLL_TICK_SECONDS = 1.0

_log = logging.getLogger(__name__)


def phase(request: Request, interval: float) -> float:
    """The scaler's fixed offset in ``[0, interval)``."""
    if interval <= 0:
        return 0.0
    digest = hashlib.sha256(f"{request.namespace}/{request.name}".encode()).digest()
    fraction = int.from_bytes(digest[:8], "big") / 2**64
    return fraction * interval


class MetricsPoller:
    """Enqueues every listed scaler once per interval at its phase; see the module docstring."""

    def __init__(self, interval: float, list_scalers: Callable[[], Iterable[Request]],
                 add_after: Callable[[Request, float], None], clock: Clock,
                 tick: float = DEFAULT_POLL_TICK_SECONDS) -> None:
        if not math.isfinite(interval) or interval < 0:
            raise ValueError(f"MetricsPoller.interval: must be a finite number >= 0, got {interval!r}")
        if not math.isfinite(tick) or tick <= 0:
            raise ValueError(f"MetricsPoller.tick: must be a finite number > 0, got {tick!r}")
        # seconds between two polls of one scaler; 0 = disabled
        self.interval = interval
        # lists the MetricsTrigger scalers to poll (from the informer cache)
        self._list = list_scalers
        # the controller queue's add_after
        self._add_after = add_after
        self._clock = clock
        # scheduling granularity: the loop wakes at most this long after a due time is in reach
        self.tick = min(tick, interval) if interval > 0 else tick
        # guards _due
        self._mu = threading.Lock()
        # scaler → monotonic time of its next enqueue (always k x interval + phase)
        self._due: dict[Request, float] = {}
        self.name = "elasticscaler-metrics-poller"

    def next_due(self, request: Request, now: float) -> float:
        """The first time >= now at which ``request`` is due (its phase in the current cycle or the next)."""
        p = phase(request, self.interval)
        cycle = math.floor((now - p) / self.interval) + 1
        return cycle * self.interval + p

    def due_times(self) -> dict[Request, float]:
        with self._mu:
            return dict(self._due)

    def poll_once(self) -> list[tuple[Request, float]]:
        """One scheduling pass: enqueue (with add_after) the scalers due before the next pass."""
        if self.interval <= 0:
            return []
        now = self._clock.monotonic()
        horizon = now + self.tick
        current = set(self._list())
        scheduled: list[tuple[Request, float]] = []
        with self._mu:
            for gone in set(self._due) - current:
                del self._due[gone]
            for req in current:
                due = self._due.get(req)
                if due is None:
                    due = self._due[req] = self.next_due(req, now)
                if due < horizon:
                    scheduled.append((req, max(0.0, due - now)))
                    self._due[req] = due + self.interval
        for req, delay in scheduled:
            self._add_after(req, delay)
        return scheduled

    def start(self, stop: threading.Event) -> None:
        if self.interval <= 0:
            _log.info("metrics trigger polling disabled (interval 0)")
            stop.wait()
            return
        _log.info("polling MetricsTrigger scalers every %gs, spread over the interval", self.interval)
        while not stop.is_set():
            try:
                self.poll_once()
            except Exception:
                _log.exception("metrics poller pass failed")
            if self._clock.sleep(self.tick, stop):
                return
