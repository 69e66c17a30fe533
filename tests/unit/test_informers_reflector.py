"""Reflector: list (paginated) then watch, bookmarks, re-watch, 410 relist, backoff, stop."""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from fakeapi import FakeAPI, ListRequest, make_obj, wait_until

from escaler.clock import FakeClock
from escaler.errors import ConnectionFailure, StatusError
from escaler.informers.reflector import Reflector
from escaler.informers.store import Indexer


class FixedRandom(random.Random):
    def __init__(self, value: float) -> None:
        super().__init__(0)
        self.value = value

    def random(self) -> float:
        return self.value


class RecordingClock(FakeClock):
    """A FakeClock that records every sleep the code under test asks for."""

    def __init__(self) -> None:
        super().__init__()
        self.sleeps: list[float] = []

    def sleep(self, seconds: float, stop: threading.Event | None = None) -> bool:
        self.sleeps.append(seconds)
        return super().sleep(seconds, stop)


class RecordingSink:
    """An Indexer plus a log of what the reflector asked of it."""

    def __init__(self, poison: str = "") -> None:
        self.store = Indexer()
        self.calls: list[tuple[str, Any]] = []
        self.resyncs = 0
        self._lock = threading.Lock()
        self._poison = poison

    def _log(self, kind: str, arg: Any) -> None:
        with self._lock:
            self.calls.append((kind, arg))

    def _check(self, obj: Mapping[str, Any]) -> None:
        if self._poison and obj["metadata"]["name"] == self._poison:
            raise RuntimeError("poison object")

    def add(self, obj: Mapping[str, Any]) -> None:
        self._check(obj)
        self.store.add(obj)
        self._log("add", obj["metadata"]["name"])

    def update(self, obj: Mapping[str, Any]) -> None:
        self.store.update(obj)
        self._log("update", obj["metadata"]["name"])

    def delete(self, obj: Mapping[str, Any]) -> None:
        self.store.delete(obj)
        self._log("delete", obj["metadata"]["name"])

    def replace(self, objs: list[dict[str, Any]], resource_version: str) -> None:
        self.store.replace(objs, resource_version)
        self._log("replace", (sorted(o["metadata"]["name"] for o in objs), resource_version))

    def resync(self) -> None:
        with self._lock:
            self.resyncs += 1

    def snapshot(self) -> list[tuple[str, Any]]:
        with self._lock:
            return list(self.calls)

    def names(self) -> list[str]:
        return sorted(o["metadata"]["name"] for o in self.store.list())


class Harness:
    def __init__(self, fake: FakeAPI, sink: RecordingSink, clock: RecordingClock, **kwargs: Any) -> None:
        self.fake, self.sink, self.clock = fake, sink, clock
        kwargs.setdefault("rng", FixedRandom(0.0))
        self.reflector = Reflector(fake, sink, name="test", clock=clock, **kwargs)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.reflector.run, args=(self.stop,), daemon=True)

    def start(self) -> Harness:
        self.thread.start()
        return self

    def wait_watching(self, calls: int = 1) -> None:
        self.fake.wait_for(lambda: self.fake.watch_calls >= calls and self.fake.open_watches == 1)

    def wait_sleeping(self, n: int) -> float:
        """Wait until the reflector is parked in its n-th sleep; return the requested delay."""
        wait_until(lambda: len(self.clock.sleeps) >= n and self.clock.waiters() >= 1, what=f"sleep #{n}")
        assert len(self.clock.sleeps) == n, self.clock.sleeps
        return self.clock.sleeps[-1]

    def close(self) -> None:
        self.stop.set()
        self.thread.join(5)
        assert not self.thread.is_alive(), "reflector did not stop"


@pytest.fixture
def harness() -> Iterator[Any]:
    made: list[Harness] = []

    def make(objs: int | list[dict[str, Any]] = 3, sink: RecordingSink | None = None,
             **kwargs: Any) -> Harness:
        items = [make_obj(f"o{i}") for i in range(objs)] if isinstance(objs, int) else objs
        h = Harness(FakeAPI(items), sink or RecordingSink(), RecordingClock(), **kwargs)
        made.append(h)
        return h

    yield make
    for h in made:
        if h.thread.is_alive():
            h.close()


@pytest.mark.parametrize(("rand", "watch_timeout"), [(0.0, 300), (0.5, 450), (0.999, 599)],
                         ids=["min-5min", "mid", "max-just-under-10min"])
def test_list_then_watch_from_the_lists_resource_version(harness: Any, rand: float,
                                                         watch_timeout: int) -> None:
    h = harness(3, rng=FixedRandom(rand)).start()
    h.wait_watching()
    assert h.fake.list_requests == [ListRequest("ns=* labels=*", "", 500, None)]
    watch = h.fake.watch_requests[0]
    assert (watch.resource_version, watch.allow_bookmarks) == ("3", True)
    assert watch.timeout_seconds == watch_timeout  # drawn from [5 min, 10 min)
    assert h.sink.snapshot() == [("replace", (["o0", "o1", "o2"], "3"))]
    assert h.reflector.last_sync_resource_version() == "3"

    h.fake.create(make_obj("new"))
    h.fake.update(make_obj("o0", data={"v": "2"}))
    h.fake.delete(make_obj("o1"))
    wait_until(lambda: len(h.sink.snapshot()) == 4)
    assert h.sink.snapshot()[1:] == [("add", "new"), ("update", "o0"), ("delete", "o1")]
    assert h.reflector.last_sync_resource_version() == "6"
    assert h.sink.names() == ["new", "o0", "o2"]
    h.close()
    assert h.fake.open_watches == 0


def test_pagination_uses_limit_and_continue(harness: Any) -> None:
    h = harness(5, page_size=2).start()
    h.wait_watching()
    assert [(r.limit, r.continue_) for r in h.fake.list_requests] == [(2, None), (2, "5:2"), (2, "5:4")]
    assert h.sink.snapshot() == [("replace", (["o0", "o1", "o2", "o3", "o4"], "5"))]
    assert h.fake.watch_requests[0].resource_version == "5"


def test_expired_continue_token_restarts_the_list_from_scratch(harness: Any) -> None:
    h = harness(5, page_size=2)
    compacted: list[bool] = []

    def compact_between_pages(api: FakeAPI, request: ListRequest) -> None:
        if request.continue_ and not compacted:
            compacted.append(True)
            api.create(make_obj("late"))  # written between pages, then history compacted
            api.compact()

    h.fake.on_list = compact_between_pages
    h.start().wait_watching()
    assert [r.continue_ for r in h.fake.list_requests] == [None, "5:2", None, "6:2", "6:4"]
    assert all(r.resource_version == "" for r in h.fake.list_requests)
    assert h.sink.snapshot() == [("replace", (["late", "o0", "o1", "o2", "o3", "o4"], "6"))]
    assert h.clock.sleeps == []  # restarting an expired list is not a failure


def test_bookmark_advances_resource_version_without_events(harness: Any) -> None:
    h = harness(2).start()
    h.wait_watching()
    rv = h.fake.send_bookmark()
    wait_until(lambda: h.reflector.last_sync_resource_version() == rv)
    assert [kind for kind, _ in h.sink.snapshot()] == ["replace"]
    h.fake.end_watches()
    h.wait_watching(calls=2)
    assert h.fake.watch_requests[1].resource_version == rv
    assert h.fake.list_calls == 1


def test_normal_end_rewatches_from_last_rv_without_relist(harness: Any) -> None:
    h = harness(2).start()
    h.wait_watching()
    h.fake.create(make_obj("a"))
    wait_until(lambda: h.reflector.last_sync_resource_version() == "3")
    h.fake.end_watches()
    h.fake.update(make_obj("a", data={"v": "2"}))  # while no watch is open: replayed, not lost
    h.wait_watching(calls=2)
    wait_until(lambda: len(h.sink.snapshot()) == 3)
    assert h.fake.list_calls == 1
    assert h.fake.watch_requests[1].resource_version == "3"
    assert h.sink.snapshot()[1:] == [("add", "a"), ("update", "a")]
    assert h.clock.sleeps == []


def test_watch_closed_at_once_without_events_backs_off(harness: Any) -> None:
    h = harness(1).start()
    h.wait_watching()
    h.fake.end_watches()
    assert h.wait_sleeping(1) == pytest.approx(0.8)
    h.clock.step(0.8)
    h.wait_watching(calls=2)
    assert h.fake.list_calls == 1


@pytest.mark.parametrize("gone_as_event", [False, True], ids=["http-410-on-open", "error-event-on-open"])
def test_gone_on_rewatch_relists_with_current_state(harness: Any, gone_as_event: bool) -> None:
    h = harness(3).start()
    h.fake.gone_as_event = gone_as_event
    h.wait_watching()
    h.fake.break_watches()  # connection lost ...
    assert h.wait_sleeping(1) == pytest.approx(0.8)
    h.fake.delete(make_obj("o1"))  # ... changes happen meanwhile ...
    h.fake.update(make_obj("o2", data={"v": "2"}))
    h.fake.create(make_obj("o3"))
    h.fake.compact()  # ... and the history is compacted away
    h.clock.step(0.8)
    h.wait_watching(calls=3)
    assert h.fake.list_calls == 2
    assert h.fake.list_requests[1].resource_version == ""
    assert h.sink.snapshot()[-1] == ("replace", (["o0", "o2", "o3"], "6"))
    assert h.sink.store.get_by_key("default/o2")["data"] == {"v": "2"}
    assert h.fake.watch_requests[-1].resource_version == "6"
    assert h.clock.sleeps == [pytest.approx(0.8)]  # the 410 itself costs no backoff


def test_gone_error_event_mid_stream_relists_at_once(harness: Any) -> None:
    h = harness(3).start()
    h.wait_watching()
    h.fake.pause_watches()  # a lagging watch ...
    h.fake.delete(make_obj("o0"))
    h.fake.create(make_obj("o9"))
    h.fake.compact()  # ... falls behind compaction: ERROR 410 event
    h.fake.resume_watches()
    h.wait_watching(calls=2)
    assert h.fake.list_calls == 2
    assert h.sink.snapshot()[-1] == ("replace", (["o1", "o2", "o9"], "5"))
    assert h.clock.sleeps == []


def test_repeated_gone_without_progress_backs_off(harness: Any) -> None:
    h = harness(1)
    gone = StatusError(410, "Expired", "too old resource version")
    h.fake.fail_next_watch(gone, gone)
    h.start()
    assert h.wait_sleeping(1) == pytest.approx(0.8)
    assert (h.fake.list_calls, h.fake.watch_calls) == (2, 2)
    h.clock.step(0.8)
    h.wait_watching(calls=3)
    assert h.fake.list_calls == 3


def test_backoff_schedule_is_exponential_and_capped(harness: Any) -> None:
    h = harness(1)
    schedule = [0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 30.0, 30.0]
    h.fake.fail_next_list(*[StatusError(500, "InternalError", "etcd down")] * len(schedule))
    h.start()
    for n, delay in enumerate(schedule, start=1):
        assert h.wait_sleeping(n) == pytest.approx(delay)
        h.clock.step(delay)
    h.wait_watching()
    assert h.fake.list_calls == len(schedule) + 1


def test_backoff_jitter_upper_bound(harness: Any) -> None:
    h = harness(1, rng=FixedRandom(0.999))
    h.fake.fail_next_list(*[ConnectionFailure("refused")] * 6)
    h.start()
    for n, base in enumerate([0.8, 1.6, 3.2, 6.4, 12.8, 25.6], start=1):
        delay = h.wait_sleeping(n)
        assert base <= delay <= min(base * 2, 30.0)
        assert delay == pytest.approx(min(base * 1.999, 30.0))
        h.clock.step(delay)
    h.wait_watching()


@pytest.mark.parametrize(
    "error",
    [
        StatusError(500, "InternalError", "boom"),
        StatusError(503, "ServiceUnavailable", "later"),
        StatusError(429, "TooManyRequests", "slow down"),
        ConnectionFailure("connection refused"),
        StatusError(403, "Forbidden", 'pods is forbidden: cannot list resource "pods"'),
        StatusError(404, "NotFound", "the server could not find the requested resource"),
    ],
    ids=["500", "503", "429", "connection-refused", "403-rbac", "404"],
)
@pytest.mark.parametrize("phase", ["list", "watch"])
def test_failures_back_off_and_retry(harness: Any, error: Exception, phase: str,
                                     caplog: pytest.LogCaptureFixture) -> None:
    h = harness(1)
    fail = h.fake.fail_next_list if phase == "list" else h.fake.fail_next_watch
    fail(error, error)
    with caplog.at_level(logging.WARNING, logger="escaler.informers"):
        h.start()
        assert h.wait_sleeping(1) == pytest.approx(0.8)
        h.clock.step(0.8)
        assert h.wait_sleeping(2) == pytest.approx(1.6)
        h.clock.step(1.6)
        h.wait_watching()
    assert h.fake.list_calls == (3 if phase == "list" else 1)  # a failed watch does not relist
    assert f"{phase} failed" in caplog.text
    if isinstance(error, StatusError) and error.code == 403:
        assert "RBAC" in caplog.text


@pytest.mark.parametrize(
    ("scenario", "next_delay"),
    [("event-resets", 0.8), ("no-event-continues", 6.4), ("long-watch-resets", 0.8)],
    ids=["event-resets", "no-event-continues", "long-watch-resets"],
)
def test_backoff_resets_after_a_healthy_watch(harness: Any, scenario: str, next_delay: float) -> None:
    h = harness(1)
    h.fake.fail_next_list(*[StatusError(500)] * 3)
    h.start()
    for n, delay in enumerate([0.8, 1.6, 3.2], start=1):
        assert h.wait_sleeping(n) == pytest.approx(delay)
        h.clock.step(delay)
    h.wait_watching()
    if scenario == "event-resets":
        h.fake.create(make_obj("x"))
        wait_until(lambda: ("add", "x") in h.sink.snapshot())
    elif scenario == "long-watch-resets":
        h.clock.step(121.0)
    h.fake.break_watches()
    assert h.wait_sleeping(4) == pytest.approx(next_delay)


@pytest.mark.parametrize("retry_after", [7.0, 0.5], ids=["longer", "shorter"])
def test_429_is_retried_after_its_retry_after(harness: Any, retry_after: float) -> None:
    h = harness(1)
    h.fake.fail_next_list(StatusError(429, "TooManyRequests", "slow down", retry_after_seconds=retry_after))
    h.start()
    assert h.wait_sleeping(1) == pytest.approx(retry_after)
    h.clock.step(retry_after)
    h.wait_watching()


def test_a_restarted_api_servers_429s_do_not_wait_out_a_backoff_grown_by_the_outage(harness: Any) -> None:
    """The API server was down long enough for the backoff to reach its 30 s cap; restarted, it
    first answers 429 "storage is (re)initializing" with Retry-After 1: the reflector retries 1 s
    later (each time), not 30 s (chaos run: targets 60 s late after an API server restart)."""
    h = harness(1)
    initializing = StatusError(429, "TooManyRequests", "storage is (re)initializing", retry_after_seconds=1.0)
    h.fake.fail_next_list(*[ConnectionFailure("refused")] * 7, initializing, initializing)
    h.start()
    for n in range(1, 8):  # the outage: 0.8 s, 1.6 s, ... up to the 30 s cap
        h.clock.step(h.wait_sleeping(n))
    assert h.wait_sleeping(8) == pytest.approx(1.0)
    h.clock.step(1.0)
    assert h.wait_sleeping(9) == pytest.approx(1.0)
    h.clock.step(1.0)
    h.wait_watching()


def test_429s_past_the_retry_limit_back_off(harness: Any) -> None:
    h = harness(1)
    throttled = StatusError(429, "TooManyRequests", "slow down", retry_after_seconds=0.5)
    h.fake.fail_next_list(*[throttled] * 11)
    h.start()
    for n in range(1, 11):
        assert h.wait_sleeping(n) == pytest.approx(0.5)
        h.clock.step(0.5)
    assert h.wait_sleeping(11) == pytest.approx(0.8)  # the 11th: the backoff's first delay
    h.clock.step(0.8)
    h.wait_watching()


def test_non_gone_error_event_rewatches_without_relist(harness: Any) -> None:
    h = harness(1).start()
    h.wait_watching()
    h.fake.send_watch_error(500, "InternalError", "watch chan error")
    assert h.wait_sleeping(1) == pytest.approx(0.8)
    h.clock.step(0.8)
    h.wait_watching(calls=2)
    assert h.fake.list_calls == 1
    assert h.fake.watch_requests[1].resource_version == "1"


def test_stop_closes_an_open_watch(harness: Any) -> None:
    h = harness(1).start()
    h.wait_watching()
    h.close()
    assert h.fake.open_watches == 0


def test_stop_interrupts_a_backoff_sleep(harness: Any) -> None:
    h = harness(1)
    h.fake.fail_next_list(StatusError(503))
    h.start()
    assert h.wait_sleeping(1) == pytest.approx(0.8)
    h.close()  # without stepping the clock
    assert h.fake.list_calls == 1


def test_a_raising_sink_skips_the_event_and_keeps_watching(harness: Any,
                                                           caplog: pytest.LogCaptureFixture) -> None:
    h = harness(1, sink=RecordingSink(poison="bad")).start()
    h.wait_watching()
    with caplog.at_level(logging.ERROR, logger="escaler.informers"):
        h.fake.create(make_obj("bad"))
        h.fake.create(make_obj("good"))
        wait_until(lambda: ("add", "good") in h.sink.snapshot())
    assert "could not apply ADDED of bad" in caplog.text
    assert h.reflector.last_sync_resource_version() == "3"
    assert (h.fake.list_calls, h.fake.watch_calls) == (1, 1)


def test_resync_ticks_on_the_clock(harness: Any) -> None:
    h = harness(1, resync_period=30.0).start()
    h.wait_watching()
    h.clock.block_until_waiters(1)
    h.clock.step(29.0)
    assert h.sink.resyncs == 0
    h.clock.step(1.0)
    wait_until(lambda: h.sink.resyncs == 1)
    h.clock.block_until_waiters(1)
    h.clock.step(30.0)
    wait_until(lambda: h.sink.resyncs == 2)


@pytest.mark.parametrize(("rand", "timeout"), [(0.0, 300), (0.5, 450), (0.99999, 599)],
                         ids=["min", "mid", "max"])
def test_watch_timeout_is_drawn_from_5_to_10_minutes(rand: float, timeout: int) -> None:
    reflector = Reflector(FakeAPI(), Indexer(), name="t", rng=FixedRandom(rand))
    assert reflector.next_watch_timeout() == timeout


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [({"resync_period": -1.0}, ValueError), ({"resync_period": 10.0}, TypeError),
     ({"page_size": -1}, ValueError)],
    ids=["negative-resync", "resync-needs-resync-method", "negative-page-size"],
)
def test_constructor_validation(kwargs: dict[str, Any], error: type[Exception]) -> None:
    with pytest.raises(error):
        Reflector(FakeAPI(), Indexer(), name="t", **kwargs)


def test_runs_only_once(harness: Any) -> None:
    h = harness(0).start()
    h.wait_watching()
    with pytest.raises(RuntimeError, match="only once"):
        h.reflector.run(threading.Event())


@pytest.mark.parametrize(("open_for", "next_delay"), [(61.0, 0.8), (30.0, 6.4)],
                         ids=["healthy-then-dead-reopens-at-initial-delay", "short-lived-keeps-backing-off"])
def test_a_watch_that_dies_after_a_healthy_while_reopens_at_the_initial_delay(
        harness: Any, open_for: float, next_delay: float) -> None:
    """A silent dead connection surfaces as a read timeout (ConnectionFailure) after up to ~2 min
    (escaler.kube.dynamic): a watch that had been open past a bookmark interval was healthy, so the
    re-open waits the initial delay, not one grown by failures long past."""
    h = harness(1)
    h.fake.fail_next_list(*[StatusError(500)] * 3)
    h.start()
    for n, delay in enumerate([0.8, 1.6, 3.2], start=1):
        assert h.wait_sleeping(n) == pytest.approx(delay)
        h.clock.step(delay)
    h.wait_watching()
    h.clock.step(open_for)  # open, no event (an idle resource)
    h.fake.break_watches(ConnectionFailure("GET /api/v1/things: read timed out"))
    assert h.wait_sleeping(4) == pytest.approx(next_delay)
    h.clock.step(next_delay)
    h.wait_watching(calls=2)
    assert h.fake.list_calls == 4, "a dead watch is re-opened from its resourceVersion, not relisted"
