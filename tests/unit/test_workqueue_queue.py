"""Queue: fair, stingy, re-add while processing, shutdown and drain (client-go queue_test.go)."""

from __future__ import annotations

import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator

import pytest

from escaler.workqueue import Queue, ShutDown

JOIN_TIMEOUT = 5.0


@pytest.fixture
def make_queue() -> Iterator[Callable[[], Queue[str]]]:
    made: list[Queue[str]] = []

    def make() -> Queue[str]:
        q: Queue[str] = Queue("")
        made.append(q)
        return q

    yield make
    for q in made:
        q.shutdown()


@pytest.fixture
def fast_switching() -> Iterator[None]:
    """Make the interpreter switch threads very often, so races show up in a short test."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(old)


def wait_until(pred: Callable[[], bool], timeout: float = JOIN_TIMEOUT) -> None:
    """Poll ``pred`` with a deadline (for states no API exposes, such as 'parked in get')."""
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, "condition not reached before the deadline"
        threading.Event().wait(0.001)


def parked_getters(q: Queue[str]) -> int:
    return len(q._cond._waiters)  # type: ignore[attr-defined]


def drain_order(q: Queue[str]) -> list[str]:
    out = []
    while len(q):
        item = q.get()
        out.append(item)
        q.done(item)
    return out


@pytest.mark.parametrize(
    ("adds", "expected"),
    [
        (["a", "b", "c"], ["a", "b", "c"]),
        (["c", "a", "b"], ["c", "a", "b"]),
        (["a", "b", "a", "c", "b", "a"], ["a", "b", "c"]),
        (["a", "a", "a"], ["a"]),
    ],
    ids=["fifo", "fifo-unsorted", "readds-collapse-keep-place", "same-item-thrice"],
)
def test_fifo_and_collapse(
    make_queue: Callable[[], Queue[str]], adds: list[str], expected: list[str]
) -> None:
    q = make_queue()
    for item in adds:
        q.add(item)
    assert len(q) == len(expected)
    assert drain_order(q) == expected


@pytest.mark.parametrize("readds", [1, 3], ids=["once", "thrice"])
def test_readd_while_processing_is_processed_exactly_once_more(
    make_queue: Callable[[], Queue[str]], readds: int
) -> None:
    q = make_queue()
    q.add("a")
    assert q.get() == "a"
    for _ in range(readds):
        q.add("a")
    assert len(q) == 0, "a dirty item must not be queued while it is being processed"
    q.done("a")
    assert len(q) == 1
    assert q.get() == "a"
    q.done("a")
    assert len(q) == 0


def test_readd_while_processing_goes_to_the_back(make_queue: Callable[[], Queue[str]]) -> None:
    q = make_queue()
    q.add("a")
    q.add("b")
    assert q.get() == "a"
    q.add("a")
    q.add("c")
    q.done("a")
    assert drain_order(q) == ["b", "c", "a"]


def test_done_of_item_not_processing_is_noop(make_queue: Callable[[], Queue[str]]) -> None:
    q = make_queue()
    q.add("a")
    q.done("a")  # queued, not processing
    q.done("zzz")
    assert drain_order(q) == ["a"]


@pytest.mark.parametrize("how", ["shutdown", "shutdown_with_drain"], ids=["shutdown", "drain"])
def test_adds_after_shutdown_are_ignored(make_queue: Callable[[], Queue[str]], how: str) -> None:
    q = make_queue()
    getattr(q, how)()
    assert q.shutting_down()
    q.add("a")
    assert len(q) == 0
    with pytest.raises(ShutDown):
        q.get()


def test_get_after_shutdown_hands_out_backlog_then_raises(make_queue: Callable[[], Queue[str]]) -> None:
    q = make_queue()
    q.add("a")
    q.add("b")
    q.shutdown()
    q.shutdown()  # idempotent
    assert q.get() == "a"
    q.done("a")
    assert q.get() == "b"
    q.done("b")
    with pytest.raises(ShutDown):
        q.get()


def test_shutdown_wakes_blocked_getters(make_queue: Callable[[], Queue[str]]) -> None:
    q = make_queue()
    outcomes: list[str] = []

    def getter() -> None:
        try:
            outcomes.append(q.get())
        except ShutDown:
            outcomes.append("shutdown")

    threads = [threading.Thread(target=getter) for _ in range(3)]
    for t in threads:
        t.start()
    wait_until(lambda: parked_getters(q) == 3)
    q.shutdown()
    for t in threads:
        t.join(JOIN_TIMEOUT)
        assert not t.is_alive()
    assert outcomes == ["shutdown"] * 3


def test_shutdown_with_drain_waits_for_in_flight_items(make_queue: Callable[[], Queue[str]]) -> None:
    q = make_queue()
    for item in ("a", "b", "c"):
        q.add(item)
    assert q.get() == "a"
    assert q.get() == "b"
    drainer = threading.Thread(target=q.shutdown_with_drain)
    drainer.start()
    wait_until(lambda: parked_getters(q) == 1)  # the drainer, waiting for in-flight items
    q.add("d")
    assert len(q) == 1, "adds are ignored while draining"

    q.done("b")
    # parked again (or never woken) rather than returned: 'a' is still being processed
    wait_until(lambda: parked_getters(q) == 1)
    assert drainer.is_alive(), "drain returned while 'a' was still being processed"
    q.done("a")
    drainer.join(JOIN_TIMEOUT)
    assert not drainer.is_alive()
    # as in client-go, drain waits for in-flight items only; the backlog is still handed out
    assert q.get() == "c"
    q.done("c")
    with pytest.raises(ShutDown):
        q.get()


def test_shutdown_releases_a_waiting_drain(make_queue: Callable[[], Queue[str]]) -> None:
    q = make_queue()
    q.add("a")
    q.get()
    drainer = threading.Thread(target=q.shutdown_with_drain)
    drainer.start()
    wait_until(lambda: parked_getters(q) == 1)
    q.shutdown()
    drainer.join(JOIN_TIMEOUT)
    assert not drainer.is_alive()


def test_drain_with_nothing_in_flight_returns_at_once(make_queue: Callable[[], Queue[str]]) -> None:
    q = make_queue()
    q.add("a")
    q.shutdown_with_drain()  # nothing processing: returns although "a" is still queued
    assert q.get() == "a"


@pytest.mark.usefixtures("fast_switching")
def test_item_is_never_processed_by_two_workers_at_once(make_queue: Callable[[], Queue[str]]) -> None:
    q = make_queue()
    keys = [f"k{i}" for i in range(16)]
    lock = threading.Lock()
    in_flight: set[str] = set()
    violations: list[str] = []
    processed: Counter[str] = Counter()
    readds: Counter[str] = Counter()

    def worker() -> None:
        while True:
            try:
                item = q.get()
            except ShutDown:
                return
            with lock:
                if item in in_flight:
                    violations.append(item)
                in_flight.add(item)
                readd = readds[item] < 20
                readds[item] += 1
            if readd:
                q.add(item)  # re-add while processing: must wait for done()
            for _ in range(200):  # hold the item across thread switches
                pass
            with lock:
                in_flight.discard(item)
                processed[item] += 1
            q.done(item)

    def producer() -> None:
        for _ in range(30):
            for key in keys:
                q.add(key)

    workers = [threading.Thread(target=worker) for _ in range(8)]
    producers = [threading.Thread(target=producer) for _ in range(2)]
    for t in workers + producers:
        t.start()
    for t in producers:
        t.join(JOIN_TIMEOUT)

    def chains_done() -> bool:
        # a key re-adds itself while processing until its 20th run, so it runs at least 21 times
        with lock:
            return all(processed[k] >= 21 for k in keys)

    # drain ignores re-adds, so let every re-add chain finish first (it once raced the drain)
    wait_until(chains_done)
    q.shutdown_with_drain()
    for t in workers:
        t.join(JOIN_TIMEOUT)
        assert not t.is_alive()
    assert violations == []
    assert set(processed) == set(keys)


def test_name_must_be_a_string() -> None:
    with pytest.raises(TypeError, match=r"Queue\.name"):
        Queue(3)  # type: ignore[arg-type]
