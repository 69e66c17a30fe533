"""A waiting candidate watches the Lease (``escaler.runtime.leasewatch``): a renewal is observed as it
arrives, so a dead leader is replaced ``lease_duration`` after its last renewal, not up to a jittered
retry period later; the watch ends before leading and reopens after a broken stream. FakeClock."""

from __future__ import annotations

import logging
import queue
import random
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fakeapi import wait_until
from lease_fakes import InMemoryLeaseClient

from escaler.clock import FakeClock
from escaler.runtime.leaderelection import LeaderElectionConfig, LeaderElector
from escaler.runtime.leaselock import KubeLeaseClient, LeaderElectionRecord, LeaseLock
from escaler.runtime.leasewatch import LeaseWatcher, lease_watcher, record_of

NS, NAME = "ops", "escaler-manager"
_END = object()


class MaxJitter(random.Random):
    def random(self) -> float:
        return 0.999  # retry waits of 4.3976 s: a poll-only standby sees a renewal up to 4.4 s late


class StreamingLeaseClient(InMemoryLeaseClient):
    """The in-memory store plus a watch: each open sends the current Lease (ADDED), then what
    ``push`` hands it; ``consumed`` counts events the reader has finished with."""

    def __init__(self) -> None:
        super().__init__()
        self.events: queue.Queue[object] = queue.Queue()
        self.consumed = 0
        self.opens = 0
        self.closed = threading.Event()
        self.fail_opens = 0

    def stream(self, namespace: str, name: str, *,
               timeout_seconds: int) -> tuple[Iterator[dict[str, Any]], Callable[[], None]]:
        assert (namespace, name, timeout_seconds) == (NS, NAME, 300)
        self.opens += 1
        if self.fail_opens:
            self.fail_opens -= 1
            raise ConnectionError("connection refused")
        current = self.get(NS, NAME)

        def events() -> Iterator[dict[str, Any]]:
            if current is not None:
                yield {"type": "ADDED", "object": current}
                self.consumed += 1
            while True:
                item = self.events.get()
                if item is _END:
                    return
                assert isinstance(item, dict)
                yield item
                self.consumed += 1

        def close() -> None:
            self.closed.set()
            self.events.put(_END)

        return events(), close

    def renew(self, holder: str, renew_time: str) -> dict[str, Any]:
        """The holder's renewal: written to the store and sent on the watch."""
        lease = self.get(NS, NAME)
        assert lease is not None
        lease["spec"] = {**lease["spec"], "holderIdentity": holder, "renewTime": renew_time}
        stored = InMemoryLeaseClient.update(self, lease)
        self.events.put({"type": "MODIFIED", "object": stored})
        return stored


def put_lease(client: InMemoryLeaseClient, holder: str, when: str) -> None:
    InMemoryLeaseClient.create(client, {
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": NAME, "namespace": NS},
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15, "acquireTime": when,
                 "renewTime": when, "leaseTransitions": 1}})


def elector(client: StreamingLeaseClient, clock: FakeClock, started: threading.Event) -> LeaderElector:
    config = LeaderElectionConfig(name=NAME, namespace=NS, identity="b")
    return LeaderElector(config, LeaseLock(client, NS, NAME), clock=clock, rng=MaxJitter(),
                         on_started_leading=started.set, watcher=lease_watcher(client, config, clock))


def run(e: LeaderElector) -> tuple[threading.Event, threading.Thread]:
    stop = threading.Event()
    t = threading.Thread(target=e.run, args=(stop,), daemon=True)
    t.start()
    return stop, t


def test_a_watching_standby_takes_over_lease_duration_after_the_last_renewal_it_saw() -> None:
    client, clock, started = StreamingLeaseClient(), FakeClock(), threading.Event()
    put_lease(client, "a", "2026-01-01T00:00:00.000000Z")
    e = elector(client, clock, started)
    stop, t = run(e)
    try:
        clock.block_until_waiters(1)  # read at t=0, parked until 4.3976; the watch sent the Lease
        wait_until(lambda: client.consumed >= 1, what="the ADDED event read")
        clock.step(3.0)
        client.renew("a", "2026-01-01T00:00:03.000000Z")  # the last renewal before "a" dies, at t=3
        wait_until(lambda: client.consumed >= 2, what="the renewal observed through the watch")
        # a poll-only standby would observe it at its read at t=4.3976 and take over at 19.3976;
        # watching, it counts from t=3 and takes over at 18.0
        clock.block_until_waiters(1)
        clock.step(18.0 - 3.0 - 0.01)
        for _ in range(10):  # every wait until t=17.99 runs out; none of them is a takeover
            clock.block_until_waiters(1)
            if min(clock.deadlines()) > clock.monotonic():
                break
        assert not started.is_set() and not e.is_leader()
        clock.step(0.01)
        assert started.wait(5), "the watching standby did not take the lease at t=18"
        assert client.get(NS, NAME)["spec"]["holderIdentity"] == "b"  # type: ignore[index]
        # the watch ended before leading: a late event cannot move the leader's observation
        assert client.closed.wait(5)
        opened = client.opens
        client.events.put({"type": "MODIFIED", "object": {"kind": "Lease", "spec": {"holderIdentity": "x"}}})
        clock.block_until_waiters(1)
        clock.step(2.0)  # the first renewal
        wait_until(lambda: client.get(NS, NAME)["spec"]["renewTime"]  # type: ignore[index]
                   == "2026-01-01T00:00:20.000000Z", what="renewal at t=20")
        assert e.is_leader() and e.get_leader() == "b" and client.opens == opened
    finally:
        stop.set()
        t.join(5)
    assert not t.is_alive()


def test_the_watcher_reopens_a_stream_that_failed_after_the_retry_period(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="escaler.runtime.leasewatch")
    client, clock = StreamingLeaseClient(), FakeClock()
    put_lease(client, "a", "2026-01-01T00:00:00.000000Z")
    client.fail_opens = 2
    seen: list[LeaderElectionRecord] = []
    watcher = LeaseWatcher(client, NS, NAME, clock=clock, retry_period=2.0)
    stop = threading.Event()
    t = threading.Thread(target=watcher.run, args=(stop, seen.append), daemon=True)
    t.start()
    try:
        for opens in (1, 2):  # each failed open waits retry_period
            clock.block_until_waiters(1)
            assert client.opens == opens and seen == []
            clock.step(2.0)
        wait_until(lambda: len(seen) == 1, what="the Lease from the reopened stream")
        assert seen[0].holder_identity == "a" and client.opens == 3
        # the first failure is a warning naming the Lease and the fallback; the repeat is debug
        levels = [(r.levelname, r.getMessage()) for r in caplog.records]
        assert levels[0][0] == "WARNING" and f"watch of lease {NS}/{NAME} failed (connection refused)" \
            in levels[0][1] and "relying on reads" in levels[0][1]
        assert [lv for lv, _ in levels] == ["WARNING", "DEBUG"]
    finally:
        stop.set()
        watcher.close()
        t.join(5)
    assert not t.is_alive()


def test_only_added_and_modified_leases_are_records() -> None:
    lease = {"kind": "Lease", "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15}}
    assert record_of({"type": "ADDED", "object": lease}) == LeaderElectionRecord("a", 15)
    assert record_of({"type": "MODIFIED", "object": lease}) == LeaderElectionRecord("a", 15)
    for kind in ("DELETED", "BOOKMARK", "ERROR"):
        assert record_of({"type": kind, "object": lease}) is None
    assert record_of({"type": "ERROR", "object": {"kind": "Status", "code": 410}}) is None
    assert record_of({"type": "MODIFIED", "object": "garbage"}) is None


def test_a_client_that_cannot_stream_gets_no_watcher() -> None:
    config = LeaderElectionConfig(name=NAME, namespace=NS, identity="b")
    assert lease_watcher(InMemoryLeaseClient(), config, FakeClock()) is None
    assert isinstance(lease_watcher(StreamingLeaseClient(), config, FakeClock()), LeaseWatcher)


def test_kube_lease_client_watches_the_one_lease() -> None:
    class Rest:
        def __init__(self) -> None:
            self.calls: list[tuple[str, list[tuple[str, str]], float]] = []

        def stream_lines(self, path: str, query: list[tuple[str, str]],
                         read_timeout: float) -> tuple[Iterator[bytes], Callable[[], None]]:
            self.calls.append((path, query, read_timeout))
            lines = [b'{"type":"ADDED","object":{"kind":"Lease","spec":{"holderIdentity":"a"}}}']
            return iter(lines), lambda: None

    rest = Rest()
    client = KubeLeaseClient(rest, timeout=5.0)  # type: ignore[arg-type]
    events, _ = client.stream(NS, NAME, timeout_seconds=300)
    assert [record_of(ev) for ev in events] == [LeaderElectionRecord("a", 0)]
    assert rest.calls == [(f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases",
                           [("watch", "1"), ("fieldSelector", f"metadata.name={NAME}"),
                            ("timeoutSeconds", "300")], 305.0)]
