"""InformerFactory: one informer per key, start/sync/shutdown."""

from __future__ import annotations

import threading

import pytest
from fakeapi import FakeAPI, FakeView, make_obj

from escaler.clock import FakeClock
from escaler.errors import ConnectionFailure
from escaler.informers.factory import InformerFactory, ResourceKey

PODS = ResourceKey("", "v1", "pods")
PODS_NS = ResourceKey("", "v1", "pods", namespace="a")
PODS_WEB = ResourceKey("", "v1", "pods", label_selector="app=web")
DEPLOYS = ResourceKey("apps", "v1", "deployments")


@pytest.fixture
def fake() -> FakeAPI:
    return FakeAPI([make_obj("p1", "a", {"app": "web"}), make_obj("p2", "b", {"app": "db"})])


@pytest.mark.parametrize(
    ("first", "second", "same"),
    [
        (PODS, ResourceKey("", "v1", "pods"), True),
        (PODS, PODS_NS, False),
        (PODS, PODS_WEB, False),
        (PODS, DEPLOYS, False),
        (PODS, ResourceKey("", "v1", "pods", field_selector="spec.nodeName=n1"), False),
    ],
    ids=["equal-keys-share", "namespace-differs", "labels-differ", "resource-differs", "fields-differ"],
)
def test_informer_for_dedupes_by_key(fake: FakeAPI, first: ResourceKey, second: ResourceKey,
                                     same: bool) -> None:
    factory = InformerFactory(fake.for_key)
    assert (factory.informer_for(first) is factory.informer_for(second)) is same


@pytest.mark.parametrize(
    ("key", "text"),
    [(PODS, "v1/pods"), (DEPLOYS, "apps/v1/deployments"), (PODS_NS, "v1/pods ns=a"),
     (ResourceKey("", "v1", "pods", "a", "app=web", "x=y"), "v1/pods ns=a labels=app=web fields=x=y")],
    ids=["core", "grouped", "namespaced", "selectors"],
)
def test_resource_key_str(key: ResourceKey, text: str) -> None:
    assert str(key) == text


def test_start_sync_late_informer_and_shutdown(fake: FakeAPI) -> None:
    built: list[ResourceKey] = []

    def lw_factory(key: ResourceKey) -> FakeView:
        built.append(key)
        return fake.for_key(key)

    factory = InformerFactory(lw_factory, clock=FakeClock())
    pods = factory.informer_for(PODS)
    factory.informer_for(PODS)
    assert built == [PODS]
    stop = threading.Event()
    factory.start(stop)
    assert factory.wait_for_cache_sync(5.0)
    assert sorted(pods.store.list_keys()) == ["a/p1", "b/p2"]

    web = factory.informer_for(PODS_WEB)  # requested after start: not running yet
    assert not web.has_synced()
    factory.start(stop)  # starts only the new one
    assert factory.wait_for_cache_sync(5.0)
    assert web.store.list_keys() == ["a/p1"]
    fake.wait_for(lambda: fake.open_watches == 2)
    assert fake.list_calls == 2

    with pytest.raises(RuntimeError, match="set the stop event"):
        factory.shutdown()
    stop.set()
    factory.shutdown()
    assert fake.open_watches == 0
    assert pods.is_stopped() and web.is_stopped()
    with pytest.raises(RuntimeError, match="shut down"):
        factory.start(stop)


def test_wait_for_cache_sync_times_out(fake: FakeAPI) -> None:
    clock = FakeClock()
    fake.fail_next_list(*[ConnectionFailure("refused")] * 5)
    factory = InformerFactory(fake.for_key, clock=clock)
    factory.informer_for(PODS)
    stop = threading.Event()
    factory.start(stop)
    result: list[bool] = []
    waiter = threading.Thread(target=lambda: result.append(factory.wait_for_cache_sync(10.0)))
    waiter.start()
    clock.block_until_waiters(2)  # the reflector's backoff sleep and the sync waiter
    clock.step(10.0)
    waiter.join(5)
    assert result == [False]
    stop.set()
    factory.shutdown()


def test_default_resync_is_validated(fake: FakeAPI) -> None:
    with pytest.raises(ValueError, match="default_resync"):
        InformerFactory(fake.for_key, default_resync=-1.0)
