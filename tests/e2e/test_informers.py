"""The informers against the real API server: list+watch, 410 after an etcd compaction, and an
API server that dies for 10 s.

A ``SpyListerWatcher`` wraps the real ``ResourceListerWatcher`` to count LIST calls and record
the 410s the server answered, so each test proves the path it claims (relist vs. re-watch).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from escaler.errors import StatusError
from escaler.informers import (
    DeletedFinalStateUnknown,
    FuncHandler,
    ListResult,
    SharedInformer,
    WatchEvent,
)
from escaler.kube import ResourceListerWatcher, RestClient, RESTMapper, load_config, new_api_client

from .conftest import Cluster, eventually
from .proxy import TcpProxy

pytestmark = pytest.mark.e2e


@dataclass
class SpyListerWatcher:
    inner: ResourceListerWatcher
    # LIST calls made (a relist adds one)
    lists: int = 0
    # 410s seen, on watch open or as an ERROR event mid-stream
    gone: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def list(self, *, resource_version: str = "", limit: int | None = None,
             continue_: str | None = None) -> ListResult:
        if not continue_:
            with self.lock:
                self.lists += 1
        return self.inner.list(resource_version=resource_version, limit=limit, continue_=continue_)

    def watch(self, *, resource_version: str, timeout_seconds: int, allow_bookmarks: bool = True) -> Any:
        try:
            stream = self.inner.watch(resource_version=resource_version, timeout_seconds=timeout_seconds,
                                      allow_bookmarks=allow_bookmarks)
        except StatusError as e:
            if e.code == 410:
                with self.lock:
                    self.gone += 1
            raise
        spy = self

        class Stream:
            def __iter__(self) -> Iterator[WatchEvent]:
                for ev in stream:
                    if ev.type == "ERROR" and ev.object.get("code") == 410:
                        with spy.lock:
                            spy.gone += 1
                    yield ev

            def close(self) -> None:
                stream.close()

        return Stream()


@dataclass
class Recorder:
    events: list[tuple[str, str, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def handler(self) -> FuncHandler:
        def value(o: Any) -> str:
            return str((o.get("data") or {}).get("v", ""))

        def add(o: Any, initial: bool) -> None:
            with self.lock:
                self.events.append(("add", o["metadata"]["name"], value(o)))

        def update(old: Any, new: Any) -> None:
            with self.lock:
                self.events.append(("update", new["metadata"]["name"], value(new)))

        def delete(o: Any) -> None:
            obj = o.obj if isinstance(o, DeletedFinalStateUnknown) else o
            with self.lock:
                self.events.append(("delete", obj["metadata"]["name"], value(obj)))

        return FuncHandler(add=add, update=update, delete=delete)

    def snapshot(self) -> list[tuple[str, str, str]]:
        with self.lock:
            return list(self.events)


def informer_for(kubeconfig: Path, namespace: str) -> tuple[SharedInformer, SpyListerWatcher, Recorder]:
    rest = RestClient(new_api_client(load_config(str(kubeconfig)), pool_size=4))
    mapping = RESTMapper(rest).mapping_for("v1", "ConfigMap")
    spy = SpyListerWatcher(ResourceListerWatcher(rest, mapping, namespace=namespace))
    inf = SharedInformer(spy, name=f"configmaps/{namespace}")
    rec = Recorder()
    inf.add_event_handler(rec.handler())
    return inf, spy, rec


def cm(name: str, v: int) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name},
                       "data": {"v": str(v)}})


@pytest.fixture
def stop() -> Iterator[threading.Event]:
    ev = threading.Event()
    yield ev
    ev.set()


def cached(inf: SharedInformer, namespace: str) -> dict[str, str]:
    return {o["metadata"]["name"]: o["data"]["v"] for o in inf.store.list()
            if o["metadata"]["name"] != "kube-root-ca.crt"}


def test_informer_lists_then_watches_real_objects(cluster: Cluster, namespace: str,
                                                  stop: threading.Event) -> None:
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=cm("before", 1))
    inf, spy, rec = informer_for(cluster.kubeconfig, namespace)
    inf.start(stop)
    assert inf.wait_for_sync(30)
    assert cached(inf, namespace) == {"before": "1"}
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=cm("after", 2))
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=cm("before", 3))
    cluster.kubectl("delete", "configmap", "after", "-n", namespace)
    eventually(lambda: ("delete", "after", "2") in rec.snapshot(), what="delete event")
    evs = [e for e in rec.snapshot() if e[1] != "kube-root-ca.crt"]
    assert evs == [("add", "before", "1"), ("add", "after", "2"), ("update", "before", "3"),
                   ("delete", "after", "2")]
    assert cached(inf, namespace) == {"before": "3"}
    assert spy.lists == 1, "a healthy watch never relists"
    # the store equals what kubectl shows
    listed = cluster.kubectl_json("get", "configmaps", "-n", namespace)["items"]
    names = {i["metadata"]["name"] for i in listed}
    assert {o["metadata"]["name"] for o in inf.store.list()} == names


@pytest.mark.serial  # serial tier (docs/testing.md): it compacts etcd and restarts the API server
def test_compaction_gives_410_and_relist_loses_no_update(cluster: Cluster, namespace: str,
                                                         stop: threading.Event) -> None:
    local = cluster.require_local()
    for name, v in (("a", 0), ("c", 0)):
        cluster.kubectl("apply", "-n", namespace, "-f", "-", input=cm(name, v))
    proxy = TcpProxy("127.0.0.1", local.apiserver_port)
    try:
        kc = local.user_kubeconfig("informer", server=f"https://127.0.0.1:{proxy.port}")
        inf, spy, rec = informer_for(kc, namespace)
        inf.start(stop)
        assert inf.wait_for_sync(30)
        assert cached(inf, namespace) == {"a": "0", "c": "0"}
        # the informer's network goes away; meanwhile the world changes and etcd compacts it away
        proxy.pause()
        for v in range(1, 6):
            cluster.kubectl("apply", "-n", namespace, "-f", "-", input=cm("a", v))
        cluster.kubectl("apply", "-n", namespace, "-f", "-", input=cm("b", 1))
        cluster.kubectl("delete", "configmap", "c", "-n", namespace)
        local.etcd_compact()
        proxy.resume()
        eventually(lambda: cached(inf, namespace) == {"a": "5", "b": "1"}, timeout=60,
                   what="informer to converge after the 410")
        assert spy.gone >= 1, "the server must have answered 410 Gone for the compacted resourceVersion"
        assert spy.lists == 2, f"exactly one relist after the 410, saw {spy.lists} LISTs"
        evs = rec.snapshot()
        assert ("update", "a", "5") in evs, evs
        assert ("add", "b", "1") in evs, evs
        assert ("delete", "c", "0") in evs, "the vanished object is delivered as a (tombstone) delete"
    finally:
        proxy.close()


@pytest.mark.serial  # serial tier (docs/testing.md): it kills the API server
def test_informer_recovers_from_api_server_down_for_10s(cluster: Cluster, namespace: str,
                                                        stop: threading.Event) -> None:
    local = cluster.require_local()
    inf, _, rec = informer_for(cluster.kubeconfig, namespace)
    inf.start(stop)
    assert inf.wait_for_sync(30)
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=cm("x", 1))
    eventually(lambda: cached(inf, namespace) == {"x": "1"}, what="x cached")
    local.kill_apiserver()
    time.sleep(10)  # the scenario itself: the API server stays dead for 10 s
    local.restart_apiserver()
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=cm("x", 2))
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=cm("y", 1))
    eventually(lambda: cached(inf, namespace) == {"x": "2", "y": "1"}, timeout=60,
               what="informer to recover after the restart")
    assert ("update", "x", "2") in rec.snapshot()
