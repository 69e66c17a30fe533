"""``SharedQueries``: identical outbound queries inside one poll tick are made once, their answer shared.

A fleet often asks one Prometheus the same question (N scalers of one service, one
``sum(rate(...))``). The poller spreads scalers over the interval, so up to N identical requests
per interval would go out; with this, at most one per ``window`` does.

Contract of ``run(key, fn, wait)``:

* ``key`` says what makes two queries the same. The collector keys an ExternalServer query by
  (endpoint, query, timeoutSeconds, SHA-256 of the bearer token or None): an answer is shared only
  between calls that would have sent byte-for-byte the same request with the same credential —
  never across different tokens (nor a token and none), whatever the namespace.
* While a call for ``key`` is in flight, another waits for its answer (at most ``wait`` seconds;
  then ``on_timeout()`` is its answer) instead of sending its own: single flight.
* An answer that completed less than ``window`` seconds ago (on the injected clock; default
  ``DEFAULT_WINDOW_SECONDS``, the poller's tick) is returned as is. ``window`` 0 shares only
  in-flight calls. A result is never older than ``window`` plus the leader's own request time.
* ``fn`` raising is the leader's problem: the exception propagates to the leader, and waiting
  callers run ``fn`` themselves (nothing is cached).
* Memory: one entry per distinct key seen in the last ``window``; expired entries are dropped in
  completion order (amortised O(1) per call). Thread-safe; ``fn`` runs outside the lock.
* ``made`` / ``shared`` count calls that ran ``fn`` and calls answered by another's (for tests and
  the requests benchmark).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from escaler.clock import Clock, RealClock

__all__ = ["DEFAULT_WINDOW_SECONDS", "SharedQueries"]

# how long a completed answer is shared (the MetricsPoller's tick)
DEFAULT_WINDOW_SECONDS = 1.0

T = TypeVar("T")


@dataclass
class _Entry(Generic[T]):
    # set when the leader finished (result set, or failed: ok False)
    done: threading.Event = field(default_factory=threading.Event)
    # the leader's answer; valid once done and ok
    result: T | None = None
    ok: bool = False
    # monotonic completion time (valid once done)
    at: float = 0.0


class SharedQueries(Generic[T]):
    """See the module docstring."""

    def __init__(self, clock: Clock | None = None, *, window: float = DEFAULT_WINDOW_SECONDS) -> None:
        if window < 0:
            raise ValueError(f"SharedQueries: window must be >= 0, got {window}")
        # measures the window
        self._clock: Clock = clock or RealClock()
        # seconds a completed answer is shared
        self._window = window
        # guards every field below
        self._mu = threading.Lock()
        # key → the in-flight or recently completed call
        self._entries: dict[Hashable, _Entry[T]] = {}
        # (completion time, key, entry) in completion order, for expiry
        self._done: deque[tuple[float, Hashable, _Entry[T]]] = deque()
        # calls that ran fn / calls answered by another call's result
        self.made = 0
        self.shared = 0

    def run(self, key: Hashable, fn: Callable[[], T], wait: float, on_timeout: Callable[[], T]) -> T:
        entry, leader = self._join(key)
        if leader:
            return self._lead(key, entry, fn)
        if not entry.done.wait(max(wait, 0.0)):
            return on_timeout()
        if not entry.ok:
            return fn()  # the leader raised: nothing to share
        with self._mu:
            self.shared += 1
        return entry.result  # type: ignore[return-value]

    def _join(self, key: Hashable) -> tuple[_Entry[T], bool]:
        now = self._clock.monotonic()
        with self._mu:
            self._expire(now)
            entry = self._entries.get(key)
            fresh = entry is not None and entry.ok and now - entry.at < self._window
            if entry is not None and (not entry.done.is_set() or fresh):
                return entry, False
            entry = self._entries[key] = _Entry()
            self.made += 1
            return entry, True

    def _lead(self, key: Hashable, entry: _Entry[T], fn: Callable[[], T]) -> T:
        try:
            result = fn()
        except BaseException:
            with self._mu:
                if self._entries.get(key) is entry:
                    del self._entries[key]
            entry.done.set()
            raise
        entry.result, entry.ok = result, True
        with self._mu:
            entry.at = self._clock.monotonic()
            self._done.append((entry.at, key, entry))
        entry.done.set()
        return result

    def _expire(self, now: float) -> None:
        while self._done and now - self._done[0][0] >= self._window:
            _, key, entry = self._done.popleft()
            if self._entries.get(key) is entry:
                del self._entries[key]
