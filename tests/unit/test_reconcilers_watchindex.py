"""``WatchIndex``: one registration per watched resource whatever the number of scalers, an event
enqueues exactly the scalers that asked for that object, and dropping interest never blocks."""

from __future__ import annotations

import threading
from typing import Any

from escaler.informers.factory import ResourceKey
from escaler.informers.frozen import freeze
from escaler.reconcilers.kit.watchindex import ROLE_PODS, ROLE_TARGET, WatchIndex
from escaler.runtime.types import Request

DEPLOY = ResourceKey("apps", "v1", "deployments", namespace="team")
PODS = ResourceKey("", "v1", "pods", namespace="team")


class _Informer:
    def __init__(self) -> None:
        self.objects: dict[str, Any] = {}
        self.synced = True
        self.store = self

    def has_synced(self) -> bool:
        return self.synced

    def get_by_key(self, key: str) -> Any:
        return self.objects.get(key)

    def list(self) -> list[Any]:
        return list(self.objects.values())


class _Registration:
    def __init__(self, owner: _Registrar, key: ResourceKey, handler: Any) -> None:
        self.owner, self.key, self.handler = owner, key, handler
        self.informer = owner.informers.setdefault(key, _Informer())
        self.released = threading.Event()

    def has_synced(self) -> bool:
        return bool(self.informer.synced)

    def release(self) -> None:
        self.owner.gate.wait(5)  # a release that blocks (stopping an informer joins its thread)
        self.released.set()


class _Registrar:
    def __init__(self) -> None:
        self.registrations: list[_Registration] = []
        self.informers: dict[ResourceKey, _Informer] = {}
        self.gate = threading.Event()

    def register(self, key: ResourceKey, handler: Any) -> _Registration:
        reg = _Registration(self, key, handler)
        self.registrations.append(reg)
        return reg


class _Queue:
    def __init__(self) -> None:
        self.added: list[Request] = []

    def add(self, item: Request) -> None:
        self.added.append(item)


def _deploy(name: str) -> Any:
    return freeze({"metadata": {"name": name, "namespace": "team"}})


def test_one_registration_per_resource_for_a_fleet() -> None:
    reg, queue = _Registrar(), _Queue()
    idx = WatchIndex(reg)
    idx.start(queue)
    for i in range(1000):
        idx.want(Request("team", f"es-{i}"), ROLE_TARGET, DEPLOY, "team", f"web-{i % 10}")
        idx.want(Request("team", f"es-{i}"), ROLE_PODS, PODS)
    assert [r.key for r in reg.registrations] == [DEPLOY, PODS]
    # an event on web-3 wakes exactly the 100 scalers of web-3; a pod event wakes nobody
    reg.registrations[0].handler.on_update(_deploy("web-3"), _deploy("web-3"))
    assert sorted(queue.added) == sorted(Request("team", f"es-{i}") for i in range(3, 1000, 10))
    queue.added.clear()
    reg.registrations[1].handler.on_add(freeze({"metadata": {"name": "p", "namespace": "team"}}), False)
    assert queue.added == []


def test_changing_what_a_role_points_at_moves_the_interest() -> None:
    reg, queue = _Registrar(), _Queue()
    idx = WatchIndex(reg)
    idx.start(queue)
    me = Request("team", "es")
    idx.want(me, ROLE_TARGET, DEPLOY, "team", "a")
    idx.want(me, ROLE_TARGET, DEPLOY, "team", "b")
    handler = reg.registrations[0].handler
    handler.on_add(_deploy("a"), False)
    handler.on_add(_deploy("b"), False)
    assert queue.added == [me]
    assert len(reg.registrations) == 1


def test_releasing_the_last_interest_never_blocks_the_caller() -> None:
    reg, queue = _Registrar(), _Queue()
    idx = WatchIndex(reg)
    idx.start(queue)
    me = Request("team", "es")
    idx.want(me, ROLE_TARGET, DEPLOY, "team", "a")
    idx.release(me)  # the registration's release blocks until the gate opens: not on this thread
    assert idx.keys() == []
    assert not reg.registrations[0].released.is_set()
    reg.gate.set()
    assert reg.registrations[0].released.wait(5)


def test_reads_never_wait_for_a_cache_that_has_not_listed() -> None:
    reg = _Registrar()
    idx = WatchIndex(reg)
    me = Request("team", "es")
    idx.want(me, ROLE_TARGET, DEPLOY, "team", "a")
    informer = reg.informers[DEPLOY]
    informer.synced = False
    informer.objects["team/a"] = _deploy("a")
    assert (idx.synced(DEPLOY), idx.cached(DEPLOY, "team", "a"), idx.listed(DEPLOY)) == (False, None, None)
    informer.synced = True
    assert idx.cached(DEPLOY, "team", "a") == _deploy("a")


def test_an_object_read_by_one_scaler_holds_the_scaler_not_a_set() -> None:
    """Memory per scaler (issue 30): most objects are read by one scaler, and a one-member set
    costs 216 bytes; the index keeps the scaler itself until a second asks for the same object,
    goes back to it when one is left, and an event wakes exactly the scalers that asked."""
    reg, queue = _Registrar(), _Queue()
    idx = WatchIndex(reg)
    idx.start(queue)
    a, b = Request("team", "a"), Request("team", "b")
    idx.want(a, ROLE_TARGET, DEPLOY, "team", "web")
    idx.want(a, ROLE_PODS, PODS)
    assert idx._index[DEPLOY] == {"team/web": a}
    assert [w.role for w in idx._wants[a]] == [ROLE_PODS, ROLE_TARGET]
    reg.registrations[0].handler.on_add(_deploy("web"), False)
    assert queue.added == [a]
    idx.want(b, ROLE_TARGET, DEPLOY, "team", "web")
    assert idx._index[DEPLOY] == {"team/web": {a, b}}
    queue.added.clear()
    reg.registrations[0].handler.on_update(_deploy("web"), _deploy("web"))
    assert sorted(queue.added, key=str) == [a, b]
    idx.drop(a, ROLE_TARGET)
    assert idx._index[DEPLOY] == {"team/web": b}
    assert [w.role for w in idx._wants[a]] == [ROLE_PODS]
    idx.want(b, ROLE_TARGET, DEPLOY, "team", "web")  # unchanged: idempotent
    assert idx._index[DEPLOY] == {"team/web": b}
    idx.release(b)
    assert b not in idx._wants and DEPLOY not in idx._index


def test_every_want_of_a_resource_holds_one_key_object_and_it_goes_with_the_last() -> None:
    """Memory per scaler (issue 30): each reconcile builds its keys afresh (56 bytes each, two wants
    a scaler); the index keeps one key object per watched resource, forgotten with its registration."""
    reg, queue = _Registrar(), _Queue()
    idx = WatchIndex(reg)
    idx.start(queue)
    fleet = [Request("team", f"es-{i}") for i in range(3)]
    for i, scaler in enumerate(fleet):
        fresh = ResourceKey("apps", "v1", "deployments", namespace="team")
        idx.want(scaler, ROLE_TARGET, fresh, "team", f"w{i}")
    keys = {id(w.key) for scaler in fleet for w in idx._wants[scaler]}
    assert len(keys) == 1 and idx._keys == {DEPLOY: DEPLOY}
    for scaler in fleet:
        idx.release(scaler)
    assert idx._keys == {} and idx.keys() == []
    idx.want(fleet[0], ROLE_TARGET, DEPLOY, "team", "w0")  # watched again: registered again
    assert idx._keys == {DEPLOY: DEPLOY} and len(reg.registrations) == 2
