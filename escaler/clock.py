"""Injected time: the one place escaler reads clocks or waits for time to pass.

Contract:

* ``Clock.monotonic()`` is for intervals and deadlines (never goes backwards); ``Clock.now()``
  is the wall clock as an aware UTC ``datetime`` for timestamps written to the API server.
* ``Clock.wait(cond, timeout)`` must be called with ``cond``'s lock held. It returns when
  ``cond`` is notified or when ``timeout`` seconds of *this clock's* time have passed; like
  ``Condition.wait`` it may return early, so callers re-check their predicate in a loop.
* ``Clock.sleep(seconds, stop)`` waits ``seconds`` of this clock's time; it returns ``True``
  at once if ``stop`` is (or becomes) set, ``False`` when the time has passed.

``RealClock`` uses ``time.monotonic``/``time.time``. ``FakeClock`` only moves when a test calls
``step``/``set``; every waiter whose deadline has been reached is woken by that call, so unit
tests drive timers deterministically and never sleep to wait for logic.
``FakeClock.block_until_waiters(n)`` lets a test step only once a background thread is parked on
the clock (the client-go ``fakeclock.HasWaiters`` idiom); ``FakeClock.block_until_deadline(t)``
waits for a waiter parked until exactly ``t``, to tell *which* wait a thread is in.

``wait_for(clock, cond, predicate, timeout)`` is ``Condition.wait_for`` with the timeout measured
on ``clock``. It is also how escaler bounds the wait for its own threads to exit: ``Thread.join``
measures wall time, so a thread that should be awaited on the injected clock notifies a condition
as it exits instead, and the waiter uses ``wait_for``.

This module is a bottom utility: it imports nothing else from escaler.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Protocol

__all__ = ["Clock", "FakeClock", "RealClock", "wait_for"]

# How often a FakeClock sleeper re-checks its stop event in real time. The sleeper's *deadline*
# is driven only by step(); this bounds how late a stop request is noticed.
_FAKE_STOP_POLL_SECONDS = 0.01


class Clock(Protocol):
    """Time source and timed waits; see the module docstring for the contract."""

    def monotonic(self) -> float: ...

    def now(self) -> datetime: ...

    def wait(self, cond: threading.Condition, timeout: float | None) -> None: ...

    def sleep(self, seconds: float, stop: threading.Event | None = None) -> bool: ...


class RealClock:
    """The process clock."""

    def monotonic(self) -> float:
        return time.monotonic()

    def now(self) -> datetime:
        return datetime.now(UTC)

    def wait(self, cond: threading.Condition, timeout: float | None) -> None:
        cond.wait(None if timeout is None else max(0.0, timeout))

    def sleep(self, seconds: float, stop: threading.Event | None = None) -> bool:
        if stop is None:
            if seconds > 0:
                time.sleep(seconds)
            return False
        return stop.wait(max(0.0, seconds))


def wait_for(clock: Clock, cond: threading.Condition, predicate: Callable[[], bool],
             timeout: float | None) -> bool:
    """``Condition.wait_for`` on ``clock``: call with ``cond`` held; wait until ``predicate()`` is
    true or ``timeout`` seconds of ``clock``'s time have passed (``None``: no limit), and return
    the predicate's last value. Whoever makes the predicate true must notify ``cond``."""
    deadline = None if timeout is None else clock.monotonic() + max(0.0, timeout)
    result = predicate()
    while not result:
        if deadline is None:
            clock.wait(cond, None)
        else:
            left = deadline - clock.monotonic()
            if left <= 0:
                break
            clock.wait(cond, left)
        result = predicate()
    return result


@dataclass(eq=False)
class _Waiter:
    # deadline on the fake monotonic clock; the waiter is woken once monotonic() >= deadline
    deadline: float
    # the condition to notify (a private one for sleep())
    cond: threading.Condition
    # set by step() when the deadline passed, so sleep() can tell a timeout from a spurious wakeup
    fired: bool = False


@dataclass(eq=False)
class FakeClock:
    """A clock that moves only when told to. Thread-safe."""

    # fake monotonic seconds; only increases
    _mono: float = 1000.0
    # wall time corresponding to _mono; moves in lockstep with it
    _wall: datetime = field(default_factory=lambda: datetime(2026, 1, 1, tzinfo=UTC))
    # guards _mono, _wall and _waiters; never held while notifying a waiter's condition
    _lock: threading.Condition = field(default_factory=threading.Condition)
    # parked waiters; removed by step() when fired or by the waiter itself on return
    _waiters: list[_Waiter] = field(default_factory=list)

    def monotonic(self) -> float:
        with self._lock:
            return self._mono

    def now(self) -> datetime:
        with self._lock:
            return self._wall

    def step(self, seconds: float) -> None:
        """Advance time by ``seconds`` (>= 0) and wake every waiter now due."""
        if seconds < 0:
            raise ValueError(f"FakeClock.step: seconds must be >= 0, got {seconds}")
        with self._lock:
            self._mono += seconds
            self._wall += timedelta(seconds=seconds)
            due = [w for w in self._waiters if w.deadline <= self._mono]
            for w in due:
                w.fired = True
                self._waiters.remove(w)
        for w in due:
            with w.cond:
                w.cond.notify_all()

    def set_wall(self, when: datetime) -> None:
        """Set the wall clock (aware) without moving monotonic time (e.g. to a DST edge)."""
        if when.tzinfo is None:
            raise ValueError("FakeClock.set_wall: datetime must be timezone-aware")
        with self._lock:
            self._wall = when.astimezone(UTC)

    def waiters(self) -> int:
        with self._lock:
            return len(self._waiters)

    def block_until_waiters(self, n: int, timeout: float = 5.0) -> None:
        """Block (real time, bounded) until at least ``n`` waiters are parked on this clock."""
        if not self.wait_for_waiters(n, timeout):
            raise TimeoutError(f"FakeClock: {self.waiters()} waiters parked, wanted {n}")

    def wait_for_waiters(self, n: int, timeout: float) -> bool:
        """Like ``block_until_waiters``, but return False instead of raising on timeout."""
        return self._block_until(lambda: len(self._waiters) >= n, timeout)

    def deadlines(self) -> list[float]:
        """The deadlines (this clock's monotonic time) of the parked waiters, earliest first."""
        with self._lock:
            return sorted(w.deadline for w in self._waiters)

    def block_until_deadline(self, deadline: float, timeout: float = 5.0) -> None:
        """Block (real time, bounded) until a waiter is parked until ``deadline`` (to within 1 µs):
        a test's proof that a thread is in one particular timed wait."""
        def parked() -> bool:
            return any(abs(w.deadline - deadline) <= 1e-6 for w in self._waiters)

        if not self._block_until(parked, timeout):
            raise TimeoutError(f"FakeClock: no waiter parked until {deadline}; deadlines {self.deadlines()}")

    def _block_until(self, predicate: Callable[[], bool], timeout: float) -> bool:
        # real time: this bounds how long a test waits for another thread to park
        deadline = time.monotonic() + timeout
        with self._lock:
            while not predicate():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._lock.wait(left)
            return True

    def _register(self, deadline: float, cond: threading.Condition) -> _Waiter:
        w = _Waiter(deadline, cond)
        with self._lock:
            if deadline <= self._mono:
                w.fired = True
            else:
                self._waiters.append(w)
                self._lock.notify_all()
        return w

    def _unregister(self, w: _Waiter) -> None:
        with self._lock:
            if w in self._waiters:
                self._waiters.remove(w)

    def wait(self, cond: threading.Condition, timeout: float | None) -> None:
        if timeout is None:
            cond.wait()
            return
        w = self._register(self.monotonic() + max(0.0, timeout), cond)
        try:
            if not w.fired:
                cond.wait()
        finally:
            self._unregister(w)

    def sleep(self, seconds: float, stop: threading.Event | None = None) -> bool:
        if stop is not None and stop.is_set():
            return True
        cond = threading.Condition()
        with cond:
            w = self._register(self.monotonic() + max(0.0, seconds), cond)
            try:
                while not w.fired:
                    if stop is None:
                        cond.wait()
                    else:
                        cond.wait(_FAKE_STOP_POLL_SECONDS)
                        if stop.is_set():
                            return True
            finally:
                self._unregister(w)
        return False
