"""escaler.kube.events: Event bodies, series aggregation with coalesced writes, spam filter, failures."""

from __future__ import annotations

import re
import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes.client import Configuration
from test_kube_fakeapi import FakeAPI, Reply, Req, status

from escaler.clock import FakeClock
from escaler.kube.config import new_api_client
from escaler.kube.discovery import RESTMapper
from escaler.kube.dynamic import DynamicClient
from escaler.kube.events import (
    MAX_NOTE_BYTES,
    EventRecorder,
    FakeRecorder,
    RecordedEvent,
    micro_time,
    object_reference,
)
from escaler.kube.rest import RestClient

EVENTS = "/apis/events.k8s.io/v1/namespaces/ns1/events"
WIDGET = {"apiVersion": "example.com/v1", "kind": "Widget",
          "metadata": {"name": "w1", "namespace": "ns1", "uid": "uid-1", "resourceVersion": "42",
                       "labels": {"a": "b"}}}
OTHER = {"apiVersion": "example.com/v1", "kind": "Widget",
         "metadata": {"name": "w2", "namespace": "ns1", "uid": "uid-2"}}


@pytest.fixture
def api() -> Iterator[FakeAPI]:
    with FakeAPI() as a:
        yield a


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def make(api: FakeAPI, clock: FakeClock) -> Iterator[Callable[..., EventRecorder]]:
    made: list[EventRecorder] = []

    def build(client: Any = None, **kw: Any) -> EventRecorder:
        rec = EventRecorder(client or api.rest(), component="escaler", instance="pod-0", clock=clock, **kw)
        made.append(rec)
        return rec

    yield build
    for r in made:
        r.stop(timeout=2)


def creates(api: FakeAPI) -> list[Req]:
    return api.reqs("POST", "/apis/events.k8s.io/")


def patches(api: FakeAPI) -> list[Req]:
    return api.reqs("PATCH", "/apis/events.k8s.io/")


def test_created_event_body(api: FakeAPI, make: Callable[..., EventRecorder], clock: FakeClock) -> None:
    rest = api.rest()
    rec = make(DynamicClient(rest, RESTMapper(rest)))
    related = {"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "ns1", "name": "web"}
    rec.event(WIDGET, "Normal", "Scaled", "Scale", "scaled web from 2 to 3", related=related)
    assert rec.flush(5)

    (req,) = creates(api)
    assert req.path == EVENTS
    body = req.body
    assert re.fullmatch(r"w1\.[0-9a-f]+", body["metadata"]["name"])
    assert body == {
        "apiVersion": "events.k8s.io/v1", "kind": "Event",
        "metadata": {"name": body["metadata"]["name"], "namespace": "ns1"},
        "eventTime": "2026-01-01T00:00:00.000000Z",
        "reportingController": "escaler", "reportingInstance": "pod-0",
        "action": "Scale", "reason": "Scaled", "note": "scaled web from 2 to 3", "type": "Normal",
        "regarding": {"apiVersion": "example.com/v1", "kind": "Widget", "namespace": "ns1", "name": "w1",
                      "uid": "uid-1", "resourceVersion": "42"},
        "related": related,
    }
    assert patches(api) == []


def test_cluster_scoped_object_events_go_to_default(api: FakeAPI, make: Callable[..., EventRecorder]) -> None:
    rec = make()
    node_ref = {"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "u"}
    rec.event(node_ref, "Warning", "NotReady", "Check", "x")
    assert rec.flush(5)
    (req,) = creates(api)
    assert req.path == "/apis/events.k8s.io/v1/namespaces/default/events"
    assert req.body["regarding"] == {"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "u"}


def test_note_is_truncated_to_1024_bytes(api: FakeAPI, make: Callable[..., EventRecorder]) -> None:
    rec = make()
    rec.event(WIDGET, "Warning", "Failed", "Reconcile", "é" * 600 + "tail")  # 1204 bytes
    assert rec.flush(5)
    note = creates(api)[0].body["note"]
    assert len(note.encode()) == MAX_NOTE_BYTES
    assert note == "é" * 512


def test_hot_loop_is_one_create_and_bounded_series_patches(
    api: FakeAPI, make: Callable[..., EventRecorder], clock: FakeClock
) -> None:
    rec = make()
    for _ in range(100):
        rec.event(WIDGET, "Warning", "FailedGetMetrics", "Scale", "metrics API unavailable")
    assert rec.flush(5)
    assert (len(creates(api)), len(patches(api))) == (1, 0)  # within the heartbeat: nothing more yet

    clock.step(30)
    assert rec.flush(5)
    (first,) = patches(api)
    assert first.path == EVENTS + "/" + creates(api)[0].body["metadata"]["name"]
    assert first.body == {"series": {"count": 100, "lastObservedTime": "2026-01-01T00:00:00.000000Z"}}

    for _ in range(120):  # two minutes of one event per second
        clock.step(1)
        rec.event(WIDGET, "Warning", "FailedGetMetrics", "Scale", "metrics API unavailable")
        assert rec.flush(5)
    clock.step(30)  # the final count lands one heartbeat after the last occurrence
    assert rec.flush(5)

    ps = patches(api)
    assert len(creates(api)) == 1
    assert 5 <= len(ps) <= 6  # one per 30 s: t=30, 60, 90, 120, 150 and the final flush
    counts = [p.body["series"]["count"] for p in ps]
    assert counts == sorted(counts)
    assert counts[-1] == 220
    assert ps[-1].body["series"]["lastObservedTime"] == "2026-01-01T00:02:30.000000Z"


def test_series_ends_after_six_quiet_minutes(
    api: FakeAPI, make: Callable[..., EventRecorder], clock: FakeClock
) -> None:
    rec = make()
    rec.event(WIDGET, "Normal", "Scaled", "Scale", "same")
    clock.step(360)
    rec.event(WIDGET, "Normal", "Scaled", "Scale", "same")  # exactly at the window edge: same series
    assert rec.flush(5)
    clock.step(361)
    rec.event(WIDGET, "Normal", "Scaled", "Scale", "same")
    assert rec.flush(5)
    names = [r.body["metadata"]["name"] for r in creates(api)]
    assert len(names) == 2 and names[0] != names[1]


@pytest.mark.parametrize(
    ("second", "same_series"),
    [
        ((WIDGET, "Normal", "Scaled", "Scale", "n"), True),
        ({**WIDGET, "metadata": {**WIDGET["metadata"], "resourceVersion": "43"}}, True),
        ((WIDGET, "Warning", "Scaled", "Scale", "n"), False),
        ((WIDGET, "Normal", "Other", "Scale", "n"), False),
        ((WIDGET, "Normal", "Scaled", "Other", "n"), False),
        ((WIDGET, "Normal", "Scaled", "Scale", "different note"), False),
        ((OTHER, "Normal", "Scaled", "Scale", "n"), False),
    ],
    ids=["identical", "newer-resource-version", "type", "reason", "action", "note", "object"],
)
def test_isomorphism_key(api: FakeAPI, make: Callable[..., EventRecorder], clock: FakeClock,
                         second: Any, same_series: bool) -> None:
    rec = make()
    rec.event(WIDGET, "Normal", "Scaled", "Scale", "n")
    args = second if isinstance(second, tuple) else (second, "Normal", "Scaled", "Scale", "n")
    rec.event(*args)
    assert rec.flush(5)
    clock.step(30)
    assert rec.flush(5)
    assert (len(creates(api)), len(patches(api))) == ((1, 1) if same_series else (2, 0))


def test_spam_filter_limits_distinct_events_per_object(
    api: FakeAPI, make: Callable[..., EventRecorder], clock: FakeClock
) -> None:
    rec = make()
    for i in range(30):
        rec.event(WIDGET, "Normal", f"Reason{i}", "Act", "n")
    rec.event(OTHER, "Normal", "Reason0", "Act", "n")  # another object has its own bucket
    rec.event(WIDGET, "Normal", "Reason0", "Act", "n")  # a repeat of a live series is not charged
    assert rec.flush(5)
    assert len(creates(api)) == 26
    assert rec.spam_filtered == 5

    clock.step(300)  # one token refilled
    rec.event(WIDGET, "Normal", "Late1", "Act", "n")
    rec.event(WIDGET, "Normal", "Late2", "Act", "n")
    assert rec.flush(5)
    assert len(creates(api)) == 27
    assert rec.spam_filtered == 6


def test_api_failures_are_logged_not_raised(api: FakeAPI, make: Callable[..., EventRecorder]) -> None:
    api.on("POST", EVENTS, lambda r: Reply(500, status(500, "InternalError", "etcd down")))
    rec = make()
    rec.event(WIDGET, "Normal", "Scaled", "Scale", "n")
    assert rec.flush(5)
    assert rec.write_failures == 1
    # the failed Event is forgotten, so the next occurrence tries a fresh create
    rec.event(WIDGET, "Normal", "Scaled", "Scale", "n")
    assert rec.flush(5)
    assert len(creates(api)) == 2
    assert rec.write_failures == 2


def test_unreachable_server_is_not_raised(make: Callable[..., EventRecorder]) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    client = new_api_client(Configuration(host=f"http://127.0.0.1:{port}"), pool_size=1)
    try:
        rec = make(RestClient(client))
        rec.event(WIDGET, "Normal", "Scaled", "Scale", "n")
        assert rec.flush(10)
        assert rec.write_failures == 1
    finally:
        client.close()


def test_full_queue_drops_and_counts(api: FakeAPI, make: Callable[..., EventRecorder]) -> None:
    entered, unblock = threading.Event(), threading.Event()

    def slow_create(r: Req) -> Reply:
        entered.set()
        unblock.wait(10)
        return Reply(201, r.body)

    api.on("POST", EVENTS, slow_create)
    rec = make(queue_size=2)
    rec.event(WIDGET, "Normal", "R0", "A", "n")
    assert entered.wait(5)  # the writer is busy with R0
    for i in range(1, 4):
        rec.event(WIDGET, "Normal", f"R{i}", "A", "n")  # returns at once even though the API is stuck
    assert rec.dropped == 1
    unblock.set()
    assert rec.flush(5)
    assert [r.body["reason"] for r in creates(api)] == ["R0", "R1", "R2"]


def test_series_patch_on_a_vanished_event_recreates_it(
    api: FakeAPI, make: Callable[..., EventRecorder], clock: FakeClock
) -> None:
    rec = make()
    rec.event(WIDGET, "Normal", "Scaled", "Scale", "n")
    assert rec.flush(5)
    with api.lock:
        api.objects.clear()  # the Event's TTL expired on the server
    rec.event(WIDGET, "Normal", "Scaled", "Scale", "n")
    clock.step(30)
    assert rec.flush(5)
    assert len(patches(api)) == 1
    first, again = creates(api)
    assert again.body["metadata"]["name"] == first.body["metadata"]["name"]
    assert again.body["series"] == {"count": 2, "lastObservedTime": "2026-01-01T00:00:00.000000Z"}


def test_stop_writes_pending_counts_then_drops(api: FakeAPI, make: Callable[..., EventRecorder]) -> None:
    rec = make()
    for _ in range(6):
        rec.event(WIDGET, "Normal", "Scaled", "Scale", "n")
    assert rec.flush(5)
    assert patches(api) == []
    rec.stop(timeout=5)
    (p,) = patches(api)
    assert p.body["series"]["count"] == 6
    rec.event(WIDGET, "Normal", "Scaled", "Scale", "n")
    assert rec.dropped == 1


@pytest.mark.parametrize(
    "kwargs",
    [{"component": ""}, {"instance": "x" * 129}, {"burst": 0}, {"qps": 0}, {"queue_size": 0},
     {"heartbeat": 0}, {"heartbeat": 400}],
    ids=["empty-component", "long-instance", "zero-burst", "zero-qps", "zero-queue", "zero-heartbeat",
         "heartbeat-beyond-window"],
)
def test_recorder_validates(api: FakeAPI, kwargs: dict[str, Any]) -> None:
    args: dict[str, Any] = {"component": "c", "instance": "i", **kwargs}
    with pytest.raises(ValueError):
        EventRecorder(api.rest(), **args)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        ((WIDGET, "Info", "R", "A", "n"), "Normal"),
        ((WIDGET, "Normal", "", "A", "n"), "reason"),
        (({"kind": "Widget"}, "Normal", "R", "A", "n"), "kind and name"),
    ],
    ids=["bad-type", "empty-reason", "regarding-without-name"],
)
def test_fake_recorder_records_and_validates(args: tuple[Any, ...], needle: str) -> None:
    fake = FakeRecorder()
    fake.event(WIDGET, "Normal", "Scaled", "Scale", "n")
    assert fake.events == [RecordedEvent(object_reference(WIDGET), "Normal", "Scaled", "Scale", "n")]
    assert fake.reasons() == ["Scaled"]
    with pytest.raises(ValueError, match=needle):
        fake.event(*args)
    assert fake.flush() is True


def test_micro_time_format(clock: FakeClock) -> None:
    clock.step(1.25)
    assert micro_time(clock.now()) == "2026-01-01T00:00:01.250000Z"


def _widget(i: int) -> dict[str, Any]:
    return {"apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": f"c{i}", "namespace": "ns1", "uid": f"uid-c{i}"}}


def test_a_churning_fleet_does_not_fill_the_recorder(
    api: FakeAPI, make: Callable[..., EventRecorder], clock: FakeClock
) -> None:
    """Objects created and deleted, one Event each, one a second for 2,000 s (issue 15's churn):
    the recorder keeps the series of the last window and the buckets not yet refilled, not one
    of each per object ever seen (client-go's LRU alone would keep all 2,000, up to 4,096)."""
    rec = make()
    most = (0, 0)
    for i in range(2000):
        rec.event(_widget(i), "Warning", "TargetNotFound", "Scale", "target not found")
        clock.step(1)
        if i % 100 == 99:
            assert rec.flush(5)
        most = max(most, rec.tracked())
    assert rec.flush(5)
    series, buckets = rec.tracked()
    # a series lives a window (360 s) after its one occurrence; a bucket that spent one token
    # refills in 300 s and is swept once the buckets have doubled since the last sweep
    assert series <= 362, rec.tracked()
    assert buckets <= 2 * 301 + 1, rec.tracked()
    assert most[1] <= 2 * 301 + 1, most
    assert len(creates(api)) == 2000 and rec.spam_filtered == 0


def test_a_sweep_keeps_the_buckets_that_still_filter(
    api: FakeAPI, make: Callable[..., EventRecorder], clock: FakeClock
) -> None:
    rec = make()
    for i in range(26):  # 25 created, the 26th filtered: WIDGET's bucket is empty
        rec.event(WIDGET, "Normal", f"Reason{i}", "Act", "n")
    clock.step(1)
    for i in range(600):  # new objects past the sweep floor: sweeps run, the full buckets go
        rec.event(_widget(i), "Normal", "Made", "Act", "n")
        if i % 100 == 99:
            assert rec.flush(5)
    rec.event(WIDGET, "Normal", "Reason99", "Act", "n")  # still filtered: its bucket survived
    assert rec.flush(5)
    assert rec.spam_filtered == 2
    assert len(creates(api)) == 25 + 600
