"""Backoff: 0.8 s x2 up to 30 s, jitter in [d, 2d) capped, reset explicitly or after idling."""

from __future__ import annotations

import random
from typing import Any

import pytest

from escaler.clock import FakeClock
from escaler.informers.backoff import Backoff


class FixedRandom(random.Random):
    """random() always returns ``value`` (0 = no jitter, 0.999... = maximum jitter)."""

    def __init__(self, value: float) -> None:
        super().__init__(0)
        self.value = value

    def random(self) -> float:
        return self.value


BASE = [0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 30.0, 30.0]


@pytest.mark.parametrize(
    ("rand", "expected"),
    [
        (0.0, BASE),
        (0.5, [min(d * 1.5, 30.0) for d in BASE]),
        (0.999999, [min(d * 1.999999, 30.0) for d in BASE]),
    ],
    ids=["no-jitter", "half-jitter", "max-jitter-capped"],
)
def test_schedule(rand: float, expected: list[float]) -> None:
    backoff = Backoff(clock=FakeClock(), rng=FixedRandom(rand))
    assert [backoff.next_delay() for _ in expected] == pytest.approx(expected)


def test_jitter_stays_within_bounds_with_a_real_rng() -> None:
    backoff = Backoff(clock=FakeClock(), rng=random.Random(7))
    for base in BASE * 3:
        if base == 0.8:
            backoff.reset()
        delay = backoff.next_delay()
        assert base <= delay <= 30.0
        assert delay < base * 2 or delay == 30.0 == base


def test_reset_starts_over() -> None:
    backoff = Backoff(clock=FakeClock(), rng=FixedRandom(0.0))
    assert [backoff.next_delay() for _ in range(3)] == pytest.approx([0.8, 1.6, 3.2])
    backoff.reset()
    assert backoff.next_delay() == pytest.approx(0.8)


def test_idle_period_resets() -> None:
    clock = FakeClock()
    backoff = Backoff(clock=clock, rng=FixedRandom(0.0), reset_after=120.0)
    assert [backoff.next_delay() for _ in range(3)] == pytest.approx([0.8, 1.6, 3.2])
    clock.step(119.0)
    assert backoff.next_delay() == pytest.approx(6.4)
    clock.step(120.5)
    assert backoff.next_delay() == pytest.approx(0.8)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"initial": 0.0}, "initial"),
        ({"initial": -1.0}, "initial"),
        ({"factor": 0.5}, "factor"),
        ({"jitter": -0.1}, "jitter"),
        ({"max_delay": 0.1}, "max_delay"),
        ({"reset_after": float("nan")}, "reset_after"),
        ({"max_delay": float("inf")}, "max_delay"),
    ],
    ids=["zero-initial", "negative-initial", "shrinking-factor", "negative-jitter", "max-below-initial",
         "nan-reset", "infinite-max"],
)
def test_validation(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        Backoff(**kwargs)
