"""SharedInformer: cache + ordered per-handler delivery, late handlers, relist diffs, resync, sync."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from fakeapi import FakeAPI, Recorded, RecordingHandler, make_obj, wait_until

from escaler.clock import FakeClock
from escaler.errors import ConnectionFailure
from escaler.informers.frozen import FrozenDict, thaw
from escaler.informers.handlers import FuncHandler
from escaler.informers.shared import SharedInformer
from escaler.informers.store import NAMESPACE_INDEX, DeletedFinalStateUnknown, meta_namespace_key


class Env:
    def __init__(self, objs: int = 3, resync_period: float = 0.0) -> None:
        self.fake = FakeAPI([make_obj(f"o{i}") for i in range(objs)])
        self.clock = FakeClock()
        self.informer = SharedInformer(self.fake, name="test", clock=self.clock, resync_period=resync_period)
        self.stop = threading.Event()
        self.thread: threading.Thread | None = None

    def start(self) -> Env:
        self.thread = self.informer.start(self.stop)
        return self

    def synced(self) -> Env:
        assert self.informer.wait_for_sync(5.0)
        self.fake.wait_for(lambda: self.fake.open_watches == 1)
        return self

    def close(self) -> None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join(5)
            assert not self.thread.is_alive()


@pytest.fixture
def env() -> Iterator[Any]:
    made: list[Env] = []

    def make(**kwargs: Any) -> Env:
        e = Env(**kwargs)
        made.append(e)
        return e

    yield make
    for e in made:
        e.close()


def replay(events: list[Recorded]) -> dict[str, dict[str, Any]]:
    """Apply a handler's history to an empty dict: what the handler believes the world is."""
    world: dict[str, dict[str, Any]] = {}
    for e in events:
        if e.kind == "delete":
            world.pop(e.key, None)
        else:
            assert isinstance(e.obj, FrozenDict)
            world[e.key] = thaw(e.obj)
    return world


def test_initial_list_is_delivered_as_initial_adds_and_syncs(env: Any) -> None:
    e = env(objs=3)
    handler = RecordingHandler()
    reg = e.informer.add_event_handler(handler)
    assert not e.informer.has_synced() and not reg.has_synced()
    e.start().synced()
    events = handler.wait_for_count(3)
    assert [(x.kind, x.key, x.initial) for x in events] == [
        ("add", "default/o0", True), ("add", "default/o1", True), ("add", "default/o2", True)]
    wait_until(reg.has_synced)
    assert e.informer.last_sync_resource_version() == "3"
    assert sorted(e.informer.store.list_keys()) == ["default/o0", "default/o1", "default/o2"]
    assert len(e.informer.indexer.by_index(NAMESPACE_INDEX, "default")) == 3

    e.fake.create(make_obj("o3"))
    assert handler.wait_for_count(4)[-1].initial is False


def test_objects_handed_out_are_read_only(env: Any) -> None:
    e = env(objs=1)
    errors: list[Exception] = []

    def try_mutation(obj: FrozenDict, _initial: bool) -> None:
        try:
            obj["metadata"]["labels"] = {"x": "y"}
        except TypeError as err:
            errors.append(err)

    e.informer.add_event_handler(FuncHandler(add=try_mutation))
    e.start().synced()
    wait_until(lambda: len(errors) == 1)
    assert "read-only" in str(errors[0])
    cached = e.informer.store.get_by_key("default/o0")
    with pytest.raises(TypeError):
        cached["kind"] = "Other"


def test_wait_for_sync_times_out_on_the_clock(env: Any) -> None:
    e = env()
    result: list[bool] = []
    waiter = threading.Thread(target=lambda: result.append(e.informer.wait_for_sync(10.0)))
    waiter.start()
    e.clock.block_until_waiters(1)
    e.clock.step(9.0)
    assert not result
    e.clock.step(1.0)
    waiter.join(5)
    assert result == [False]


def test_wait_for_sync_returns_false_when_stopped_before_sync(env: Any) -> None:
    e = env()
    e.fake.fail_next_list(ConnectionFailure("refused"))  # the reflector parks in a backoff sleep
    result: list[bool] = []
    waiter = threading.Thread(target=lambda: result.append(e.informer.wait_for_sync(1000.0)))
    waiter.start()
    e.start()
    e.fake.wait_for(lambda: e.fake.list_calls == 1)
    e.close()
    waiter.join(5)
    assert result == [False]


def test_events_are_delivered_in_order_per_handler(env: Any) -> None:
    e = env(objs=1)
    handler = RecordingHandler()
    e.informer.add_event_handler(handler)
    e.start().synced()
    for i in range(100):
        e.fake.update(make_obj("o0", data={"i": str(i)}))
    events = handler.wait_for_count(101)
    assert [x.obj["data"]["i"] for x in events[1:]] == [str(i) for i in range(100)]  # type: ignore[index]
    for x in events[1:]:
        assert isinstance(x.old, FrozenDict)
        assert int(x.old["metadata"]["resourceVersion"]) + 1 == int(x.rv)


def test_a_slow_handler_does_not_block_others(env: Any) -> None:
    e = env(objs=2)
    gate = threading.Event()
    slow = RecordingHandler(on_event=lambda _ev: gate.wait(10))
    fast = RecordingHandler()
    e.informer.add_event_handler(slow)
    e.informer.add_event_handler(fast)
    try:
        e.start().synced()
        slow.wait_for_count(1)  # now stuck in its first call
        for i in range(20):
            e.fake.update(make_obj("o1", data={"i": str(i)}))
        fast.wait_for_count(22)
        assert len(slow.snapshot()) == 1
    finally:
        gate.set()
    assert [(x.kind, x.key) for x in slow.wait_for_count(22)] == [(x.kind, x.key) for x in fast.snapshot()]


def test_a_raising_handler_is_logged_and_does_not_break_delivery(env: Any,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    def boom(_ev: Recorded) -> None:
        raise RuntimeError("handler bug")

    e = env(objs=2)
    bad, good = RecordingHandler(on_event=boom), RecordingHandler()
    e.informer.add_event_handler(bad)
    e.informer.add_event_handler(good)
    with caplog.at_level(logging.ERROR, logger="escaler.informers"):
        e.start().synced()
        e.fake.create(make_obj("o9"))
        good.wait_for_count(3)
        bad.wait_for_count(3)  # every event still reached the raising handler
        wait_until(lambda: len([r for r in caplog.records if "raised in on_add" in r.getMessage()]) == 3)
    records = [r for r in caplog.records if "raised in on_add" in r.getMessage()]
    assert records[0].exc_info is not None and "handler bug" in caplog.text


def test_late_handler_gets_synthetic_adds_before_later_events(env: Any) -> None:
    e = env(objs=5)
    e.start().synced()
    writing = threading.Event()

    def writer() -> None:
        i = 0
        while not writing.is_set():
            e.fake.update(make_obj(f"o{i % 5}", data={"i": str(i)}))
            i += 1

    t = threading.Thread(target=writer)
    t.start()
    try:
        e.fake.wait_for(lambda: int(e.fake.resource_version) > 20)
        late = RecordingHandler()
        reg = e.informer.add_event_handler(late)
        late.wait_for_count(30)
    finally:
        writing.set()
        t.join(5)
    wait_until(lambda: e.informer.last_sync_resource_version() == e.fake.resource_version)
    wait_until(lambda: len(late.snapshot()) >= 5 and replay(late.snapshot()) == replay_store(e))
    events = late.snapshot()
    assert [(x.kind, x.initial) for x in events[:5]] == [("add", True)] * 5
    assert sorted(x.key for x in events[:5]) == [f"default/o{i}" for i in range(5)]
    assert all(x.kind == "update" for x in events[5:])
    last_rv: dict[str, int] = {}
    for x in events:  # per object, each later event is newer than the one before
        assert int(x.rv) > last_rv.get(x.key, 0)
        last_rv[x.key] = int(x.rv)
    assert reg.has_synced()


def replay_store(e: Env) -> dict[str, dict[str, Any]]:
    return {meta_namespace_key(o): thaw(o) for o in e.informer.store.list()}


def test_registration_has_synced_once_its_initial_adds_are_delivered(env: Any) -> None:
    e = env(objs=2)
    e.start().synced()
    gate = threading.Event()
    late = RecordingHandler(on_event=lambda _ev: gate.wait(10))
    try:
        reg = e.informer.add_event_handler(late)
        late.wait_for_count(1)
        assert e.informer.has_synced() and not reg.has_synced()
    finally:
        gate.set()
    wait_until(reg.has_synced)


def test_removed_handler_gets_nothing_more(env: Any) -> None:
    e = env(objs=1)
    removed, kept = RecordingHandler(), RecordingHandler()
    reg = e.informer.add_event_handler(removed)
    e.informer.add_event_handler(kept)
    e.start().synced()
    removed.wait_for_count(1)
    reg.remove()
    reg.remove()  # idempotent
    e.fake.create(make_obj("x"))
    kept.wait_for_count(2)
    assert removed.kinds() == [("add", "default/o0")]


@pytest.mark.parametrize("path", ["error-event-mid-stream", "gone-on-rewatch"])
def test_relist_after_gone_notifies_the_difference(env: Any, path: str) -> None:
    e = env(objs=4)
    handler = RecordingHandler()
    e.informer.add_event_handler(handler)
    e.start().synced()
    handler.wait_for_count(4)
    old_o1 = e.informer.store.get_by_key("default/o1")
    if path == "error-event-mid-stream":
        e.fake.pause_watches()  # the watch lags; its held events are lost to compaction
    else:
        e.fake.break_watches()  # the watch drops; the reflector backs off
        e.clock.block_until_waiters(1)
    e.fake.delete(make_obj("o1"))
    e.fake.update(make_obj("o2", data={"v": "2"}))
    e.fake.update(make_obj("o2", data={"v": "3"}))
    e.fake.create(make_obj("o9"))
    e.fake.compact()
    e.fake.resume_watches()
    if path == "gone-on-rewatch":
        e.clock.step(1.6)  # >= any jittered first backoff
    events = handler.wait_for_count(7)[4:]
    assert sorted((x.kind, x.key) for x in events) == [
        ("add", "default/o9"), ("delete", "default/o1"), ("update", "default/o2")]
    by_kind = {x.kind: x for x in events}
    tombstone = by_kind["delete"].obj
    assert isinstance(tombstone, DeletedFinalStateUnknown)
    assert tombstone.key == "default/o1" and tombstone.obj is old_o1
    assert by_kind["update"].obj["data"] == {"v": "3"}  # type: ignore[index]
    assert by_kind["add"].initial is False
    # no lost update: live events after the relist still flow, and the handler's view is the truth
    e.fake.update(make_obj("o0", data={"v": "after"}))
    handler.wait_for_count(8)
    wait_until(lambda: replay(handler.snapshot()) == {f"default/{o['metadata']['name']}": o
                                                      for o in e.fake.objects()})
    assert e.fake.list_calls == 2


def test_resync_redelivers_cached_objects_to_handlers_that_asked(env: Any) -> None:
    e = env(objs=2, resync_period=30.0)
    with_resync, without = RecordingHandler(), RecordingHandler()
    e.informer.add_event_handler(with_resync)
    e.informer.add_event_handler(without, resync_period=0)
    e.start().synced()
    with_resync.wait_for_count(2)
    e.clock.block_until_waiters(1)
    e.clock.step(30.0)
    events = with_resync.wait_for_count(4)[2:]
    assert sorted(x.key for x in events) == ["default/o0", "default/o1"]
    assert all(x.kind == "update" and x.old is x.obj for x in events)
    e.fake.create(make_obj("o2"))
    without.wait_for_count(3)
    assert [x.kind for x in without.snapshot()] == ["add", "add", "add"]


def test_lifecycle_errors(env: Any) -> None:
    e = env(objs=0)
    with pytest.raises(ValueError, match="resync_period"):
        e.informer.add_event_handler(RecordingHandler(), resync_period=0.5)
    with pytest.raises(ValueError, match="resync_period"):
        SharedInformer(e.fake, resync_period=-1)
    e.start().synced()
    with pytest.raises(RuntimeError, match="already started"):
        e.informer.start(threading.Event())
    e.close()
    assert e.informer.is_stopped()
    with pytest.raises(RuntimeError, match="has stopped"):
        e.informer.add_event_handler(RecordingHandler())


def test_stop_ends_handler_threads(env: Any) -> None:
    e = env(objs=1)
    e.informer.add_event_handler(RecordingHandler())
    e.start().synced()
    names = {t.name for t in threading.enumerate()}
    assert "informer-test-handler" in names
    e.close()
    wait_until(lambda: not any(t.name.startswith(("informer-test", "reflector-"))
                               and t.is_alive() for t in threading.enumerate()))
    assert e.fake.open_watches == 0
