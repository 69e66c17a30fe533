"""Jittered exponential backoff for the reflector (client-go's ``ExponentialBackoffManager``).

Contract:

* The n-th consecutive ``next_delay()`` (n = 0, 1, ...) draws from
  ``[d, d * (1 + jitter))`` with ``d = min(initial * factor**n, max_delay)``, and the result is
  capped at ``max_delay``. With the reflector's defaults (0.8 s x2, 30 s, jitter 1.0) the base
  schedule is 0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 30, 30, ... seconds.
* ``reset()`` starts the schedule over; the reflector calls it after a healthy period (an event
  arrived on a watch, or a watch stayed open for ``reset_after`` seconds).
* If more than ``reset_after`` seconds (on the injected clock) passed since the previous
  ``next_delay()``, the schedule restarts on its own: a failure after a long quiet spell is a
  first failure.
* Not thread-safe: one ``Backoff`` belongs to one reflector loop.
"""

from __future__ import annotations

import math
import random

from escaler.clock import Clock, RealClock

__all__ = [
    "DEFAULT_BACKOFF_FACTOR",
    "DEFAULT_BACKOFF_INITIAL",
    "DEFAULT_BACKOFF_JITTER",
    "DEFAULT_BACKOFF_MAX",
    "DEFAULT_BACKOFF_RESET_AFTER",
    "Backoff",
]

# client-go reflector: NewExponentialBackoffManager(800ms, 30s, 2min, 2.0, 1.0, clock)
DEFAULT_BACKOFF_INITIAL = 0.8
DEFAULT_BACKOFF_FACTOR = 2.0
DEFAULT_BACKOFF_MAX = 30.0
DEFAULT_BACKOFF_JITTER = 1.0
DEFAULT_BACKOFF_RESET_AFTER = 120.0


class Backoff:
    """Exponential backoff with proportional jitter; see the module docstring."""

    def __init__(
        self,
        *,
        initial: float = DEFAULT_BACKOFF_INITIAL,
        factor: float = DEFAULT_BACKOFF_FACTOR,
        max_delay: float = DEFAULT_BACKOFF_MAX,
        jitter: float = DEFAULT_BACKOFF_JITTER,
        reset_after: float = DEFAULT_BACKOFF_RESET_AFTER,
        clock: Clock | None = None,
        rng: random.Random | None = None,
    ) -> None:
        for field, value, lowest in (("initial", initial, 0.0), ("max_delay", max_delay, 0.0),
                                     ("factor", factor, 1.0), ("jitter", jitter, 0.0),
                                     ("reset_after", reset_after, 0.0)):
            if not math.isfinite(value) or value < lowest:
                raise ValueError(f"Backoff.{field}: must be a finite number >= {lowest}, got {value!r}")
        if initial <= 0:
            raise ValueError(f"Backoff.initial: must be > 0, got {initial!r}")
        if max_delay < initial:
            raise ValueError(f"Backoff.max_delay: must be >= initial ({initial}), got {max_delay!r}")
        # schedule parameters; fixed after construction
        self._initial = initial
        self._factor = factor
        self._max = max_delay
        self._jitter = jitter
        self._reset_after = reset_after
        # time source for the idle reset; jitter source (inject a seeded one in tests)
        self._clock: Clock = clock or RealClock()
        self._rng = rng or random.Random()
        # the base delay (before jitter) of the next next_delay(); initial <= _next <= max
        self._next = initial
        # clock.monotonic() at the previous next_delay(); None until the first one or after reset()
        self._last: float | None = None

    def next_delay(self) -> float:
        """The delay to wait before the next attempt; advances the schedule."""
        now = self._clock.monotonic()
        if self._last is not None and now - self._last > self._reset_after:
            self._next = self._initial
        self._last = now
        base = self._next
        self._next = min(base * self._factor, self._max)
        return min(base * (1.0 + self._jitter * self._rng.random()), self._max)

    def reset(self) -> None:
        """Start the schedule over (after a healthy period)."""
        self._next = self._initial
        self._last = None

    @property
    def current_base(self) -> float:
        """The base delay the next ``next_delay()`` will use (for logs and tests)."""
        return self._next
