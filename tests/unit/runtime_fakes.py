"""Shared fakes for the escaler.runtime unit tests (no tests here).

* ``FakeMapper``: a RESTMapper stand-in over a fixed table of ``ResourceMapping``s.
* ``FakeCluster``: one ``fakeapi.FakeAPI`` per resource, an ``lw_factory`` for the manager, and a
  thread-safe ``log`` of list calls (``"list:<resource>"``) for start-order assertions.
* ``FlakyLeaseClient``: an ``InMemoryLeaseClient`` with scripted failures and a call log.
* ``SpyQueue``: a ``RateLimitingQueue[Request]`` recording the calls a controller makes.
* ``step_until``: step a ``FakeClock`` until a cross-thread predicate holds (bounded).
* ``http_get``: one GET on the loopback interface.
"""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any

from fakeapi import FakeAPI
from lease_fakes import InMemoryLeaseClient

from escaler.clock import FakeClock
from escaler.errors import StatusError
from escaler.informers.factory import ResourceKey
from escaler.informers.interfaces import ListerWatcher, ListResult, WatchStream
from escaler.kube.discovery import ResourceMapping
from escaler.runtime.types import Request
from escaler.workqueue.ratelimiting import RateLimitingQueue

CONFIGMAPS = ResourceMapping("", "v1", "configmaps", "ConfigMap", True)
DEPLOYMENTS = ResourceMapping("apps", "v1", "deployments", "Deployment", True)
NODES = ResourceMapping("", "v1", "nodes", "Node", False)
SCALERS = ResourceMapping("escaler.io", "v1alpha1", "elasticscalers", "ElasticScaler", True)
# what the ElasticScaler controller registered by ``escaler manager`` resolves at setup
ES_SCALERS = ResourceMapping("elasticscaler.io", "v1alpha1", "elasticscalers", "ElasticScaler", True,
                             frozenset({"status"}))
HPAS = ResourceMapping("autoscaling", "v2", "horizontalpodautoscalers", "HorizontalPodAutoscaler", True,
                       frozenset({"status"}))
ALL_MAPPINGS = (CONFIGMAPS, DEPLOYMENTS, NODES, SCALERS, ES_SCALERS, HPAS)


class FakeMapper:
    def __init__(self, mappings: tuple[ResourceMapping, ...] = ALL_MAPPINGS) -> None:
        self._by_kind = {(m.api_version, m.kind): m for m in mappings}

    def mapping_for(self, api_version: str, kind: str) -> ResourceMapping:
        found = self._by_kind.get((api_version, kind))
        if found is None:
            raise StatusError(404, "NotFound", f"no resource for kind {kind} in apiVersion {api_version}")
        return found


class _LoggingLW:
    def __init__(self, cluster: FakeCluster, resource: str, lw: ListerWatcher) -> None:
        self._cluster = cluster
        self._resource = resource
        self._lw = lw

    def list(self, *, resource_version: str = "", limit: int | None = None,
             continue_: str | None = None) -> ListResult:
        self._cluster.record(f"list:{self._resource}")
        return self._lw.list(resource_version=resource_version, limit=limit, continue_=continue_)

    def watch(self, *, resource_version: str, timeout_seconds: int,
              allow_bookmarks: bool = True) -> WatchStream:
        return self._lw.watch(resource_version=resource_version, timeout_seconds=timeout_seconds,
                              allow_bookmarks=allow_bookmarks)


class FakeCluster:
    """One FakeAPI per resource name; ``lw_factory`` serves the manager's informers from them."""

    def __init__(self) -> None:
        self.apis: dict[str, FakeAPI] = {m.resource: FakeAPI() for m in ALL_MAPPINGS}
        self._mu = threading.Lock()
        self.log: list[str] = []
        self.keys: list[ResourceKey] = []
        # called (if set) on every list, before serving it
        self.on_list: Callable[[str], None] | None = None

    def record(self, entry: str) -> None:
        hook = self.on_list
        if hook is not None and entry.startswith("list:"):
            hook(entry)
        with self._mu:
            self.log.append(entry)

    def snapshot(self) -> list[str]:
        with self._mu:
            return list(self.log)

    def lw_factory(self, key: ResourceKey) -> ListerWatcher:
        with self._mu:
            self.keys.append(key)
        return _LoggingLW(self, key.resource, self.apis[key.resource].for_key(key))


class FlakyLeaseClient(InMemoryLeaseClient):
    """In-memory Leases with scripted failures: ``fail_all`` (every call raises), or one-shot
    errors queued per method; every call is appended to ``calls``."""

    def __init__(self, on_call: Callable[[str], None] | None = None) -> None:
        super().__init__()
        self.fail_all: BaseException | None = None
        self.next_errors: dict[str, list[BaseException]] = {"get": [], "create": [], "update": []}
        self.calls: list[str] = []
        self._on_call = on_call
        self._flaky_mu = threading.Lock()

    def _enter(self, method: str) -> None:
        if self._on_call is not None:
            self._on_call(method)
        with self._flaky_mu:
            self.calls.append(method)
            if self.fail_all is not None:
                raise self.fail_all
            queued = self.next_errors[method]
            if queued:
                raise queued.pop(0)

    def get(self, namespace: str, name: str, *, timeout: float | None = None) -> dict[str, Any] | None:
        self._enter("get")
        return super().get(namespace, name, timeout=timeout)

    def create(self, obj: dict[str, Any], *, timeout: float | None = None) -> dict[str, Any]:
        self._enter("create")
        return super().create(obj, timeout=timeout)

    def update(self, obj: dict[str, Any], *, timeout: float | None = None) -> dict[str, Any]:
        self._enter("update")
        return super().update(obj, timeout=timeout)


class SpyQueue(RateLimitingQueue[Request]):
    """Records forget/add_after/add_rate_limited calls (after they took effect)."""

    def __init__(self, clock: FakeClock, name: str = "") -> None:
        super().__init__(name=name, clock=clock)
        self._spy_mu = threading.Lock()
        self.calls: list[tuple[Any, ...]] = []
        # per thread: inside add_rate_limited (whose add_after is not logged separately)
        self._tl = threading.local()

    def _log(self, *call: Any) -> None:
        with self._spy_mu:
            self.calls.append(call)

    def snapshot(self) -> list[tuple[Any, ...]]:
        with self._spy_mu:
            return list(self.calls)

    def forget(self, item: Request) -> None:
        super().forget(item)
        self._log("forget", item)

    def add_after(self, item: Request, delay_seconds: float) -> None:
        super().add_after(item, delay_seconds)
        if not getattr(self._tl, "in_rate_limited", False):
            self._log("add_after", item, delay_seconds)

    def add_rate_limited(self, item: Request) -> None:
        self._tl.in_rate_limited = True
        try:
            super().add_rate_limited(item)
        finally:
            self._tl.in_rate_limited = False
        self._log("add_rate_limited", item)


# How long step_until waits (real time) for the threads a step woke to park on the clock again
# before it steps anyway (they may have exited instead, or be blocked on something else). The wait
# ends as soon as they park, so this costs nothing when they do; it must outlast a thread's
# scheduling delay on a loaded machine: at 0.05 s, a unit run at nice 19 beside a benchmark saw
# test_preferred_candidate_wins_and_a_standby_waits_a_full_lease_duration step 270 s past a
# takeover its elector thread had not been scheduled to make.
STEP_SETTLE_SECONDS = 0.5


def step_until(clock: FakeClock, predicate: Callable[[], bool], *, step: float = 0.5,
               timeout: float = 10.0, what: str = "condition") -> None:
    """Step ``clock`` by ``step`` until ``predicate()`` holds (cross-thread; real-time bounded).

    After each step it waits until as many waiters are parked on the clock as before the step
    (every thread the step woke has run and parked again), or ``STEP_SETTLE_SECONDS`` pass, so
    the system reacts to each step before the next one; a step that wakes nobody is followed by
    the next at once. No fixed sleeps: the wait ends as soon as the clock is settled.
    """
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() >= deadline:
            raise TimeoutError(f"step_until: {what} not met within {timeout}s (clock {clock.monotonic()})")
        parked = clock.waiters()
        clock.step(step)
        clock.wait_for_waiters(parked, STEP_SETTLE_SECONDS)


def http_get(port: int, path: str, timeout: float = 5.0) -> tuple[int, str, Mapping[str, str]]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as resp:
            return resp.status, resp.read().decode(), dict(resp.headers)
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode(), dict(err.headers)
