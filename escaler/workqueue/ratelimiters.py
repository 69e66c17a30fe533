"""Rate limiters: how long to wait before retrying an item (client-go ``default_rate_limiters.go``).

Contract of a ``RateLimiter`` (thread-safe):

* ``when(item)`` returns the delay in seconds (``>= 0``) before ``item`` should be retried, and
  records the attempt (it is not a pure query);
* ``forget(item)`` stops tracking ``item`` (call it when the item succeeded): its next ``when``
  starts from scratch;
* ``num_requeues(item)`` is how many times ``item`` has been through ``when`` since it was last
  forgotten (0 for limiters that do not track items).

Limiters provided, with client-go's semantics:

* ``ItemExponentialFailureRateLimiter``: ``base_delay * 2**failures``, capped at ``max_delay``;
  computed without overflow however many failures there were.
* ``ItemFastSlowRateLimiter``: ``fast_delay`` for the first ``max_fast_attempts`` attempts, then
  ``slow_delay``.
* ``BucketRateLimiter``: an overall token bucket (``golang.org/x/time/rate`` ``Reserve().Delay()``):
  it starts full with ``burst`` tokens and refills at ``qps`` per second of its clock; ``when``
  always reserves a token and returns how long until that token exists. Not per item.
* ``MaxOfRateLimiter``: the maximum of several limiters' delays (each one records the attempt).
* ``default_controller_rate_limiter()``: ``MaxOf(ItemExponential(5 ms, 1000 s), Bucket(10 qps,
  100 burst))``, client-go's ``DefaultControllerRateLimiter``.

Per-item limiters keep one entry per item until ``forget``: callers must forget items that
succeed (or are deleted), or the table grows with every distinct item ever retried.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Hashable
from typing import Generic, Protocol, TypeVar

from escaler.clock import Clock, RealClock

__all__ = [
    "DEFAULT_BASE_DELAY_SECONDS",
    "DEFAULT_BURST",
    "DEFAULT_MAX_DELAY_SECONDS",
    "DEFAULT_QPS",
    "BucketRateLimiter",
    "ItemExponentialFailureRateLimiter",
    "ItemFastSlowRateLimiter",
    "MaxOfRateLimiter",
    "RateLimiter",
    "default_controller_rate_limiter",
]

T = TypeVar("T", bound=Hashable)
T_contra = TypeVar("T_contra", bound=Hashable, contravariant=True)

# client-go DefaultControllerRateLimiter / DefaultItemBasedRateLimiter.
DEFAULT_BASE_DELAY_SECONDS = 0.005
DEFAULT_MAX_DELAY_SECONDS = 1000.0
DEFAULT_QPS = 10.0
DEFAULT_BURST = 100


class RateLimiter(Protocol[T_contra]):
    """Decides retry delays; see the module docstring for the contract."""

    def when(self, item: T_contra) -> float: ...

    def forget(self, item: T_contra) -> None: ...

    def num_requeues(self, item: T_contra) -> int: ...


def _check_seconds(owner: str, field: str, value: float) -> None:
    if not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{owner}.{field}: must be a finite number of seconds >= 0, got {value!r}")


class ItemExponentialFailureRateLimiter(Generic[T]):
    """Per-item exponential backoff: ``base_delay * 2**failures`` capped at ``max_delay``."""

    def __init__(
        self,
        base_delay: float = DEFAULT_BASE_DELAY_SECONDS,
        max_delay: float = DEFAULT_MAX_DELAY_SECONDS,
    ) -> None:
        _check_seconds("ItemExponentialFailureRateLimiter", "base_delay", base_delay)
        _check_seconds("ItemExponentialFailureRateLimiter", "max_delay", max_delay)
        if max_delay < base_delay:
            raise ValueError(
                "ItemExponentialFailureRateLimiter.max_delay: must be >= base_delay "
                f"({base_delay!r}), got {max_delay!r}"
            )
        # delay of the first failure; >= 0
        self._base_delay = float(base_delay)
        # cap of every delay; >= _base_delay
        self._max_delay = float(max_delay)
        # guards _failures
        self._lock = threading.Lock()
        # item -> number of when() calls since its last forget(); only items with >= 1
        self._failures: dict[T, int] = {}

    def when(self, item: T) -> float:
        with self._lock:
            exp = self._failures.get(item, 0)
            self._failures[item] = exp + 1
        try:
            # ldexp scales by 2**exp exactly and raises instead of returning inf
            backoff = math.ldexp(self._base_delay, exp)
        except OverflowError:
            return self._max_delay
        return min(backoff, self._max_delay)

    def forget(self, item: T) -> None:
        with self._lock:
            self._failures.pop(item, None)

    def num_requeues(self, item: T) -> int:
        with self._lock:
            return self._failures.get(item, 0)


class ItemFastSlowRateLimiter(Generic[T]):
    """Per item: ``fast_delay`` for the first ``max_fast_attempts`` attempts, then ``slow_delay``."""

    def __init__(self, fast_delay: float, slow_delay: float, max_fast_attempts: int) -> None:
        _check_seconds("ItemFastSlowRateLimiter", "fast_delay", fast_delay)
        _check_seconds("ItemFastSlowRateLimiter", "slow_delay", slow_delay)
        if (
            isinstance(max_fast_attempts, bool)
            or not isinstance(max_fast_attempts, int)
            or max_fast_attempts < 0
        ):
            raise ValueError(
                f"ItemFastSlowRateLimiter.max_fast_attempts: must be an int >= 0, got {max_fast_attempts!r}"
            )
        # delay of attempts 1..max_fast_attempts
        self._fast_delay = float(fast_delay)
        # delay of every later attempt
        self._slow_delay = float(slow_delay)
        # number of attempts that get the fast delay; >= 0
        self._max_fast_attempts = max_fast_attempts
        # guards _attempts
        self._lock = threading.Lock()
        # item -> number of when() calls since its last forget(); only items with >= 1
        self._attempts: dict[T, int] = {}

    def when(self, item: T) -> float:
        with self._lock:
            attempts = self._attempts.get(item, 0) + 1
            self._attempts[item] = attempts
        return self._fast_delay if attempts <= self._max_fast_attempts else self._slow_delay

    def forget(self, item: T) -> None:
        with self._lock:
            self._attempts.pop(item, None)

    def num_requeues(self, item: T) -> int:
        with self._lock:
            return self._attempts.get(item, 0)


class BucketRateLimiter:
    """An overall token bucket: ``burst`` tokens, refilled at ``qps`` per second; not per item."""

    def __init__(
        self, qps: float = DEFAULT_QPS, burst: int = DEFAULT_BURST, *, clock: Clock | None = None
    ) -> None:
        if not isinstance(qps, int | float) or not math.isfinite(qps) or qps <= 0:
            raise ValueError(f"BucketRateLimiter.qps: must be a finite number > 0, got {qps!r}")
        if isinstance(burst, bool) or not isinstance(burst, int) or burst < 1:
            # x/time/rate with burst 0 never grants a token: an infinite delay, not a useful limiter
            raise ValueError(f"BucketRateLimiter.burst: must be an int >= 1, got {burst!r}")
        # refill rate, tokens per second; finite and > 0
        self._qps = float(qps)
        # bucket capacity; >= 1
        self._burst = burst
        # time source for the refill
        self._clock: Clock = clock if clock is not None else RealClock()
        # guards _tokens and _last
        self._lock = threading.Lock()
        # tokens at _last; <= _burst, negative when tokens are reserved ahead of time
        self._tokens = float(burst)
        # clock.monotonic() when _tokens was computed; never decreases
        self._last = self._clock.monotonic()

    def when(self, item: object) -> float:
        with self._lock:
            now = self._clock.monotonic()
            elapsed = max(0.0, now - self._last)
            tokens = min(float(self._burst), self._tokens + elapsed * self._qps) - 1.0
            self._tokens = tokens
            self._last = max(now, self._last)
        return 0.0 if tokens >= 0 else -tokens / self._qps

    def forget(self, item: object) -> None:
        pass

    def num_requeues(self, item: object) -> int:
        return 0


class MaxOfRateLimiter(Generic[T]):
    """The longest delay of several limiters; every limiter records every attempt."""

    def __init__(self, *limiters: RateLimiter[T]) -> None:
        if not limiters:
            raise ValueError("MaxOfRateLimiter.limiters: needs at least one rate limiter")
        # the combined limiters, in the order given; non-empty, never changes
        self._limiters: tuple[RateLimiter[T], ...] = limiters

    def when(self, item: T) -> float:
        # a list, not a generator into max(): every limiter must see the attempt
        return max([limiter.when(item) for limiter in self._limiters])

    def forget(self, item: T) -> None:
        for limiter in self._limiters:
            limiter.forget(item)

    def num_requeues(self, item: T) -> int:
        return max(limiter.num_requeues(item) for limiter in self._limiters)


def default_controller_rate_limiter(clock: Clock | None = None) -> MaxOfRateLimiter[Hashable]:
    """client-go's ``DefaultControllerRateLimiter``: per-item exponential plus an overall bucket."""
    return MaxOfRateLimiter(
        ItemExponentialFailureRateLimiter(DEFAULT_BASE_DELAY_SECONDS, DEFAULT_MAX_DELAY_SECONDS),
        BucketRateLimiter(DEFAULT_QPS, DEFAULT_BURST, clock=clock),
    )
