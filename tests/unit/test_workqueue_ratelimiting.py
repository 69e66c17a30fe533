"""RateLimitingQueue: add_rate_limited / forget / num_requeues over a FakeClock."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from escaler.clock import FakeClock
from escaler.workqueue import ItemExponentialFailureRateLimiter, RateLimitingQueue, ShutDown


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def queue(clock: FakeClock) -> Iterator[RateLimitingQueue[str]]:
    q: RateLimitingQueue[str] = RateLimitingQueue(ItemExponentialFailureRateLimiter(1.0, 60.0), clock=clock)
    yield q
    q.shutdown()


def test_add_rate_limited_backs_off_and_forget_resets(
    queue: RateLimitingQueue[str], clock: FakeClock
) -> None:
    for attempt, delay in enumerate([1.0, 2.0, 4.0], start=1):
        queue.add_rate_limited("a")
        assert queue.num_requeues("a") == attempt
        clock.block_until_waiters(1)
        clock.step(delay - 0.5)
        clock.block_until_waiters(1)  # still parked: not ready yet
        assert len(queue) == 0
        clock.step(0.5)
        assert queue.get() == "a"
        queue.done("a")
    queue.forget("a")
    assert queue.num_requeues("a") == 0
    queue.add_rate_limited("a")
    clock.block_until_waiters(1)
    clock.step(1.0)
    assert queue.get() == "a"


def test_worker_loop_retries_then_succeeds(queue: RateLimitingQueue[str], clock: FakeClock) -> None:
    queue.add("key")
    outcomes = iter([False, False, True])
    attempts = 0
    while True:
        item = queue.get()
        attempts += 1
        ok = next(outcomes)
        if ok:
            queue.forget(item)
        else:
            queue.add_rate_limited(item)  # while processing: re-queued at ready time, after done
        queue.done(item)
        if ok:
            break
        clock.block_until_waiters(1)
        clock.step(60.0)
    assert attempts == 3
    assert queue.num_requeues("key") == 0
    assert len(queue) == 0


def test_default_rate_limiter_uses_the_queue_clock(clock: FakeClock) -> None:
    q: RateLimitingQueue[str] = RateLimitingQueue(clock=clock)
    try:
        q.add_rate_limited("a")
        assert q.num_requeues("a") == 1
        clock.block_until_waiters(1)
        clock.step(0.005)
        assert q.get() == "a"
    finally:
        q.shutdown()


def test_add_rate_limited_after_shutdown_is_ignored(queue: RateLimitingQueue[str], clock: FakeClock) -> None:
    queue.shutdown()
    queue.add_rate_limited("a")
    clock.step(100.0)
    with pytest.raises(ShutDown):
        queue.get()
