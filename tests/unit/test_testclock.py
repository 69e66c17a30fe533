"""``escaler.testclock``: the test-only SteppedClock and its offset file, on a FakeClock base (no
real time passes for the clock; threads are awaited with bounded waits, never slept on).

* the offset applies to ``monotonic()`` and ``now()`` alike, over the base's own movement;
* it only moves forward: a smaller offset, NaN, ±inf or a negative one is refused and not applied;
* a step wakes what is parked: a delaying-queue item whose ready time a step reaches comes out, a
  sleeper returns, a waiter that read the time before the step does not park on its stale timeout;
* the file: read at open (a bad one refuses to start), polled by ``poll_once`` (steps logged at
  WARNING with the new offset, refusals at ERROR naming the file and the rule, once per content);
* the manager's Tidal controller, built on the manager's injected SteppedClock, is woken at a
  transition a step reaches.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from es_fakes import NS, Harness, deployment
from fakeapi import wait_until
from test_reconciler_tidal import tidal

from escaler.clock import FakeClock
from escaler.reconcilers.tidal import setup_tidal
from escaler.runtime import Request
from escaler.testclock import RULE, STOP_POLL_SECONDS, ClockFile, SteppedClock, read_offset
from escaler.workqueue.delaying import DelayingQueue

# bound on how long a test waits (real time) for another thread to react
REACT_SECONDS = 5.0


@pytest.fixture
def base() -> FakeClock:
    return FakeClock()


def in_thread(fn: Callable[[], object]) -> tuple[threading.Thread, list[object]]:
    """Run ``fn`` on a daemon thread; its return value lands in the list."""
    out: list[object] = []
    t = threading.Thread(target=lambda: out.append(fn()), daemon=True)
    t.start()
    return t, out


# --- the offset --------------------------------------------------------------------------------


def test_the_offset_applies_to_monotonic_and_now(base: FakeClock) -> None:
    clock = SteppedClock(base, 90.0)
    assert clock.monotonic() == base.monotonic() + 90.0
    assert clock.now() == base.now() + timedelta(seconds=90)
    assert clock.advance_to(150.5)
    assert (clock.offset, clock.monotonic()) == (150.5, base.monotonic() + 150.5)
    assert clock.now() == base.now() + timedelta(seconds=150.5)
    base.step(10)  # the base's own time still passes through
    assert clock.monotonic() == base.monotonic() + 150.5
    assert clock.now() == datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=160.5)


REFUSED = [
    ("decrease", 20.0, "less than the current 30 s"),
    ("nan", float("nan"), "not a finite number"),
    ("inf", float("inf"), "not a finite number"),
    ("negative", -1.0, "negative"),
]


@pytest.mark.parametrize(("offset", "message"), [c[1:] for c in REFUSED], ids=[c[0] for c in REFUSED])
def test_a_step_back_or_a_non_number_is_refused_and_not_applied(base: FakeClock, offset: float,
                                                                message: str) -> None:
    clock = SteppedClock(base, 30.0)
    before = clock.monotonic()
    with pytest.raises(ValueError, match=message) as exc:
        clock.advance_to(offset)
    assert RULE in str(exc.value)
    assert (clock.offset, clock.monotonic()) == (30.0, before)


def test_the_same_offset_is_no_step(base: FakeClock) -> None:
    clock = SteppedClock(base, 30.0)
    assert not clock.advance_to(30.0)


@pytest.mark.parametrize("offset", [-5.0, float("nan")], ids=["negative", "nan"])
def test_a_bad_initial_offset_is_refused(base: FakeClock, offset: float) -> None:
    with pytest.raises(ValueError, match="offset"):
        SteppedClock(base, offset)


# --- a step wakes what is parked ----------------------------------------------------------------


def test_a_step_releases_a_delaying_queue_item_without_real_or_base_time_passing(base: FakeClock) -> None:
    clock = SteppedClock(base)
    q: DelayingQueue[str] = DelayingQueue("t", clock=clock)
    try:
        q.add_after("tidal", 8.0)  # returns once the queue's thread is parked for it (< MAX_WAIT_SECONDS)
        base.block_until_deadline(base.monotonic() + 8.0)
        clock.advance_to(7.0)
        # the thread woke, recomputed, and parked again for the one second left
        base.block_until_deadline(base.monotonic() + 1.0)
        assert len(q) == 0
        clock.advance_to(8.0)
        wait_until(lambda: len(q) == 1, timeout=REACT_SECONDS, what="the item released by the step")
        assert q.get() == "tidal"
        assert base.monotonic() == 1000.0  # the base never moved
    finally:
        q.shutdown()


def test_a_step_wakes_a_sleeper_and_a_short_one_keeps_it_asleep(base: FakeClock) -> None:
    clock = SteppedClock(base)
    t, out = in_thread(lambda: clock.sleep(60.0))
    base.block_until_deadline(base.monotonic() + 60.0)
    clock.advance_to(20.0)
    base.block_until_deadline(base.monotonic() + 40.0)  # re-parked for what is left
    assert t.is_alive()
    clock.advance_to(60.0)
    t.join(REACT_SECONDS)
    assert not t.is_alive() and out == [False]


def test_a_sleepers_stop_is_seen_within_its_poll(base: FakeClock) -> None:
    clock = SteppedClock(base)
    stop = threading.Event()
    t, out = in_thread(lambda: clock.sleep(60.0, stop))
    base.block_until_deadline(base.monotonic() + STOP_POLL_SECONDS)
    stop.set()
    base.step(STOP_POLL_SECONDS)
    t.join(REACT_SECONDS)
    assert not t.is_alive() and out == [True]
    assert clock.sleep(1.0, stop) is True  # already stopped: at once


def test_a_step_wakes_a_waiter_on_its_condition(base: FakeClock) -> None:
    clock = SteppedClock(base)
    cond = threading.Condition()

    def wait() -> float:
        with cond:
            clock.wait(cond, 100.0)
        return clock.monotonic()

    t, out = in_thread(wait)
    base.block_until_waiters(1)
    clock.advance_to(5.0)
    t.join(REACT_SECONDS)
    assert not t.is_alive() and out == [base.monotonic() + 5.0]


def test_a_waiter_whose_timeout_predates_a_step_returns_at_once(base: FakeClock) -> None:
    clock = SteppedClock(base)
    cond = threading.Condition()
    stepped = threading.Event()

    def wait() -> bool:
        deadline = clock.monotonic() + 100.0  # this thread's read, before the step
        clock.advance_to(50.0)  # (from this thread, so the step surely comes between)
        stepped.set()
        with cond:
            clock.wait(cond, deadline - 1000.0 - 50.0)  # a timeout computed from the stale read
        return True

    t, out = in_thread(wait)
    t.join(REACT_SECONDS)
    assert stepped.is_set() and not t.is_alive() and out == [True]
    assert base.waiters() == 0


# --- the file ------------------------------------------------------------------------------------


def write(path: Path, text: str) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


BAD_FILES = [
    ("missing", None, "cannot read"),
    ("garbage", "soon\n", "'soon' is not a number of seconds"),
    ("empty", "", "'' is not a number of seconds"),
    ("negative", "-3", "negative"),
    ("nan", "nan", "not a finite number"),
]


@pytest.mark.parametrize(("text", "message"), [c[1:] for c in BAD_FILES], ids=[c[0] for c in BAD_FILES])
def test_a_file_without_a_valid_offset_cannot_be_opened(tmp_path: Path, base: FakeClock, text: str | None,
                                                        message: str) -> None:
    path = tmp_path / "clock"
    if text is not None:
        path.write_text(text, encoding="utf-8")
    with pytest.raises(ValueError, match=message) as exc:
        ClockFile.open(path, base)
    assert str(path) in str(exc.value) and RULE in str(exc.value)


def test_open_reads_the_offset(tmp_path: Path, base: FakeClock) -> None:
    path = tmp_path / "clock"
    path.write_text(" 42.5\n", encoding="utf-8")
    assert read_offset(path) == 42.5
    watcher = ClockFile.open(path, base)
    assert watcher.clock.offset == 42.5
    assert not watcher.poll_once()  # unchanged: nothing to do


@pytest.fixture
def watched(tmp_path: Path, base: FakeClock) -> Iterator[tuple[Path, ClockFile]]:
    path = tmp_path / "clock"
    path.write_text("10", encoding="utf-8")
    yield path, ClockFile.open(path, base)


def _records(caplog: pytest.LogCaptureFixture, level: int) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "escaler.testclock" and r.levelno == level]


def test_a_larger_offset_steps_the_clock_and_is_logged_loudly(watched: tuple[Path, ClockFile],
                                                             caplog: pytest.LogCaptureFixture) -> None:
    path, watcher = watched
    caplog.set_level(logging.INFO, logger="escaler.testclock")
    write(path, "70.25")
    assert watcher.poll_once()
    assert watcher.clock.offset == 70.25
    [rec] = _records(caplog, logging.WARNING)
    assert "UNSAFE TEST CLOCK stepped: offset 70.25 s (+60.25 s)" in rec.getMessage()
    assert (rec.__dict__["offset"], rec.__dict__["clockFile"]) == (70.25, str(path))


REFUSED_FILES = [
    ("decrease", "5", "less than the current 10 s"),
    ("garbage", "12s", "'12s' is not a number of seconds"),
    ("half-written", "", "'' is not a number of seconds"),
    ("inf", "inf", "not a finite number"),
]


@pytest.mark.parametrize(("text", "message"), [c[1:] for c in REFUSED_FILES],
                         ids=[c[0] for c in REFUSED_FILES])
def test_a_refused_offset_is_logged_once_naming_the_file_and_the_rule_and_never_applied(
        watched: tuple[Path, ClockFile], caplog: pytest.LogCaptureFixture, text: str, message: str) -> None:
    path, watcher = watched
    caplog.set_level(logging.INFO, logger="escaler.testclock")
    write(path, text)
    assert not watcher.poll_once()
    assert not watcher.poll_once()  # the same content again: no second line
    assert watcher.clock.offset == 10.0
    [rec] = _records(caplog, logging.ERROR)
    msg = rec.getMessage()
    assert str(path) in msg and message in msg and RULE in msg and "offset stays 10 s" in msg
    assert not _records(caplog, logging.WARNING)
    # a valid larger offset afterwards is applied
    write(path, "11")
    assert watcher.poll_once() and watcher.clock.offset == 11.0


def test_a_vanished_file_is_refused_once_and_the_clock_keeps_its_offset(
        watched: tuple[Path, ClockFile], caplog: pytest.LogCaptureFixture) -> None:
    path, watcher = watched
    caplog.set_level(logging.INFO, logger="escaler.testclock")
    path.unlink()
    assert not watcher.poll_once() and not watcher.poll_once()
    [rec] = _records(caplog, logging.ERROR)
    assert str(path) in rec.getMessage() and RULE in rec.getMessage()
    assert watcher.clock.offset == 10.0


def test_the_watcher_thread_steps_the_clock_and_wakes_a_sleeper(watched: tuple[Path, ClockFile],
                                                                base: FakeClock) -> None:
    path, watcher = watched
    t, out = in_thread(lambda: watcher.clock.sleep(30.0))
    base.block_until_waiters(1)
    watcher.start()
    try:
        write(path, "40")
        t.join(REACT_SECONDS)
        assert not t.is_alive() and out == [False]
        assert watcher.clock.offset == 40.0
    finally:
        watcher.stop()


def test_poll_seconds_must_be_positive(base: FakeClock) -> None:
    with pytest.raises(ValueError, match="poll_seconds"):
        ClockFile("x", SteppedClock(base), poll_seconds=0)


# --- the manager's Tidal controller on the manager's SteppedClock ---------------------------------


def test_the_managers_tidal_controller_is_woken_at_a_transition_a_step_reaches() -> None:
    """The Tidal reconciler and its delaying queue take the manager's clock (``mgr.clock``, no clock
    passed to ``setup_tidal``): a step to the transition applies the rule, with neither real nor
    base time passing for it."""
    base = FakeClock()
    base.set_wall(datetime(2026, 6, 3, 0, 59, 30, tzinfo=UTC))
    clock = SteppedClock(base)
    h = Harness(clock=clock)  # type: ignore[arg-type]
    tc = setup_tidal(h.mgr, bindings=h.es.bindings, client=h.client)
    h.api("deployments").create(deployment("web", 2))
    h.start()
    stop = threading.Event()
    runner = threading.Thread(target=tc.controller.start, args=(stop,), daemon=True)

    def status() -> dict[str, object]:
        obj = h.api("tidals").get(f"{NS}/plan") or {}
        return dict(obj.get("status") or {})

    try:
        assert h.mgr.clock is clock
        # ``done`` comes after the requeue is scheduled (see test_reconciler_tidal)
        queue, scheduled = tc.controller.queue, threading.Event()
        original_done = queue.done

        def done(item: Request) -> None:
            original_done(item)
            if status().get("nextTransitionTime") == "2026-06-03T01:00:00Z":
                scheduled.set()

        queue.done = done  # type: ignore[method-assign]
        h.api("tidals").create(tidal())
        runner.start()
        wait_until(scheduled.is_set, timeout=REACT_SECONDS,
                   what="the first status write's reconcile returned")
        assert status()["desiredReplicas"] == 2
        clock.advance_to(29.5)
        base.block_until_deadline(base.monotonic() + 0.5)  # the queue re-parked for the last 0.5 s
        assert status()["desiredReplicas"] == 2
        clock.advance_to(30.0)
        wait_until(lambda: status().get("desiredReplicas") == 5, timeout=REACT_SECONDS,
                   what="the rule applied at 01:00:00 (manager time)")
        assert status()["nextTransitionTime"] == "2026-06-03T02:00:00Z"
        assert base.now() == datetime(2026, 6, 3, 0, 59, 30, tzinfo=UTC)
    finally:
        stop.set()
        runner.join(10)
        h.stop()
