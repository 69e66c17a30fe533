"""KeyedExecutor: a pool that grows when jobs wait with no thread idle, one job per key, a per-group
(namespace) bound with a bounded FIFO, round-robin between groups, results kept until taken,
completions enqueued, discard, metrics.

Jobs block on ``threading.Event``s the test sets; the test waits for *states* (``wait_until``
with a deadline), never for time to pass.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fakeapi import wait_until
from prometheus_client import CollectorRegistry

from escaler.clock import FakeClock
from escaler.runtime.executor import (
    DEFAULT_OUTBOUND_PER_GROUP,
    DEFAULT_OUTBOUND_WORKERS,
    GROW_AFTER_SECONDS,
    GROW_FACTOR,
    QUICK_JOB_SECONDS,
    InlineExecutor,
    KeyedExecutor,
    Submitted,
    executor_metrics,
)


class Queue:
    """The controller queue's ``add``, recorded."""

    def __init__(self) -> None:
        self.items: list[Any] = []
        self._mu = threading.Lock()

    def add(self, item: Any) -> None:
        with self._mu:
            self.items.append(item)

    def snapshot(self) -> list[Any]:
        with self._mu:
            return list(self.items)


class Gate:
    """Jobs that record that they started and block until released (one Event per job)."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self._mu = threading.Lock()
        self._release: dict[str, threading.Event] = {}

    def job(self, name: str, value: Any = None) -> Callable[[], Any]:
        ev = self._release.setdefault(name, threading.Event())

        def run() -> Any:
            with self._mu:
                self.started.append(name)
            assert ev.wait(10.0), f"job {name} was never released"
            return value if value is not None else name

        return run

    def release(self, name: str) -> None:
        self._release[name].set()

    def release_all(self) -> None:
        for ev in self._release.values():
            ev.set()

    def running(self) -> list[str]:
        with self._mu:
            return list(self.started)


@pytest.fixture
def gate() -> Iterator[Gate]:
    g = Gate()
    yield g
    g.release_all()


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


def _executor(registry: CollectorRegistry, **kw: Any) -> tuple[KeyedExecutor, Queue]:
    ex = KeyedExecutor("test", metrics=executor_metrics(registry), **kw)
    q = Queue()
    ex.start(q)
    return ex, q


def test_defaults() -> None:
    ex = KeyedExecutor("x")
    assert (ex.workers, ex.per_group) == (DEFAULT_OUTBOUND_WORKERS, DEFAULT_OUTBOUND_PER_GROUP) == (16, 4)


@pytest.mark.parametrize(("kw", "field"), [
    ({"workers": 0}, "workers"), ({"per_group": 0}, "per_group"),
    ({"queue_per_group": -1}, "queue_per_group"), ({"workers": True}, "workers"),
    ({"per_group": 1.5}, "per_group"), ({"max_workers": 0}, "max_workers"),
], ids=["workers-0", "per-group-0", "queue-negative", "workers-bool", "per-group-float", "max-workers-0"])
def test_bad_configuration_is_refused_naming_the_field(kw: dict[str, Any], field: str) -> None:
    with pytest.raises(ValueError, match=f"KeyedExecutor.{field}: must be an integer >= 1"):
        KeyedExecutor("x", **kw)


def test_max_workers_below_workers_is_refused_naming_both() -> None:
    with pytest.raises(ValueError, match=r"KeyedExecutor.max_workers: must be >= workers \(4\), got 3"):
        KeyedExecutor("x", workers=4, max_workers=3)
    assert KeyedExecutor("x", workers=4).max_workers == GROW_FACTOR * 4


def test_a_job_that_waited_with_every_thread_busy_grows_the_pool_one_thread_per_interval(
        gate: Gate, registry: CollectorRegistry) -> None:
    # issue 30: 16 threads, each busy ~50 ms per Prometheus answer, ran 320 collections/s where
    # 10,000 scalers polled every 30 s need 333/s, so some polls of every interval found the last
    # one still queued and were skipped. A job that fits its namespace's bound and waits with no
    # thread idle now adds a thread (one per GROW_AFTER_SECONDS, up to max_workers).
    clock = FakeClock()
    ex, _q = _executor(registry, workers=2, per_group=1, clock=clock)
    try:
        for ns in ("a", "b"):
            ex.submit(("m", ns, "s"), ns, "t", gate.job(ns), f"{ns}/s")
        wait_until(lambda: len(gate.running()) == 2, what="both threads busy")
        ex.submit(("m", "c", "s"), "c", "t", gate.job("c"), "c/s")
        clock.step(GROW_AFTER_SECONDS)
        ex.submit(("m", "d", "s"), "d", "t", gate.job("d"), "d/s")
        wait_until(lambda: "c" in gate.running(),
                   what="c's job runs on a new thread after waiting with every thread busy")
        assert ex.threads() == 3 and "d" not in gate.running(), "one new thread per GROW_AFTER_SECONDS"
        assert 'escaler_outbound_threads{executor="test"} 3.0' in _exposition(registry)
        clock.step(GROW_AFTER_SECONDS)
        ex.submit(("m", "e", "s"), "e", "t", gate.job("e"), "e/s")
        wait_until(lambda: "d" in gate.running(), what="d's job runs on a fourth thread a second later")
        assert ex.threads() == 4
    finally:
        gate.release_all()
        ex.stop()
    assert ex.threads() == 0


def test_the_pool_grows_no_further_than_max_workers(gate: Gate, registry: CollectorRegistry) -> None:
    clock = FakeClock()
    ex, _q = _executor(registry, workers=1, per_group=1, max_workers=2, clock=clock)
    try:
        for ns in "abcd":
            ex.submit(("m", ns, "s"), ns, "t", gate.job(ns), f"{ns}/s")
            clock.step(GROW_AFTER_SECONDS)
        wait_until(lambda: len(gate.running()) == 2, what="two threads busy")
        for ns in "efg":
            ex.submit(("m", ns, "s"), ns, "t", gate.job(ns), f"{ns}/s")
            clock.step(GROW_AFTER_SECONDS)
        assert ex.threads() == 2 and sorted(gate.running()) == ["a", "b"]
        gate.release("a")
        wait_until(lambda: "c" in gate.running(), what="c runs once a thread is free")
    finally:
        gate.release_all()
        ex.stop()


def test_a_job_waiting_only_for_its_namespace_bound_or_not_long_enough_grows_nothing(
        gate: Gate, registry: CollectorRegistry) -> None:
    clock = FakeClock()
    ex, _q = _executor(registry, workers=2, per_group=1, clock=clock)
    try:
        for ns in ("a", "b"):
            ex.submit(("m", ns, "s0"), ns, "t", gate.job(f"{ns}0"), f"{ns}/s0")
        wait_until(lambda: len(gate.running()) == 2, what="both threads busy")
        ex.submit(("m", "a", "s1"), "a", "t", gate.job("a1"), "a/s1")  # a is at its bound
        clock.step(5 * GROW_AFTER_SECONDS)
        ex.submit(("m", "b", "s1"), "b", "t", gate.job("b1"), "b/s1")
        assert ex.threads() == 2, "jobs held by their namespace's bound need no thread"
        ex.submit(("m", "c", "s"), "c", "t", gate.job("c"), "c/s")  # fits its bound, just queued
        ex.submit(("m", "d", "s"), "d", "t", gate.job("d"), "d/s")
        assert ex.threads() == 2, "a job that has not waited GROW_AFTER_SECONDS adds no thread"
    finally:
        gate.release_all()
        ex.stop()


def test_per_namespace_bound_the_fifth_waits_and_another_namespace_still_runs(
        gate: Gate, registry: CollectorRegistry) -> None:
    ex, _q = _executor(registry, workers=8, per_group=4)
    try:
        for i in range(5):
            assert ex.submit(("m", "ns1", f"s{i}"), "ns1", "t", gate.job(f"ns1-{i}"), f"ns1/s{i}") == \
                Submitted.QUEUED
        wait_until(lambda: len(gate.running()) == 4, what="4 ns1 jobs running")
        assert ex.submit(("m", "ns2", "s"), "ns2", "t", gate.job("ns2"), "ns2/s") == Submitted.QUEUED
        wait_until(lambda: "ns2" in gate.running(), what="ns2's job runs although ns1 has 5 slow jobs")
        assert sorted(gate.running()) == ["ns1-0", "ns1-1", "ns1-2", "ns1-3", "ns2"], \
            "the 5th ns1 job waits for one of its namespace's jobs to finish"
        assert (ex.in_flight(), ex.queued()) == (5, 1)
        text = _exposition(registry)
        assert 'escaler_outbound_jobs_in_flight{executor="test"} 5.0' in text
        assert 'escaler_outbound_jobs_queued{executor="test"} 1.0' in text
        gate.release("ns1-0")
        wait_until(lambda: "ns1-4" in gate.running(), what="the 5th ns1 job runs once one finished")
        fin = ex.take(("m", "ns1", "s0"))
        assert fin is not None and fin.value == "ns1-0" and fin.tag == "t" and fin.error is None
    finally:
        gate.release_all()
        ex.stop()


def test_one_job_per_key_and_completion_wakes(gate: Gate, registry: CollectorRegistry) -> None:
    ex, q = _executor(registry, workers=2)
    try:
        key = ("m", "ns", "a")
        assert ex.submit(key, "ns", 1, gate.job("a"), "wake-a") == Submitted.QUEUED
        assert ex.submit(key, "ns", 2, gate.job("a2"), "wake-a") == Submitted.PENDING
        assert ex.pending(key)
        wait_until(lambda: gate.running() == ["a"], what="a runs")
        assert ex.take(key) is None, "nothing to take while running"
        gate.release("a")
        wait_until(lambda: q.snapshot() == ["wake-a"], what="the completion enqueued the wake item")
        assert not ex.pending(key)
        fin = ex.take(key)
        assert fin is not None and (fin.tag, fin.value) == (1, "a")
        assert ex.take(key) is None, "a result is taken once"
        assert gate.running() == ["a"], "the PENDING submit queued nothing"
        assert 'escaler_outbound_jobs_total{executor="test",result="ok"} 1.0' in _exposition(registry)
    finally:
        ex.stop()


def test_a_failing_job_is_a_result_not_a_dead_worker(registry: CollectorRegistry) -> None:
    ex, q = _executor(registry, workers=1)
    try:
        def boom() -> None:
            raise OSError("connection reset")

        ex.submit("k1", "ns", "t", boom, "w1")
        ex.submit("k2", "ns", "t", lambda: 42, "w2")
        wait_until(lambda: len(q.snapshot()) == 2, what="both jobs finished on the one worker")
        f1, f2 = ex.take("k1"), ex.take("k2")
        assert f1 is not None and isinstance(f1.error, OSError) and f1.value is None
        assert f2 is not None and f2.value == 42
        assert 'escaler_outbound_jobs_total{executor="test",result="error"} 1.0' in _exposition(registry)
    finally:
        ex.stop()


def test_a_full_namespace_queue_refuses(gate: Gate, registry: CollectorRegistry) -> None:
    ex, _q = _executor(registry, workers=1, per_group=1, queue_per_group=2)
    try:
        ex.submit("a", "ns", "t", gate.job("a"), "a")
        wait_until(lambda: gate.running() == ["a"], what="a runs")
        assert ex.submit("b", "ns", "t", gate.job("b"), "b") == Submitted.QUEUED
        assert ex.submit("c", "ns", "t", gate.job("c"), "c") == Submitted.QUEUED
        assert ex.submit("d", "ns", "t", gate.job("d"), "d") == Submitted.FULL
        assert not ex.pending("d")
        assert ex.submit("e", "other", "t", gate.job("e"), "e") == Submitted.QUEUED, "a bound per namespace"
        assert 'escaler_outbound_jobs_total{executor="test",result="full"} 1.0' in _exposition(registry)
    finally:
        gate.release_all()
        ex.stop()


def test_namespaces_take_turns(gate: Gate, registry: CollectorRegistry) -> None:
    """One thread, a namespace with a long queue, another with one job: the other's job runs second,
    not after the whole queue."""
    ex, _q = _executor(registry, workers=1, per_group=4)
    try:
        ex.submit("busy-0", "busy", "t", gate.job("busy-0"), "w")
        wait_until(lambda: gate.running() == ["busy-0"], what="busy-0 runs")
        for i in range(1, 4):
            ex.submit(f"busy-{i}", "busy", "t", gate.job(f"busy-{i}"), "w")
        ex.submit("quiet", "quiet", "t", gate.job("quiet"), "w")
        gate.release("busy-0")
        wait_until(lambda: len(gate.running()) == 2, what="the next job runs")
        gate.release("busy-1")
        wait_until(lambda: len(gate.running()) == 3, what="the next job runs")
        assert gate.running()[:3] == ["busy-0", "busy-1", "quiet"]
    finally:
        gate.release_all()
        ex.stop()


def test_discard_drops_queued_running_and_finished(gate: Gate, registry: CollectorRegistry) -> None:
    ex, q = _executor(registry, workers=1, per_group=1)
    try:
        ex.submit("running", "ns", "t", gate.job("running"), "w-running")
        wait_until(lambda: gate.running() == ["running"], what="running runs")
        ex.submit("queued", "ns", "t", gate.job("queued"), "w-queued")
        ex.discard("queued")
        assert not ex.pending("queued")
        ex.discard("running")
        gate.release("running")
        ex.submit("after", "ns", "t", lambda: "done", "w-after")
        wait_until(lambda: q.snapshot() == ["w-after"], what="the job after runs")
        assert ex.take("running") is None, "a discarded running job's result is dropped, nobody woken"
        assert gate.running() == ["running"], "the discarded queued job never ran"
        ex.discard("after")
        assert ex.take("after") is None
        assert (ex.in_flight(), ex.queued()) == (0, 0)
    finally:
        ex.stop()


def test_a_new_submit_replaces_an_untaken_result(registry: CollectorRegistry) -> None:
    ex, q = _executor(registry, workers=1)
    try:
        ex.submit("k", "ns", "old", lambda: 1, "w")
        wait_until(lambda: len(q.snapshot()) == 1, what="first job done")
        ex.submit("k", "ns", "new", lambda: 2, "w")
        wait_until(lambda: len(q.snapshot()) == 2, what="second job done")
        fin = ex.take("k")
        assert fin is not None and (fin.tag, fin.value) == ("new", 2)
    finally:
        ex.stop()


def test_jobs_wait_for_start_and_stop_drops_the_rest(gate: Gate, registry: CollectorRegistry) -> None:
    ex = KeyedExecutor("test", workers=1, metrics=executor_metrics(registry))
    ex.submit("a", "ns", "t", gate.job("a"), "a")
    ex.submit("b", "ns", "t", gate.job("b"), "b")
    assert gate.running() == [] and ex.queued() == 2, "nothing runs before start()"
    q = Queue()
    ex.start(q)
    wait_until(lambda: gate.running() == ["a"], what="a runs after start")
    ex.stop()
    gate.release("a")
    wait_until(lambda: ex.in_flight() == 0, what="a finished")
    assert q.snapshot() == [] and ex.take("a") is None, "after stop nothing is kept or announced"
    assert gate.running() == ["a"] and ex.queued() == 0


def test_inline_executor_runs_at_submit() -> None:
    ex = InlineExecutor()
    assert ex.submit("k", "ns", "t", lambda: 7, "w") == Submitted.QUEUED
    assert not ex.pending("k")
    fin = ex.take("k")
    assert fin is not None and fin.value == 7
    ex.submit("k", "ns", "t", lambda: 1 / 0, "w")
    fin = ex.take("k")
    assert fin is not None and isinstance(fin.error, ZeroDivisionError)


def test_metrics_are_shared_per_registry(registry: CollectorRegistry) -> None:
    assert executor_metrics(registry) is executor_metrics(registry)


def _exposition(registry: CollectorRegistry) -> str:
    from prometheus_client import generate_latest

    return generate_latest(registry).decode()


def test_the_default_queue_holds_one_job_per_key_however_many() -> None:
    """No fixed bound by default: a namespace of 5,000 scalers queues 5,000 collections (the
    informer cache bounds the keys)."""
    ex = KeyedExecutor("x")
    assert ex.queue_per_group is None
    assert {ex.submit(i, "ns", "t", lambda: None, i) for i in range(5000)} == {Submitted.QUEUED}
    assert ex.queued() == 5000
    assert ex.submit(0, "ns", "t", lambda: None, 0) == Submitted.PENDING


class Turnstile:
    """Jobs that each wait for one pass the test hands out (a semaphore), and count completions."""

    def __init__(self) -> None:
        self.passes = threading.Semaphore(0)
        self.done: dict[int, int] = {}
        self._mu = threading.Lock()

    def job(self, key: int) -> Callable[[], None]:
        def run() -> None:
            assert self.passes.acquire(timeout=10.0), f"job {key} got no pass"
            with self._mu:
                self.done[key] = self.done.get(key, 0) + 1

        return run

    def completed(self) -> int:
        with self._mu:
            return sum(self.done.values())


def test_an_overloaded_namespace_collects_every_scaler_in_turn(registry: CollectorRegistry) -> None:
    """Regression (issue 15, the 3,000-scaler churn: 103 live scalers never queried). More scalers
    are due each round than the threads finish, and the poller offers them in the same (phase)
    order every round: each scaler must still be collected, in turn, not the same ones refused for
    ever. With a fixed 1,024-job namespace queue the scalers after the 1,024th met a full queue in
    every round and were never collected."""
    scalers, rounds, per_round = 1100, 14, 100
    ex, _q = _executor(registry, workers=1, per_group=1)
    turn = Turnstile()
    try:
        for r in range(rounds):
            for key in range(scalers):  # one poll round: every scaler offered, in phase order
                ex.take(key)
                ex.submit(key, "ns", "t", turn.job(key), key)
            target = (r + 1) * per_round
            for _ in range(per_round):
                turn.passes.release()
            wait_until(lambda t=target: turn.completed() == t, what=f"{target} collections")  # type: ignore[misc]
        never = [k for k in range(scalers) if k not in turn.done]
        assert not never, f"{len(never)} scalers never collected, e.g. {never[:5]}"
        assert 'result="full"' not in _exposition(registry)
    finally:
        for _ in range(scalers):
            turn.passes.release()
        ex.stop()


def _quick_history(ex: KeyedExecutor, q: Queue, group: str, n: int) -> None:
    """``n`` jobs of ``group`` that finish at once (0 s on a fake clock): the group is quick."""
    before = len(q.snapshot())
    for i in range(n):
        ex.submit(f"{group}-warm-{i}", group, "t", lambda: None, "warm")
    wait_until(lambda: len(q.snapshot()) == before + n, what=f"{n} quick {group} jobs done")


def _busy_quick_namespace(registry: CollectorRegistry, gate: Gate, clock: FakeClock) -> KeyedExecutor:
    """8 threads, a bound of 2: namespace "big", quick so far, with 10 gated jobs, 6 of them running
    (2 within its bound, 4 on spare threads; 2 threads left idle)."""
    ex, q = _executor(registry, workers=8, per_group=2, clock=clock)
    _quick_history(ex, q, "big", 2)
    for i in range(10):
        ex.submit(f"big-{i}", "big", "t", gate.job(f"big-{i}"), "w")
    wait_until(lambda: len(gate.running()) == 6, what="2 within the bound + 4 spare threads")
    return ex


def test_a_quick_namespace_borrows_spare_threads_and_leaves_the_reserve(
        gate: Gate, registry: CollectorRegistry) -> None:
    clock = FakeClock()
    ex = _busy_quick_namespace(registry, gate, clock)
    try:
        assert ex.in_flight() == 6, "2 of 8 threads stay idle for other namespaces (reserve = per_group)"
        assert ex.submit("small", "small", "t", gate.job("small"), "w") == Submitted.QUEUED
        wait_until(lambda: "small" in gate.running(), what="another namespace's job starts at once")
        assert 'escaler_outbound_jobs_borrowed_total{executor="test"} 4.0' in _exposition(registry)
    finally:
        gate.release_all()
        ex.stop()


def test_a_namespace_with_a_slow_job_borrows_no_more(gate: Gate, registry: CollectorRegistry) -> None:
    """Quick so far, then its endpoint stalls: once a running job passes QUICK_JOB_SECONDS, a
    finished job's thread is not lent again; the namespace falls back to its bound."""
    clock = FakeClock()
    ex = _busy_quick_namespace(registry, gate, clock)
    try:
        clock.step(QUICK_JOB_SECONDS + 1.0)  # the running jobs are now slow
        for name in list(gate.running()):
            gate.release(name)
        wait_until(lambda: len(gate.running()) == 8 and ex.in_flight() == 2,
                   what="only the bound's 2 jobs replace the 6 that finished slowly")
        assert sorted(gate.running())[-2:] == ["big-6", "big-7"]
    finally:
        gate.release_all()
        ex.stop()


def test_a_namespace_never_seen_does_not_borrow(gate: Gate, registry: CollectorRegistry) -> None:
    ex, _q = _executor(registry, workers=8, per_group=2, clock=FakeClock())
    try:
        for i in range(5):
            ex.submit(f"new-{i}", "new", "t", gate.job(f"new-{i}"), "w")
        wait_until(lambda: len(gate.running()) == 2, what="its bound's 2 jobs run")
        ex.submit("other", "other", "t", lambda: None, "w")  # a completion wakes the workers
        wait_until(lambda: ex.in_flight() == 2 and ex.queued() == 3, what="settled")
        assert len(gate.running()) == 2, "no speed record yet: no spare thread is lent"
    finally:
        gate.release_all()
        ex.stop()
