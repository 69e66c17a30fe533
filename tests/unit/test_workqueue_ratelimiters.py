"""Rate limiters: exponential, fast/slow, token bucket, max-of, the controller default (client-go)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from escaler.clock import FakeClock
from escaler.workqueue import (
    BucketRateLimiter,
    ItemExponentialFailureRateLimiter,
    ItemFastSlowRateLimiter,
    MaxOfRateLimiter,
    default_controller_rate_limiter,
)


@pytest.mark.parametrize(
    ("base", "cap", "expected"),
    [
        (0.005, 1000.0, [0.005, 0.01, 0.02, 0.04, 0.08, 0.16]),
        (1.0, 10.0, [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]),
        (0.005, 1000.0, [min(0.005 * 2**i, 1000.0) for i in range(25)]),
        (0.0, 5.0, [0.0, 0.0, 0.0]),
        (2.0, 2.0, [2.0, 2.0]),
    ],
    ids=["5ms-doubles", "capped", "5ms-caps-at-1000s", "zero-base", "base-equals-cap"],
)
def test_exponential_sequence(base: float, cap: float, expected: list[float]) -> None:
    rl: ItemExponentialFailureRateLimiter[str] = ItemExponentialFailureRateLimiter(base, cap)
    got = [rl.when("a") for _ in expected]
    assert got == pytest.approx(expected)
    assert rl.num_requeues("a") == len(expected)
    assert rl.num_requeues("b") == 0


def test_exponential_reaches_cap_at_the_19th_failure() -> None:
    rl: ItemExponentialFailureRateLimiter[str] = ItemExponentialFailureRateLimiter()
    delays = [rl.when("a") for _ in range(20)]
    assert delays[17] == pytest.approx(0.005 * 2**17)  # 655.36 s
    assert delays[18:] == [1000.0, 1000.0]


def test_exponential_is_overflow_safe() -> None:
    rl: ItemExponentialFailureRateLimiter[str] = ItemExponentialFailureRateLimiter(0.005, 1000.0)
    for _ in range(5000):
        last = rl.when("a")
    assert last == 1000.0


def test_exponential_forget_resets_and_items_are_independent() -> None:
    rl: ItemExponentialFailureRateLimiter[str] = ItemExponentialFailureRateLimiter(0.005, 1000.0)
    for _ in range(3):
        rl.when("a")
    assert rl.when("b") == pytest.approx(0.005)
    assert rl.when("a") == pytest.approx(0.04)
    rl.forget("a")
    assert rl.num_requeues("a") == 0
    assert rl.when("a") == pytest.approx(0.005)
    assert rl.num_requeues("b") == 1


def test_fast_slow() -> None:
    rl: ItemFastSlowRateLimiter[str] = ItemFastSlowRateLimiter(0.005, 10.0, 3)
    assert [rl.when("a") for _ in range(5)] == [0.005, 0.005, 0.005, 10.0, 10.0]
    assert rl.num_requeues("a") == 5
    assert rl.when("b") == 0.005
    rl.forget("a")
    assert rl.num_requeues("a") == 0
    assert rl.when("a") == 0.005


def test_bucket_burst_then_one_token_per_tenth_of_a_second() -> None:
    clock = FakeClock()
    rl = BucketRateLimiter(10.0, 100, clock=clock)
    assert [rl.when(i) for i in range(100)] == [0.0] * 100
    for _ in range(5):
        clock.step(0.1)
        assert rl.when("x") == pytest.approx(0.0), "one token accrues every 0.1 s"
    # at one instant, reservations queue up 0.1 s apart
    assert [rl.when("x") for _ in range(3)] == pytest.approx([0.1, 0.2, 0.3])
    clock.step(0.3)
    assert rl.when("x") == pytest.approx(0.1)
    # idle time refills the bucket up to burst, no further
    clock.step(1000.0)
    assert [rl.when(i) for i in range(100)] == [0.0] * 100
    assert rl.when("x") == pytest.approx(0.1)
    assert rl.num_requeues("x") == 0
    rl.forget("x")


def test_max_of_takes_the_longest_and_forgets_everywhere() -> None:
    exp: ItemExponentialFailureRateLimiter[str] = ItemExponentialFailureRateLimiter(1.0, 100.0)
    fast_slow: ItemFastSlowRateLimiter[str] = ItemFastSlowRateLimiter(0.0, 50.0, 2)
    rl = MaxOfRateLimiter(exp, fast_slow)
    assert [rl.when("a") for _ in range(4)] == [1.0, 2.0, 50.0, 50.0]
    assert rl.num_requeues("a") == 4
    rl.forget("a")
    assert exp.num_requeues("a") == fast_slow.num_requeues("a") == rl.num_requeues("a") == 0
    assert rl.when("a") == 1.0


def test_default_controller_rate_limiter() -> None:
    clock = FakeClock()
    rl = default_controller_rate_limiter(clock)
    # per item: exponential from 5 ms while the bucket still has tokens
    assert [rl.when("a") for _ in range(3)] == pytest.approx([0.005, 0.01, 0.02])
    for i in range(97):
        rl.when(i)
    # bucket of 100 is now empty: a new item waits for the next token
    assert rl.when("fresh") == pytest.approx(0.1)
    assert rl.num_requeues("a") == 3


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda: ItemExponentialFailureRateLimiter(-1.0, 10.0), "base_delay"),
        (lambda: ItemExponentialFailureRateLimiter(0.005, float("inf")), "max_delay"),
        (lambda: ItemExponentialFailureRateLimiter(5.0, 1.0), "max_delay"),
        (lambda: ItemFastSlowRateLimiter(float("nan"), 1.0, 3), "fast_delay"),
        (lambda: ItemFastSlowRateLimiter(0.1, -1.0, 3), "slow_delay"),
        (lambda: ItemFastSlowRateLimiter(0.1, 1.0, -1), "max_fast_attempts"),
        (lambda: BucketRateLimiter(0.0, 100), "qps"),
        (lambda: BucketRateLimiter(float("inf"), 100), "qps"),
        (lambda: BucketRateLimiter(10.0, 0), "burst"),
        (lambda: MaxOfRateLimiter(), "limiters"),
    ],
    ids=[
        "exp-negative-base",
        "exp-infinite-max",
        "exp-max-below-base",
        "fastslow-nan-fast",
        "fastslow-negative-slow",
        "fastslow-negative-attempts",
        "bucket-zero-qps",
        "bucket-infinite-qps",
        "bucket-zero-burst",
        "maxof-empty",
    ],
)
def test_invalid_configuration_names_the_field(make: Callable[[], Any], field: str) -> None:
    with pytest.raises(ValueError, match=rf"\.{field}:"):
        make()
