"""DynamicInformers: start on first register, share, stop on last release, restart on re-register."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from fakeapi import FakeAPI, RecordingHandler, make_obj, wait_until

from escaler.clock import FakeClock
from escaler.informers.dynamic import DynamicInformers
from escaler.informers.factory import ResourceKey
from escaler.informers.frozen import FrozenDict
from escaler.informers.handlers import FuncHandler

WEB = ResourceKey("", "v1", "pods", label_selector="app=web")
DB = ResourceKey("", "v1", "pods", label_selector="app=db")


@pytest.fixture
def fake() -> FakeAPI:
    return FakeAPI([make_obj("w1", labels={"app": "web"}), make_obj("w2", labels={"app": "web"}),
                    make_obj("d1", labels={"app": "db"})])


@pytest.fixture
def dyn(fake: FakeAPI) -> Iterator[DynamicInformers]:
    d = DynamicInformers(fake.for_key, clock=FakeClock())
    yield d
    d.stop_all()


def test_lifecycle_start_share_stop_restart(fake: FakeAPI, dyn: DynamicInformers) -> None:
    first = RecordingHandler()
    reg1 = dyn.register(WEB, first)
    assert dyn.active_keys() == [WEB] and dyn.refcount(WEB) == 1
    fake.wait_for(lambda: fake.open_watches == 1)
    assert sorted(e.key for e in first.wait_for_count(2)) == ["default/w1", "default/w2"]
    wait_until(reg1.has_synced)

    second = RecordingHandler()
    reg2 = dyn.register(WEB, second)  # shares the running informer: synthetic adds, no new watch
    assert reg2.informer is reg1.informer and dyn.refcount(WEB) == 2
    assert [(e.kind, e.initial) for e in second.wait_for_count(2)] == [("add", True)] * 2
    assert (fake.list_calls, fake.watch_calls, fake.open_watches) == (1, 1, 1)

    fake.create(make_obj("w3", labels={"app": "web"}))
    fake.create(make_obj("d2", labels={"app": "db"}))  # filtered out by the selector
    first.wait_for_count(3)
    second.wait_for_count(3)

    reg1.release()
    assert dyn.refcount(WEB) == 1 and fake.open_watches == 1
    reg2.release()
    reg2.release()  # idempotent
    assert dyn.active_keys() == [] and dyn.refcount(WEB) == 0
    fake.wait_for(lambda: fake.open_watches == 0)
    assert reg1.informer.is_stopped()

    third = RecordingHandler()
    reg3 = dyn.register(WEB, third)  # a fresh informer with a fresh list
    assert reg3.informer is not reg1.informer
    assert sorted(e.key for e in third.wait_for_count(3)) == ["default/w1", "default/w2", "default/w3"]
    fake.wait_for(lambda: fake.open_watches == 1)
    assert fake.list_calls == 2


def test_keys_are_independent(fake: FakeAPI, dyn: DynamicInformers) -> None:
    web, db = RecordingHandler(), RecordingHandler()
    reg_web = dyn.register(WEB, web)
    with dyn.register(DB, db) as reg_db:
        assert sorted(dyn.active_keys(), key=str) == [DB, WEB]
        fake.wait_for(lambda: fake.open_watches == 2)
        assert [e.key for e in db.wait_for_count(1)] == ["default/d1"]
        assert reg_db.informer.store.list_keys() == ["default/d1"]
    assert reg_db.released
    fake.wait_for(lambda: fake.open_watches == 1)
    assert dyn.active_keys() == [WEB]
    assert dyn.informer(WEB) is reg_web.informer and dyn.informer(DB) is None


def test_release_from_inside_the_handler(fake: FakeAPI, dyn: DynamicInformers) -> None:
    released, registered = threading.Event(), threading.Event()
    holder: list[object] = []

    def on_add(_obj: FrozenDict, _initial: bool) -> None:
        # the informer starts inside register() and delivers on its own thread: the first add
        # can arrive before register() has returned the registration to release
        assert registered.wait(5), "register() did not return"
        if not released.is_set():
            holder[0].release()  # type: ignore[attr-defined]
            released.set()

    holder.append(dyn.register(WEB, FuncHandler(add=on_add)))
    registered.set()
    assert released.wait(5)
    fake.wait_for(lambda: fake.open_watches == 0)
    assert dyn.active_keys() == []


def test_stop_all_stops_everything_and_releases(fake: FakeAPI, dyn: DynamicInformers) -> None:
    regs = [dyn.register(WEB, RecordingHandler()), dyn.register(DB, RecordingHandler()),
            dyn.register(WEB, RecordingHandler())]
    fake.wait_for(lambda: fake.open_watches == 2)
    dyn.stop_all()
    assert fake.open_watches == 0 and dyn.active_keys() == []
    assert all(r.released for r in regs)
    regs[0].release()  # harmless after stop_all
    assert dyn.refcount(WEB) == 0


def test_concurrent_register_and_release(fake: FakeAPI, dyn: DynamicInformers) -> None:
    errors: list[BaseException] = []

    def churn() -> None:
        try:
            for _ in range(10):
                dyn.register(WEB, RecordingHandler()).release()
        except BaseException as err:  # pragma: no cover - reported below
            errors.append(err)

    threads = [threading.Thread(target=churn) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors
    assert dyn.active_keys() == [] and dyn.refcount(WEB) == 0
    fake.wait_for(lambda: fake.open_watches == 0)


def test_lists_in_pages_of_the_page_size() -> None:
    # a relist holds one page of untransformed objects: the manager asks for small pages
    fake = FakeAPI([make_obj(f"p{i}", labels={"app": "web"}) for i in range(5)])
    d = DynamicInformers(fake.for_key, clock=FakeClock(), page_size=2)
    try:
        reg = d.register(WEB, RecordingHandler())
        fake.wait_for(lambda: fake.open_watches == 1)
        assert len(reg.informer.store.list()) == 5
        assert fake.list_calls == 3, "5 objects in pages of 2"
    finally:
        d.stop_all()
    with pytest.raises(ValueError, match="page_size"):
        DynamicInformers(fake.for_key, page_size=0)
