"""The MetricsTrigger poller at fleet scale (issue 10): a pass costs O(due scalers), not O(fleet).

At 10,000 scalers the BASE poller re-read and re-hashed the whole scaler list on every 1 s pass
(``setup._poller.polled`` + ``poll_once``: 20-23 % of the manager's CPU at 1,000 scalers in the
capacity profile, docs/performance.md). Now the list is read at most every ``relist`` seconds and
due times live in a heap; every scaler is still enqueued exactly once per interval at its phase.
"""

from __future__ import annotations

import itertools

import pytest

from escaler.clock import FakeClock
from escaler.reconcilers.kit import poller as poller_module
from escaler.reconcilers.kit.poller import MetricsPoller, phase
from escaler.runtime.types import Request

NS = "team"


class Listing:
    """A scaler list that counts how often it is read."""

    def __init__(self, reqs: list[Request]) -> None:
        self.reqs = reqs
        self.reads = 0

    def __call__(self) -> list[Request]:
        self.reads += 1
        return list(self.reqs)


def test_a_large_fleet_is_listed_once_per_relist_period_and_polled_once_per_interval() -> None:
    clock = FakeClock()
    fleet = Listing([Request(NS, f"s{i:05d}") for i in range(10_000)])
    added: dict[Request, list[float]] = {}
    poller = MetricsPoller(30.0, fleet, lambda r, d: added.setdefault(r, []).append(clock.monotonic() + d),
                           clock, tick=1.0)
    for _ in range(60):  # two intervals, one pass per second
        poller.poll_once()
        clock.step(1.0)
    # BASE read the whole list on each of the 60 passes
    assert fleet.reads == 6, fleet.reads
    assert len(added) == 10_000
    for r in fleet.reqs[:200]:
        times = added[r]
        assert len(times) == 2, f"{r}: {times}"
        assert times[1] - times[0] == pytest.approx(30.0)
        assert times[0] % 30.0 == pytest.approx(phase(r, 30.0))
    assert all(len(t) == 2 for t in added.values())


def test_new_and_gone_scalers_are_seen_at_the_next_relist() -> None:
    clock = FakeClock()
    fleet = Listing([Request(NS, "a")])
    poller = MetricsPoller(30.0, fleet, lambda r, d: None, clock, tick=1.0, relist=5.0)
    poller.poll_once()
    fleet.reqs = [Request(NS, "b")]
    clock.step(4.0)
    poller.poll_once()
    assert set(poller.due_times()) == {Request(NS, "a")}, "not re-read before the relist period"
    clock.step(1.0)
    poller.poll_once()
    assert set(poller.due_times()) == {Request(NS, "b")}


def test_a_scaler_that_leaves_and_comes_back_is_enqueued_once_per_interval() -> None:
    clock = FakeClock()
    a = Request(NS, "a")
    fleet = Listing([a])
    added: list[float] = []
    poller = MetricsPoller(10.0, fleet, lambda r, d: added.append(clock.monotonic() + d), clock, tick=1.0,
                           relist=0.0)
    for step in range(40):
        fleet.reqs = [] if step == 12 else [a]  # gone for one pass, then back (a stale heap entry)
        poller.poll_once()
        clock.step(1.0)
    assert len(added) == len(set(added)), added
    assert all(b - x == pytest.approx(10.0) for x, b in itertools.pairwise(added)), added


def test_relist_is_validated_and_capped_by_the_interval() -> None:
    clock = FakeClock()
    with pytest.raises(ValueError, match="relist"):
        MetricsPoller(30.0, list, lambda r, d: None, clock, relist=-1.0)
    assert MetricsPoller(5.0, list, lambda r, d: None, clock).relist == 5.0
    assert MetricsPoller(30.0, list, lambda r, d: None, clock).relist == poller_module.DEFAULT_RELIST_SECONDS
