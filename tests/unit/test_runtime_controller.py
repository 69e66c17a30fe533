"""Controller: result handling, panic recovery, per-key exclusivity, shutdown, write fence, log context."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
from fakeapi import wait_until
from runtime_fakes import SpyQueue

from escaler.clock import FakeClock
from escaler.errors import ConnectionFailure, StatusError
from escaler.runtime.controller import Controller, ReconcileContextFilter, current_reconcile
from escaler.runtime.metrics import MetricsRegistry
from escaler.runtime.types import ReconcileError, Request, Result, TerminalError

REQ = Request("team", "s1")


class FuncReconciler:
    def __init__(self, fn: Callable[[Request], Result]) -> None:
        self.fn = fn
        self.calls: list[Request] = []
        self._mu = threading.Lock()

    def reconcile(self, request: Request) -> Result:
        with self._mu:
            self.calls.append(request)
        return self.fn(request)

    def count(self, request: Request | None = None) -> int:
        with self._mu:
            return sum(1 for r in self.calls if request is None or r == request)


def sample(reg: MetricsRegistry, name: str, **labels: str) -> float:
    value = reg.registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


@contextmanager
def running(ctrl: Controller) -> Iterator[threading.Event]:
    stop = threading.Event()
    t = threading.Thread(target=ctrl.start, args=(stop,), daemon=True)
    t.start()
    try:
        yield stop
    finally:
        stop.set()
        t.join(10)
        assert not t.is_alive(), "controller did not stop"


def make(fn: Callable[[Request], Result], *, workers: int = 1, clock: FakeClock | None = None,
         can_write: threading.Event | None = None, shutdown_timeout: float = 10.0,
         ) -> tuple[Controller, FuncReconciler, SpyQueue, MetricsRegistry]:
    clock = clock or FakeClock()
    reg = MetricsRegistry()
    q = SpyQueue(clock, "ctl")
    rec = FuncReconciler(fn)
    ctrl = Controller("ctl", rec, queue=q, max_concurrent_reconciles=workers, clock=clock,
                      metrics=reg.controller("ctl"), can_write=can_write, shutdown_timeout=shutdown_timeout)
    return ctrl, rec, q, reg


def raise_(exc: BaseException) -> Callable[[Request], Result]:
    def fn(_: Request) -> Result:
        raise exc
    return fn


RESULT_CASES = [
    # (id, reconcile behaviour, expected queue calls, result label, errors, terminal, panics)
    ("success", lambda r: Result(), [("forget", REQ)], "success", 0, 0, 0),
    ("requeue-after", lambda r: Result(requeue_after=7.5), [("forget", REQ), ("add_after", REQ, 7.5)],
     "requeue_after", 0, 0, 0),
    ("requeue-after-wins-over-requeue", lambda r: Result(requeue=True, requeue_after=3.0),
     [("forget", REQ), ("add_after", REQ, 3.0)], "requeue_after", 0, 0, 0),
    ("requeue", lambda r: Result(requeue=True), [("add_rate_limited", REQ)], "requeue", 0, 0, 0),
    ("reconcile-error", raise_(ReconcileError("try later")), [("add_rate_limited", REQ)], "error", 1, 0, 0),
    ("api-conflict", raise_(StatusError(409, "Conflict", "modified")), [("add_rate_limited", REQ)],
     "error", 1, 0, 0),
    ("connection-failure", raise_(ConnectionFailure("reset")), [("add_rate_limited", REQ)], "error", 1, 0, 0),
    ("terminal-error", raise_(TerminalError("bad spec")), [("forget", REQ)], "error", 1, 1, 0),
    ("panic-keyerror", raise_(KeyError("spec")), [("add_rate_limited", REQ)], "error", 1, 0, 1),
    ("panic-wrong-return-type", lambda r: "not a Result", [("add_rate_limited", REQ)], "error", 1, 0, 1),
]


@pytest.mark.parametrize(("fn", "calls", "label", "errors", "terminal", "panics"),
                         [c[1:] for c in RESULT_CASES], ids=[c[0] for c in RESULT_CASES])
def test_result_handling(fn: Callable[[Request], Result], calls: list[tuple[object, ...]], label: str,
                         errors: int, terminal: int, panics: int) -> None:
    ctrl, rec, q, reg = make(fn)
    with running(ctrl):
        ctrl.enqueue(REQ)
        wait_until(lambda: sample(reg, "controller_runtime_reconcile_total", controller="ctl",
                                  result=label) == 1, what=f"result {label}")
        wait_until(lambda: len(q.snapshot()) == len(calls), what="queue calls")
    assert q.snapshot() == calls
    for other in ("success", "error", "requeue", "requeue_after"):
        assert sample(reg, "controller_runtime_reconcile_total", controller="ctl", result=other) == (
            1 if other == label else 0), other
    assert sample(reg, "controller_runtime_reconcile_errors_total", controller="ctl") == errors
    assert sample(reg, "controller_runtime_terminal_reconcile_errors_total", controller="ctl") == terminal
    assert sample(reg, "controller_runtime_reconcile_panics_total", controller="ctl") == panics
    assert sample(reg, "controller_runtime_reconcile_time_seconds_count", controller="ctl") == 1
    assert rec.count() == 1


def test_terminal_error_is_not_retried_even_after_time_passes() -> None:
    clock = FakeClock()
    ctrl, rec, q, _reg = make(raise_(TerminalError("invalid")), clock=clock)
    with running(ctrl):
        ctrl.enqueue(REQ)
        wait_until(lambda: q.snapshot() == [("forget", REQ)])
        assert clock.deadlines() == [], "nothing may be scheduled for a retry"
        clock.step(3600)
        assert len(q) == 0
    assert rec.count() == 1
    assert q.num_requeues(REQ) == 0


def test_panic_is_recovered_worker_survives_and_item_is_retried(caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    def missing_key() -> Result:
        spec: dict[str, Result] = {}
        return spec["missing"]

    outcomes: list[Callable[[], Result]] = [missing_key, lambda: Result()]

    def fn(_: Request) -> Result:
        return outcomes.pop(0)()

    ctrl, rec, q, reg = make(fn, clock=clock)
    with running(ctrl):
        ctrl.enqueue(REQ)
        wait_until(lambda: ("add_rate_limited", REQ) in q.snapshot(), what="rate-limited requeue")
        assert sample(reg, "controller_runtime_reconcile_panics_total", controller="ctl") == 1
        worker_names = {t.name for t in threading.enumerate() if t.name.startswith("ctl-worker")}
        clock.step(1.0)  # past the 5 ms first backoff
        wait_until(lambda: sample(reg, "controller_runtime_reconcile_total", controller="ctl",
                                  result="success") == 1, what="retry succeeded")
        assert {t.name for t in threading.enumerate() if t.name.startswith("ctl-worker")} == worker_names
    assert rec.count(REQ) == 2
    assert sample(reg, "controller_runtime_reconcile_errors_total", controller="ctl") == 1
    assert "observed a panic" in caplog.text and "KeyError" in caplog.text  # traceback logged


def test_rate_limited_backoff_grows_and_success_forgets() -> None:
    clock = FakeClock()
    results = [ReconcileError("1"), ReconcileError("2"), None]

    def fn(_: Request) -> Result:
        err = results.pop(0)
        if err is not None:
            raise err
        return Result()

    ctrl, rec, q, _reg = make(fn, clock=clock)
    with running(ctrl):
        ctrl.enqueue(REQ)
        wait_until(lambda: q.num_requeues(REQ) == 1)
        clock.block_until_waiters(1)
        clock.step(0.005)  # first backoff: 5 ms
        wait_until(lambda: q.num_requeues(REQ) == 2)
        clock.block_until_waiters(1)
        clock.step(0.009)  # second backoff is 10 ms: not yet
        assert rec.count() == 2
        clock.step(0.001)
        wait_until(lambda: ("forget", REQ) in q.snapshot())
    assert q.num_requeues(REQ) == 0
    assert rec.count() == 3


def test_same_key_never_reconciled_concurrently_but_other_keys_are() -> None:
    gate = threading.Event()
    a, b = Request("ns", "a"), Request("ns", "b")
    in_flight: set[Request] = set()
    overlap: list[Request] = []
    mu = threading.Lock()
    a_entered = threading.Event()

    def fn(req: Request) -> Result:
        with mu:
            if req in in_flight:
                overlap.append(req)
            in_flight.add(req)
        try:
            if req == a and not gate.is_set():
                a_entered.set()
                assert gate.wait(10)
        finally:
            with mu:
                in_flight.discard(req)
        return Result()

    ctrl, rec, _q, _reg = make(fn, workers=4)
    with running(ctrl):
        ctrl.enqueue(a)
        assert a_entered.wait(5)
        for _ in range(5):
            ctrl.enqueue(a)  # re-added while processing: must wait for the first to finish
        ctrl.enqueue(b)
        wait_until(lambda: rec.count(b) == 1, what="b reconciled by another worker while a is busy")
        assert rec.count(a) == 1
        gate.set()
        wait_until(lambda: rec.count(a) == 2, what="a processed again after done")
    assert overlap == []
    assert rec.count(a) == 2  # the five re-adds collapsed into one


def test_many_workers_many_keys_no_overlap() -> None:
    in_flight: set[Request] = set()
    overlap: list[Request] = []
    mu = threading.Lock()

    def fn(req: Request) -> Result:
        with mu:
            if req in in_flight:
                overlap.append(req)
            in_flight.add(req)
        with mu:
            in_flight.discard(req)
        return Result()

    ctrl, rec, q, reg = make(fn, workers=4)
    keys = [Request("ns", f"k{i}") for i in range(6)]
    with running(ctrl):
        for i in range(300):
            ctrl.enqueue(keys[i % len(keys)])
        wait_until(lambda: len(q) == 0 and rec.count() >= len(keys)
                   and sample(reg, "controller_runtime_active_workers", controller="ctl") == 0,
                   what="queue drained")
    assert overlap == []
    assert {r for r in rec.calls} == set(keys)
    assert sample(reg, "controller_runtime_max_concurrent_reconciles", controller="ctl") == 4


def test_stop_lets_in_flight_reconcile_finish_and_takes_no_new_work() -> None:
    clock = FakeClock()
    gate = threading.Event()
    entered = threading.Event()
    a, b = Request("ns", "a"), Request("ns", "b")

    def fn(req: Request) -> Result:
        if req == a:
            entered.set()
            assert gate.wait(10)
        return Result()

    ctrl, rec, _q, reg = make(fn, workers=1, clock=clock, shutdown_timeout=10.0)
    stop = threading.Event()
    t = threading.Thread(target=ctrl.start, args=(stop,), daemon=True)
    t.start()
    ctrl.enqueue(a)
    assert entered.wait(5)
    ctrl.enqueue(b)
    stopped_at = clock.monotonic()
    stop.set()
    # start() is parked on the clock until the shutdown timeout: waiting for the in-flight reconcile
    clock.block_until_deadline(stopped_at + 10.0)
    assert t.is_alive(), "start() must wait for the in-flight reconcile"
    gate.set()
    t.join(5)
    assert not t.is_alive()
    assert sample(reg, "controller_runtime_reconcile_total", controller="ctl", result="success") == 1
    assert rec.calls == [a]  # b was queued but never started


def test_stuck_reconcile_is_abandoned_after_shutdown_timeout_on_the_injected_clock(
        caplog: pytest.LogCaptureFixture) -> None:
    # Regression: the timeout was measured with time.monotonic(), so a FakeClock could not end it
    # and a test had to wait it out in real time.
    clock = FakeClock()
    gate = threading.Event()
    entered = threading.Event()

    def fn(req: Request) -> Result:
        entered.set()
        gate.wait(10)
        return Result()

    ctrl, _rec, _q, _reg = make(fn, clock=clock, shutdown_timeout=30.0)
    stop = threading.Event()
    t = threading.Thread(target=ctrl.start, args=(stop,), daemon=True)
    t.start()
    try:
        ctrl.enqueue(REQ)
        assert entered.wait(5)
        stopped_at = clock.monotonic()
        stop.set()
        clock.block_until_deadline(stopped_at + 30.0)
        clock.step(29.999)
        clock.block_until_deadline(stopped_at + 30.0)  # not yet: still parked for the same deadline
        assert t.is_alive()
        clock.step(0.001)
        t.join(5)
        assert not t.is_alive(), "start() must return once the shutdown timeout has passed on its clock"
        assert "controller ctl: 1 reconcile(s) still running after 30s; abandoned" in caplog.text
    finally:
        gate.set()


def test_cleared_write_fence_stops_new_reconciles() -> None:
    can_write = threading.Event()
    can_write.set()
    ctrl, rec, _q, _reg = make(lambda r: Result(), workers=1, can_write=can_write)
    with running(ctrl):
        ctrl.enqueue(Request("ns", "a"))
        wait_until(lambda: rec.count() == 1)
        can_write.clear()
        ctrl.enqueue(Request("ns", "b"))
        wait_until(lambda: not any(t.name.startswith("ctl-worker") and t.is_alive()
                                   for t in threading.enumerate()), what="worker exit")
    assert rec.calls == [Request("ns", "a")]


def test_each_reconcile_has_a_unique_id_in_the_log_context(caplog: pytest.LogCaptureFixture) -> None:
    log = logging.getLogger("test.reconciler")
    seen: list[str] = []

    def fn(req: Request) -> Result:
        ctx = current_reconcile()
        assert ctx is not None and ctx.controller == "ctl" and ctx.name == req.name
        seen.append(ctx.reconcile_id)
        log.info("reconciling")
        return Result()

    caplog.handler.addFilter(ReconcileContextFilter())
    caplog.set_level(logging.INFO)
    ctrl, _rec, _q, _reg = make(fn)
    with running(ctrl):
        ctrl.enqueue(Request("ns", "a"))
        wait_until(lambda: len(seen) == 1)
        ctrl.enqueue(Request("ns", "a"))
        wait_until(lambda: len(seen) == 2)
    assert len(set(seen)) == 2
    records = [r for r in caplog.records if r.name == "test.reconciler"]
    assert [getattr(r, "reconcile_id", None) for r in records] == seen
    assert all(getattr(r, "namespace", None) == "ns" and getattr(r, "object_name", None) == "a"
               for r in records)
    assert current_reconcile() is None


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"max_concurrent_reconciles": 0}, "max_concurrent_reconciles"),
    ({"shutdown_timeout": -1}, "shutdown_timeout"),
    ({"cache_sync_timeout": 0}, "cache_sync_timeout"),
], ids=["zero-workers", "negative-shutdown", "zero-sync-timeout"])
def test_constructor_validation(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Controller("x", FuncReconciler(lambda r: Result()), **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(("make_value", "message"), [
    (lambda: Request("ns", ""), "Request.name"),
    (lambda: Result(requeue_after=-1), "requeue_after"),
    (lambda: Result(requeue_after=float("inf")), "requeue_after"),
], ids=["empty-name", "negative-requeue-after", "infinite-requeue-after"])
def test_value_type_validation(make_value: Callable[[], object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make_value()


def test_request_string_and_key_roundtrip() -> None:
    assert str(Request("ns", "a")) == "ns/a"
    assert str(Request("", "node1")) == "node1"
    assert Request.from_key("ns/a") == Request("ns", "a")
    assert Request.from_key("node1") == Request("", "node1")
