"""DelayingQueue: ready-time order, earliest wins, immediate adds, shutdown (client-go delaying tests).

Every test steps a FakeClock; ``block_until_waiters(1)`` before a step is race-free because the
waiter thread is parked for the earliest ready time whenever ``add_after`` returns.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

import pytest

from escaler.clock import FakeClock, RealClock
from escaler.workqueue import DelayingQueue, ShutDown
from escaler.workqueue.delaying import MAX_WAIT_SECONDS

JOIN_TIMEOUT = 5.0
BARRIER = "__barrier__"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def make_queue(clock: FakeClock) -> Iterator[Callable[[], DelayingQueue[str]]]:
    made: list[DelayingQueue[str]] = []

    def make() -> DelayingQueue[str]:
        q: DelayingQueue[str] = DelayingQueue("", clock=clock)
        made.append(q)
        return q

    yield make
    for q in made:
        q.shutdown()


def settle(q: DelayingQueue[str]) -> None:
    """Return once the waiter thread has released everything ready at the current time.

    Scheduling a new earliest entry makes the waiter run one full pass before add_after returns.
    """
    q.add_after(BARRIER, 1e-9)


def get_done(q: DelayingQueue[str]) -> str:
    item = q.get()
    q.done(item)
    return item


@pytest.mark.parametrize("delay", [0.0, -1.0], ids=["zero", "negative"])
def test_non_positive_delay_adds_at_once(make_queue: Callable[[], DelayingQueue[str]], delay: float) -> None:
    q = make_queue()
    q.add_after("a", delay)
    assert len(q) == 1
    assert get_done(q) == "a"


@pytest.mark.parametrize(
    "schedule",
    [
        [("a", 1.0), ("b", 2.0), ("c", 3.0)],
        [("a", 3.0), ("b", 1.0), ("c", 2.0)],
        [("a", 5.0), ("b", 0.5), ("c", 5.0), ("d", 2.5)],
    ],
    ids=["in-order", "out-of-order", "ties-keep-scheduling-order"],
)
def test_items_come_out_in_ready_order(
    make_queue: Callable[[], DelayingQueue[str]], clock: FakeClock, schedule: list[tuple[str, float]]
) -> None:
    q = make_queue()
    for item, delay in schedule:
        q.add_after(item, delay)
    assert len(q) == 0
    expected = sorted(schedule, key=lambda e: e[1])  # sort is stable: ties keep scheduling order
    now = 0.0
    for item, ready in expected:
        if ready > now:
            clock.block_until_waiters(1)
            assert len(q) == 0, "an item came out before its ready time"
            clock.step(ready - now)
            now = ready
        assert get_done(q) == item


@pytest.mark.parametrize(
    ("first", "second"),
    [(5.0, 1.0), (1.0, 5.0), (2.0, 2.0)],
    ids=["later-then-earlier", "earlier-then-later", "same"],
)
def test_earliest_ready_time_wins(
    make_queue: Callable[[], DelayingQueue[str]], clock: FakeClock, first: float, second: float
) -> None:
    q = make_queue()
    q.add_after("x", first)
    q.add_after("x", second)
    earliest, latest = min(first, second), max(first, second)
    clock.block_until_waiters(1)
    clock.step(earliest)
    assert get_done(q) == "x"
    clock.step(latest - earliest + 1.0)
    settle(q)
    assert len(q) == 0, "the superseded schedule must not add the item again"


def test_ready_item_collapses_into_queued_one(
    make_queue: Callable[[], DelayingQueue[str]], clock: FakeClock
) -> None:
    q = make_queue()
    q.add("a")
    q.add_after("a", 1.0)
    clock.block_until_waiters(1)
    clock.step(1.0)
    settle(q)
    assert len(q) == 1
    assert get_done(q) == "a"


def test_delay_longer_than_heartbeat(make_queue: Callable[[], DelayingQueue[str]], clock: FakeClock) -> None:
    q = make_queue()
    q.add_after("a", 3 * MAX_WAIT_SECONDS)
    for _ in range(2):
        clock.block_until_waiters(1)
        clock.step(MAX_WAIT_SECONDS)
    clock.block_until_waiters(1)  # re-parked: it made a full pass after the last step
    assert len(q) == 0
    clock.step(MAX_WAIT_SECONDS)
    assert get_done(q) == "a"


def test_shutdown_stops_the_waiter_and_drops_pending(
    make_queue: Callable[[], DelayingQueue[str]], clock: FakeClock
) -> None:
    q = make_queue()
    q.add_after("a", 1.0)
    q.shutdown()
    q._waiter.join(JOIN_TIMEOUT)
    assert not q._waiter.is_alive()
    clock.step(2.0)
    q.add_after("b", 0.0)
    q.add_after("c", 1.0)
    with pytest.raises(ShutDown):
        q.get()


def test_drain_also_stops_the_waiter(make_queue: Callable[[], DelayingQueue[str]]) -> None:
    q = make_queue()
    q.shutdown_with_drain()
    q._waiter.join(JOIN_TIMEOUT)
    assert not q._waiter.is_alive()


def test_nan_delay_is_refused(make_queue: Callable[[], DelayingQueue[str]]) -> None:
    q = make_queue()
    with pytest.raises(ValueError, match="delay_seconds"):
        q.add_after("a", float("nan"))


def test_real_clock_releases_items() -> None:
    q: DelayingQueue[str] = DelayingQueue("", clock=RealClock())
    try:
        # far apart: the two calls themselves can be 10 ms apart on a busy machine (seen failing with
        # 0.02 / 0.01, the "early" item then really due after the "late" one)
        q.add_after("late", 0.3)
        q.add_after("early", 0.01)
        got: list[str] = []

        def consume() -> None:
            for _ in range(2):
                got.append(q.get())

        t = threading.Thread(target=consume)
        t.start()
        t.join(JOIN_TIMEOUT)
        assert got == ["early", "late"]
    finally:
        q.shutdown()
