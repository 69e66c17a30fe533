"""One target snapshot per poll (issue 30): the poller's shortcut reads the cached target for the
collection it starts, and the reconcile that consumes the collection takes that snapshot instead of
reading the target again — unless the cache holds another object by then (a watch event replaced
it), in which case it reads the target as it is now, as before.

The handlers here are a manager's (``setup._handlers_of``: targets read from the watch cache), not
the harness's default (a GET per read, which never hands out the cached object).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest
from es_fakes import NS, Harness, deployment, external_metric, harness, metrics_trigger, scaler
from executor_fakes import ManualExecutor

from escaler.reconcilers.kit.setup import cache_reader
from escaler.runtime import Request
from escaler.targets.registry import default_registry

KEY = ("metrics", NS, "es")
ES = Request(NS, "es")


class _CountingHandlers:
    """The reconciler's handler lookup, counting ``read`` calls of the handlers it hands out."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.reads = 0
        self._wrapped: set[int] = set()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def handler_for(self, api_version: str, kind: str) -> Any:
        real = self._inner.handler_for(api_version, kind)
        if id(real) not in self._wrapped:
            read = real.read

            def counted(ns: str, ref: Any) -> Any:
                self.reads += 1
                return read(ns, ref)
            real.read = counted
            self._wrapped.add(id(real))
        return real


@pytest.fixture
def mx() -> ManualExecutor:
    return ManualExecutor()


@pytest.fixture
def h(mx: ManualExecutor) -> Iterator[Harness]:
    with harness(outbound=mx, poll_interval=30.0) as hh:
        yield hh


def _counting(h: Harness) -> _CountingHandlers:
    handlers = _CountingHandlers(default_registry(
        h.client, cache_get=cache_reader(h.cluster.mapper, h.es.watches)))  # type: ignore[arg-type]
    h.reconciler._d = dataclasses.replace(h.reconciler._d, handlers=handlers)
    return handlers


def _ready(h: Harness, mx: ManualExecutor) -> _CountingHandlers:
    handlers = _counting(h)
    h.api("deployments").create(deployment("web", 2))
    h.api("elasticscalers").create(scaler("es", metrics_trigger(external_metric("queue", "10"))))
    h.start()
    mx.start(h.es.controller.queue)
    h.collector.values["queue"] = 20.0
    h.reconcile("es")
    mx.complete(KEY)
    h.reconcile("es")
    h.settle()
    h.reconcile("es")  # the status write made a new resourceVersion: the reconciler has seen it
    h.wait_synced("deployments")
    return handlers


def test_an_idle_poll_reads_the_target_once(h: Harness, mx: ManualExecutor) -> None:
    handlers = _ready(h, mx)
    assert h.replicas() == 2
    for _ in range(3):
        h.clock.step(30.0)
        h.collector.values["queue"] = 20.0
        before, submitted = handlers.reads, len(mx.submitted)
        assert h.reconciler.poll(ES) is True
        mx.complete(KEY)
        h.reconciler.reconcile(ES)  # the one reconcile of this poll
        assert len(mx.submitted) == submitted + 1, "the reconcile consumed the poller's collection"
        assert handlers.reads - before == 1, "one target snapshot per poll"
    assert h.replicas() == 2


def test_a_poll_that_scales_reads_once_and_decides_as_before(h: Harness, mx: ManualExecutor) -> None:
    handlers = _ready(h, mx)
    h.clock.step(30.0)
    h.collector.values["queue"] = 50.0
    before = handlers.reads
    assert h.reconciler.poll(ES) is True
    mx.complete(KEY)
    h.reconciler.reconcile(ES)
    assert handlers.reads - before == 1
    assert h.replicas() == 4, "50 for a Value target of 10 wants 5; apa caps a step at x2 of 2"


def test_a_target_changed_after_the_poll_is_read_again(h: Harness, mx: ManualExecutor) -> None:
    handlers = _ready(h, mx)
    h.clock.step(30.0)
    h.collector.values["queue"] = 20.0
    assert h.reconciler.poll(ES) is True
    mx.complete(KEY)
    # someone scales the target between the poll's read and the consuming reconcile
    obj = h.api("deployments").get(f"{NS}/web")
    assert obj is not None
    obj["spec"]["replicas"] = 3
    h.api("deployments").update(obj)
    h.settle()  # and its rollout finishes
    h.wait_synced("deployments")
    before = handlers.reads
    h.reconciler.reconcile(ES)
    assert handlers.reads - before == 1, "the poll's snapshot is stale: the target is read afresh"
    # the decision saw the target as it is now: 20 for a Value target of 10 wants 2, down from 3
    # (on the poll's snapshot it would have found 2 already there and written nothing)
    assert h.replicas() == 2


def test_the_polled_snapshot_is_taken_once(h: Harness, mx: ManualExecutor) -> None:
    handlers = _ready(h, mx)
    h.clock.step(30.0)
    assert h.reconciler.poll(ES) is True
    mx.complete(KEY)
    h.reconciler.reconcile(ES)
    before = handlers.reads
    h.reconciler.reconcile(ES)  # an event-driven sync after the poll's: it reads the target
    assert handlers.reads - before == 1
